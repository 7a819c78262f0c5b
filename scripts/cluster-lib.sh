# The local Docker Swarm of scripts/cluster-up.sh and the cluster tests: nodes are containers of
# `agentbox/swarm-node`, each running its own engine. Source it after lib.sh; do not run it.
#
# Why the node containers are started the way they are (measured on Docker 20.10 with cgroup v1,
# ../shared/notes/swarm-in-docker.md): `--privileged` is refused on these machines, so the
# capabilities an engine needs are listed one by one; the engine's containers need the
# hierarchy of cgroups (bound read-write, each node's under a parent of its own name) and a
# real file system for overlay2 (a volume).

CLUSTER_NODES=${AGENTBOX_CLUSTER_NODES:-3}
CLUSTER_PREFIX=${AGENTBOX_CLUSTER_PREFIX:-agentbox-node}
CLUSTER_NETWORK=${AGENTBOX_CLUSTER_NETWORK:-$CLUSTER_PREFIX-net}
CLUSTER_SUBNET=${AGENTBOX_CLUSTER_SUBNET:-10.213.0.0/24}
CLUSTER_ENCRYPT=${AGENTBOX_CLUSTER_ENCRYPT:-false}
CLUSTER_MANAGERS=${AGENTBOX_CLUSTER_MANAGERS:-1}
CLUSTER_CAPS="SYS_ADMIN NET_ADMIN SYS_PTRACE SYS_TIME SYS_BOOT SYS_RAWIO IPC_LOCK IPC_OWNER LEASE
  LINUX_IMMUTABLE MAC_ADMIN MAC_OVERRIDE SYS_NICE SYS_PACCT SYSLOG WAKE_ALARM BLOCK_SUSPEND
  AUDIT_CONTROL AUDIT_READ DAC_READ_SEARCH NET_BROADCAST SYS_TTY_CONFIG"

cluster_node_names() {
  local n
  for n in $(seq 1 "$CLUSTER_NODES"); do echo "$CLUSTER_PREFIX$n"; done
}

cluster_state_dir() {
  local dir
  dir="$(cache_dir)/cluster-$CLUSTER_PREFIX"
  mkdir -p "$dir" && chmod 700 "$dir"
  echo "$dir"
}

cluster_node_ip() { # node
  docker inspect -f "{{(index .NetworkSettings.Networks \"$CLUSTER_NETWORK\").IPAddress}}" "$1"
}

cluster_url() { echo "http://$(cluster_node_ip "${CLUSTER_PREFIX}1"):8090"; }

cluster_start_nodes() {
  local caps=() cap node
  for cap in $CLUSTER_CAPS; do caps+=(--cap-add "$cap"); done
  docker network inspect "$CLUSTER_NETWORK" >/dev/null 2>&1 ||
    docker network create --subnet "$CLUSTER_SUBNET" --label "agentbox.cluster=$CLUSTER_PREFIX" \
      "$CLUSTER_NETWORK" >/dev/null
  for node in $(cluster_node_names); do
    if docker inspect "$node" >/dev/null 2>&1; then
      docker start "$node" >/dev/null
      continue
    fi
    log "starting node $node"
    docker run -d --name "$node" --hostname "$node" --network "$CLUSTER_NETWORK" \
      --label "agentbox.cluster=$CLUSTER_PREFIX" "${caps[@]}" \
      --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
      --security-opt systempaths=unconfined --device-cgroup-rule 'a *:* rwm' \
      -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v "$node-docker:/var/lib/docker" \
      -e "NODE_NAME=$node" agentbox/swarm-node:latest >/dev/null
  done
  for node in $(cluster_node_names); do
    for _ in $(seq 1 120); do
      docker exec "$node" docker info >/dev/null 2>&1 && break
      sleep 0.5
    done
    docker exec "$node" docker info >/dev/null 2>&1 || {
      docker logs --tail 20 "$node" >&2
      die "the engine of node $node did not start"
    }
  done
}

# Node 1 initialises the Swarm; the next AGENTBOX_CLUSTER_MANAGERS - 1 join as managers, the
# rest as workers. One manager by default: losing or cutting off a worker then never touches
# the managers' Raft. With three (AGENTBOX_CLUSTER_MANAGERS=3) the managers keep a quorum when
# one is lost, but a lost or returning leader stalls every manager call for an election (about
# ten seconds, answered "context deadline exceeded").
cluster_form_swarm() {
  local first="${CLUSTER_PREFIX}1" ip token node n=0 role
  ip=$(cluster_node_ip "$first")
  if [ "$(docker exec "$first" docker info -f '{{.Swarm.LocalNodeState}}')" != active ]; then
    log "forming the Swarm on $first ($ip)"
    docker exec "$first" docker swarm init --advertise-addr "$ip" >/dev/null
  fi
  for node in $(cluster_node_names); do
    n=$((n + 1))
    if [ "$(docker exec "$node" docker info -f '{{.Swarm.LocalNodeState}}')" != active ]; then
      role=worker
      [ "$n" -le "$CLUSTER_MANAGERS" ] && role=manager
      token=$(docker exec "$first" docker swarm join-token -q "$role")
      docker exec "$node" docker swarm join --advertise-addr "$(cluster_node_ip "$node")" \
        --token "$token" "$ip:2377" >/dev/null
    fi
    docker exec "$first" docker node update --label-add "agentbox.zone=$n" "$node" >/dev/null
  done
  docker exec "$first" docker node update --label-add agentbox.data=true "$first" >/dev/null
  if ! docker exec "$first" docker network inspect agentbox-sandboxes >/dev/null 2>&1; then
    local encrypt=()
    [ "$CLUSTER_ENCRYPT" = true ] && encrypt=(--opt encrypted)
    docker exec "$first" docker network create -d overlay --internal --attachable "${encrypt[@]}" \
      --label agentbox.managed=true agentbox-sandboxes >/dev/null
  fi
}

# Loads images into every node's engine, skipping nodes that have the same image id. Each image
# is saved once (a 1.8 GB `docker save` of the sandbox image reads every layer back through the
# host's storage driver) and that one archive is loaded into the nodes side by side.
cluster_load_images() { # image...
  cluster_load_images_into "$(cluster_node_names)" "$@"
}

# Loads images into the nodes named (one per line), as cluster_load_images.
cluster_load_images_into() { # nodes image...
  local nodes=$1 image id node archive pids=() dir
  shift
  dir=$(mktemp -d "${TMPDIR:-/tmp}/agentbox-cluster-images.XXXXXX")
  # shellcheck disable=SC2064 # the directory is known now
  trap "rm -rf '$dir'" RETURN
  for image in "$@"; do
    id=$(docker image inspect -f '{{.Id}}' "$image")
    archive="$dir/$(echo "$image" | tr '/:' '__').tar"
    for node in $nodes; do
      if [ "$(docker exec "$node" docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" = "$id" ]; then
        continue
      fi
      if [ ! -e "$archive" ]; then
        log "saving $image"
        docker save -o "$archive" "$image" || die "saving $image failed"
      fi
      log "loading $image into $node"
      (docker exec -i "$node" docker load -q <"$archive" >/dev/null) &
      pids+=($!)
    done
  done
  for pid in "${pids[@]}"; do wait "$pid" || die "loading an image into a node failed"; done
}

# Deploys compose.swarm.yaml on node 1: the admin key is made once and kept in the state
# directory; the master key and Postgres's password once, as Swarm secrets (the password twice:
# as Postgres reads it and as the replicas' pgpass file). Waits until every orchestrator
# replica runs and the front answers.
cluster_deploy() {
  local first="${CLUSTER_PREFIX}1" state key url password replicas=${AGENTBOX_REPLICAS:-2}
  state=$(cluster_state_dir)
  if [ ! -s "$state/admin-key" ]; then
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/admin-key")
  fi
  if ! docker exec "$first" docker secret inspect agentbox-master-key >/dev/null 2>&1; then
    head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' |
      docker exec -i "$first" docker secret create agentbox-master-key - >/dev/null
  fi
  if ! docker exec "$first" docker secret inspect agentbox-pgpass >/dev/null 2>&1; then
    password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    docker exec "$first" docker secret rm agentbox-postgres-password >/dev/null 2>&1 || true
    printf '%s' "$password" |
      docker exec -i "$first" docker secret create agentbox-postgres-password - >/dev/null
    printf '*:*:*:agentbox:%s\n' "$password" |
      docker exec -i "$first" docker secret create agentbox-pgpass - >/dev/null
  fi
  key=$(cat "$state/admin-key")
  url=$(cluster_url)
  docker exec -i -e "AGENTBOX_ADMIN_KEY=$key" -e "AGENTBOX_PUBLIC_URL=$url" \
    -e "AGENTBOX_REPLICAS=$replicas" \
    -e "AGENTBOX_POOL_SIZE=${AGENTBOX_POOL_SIZE:-0}" \
    -e "AGENTBOX_SANDBOX_MEMORY_MIB=${AGENTBOX_SANDBOX_MEMORY_MIB:-1024}" \
    -e "AGENTBOX_SANDBOX_CPUS=${AGENTBOX_SANDBOX_CPUS:-1}" \
    -e "AGENTBOX_HEARTBEAT_SECS=${AGENTBOX_HEARTBEAT_SECS:-10}" \
    -e "AGENTBOX_PUBLISH_MODE=${AGENTBOX_PUBLISH_MODE:-host}" \
    -e "AGENTBOX_SWEEP_INTERVAL_SECS=${AGENTBOX_SWEEP_INTERVAL_SECS:-60}" \
    "$first" sh -c 'cat >/tmp/compose.swarm.yaml && docker stack deploy --resolve-image never -c /tmp/compose.swarm.yaml agentbox' \
    <"$root/compose.swarm.yaml" >/dev/null
  log "waiting for $replicas orchestrator replicas behind $url"
  for _ in $(seq 1 360); do
    if [ "$(docker exec "$first" docker service ls --filter name=agentbox_orchestrator \
      --format '{{.Replicas}}' 2>/dev/null)" = "$replicas/$replicas" ] &&
      curl -fsS -o /dev/null "$url/healthz" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  docker exec "$first" docker service ps --no-trunc agentbox_orchestrator >&2 || true
  docker exec "$first" docker service logs --tail 30 agentbox_orchestrator >&2 || true
  docker exec "$first" docker service logs --tail 30 agentbox_postgres >&2 || true
  die "the orchestrator did not answer at $url"
}

cluster_remove() {
  local node
  for node in $(docker ps -aq --filter "label=agentbox.cluster=$CLUSTER_PREFIX"); do
    docker rm -f -v "$node" >/dev/null
  done
  for node in $(cluster_node_names); do
    docker volume rm -f "$node-docker" >/dev/null 2>&1 || true
  done
  docker network rm "$CLUSTER_NETWORK" >/dev/null 2>&1 || true
  rm -rf "$(cache_dir)/cluster-$CLUSTER_PREFIX"
}
