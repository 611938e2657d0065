#!/usr/bin/env bash
# The one test command (the README names it, .ci/run calls it). On a clean clone it builds
# everything, checks formatting and lints, and runs every test; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

for tool in cargo rustfmt cargo-clippy; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tests/run.sh: '$tool' is missing; install Rust with rustup (components rustfmt and clippy)" >&2
    exit 1
  fi
done

phase "cargo fmt --check"
cargo fmt --all -- --check

phase "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

phase "cargo test --workspace"
cargo test --workspace --locked

phase "all checks passed in $((SECONDS - started)) s"
