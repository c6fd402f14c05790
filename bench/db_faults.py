#!/usr/bin/python3
"""bench/db_faults.py — what a database fault costs under load (numbers, no assertions).

    bench/db_faults.py STACK_ENV restart|stop|down [SECONDS]
    bench/db_faults.py STACK_ENV failover [SECONDS]

Creates 32 sessions on the stack's first httpd, runs wrk (bench/mcp.lua, tools/call echo,
$CONNECTIONS connections (16), 14 s) and, 4 s in, either restarts PostgreSQL (tests/stack restart-pg) or stops
every PostgreSQL process with SIGSTOP for SECONDS (default 6) and then SIGCONTs them, or shuts
PostgreSQL down (pg_ctl -m fast) for SECONDS and starts it again.
Prints the calls made, how many failed and how, and the error-log lines at warn or worse.

failover (a stack made with `tests/stack up --replica`): $CONNECTIONS (16) threads call echo on
32 sessions spread over every httpd instance, SECONDS (default 8) before and after
`tests/stack failover` (kill -9 of the primary's postmaster, then the standby promoted;
$PROMOTE_AFTER seconds after the kill when set: a failover manager's time to decide). Prints
the time from the kill to the promotion and to the first call answered after it, the calls
that failed meanwhile (503 with Retry-After, anything else), calls/s before and after, the
longest call, and the error-log lines at warn or worse.
"""
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import load_stack_env  # noqa: E402
from mcp_client import McpSession    # noqa: E402


def warn_lines(sizes):
    lines = []
    for p, size in sizes.items():
        with open(p, "rb") as f:
            f.seek(size)
            lines += [l for l in f.read().decode(errors="replace").splitlines()
                      if re.search(r"\[[a-z_0-9]+:(warn|error|crit|alert|emerg)\]", l)]
    return lines


def print_kinds(lines):
    kinds = {}
    for l in lines:
        k = re.sub(r"^\[[^]]*\] \[([^]]*)\] \[pid [^]]*\] (\[client [^]]*\] )?", r"[\1] ", l)
        k = re.sub(r"\d+", "N", k)[:110]
        kinds[k] = kinds.get(k, 0) + 1
    for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d}  {k}")


def failover(env, seconds):
    """Calls in threads around tests/stack failover; every call's (start, end, status)."""
    if not env.get("MCP_PG_REPLICA"):
        sys.exit("bench/db_faults.py failover: the stack has no standby (tests/stack up --replica)")
    urls = env["MCP_URLS"].split()
    d = Path(env["MCP_STACK_DIR"])
    sessions = []
    for i in range(32):
        s = McpSession(urls[i % len(urls)], timeout=60)
        s.initialize()
        sessions.append(s)
    sizes = {p: p.stat().st_size for p in sorted(d.glob("httpd-*/error_log"))}
    stop = threading.Event()
    calls, lock = [], threading.Lock()
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'

    def caller(k, n):
        mine = sessions[k::n]
        i = 0
        while not stop.is_set():
            s = mine[i % len(mine)]
            i += 1
            t0 = time.time()
            try:
                r = s.post_raw(body, timeout=60)
                status = r.status_code if r.status_code != 200 or '"result"' in r.text else -200
            except Exception:   # noqa: BLE001 - counted as a failure of its own kind
                status = None
            with lock:
                calls.append((t0, time.time(), status))
            if status == 503:
                time.sleep(0.1)

    n = int(os.environ.get("CONNECTIONS", "16"))
    threads = [threading.Thread(target=caller, args=(k, n), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    subprocess.run([str(REPO / "tests" / "stack"), "failover", "--dir", str(d)]
                   + (["--promote-after", os.environ["PROMOTE_AFTER"]]
                      if os.environ.get("PROMOTE_AFTER") else []),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The steps' times as tests/stack wrote them (wall clock, ms): the kill, and the moment the
    # promoted standby took writes.
    log = (d / "failover.log").read_text()
    def at(pattern):
        m = re.search(r"^(\S+) " + pattern, log, re.M)
        return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    killed, promoted = at("start: kill -9"), at("the new primary .* takes writes")
    steps = dict(re.findall(r"^(\w+_ms)=(\d+)$", log, re.M))
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(90)
    ok = [c for c in calls if c[2] == 200]
    before = [c for c in ok if c[1] < killed]
    after = [c for c in ok if c[0] > promoted]
    # The first call sent after the primary died that was answered with a result.
    first = min((c[1] for c in ok if c[0] > killed), default=None)
    during = [c for c in calls if c[1] > killed and c[0] < (first or promoted)]
    failed = [c for c in calls if c[2] != 200]
    kinds = {}
    for c in failed:
        kinds[str(c[2])] = kinds.get(str(c[2]), 0) + 1
    span_before = (max(c[1] for c in before) - min(c[0] for c in before)) if before else 0
    span_after = (max(c[1] for c in after) - min(c[0] for c in after)) if after else 0
    print(f"failover: {promoted - killed:.2f} s from the kill -9 of the primary to the promoted "
          f"standby taking writes (tests/stack failover: " + ", ".join(f"{k} {v}" for k, v in
                                                                         steps.items()) + ")")
    nan = float("nan")
    print(f"  first call sent after the kill and answered: {(first - killed) if first else nan:.2f} s "
          f"after the kill, {(first - promoted) if first else nan:+.2f} s from the promotion")
    print(f"  calls: {len(calls)}, answered {len(ok)}, failed {len(failed)} {kinds} "
          f"(in flight across the switch: {len(during)}); longest call "
          f"{max(c[1] - c[0] for c in calls):.2f} s")
    print(f"  calls/s before: {len(before) / span_before if span_before else 0:.0f}, "
          f"after: {len(after) / span_after if span_after else 0:.0f} ({n} threads, "
          f"{len(urls)} instances)")
    lines = warn_lines(sizes)
    print(f"  {len(lines)} error-log lines at warn or worse")
    print_kinds(lines)


def main():
    env = load_stack_env(sys.argv[1])
    mode = sys.argv[2]
    if mode == "failover":
        failover(env, float(sys.argv[3]) if len(sys.argv) > 3 else 8.0)
        return
    stopped = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0
    url = env["MCP_URL"]
    d = Path(env["MCP_STACK_DIR"])
    sessions = []
    for _ in range(32):
        s = McpSession(url)
        s.initialize()
        sessions.append(s.session_id)
    sf = tempfile.NamedTemporaryFile("w", delete=False, suffix=".sessions")
    sf.write("\n".join(sessions) + "\n")
    sf.close()
    logs = sorted(d.glob("httpd-*/error_log"))
    sizes = {p: p.stat().st_size for p in logs}
    conns = os.environ.get("CONNECTIONS", "16")
    wrk = subprocess.Popen(["wrk", "-t", "2", "-c", conns, "-d", "14s", "--timeout", "30s",
                            "-s", str(REPO / "bench" / "mcp.lua"), url, "--", sf.name,
                            "2025-11-25", "echo", '{"text":"hello"}', "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(4)
    t0 = time.monotonic()
    if mode == "restart":
        subprocess.run([str(REPO / "tests" / "stack"), "restart-pg", "--dir", str(d)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fault = f"restart-pg took {time.monotonic() - t0:.2f} s"
    elif mode == "down":
        pg = ["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl", "-D",
              str(d / "pg" / "data"), "-w", "-t", "30"]
        subprocess.run(pg + ["-m", "fast", "stop"], check=True, stdout=subprocess.DEVNULL,
                       cwd="/tmp")
        time.sleep(stopped)
        subprocess.run(pg + ["-l", str(d / "pg" / "log"), "start"], check=True,
                       stdout=subprocess.DEVNULL, cwd="/tmp")
        fault = f"PostgreSQL down for {time.monotonic() - t0:.2f} s (stop, {stopped:.1f} s, start)"
    else:
        pm = int((d / "pg" / "data" / "postmaster.pid").read_text().split()[0])
        kids = subprocess.run(["pgrep", "-P", str(pm)], capture_output=True, text=True).stdout
        pids = [pm] + [int(p) for p in kids.split()]
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        time.sleep(stopped)
        for p in pids:
            os.kill(p, signal.SIGCONT)
        fault = f"PostgreSQL stopped (SIGSTOP) for {stopped:.1f} s"
    out, _ = wrk.communicate()
    bench = json.loads(next(l for l in out.splitlines() if l.startswith("BENCH "))[6:])
    lines = warn_lines(sizes)
    print(f"{fault}; wrk: {bench['requests']} calls in {bench['duration_us'] / 1e6:.1f} s "
          f"({bench['requests'] / (bench['duration_us'] / 1e6):.0f}/s), good {bench['good']}, "
          f"bad {bench['bad']} (first: {bench['first_bad'][:80]!r}), read errors "
          f"{bench['read_err']}, timeouts {bench['timeout_err']}, max latency "
          f"{bench['max_us'] / 1e6:.2f} s; {len(lines)} error-log lines at warn or worse")
    print_kinds(lines)
    os.unlink(sf.name)


if __name__ == "__main__":
    main()
