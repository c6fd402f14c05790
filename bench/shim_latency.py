#!/usr/bin/python3
"""The era shim's added latency: N sequential tools/call (test_simple_text) by a 2025-era client
through the shim (a session; stamped, stored on a resumable stream, cleaned) vs N direct
stateless 2026-07-28 calls through the same <Location>, in front of tests/node/modern-backend.mjs.
Prints numbers; asserts nothing about time.

Usage: bench/shim_latency.py URL [N]      (URL: a Location with MCPBackendProtocols 2026-07-28,
                                            e.g. tests/integration/gateway-shim.conf's /mcp-shim)
"""
import json
import statistics
import sys
import time

import requests

URL = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
ACCEPT = "application/json, text/event-stream"


def timed(fn):
    out = []
    for i in range(N):
        t = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t) * 1000)
    return out


def shimmed():
    s = requests.Session()
    r = s.post(URL, headers={"Content-Type": "application/json", "Accept": ACCEPT}, data=json.dumps({
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}))
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "Mcp-Session-Id": r.headers["Mcp-Session-Id"],
         "MCP-Protocol-Version": "2025-11-25"}

    def one(i):
        r = s.post(URL, headers=h, data=json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                                                   "params": {"name": "test_simple_text", "arguments": {}}}))
        assert r.status_code == 200 and '"result"' in r.text, r.text
    return one


def direct():
    s = requests.Session()
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": "2026-07-28",
         "Mcp-Method": "tools/call", "Mcp-Name": "test_simple_text"}
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}

    def one(i):
        r = s.post(URL, headers=h, data=json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                                                   "params": {"name": "test_simple_text", "arguments": {},
                                                              "_meta": meta}}))
        assert r.status_code == 200 and '"result"' in r.text, r.text
    return one


def show(name, ms):
    ms = sorted(ms)
    print(f"{name:10} n={len(ms)} median={statistics.median(ms):.2f} ms  p90={ms[int(len(ms) * .9)]:.2f} ms  "
          f"mean={statistics.mean(ms):.2f} ms")


timed(direct())  # warm-up (connections, discover cache, prepared statements)
timed(shimmed())
d = timed(direct())
s = timed(shimmed())
show("direct", d)
show("shimmed", s)
print(f"added by the shim: median {statistics.median(s) - statistics.median(d):+.2f} ms")
