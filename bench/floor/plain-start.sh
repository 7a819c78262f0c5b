#!/bin/sh
# The floor of the startup benchmark: the sandbox image's programs launched by a plain shell
# script, with no supervision, no readiness checks beyond the X socket, and no API. It waits for
# CDP to answer, as a hand-written entrypoint would, then waits for its children. It starts what
# sandboxd starts before it reports ready (x11vnc starts on the first viewer in both, and noVNC is
# served by sandboxd itself). Unlike the product, socat listens on every address here: the floor
# has no API, and the benchmark polls CDP from the host.
set -u
W=${SCREEN_WIDTH:-1280}
H=${SCREEN_HEIGHT:-800}
export DISPLAY=:1
Xvfb :1 -screen 0 "${W}x${H}x24" -nolisten tcp -dpi 96 +extension RANDR &
while [ ! -S /tmp/.X11-unix/X1 ]; do sleep 0.005; done
openbox &
CDP_PORT=9229 /usr/local/lib/agentbox/start-chromium &
socat TCP-LISTEN:9222,fork,reuseaddr,bind=0.0.0.0 TCP:127.0.0.1:9229 &
until curl -sf -o /dev/null http://127.0.0.1:9229/json/version; do sleep 0.01; done
echo "floor: CDP answers"
wait
