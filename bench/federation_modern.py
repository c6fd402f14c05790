#!/usr/bin/python3
"""bench/federation_modern.py — what a federated endpoint costs a 2026-07-28 (stateless) client:
sequential requests over one keep-alive connection each, through /mcp (the C test backend, a
2025-era backend: the era bridge) beside /mcp-fed3 (three <MCPMember>s, each that backend:
through the bridge too, each call routed by name) and /mcp-fed1 (the first member alone;
bench.federated_conf). Interleaved (rep 1 of each, then rep 2, ...); medians of the reps'
medians. Run as root from the repository (tests/stack starts a private stack):

    bench/federation_modern.py [--calls 200] [--reps 3] [--module PATH]

Points: tools/call of echo (/mcp) against c_echo (/mcp-fed3: the last member's, renamed both
ways); tools/list through /mcp, /mcp-fed1 and /mcp-fed3 (the three members asked at once and
merged). A latency benchmark of one client at a time, not a throughput one (bench/federation.py
is the 2025-era one with wrk).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (federated_conf, httpd_conf, FED_TOOL)

V = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


def request(s, url, rid, method, params, name=None):
    body = {"jsonrpc": "2.0", "id": rid, "method": method,
            "params": dict(params, _meta={"io.modelcontextprotocol/protocolVersion": V,
                                          "io.modelcontextprotocol/clientCapabilities": {}})}
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": V,
         "Mcp-Method": method}
    if name:
        h["Mcp-Name"] = name
    r = s.post(url, data=json.dumps(body), headers=h, timeout=30)
    if r.status_code != 200 or '"resultType":"complete"' not in r.text:
        raise SystemExit(f"{method} {url}: HTTP {r.status_code}: {r.text[:300]}")


def call(tool):
    return lambda s, url, i: request(s, url, i, "tools/call",
                                     {"name": tool, "arguments": {"text": "x"}}, tool)


def lists(s, url, i):
    request(s, url, i, "tools/list", {})


def measure(fn, s, url, n):
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(s, url, i + 1)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--module", default=os.path.join(bench.REPO, "mod_mcp", ".libs", "mod_mcp.so"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (tests/stack runs PostgreSQL and httpd as their users)")
    d = tempfile.mkdtemp(prefix="mcp-bench-fedmodern.", dir="/tmp")
    os.chmod(d, 0o755)
    module = os.path.join(d, "mod_mcp.so")
    shutil.copy(a.module, module)
    os.chmod(module, 0o644)
    conf = os.path.join(d, "federation.conf")
    with open(conf, "w") as f:
        f.write(bench.httpd_conf(2, 64) + bench.federated_conf())
    stack = os.path.join(bench.REPO, "tests", "stack")
    up = subprocess.run([stack, "up", "--dir", os.path.join(d, "stack"), "--module", module,
                         "--conf", conf], capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(up.stdout + up.stderr)
    try:
        env = dict(line.split("=", 1) for line in
                   open(os.path.join(d, "stack", "stack.env")).read().splitlines()
                   if "=" in line and not line.startswith("#"))
        gw = env["MCP_URL"].strip("'")
        fed3, fed1 = gw.replace("/mcp", "/mcp-fed3"), gw.replace("/mcp", "/mcp-fed1")
        points = [("tools/call", "/mcp echo", gw, call("echo")),
                  ("tools/call", f"/mcp-fed3 {bench.FED_TOOL}", fed3, call(bench.FED_TOOL)),
                  ("tools/list", "/mcp", gw, lists),
                  ("tools/list", "/mcp-fed1 (1 member)", fed1, lists),
                  ("tools/list", "/mcp-fed3 (3 members)", fed3, lists)]
        sessions = [requests.Session() for _ in points]
        for (_, _, url, fn), s in zip(points, sessions):   # pooled sessions, connections
            for i in range(20):
                fn(s, url, i)
        got = {label: [] for _, label, _, _ in points}
        for rep in range(a.reps):
            order = list(zip(points, sessions))
            order = order[rep % len(order):] + order[:rep % len(order)]
            for (method, label, url, fn), s in order:
                got[label].append(measure(fn, s, url, a.calls))
                print(f"  rep {rep + 1} {method} {label:24s} median {got[label][-1][0]:6.2f} ms"
                      f"  p90 {got[label][-1][1]:6.2f} ms", flush=True)
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for k, v in got.items()}
        print(f"\n{a.calls} sequential requests per rep, one keep-alive connection each, "
              f"medians of {a.reps} reps; a 2026-07-28 client, the C test backend (2025 era: "
              f"through the era bridge)")
        print("| request | endpoint | median ms | p90 ms |")
        print("|---|---|---:|---:|")
        for method, label, _, _ in points:
            print(f"| {method} | {label} | {med[label][0]:.2f} | {med[label][1]:.2f} |")
        c1, c3 = med["/mcp echo"][0], med[f"/mcp-fed3 {bench.FED_TOOL}"][0]
        l0, l1, l3 = (med["/mcp"][0], med["/mcp-fed1 (1 member)"][0],
                      med["/mcp-fed3 (3 members)"][0])
        print(f"\ntools/call: federated / single = {c3 / c1:.3f} (goal <= 1.1); tools/list: "
              f"3 members - /mcp = {l3 - l0:+.2f} ms, 1 member - /mcp = {l1 - l0:+.2f} ms, "
              f"3 members - 1 member = {l3 - l1:+.2f} ms")
    finally:
        subprocess.run([stack, "down", "--dir", os.path.join(d, "stack")], capture_output=True)
        shutil.rmtree(os.path.join(d, "stack", "pg", "data"), ignore_errors=True)


if __name__ == "__main__":
    main()
