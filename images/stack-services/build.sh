#!/usr/bin/env bash
# Builds `agentbox/stack-services`, the image of the two supporting services of the Swarm stack
# (compose.swarm.yaml) from Debian packages alone, with no container registry:
#
# - `agentbox-postgres`: PostgreSQL 15, the database every orchestrator replica shares. The
#   first start makes the cluster (`initdb`, a superuser and a database, both named by the
#   environment, password authentication over the network), later starts reuse it.
# - `agentbox-front`: HAProxy in front of the orchestrator replicas: one address, every
#   replica found through the Swarm's DNS (`tasks.orchestrator`), health-checked on
#   `/healthz` each second, a request whose connection fails sent to another replica.
#
#   images/stack-services/build.sh     -> prints the image reference it built or found
#
# One rootfs (`debootstrap --variant=minbase bookworm` plus postgresql-15 and haproxy) for
# both, imported with `docker import` and tagged by a hash of this script (a re-run finds it
# at once) and `agentbox/stack-services:latest`. A cluster with a managed Postgres and a load
# balancer of its own needs neither (README, "Agentbox on a Docker Swarm").
set -euo pipefail

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
hash=$(sha256sum "$0" | cut -c1-16)
image="agentbox/stack-services:$hash"
log() { printf '[build-stack-services] %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  docker tag "$image" agentbox/stack-services:latest
  log "image $image is up to date"
  echo "$image"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "error: building the image from Debian packages needs root (debootstrap)"
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2

start=$(date +%s)
work=$(mktemp -d /var/tmp/agentbox-stack-services.XXXXXX)
trap 'rm -rf "$work"' EXIT
packages=ca-certificates,postgresql-15,haproxy,tini
log "debootstrap bookworm (minbase + $packages)"
debootstrap --variant=minbase --include="$packages" bookworm "$work/rootfs" "$mirror" >&2
root=$work/rootfs
# The package's own cluster (made by its postinst) goes: the entry point makes one on the
# service's volume at the first start.
rm -rf "$root"/var/lib/postgresql/15/main "$root"/etc/postgresql/15/main
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb \
  "$root"/var/log/apt/* "$root"/var/log/dpkg.log
: >"$root/etc/resolv.conf"

cat >"$root/usr/local/bin/agentbox-postgres" <<'PG'
#!/bin/sh
# PostgreSQL in the foreground as user postgres. Settings: POSTGRES_USER (agentbox),
# POSTGRES_DB (agentbox), POSTGRES_PASSWORD_FILE or POSTGRES_PASSWORD (needed at the first
# start), PGDATA (/var/lib/postgresql/data/pgdata, inside the volume),
# POSTGRES_MAX_CONNECTIONS (300: each orchestrator replica holds up to 17).
#
# The first start makes the cluster in "$PGDATA.new" (initdb, network password
# authentication, the database) and renames it into place as its last step: a start
# interrupted half way leaves no cluster that later starts would take as made.
set -eu
bin=/usr/lib/postgresql/15/bin
data=${PGDATA:-/var/lib/postgresql/data/pgdata}
user=${POSTGRES_USER:-agentbox}
db=${POSTGRES_DB:-agentbox}
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
install -d -o postgres -g postgres -m 0700 "$(dirname "$data")"
install -d -o postgres -g postgres -m 2775 /run/postgresql
if [ ! -s "$data/PG_VERSION" ]; then
  if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    password=$(cat "$POSTGRES_PASSWORD_FILE")
  else
    password=${POSTGRES_PASSWORD:-}
  fi
  if [ -z "$password" ]; then
    echo "agentbox-postgres: set POSTGRES_PASSWORD_FILE or POSTGRES_PASSWORD for the first start" >&2
    exit 1
  fi
  new="$data.new"
  rm -rf "$new"
  pwfile=$(mktemp)
  trap 'rm -f "$pwfile"' EXIT
  printf '%s\n' "$password" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres "$bin/initdb" -D "$new" -U "$user" --pwfile="$pwfile" -E UTF8 \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$new/pg_hba.conf"
  echo "CREATE DATABASE \"$db\" OWNER \"$user\";" |
    as_postgres "$bin/postgres" --single -D "$new" -j -c exit_on_error=true postgres >/dev/null
  mv "$new" "$data"
  echo "agentbox-postgres: made the cluster in $data (user $user, database $db)" >&2
fi
unset POSTGRES_PASSWORD
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$data" \
  -c listen_addresses='*' -c max_connections="${POSTGRES_MAX_CONNECTIONS:-300}" "$@"
PG

cat >"$root/usr/local/bin/agentbox-front" <<'FRONT'
#!/bin/sh
# HAProxy in front of the orchestrator replicas. Settings: FRONT_BACKENDS (the Swarm DNS name
# of every replica: tasks.orchestrator), FRONT_PORT (8090, where it listens and where the
# replicas listen), FRONT_MAX_REPLICAS (16).
set -eu
backends=${FRONT_BACKENDS:-tasks.orchestrator}
port=${FRONT_PORT:-8090}
slots=${FRONT_MAX_REPLICAS:-16}
config=/run/agentbox-front.cfg
cat >"$config" <<CFG
global
    log stderr format short local0 notice
    user haproxy
    group haproxy
resolvers swarm
    nameserver dns 127.0.0.11:53
    hold valid 1s
    hold obsolete 1s
defaults
    mode http
    log global
    option dontlognull
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout http-request 30s
    retries 2
    option redispatch 1
frontend api
    bind :$port
    option forwardfor
    default_backend orchestrators
backend orchestrators
    balance leastconn
    option httpchk GET /healthz
    http-check expect status 200
    default-server check inter 1s fall 2 rise 1 resolvers swarm init-addr none
    server-template replica $slots $backends:$port
CFG
exec haproxy -W -db -f "$config" "$@"
FRONT
chmod 0755 "$root/usr/local/bin/agentbox-postgres" "$root/usr/local/bin/agentbox-front"

log "importing rootfs as $image"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' - "$image" >/dev/null
docker tag "$image" agentbox/stack-services:latest
log "image built in $(( $(date +%s) - start )) s"
echo "$image"
