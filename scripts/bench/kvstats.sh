# shellcheck shell=bash
# kv_stats PORT [SECTION]: a memcached-protocol server's `stats [SECTION]` on 127.0.0.1:PORT as
# lines "name value" (sourced by ram-per-item.sh and small-tier.sh).
kv_stats() {
  python3 - "$1" "${2:-}" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(("stats %s" % sys.argv[2]).strip().encode() + b"\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
for line in buf.decode().splitlines():
    p = line.split()
    if len(p) == 3 and p[0] == "STAT":
        print(p[1], p[2])
PY
}
