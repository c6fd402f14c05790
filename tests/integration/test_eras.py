"""Both protocol eras on one endpoint, with a real backend of both eras behind the gateway
(tests/node/modern-backend.mjs on the TypeScript SDK v2) in a stack of its own
(tests/integration/gateway-eras.conf):

* routing: GET/DELETE with a 2026-07-28 header -> 405 Allow: POST; a modern header without the
  _meta claim -> 400/-32602; unsupported versions -> 400/-32022 with data.supported/requested
  in both eras; initialize asking for 2026-07-28 gets a 2025-11-25 session; a backend that
  said to serve the 2025 era only (MCPBackendProtocols) -> -32022 listing what it serves;
* the transport rules: Mcp-Method/Mcp-Name against the body (=?base64?...?=, whitespace,
  header-name case, a header sent twice), required _meta, one message per POST;
* what is stored: a stream with no session (protocol version, principal), every message, the
  audit view; SSE without event ids; Mcp-Param-* reach the backend untouched;
* disconnect = cancellation (HTTP/1.1 and an HTTP/2 stream reset): the backend's request is
  aborted at once and the stream is stored 'cancelled'; subscriptions/listen counts against
  MCPMaxStreamsPerPrincipal; per-tool Require lines refuse stateless calls too (stored);
* a multi-round trip (InputRequiredResult + requestState) passes through;
* the TypeScript SDK v2 client (tests/node/client-2026.mjs), pinned to 2026-07-28 and in auto
  mode, through the gateway; in auto mode against a 2025-only backend it falls back;
* tests/node/client-2026-bridge.mjs (the era bridge's client script) against this 2026-07-28
  backend, so that the script itself stays sound (run_step_script runs it anywhere).
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from conftest import database, node_backend, own_stack, run_dir
from mcp_client import iter_sse
from test_node_peers import node22, run_node_script  # noqa: F401  (a fixture, and a helper)
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "node"
STACK = REPO / "tests" / "stack"
V = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
ALICE = ("alice", "alice-pw")


def meta(caps=None, **more):
    m = {"io.modelcontextprotocol/protocolVersion": V,
         "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {}}
    m.update(more)
    return m


def call_body(rid, name, arguments=None, **meta_more):
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments or {}, "_meta": meta(**meta_more)}}


def headers(method, name=None, version=V, **more):
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": version,
         "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    h.update(more)
    return h


def post(url, body, hdrs, auth=None, stream=False):
    return requests.post(url, data=json.dumps(body), headers=hdrs, auth=auth, stream=stream, timeout=30)


def error_of(resp):
    return resp.json()["error"]


def messages_of(resp):
    """The JSON-RPC messages of an answer, JSON or SSE (and the raw SSE text)."""
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        text = resp.text
        return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")], text
    return [resp.json()], ""


# ---- the stack -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eras(node22):  # noqa: F811  (the fixture imported above)
    d = run_dir("mcp-eras.")
    with node_backend(node22, d, "modern-backend.mjs") as port, \
            own_stack(d, "--http2", "--backend", f"http://127.0.0.1:{port}/mcp", "--conf",
                      str(Path(__file__).resolve().parent / "gateway-eras.conf")) as env:
        base = env["MCP_URL"].rsplit("/", 1)[0]
        env.update(URL=f"{base}/mcp-2026", AUTH_URL=f"{base}/mcp-2026-auth", AUTHZ_URL=f"{base}/mcp-2026-authz",
                   LEGACY_URL=f"{base}/mcp-legacy-only", DIR=str(d))
        yield env


@pytest.fixture
def db(eras):
    with database(eras) as conn:
        yield conn


def stream_of(db, rid):
    """The stateless stream of the request with JSON-RPC id rid (ids are unique per test)."""
    with db.cursor() as cur:
        cur.execute("""SELECT id, session_id, kind, method, status, protocol_version, principal
                         FROM mcp.streams WHERE request_id = %s::jsonb ORDER BY id DESC LIMIT 1""",
                    (json.dumps(rid),))
        row = cur.fetchone()
    keys = ("id", "session_id", "kind", "method", "status", "protocol_version", "principal")
    return dict(zip(keys, row)) if row else None


def events_of(db, stream_id):
    with db.cursor() as cur:
        cur.execute("""SELECT seq, direction, kind, session_id, principal, message_text FROM mcp.events
                        WHERE stream_id = %s ORDER BY seq""", (stream_id,))
        return cur.fetchall()


# ---- routing ---------------------------------------------------------------------------------


def test_get_and_delete_with_a_modern_header_are_405(eras):
    for method in ("GET", "DELETE"):
        r = requests.request(method, eras["URL"], headers={"MCP-Protocol-Version": V, "Accept": ACCEPT},
                             timeout=10)
        assert r.status_code == 405, (method, r.text)
        assert r.headers["Allow"] == "POST"
        assert r.json()["error"]["code"] == -32000


def test_modern_header_without_claim_is_400_invalid_params(eras):
    r = post(eras["URL"], {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
             headers("tools/list"))
    assert r.status_code == 400
    assert error_of(r)["code"] == -32602
    assert "_meta" in error_of(r)["message"]


def test_unsupported_version_is_32022_in_both_eras(eras):
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list",
            "params": {"_meta": {**meta(), "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}}
    r = post(eras["URL"], body, headers("tools/list", version="2099-01-01"))
    assert r.status_code == 400
    e = error_of(r)
    assert e["code"] == -32022 and e["data"] == {"supported": [V], "requested": "2099-01-01"}
    assert r.json()["id"] == 7
    # The session era: an MCP-Protocol-Version the gateway does not serve.
    r = requests.post(eras["URL"], data=json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
                      headers={"Content-Type": "application/json", "Accept": ACCEPT,
                               "MCP-Protocol-Version": "2024-01-01"}, timeout=10)
    assert r.status_code == 400
    e = error_of(r)
    assert e["code"] == -32022
    assert e["data"] == {"supported": ["2025-11-25", "2025-06-18", "2025-03-26"], "requested": "2024-01-01"}


def test_a_2025_only_backend_answers_32022_with_what_it_serves(eras):
    r = post(eras["LEGACY_URL"], {"jsonrpc": "2.0", "id": 9, "method": "server/discover",
                                  "params": {"_meta": meta()}}, headers("server/discover"))
    assert r.status_code == 400
    e = error_of(r)
    assert e["code"] == -32022
    assert e["data"]["supported"] == ["2025-11-25", "2025-06-18", "2025-03-26"]
    assert e["data"]["requested"] == V


def test_initialize_asking_for_2026_gets_a_2025_11_25_session(eras, db):
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = requests.post(eras["URL"], data=json.dumps(body),
                      headers={"Content-Type": "application/json", "Accept": ACCEPT,
                               "MCP-Protocol-Version": V}, timeout=10)
    assert r.status_code == 200, r.text
    sid = r.headers["Mcp-Session-Id"]
    msgs, _ = messages_of(r)
    assert msgs[-1]["result"]["protocolVersion"] == "2025-11-25"
    with db.cursor() as cur:
        cur.execute("SELECT protocol_version FROM mcp.sessions WHERE id = %s", (sid,))
        assert cur.fetchone()[0] == "2025-11-25"
        # The client's own words are what is stored.
        cur.execute("""SELECT message_text FROM mcp.events WHERE session_id = %s AND direction = 'in'
                        ORDER BY id LIMIT 1""", (sid,))
        assert json.loads(cur.fetchone()[0])["params"]["protocolVersion"] == V
    requests.delete(eras["URL"], headers={"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"},
                    timeout=10)


# ---- the transport rules ---------------------------------------------------------------------


@pytest.mark.parametrize("hdrs, code", [
    ({"Mcp-Method": "tools/list"}, -32020),                       # another method
    ({"Mcp-Method": None}, -32020),                               # missing
    ({"Mcp-Name": None}, -32020),                                 # missing name
    ({"Mcp-Name": "test_simple_tex"}, -32020),                    # another name
    ({"Mcp-Name": "=?base64?dGVzdF9zaW1wbGVfdGV4dA?"}, -32020),   # malformed encoding
    ({"Mcp-Name": "=?base64?@@@@?="}, -32020),                    # not base64
    ({"MCP-Protocol-Version": None}, -32020),                     # missing version header
    ({"MCP-Protocol-Version": "2025-11-25"}, -32020),             # disagrees with _meta
])
def test_header_mismatches_are_400_32020(eras, hdrs, code):
    h = headers("tools/call", "test_simple_text")
    for k, v in hdrs.items():
        if v is None:
            h.pop(k, None)
        else:
            h[k] = v
    r = post(eras["URL"], call_body(11, "test_simple_text"), h)
    assert r.status_code == 400, r.text
    assert error_of(r)["code"] == code
    assert r.json()["id"] == 11


def test_encoded_spaced_and_any_case_headers_are_accepted(eras):
    name = "=?base64?" + base64.b64encode(b"test_simple_text").decode() + "?="
    h = {"content-type": "application/json", "accept": ACCEPT, "mcp-protocol-version": f"{V}  ",
         "MCP-METHOD": "tools/call\t ", "mcp-name": name}
    r = post(eras["URL"], call_body(12, "test_simple_text"), h)
    assert r.status_code == 200, r.text
    msgs, _ = messages_of(r)
    assert msgs[-1]["result"]["content"][0]["text"].startswith("This is a simple text")


def test_a_header_sent_twice_is_refused(eras):
    u = urlsplit(eras["URL"])
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    body = json.dumps(call_body(13, "test_simple_text")).encode()
    conn.putrequest("POST", u.path)
    for k, v in [("Content-Type", "application/json"), ("Accept", ACCEPT), ("MCP-Protocol-Version", V),
                 ("Mcp-Method", "tools/call"), ("Mcp-Name", "test_simple_text"),
                 ("Mcp-Name", "test_simple_text"), ("Content-Length", str(len(body)))]:
        conn.putheader(k, v)
    conn.endheaders(body)
    r = conn.getresponse()
    answer = json.loads(r.read())
    conn.close()
    assert r.status == 400
    assert answer["error"]["code"] == -32020 and "twice" in answer["error"]["message"]


def test_required_meta_and_one_message_per_post(eras):
    body = call_body(14, "test_simple_text")
    del body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    r = post(eras["URL"], body, headers("tools/call", "test_simple_text"))
    assert r.status_code == 400 and error_of(r)["code"] == -32602
    assert "clientCapabilities" in error_of(r)["message"]
    r = post(eras["URL"], [call_body(15, "test_simple_text")], headers("tools/call", "test_simple_text"))
    assert r.status_code == 400 and error_of(r)["code"] == -32600
    r = post(eras["URL"], {"jsonrpc": "2.0", "id": 16, "result": {"_meta": meta()}},
             headers("tools/call"))
    assert r.status_code in (400,)   # a response carries no claim: the claim-less modern header rule
    assert error_of(r)["code"] in (-32600, -32602)


# ---- forwarding and storing --------------------------------------------------------------------


def test_a_call_is_a_stream_without_a_session_and_every_message_is_stored(eras, db):
    body = call_body(21, "test_tool_with_progress", progressToken="p-21")
    r = post(eras["AUTH_URL"], body, headers("tools/call", "test_tool_with_progress"), auth=ALICE)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert r.headers["X-Accel-Buffering"] == "no"
    assert "Mcp-Session-Id" not in r.headers
    msgs, raw = messages_of(r)
    assert not any(line.startswith("id:") for line in raw.splitlines()), "modern events carry no ids"
    assert [m.get("method") for m in msgs[:-1]] == ["notifications/progress"] * 3
    assert msgs[-1]["id"] == 21 and msgs[-1]["result"]["content"][0]["text"] == "p-21"

    st = stream_of(db, 21)
    assert st["session_id"] is None and st["kind"] == "request" and st["method"] == "tools/call"
    assert st["status"] == "complete" and st["protocol_version"] == V and st["principal"] == "alice"
    rows = events_of(db, st["id"])
    assert [(s, d, k) for s, d, k, *_ in rows] == [(0, "in", "message")] + \
        [(i, "out", "message") for i in range(1, 5)]
    assert all(r[3] is None and r[4] == "alice" for r in rows)
    assert json.loads(rows[0][5]) == body
    assert [json.loads(r[5]) for r in rows[1:]] == msgs
    with db.cursor() as cur:
        cur.execute("""SELECT "user", tool, outcome FROM mcp.tool_calls WHERE stream_id = %s""", (st["id"],))
        assert cur.fetchone() == ("alice", "test_tool_with_progress", "ok")


def test_mcp_headers_reach_the_backend_untouched(eras):
    name = "=?base64?" + base64.b64encode(b"echo_headers").decode() + "?="
    h = headers("tools/call", name, **{"Mcp-Param-Region": "eu-west =?base64?eA==?="})
    r = post(eras["URL"], call_body(22, "echo_headers"), h)
    assert r.status_code == 200, r.text
    msgs, _ = messages_of(r)
    seen = json.loads(msgs[-1]["result"]["content"][0]["text"])
    assert seen["mcp-method"] == "tools/call"
    assert seen["mcp-name"] == name
    assert seen["mcp-param-region"] == "eu-west =?base64?eA==?="
    assert seen["mcp-protocol-version"] == V


def test_a_backend_failure_is_32603_never_the_retired_32002(eras):
    url = eras["URL"].replace("/mcp-2026", "/mcp-2026-unreachable")
    r = post(url, call_body(23, "test_simple_text"), headers("tools/call", "test_simple_text"))
    assert r.status_code == 502, r.text
    err = error_of(r)
    assert err["code"] == -32603, err
    assert "backend" in err["message"], err


def test_a_notification_is_stored_and_accepted(eras, db):
    body = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": V, "marker": "n-23"}}}
    r = post(eras["URL"], body, headers("notifications/roots/list_changed"))
    assert r.status_code == 202, r.text
    with db.cursor() as cur:
        cur.execute("""SELECT session_id, stream_id FROM mcp.events
                        WHERE direction = 'in' AND message -> 'params' -> '_meta' ->> 'marker' = 'n-23'""")
        assert cur.fetchall() == [(None, None)]


def test_require_mcp_tool_refuses_a_stateless_call_and_the_refusal_is_stored(eras, db):
    r = post(eras["AUTHZ_URL"], call_body(27, "test_simple_text"), headers("tools/call", "test_simple_text"))
    assert r.status_code == 200, r.text
    r = post(eras["AUTHZ_URL"], call_body(28, "echo_headers"), headers("tools/call", "echo_headers"))
    assert r.status_code == 403, r.text
    assert r.json()["id"] == 28 and "echo_headers" in r.json()["error"]["message"]
    with db.cursor() as cur:
        cur.execute("""SELECT session_id, stream_id, direction FROM mcp.events
                        WHERE message -> 'id' = '28'::jsonb AND stream_id IS NULL ORDER BY id""")
        assert cur.fetchall() == [(None, None, "in"), (None, None, "out")]


def test_require_mcp_tool_filters_a_stateless_tools_list(eras, db):
    body = {"jsonrpc": "2.0", "id": 29, "method": "tools/list", "params": {"_meta": meta()}}
    everything = [t["name"] for t in messages_of(post(eras["URL"], body,
                                                      headers("tools/list")))[0][-1]["result"]["tools"]]
    assert "test_simple_text" in everything and len(everything) > 1
    body["id"] = 30
    r = post(eras["AUTHZ_URL"], body, headers("tools/list"))
    assert r.status_code == 200, r.text
    answer = messages_of(r)[0][-1]
    assert [t["name"] for t in answer["result"]["tools"]] == ["test_simple_text"]
    # stored as sent
    stored = [json.loads(e[5]) for e in events_of(db, stream_of(db, 30)["id"]) if e[1] == "out"]
    assert stored[-1] == answer


def test_an_input_required_round_passes_through(eras):
    caps = {"elicitation": {}}
    r = post(eras["URL"], call_body(24, "confirm_action", {"action": "deploy"}, caps=caps),
             headers("tools/call", "confirm_action"))
    assert r.status_code == 200, r.text
    first = messages_of(r)[0][-1]["result"]
    assert first["resultType"] == "input_required"
    assert "confirm" in first["inputRequests"] and first["requestState"]
    retry = call_body(25, "confirm_action", {"action": "deploy"}, caps=caps)
    retry["params"]["inputResponses"] = {"confirm": {"action": "accept", "content": {"ok": True}}}
    retry["params"]["requestState"] = first["requestState"]
    r = post(eras["URL"], retry, headers("tools/call", "confirm_action"))
    done = messages_of(r)[0][-1]["result"]
    assert done["resultType"] == "complete"
    assert done["content"][0]["text"].startswith("did deploy")
    # A tampered state is the backend's to refuse, and it does.
    retry["id"] = 26
    retry["params"]["requestState"] = first["requestState"][:-2] + ("AA" if not first["requestState"].endswith("AA") else "BB")
    r = post(eras["URL"], retry, headers("tools/call", "confirm_action"))
    assert "error" in messages_of(r)[0][-1]


# ---- disconnect = cancellation, listen and the limits ------------------------------------------


def wait_for_backend_abort(eras, token, rid):
    """Until the backend's cancelled_calls (asked with request id rid) lists token: it saw the
    slow_count call with that progress token aborted."""
    def saw_it():
        rr = post(eras["URL"], call_body(rid, "cancelled_calls"), headers("tools/call", "cancelled_calls"))
        return token in json.loads(messages_of(rr)[0][-1]["result"]["content"][0]["text"])
    wait_for(saw_it, timeout=10, what="the backend to see its request aborted")


def test_closing_the_response_cancels_the_backend_request(eras, db):
    token = "cancel-31"
    body = call_body(31, "slow_count", {"count": 100, "ms": 100}, progressToken=token)
    r = post(eras["URL"], body, headers("tools/call", "slow_count"), stream=True)
    assert r.status_code == 200
    got = []
    events = iter_sse(r)
    for ev in events:
        got.append(json.loads(ev.data))
        if len(got) == 2:
            break
    events.close()   # closes the response: the client goes away, which is the cancellation

    st = wait_for(lambda: (s := stream_of(db, 31)) and s["status"] != "open" and s,
                  timeout=15, what="the stream to end")
    assert st["status"] == "cancelled"

    wait_for_backend_abort(eras, token, 32)
    rows = events_of(db, st["id"])
    progress = [json.loads(r[5]) for r in rows if r[1] == "out"]
    assert len(progress) < 20, "the relay went on after the cancellation"
    assert not any("result" in m for m in progress)
    with db.cursor() as cur:
        cur.execute("SELECT outcome FROM mcp.tool_calls WHERE stream_id = %s", (st["id"],))
        assert cur.fetchone()[0] == "cancelled"


def parked(eras) -> int:
    base = eras["URL"].rsplit("/", 1)[0]
    text = requests.get(base + "/mcp-eras-status?auto", timeout=10).text
    got = dict(l.split(": ", 1) for l in text.splitlines() if ": " in l)
    return int(got.get("MCPParkedStreams", "-1"))


def test_slow_calls_wait_in_the_event_loop_and_are_answered(eras, db):
    """A call whose answer takes longer than 2 s is parked (HTTP/1.1, event MPM): its thread is
    free while the backend thinks. Half of them send progress (the backend's SSE answer, written
    through as it is stored), half none (the answer may come as JSON after the response went
    SSE: it comes as an event). Every one gets its result, its progress in order."""
    # 60 x 100 ms: parked after 2 s, and all of them parked at once for about 4 s (with 25, the
    # window was half a second: on a loaded machine the 40 calls did not all start within it).
    n, count = 40, 60
    before = parked(eras)

    def one(i):
        kw = {"progressToken": f"park-{i}"} if i % 2 == 0 else {}
        r = post(eras["URL"], call_body(500 + i, "slow_count", {"count": count, "ms": 100}, **kw),
                 headers("tools/call", "slow_count"))
        assert r.status_code == 200, r.text
        msgs, _ = messages_of(r)
        return msgs

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
        wait_for(lambda: parked(eras) >= before + n, timeout=20,
                 what=f"{n} slow calls parked in server-status")
        answers = [f.result(timeout=60) for f in futures]
    for i, msgs in enumerate(answers):
        assert msgs[-1]["id"] == 500 + i and "result" in msgs[-1], msgs[-1]
        progress = [m["params"]["progress"] for m in msgs if m.get("method") == "notifications/progress"]
        assert progress == (list(range(1, count + 1)) if i % 2 == 0 else []), progress
        assert stream_of(db, 500 + i)["status"] == "complete"
    wait_for(lambda: parked(eras) == before, what="the parked answers to end")


def test_closing_a_parked_response_cancels_the_backend_request(eras, db):
    """Disconnect = cancellation (2026-07-28) holds for a parked answer: the loop notices the
    hang-up and closes the backend request."""
    token = "park-cancel-560"
    body = call_body(560, "slow_count", {"count": 100, "ms": 100}, progressToken=token)
    r = post(eras["URL"], body, headers("tools/call", "slow_count"), stream=True)
    assert r.status_code == 200
    got = 0
    events = iter_sse(r)
    for ev in events:
        got += 1
        if got == 30:   # 3 s: parked by now
            break
    assert parked(eras) >= 1
    events.close()
    st = wait_for(lambda: (s := stream_of(db, 560)) and s["status"] != "open" and s,
                  timeout=15, what="the stream to end")
    assert st["status"] == "cancelled"

    wait_for_backend_abort(eras, token, 561)


def test_an_http2_client_resetting_its_stream_cancels_too(eras, db):
    """Under mod_http2 the client's close is a stream reset: mod_mcp_stream notices it
    (c->aborted, a failed write) like a closed HTTP/1.1 connection."""
    token = "h2-cancel-35"
    body = call_body(35, "slow_count", {"count": 100, "ms": 100}, progressToken=token)
    cmd = ["curl", "-sN", "--http2-prior-knowledge", "--max-time", "1.5", eras["URL"],
           "--data-binary", json.dumps(body)]
    for k, v in headers("tools/call", "slow_count").items():
        cmd += ["-H", f"{k}: {v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 28, proc   # curl's "operation timed out": it ended the stream
    assert '"progressToken":"h2-cancel-35"' in proc.stdout
    st = wait_for(lambda: (s := stream_of(db, 35)) and s["status"] != "open" and s,
                  timeout=15, what="the stream to end")
    assert st["status"] == "cancelled"

    wait_for_backend_abort(eras, token, 36)


def test_listen_streams_count_against_the_principal(eras, db):
    opened = []
    try:
        for rid in (41, 42):
            body = {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen",
                    "params": {"_meta": meta(), "notifications": {"toolsListChanged": True}}}
            r = post(eras["AUTH_URL"], body, headers("subscriptions/listen"), auth=ALICE, stream=True)
            assert r.status_code == 200, r.text
            events = iter_sse(r)
            first = json.loads(next(events).data)
            assert first["method"] == "notifications/subscriptions/acknowledged"
            opened.append(events)
        body = {"jsonrpc": "2.0", "id": 43, "method": "subscriptions/listen",
                "params": {"_meta": meta(), "notifications": {"toolsListChanged": True}}}
        r = post(eras["AUTH_URL"], body, headers("subscriptions/listen"), auth=ALICE)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["data"]["limit"] == "MCPMaxStreamsPerPrincipal"
        # A change reaches an open listen stream (triggered by another client: a call would be
        # alice's third stream).
        r = post(eras["URL"], call_body(44, "test_trigger_tool_change"),
                 headers("tools/call", "test_trigger_tool_change"))
        assert r.status_code == 200, r.text
        ev = json.loads(next(opened[0]).data)
        assert ev["method"] == "notifications/tools/list_changed"
    finally:
        for events in opened:
            events.close()
    for rid in (41, 42):
        st = wait_for(lambda: (s := stream_of(db, rid)) and s["status"] != "open" and s,
                      timeout=15, what="the listen stream to end")
        assert st["status"] == "cancelled" and st["method"] == "subscriptions/listen"


def test_listen_streams_wait_in_the_event_loop(eras, db):
    """A 2026-07-28 client keeps a subscriptions/listen open for as long as it is connected: once
    acknowledged it is parked (no thread), gets what the backend sends, and its close is
    noticed by the loop (the backend listen closed, the stream cancelled)."""
    n = 30
    before = parked(eras)
    opened = []
    try:
        for i in range(n):
            body = {"jsonrpc": "2.0", "id": 600 + i, "method": "subscriptions/listen",
                    "params": {"_meta": meta(), "notifications": {"toolsListChanged": True}}}
            r = post(eras["URL"], body, headers("subscriptions/listen"), stream=True)
            assert r.status_code == 200, r.text
            events = iter_sse(r)
            assert json.loads(next(events).data)["method"] == "notifications/subscriptions/acknowledged"
            opened.append(events)
        wait_for(lambda: parked(eras) >= before + n, what=f"{n} listens parked")
        r = post(eras["URL"], call_body(640, "test_trigger_tool_change"),
                 headers("tools/call", "test_trigger_tool_change"))
        assert r.status_code == 200, r.text
        for events in opened:
            assert json.loads(next(events).data)["method"] == "notifications/tools/list_changed"
    finally:
        for events in opened:
            events.close()
    for i in range(n):
        st = wait_for(lambda: (s := stream_of(db, 600 + i)) and s["status"] != "open" and s,
                      timeout=15, what="the listen stream to end")
        assert st["status"] == "cancelled"
    wait_for(lambda: parked(eras) == before, what="the parked listens to be given back")


def test_a_graceful_restart_ends_parked_listens_and_waits_for_parked_calls(eras, db):
    """A parked call's answer cannot be resumed elsewhere (no event ids in 2026-07-28): a
    graceful restart lets it finish; a parked listen ends (stored closed), and its client
    listens again on the new processes."""
    body = {"jsonrpc": "2.0", "id": 650, "method": "subscriptions/listen",
            "params": {"_meta": meta(), "notifications": {"toolsListChanged": True}}}
    listen = post(eras["URL"], body, headers("subscriptions/listen"), stream=True)
    events = iter_sse(listen)
    assert json.loads(next(events).data)["method"] == "notifications/subscriptions/acknowledged"
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(post, eras["URL"], call_body(651, "slow_count", {"count": 60, "ms": 100},
                                                        progressToken="gr-651"),
                           headers("tools/call", "slow_count"))
        wait_for(lambda: parked(eras) >= 2, timeout=20, what="the listen and the call parked")
        subprocess.run([str(STACK), "graceful",
                        "--dir", eras["MCP_STACK_DIR"]], check=True, timeout=60, capture_output=True)
        st = wait_for(lambda: (s := stream_of(db, 650)) and s["status"] != "open" and s,
                      timeout=15, what="the listen to end")
        assert st["status"] == "closed"
        r = call.result(timeout=60)
    msgs, _ = messages_of(r)
    assert msgs[-1]["id"] == 651 and "result" in msgs[-1], msgs[-1]
    assert [m["params"]["progress"] for m in msgs if m.get("method") == "notifications/progress"] \
        == list(range(1, 61))
    assert stream_of(db, 651)["status"] == "complete"
    events.close()


# ---- the TypeScript SDK v2 client ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
def test_sdk_v2_client(eras, node22, mode):  # noqa: F811
    summary = run_node_script(node22, "client-2026.mjs", eras["URL"], args=[mode])
    assert summary["protocolVersion"] == V


def test_sdk_v2_client_in_auto_mode_falls_back_for_a_2025_backend(eras, node22):  # noqa: F811
    summary = run_node_script(node22, "client-2026.mjs", eras["LEGACY_URL"], args=["auto", "2025-11-25"])
    assert summary["protocolVersion"] == "2025-11-25"


def run_step_script(node22: str, script: str, url: str, args=(), timeout: float = 180) -> list[dict]:  # noqa: F811
    """Run tests/node/SCRIPT URL [ARGS...] that prints one JSON line per step ({"step", "ok",
    ...}; tests/node/client-2026-bridge.mjs); return the steps. Fails the test, showing the
    failed steps and node's stderr, when it exits non-zero or a step failed."""
    proc = subprocess.run([node22, str(NODE_DIR / script), url, *args], cwd=NODE_DIR,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    steps = []
    for line in proc.stdout.splitlines():
        try:
            steps.append(json.loads(line))
        except ValueError:
            pytest.fail(f"{script}: not a JSON line: {line[:500]}\nstderr:\n{proc.stderr[-3000:]}",
                        pytrace=False)
    failed = [s for s in steps if not s.get("ok")]
    if proc.returncode != 0 or failed or not steps or steps[-1].get("step") != "done":
        pytest.fail(f"{script} failed (exit {proc.returncode})\nfailed steps:\n"
                    f"{json.dumps(failed, indent=1)[:6000]}\nstderr:\n{proc.stderr[-3000:]}",
                    pytrace=False)
    return steps


def test_the_bridge_client_script_against_a_native_2026_backend(eras, node22):  # noqa: F811
    # tests/node/client-2026-bridge.mjs is for the era bridge (a 2025 backend behind the
    # gateway); here it runs against the 2026-07-28 backend, so the script itself stays sound.
    steps = run_step_script(node22, "client-2026-bridge.mjs", eras["URL"], args=["modern-backend"])
    assert [s["step"] for s in steps] == ["connect", "tools/list", "progress", "sampling", "cancel",
                                          "done"]
    by = {s["step"]: s for s in steps}
    assert by["sampling"]["handlerCalls"] == 1 and by["sampling"]["inputRequiredRounds"] == 1
    assert by["cancel"]["backendCancelled"] == 1
