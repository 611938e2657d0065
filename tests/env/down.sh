#!/usr/bin/env bash
# Stops the test environment started by up.sh and removes tests/env/.run/.
#
# Only the processes up.sh recorded are signalled, by PID, and only after checking that the
# PID still runs the program that was started (never by name: other copies of etcd or moto
# on the machine are not ours). Safe to run when nothing is up.
#
# Usage: tests/env/down.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

take_env_lock

PID_DIR="${RUN_DIR}/pids"
# Reverse start order: clients (node-join simulator, gap layer, kwok, scheduler,
# controller-manager) before the API server, the registry and moto, the API server before
# etcd, so nothing logs a storm of connection errors on the way out.
STOP_ORDER=(nodejoin gap registry kwok kube-scheduler kube-controller-manager kube-apiserver etcd moto)

if [[ ! -d "$RUN_DIR" ]]; then
  log "nothing to stop (${RUN_DIR} does not exist)"
  exit 0
fi

start="$(now_ms)"

# stop NAME: SIGTERM, up to 15 s for a clean exit, then SIGKILL.
stop() {
  local name="$1" pidfile="${PID_DIR}/$1.pid" pid
  if ! is_our_process "$pidfile"; then
    [[ -f "$pidfile" ]] && log "${name}: not running"
    return 0
  fi
  read -r pid _ < "$pidfile"
  kill -TERM "$pid" 2> /dev/null || true
  for _ in $(seq 1 150); do
    is_our_process "$pidfile" || { log "${name}: stopped (pid ${pid})"; return 0; }
    sleep 0.1
  done
  log "${name}: still running after 15s, sending SIGKILL (pid ${pid})"
  kill -KILL "$pid" 2> /dev/null || true
  for _ in $(seq 1 50); do
    is_our_process "$pidfile" || return 0
    sleep 0.1
  done
  die "${name} (pid ${pid}) does not exit; leaving ${RUN_DIR} in place"
}

for name in "${STOP_ORDER[@]}"; do
  stop "$name"
done

# Any PID file we do not know of (a component added later, a renamed one) is still ours.
shopt -s nullglob
for pidfile in "${PID_DIR}"/*.pid; do
  name="$(basename "$pidfile" .pid)"
  [[ " ${STOP_ORDER[*]} " == *" ${name} "* ]] || stop "$name"
done

rm -rf "$RUN_DIR"
log "test environment down in $(fmt_ms $(( $(now_ms) - start )))"
