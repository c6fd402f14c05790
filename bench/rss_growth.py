#!/usr/bin/python3
"""bench/rss_growth.py — httpd's RSS per child against the work done: a leak grows with the
calls or sessions, a warm-up levels off.

Usage: bench/rss_growth.py [--calls N] [--sessions N] [--step N] [--clients N]
                           [--httpd-env VAR=VALUE]...

Starts `tests/stack up --httpd 1` (event MPM, 2 children), then with --clients threads (default
4) makes --calls `echo` calls (default 140,000; a new session every 200 calls, as clients do),
then opens and deletes --sessions sessions (initialize + DELETE; default 16,000), printing each
child's RSS (KiB, from /proc/PID/smaps_rollup) every --step calls or sessions (default 20,000 /
2,000) with the growth since the line before. Stops the stack at the end. Run as root from the
repository (tests/stack's rules); not part of CI. README, "Benchmarks", says what it showed.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from mcp_client import McpSession  # noqa: E402

STACK = os.path.join(REPO, "tests", "stack")
sys.path.insert(0, BENCH)
from bench import read_env  # noqa: E402


def children_rss(parent):
    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout
    rss = {}
    for pid in out.split():
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                rss[int(pid)] = next(int(l.split()[1]) for l in f if l.startswith("Rss:"))
        except (OSError, StopIteration):
            pass
    return rss


def run_phase(what, total, step, clients, work, parent):
    """Runs work(state) (state: a dict of the thread's own) in `clients` threads until `total`
    are done; prints the children's RSS every `step`."""
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def worker():
        state = {}
        try:
            while not stop.is_set():
                work(state)
                with lock:
                    done[0] += 1
        except Exception as e:                       # noqa: BLE001 - reported below
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    start, mark, last = time.time(), 0, None
    while True:
        n = done[0]
        if n >= mark or n >= total or stop.is_set():
            rss = children_rss(parent)
            grew = "" if last is None else "  growth " + " ".join(
                f"{rss[p] - last[p]:+d}" for p in sorted(rss) if p in last)
            print(f"{what:>8} {n:>8}  {time.time() - start:6.0f} s  RSS KiB "
                  + " ".join(f"{p}:{rss[p]}" for p in sorted(rss)) + grew, flush=True)
            last, mark = rss, mark + step
        if n >= total or stop.is_set():
            break
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise SystemExit(f"bench/rss_growth.py: {what}: {errors[0]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=140000)
    ap.add_argument("--sessions", type=int, default=16000)
    ap.add_argument("--step", type=int, default=0, help="lines every N (default 20000 calls, "
                    "2000 sessions)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--httpd-env", action="append", default=[], metavar="VAR=VALUE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/rss_growth.py: must run as root (tests/stack)")
    d = subprocess.run(["mktemp", "-d", "/tmp/mcp-rss.XXXXXX"], check=True, capture_output=True,
                       text=True).stdout.strip()
    os.chmod(d, 0o755)
    cmd = [STACK, "up", "--dir", d, "--httpd", "1"]
    for e in args.httpd_env:
        cmd += ["--httpd-env", e]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = read_env(os.path.join(d, "stack.env"))
        url = env["MCP_URL"]
        parent = int(open(env["MCP_HTTPD_PIDFILES"].split()[0]).read().split()[0])

        def call(state):
            n = state.get("n", 0)
            s = state.get("s")
            if s is None or n % 200 == 0:
                if s is not None:
                    s.delete()
                    s.close()
                s = state["s"] = McpSession(url, timeout=30)
                s.initialize()
            state["n"] = n + 1
            s.call("tools/call", {"name": "echo", "arguments": {"text": f"rss-{state['n']}"}})

        def session(state):
            s = McpSession(url, timeout=30)
            s.initialize()
            s.delete()
            s.close()

        run_phase("calls", args.calls, args.step or 20000, args.clients, call, parent)
        run_phase("sessions", args.sessions, args.step or 2000, args.clients, session, parent)
    finally:
        subprocess.run([STACK, "down", "--dir", d], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
