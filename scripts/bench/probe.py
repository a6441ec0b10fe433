#!/usr/bin/env python3
"""Small helpers for compare.sh and bench-smoke.sh, standard library only.

  probe.py free-port                       print a free loopback TCP port
  probe.py wait-port PORT PID [SECONDS]    wait until PORT accepts and PID is alive
  probe.py collect NAME PID PORT CGROUP_DIR FLASH_FILE OUT.json
                                           server-side measurements of a live server
  probe.py check-json FILE                 smoke check: non-zero ops and no errors
  probe.py snap PID PORT CGROUP_DIR OUT.json
                                           stats, /proc/PID/io, CPU and cgroup usage now
  probe.py sched PID OUT                   every thread's name and schedstat now (ns on a
                                           CPU, ns runnable on a run queue, times run)
"""
import json
import os
import socket
import sys
import time


def pick_port():
    """A loopback TCP port free right now (the kernel's choice; other scripts import this)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def free_port():
    print(pick_port())


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie is not alive.
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except OSError:
        return False
    return True


def listening_pids(port):
    """Inodes of sockets listening on 127.0.0.1:port, mapped back to owning pids."""
    want = f"0100007F:{port:04X}"
    inodes = set()
    for table in ("/proc/net/tcp",):
        with open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[1] == want and parts[3] == "0A":
                    inodes.add(parts[9])
    return inodes


def wait_port(port, pid, seconds=15.0):
    """Waits for PORT to accept connections, and checks PID owns the listening socket, so a
    benchmark never silently measures someone else's server on a port clash."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not pid_alive(pid):
            sys.exit(f"server pid {pid} exited before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            time.sleep(0.05)
            continue
        inodes = listening_pids(port)
        fds = f"/proc/{pid}/fd"
        owned = False
        for fd in os.listdir(fds):
            try:
                target = os.readlink(os.path.join(fds, fd))
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                owned = True
                break
        if not owned:
            sys.exit(f"port {port} is served by another process, not pid {pid}")
        return
    sys.exit(f"server pid {pid} did not listen on {port} within {seconds}s")


def stats_replies(port, cmds):
    """Send each stats command on one connection; the replies (to END or an error line)
    concatenated. Empty if the server cannot be reached."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return b""
    buf = b""
    for cmd in cmds:
        s.sendall(cmd)
        part = b""
        while not (part.endswith(b"END\r\n") or part.endswith(b"ERROR\r\n")):
            chunk = s.recv(65536)
            if not chunk:
                break
            part += chunk
        buf += part
    s.close()
    return buf


def server_slabs(port):
    """memcached's `stats slabs` as {class: {field: int}} (empty if the server has none)."""
    out = {}
    for line in stats_replies(port, [b"stats slabs\r\n"]).decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT" and ":" in parts[1]:
            cls, field = parts[1].split(":", 1)
            if cls.isdigit() and parts[2].isdigit():
                out.setdefault(cls, {})[field] = int(parts[2])
    return out


def server_stats(port):
    """`stats` merged with `stats extstore` (the general section wins on a shared name)."""
    buf = stats_replies(port, [b"stats\r\n", b"stats extstore\r\n"])
    out = {}
    for line in buf.decode(errors="replace").splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT" and parts[1] not in out:
            v = parts[2]
            try:
                out[parts[1]] = int(v)
            except ValueError:
                try:
                    out[parts[1]] = float(v)
                except ValueError:
                    out[parts[1]] = v
    return out


def read_kv(path, sep=None):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split(sep, 1)
                if len(parts) == 2:
                    out[parts[0].strip().rstrip(":")] = parts[1].strip()
    except OSError:
        pass
    return out


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def kib(s):
    # "123456 kB" -> bytes
    try:
        return int(s.split()[0]) * 1024
    except (AttributeError, IndexError, ValueError):
        return None


def collect(name, pid, port, cg, flash, out):
    status = read_kv(f"/proc/{pid}/status", ":")
    io = read_kv(f"/proc/{pid}/io", ":")
    mstat = {k: int(v) for k, v in read_kv(f"{cg}/memory.stat").items() if v.isdigit()}
    flash_bytes = None
    if flash and os.path.exists(flash):
        st = os.stat(flash)
        flash_bytes = {"apparent": st.st_size, "allocated": st.st_blocks * 512}
    data = {
        "name": name,
        "pid": pid,
        "vm_hwm_bytes": kib(status.get("VmHWM")),
        "vm_rss_bytes": kib(status.get("VmRSS")),
        "threads": int(status.get("Threads", "0") or 0),
        "io_write_bytes": int(io.get("write_bytes", "0") or 0),
        "io_read_bytes": int(io.get("read_bytes", "0") or 0),
        "io_wchar": int(io.get("wchar", "0") or 0),
        "cgroup": cg,
        "cgroup_limit_bytes": read_int(f"{cg}/memory.limit_in_bytes"),
        "cgroup_max_usage_bytes": read_int(f"{cg}/memory.max_usage_in_bytes"),
        "cgroup_usage_bytes": read_int(f"{cg}/memory.usage_in_bytes"),
        "cgroup_failcnt": read_int(f"{cg}/memory.failcnt"),
        "cgroup_stat": {k: mstat.get(k) for k in ("cache", "rss", "mapped_file", "total_cache", "total_rss")},
        "flash_file": flash or None,
        "flash_file_bytes": flash_bytes,
        "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
        "stats": server_stats(port),
        "slabs": server_slabs(port),
    }
    with open(out, "w") as f:
        json.dump(data, f, indent=2)


def check_json(path):
    with open(path) as f:
        r = json.load(f)
    problems = []
    lp = r.get("load_phase")
    if lp is not None:
        c = lp["counters"]
        errs = c["server_errors"] + c["client_errors"] + c["verify_mismatches"] + c["timed_out"] + c["connections_lost"]
        if lp["sets"] == 0:
            problems.append("load phase set nothing")
        if errs:
            problems.append(f"load phase errors: {errs} ({lp.get('first_error')})")
    if not r.get("rows") and lp is None:
        problems.append("no rows")
    for row in r.get("rows", []):
        label = row["offered_ops_per_sec"] or "max"
        if row["completed_ops"] == 0:
            problems.append(f"rate {label}: zero ops completed")
        if row["errors"]:
            problems.append(f"rate {label}: {row['errors']} errors ({row.get('first_error')})")
        if r["config"]["verify"] and row["counters"]["get_hits"] > 0 and row["counters"]["verified"] == 0:
            problems.append(f"rate {label}: verify on but nothing verified")
    if problems:
        sys.exit(f"{path}: " + "; ".join(problems))
    rows = ", ".join(
        f"{row['offered_ops_per_sec'] or 'max'}: {row['completed_ops']} ops, hit {row['hit_ratio']}"
        for row in r["rows"]
    )
    print(f"{path}: ok ({rows})")


def pid_cpu_split_s(pid):
    """(utime, stime) of PID in seconds (USER_HZ = 100), or (None, None)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) / 100.0, int(rest[12]) / 100.0
    except (OSError, IndexError, ValueError):
        return None, None


def pid_cpu_s(pid):
    """utime + stime of PID in seconds (USER_HZ = 100), or None."""
    user, system = pid_cpu_split_s(pid)
    return None if user is None else user + system


def snap(pid, port, cg, out):
    io = read_kv(f"/proc/{pid}/io", ":")
    mstat = {k: int(v) for k, v in read_kv(f"{cg}/memory.stat").items() if v.isdigit()}
    user_s, sys_s = pid_cpu_split_s(pid)
    data = {
        "t": time.time(),
        "pid": pid,
        "cpu_s": None if user_s is None else user_s + sys_s,
        "user_s": user_s,
        "sys_s": sys_s,
        "io_write_bytes": int(io.get("write_bytes", "0") or 0),
        "io_cancelled_write_bytes": int(io.get("cancelled_write_bytes", "0") or 0),
        "io_read_bytes": int(io.get("read_bytes", "0") or 0),
        "vm_rss_bytes": kib(read_kv(f"/proc/{pid}/status", ":").get("VmRSS")),
        "cgroup_usage_bytes": read_int(f"{cg}/memory.usage_in_bytes"),
        "cgroup_max_usage_bytes": read_int(f"{cg}/memory.max_usage_in_bytes"),
        "cgroup_limit_bytes": read_int(f"{cg}/memory.limit_in_bytes"),
        "cgroup_cache_bytes": mstat.get("cache"),
        "cgroup_rss_bytes": mstat.get("rss"),
        "stats": server_stats(port),
        # CPU run time per thread name, summed (schedstat ns): what one thread kind (the
        # write-back, the workers) spent between two snaps.
        "thread_run_ns": thread_run_ns(pid),
    }
    if not data["stats"]:
        sys.exit(f"snap: no stats from 127.0.0.1:{port}")
    with open(out, "w") as f:
        json.dump(data, f, indent=2)


def thread_schedstats(pid):
    """(tid, name, [run ns, run-queue wait ns, slices]) for each of PID's threads (schedstat);
    threads that exit meanwhile are skipped."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                stats = [int(x) for x in f.read().split()[:3]]
        except (OSError, ValueError):
            continue
        yield tid, name, stats


def thread_run_ns(pid):
    """CPU run time (schedstat, ns) of PID's threads, summed per thread name."""
    runs = {}
    for _, name, (run, _, _) in thread_schedstats(pid):
        runs[name] = runs.get(name, 0) + run
    return runs


def sched(pid, out):
    """Per-thread scheduler statistics of PID: what a thread ran and how long it waited for a
    CPU while runnable (the difference of two snapshots is a window's run-queue wait)."""
    threads = {}
    for tid, name, (run, wait, slices) in thread_schedstats(pid):
        threads[tid] = {"name": name, "run_ns": run, "wait_ns": wait, "slices": slices}
    with open(out, "w") as f:
        json.dump({"t": time.time(), "pid": pid, "threads": threads}, f)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "free-port":
        free_port()
    elif cmd == "wait-port":
        wait_port(int(args[0]), int(args[1]), float(args[2]) if len(args) > 2 else 15.0)
    elif cmd == "collect":
        collect(args[0], int(args[1]), int(args[2]), args[3], args[4], args[5])
    elif cmd == "snap":
        snap(int(args[0]), int(args[1]), args[2], args[3])
    elif cmd == "sched":
        sched(int(args[0]), args[1])
    elif cmd == "check-json":
        check_json(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
