#!/usr/bin/python3
"""bench/stream_limits.py — what the per-session and per-principal stream limits cost (numbers,
no assertions).

    bench/stream_limits.py [SECONDS] [REPS]

Starts its own stack (tests/stack up --httpd 1) with more endpoints beside /mcp, which keeps the
defaults (MCPMaxStreamsPerSession 16, MCPMaxStreamsPerPrincipal 64, MCPMaxSessionsPerPrincipal
1000), as a new installation has them: /mcp-session-limit (only the per-session stream limit),
/mcp-principal-limit (only the per-principal ones) and /mcp-nolimits (none). Then wrk (bench/mcp.lua,
tools/call echo, 2025-11-25, concurrency 8) for SECONDS (default 8) on 1 session and on 32
sessions, against both endpoints, REPS (default 2) times, interleaved. Every client is
127.0.0.1, so every session has the same principal: each admission takes the principal's
advisory lock (mcp.admit_stream) and holds it until its transaction commits. Prints calls/s
and PostgreSQL CPU per call (all postgres processes, from /proc) for each run; a PostgreSQL
process that exits during a run takes its CPU time with it, so an odd low CPU figure is one to
discard (compare the runs' medians).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import load_stack_env  # noqa: E402
from mcp_client import McpSession    # noqa: E402

CONF = """<Location /mcp-nolimits>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
    MCPMaxStreamsPerSession 0
</Location>
<Location /mcp-session-limit>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxStreamsPerPrincipal 0
    MCPMaxSessionsPerPrincipal 0
</Location>
<Location /mcp-principal-limit>
    SetHandler mcp
    MCPBackend ${MCP_BACKEND_URL}
    MCPMaxStreamsPerSession 0
</Location>
"""
ENDPOINTS = ("/mcp", "/mcp-session-limit", "/mcp-principal-limit", "/mcp-nolimits")


def pg_cpu_seconds() -> float:
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open(f"/proc/{pid}/comm").read().strip() not in ("postgres", "postmaster"):
                continue
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def run(url: str, sessions: int, concurrency: int, seconds: float):
    sids = []
    for _ in range(sessions):
        s = McpSession(url)
        s.initialize()
        sids.append(s.session_id)
        s.close()
    with tempfile.NamedTemporaryFile("w", suffix=".sessions", delete=False) as f:
        f.write("\n".join(sids) + "\n")
    try:
        c0 = pg_cpu_seconds()
        out = subprocess.run(["wrk", "-t", "2", "-c", str(concurrency), "-d", f"{seconds:g}s",
                              "--timeout", "30s", "-s", str(REPO / "bench" / "mcp.lua"), url, "--",
                              f.name, "2025-11-25", "echo", '{"text":"hello"}', "2"],
                             capture_output=True, text=True, check=True).stdout
        c1 = pg_cpu_seconds()
    finally:
        os.unlink(f.name)
    b = json.loads(next(l for l in out.splitlines() if l.startswith("BENCH "))[6:])
    n = b["requests"]
    return n / (b["duration_us"] / 1e6), (c1 - c0) * 1000 / max(n, 1), b["bad"]


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    d = Path(tempfile.mkdtemp(prefix="mcp-limits-", dir="/tmp"))
    d.chmod(0o755)
    conf = d / "limits.conf"
    conf.write_text(CONF)
    conf.chmod(0o644)
    stack = REPO / "tests" / "stack"
    subprocess.run([str(stack), "up", "--dir", str(d / "stack"), "--httpd", "1", "--conf",
                    str(conf)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL)
    try:
        env = load_stack_env(d / "stack" / "stack.env")
        base = env["MCP_URL"].rsplit("/", 1)[0]
        print("| sessions | endpoint | calls/s | PostgreSQL CPU ms/call | failed |")
        print("|---:|---|---:|---:|---:|")
        for sessions in (1, 32):
            for _ in range(reps):
                for path in ENDPOINTS:
                    cps, cpu, bad = run(base + path, sessions, 8, seconds)
                    print(f"| {sessions} | `{path}` | {cps:,.0f} | {cpu:.3f} | {bad} |", flush=True)
    finally:
        subprocess.run([str(stack), "down", "--dir", str(d / "stack")], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
