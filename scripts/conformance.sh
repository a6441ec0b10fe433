#!/usr/bin/env bash
# Conformance suites written by others, run against a memcached-protocol server:
#   (a) memccapable -a          ASCII protocol cases of libmemcached-tools (27 against memcached 1.6)
#   (b) pymemcache's own integration tests (test_integration.py of the installed package)
#   (c) twemproxy (nutcracker) in front of the server, a few commands through it   [optional]
#   (d) a pylibmc (libmemcached) smoke test                                          [optional]
#   (e) memcached's own t/*.t files that work against a foreign daemon (scripts/memcached-t.sh)
#       when MEMCACHED_SRC points at a memcached source tree                          [optional]
# Optional suites are skipped, loudly, when their tool is missing; when they run they must pass.
#
# Usage:
#   scripts/conformance.sh                           starts target/release/flashtier kv on a free port
#   FLASHTIER_ADDR=127.0.0.1:11211 scripts/conformance.sh    tests a server that is already running
# Environment: FLASHTIER_BIN (default target/release/flashtier), MEMCCAPABLE_EXPECTED (default 27),
#              MEMCACHED_SRC (optional, for (e)).
# Exit status: 0 when every suite that ran passed, 1 otherwise. Every process it starts is
# stopped on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=$(mktemp -d "${TMPDIR:-/tmp}/conformance.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

RESULTS=()
FAILED=0
pass() { RESULTS+=("PASS  $1"); echo "conformance: PASS: $1"; }
fail() { RESULTS+=("FAIL  $1"); echo "conformance: FAIL: $1" >&2; FAILED=1; }
skip() { RESULTS+=("SKIP  $1"); echo "conformance: *** SKIPPED: $1 ***" >&2; }
step() { printf '\n--- %s ---\n' "$*"; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port HOST PORT SECONDS: true once something accepts connections there.
wait_port() {
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# ---- the server under test ------------------------------------------------------------------
if [[ -n "${FLASHTIER_ADDR:-}" ]]; then
  HOST=${FLASHTIER_ADDR%:*}
  PORT=${FLASHTIER_ADDR##*:}
  echo "conformance: testing the running server at $HOST:$PORT"
else
  BIN=${FLASHTIER_BIN:-target/release/flashtier}
  if [[ ! -x "$BIN" ]]; then
    echo "conformance: $BIN not found: build it first (cargo build --release -p flashtier-server)" >&2
    echo "             or set FLASHTIER_BIN, or FLASHTIER_ADDR to a running server" >&2
    exit 1
  fi
  HOST=127.0.0.1
  PORT=$(free_port)
  "$BIN" kv --listen "$HOST:$PORT" --memory 64MiB --max-item-size 1MiB --ram-only >"$WORK/server.log" 2>&1 &
  PIDS+=($!)
  if ! wait_port "$HOST" "$PORT" 10; then
    echo "conformance: flashtier did not listen on $HOST:$PORT within 10 s; its log:" >&2
    cat "$WORK/server.log" >&2
    exit 1
  fi
  echo "conformance: started $BIN kv on $HOST:$PORT"
fi
wait_port "$HOST" "$PORT" 5 || { echo "conformance: nothing listens on $HOST:$PORT" >&2; exit 1; }

# ---- (a) memccapable ------------------------------------------------------------------------
step "memccapable -a"
EXPECTED=${MEMCCAPABLE_EXPECTED:-27}
if ! command -v memccapable >/dev/null; then
  fail "memccapable not installed (apt-get install libmemcached-tools)"
else
  set +e
  timeout 300 memccapable -a -t 10 -h "$HOST" -p "$PORT" >"$WORK/memccapable.out" 2>&1
  rc=$?
  set -e
  cat "$WORK/memccapable.out"
  passed=$(grep -c '\[pass\]' "$WORK/memccapable.out" || true)
  failed=$(grep -ci '\[fail' "$WORK/memccapable.out" || true)
  if [[ $rc -eq 0 && $failed -eq 0 && $passed -ge $EXPECTED ]] &&
    grep -q 'All tests passed' "$WORK/memccapable.out"; then
    pass "memccapable -a: $passed cases passed"
  else
    fail "memccapable -a: exit $rc, $passed passed (want $EXPECTED), $failed failed"
  fi
fi

# ---- (b) pymemcache integration tests -------------------------------------------------------
step "pymemcache test_integration.py"
if ! python3 -c 'import pymemcache, pytest' 2>/dev/null; then
  echo "conformance: installing pymemcache and pytest with pip"
  python3 -m pip install -q pymemcache pytest || true
fi
if ! python3 -c 'import pymemcache, pytest' 2>/dev/null; then
  fail "pymemcache/pytest could not be installed"
else
  PYMC_DIR=$(python3 -c 'import pymemcache, os; print(os.path.dirname(pymemcache.__file__))')
  set +e
  # -p no:cacheprovider: do not write a .pytest_cache into site-packages.
  timeout 600 python3 -m pytest "$PYMC_DIR/test/test_integration.py" --server "$HOST" --port "$PORT" \
    -q -rs -p no:cacheprovider -W ignore::pytest.PytestUnknownMarkWarning >"$WORK/pymemcache.out" 2>&1
  rc=$?
  set -e
  tail -n 20 "$WORK/pymemcache.out"
  summary=$(tail -n 1 "$WORK/pymemcache.out")
  if [[ $rc -eq 0 ]] && ! grep -qE '[0-9]+ (failed|error)' <<<"$summary"; then
    pass "pymemcache $(python3 -c 'import pymemcache; print(pymemcache.__version__)') integration tests: $summary"
  else
    fail "pymemcache integration tests: exit $rc: $summary"
  fi
fi

# ---- (c) twemproxy in front of the server ---------------------------------------------------
step "twemproxy (nutcracker)"
if ! command -v nutcracker >/dev/null; then
  skip "twemproxy: nutcracker not installed (apt-get install nutcracker)"
elif ! python3 -c 'import pymemcache' 2>/dev/null; then
  skip "twemproxy: needs pymemcache for its client"
else
  PROXY_PORT=$(free_port)
  STATS_PORT=$(free_port)
  cat >"$WORK/nutcracker.yml" <<EOF
flashtier:
  listen: 127.0.0.1:$PROXY_PORT
  hash: fnv1a_64
  distribution: ketama
  timeout: 2000
  redis: false
  auto_eject_hosts: false
  servers:
    - $HOST:$PORT:1
EOF
  nutcracker -c "$WORK/nutcracker.yml" -s "$STATS_PORT" -a 127.0.0.1 -o "$WORK/nutcracker.log" &
  PIDS+=($!)
  if ! wait_port 127.0.0.1 "$PROXY_PORT" 10; then
    fail "twemproxy did not start; its log: $(cat "$WORK/nutcracker.log")"
  elif timeout 60 python3 - "$PROXY_PORT" <<'EOF'; then
import sys
from pymemcache.client.base import Client

c = Client(("127.0.0.1", int(sys.argv[1])), timeout=5, connect_timeout=5)
checks = []
def check(name, got, want):
    checks.append(name)
    if got != want:
        sys.exit(f"twemproxy check {name!r}: got {got!r}, want {want!r}")

for i in range(20):
    check(f"set {i}", c.set(f"tw:{i}", f"value-{i}".encode(), noreply=False), True)
for i in range(20):
    check(f"get {i}", c.get(f"tw:{i}"), f"value-{i}".encode())
keys = [f"tw:{i}" for i in range(20)] + ["tw:missing"]
check("get_many", c.get_many(keys), {f"tw:{i}": f"value-{i}".encode() for i in range(20)})
check("add existing", c.add("tw:0", b"x", noreply=False), False)
check("replace", c.replace("tw:1", b"replaced", noreply=False), True)
check("get replaced", c.get("tw:1"), b"replaced")
check("append", c.append("tw:1", b"+", noreply=False), True)
check("prepend", c.prepend("tw:1", b"-", noreply=False), True)
check("get appended", c.get("tw:1"), b"-replaced+")
check("set counter", c.set("tw:n", b"10", noreply=False), True)
check("incr", c.incr("tw:n", 5), 15)
check("decr", c.decr("tw:n", 20), 0)
value, cas = c.gets("tw:2")
check("gets", value, b"value-2")
check("cas ok", c.cas("tw:2", b"new", cas, noreply=False), True)
check("cas stale", c.cas("tw:2", b"newer", cas, noreply=False), False)
check("touch", c.touch("tw:2", 100, noreply=False), True)
check("delete", c.delete("tw:3", noreply=False), True)
check("get deleted", c.get("tw:3"), None)
check("big value", c.set("tw:big", b"B" * 500_000, noreply=False), True)
check("get big", c.get("tw:big"), b"B" * 500_000)
print(f"twemproxy: {len(checks)} checks through the proxy passed")
EOF
    pass "twemproxy: get/set/multi-get/cas/incr/append/touch/delete through nutcracker"
  else
    fail "twemproxy: commands through nutcracker failed (log: $(tail -n 5 "$WORK/nutcracker.log"))"
  fi
fi

# ---- (d) pylibmc smoke test -----------------------------------------------------------------
step "pylibmc smoke test"
PYLIBMC_PY=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import pylibmc' 2>/dev/null; then
    PYLIBMC_PY=$py
    break
  fi
done
if [[ -z "$PYLIBMC_PY" ]]; then
  skip "pylibmc: not installed (apt-get install python3-pylibmc)"
elif timeout 60 "$PYLIBMC_PY" - "$HOST" "$PORT" <<'EOF'; then
import sys
import pylibmc

mc = pylibmc.Client([f"{sys.argv[1]}:{sys.argv[2]}"], binary=False, behaviors={"cas": True})
def check(name, got, want):
    if got != want:
        sys.exit(f"pylibmc check {name!r}: got {got!r}, want {want!r}")

check("set", mc.set("plm:a", b"alpha"), True)
check("get", mc.get("plm:a"), b"alpha")
check("set_multi", mc.set_multi({"plm:b": b"beta", "plm:c": b"gamma"}), [])
check("get_multi", mc.get_multi(["plm:a", "plm:b", "plm:c", "plm:none"]),
      {"plm:a": b"alpha", "plm:b": b"beta", "plm:c": b"gamma"})
check("add existing", mc.add("plm:a", b"x"), False)
check("replace", mc.replace("plm:a", b"ALPHA"), True)
check("append", mc.append("plm:a", b"!"), True)
check("prepend", mc.prepend("plm:a", b"<"), True)
check("get after edits", mc.get("plm:a"), b"<ALPHA!")
check("set int", mc.set("plm:n", 41), True)
check("incr", mc.incr("plm:n"), 42)
check("decr", mc.decr("plm:n", 50), 0)
value, cas = mc.gets("plm:b")
check("gets", value, b"beta")
check("cas", mc.cas("plm:b", b"BETA", cas), True)
check("cas stale", mc.cas("plm:b", b"x", cas), False)
check("touch", mc.touch("plm:b", 100), True)
check("delete", mc.delete("plm:c"), True)
check("get deleted", mc.get("plm:c"), None)
check("big", mc.set("plm:big", b"Z" * 300_000), True)
check("get big", mc.get("plm:big"), b"Z" * 300_000)
print("pylibmc: smoke test passed")
EOF
  pass "pylibmc $("$PYLIBMC_PY" -c 'import pylibmc; print(pylibmc.__version__)') smoke test"
else
  fail "pylibmc smoke test"
fi

# ---- (e) memcached's own t/*.t files -------------------------------------------------------
step "memcached t/*.t"
if [[ -z "${MEMCACHED_SRC:-}" ]]; then
  skip "memcached t/*.t: set MEMCACHED_SRC to a memcached 1.6.18 source tree to run them"
elif MEMCACHED_SRC="$MEMCACHED_SRC" FLASHTIER_ADDR="$HOST:$PORT" scripts/memcached-t.sh; then
  pass "memcached t/*.t files usable against a foreign daemon"
else
  fail "memcached t/*.t"
fi

# ---- summary --------------------------------------------------------------------------------
printf '\n=== conformance summary (%s:%s) ===\n' "$HOST" "$PORT"
printf '%s\n' "${RESULTS[@]}"
exit "$FAILED"
