#!/usr/bin/python3
"""bench/bridge_latency.py — the added latency of a call through the era bridge: N sequential
tools/call (echo) of a 2026-07-28 client through the bridge vs N of a 2025-11-25 session, both
through the same gateway to the same C test backend (2025 era only), over one keep-alive
connection each. Prints the median and p90 of each and their difference. Run as root from the
repository (tests/stack starts a private stack):

    bench/bridge_latency.py [--calls 200] [--url URL]

With --url, uses a running gateway location instead of starting a stack.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCEPT = "application/json, text/event-stream"


def modern(s, url, i):
    body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}
    r = s.post(url, data=json.dumps(body), headers={
        "Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call", "Mcp-Name": "echo"}, timeout=30)
    assert r.status_code == 200 and '"resultType":"complete"' in r.text, r.text


def native_session(s, url):
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}}}
    r = s.post(url, data=json.dumps(body), headers={"Content-Type": "application/json", "Accept": ACCEPT},
               timeout=30)
    sid = r.headers["Mcp-Session-Id"]
    s.post(url, data=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
           headers={"Content-Type": "application/json", "Accept": ACCEPT, "Mcp-Session-Id": sid,
                    "MCP-Protocol-Version": "2025-11-25"}, timeout=30)
    return sid


def native(s, url, sid, i):
    body = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
    r = s.post(url, data=json.dumps(body), headers={
        "Content-Type": "application/json", "Accept": ACCEPT, "Mcp-Session-Id": sid,
        "MCP-Protocol-Version": "2025-11-25"}, timeout=30)
    assert r.status_code == 200 and '"text":"x"' in r.text, r.text


def measure(fn, n):
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i + 1)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def run(url, n):
    s1, s2 = requests.Session(), requests.Session()
    sid = native_session(s2, url)
    modern(s1, url, 0)                       # the pooled session is made once, not measured
    for _ in range(20):                      # warm both paths
        modern(s1, url, 0)
        native(s2, url, sid, 0)
    b = measure(lambda i: modern(s1, url, i), n)
    a = measure(lambda i: native(s2, url, sid, i), n)
    print(f"{n} sequential tools/call (echo), one keep-alive connection each, {url}")
    print(f"  2025-11-25 session (native):  median {a[0]:.2f} ms  p90 {a[1]:.2f} ms")
    print(f"  2026-07-28 via the bridge:    median {b[0]:.2f} ms  p90 {b[1]:.2f} ms")
    print(f"  added by the bridge:          median {b[0] - a[0]:+.2f} ms  p90 {b[1] - a[1]:+.2f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--url")
    args = ap.parse_args()
    if args.url:
        run(args.url, args.calls)
        return
    d = tempfile.mkdtemp(prefix="mcp-bench-bridge.", dir="/tmp")
    os.chmod(d, 0o755)
    up = subprocess.run([os.path.join(REPO, "tests", "stack"), "up", "--dir", d], capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(up.stderr)
    try:
        env = dict(line.split("=", 1) for line in open(os.path.join(d, "stack.env")).read().splitlines()
                   if "=" in line and not line.startswith("#"))
        run(env["MCP_URL"].strip("'"), args.calls)
    finally:
        subprocess.run([os.path.join(REPO, "tests", "stack"), "down", "--dir", d], capture_output=True)


if __name__ == "__main__":
    main()
