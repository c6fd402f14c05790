#!/usr/bin/python3
"""bench/h2_rounds.py — era-bridge rounds pending on one HTTP/2 connection, then a call (issue 20).

    bench/h2_rounds.py [--module SO] [--rounds N (12)] [--tls] [--input-timeout S (10)]
                       [--json FILE]

Starts its own stack (tests/stack up --httpd 1 --http2 [--tls]; the C test backend, 2025 era
only, so a 2026-07-28 client is served through the era bridge), then, for each of two locations
of the same module — MCPAsyncStreams On (a round ends its request; the call's backend half goes
on in the event loop) and Off (the relay keeps its thread, and its HTTP/2 stream, until the
round's retry or expiry) — on one HTTP/2 connection:

  * opens N input-required rounds at once (`test_elicitation` calls, each answered with an
    InputRequiredResult), and takes how long until every one was answered;
  * then sends one `echo` call on the same connection and takes how long it waited for its
    answer (mod_http2 processes few streams of a connection at a time: a waiting round holds
    one, so with Off the call waits for a round to expire, MCPEraBridgeInputTimeout);
  * retries every round with its answer and counts the final results.

Numbers only, no assertions. Needs root (tests/stack).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from h2_client import H2Session  # noqa: E402

V = "2026-07-28"
CAPS = {"elicitation": {}, "sampling": {}}
ANSWER = {"action": "accept", "content": {"username": "al", "email": "al@example.com"}}
CONF = """# bench/h2_rounds.py
LogLevel warn
<Location /mcp-rounds>
    SetHandler mcp
    MCPBackend ${{MCP_BACKEND_URL}}
    MCPEraBridgeInputTimeout {timeout}
</Location>
<Location /mcp-rounds-threaded>
    SetHandler mcp
    MCPBackend ${{MCP_BACKEND_URL}}
    MCPEraBridgeInputTimeout {timeout}
    MCPAsyncStreams Off
</Location>
"""


def log(*a):
    print("h2_rounds:", *a, file=sys.stderr, flush=True)


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v.strip("'\"")
    return env


def tool(http, url, rid, name, arguments, extra=None, timeout=60):
    params = {"name": name, "arguments": arguments}
    params.update(extra or {})
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": V,
                       "io.modelcontextprotocol/clientCapabilities": CAPS,
                       "io.modelcontextprotocol/clientInfo": {"name": "h2_rounds", "version": "1"}}
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": name}
    r = http.post(url, data=body.encode(), headers=h, timeout=timeout)
    text = r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        msgs = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:")]
    else:
        msgs = [json.loads(text)]
    return msgs[-1]


def measure(http, url, n, tag, timeout):
    t0 = time.monotonic()
    with ThreadPoolExecutor(n) as pool:
        rounds = list(pool.map(lambda i: tool(http, url, f"{tag}-{i}", "test_elicitation",
                                              {"message": "Who are you?"}), range(n)))
    opened = time.monotonic() - t0
    ok = [r for r in rounds if r.get("result", {}).get("resultType") == "input_required"]
    t1 = time.monotonic()
    try:
        after = tool(http, url, f"{tag}-after", "echo", {"text": "x"}, timeout=timeout)
        call_ok = "result" in after
    except Exception as e:  # noqa: BLE001 - reported, not raised
        log(f"{tag}: the call after the rounds failed: {e}")
        call_ok = False
    call_s = time.monotonic() - t1
    answered = 0
    for i, r in enumerate(ok):
        (name, _), = r["result"]["inputRequests"].items()
        try:
            got = tool(http, url, f"{tag}-{i}-retry", "test_elicitation",
                       {"message": "Who are you?"},
                       extra={"requestState": r["result"]["requestState"],
                              "inputResponses": {name: ANSWER}})
            answered += "al@example.com" in json.dumps(got.get("result", {}))
        except Exception as e:  # noqa: BLE001
            log(f"{tag}: retry {i} failed: {e}")
    return {"rounds": n, "rounds_answered": len(ok), "rounds_seconds": round(opened, 3),
            "call_answered": call_ok, "call_seconds": round(call_s, 3),
            "retries_answered": answered}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default=os.path.join(REPO, "mod_mcp", ".libs", "mod_mcp.so"))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--input-timeout", type=int, default=10,
                    help="MCPEraBridgeInputTimeout of both locations (seconds)")
    ap.add_argument("--json")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="h2-rounds.", dir="/tmp")
    conf = d + ".conf"
    with open(conf, "w") as f:
        f.write(CONF.format(timeout=a.input_timeout))
    cmd = [os.path.join(REPO, "tests", "stack"), "up", "--dir", d, "--httpd", "1", "--http2",
           "--module", a.module, "--conf", conf] + (["--tls"] if a.tls else [])
    log(" ".join(cmd[1:]))
    p = subprocess.run(cmd, text=True, capture_output=True)
    if p.returncode:
        sys.exit(f"tests/stack up failed:\n{p.stderr[-3000:]}")
    res = {"config": {"rounds": a.rounds, "tls": a.tls, "input_timeout_s": a.input_timeout}}
    try:
        env = read_env(os.path.join(d, "stack.env"))
        base = (env["MCP_HTTPS_URLS"] if a.tls else env["MCP_URLS"]).split()[0].rsplit("/", 1)[0]
        for name, path in (("on", "/mcp-rounds"), ("off", "/mcp-rounds-threaded")):
            http = H2Session(ca=env.get("MCP_CA") or None)
            try:
                res[name] = measure(http, base + path, a.rounds, f"h2r-{name}",
                                    a.input_timeout + 30)
            finally:
                http.close()
            log(f"MCPAsyncStreams {name}: {res[name]}")
    finally:
        p = subprocess.run([os.path.join(REPO, "tests", "stack"), "down", "--dir", d],
                           text=True, capture_output=True)
        if p.returncode:
            log(f"tests/stack down failed: {p.stderr[-500:]}")
        os.unlink(conf)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
