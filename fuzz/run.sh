#!/usr/bin/env bash
# Fuzzes jointer's input surfaces with libFuzzer (cargo fuzz, nightly Rust) for a fixed budget
# each, then prints one line per target: executions, corpus size, crashes.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]      (default 60 s, every target)
#
# New inputs that add coverage are merged into fuzz/corpus/<target>/ (commit them); a crash
# input is copied to fuzz/regressions/<target>/ — the corpus replay test
# (`cargo test --test it fuzz_corpus`) runs both on stable Rust, so every crash found stays a
# regression test once fixed. Exits 1 if any target crashed.
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config template manifests interruption quantities)
fi

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# The same dependency versions as the product (the fuzz crate is its own workspace).
[ -f Cargo.lock ] || cp ../Cargo.lock Cargo.lock

# --release by default: the targets link jointer without its aws feature (no AWS SDK), which
# builds in about 8 minutes and 3.4 GB (with the SDK it took rustc past 17 GB); FUZZ_PROFILE=--dev to debug.
profile=${FUZZ_PROFILE:---release}
cargo +nightly fuzz build "$profile"

crashed=0
report=()
for t in "${targets[@]}"; do
  mkdir -p "work/$t" "corpus/$t" "regressions/$t" "artifacts/$t"
  log="work/$t.log"
  set +e
  cargo +nightly fuzz run "$profile" "$t" "work/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1
  status=$?
  set -e
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -n 1 || true)
  # Keep only inputs that add coverage to the committed corpus.
  cargo +nightly fuzz run "$profile" "$t" "corpus/$t" "work/$t" -- -merge=1 >"work/$t.merge.log" 2>&1 || true
  crashes=0
  for a in artifacts/"$t"/*; do
    [ -e "$a" ] || continue
    cp "$a" "regressions/$t/"
    crashes=$((crashes + 1))
  done
  if [ "$status" -ne 0 ] || [ "$crashes" -gt 0 ]; then
    crashed=1
    echo "fuzz/run.sh: $t failed (exit $status); its log: fuzz/$log" >&2
    tail -n 30 "$log" >&2
  fi
  report+=("$(printf '%-13s %12s executions in %4s s   corpus %5s inputs   crashes %s' \
    "$t" "${runs:-?}" "$seconds" "$(find "corpus/$t" -type f | wc -l)" "$crashes")")
done
printf '%s\n' "${report[@]}"
exit "$crashed"
