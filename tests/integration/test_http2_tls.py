"""mod_mcp behind mod_http2 and mod_ssl, as real Apache sites serve it (issue 11).

* The curl sequence a new user tries (initialize, notifications/initialized, a tools/call of
  `slow` with a progress token) over h2c and over h2+TLS: every progress event arrives live,
  then the result; and a resumption with Last-Event-ID over h2 on the other instance finishes
  a call whose client went away.
* An HTTP/2 stream reset by the client ends only that stream: another stream of the same
  connection goes on, the connection stays usable, and the reset call is still relayed and
  stored (disconnect is not cancellation).
* HTTP/1.1 over TLS: a stream that the gateway ends early (MCPStreamCloseAfter) ends with a TLS
  close_notify, not a truncated connection.
* The wake-up router has a slot for every thread that can run a request: the MPM's threads and
  mod_http2's workers.

The other stream tests run over every mode too (test_streams.py, test_cross_process.py).
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import Wire, _wanted_modes
from mcp_client import McpSession
from test_streams import stream_of, stream_status
from waiting import wait_for

ACCEPT = "application/json, text/event-stream"


@pytest.fixture(params=["h2c", "h2tls"])
def wire(request, stack) -> Wire:
    mode = request.param
    if mode not in _wanted_modes():
        pytest.skip(f"{mode}: not in MCP_TEST_MODES")
    if not stack.get("MCP_HTTP2") or (mode == "h2tls" and not stack.get("MCP_HTTPS_URLS")):
        pytest.skip(f"{mode}: the stack was started without --http2/--tls")
    return Wire(mode, stack)


def slow(count, interval_ms, token="p"):
    return {"name": "slow", "arguments": {"count": count, "interval_ms": interval_ms},
            "_meta": {"progressToken": token}}


def seq_of(event_id: str) -> int:
    return int(event_id.split("-")[1])


def response_stored_at(pg, stream_id) -> float:
    """When the stream's JSON-RPC response was stored (epoch seconds)."""
    with pg.cursor() as cur:
        cur.execute("""SELECT extract(epoch FROM created_at)::float8 FROM mcp.events
                        WHERE stream_id = %s AND direction = 'out' AND message ? 'result'""",
                    (stream_id,))
        return cur.fetchone()[0]


# ---- curl, as in the issue -----------------------------------------------------------------------


class Curl:
    """curl with HTTP/2: --http2-prior-knowledge (h2c) or --http2 + --cacert (TLS, ALPN)."""

    def __init__(self, wire: Wire):
        self.wire = wire
        self.opts = (["--http2", "--cacert", wire.ca] if wire.mode == "h2tls"
                     else ["--http2-prior-knowledge"])
        self.session_id = None

    def args(self, url, headers, data=None):
        a = ["curl", "-sS", "-N", *self.opts, "-H", f"Accept: {ACCEPT}"]
        if data is not None:
            a += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(data)]
        if self.session_id:
            a += ["-H", f"Mcp-Session-Id: {self.session_id}", "-H", "MCP-Protocol-Version: 2025-11-25"]
        for k, v in headers.items():
            a += ["-H", f"{k}: {v}"]
        return a + [url]

    def run(self, url, data, headers=None):
        """One exchange; returns (status, headers dict, body)."""
        p = subprocess.run(self.args(url, headers or {}, data) + ["-D", "-", "-w", "\nHTTPVERSION=%{http_version}"],
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        head, _, body = p.stdout.decode().partition("\r\n\r\n")
        status = int(head.split()[1])
        hdrs = {k.strip().lower(): v.strip() for k, _, v in
                (line.partition(":") for line in head.split("\r\n")[1:])}
        body, _, version = body.rpartition("\nHTTPVERSION=")
        assert version == "2", f"curl spoke HTTP/{version}, not HTTP/2"
        return status, hdrs, body

    def initialize(self, url):
        status, hdrs, body = self.run(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "curl-http2", "version": "0"}}})
        assert status == 200, body
        self.session_id = hdrs["mcp-session-id"]
        status, _, body = self.run(url, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202, body

    def stream(self, url, data=None, headers=None):
        """Start a streaming exchange; yields (receipt time, SSE field line) as they come."""
        p = subprocess.Popen(self.args(url, headers or {}, data), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, bufsize=1)
        self.proc = p
        try:
            for line in p.stdout:
                yield time.time(), line.rstrip("\n")
        finally:
            if p.poll() is None:
                p.kill()
            p.wait(10)
            p.stdout.close()
            p.stderr.close()


def sse_events(lines):
    """(time, {"id":..., "data":..., "retry":...}) per dispatched block."""
    block, first = {}, None
    for t, line in lines:
        if line == "":
            if block:
                yield first, block
            block, first = {}, None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        block[field] = value[1:] if value.startswith(" ") else value
        first = first or t


def test_curl_tools_call_streams_progress_live(wire, pg):
    curl = Curl(wire)
    url = wire.urls[0]
    curl.initialize(url)
    events = list(sse_events(curl.stream(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                "params": slow(4, 300)})))
    assert curl.proc.returncode == 0, curl.proc.stderr
    blocks = [b for _, b in events]
    assert blocks[0]["data"] == "" and blocks[0]["retry"] == "1000", blocks[0]   # priming
    stream_id = stream_of(blocks[0]["id"])
    messages = [json.loads(b["data"]) for b in blocks[1:]]
    assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2, 3, 4], messages
    assert messages[-1]["result"]["content"][0]["text"] == "slow done: 4 steps"
    assert [seq_of(b["id"]) for b in blocks] == list(range(1, 7))
    # Live: every progress event reached curl before the gateway even had the result.
    result_at = response_stored_at(pg, stream_id)
    late = [(i + 1, round(t - result_at, 3)) for i, (t, _) in enumerate(events[1:-1]) if t >= result_at]
    assert not late, f"progress events that came only after the result was stored: {late}"


def test_curl_resume_over_http2_on_the_other_instance(wire, pg):
    curl = Curl(wire)
    host1, host2 = wire.urls[:2]
    curl.initialize(host1)
    got = []
    lines = curl.stream(host1, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": slow(6, 250)})
    for _, block in sse_events(lines):
        got.append(block)
        if len(got) == 2:           # the priming event and the first progress event
            break
    lines.close()                   # curl is killed: its connection, and the stream, are gone
    stream_id = stream_of(got[0]["id"])
    resumed = [b for _, b in sse_events(curl.stream(host2, headers={"Last-Event-ID": got[-1]["id"]}))]
    assert curl.proc.returncode == 0, curl.proc.stderr
    seqs = [seq_of(b["id"]) for b in got + resumed]
    assert seqs == list(range(1, 2 + 6 + 1)), seqs        # every event once, in order
    assert json.loads(resumed[-1]["data"])["result"]["content"][0]["text"] == "slow done: 6 steps"
    assert stream_status(pg, stream_id) == "complete"


# ---- a reset stream ends only itself --------------------------------------------------------------


def error_log(stack, instance=0) -> str:
    return Path(stack["MCP_HTTPD_ERROR_LOGS"].split()[instance]).read_text(errors="replace")


def test_reset_stream_ends_only_that_stream(wire, mcp, pg, stack):
    s = mcp()
    s.initialize()
    conn = s.http.connection(s.url)
    a = s.request_stream("tools/call", slow(10, 200, "a"), include_empty=True)
    a_got = [next(a), next(a)]
    ra = s.last_response
    b = s.request_stream("tools/call", slow(6, 200, "b"), include_empty=True)
    b_got = [next(b), next(b)]
    rb = s.last_response
    assert s.http.connection(s.url) is conn and ra.stream_id != rb.stream_id, "not one connection"
    a_id = stream_of(a_got[0].id)

    ra.close()                      # RST_STREAM (CANCEL) for the first call's stream only
    b_got += list(b)
    assert [seq_of(e.id) for e in b_got] == list(range(1, 2 + 6 + 1))
    assert b_got[-1].json["result"]["content"][0]["text"] == "slow done: 6 steps"

    # The connection is the same one, and still takes new streams.
    assert s.call("tools/call", {"name": "echo", "arguments": {"text": "after the reset"}})
    assert s.http.connection(s.url) is conn and conn.dead is None
    assert s.last_response.stream_id > rb.stream_id

    # The gateway saw the first call's client go, and relayed and stored it to the end anyway.
    wait_for(lambda: re.search(rf"stream {a_id}: the client (closed the connection|went away)",
                               error_log(stack)), what="the gateway noticing the reset stream")
    wait_for(lambda: stream_status(pg, a_id) == "complete", what="the reset call's completion")
    with pg.cursor() as cur:
        cur.execute("""SELECT message FROM mcp.events WHERE stream_id = %s ORDER BY seq DESC LIMIT 1""",
                    (a_id,))
        assert cur.fetchone()[0]["result"]["content"][0]["text"] == "slow done: 10 steps"


# ---- HTTP/1.1 over TLS ----------------------------------------------------------------------------


def test_tls_stream_ended_early_closes_with_close_notify(stack, pg):
    """MCPStreamCloseAfter ends an HTTP/1.1 response early and closes the connection at once
    (while the relay goes on): over TLS with a close_notify first, so the client can tell the
    end from a truncation."""
    if not stack.get("MCP_HTTPS_URL"):
        pytest.skip("the stack was started without --tls")
    url = stack["MCP_HTTPS_URL"].rsplit("/", 1)[0] + "/mcp-poll"     # MCPStreamCloseAfter 500ms
    s = McpSession(url, ca=stack["MCP_CA"])      # HTTP/1.1 over TLS
    s.initialize()
    s.close()
    u = urlsplit(url)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": slow(10, 200)})
    head = (f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nAccept: {ACCEPT}\r\n"
            f"Content-Type: application/json\r\nMcp-Session-Id: {s.session_id}\r\n"
            f"MCP-Protocol-Version: {s.protocol_version}\r\nContent-Length: {len(body)}\r\n\r\n")
    ctx = ssl.create_default_context(cafile=stack["MCP_CA"])
    ctx.set_alpn_protocols(["http/1.1"])
    ctx.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)   # Debian's default forgives it
    with socket.create_connection((u.hostname, u.port), timeout=20) as raw, \
            ctx.wrap_socket(raw, server_hostname=u.hostname) as tls:
        tls.sendall(head.encode() + body.encode())
        received = b""
        while True:
            chunk = tls.recv(65536)   # raises SSLEOFError on a close without close_notify
            if not chunk:
                break
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        stream_id = stream_of(re.search(rb"id: (\d+-\d+)", body).group(1).decode())
        # The end came while the gateway still relays, not when the request's thread is done.
        assert stream_status(pg, stream_id) == "open", "the connection was closed only at the end"
    assert head.startswith(b"HTTP/1.1 200"), head
    if b"chunked" in head.lower():
        assert body.endswith(b"retry: 1000\n\n\r\n0\r\n\r\n"), body[-200:]
    else:   # announced with Connection: close, the body ends with the connection
        assert b"close" in head.lower() and body.endswith(b"retry: 1000\n\n"), (head, body[-200:])
    assert b'"result"' not in body, "the stream was not ended early"


# ---- the router's size ----------------------------------------------------------------------------


def test_router_has_a_slot_for_every_thread_that_can_run_a_request(stack):
    if not stack.get("MCP_HTTP2"):
        pytest.skip("the stack was started without --http2")
    log = error_log(stack)
    h2 = re.findall(r"h2_workers: created with min=(\d+) max=(\d+)", log)
    ours = re.findall(r"stream followers: room for (\d+) per process \((\d+) MPM threads, (\d+) "
                      r"mod_http2 workers\)", log)
    assert h2 and ours, "missing log lines (LogLevel info mcp:debug or more is needed)"
    room, mpm, workers = map(int, ours[-1])
    assert workers == int(h2[-1][1]), (ours[-1], h2[-1])      # mod_http2's own maximum
    assert room == mpm + workers and mpm > 0
