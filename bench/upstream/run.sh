#!/usr/bin/env bash
# Upstream Karpenter's scheduler and jointer's solver, side by side, on upstream's own benchmark
# input (makeDiversePods(N) with seed 42, fake.InstanceTypes(400), one spot + on-demand pool).
#
#   bench/upstream/run.sh                 # 1,000, 5,000 and 20,000 pods
#   bench/upstream/run.sh 1000 5000       # chosen sizes
#   JOINTER_BIN=target/debug/jointer bench/upstream/run.sh 1000   # an existing binary, no cargo
#
# Each size's plan from jointer is then replayed through upstream's own topology code (the
# harness's --recheck); the script exits 1 if jointer fails or that replay refuses any pod.
#
# Needs go (any recent; the toolchain below is fetched through the Go module proxy), python3 and,
# unless JOINTER_BIN is set, cargo. Work files go to bench/upstream/.out/ (git-ignored).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/.out"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 5000 20000)
for n in "${sizes[@]}"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: a size is a positive pod count, not '$n'" >&2; exit 2; }
done
mkdir -p "$out"

# sigs.k8s.io/karpenter v1.15.0's go.mod asks for go 1.26.9, newer than this machine's Go; the
# go command downloads this toolchain from the module proxy once and keeps it in the module cache.
# Go's default build and module caches are used, so rebuilds are incremental.
export GOTOOLCHAIN=go1.27.3
echo "building the upstream harness (sigs.k8s.io/karpenter v1.15.0)..." >&2
(cd "$here" && go build -o "$out/upstream-bench" .)

if [ -n "${JOINTER_BIN:-}" ]; then
  jointer="$(cd "$(dirname "$JOINTER_BIN")" && pwd)/$(basename "$JOINTER_BIN")"
else
  echo "building jointer (release)..." >&2
  (cd "$root" && cargo build --release --locked --bin jointer)
  jointer="$root/target/release/jointer"
fi
[ -x "$jointer" ] || { echo "run.sh: no jointer binary at $jointer" >&2; exit 1; }

failed=0
for n in "${sizes[@]}"; do
  dir="$out/pods-$n"
  rm -rf "$dir"
  echo "$n pods: upstream's solve..." >&2
  "$out/upstream-bench" --pods "$n" --out "$dir"
  echo "$n pods: jointer simulate..." >&2
  # Peak RSS of jointer alone: the wrapper's only child is jointer, so RUSAGE_CHILDREN is its.
  if ! python3 - "$dir" "$jointer" <<'EOF'
import json, resource, subprocess, sys
d, jointer = sys.argv[1], sys.argv[2]
cmd = [jointer, "simulate", "--nodepools", f"{d}/nodepools.yaml", "--workload", f"{d}/pods.yaml",
       "--catalog", f"{d}/catalog.json", "--output", "json"]
with open(f"{d}/jointer.json", "wb") as out, open(f"{d}/jointer.err", "wb") as err:
    rc = subprocess.run(cmd, stdout=out, stderr=err).returncode
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
with open(f"{d}/jointer.run.json", "w") as f:
    json.dump({"exit": rc, "peak_rss_bytes": rss}, f)
sys.exit(rc)
EOF
  then
    failed=1
    echo "$n pods: jointer simulate failed (its message is under the table)" >&2
    sed 's/^/  /' "$dir/jointer.err" >&2
    continue
  fi
  # Replay jointer's plan, in its binding_order, through upstream's own Topology: writes
  # $dir/recheck.json; exit 4 when a pod is refused or the plan names a pod badly.
  echo "$n pods: re-checking jointer's plan with upstream's topology..." >&2
  rc=0
  "$out/upstream-bench" --pods "$n" --out "$dir" --recheck "$dir/jointer.json" || rc=$?
  case "$rc" in
    0) ;;
    4) failed=1; echo "$n pods: upstream's topology refused jointer's plan; see $dir/recheck.json" >&2 ;;
    *) failed=1; echo "$n pods: the recheck failed (exit $rc)" >&2 ;;
  esac
done

python3 "$here/table.py" "$out" "$jointer" "${sizes[@]}"
exit "$failed"
