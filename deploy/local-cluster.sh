#!/usr/bin/env bash
# A 3-server, 2-client berth cluster on 127.0.0.1, every process in the
# background, all its data, logs and pids under one directory.
#
#   deploy/local-cluster.sh up     [--dir DIR] [--base-port N] [--tls]
#   deploy/local-cluster.sh status [--dir DIR]
#   deploy/local-cluster.sh down   [--dir DIR]
#
# Servers s1 s2 s3 and clients c1 c2 start from deploy/config/*.toml (so the
# example files are exercised) with addresses, ports and directories
# overridden on the command line. Each client has its own berth-hostpath
# (own socket, own CSI node id); both plugins share one root, DIR/hostpath-root
# (--shared-root), standing in for network storage, so a volume can be
# claimed on either client.
#
# --tls: every connection is mutual TLS. `berth tls` makes a CA and a server,
# a client and a cli certificate in DIR/tls (kept: a later 'up' reuses them);
# servers and clients start with --tls-ca/--tls-cert/--tls-key, and DIR/env
# exports BERTH_CACERT, BERTH_CLIENT_CERT and BERTH_CLIENT_KEY for the shell.
# Remembered in DIR (status and down need only --dir).
#
# Ports, from the base port B (default 14740):
#   s1: shell B,   raft B+1, metrics B+2
#   s2: shell B+3, raft B+4, metrics B+5
#   s3: shell B+6, raft B+7, metrics B+8
#   c1: metrics B+9          c2: metrics B+10
#
# Binaries: $BERTHD, $BERTH, $BERTH_HOSTPATH, else ./build/apps/... of this
# repository, else PATH.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG_DIR="$REPO/deploy/config"
WAIT_SECONDS="${LOCAL_CLUSTER_WAIT:-60}"

usage() {
  cat <<EOF
usage: $(basename "$0") up|down|status [--dir DIR] [--base-port N] [--tls]

  up       start 3 servers, 2 clients and a berth-hostpath per client; wait until a
           leader exists and both clients' plugins are healthy
  status   the processes, and berth operator raft list-peers
  down     stop every process and unmount whatever is mounted under DIR (idempotent;
           the data stays, so a later 'up' brings the same cluster back)

  --dir DIR        where data, logs and pids live (default ./.local-cluster)
  --base-port N    first of the 11 ports used (default 14740; 'up' only, remembered in DIR)
  --tls            mutual TLS everywhere, certificates made with berth tls in DIR/tls ('up'
                   only, remembered in DIR)

environment: BERTHD, BERTH, BERTH_HOSTPATH (binaries; default ./build/apps/... or PATH)
EOF
}

die() {
  echo "local-cluster: $*" >&2
  exit 1
}

find_bin() {  # find_bin ENVVALUE BUILDPATH NAME
  local from_env="$1" built="$REPO/build/apps/$2" name="$3"
  if [ -n "$from_env" ]; then
    [ -x "$from_env" ] || die "$from_env is not an executable ($name)"
    echo "$from_env"
  elif [ -x "$built" ]; then
    echo "$built"
  elif command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
  else
    die "cannot find $name: build it (cmake --build build) or set ${4}"
  fi
}

# --- arguments ---------------------------------------------------------------

[ $# -ge 1 ] || { usage >&2; exit 2; }
CMD="$1"
shift
DIR="./.local-cluster"
BASE_PORT=""
TLS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || die "--dir needs a directory"; DIR="$2"; shift 2 ;;
    --dir=*) DIR="${1#--dir=}"; shift ;;
    --base-port) [ $# -ge 2 ] || die "--base-port needs a port"; BASE_PORT="$2"; shift 2 ;;
    --base-port=*) BASE_PORT="${1#--base-port=}"; shift ;;
    --tls) TLS=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "local-cluster: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$CMD" in
  up|down|status) ;;
  -h|--help|help) usage; exit 0 ;;
  *) echo "local-cluster: unknown command '$CMD'" >&2; usage >&2; exit 2 ;;
esac
if [ -n "$BASE_PORT" ]; then
  if ! [[ "$BASE_PORT" =~ ^[0-9]+$ ]] || [ "$BASE_PORT" -lt 1024 ] || [ "$BASE_PORT" -gt 65525 ]; then
    die "--base-port must be a number between 1024 and 65525"
  fi
fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

# The base port is remembered so that status and down need only --dir.
if [ -z "$BASE_PORT" ] && [ -f "$DIR/base-port" ]; then BASE_PORT="$(cat "$DIR/base-port")"; fi
BASE_PORT="${BASE_PORT:-14740}"
# 'up' without --tls of a cluster made with it (its data expects it) keeps TLS.
if [ "$CMD" = up ] && [ -z "$TLS" ] && [ -f "$DIR/tls-enabled" ] && [ -d "$DIR/s1" ]; then TLS=1; fi
if [ "$CMD" != up ] && [ -f "$DIR/tls-enabled" ]; then TLS=1; fi
TLS_DIR="$DIR/tls"
# The shell's certificate, for every berth command of this script.
if [ -n "$TLS" ]; then
  export BERTH_CACERT="$TLS_DIR/berth-agent-ca.pem"
  export BERTH_CLIENT_CERT="$TLS_DIR/global-cli-berth.pem"
  export BERTH_CLIENT_KEY="$TLS_DIR/global-cli-berth-key.pem"
fi

shell_port() { echo $((BASE_PORT + 3 * ($1 - 1))); }
raft_port() { echo $((BASE_PORT + 3 * ($1 - 1) + 1)); }
server_metrics_port() { echo $((BASE_PORT + 3 * ($1 - 1) + 2)); }
client_metrics_port() { echo $((BASE_PORT + 8 + $1)); }
ADDRESS="127.0.0.1:$(shell_port 1)"
ALL_SERVERS="127.0.0.1:$(shell_port 1),127.0.0.1:$(shell_port 2),127.0.0.1:$(shell_port 3)"

# --- processes -----------------------------------------------------------------

# Every process: DIR/NAME.pid, DIR/NAME.log. Stop order: clients, plugins, servers.
PROCESSES=(c1 c2 hostpath-c1 hostpath-c2 s1 s2 s3)

pid_of() {  # prints the pid if NAME runs (and is ours: its command line names DIR)
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
  # setsid: a Ctrl-C in the terminal that ran 'up' does not reach the cluster.
  setsid "$@" >>"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

any_running() {
  local p
  for p in "${PROCESSES[@]}"; do
    if pid_of "$p" >/dev/null; then return 0; fi
  done
  return 1
}

# `timeout`: berth's --timeout does not bound a connection to a port where
# something other than berthd listens; never let a wait loop hang on that.
berth_cmd() { timeout 10 "$BERTH" --address "$ADDRESS" "$@"; }

# The list-peers table through the first server that answers (--timeout 8: a
# server asks every member over the raft link, up to 5 s for one that is slow).
list_peers() {
  local i
  for i in 1 2 3; do
    if timeout 15 "$BERTH" --address "127.0.0.1:$(shell_port "$i")" --timeout 8 "$@" operator raft list-peers 2>/dev/null; then
      return 0
    fi
  done
  return 1
}

mounts_under() {  # mount points under DIR, deepest first
  awk -v d="$DIR/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts |
    while IFS= read -r m; do printf '%b\n' "$m"; done | awk '{ print length, $0 }' |
    sort -rn | cut -d' ' -f2-
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
        echo "local-cluster: $p (pid $pid) ignored SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
      else
        sleep 0.1
      fi
    done
    rm -f "$DIR/$p.pid"
  done
  local m unmounted=0
  while IFS= read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m" || echo "local-cluster: cannot unmount $m" >&2
    unmounted=$((unmounted + 1))
  done < <(mounts_under)
  echo "local-cluster: stopped $stopped processes, unmounted $unmounted mounts under $DIR"
  if [ -n "$(mounts_under)" ]; then
    die "still mounted under $DIR: $(mounts_under | tr '\n' ' ')"
  fi
}

do_status() {
  local p pid all=0
  printf '%-12s %-8s %-8s %s\n' NAME PID STATE LOG
  for p in "${PROCESSES[@]}"; do
    if pid="$(pid_of "$p")"; then
      printf '%-12s %-8s %-8s %s\n' "$p" "$pid" running "$DIR/$p.log"
    else
      printf '%-12s %-8s %-8s %s\n' "$p" - stopped "$DIR/$p.log"
      all=1
    fi
  done
  echo
  if ! list_peers; then
    echo "local-cluster: no server answers (is the cluster up? $0 up --dir $DIR)"
    all=1
  fi
  return $all
}

wait_for() {  # wait_for WHAT COMMAND...: until COMMAND succeeds or WAIT_SECONDS pass
  local what="$1" deadline=$((SECONDS + WAIT_SECONDS))
  shift
  until "$@"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "local-cluster: timed out after ${WAIT_SECONDS}s waiting for $what" >&2
      return 1
    fi
    sleep 0.2
  done
}

has_leader() { list_peers --json 2>/dev/null | grep -q '"role": *"leader"'; }
plugins_healthy() {  # asked of every server: the leader answers without forwarding
  local i
  for i in 1 2 3; do
    if timeout 10 "$BERTH" --address "127.0.0.1:$(shell_port "$i")" --json --timeout 3 \
      plugin status hostpath 2>/dev/null | grep -q '"nodes_healthy": *2\b'; then
      return 0
    fi
  done
  return 1
}
sockets_exist() { [ -S "$DIR/c1/plugin/csi.sock" ] && [ -S "$DIR/c2/plugin/csi.sock" ]; }
all_alive() {
  local p
  for p in "${PROCESSES[@]}"; do
    pid_of "$p" >/dev/null || { echo "local-cluster: $p exited; its log:" >&2; tail -n 20 "$DIR/$p.log" >&2; return 1; }
  done
}

# The CA and the certificates in DIR/tls, made once with berth tls (berth
# never overwrites a file; existing ones are kept).
make_certificates() {
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  local ca="$TLS_DIR/berth-agent-ca.pem" key="$TLS_DIR/berth-agent-ca-key.pem" role
  if [ ! -f "$ca" ]; then
    env -u BERTH_CACERT -u BERTH_CLIENT_CERT -u BERTH_CLIENT_KEY \
      "$BERTH" tls ca create --dir "$TLS_DIR" >/dev/null
  fi
  for role in server client cli; do
    [ -f "$TLS_DIR/global-$role-berth.pem" ] && continue
    env -u BERTH_CACERT -u BERTH_CLIENT_CERT -u BERTH_CLIENT_KEY \
      "$BERTH" tls cert create "--$role" --dir "$TLS_DIR" --ca-cert "$ca" --ca-key "$key" >/dev/null
  done
}

tls_args() {  # tls_args ROLE: berthd's --tls-* options for a server or client certificate
  [ -n "$TLS" ] || return 0
  echo --tls-ca "$TLS_DIR/berth-agent-ca.pem" --tls-cert "$TLS_DIR/global-$1-berth.pem" \
    --tls-key "$TLS_DIR/global-$1-berth-key.pem"
}

write_prometheus_config() {
  local f="$DIR/prometheus.yml"
  {
    echo "# Written by deploy/local-cluster.sh up: deploy/prometheus/prometheus.yml for this cluster."
    echo "#   prometheus --config.file=$f --storage.tsdb.path=$DIR/prometheus"
    echo "global: {scrape_interval: 5s, evaluation_interval: 5s}"
    echo "rule_files: [\"$REPO/deploy/prometheus/rules.yml\"]"
    echo "scrape_configs:"
    echo "  - job_name: berth-servers"
    if [ -n "$TLS" ]; then  # HTTPS (deploy/prometheus/prometheus-tls.yml)
      echo "    scheme: https"
      echo "    tls_config: {ca_file: \"$TLS_DIR/berth-agent-ca.pem\", cert_file: \"$TLS_DIR/global-cli-berth.pem\", key_file: \"$TLS_DIR/global-cli-berth-key.pem\"}"
    fi
    echo "    static_configs:"
    for i in 1 2 3; do
      echo "      - {targets: [\"127.0.0.1:$(server_metrics_port "$i")\"], labels: {name: s$i}}"
    done
    echo "  - job_name: berth-clients"
    if [ -n "$TLS" ]; then  # a client certificate may not serve: not verified (known problem)
      echo "    scheme: https"
      echo "    tls_config: {insecure_skip_verify: true, cert_file: \"$TLS_DIR/global-cli-berth.pem\", key_file: \"$TLS_DIR/global-cli-berth-key.pem\"}"
    fi
    echo "    static_configs:"
    for i in 1 2; do
      echo "      - {targets: [\"127.0.0.1:$(client_metrics_port "$i")\"], labels: {name: c$i}}"
    done
  } >"$f"
}

do_up() {
  BERTHD="$(find_bin "${BERTHD:-}" berthd/berthd berthd BERTHD)"
  BERTH_HOSTPATH="$(find_bin "${BERTH_HOSTPATH:-}" berth-hostpath/berth-hostpath berth-hostpath BERTH_HOSTPATH)"
  if any_running; then
    echo "local-cluster: already running in $DIR (use 'status', or 'down' first)"
    do_status || true
    return 0
  fi
  echo "$BASE_PORT" >"$DIR/base-port"
  if [ -n "$TLS" ]; then
    make_certificates
    touch "$DIR/tls-enabled"
  else
    rm -f "$DIR/tls-enabled"
  fi
  # From here on a failure stops whatever was started.
  trap 'echo "local-cluster: up failed; stopping what was started (logs stay in $DIR)" >&2; do_down >&2 || true' ERR

  mkdir -p "$DIR/hostpath-root"
  local i
  for i in 1 2; do
    mkdir -p "$DIR/c$i/plugin"
    start "hostpath-c$i" "$BERTH_HOSTPATH" --endpoint "unix://$DIR/c$i/plugin/csi.sock" \
      --root "$DIR/hostpath-root" --shared-root --node-id "csi-c$i" \
      --call-log "$DIR/c$i/plugin/calls.log"
  done
  wait_for "the berth-hostpath sockets" sockets_exist

  for i in 1 2 3; do
    local joins=() j
    for j in 1 2 3; do
      [ "$j" = "$i" ] || joins+=(--join "127.0.0.1:$(raft_port "$j")")
    done
    start "s$i" "$BERTHD" --config "$CONFIG_DIR/server$i.toml" --data-dir "$DIR/s$i" \
      --bind 127.0.0.1 --port "$(shell_port "$i")" --raft-port "$(raft_port "$i")" \
      --metrics-bind 127.0.0.1 --metrics-port "$(server_metrics_port "$i")" "${joins[@]}" \
      $(tls_args server)
  done
  for i in 1 2; do
    start "c$i" "$BERTHD" --config "$CONFIG_DIR/client$i.toml" --data-dir "$DIR/c$i/data" \
      --csi-root "$DIR/c$i/data/csi" --servers "$ALL_SERVERS" \
      --plugin "hostpath=monolith:$DIR/c$i/plugin/csi.sock" --fingerprint-interval 1 \
      --metrics-bind 127.0.0.1 --metrics-port "$(client_metrics_port "$i")" $(tls_args client)
  done

  wait_for "a leader" has_leader
  all_alive
  wait_for "both clients' hostpath plugins to be healthy" plugins_healthy
  all_alive
  trap - ERR

  write_prometheus_config
  cat >"$DIR/env" <<EOF
export BERTH_ADDRESS=$ADDRESS
export PATH="$(dirname "$BERTH"):\$PATH"
EOF
  if [ -n "$TLS" ]; then
    cat >>"$DIR/env" <<EOF
export BERTH_CACERT=$BERTH_CACERT
export BERTH_CLIENT_CERT=$BERTH_CLIENT_CERT
export BERTH_CLIENT_KEY=$BERTH_CLIENT_KEY
EOF
  fi
  cat <<EOF
local-cluster: up in $DIR
  servers   s1 127.0.0.1:$(shell_port 1)  s2 127.0.0.1:$(shell_port 2)  s3 127.0.0.1:$(shell_port 3)  (any of them serves the shell)
  clients   c1 and c2, plugin hostpath (CSI nodes csi-c1, csi-c2, shared root $DIR/hostpath-root)
  metrics   servers :$(server_metrics_port 1) :$(server_metrics_port 2) :$(server_metrics_port 3), clients :$(client_metrics_port 1) :$(client_metrics_port 2) (Prometheus config: $DIR/prometheus.yml)
  logs      $DIR/*.log
  TLS       $([ -n "$TLS" ] && echo "mutual TLS, certificates in $TLS_DIR (source $DIR/env for the shell's)" || echo "off (--tls to turn it on)")

Use it:
  export BERTH_ADDRESS=$ADDRESS      # or: source $DIR/env
  $BERTH operator raft list-peers
  $BERTH plugin status
  echo '{"id":"v1","plugin_id":"hostpath","capabilities":[{"access_mode":"multi-node-multi-writer","attachment_mode":"file-system"}]}' | $BERTH volume create -
  $BERTH volume claim v1 --alloc a1 --node c1

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
