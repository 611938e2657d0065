#!/usr/bin/env bash
# Runs jointer-controller as a local process against the test environment, with the settings
# `jointer apply` gives the Deployment (cluster name, endpoint, queue name, region) and the AWS
# endpoint override, so a person can watch it work on the test world:
#
#   tests/env/world.sh && jointer apply -f tests/env/.run/jointer.yaml
#   tests/env/controller.sh start      # builds the binary if needed
#   tests/env/controller.sh logs       # follows its JSON log
#   tests/env/controller.sh stop
#
# Or upstream Karpenter (built by build.sh from Go modules) on the same world, after
# `jointer apply` with `controller: { install: helm, helm: { chart: $JOINTER_UPSTREAM_CHART } }`:
# `start --upstream` runs it with the environment the chart gave the karpenter Deployment.
set -euo pipefail
ENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${ENV_DIR}/../.." && pwd)"
RUN_DIR="${JOINTER_TESTENV_RUN_DIR:-${ENV_DIR}/.run}"
# In up.sh's PID directory and format ("pid program"), so down.sh stops it too.
PID_FILE="${RUN_DIR}/pids/controller.pid"
BIN="${ROOT}/target/debug/jointer-controller"
LOG_FILE="${RUN_DIR}/controller.log"

pid() { read -r p _ < "$PID_FILE" && echo "$p"; }
running() { [[ -f "$PID_FILE" ]] && kill -0 "$(pid)" 2> /dev/null; }

start_upstream() {
  local env_lines
  env_lines="$(kubectl get deployment -n kube-system karpenter \
    -o jsonpath='{range .spec.template.spec.containers[0].env[*]}{.name}={.value}{"\n"}{end}')" \
    || { echo "no karpenter Deployment in kube-system: jointer apply with controller.install: helm first" >&2; exit 1; }
  local -a envs=()
  while IFS= read -r line; do
    [[ -n "${line#*=}" ]] && envs+=("$line")
  done <<< "$env_lines"
  env "${envs[@]}" SYSTEM_NAMESPACE=kube-system DISABLE_LEADER_ELECTION=true \
    METRICS_PORT="${JOINTER_CONTROLLER_METRICS_PORT:-28080}" \
    HEALTH_PROBE_PORT="${JOINTER_CONTROLLER_HEALTH_PORT:-28081}" \
    nohup "$JOINTER_UPSTREAM_CONTROLLER" >> "$LOG_FILE" 2>&1 &
  echo "$! ${JOINTER_UPSTREAM_CONTROLLER}" > "$PID_FILE"
}

case "${1:-}" in
  start)
    if running; then echo "controller already running (pid $(pid)); log: ${LOG_FILE}"; exit 0; fi
    [[ -f "${RUN_DIR}/env" ]] || { echo "the test environment is not up: run tests/env/up.sh" >&2; exit 1; }
    # shellcheck disable=SC1091
    source "${RUN_DIR}/env"
    [[ -f "${RUN_DIR}/world.json" ]] || { echo "no world: run tests/env/world.sh" >&2; exit 1; }
    if [[ "${2:-}" == "--upstream" ]]; then
      start_upstream
      sleep 3
      running || { echo "upstream Karpenter exited; last log lines:" >&2; tail -20 "$LOG_FILE" >&2; exit 1; }
      echo "upstream Karpenter running (pid $(pid)); metrics on :${JOINTER_CONTROLLER_METRICS_PORT:-28080}; log: ${LOG_FILE}"
      exit 0
    fi
    (cd "$ROOT" && cargo build -q -p jointer-controller)
    cluster="$("$JOINTER_TESTENV_PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["cluster"]["name"])' "${RUN_DIR}/world.json")"
    CLUSTER_NAME="$cluster" \
    INTERRUPTION_QUEUE="$cluster" \
    AWS_REGION="${AWS_REGION}" \
    LEADER_ELECTION_NAMESPACE=kube-system \
    POD_NAME="local-$(hostname)" \
    METRICS_PORT="${JOINTER_CONTROLLER_METRICS_PORT:-28080}" \
    HEALTH_PORT="${JOINTER_CONTROLLER_HEALTH_PORT:-28081}" \
      nohup "$BIN" run >> "$LOG_FILE" 2>&1 &
    echo "$! ${BIN}" > "$PID_FILE"
    for _ in $(seq 1 50); do
      if curl -fsS --max-time 1 "http://127.0.0.1:${JOINTER_CONTROLLER_HEALTH_PORT:-28081}/readyz" > /dev/null 2>&1; then
        echo "controller running (pid $(pid)) for cluster ${cluster}; metrics on :${JOINTER_CONTROLLER_METRICS_PORT:-28080}; log: ${LOG_FILE}"
        exit 0
      fi
      running || { echo "controller exited; last log lines:" >&2; tail -20 "$LOG_FILE" >&2; exit 1; }
      sleep 0.2
    done
    echo "controller not ready after 10 s; log: ${LOG_FILE}" >&2; exit 1
    ;;
  stop)
    if running; then kill "$(pid)"; echo "controller stopped"; else echo "controller not running"; fi
    rm -f "$PID_FILE"
    ;;
  logs)
    exec tail -n 50 -f "$LOG_FILE"
    ;;
  *)
    echo "usage: $0 start [--upstream]|stop|logs" >&2; exit 2
    ;;
esac
