#!/usr/bin/env bash
# Runs memcached's own protocol tests (t/*.t of a memcached source tree) against a running
# memcached-protocol server, through the test library's T_MEMD_USE_DAEMON hook.
#
# Only the files listed below are run: those that pass against a plain memcached 1.6.18 daemon
# (`memcached -U 0 -m 64 -I 1m`) given as T_MEMD_USE_DAEMON and test protocol behaviour, not
# memcached's stats or memory layout. The others start their own memcached with special flags,
# count stats or slab pages, need extstore, TLS, UDP, unix sockets or the proxy, use the binary
# protocol, or wait out expiry against memcached's own clock (see docs/compat.md). The server
# is flushed before each file. memcached's code is not part of this repository: point MEMCACHED_SRC at a
# checkout of the version used as the reference (tag 1.6.18 for Debian 12's package).
#
# Usage: MEMCACHED_SRC=/path/to/memcached FLASHTIER_ADDR=127.0.0.1:11211 scripts/memcached-t.sh [FILE.t...]
# Exit status: 0 when every file passed, 1 otherwise, 2 on a usage error.
set -euo pipefail

USABLE=(
  bogus-commands cas chunked-items flags getandtouch getset incrdecr issue_108 issue_152
  issue_192 issue_3 issue_41 issue_68 issue_70 malicious-commands metaget multiversioning
  noreply quit strtol-testing touch
)

if [[ -z "${MEMCACHED_SRC:-}" || ! -d "${MEMCACHED_SRC}/t/lib" ]]; then
  echo "memcached-t: set MEMCACHED_SRC to a memcached source tree (with t/lib)" >&2
  exit 2
fi
if [[ -z "${FLASHTIER_ADDR:-}" ]]; then
  echo "memcached-t: set FLASHTIER_ADDR=HOST:PORT of the server to test" >&2
  exit 2
fi
command -v prove >/dev/null || { echo "memcached-t: prove (perl) not found" >&2; exit 2; }
if ! command -v memcached >/dev/null; then
  echo "memcached-t: the test library probes \`memcached -h\` for features; install memcached" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/memcached-t.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ln -s "$(cd "$MEMCACHED_SRC" && pwd)/t" "$WORK/t"
# The library runs `./memcached-debug -h` to probe features even with T_MEMD_USE_DAEMON.
# Answer with the installed memcached's help, minus extstore, so extstore sections skip.
cat >"$WORK/memcached-debug" <<'EOF'
#!/bin/sh
memcached "$@" | grep -v ext_path
EOF
chmod +x "$WORK/memcached-debug"

files=("$@")
if ((${#files[@]} == 0)); then
  for f in "${USABLE[@]}"; do files+=("t/$f.t"); done
fi

HOST=${FLASHTIER_ADDR%:*}
PORT=${FLASHTIER_ADDR##*:}
flush() {
  local reply
  exec 3<>"/dev/tcp/$HOST/$PORT" || return 1
  printf 'flush_all\r\n' >&3
  read -r -t 5 reply <&3 || true
  exec 3>&-
  [[ "$reply" == OK* ]]
}

failed=()
cd "$WORK"
for f in "${files[@]}"; do
  f="t/$(basename "$f")"
  flush || { echo "memcached-t: flush_all on $FLASHTIER_ADDR failed" >&2; exit 1; }
  if T_MEMD_USE_DAEMON="$FLASHTIER_ADDR" timeout 120 prove -I t/lib "$f" >"$WORK/out" 2>&1; then
    echo "memcached-t: PASS $f"
  else
    echo "memcached-t: FAIL $f"
    sed 's/^/    /' "$WORK/out" | grep -v '^    ok ' | head -n 40
    failed+=("$f")
  fi
done
echo "memcached-t: $((${#files[@]} - ${#failed[@]}))/${#files[@]} files passed against $FLASHTIER_ADDR"
((${#failed[@]} == 0))
