#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (default 15 s each).
# Installs cargo-fuzz when missing. cargo-fuzz needs nightly-only rustc flags;
# the pinned stable toolchain accepts them with RUSTC_BOOTSTRAP=1 (fine for a test build,
# never for a release build). A crash fails the script and leaves its input in
# fuzz/artifacts/<target>/.
# Usage: scripts/fuzz.sh [seconds-per-target]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
for target in $(cargo fuzz list); do
  echo "fuzz: $target for ${SECS}s"
  if ! cargo fuzz run "$target" -- -max_total_time="$SECS" >"$LOG" 2>&1; then
    tail -40 "$LOG"
    echo "fuzz: $target FAILED"
    exit 1
  fi
  grep -E '^Done' "$LOG" || true
done
echo "fuzz: all targets ran clean"
