#!/usr/bin/env bash
# Shows the processes of the running test environment with their memory (RSS), and the
# total. Exits 1 when the environment is not (fully) up.
#
# Usage: tests/env/status.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ ! -d "${RUN_DIR}/pids" ]]; then
  echo "test environment is not up"
  exit 1
fi

rc=0 total_kb=0
printf '%-26s %8s %10s\n' COMPONENT PID RSS
shopt -s nullglob
for pidfile in "${RUN_DIR}"/pids/*.pid; do
  name="$(basename "$pidfile" .pid)"
  read -r pid _ < "$pidfile"
  if is_our_process "$pidfile"; then
    rss_kb="$(awk '/^VmRSS:/ { print $2 }' "/proc/${pid}/status")"
    total_kb=$(( total_kb + rss_kb ))
    printf '%-26s %8s %8d MB\n' "$name" "$pid" $(( rss_kb / 1024 ))
  else
    printf '%-26s %8s %10s\n' "$name" "$pid" "NOT RUNNING"
    rc=1
  fi
done
printf '%-26s %8s %8d MB\n' total "" $(( total_kb / 1024 ))
if [[ -d "${RUN_DIR}/registry" ]]; then
  printf '%-26s %8s %8d MB\n' "registry storage (disk)" "" \
    $(( $(du -sk "${RUN_DIR}/registry" | cut -f1) / 1024 ))
fi
exit "$rc"
