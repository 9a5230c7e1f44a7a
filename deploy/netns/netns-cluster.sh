#!/usr/bin/env bash
# The cluster of deploy/config/ (servers s1-s3 on 10.77.0.11-13, clients c1 c2
# on 10.77.0.21-22, the config files' own addresses and ports) on one machine,
# each "host" in its own Linux network namespace. Needs root.
#
#   deploy/netns/netns-cluster.sh up     [--dir DIR] [--prefix P]
#   deploy/netns/netns-cluster.sh status [--dir DIR]
#   deploy/netns/netns-cluster.sh down   [--dir DIR]
#
# Network: namespaces Ps1 Ps2 Ps3 Pc1 Pc2 (P = --prefix, default "berth-"),
# each with an eth0 (a veth) whose peer is a port of bridge br0 in namespace
# Pbr. Every link, bridge and 10.77.0.0/24 address exists only inside those
# namespaces: the root namespace gets nothing, so two runs with different
# prefixes do not collide. To talk to the cluster, enter a namespace:
#   ip netns exec berth-c1 berth --address 10.77.0.11:4747 status
#
# Processes: servers run with `ip netns exec`. Clients and their berth-hostpath
# run with `nsenter --net=/run/netns/NAME`: `ip netns exec` also gives each
# command a private mount namespace, and the plugin's bind mounts would then be
# invisible to the client and to everything else; nsenter --net only changes
# the network, like a real host whose mounts are the host's.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CONFIG_DIR="$REPO/deploy/config"
HOSTS=(s1 s2 s3 c1 c2)
WAIT_SECONDS="${NETNS_CLUSTER_WAIT:-60}"

usage() {
  cat <<EOF
usage: $(basename "$0") up|down|status [--dir DIR] [--prefix P]

  up       create the namespaces and the bridge, start 3 servers, 2 clients and a
           berth-hostpath per client; wait for a leader and healthy plugins
  status   processes, namespaces and berth operator raft list-peers
  down     stop everything, unmount what is mounted under DIR, delete the
           namespaces (idempotent)

  --dir DIR      data, logs, pids (default ./.netns-cluster)
  --prefix P     namespace name prefix (default berth-; 'up' only, remembered in DIR)

environment: BERTHD, BERTH, BERTH_HOSTPATH (binaries; default ./build/apps/... or PATH)
EOF
}

die() {
  echo "netns-cluster: $*" >&2
  exit 1
}

find_bin() {  # find_bin ENVVALUE BUILDPATH NAME ENVNAME
  local from_env="$1" built="$REPO/build/apps/$2" name="$3"
  if [ -n "$from_env" ]; then
    [ -x "$from_env" ] || die "$from_env is not an executable ($name)"
    echo "$from_env"
  elif [ -x "$built" ]; then
    echo "$built"
  elif command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
  else
    die "cannot find $name: build it (cmake --build build) or set $4"
  fi
}

[ $# -ge 1 ] || { usage >&2; exit 2; }
CMD="$1"
shift
DIR="./.netns-cluster"
PREFIX=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || die "--dir needs a directory"; DIR="$2"; shift 2 ;;
    --dir=*) DIR="${1#--dir=}"; shift ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; PREFIX="$2"; shift 2 ;;
    --prefix=*) PREFIX="${1#--prefix=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "netns-cluster: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$CMD" in
  up|down|status) ;;
  -h|--help|help) usage; exit 0 ;;
  *) echo "netns-cluster: unknown command '$CMD'" >&2; usage >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, bind mounts)"
if [ -n "$PREFIX" ]; then
  [[ "$PREFIX" =~ ^[A-Za-z0-9_-]{1,8}$ ]] || die "--prefix: 1-8 letters, digits, - or _"
fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
if [ -z "$PREFIX" ] && [ -f "$DIR/prefix" ]; then PREFIX="$(cat "$DIR/prefix")"; fi
PREFIX="${PREFIX:-berth-}"
BRNS="${PREFIX}br"

addr_of() {
  case "$1" in
    s1) echo 10.77.0.11 ;; s2) echo 10.77.0.12 ;; s3) echo 10.77.0.13 ;;
    c1) echo 10.77.0.21 ;; c2) echo 10.77.0.22 ;;
  esac
}

# --- processes -------------------------------------------------------------------

PROCESSES=(c1 c2 hostpath-c1 hostpath-c2 s1 s2 s3)

pid_of() {
  local f="$DIR/$1.pid" pid
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR/" || return 1
  echo "$pid"
}

start() {  # start NAME COMMAND...
  local name="$1"
  shift
  echo "== $(date -Is) $*" >>"$DIR/$name.log"
  setsid "$@" >>"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

# `timeout`: berth's --timeout does not bound a connection to a port where
# something other than berthd listens; never let a wait loop hang on that.
in_ns() { timeout 10 ip netns exec "${PREFIX}$1" "${@:2}"; }

list_peers() {  # through the first server that answers, from namespace c1
  local i
  for i in 1 2 3; do
    if in_ns c1 "$BERTH" --address "$(addr_of "s$i"):4747" --timeout 3 "$@" operator raft list-peers 2>/dev/null; then
      return 0
    fi
  done
  return 1
}

mounts_under() {
  awk -v d="$DIR/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts |
    while IFS= read -r m; do printf '%b\n' "$m"; done | awk '{ print length, $0 }' |
    sort -rn | cut -d' ' -f2-
}

our_namespaces() {
  local h
  for h in "${HOSTS[@]}" br; do
    if ip netns list | awk '{ print $1 }' | grep -qx -- "${PREFIX}$h"; then echo "${PREFIX}$h"; fi
  done
}

do_down() {
  local p pid stopped=0 deadline
  for p in "${PROCESSES[@]}"; do
    if pid="$(pid_of "$p")"; then
      kill -TERM "$pid" 2>/dev/null || true
      stopped=$((stopped + 1))
    fi
  done
  deadline=$((SECONDS + 15))
  for p in "${PROCESSES[@]}"; do
    while pid="$(pid_of "$p")"; do
      if [ $SECONDS -ge $deadline ]; then
        echo "netns-cluster: $p (pid $pid) ignored SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
      else
        sleep 0.1
      fi
    done
    rm -f "$DIR/$p.pid"
  done
  local m unmounted=0 ns deleted=0
  while IFS= read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m" || echo "netns-cluster: cannot unmount $m" >&2
    unmounted=$((unmounted + 1))
  done < <(mounts_under)
  # Deleting a namespace deletes the veth ends in it, and so their peers.
  while IFS= read -r ns; do
    [ -n "$ns" ] || continue
    ip netns delete "$ns" || echo "netns-cluster: cannot delete namespace $ns" >&2
    deleted=$((deleted + 1))
  done < <(our_namespaces)
  echo "netns-cluster: stopped $stopped processes, unmounted $unmounted mounts, deleted $deleted namespaces"
  [ -z "$(our_namespaces)" ] || die "namespaces left: $(our_namespaces | tr '\n' ' ')"
  [ -z "$(mounts_under)" ] || die "still mounted under $DIR: $(mounts_under | tr '\n' ' ')"
}

do_status() {
  local p pid rc=0
  printf '%-12s %-8s %-8s %s\n' NAME PID STATE LOG
  for p in "${PROCESSES[@]}"; do
    if pid="$(pid_of "$p")"; then
      printf '%-12s %-8s %-8s %s\n' "$p" "$pid" running "$DIR/$p.log"
    else
      printf '%-12s %-8s %-8s %s\n' "$p" - stopped "$DIR/$p.log"
      rc=1
    fi
  done
  echo
  echo "namespaces: $(our_namespaces | tr '\n' ' ')"
  echo
  if [ -z "$(our_namespaces)" ] || ! list_peers; then
    echo "netns-cluster: no server answers (is the cluster up? $0 up --dir $DIR)"
    rc=1
  fi
  return $rc
}

wait_for() {
  local what="$1" deadline=$((SECONDS + WAIT_SECONDS))
  shift
  until "$@"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "netns-cluster: timed out after ${WAIT_SECONDS}s waiting for $what" >&2
      return 1
    fi
    sleep 0.2
  done
}

has_leader() { list_peers --json 2>/dev/null | grep -q '"role": *"leader"'; }
plugins_healthy() {
  in_ns c1 "$BERTH" --address 10.77.0.11:4747 --json --timeout 3 plugin status hostpath 2>/dev/null |
    grep -q '"nodes_healthy": *2\b'
}
sockets_exist() { [ -S "$DIR/c1/plugin/csi.sock" ] && [ -S "$DIR/c2/plugin/csi.sock" ]; }
all_alive() {
  local p
  for p in "${PROCESSES[@]}"; do
    pid_of "$p" >/dev/null || { echo "netns-cluster: $p exited; its log:" >&2; tail -n 20 "$DIR/$p.log" >&2; return 1; }
  done
}

make_network() {
  ip netns add "$BRNS"
  ip -n "$BRNS" link set lo up
  ip -n "$BRNS" link add br0 type bridge
  ip -n "$BRNS" link set br0 up
  local h
  for h in "${HOSTS[@]}"; do
    ip netns add "${PREFIX}$h"
    ip -n "${PREFIX}$h" link set lo up
    # Both ends are created directly in their namespaces.
    ip link add eth0 netns "${PREFIX}$h" type veth peer name "v-$h" netns "$BRNS"
    ip -n "$BRNS" link set "v-$h" master br0
    ip -n "$BRNS" link set "v-$h" up
    ip -n "${PREFIX}$h" addr add "$(addr_of "$h")/24" dev eth0
    ip -n "${PREFIX}$h" link set eth0 up
  done
}

do_up() {
  BERTHD="$(find_bin "${BERTHD:-}" berthd/berthd berthd BERTHD)"
  BERTH_HOSTPATH="$(find_bin "${BERTH_HOSTPATH:-}" berth-hostpath/berth-hostpath berth-hostpath BERTH_HOSTPATH)"
  command -v nsenter >/dev/null || die "needs nsenter (util-linux)"
  if [ -n "$(our_namespaces)" ]; then
    echo "netns-cluster: namespaces ${PREFIX}* exist already (use 'status', or 'down' first)"
    do_status || true
    return 0
  fi
  echo "$PREFIX" >"$DIR/prefix"
  trap 'echo "netns-cluster: up failed; cleaning up (logs stay in $DIR)" >&2; do_down >&2 || true' ERR
  make_network

  mkdir -p "$DIR/hostpath-root"
  local i
  for i in 1 2; do
    mkdir -p "$DIR/c$i/plugin"
    start "hostpath-c$i" nsenter --net="/run/netns/${PREFIX}c$i" -- "$BERTH_HOSTPATH" \
      --endpoint "unix://$DIR/c$i/plugin/csi.sock" --root "$DIR/hostpath-root" --shared-root \
      --node-id "csi-c$i" --call-log "$DIR/c$i/plugin/calls.log"
  done
  wait_for "the berth-hostpath sockets" sockets_exist
  # The config files as they are; only where the data lives changes.
  for i in 1 2 3; do
    start "s$i" ip netns exec "${PREFIX}s$i" "$BERTHD" --config "$CONFIG_DIR/server$i.toml" \
      --data-dir "$DIR/s$i"
  done
  for i in 1 2; do
    start "c$i" nsenter --net="/run/netns/${PREFIX}c$i" -- "$BERTHD" \
      --config "$CONFIG_DIR/client$i.toml" --data-dir "$DIR/c$i/data" \
      --csi-root "$DIR/c$i/data/csi" --plugin "hostpath=monolith:$DIR/c$i/plugin/csi.sock" \
      --fingerprint-interval 1
  done
  wait_for "a leader" has_leader
  all_alive
  wait_for "both clients' hostpath plugins to be healthy" plugins_healthy
  all_alive
  trap - ERR
  cat <<EOF
netns-cluster: up in $DIR (namespaces ${PREFIX}s1 ${PREFIX}s2 ${PREFIX}s3 ${PREFIX}c1 ${PREFIX}c2, bridge in ${PREFIX}br)
  servers 10.77.0.11-13:4747, clients 10.77.0.21-22, metrics on :4746 of each
  ip netns exec ${PREFIX}c1 $BERTH --address 10.77.0.11:4747 operator raft list-peers
Stop it:  $0 down --dir $DIR
EOF
}

case "$CMD" in
  up)
    BERTH="$(find_bin "${BERTH:-}" berth/berth berth BERTH)"
    do_up
    ;;
  status)
    BERTH="$(find_bin "${BERTH:-}" berth/berth berth BERTH)"
    do_status
    ;;
  down)
    do_down
    ;;
esac
