#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs its own peers, then runs
# formatting, lints, unit and integration tests (real memcached, nbdkit, fio, nbdcopy, ...),
# the conformance suites (memccapable, pymemcache, twemproxy, pylibmc), bounded fuzzing of
# every parser and of recovery, and a load-generator smoke run.
# Usage: scripts/test.sh            (what CI runs; ~15-20 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
step() { printf '\n=== %s (t=%ss) ===\n' "$*" "$((SECONDS - START))"; }

step "install peers"
scripts/install-deps.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

step "build"
cargo build --release --workspace

step "unit and integration tests"
cargo test --workspace --release

step "conformance: memccapable, pymemcache, twemproxy, pylibmc"
scripts/conformance.sh

step "fuzzing (bounded)"
scripts/fuzz.sh

step "load generator smoke run"
scripts/bench-smoke.sh

step "kill -9 torture: every command, three tiers, checked from outside"
python3 scripts/kill9_torture.py target/release/flashtier --trials 4 --seed "${TORTURE_SEED:-$RANDOM}" \
  --keys 1000 --run-min 2 --run-max 6

step "benchmark tools: trace simulator"
python3 scripts/bench/trace_sim_test.py

step "done"
echo "test.sh: all steps passed in $((SECONDS - START))s"
