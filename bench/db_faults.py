#!/usr/bin/python3
"""bench/db_faults.py — what a database fault costs under load (numbers, no assertions).

    bench/db_faults.py STACK_ENV restart|stop|down [SECONDS]

Creates 32 sessions on the stack's first httpd, runs wrk (bench/mcp.lua, tools/call echo,
$CONNECTIONS connections (16), 14 s) and, 4 s in, either restarts PostgreSQL (tests/stack restart-pg) or stops
every PostgreSQL process with SIGSTOP for SECONDS (default 6) and then SIGCONTs them, or shuts
PostgreSQL down (pg_ctl -m fast) for SECONDS and starts it again.
Prints the calls made, how many failed and how, and the error-log lines at warn or worse.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import load_stack_env  # noqa: E402
from mcp_client import McpSession    # noqa: E402


def main():
    env = load_stack_env(sys.argv[1])
    mode = sys.argv[2]
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
    lines = []
    for p, size in sizes.items():
        with open(p, "rb") as f:
            f.seek(size)
            lines += [l for l in f.read().decode(errors="replace").splitlines()
                      if re.search(r"\[[a-z_0-9]+:(warn|error|crit|alert|emerg)\]", l)]
    print(f"{fault}; wrk: {bench['requests']} calls in {bench['duration_us'] / 1e6:.1f} s "
          f"({bench['requests'] / (bench['duration_us'] / 1e6):.0f}/s), good {bench['good']}, "
          f"bad {bench['bad']} (first: {bench['first_bad'][:80]!r}), read errors "
          f"{bench['read_err']}, timeouts {bench['timeout_err']}, max latency "
          f"{bench['max_us'] / 1e6:.2f} s; {len(lines)} error-log lines at warn or worse")
    kinds = {}
    for l in lines:
        k = re.sub(r"^\[[^]]*\] \[([^]]*)\] \[pid [^]]*\] (\[client [^]]*\] )?", r"[\1] ", l)
        k = re.sub(r"\d+", "N", k)[:110]
        kinds[k] = kinds.get(k, 0) + 1
    for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d}  {k}")
    os.unlink(sf.name)


if __name__ == "__main__":
    main()
