#!/usr/bin/env bash
# Build the Debian package with cargo-deb: target/debian/flashtier_<version>-1_<arch>.deb
# (stripped binary, systemd units, /etc/flashtier examples, man pages and shell completions
# generated from the CLI) and flashtier-dbgsym_<version>-1_<arch>.ddeb (the split debug
# info). Install: apt install ./target/debian/flashtier_*.deb
# Usage: scripts/build-deb.sh [--no-build] [--fast]
#   --no-build  package the release binary already in target/release (the test suite does)
#   --fast      lighter compression (bigger file, seconds instead of tens of seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
fast=()
for a in "$@"; do
  case $a in
    --no-build) build=0 ;;
    --fast) fast=(--fast) ;;
    *) echo "usage: $0 [--no-build] [--fast]" >&2; exit 2 ;;
  esac
done
command -v cargo-deb >/dev/null 2>&1 || {
  echo "cargo-deb is missing: cargo install cargo-deb --locked (scripts/install-deps.sh does)" >&2
  exit 1
}
if ((build)); then
  cargo build --release -p flashtier-server
fi
rm -rf target/release/assets
target/release/flashtier assets target/release/assets
mkdir -p target/debian
cargo deb -p flashtier-server --no-build "${fast[@]}" -o target/debian/
