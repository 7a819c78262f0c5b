#!/usr/bin/env bash
# Fetches xterm.js for sandboxd's terminal page (/terminal) and prints the directory holding
# xterm.js, xterm.css and xterm-addon-fit.js.
#
# Debian's libjs-xterm (3.8.1) ships an unbundled CommonJS stub that a browser cannot load, and
# no registry but PyPI is reachable here, so the files come from the `webssh` sdist on PyPI,
# which carries xterm.js 4's browser bundles (MIT). The archive is pinned by its SHA-256 and
# cached outside the clone.
set -euo pipefail

version=1.6.3
sha256=2bce5bbaf206ad345910c7e4dc8024b3c418e681c9f5ff098f1802beff76e100
cache="${AGENTBOX_CACHE:-$HOME/.cache/agentbox}/xterm-webssh-$version"
log() { printf '[xterm] %s\n' "$*" >&2; }

if [ ! -f "$cache/xterm.js" ] || [ ! -f "$cache/xterm.css" ] || [ ! -f "$cache/xterm-addon-fit.js" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "downloading webssh $version from PyPI for its xterm.js files"
  python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
    -d "$work" "webssh==$version" >&2 2>/dev/null ||
    python3 -m pip download -q --no-deps --no-binary :all: -d "$work" "webssh==$version" >&2
  archive="$work/webssh-$version.tar.gz"
  echo "$sha256  $archive" | sha256sum -c --quiet - >&2
  tar -xzf "$archive" -C "$work"
  static="$work/webssh-$version/webssh/static"
  mkdir -p "$cache.partial"
  cp "$static/js/xterm.min.js" "$cache.partial/xterm.js"
  cp "$static/css/xterm.min.css" "$cache.partial/xterm.css"
  cp "$static/js/xterm-addon-fit.min.js" "$cache.partial/xterm-addon-fit.js"
  rm -rf "$cache"
  mv "$cache.partial" "$cache"
fi
echo "$cache"
