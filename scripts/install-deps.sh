#!/usr/bin/env bash
# Installs the real peers the tests run against, on Debian, when they are missing.
set -euo pipefail
need_apt=()
for pair in memcached:memcached memccapable:libmemcached-tools; do
  bin=${pair%%:*}; pkg=${pair#*:}
  command -v "$bin" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi
python3 -c 'import pymemcache, pytest' 2>/dev/null || python3 -m pip install -q pymemcache pytest
