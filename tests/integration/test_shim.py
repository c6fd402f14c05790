"""The era shim: 2025-era clients (initialize, Mcp-Session-Id, GET stream, DELETE) served by the
gateway in front of a 2026-only backend (tests/node/modern-backend.mjs --modern-only, which
refuses initialize as a `legacy: 'reject'` TS SDK v2 server does), two httpd instances sharing
PostgreSQL (tests/integration/gateway-shim.conf):

* initialize answered from server/discover; calls stamped with the modern _meta and headers;
  the backend never sees a 2025-era request; ping answered by the gateway; DELETE;
* progress relayed; 2026-only fields removed from results;
* an input-required round (elicitation) whose answer is POSTed to the other instance; answers
  matching no pending request -> 400; a two-round requestState tool; MCPShimMaxRounds;
* notifications/cancelled (to the other instance) closes the backend's request;
* GET -> subscriptions/listen: a list_changed notification arrives, untagged;
* resume with Last-Event-ID on the other instance;
* the audit rows show both sides of the translation;
* the TypeScript SDK v1 client (tests/node/client-shim.mjs), an elicitation round included;
* MCPEraBridge Off: no shim, 2025-era traffic forwarded as it came.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from conftest import (database, fault_backend, node_backend, own_stack, plain_endpoints, run_dir, wanted_modes,
                      wire_client)
from mcp_client import iter_sse
from test_node_peers import node22, run_node_script  # noqa: F401  (a fixture, and a helper)
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "tests" / "node"
STACK = REPO / "tests" / "stack"
ACCEPT = "application/json, text/event-stream"
V25 = "2025-11-25"


@pytest.fixture(scope="module")
def shim(node22):  # noqa: F811
    d = run_dir("mcp-shim.")
    with node_backend(node22, d, "modern-backend.mjs", "--modern-only") as port, \
            own_stack(d, "--httpd", "2", "--tls", "--http2", "--backend",
                      f"http://127.0.0.1:{port}/mcp", "--conf",
                      str(Path(__file__).resolve().parent / "gateway-shim.conf")) as env:
        # --tls --http2: the wire tests below reach it over h2c and h2 over TLS too; the others
        # use the plain http:// endpoints.
        env = plain_endpoints(env)
        bases = [u.rsplit("/", 1)[0] for u in env["MCP_URLS"].split()]
        env.update(URLS=[f"{b}/mcp-shim" for b in bases], CAP_URL=f"{bases[0]}/mcp-shim-one-round",
                   OFF_URL=f"{bases[0]}/mcp-shim-off", BACKEND=f"http://127.0.0.1:{port}/mcp")
        yield env


@pytest.fixture
def db(shim):
    with database(shim) as conn:
        yield conn


class Client:
    """A hand-driven 2025-era client: its session, and POSTs to either instance."""

    def __init__(self, url, caps=None, http=None):
        self.url = url
        self.http = http or requests   # or a wire's client (`via` below: HTTP/2 too)
        r = self.http.post(url, headers={"Content-Type": "application/json", "Accept": ACCEPT},
                          data=json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                              "protocolVersion": V25, "clientInfo": {"name": "shim-test", "version": "1"},
                              "capabilities": caps if caps is not None else {"elicitation": {}}}}),
                          timeout=30)
        assert r.status_code == 200, r.text
        self.init = r.json()
        self.sid = r.headers["Mcp-Session-Id"]
        self.next_id = 1

    def headers(self, **more):
        h = {"Content-Type": "application/json", "Accept": ACCEPT, "Mcp-Session-Id": self.sid,
             "MCP-Protocol-Version": V25}
        h.update(more)
        return h

    def post(self, msg, url=None, stream=False):
        return self.http.post(url or self.url, headers=self.headers(), data=json.dumps(msg),
                              stream=stream, timeout=30)

    def request(self, method, params=None, url=None, stream=False):
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        return rid, self.post(msg, url, stream)

    def call(self, name, arguments=None, url=None, stream=False, **meta):
        params = {"name": name, "arguments": arguments or {}}
        if meta:
            params["_meta"] = meta
        return self.request("tools/call", params, url, stream)


def events(resp):
    """The JSON messages of an SSE response (data lines), in order."""
    assert resp.headers["Content-Type"].startswith("text/event-stream"), resp.headers
    return [json.loads(e.data) for e in iter_sse(resp) if e.data]


def answer(client, request, result, url):
    return client.post({"jsonrpc": "2.0", "id": request["id"], "result": result}, url)


def legacy_seen(shim):
    """What the backend counted: HTTP requests without the 2026-07-28 version header."""
    c = Client(shim["URLS"][0])
    _, r = c.call("legacy_seen")
    return int(events(r)[-1]["result"]["content"][0]["text"])


# ---- tests -------------------------------------------------------------------------------------


def test_the_backend_refuses_initialize(shim):
    r = requests.post(shim["BACKEND"], headers={"Content-Type": "application/json", "Accept": ACCEPT},
                      data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                          "protocolVersion": V25, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}),
                      timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32022, r.text


def test_era_bridge_off_forwards_2025_traffic_as_it_came(shim):
    """MCPEraBridge Off turns off the shim too: initialize goes to the backend as the client sent
    it (no answer from server/discover), and the 2026-only backend refuses it."""
    seen_before = legacy_seen(shim)
    r = requests.post(shim["OFF_URL"], headers={"Content-Type": "application/json", "Accept": ACCEPT},
                      data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                          "protocolVersion": V25, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}),
                      timeout=30)
    # The session path's answer to a backend that refuses initialize (its 400: -32022).
    assert r.status_code == 502 and "Mcp-Session-Id" not in r.headers, r.text
    assert "the backend answered initialize with HTTP 400" in r.json()["error"]["message"], r.text
    assert legacy_seen(shim) == seen_before + 1   # the initialize itself, as it came


def test_initialize_calls_ping_delete(shim, db):
    seen_before = legacy_seen(shim)
    c = Client(shim["URLS"][0])
    result = c.init["result"]
    assert result["protocolVersion"] == V25
    assert result["serverInfo"]["name"] == "mod_mcp-modern-backend"
    assert result["instructions"].startswith("Test backend")
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert "logging" in result["capabilities"] and "subscribe" not in result["capabilities"]["resources"]
    # An older version the gateway serves is kept; an unknown one gets the newest.
    assert Client(shim["URLS"][0]).init["result"]["protocolVersion"] == V25
    row = db.cursor()
    row.execute("SELECT backend_session_id, protocol_version, client_capabilities FROM mcp.sessions "
                "WHERE id = %s", (c.sid,))
    assert row.fetchone() == (None, V25, {"elicitation": {}})

    _, r = c.request("tools/list", url=shim["URLS"][1])
    tools = events(r)[-1]["result"]["tools"]
    assert "confirm_action" in [t["name"] for t in tools]
    rid, r = c.call("echo_headers", url=shim["URLS"][1])
    last = events(r)[-1]
    assert last["id"] == rid and "resultType" not in last["result"] and "_meta" not in last["result"]
    assert json.loads(last["result"]["content"][0]["text"]) == {
        "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo_headers"}
    rid, r = c.request("ping")
    assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": rid, "result": {}}
    _, r = c.request("resources/subscribe", {"uri": "test://static-text"})
    assert r.json()["error"]["code"] == -32601
    assert c.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    r = requests.delete(c.url, headers=c.headers(), timeout=30)
    assert r.status_code == 200, r.text
    _, r = c.request("tools/list", url=shim["URLS"][1])
    assert r.status_code == 404, r.text
    assert legacy_seen(shim) == seen_before   # the gateway sent nothing of the 2025 era


def test_logging_levels(shim, db):
    c = Client(shim["URLS"][0])
    cur = db.cursor()

    def stamped_level():
        """Calls the logging tool; returns its log messages and the logLevel the backend got."""
        _, r = c.call("test_tool_with_logging")
        msgs = events(r)
        cur.execute("SELECT e.message->'params'->'_meta'->>'logLevel' FROM mcp.events e "
                    "JOIN mcp.streams s ON s.id = e.stream_id WHERE s.session_id = %s "
                    "AND e.direction = 'in' AND e.seq > 1 ORDER BY e.stream_id DESC, e.seq LIMIT 1",
                    (c.sid,))
        return [m["params"]["data"] for m in msgs if m.get("method") == "notifications/message"], cur.fetchone()[0]

    # No level set: the shim asks for info and above (the revision sends none unless asked).
    assert stamped_level() == (["Tool execution started", "Tool processing data",
                                "Tool execution completed"], "info")
    rid, r = c.request("logging/setLevel", {"level": "error"}, url=shim["URLS"][1])
    assert r.json() == {"jsonrpc": "2.0", "id": rid, "result": {}}
    # (The fixture tool notifies directly, whatever the level: only the stamp is checked.)
    assert stamped_level()[1] == "error"
    _, r = c.request("logging/setLevel", {"level": "loud"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602


def test_progress_relayed_and_results_cleaned(shim):
    c = Client(shim["URLS"][0])
    rid, r = c.call("test_tool_with_progress", progressToken="p-1")
    msgs = events(r)
    assert [m["params"]["progress"] for m in msgs[:-1]] == [0, 50, 100]
    assert msgs[-1] == {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "p-1"}]}}


def test_elicitation_round_answered_on_the_other_instance(shim, db):
    c = Client(shim["URLS"][0])
    rid, r = c.call("confirm_action", {"action": "launch"}, stream=True)
    it = iter_sse(r)
    ev = next(e for e in it if e.data)
    ask = json.loads(ev.data)
    assert ask["method"] == "elicitation/create" and ask["params"]["message"] == "Really launch?"
    assert ask["id"].startswith("mcp-shim-")
    # Answers that match nothing pending are refused, precisely.
    bad = c.post({"jsonrpc": "2.0", "id": "mcp-shim-1-1-1", "result": {}}, shim["URLS"][1])
    assert bad.status_code == 400 and "answers no pending request" in bad.json()["error"]["message"]
    assert answer(c, ask, {"action": "accept", "content": {"ok": True}}, shim["URLS"][1]).status_code == 202
    final = json.loads(next(e for e in it if e.data).data)
    assert final["id"] == rid and final["result"]["content"][0]["text"].startswith("did launch")
    again = answer(c, ask, {"action": "accept", "content": {"ok": True}}, shim["URLS"][1])
    assert again.status_code == 400, again.text

    # Both sides of the translation: the client's request, the stamped one, the backend's
    # InputRequiredResult, the elicitation sent, the client's answer, the retry, the result.
    stream_id = int(ev.id.split("-")[0])
    cur = db.cursor()
    cur.execute("SELECT seq, direction, message FROM mcp.events WHERE stream_id = %s ORDER BY seq",
                (stream_id,))
    rows = [(s, d, m) for s, d, m in cur.fetchall() if m is not None]
    ins = [m for _, d, m in rows if d == "in"]
    outs = [m for _, d, m in rows if d == "out"]
    assert ins[0]["params"].get("_meta") is None                                   # as the client sent it
    assert ins[1]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert ins[1]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {"elicitation": {}}
    assert ins[2]["result"]["resultType"] == "input_required"
    assert ins[3]["id"] != rid and ins[3]["params"]["inputResponses"] == {
        "confirm": {"action": "accept", "content": {"ok": True}}}
    assert ins[3]["params"]["requestState"] == ins[2]["result"]["requestState"]
    assert [m.get("method") for m in outs] == ["elicitation/create", None]
    cur.execute("SELECT message FROM mcp.events WHERE session_id = %s AND stream_id IS NULL AND "
                "direction = 'in' AND message->>'id' = %s", (c.sid, ask["id"]))
    assert cur.fetchone()[0]["result"]["action"] == "accept"
    # The audit view sees one call, as the client made it.
    cur.execute("SELECT tool, arguments, outcome FROM mcp.tool_calls WHERE stream_id = %s", (stream_id,))
    assert cur.fetchall() == [("confirm_action", {"action": "launch"}, "ok")]


def _answer_rounds(c, resp, url, answers):
    """Answers every server request on the stream from answers[method or message]; returns the
    final message and the requests seen."""
    asked = []
    for e in iter_sse(resp):
        if not e.data:
            continue
        m = json.loads(e.data)
        if "method" in m and "id" in m:
            asked.append(m)
            assert answer(c, m, answers(m), url).status_code == 202
        elif "id" in m:
            return m, asked
    raise AssertionError("the stream ended without a response")


def test_two_rounds_with_request_state(shim):
    c = Client(shim["URLS"][0])
    rid, r = c.call("test_input_required_result_multi_round", stream=True)
    fill = {"What is your name?": {"name": "Ada"}, "Favourite colour?": {"color": "green"}}
    final, asked = _answer_rounds(c, r, shim["URLS"][1], lambda m: {
        "action": "accept", "content": fill[m["params"]["message"]]})
    assert [a["id"].rsplit("-", 2)[1] for a in asked] == ["1", "2"]
    assert final["id"] == rid, final
    assert json.loads(final["result"]["content"][0]["text"].removeprefix("done: ")) == {
        "user_name": {"action": "accept", "content": {"name": "Ada"}},
        "color": {"action": "accept", "content": {"color": "green"}}}


def test_round_cap(shim):
    c = Client(shim["CAP_URL"])
    rid, r = c.call("test_input_required_result_multi_round", stream=True)
    final, asked = _answer_rounds(c, r, shim["CAP_URL"], lambda m: {"action": "accept", "content": {"name": "x"}})
    assert len(asked) == 1
    assert final["id"] == rid and final["error"]["code"] == -32603
    assert "MCPShimMaxRounds (1)" in final["error"]["message"]


def test_cancel_closes_the_backend_request(shim, db):
    c = Client(shim["URLS"][0])
    rid, r = c.call("slow_count", {"count": 100, "ms": 100}, stream=True, progressToken="cancel-me")
    it = iter_sse(r)
    first = json.loads(next(e for e in it if e.data).data)
    assert first["method"] == "notifications/progress"
    n = c.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}},
               shim["URLS"][1])
    assert n.status_code == 202
    rest = [json.loads(e.data) for e in it if e.data]      # the stream ends
    assert all("id" not in m for m in rest), rest
    wait_for(lambda: "cancel-me" in legacy_free_cancelled(shim), timeout=20,
             what="the backend to see its request closed")
    cur = db.cursor()
    cur.execute("SELECT status FROM mcp.streams WHERE session_id = %s AND method = 'tools/call' "
                "AND request_id = %s::jsonb", (c.sid, json.dumps(rid)))
    assert cur.fetchone()[0] == "cancelled"


def legacy_free_cancelled(shim):
    c = Client(shim["URLS"][0])
    _, r = c.call("cancelled_calls")
    return json.loads(events(r)[-1]["result"]["content"][0]["text"])


def listen_acknowledged(db, sid):
    """Whether the backend's acknowledgement of the session's GET (subscriptions/listen) is stored."""
    with db.cursor() as cur:
        cur.execute("SELECT 1 FROM mcp.streams s JOIN mcp.events e ON e.stream_id = s.id "
                    "WHERE s.session_id = %s AND s.kind = 'standalone' AND e.direction = 'in' "
                    "AND e.message->>'method' = 'notifications/subscriptions/acknowledged'", (sid,))
        return cur.fetchone() is not None


def test_get_stream_is_subscriptions_listen(shim, db):
    c = Client(shim["URLS"][0])
    g = requests.get(c.url, headers=c.headers(Accept="text/event-stream"), stream=True, timeout=30)
    assert g.status_code == 200, g.text
    it = iter_sse(g, include_empty=True)
    priming = next(it)
    assert priming.id and not priming.data

    # The backend acknowledged the listen (stored as the backend side of the stream).
    wait_for(lambda: listen_acknowledged(db, c.sid), timeout=20,
             what="the backend's acknowledgement of subscriptions/listen")
    _, r = c.call("test_trigger_tool_change", url=shim["URLS"][1])
    assert events(r)[-1]["result"]["content"][0]["text"] == "tools changed"
    got = json.loads(next(e for e in it if e.data).data)
    g.close()
    # Untagged: no io.modelcontextprotocol/subscriptionId in a 2025 client's notification.
    assert got["method"] == "notifications/tools/list_changed", got
    assert "io.modelcontextprotocol/subscriptionId" not in json.dumps(got), got


def test_resume_on_the_other_instance(shim):
    c = Client(shim["URLS"][0])
    rid, r = c.call("slow_count", {"count": 6, "ms": 150}, stream=True, progressToken="resume")
    it = iter_sse(r)
    seen = []
    for e in it:
        if e.data:
            seen.append(json.loads(e.data))
            last = e.id
            if len(seen) == 2:
                break
    r.close()
    g = requests.get(shim["URLS"][1], headers=c.headers(Accept="text/event-stream", **{"Last-Event-ID": last}),
                     stream=True, timeout=30)
    assert g.status_code == 200, g.text
    rest = events(g)
    progress = [m["params"]["progress"] for m in seen + rest if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3, 4, 5, 6]
    assert rest[-1]["id"] == rid and rest[-1]["result"]["content"][0]["text"] == "counted to 6"


def test_typescript_sdk_v1_client(shim, node22):  # noqa: F811
    summary = run_node_script(node22, "client-shim.mjs", shim["URLS"][0])
    assert summary["confirm"].startswith("did deploy")


def test_an_error_answer_fails_the_call(shim):
    c = Client(shim["URLS"][0])
    rid, r = c.call("confirm_action", {"action": "erase"}, stream=True)
    it = iter_sse(r)
    ask = json.loads(next(e for e in it if e.data).data)
    n = c.post({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "user said no"}},
               shim["URLS"][1])
    assert n.status_code == 202, n.text
    final = json.loads(next(e for e in it if e.data).data)
    assert final["id"] == rid and final["error"]["code"] == -32603
    assert "user said no" in final["error"]["message"]


def test_delete_during_a_round_ends_the_call(shim, db):
    c = Client(shim["URLS"][0])
    rid, r = c.call("confirm_action", {"action": "wait"}, stream=True)
    it = iter_sse(r)
    ask = json.loads(next(e for e in it if e.data).data)
    assert requests.delete(shim["URLS"][1], headers=c.headers(), timeout=30).status_code == 200
    rest = [json.loads(e.data) for e in it if e.data]     # the stream ends
    cur = db.cursor()
    cur.execute("SELECT status FROM mcp.streams WHERE session_id = %s AND method = 'tools/call'", (c.sid,))
    assert cur.fetchone()[0] == "failed"
    # The session's end stored an error for the call (sent when it was stored in time).
    assert all(m.get("id") == rid and "error" in m for m in rest), rest
    late = answer(c, ask, {"action": "accept", "content": {"ok": True}}, shim["URLS"][0])
    assert late.status_code == 404, late.text


# ---- over every wire: HTTP/1.1, h2c, h2 over TLS (the stack has --tls --http2) ------------------


@pytest.fixture(params=wanted_modes())
def via(request, shim):
    """One client of the shim over a wire mode (one HTTP/2 connection per instance)."""
    with wire_client(request.param, shim) as s:
        yield s


def data_events(resp):
    """(event id, message) of a streamed answer as they arrive."""
    for e in iter_sse(resp):
        if e.data:
            yield e.id, json.loads(e.data)


def resume(c, url, last):
    """GET with Last-Event-ID: the messages after it, to the end of the stream."""
    g = c.http.get(url, headers=c.headers(Accept="text/event-stream", **{"Last-Event-ID": last}),
                   stream=True, timeout=30)
    assert g.status_code == 200, g.text
    return [m for _, m in data_events(g)]


def stream_row(db, sid, rid):
    cur = db.cursor()
    cur.execute("SELECT status FROM mcp.streams WHERE session_id = %s AND request_id = %s::jsonb",
                (sid, json.dumps(rid)))
    row = cur.fetchone()
    return row and row[0]


def test_wire_shim_main_paths(via, db):
    url, url2 = via.url_of(0, "/mcp-shim"), via.url_of(1, "/mcp-shim")
    c = Client(url, http=via.http)
    assert c.init["result"]["serverInfo"]["name"] == "mod_mcp-modern-backend"
    rid, r = c.call("test_tool_with_progress", progressToken=f"{via.mode}-p")
    msgs = events(r)
    assert [m["params"]["progress"] for m in msgs[:-1]] == [0, 50, 100] and msgs[-1]["id"] == rid
    # An elicitation round, answered on the other instance.
    rid, r = c.call("confirm_action", {"action": "wire"}, stream=True)
    it = data_events(r)
    _, ask = next(it)
    assert ask["method"] == "elicitation/create"
    assert answer(c, ask, {"action": "accept", "content": {"ok": True}}, url2).status_code == 202
    _, last = next(it)
    assert last["id"] == rid and last["result"]["content"][0]["text"].startswith("did wire")
    # Resume with Last-Event-ID on the other instance.
    rid, r = c.call("slow_count", {"count": 5, "ms": 100}, stream=True, progressToken="wire-resume")
    it = data_events(r)
    first_id, first = next(it)
    assert first["params"]["progress"] == 1
    r.close()   # HTTP/2: RST_STREAM; 2025 era: not a cancellation
    rest = resume(c, url2, first_id)
    assert [m["params"]["progress"] for m in rest[:-1]] == [2, 3, 4, 5]
    assert rest[-1]["id"] == rid and rest[-1]["result"]["content"][0]["text"] == "counted to 5"
    # GET: subscriptions/listen.
    g = c.http.get(url, headers=c.headers(Accept="text/event-stream"), stream=True, timeout=30)
    assert g.status_code == 200
    listen = iter_sse(g, include_empty=True)
    assert next(listen).id   # the priming event
    cur = db.cursor()
    wait_for(lambda: listen_acknowledged(db, c.sid), timeout=20,
             what="the backend's acknowledgement of subscriptions/listen")
    _, r = c.call("test_trigger_tool_change", url=url2)
    assert json.loads(next(e for e in listen if e.data).data)["method"] == "notifications/tools/list_changed"
    g.close()

    def listen_ended():
        cur.execute("SELECT status FROM mcp.streams WHERE session_id = %s AND kind = 'standalone'",
                    (c.sid,))
        return cur.fetchone()[0] != "open"
    wait_for(listen_ended, timeout=15, what="the GET stream to end with its client")
    # The connection still serves.
    assert c.request("ping")[1].json()["result"] == {}


def test_wire_shim_a_reset_mid_call_is_no_cancellation_and_spares_other_streams(via, db):
    url, url2 = via.url_of(0, "/mcp-shim"), via.url_of(1, "/mcp-shim")
    c = Client(url, http=via.http)
    a_id, a = c.call("slow_count", {"count": 6, "ms": 150}, stream=True, progressToken="a")
    b_id, b = c.call("slow_count", {"count": 4, "ms": 150}, stream=True, progressToken="b")
    ai = data_events(a)
    first_id, _ = next(ai)
    a.close()
    rest_b = [m for _, m in data_events(b)]
    assert rest_b[-1]["id"] == b_id and rest_b[-1]["result"]["content"][0]["text"] == "counted to 4"
    wait_for(lambda: stream_row(db, c.sid, a_id) == "complete", timeout=15,
             what="the abandoned call to complete all the same")
    rest_a = resume(c, url2, first_id)
    assert [m["params"]["progress"] for m in rest_a[:-1]] == [2, 3, 4, 5, 6]
    assert rest_a[-1]["id"] == a_id


def test_wire_shim_a_reset_mid_round_leaves_the_round_open(via, db):
    url, url2 = via.url_of(0, "/mcp-shim"), via.url_of(1, "/mcp-shim")
    c = Client(url, http=via.http)
    rid, r = c.call("confirm_action", {"action": "reset"}, stream=True)
    it = data_events(r)
    ask_id, ask = next(it)
    r.close()
    assert answer(c, ask, {"action": "accept", "content": {"ok": True}}, url2).status_code == 202
    wait_for(lambda: stream_row(db, c.sid, rid) == "complete", timeout=15, what="the call to complete")
    rest = resume(c, url2, ask_id)
    assert rest[-1]["id"] == rid and rest[-1]["result"]["content"][0]["text"].startswith("did reset")


# ---- misbehaving backends behind the shim (the fault backend, 2026-only) ------------------------


@pytest.fixture(scope="module")
def faults(shim):
    """The fault backend on the socket the /mcp-shim-faults locations point at."""
    with fault_backend(shim["MCP_STACK_DIR"]):
        yield


HEAD_JSON = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
SSE_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def raw_call(c, parts, then="close", **meta):
    rid, r = c.call("raw", {"parts": parts, "then": then, "delay_ms": 0}, stream=True, **meta)
    assert r.status_code == 200, r.text
    return rid, [m for _, m in data_events(r)]


def shim_failed(db, c, rid, msgs, words):
    """The call ended with the gateway's error for a failed backend (-32002 on the 2025 session
    path, as for a native 2025 backend), naming the fault; its stream stored 'failed'."""
    err = msgs[-1].get("error")
    assert msgs[-1].get("id") == rid and err and err["code"] == -32002 and words in err["message"], msgs
    assert stream_row(db, c.sid, rid) == "failed"


def test_wire_shim_garbage_and_a_close_mid_event_fail_the_call(via, faults, db):
    c = Client(via.url_of(0, "/mcp-shim-faults"), http=via.http)
    rid, msgs = raw_call(c, [[HEAD_JSON + "this is not JSON", 1]])
    shim_failed(db, c, rid, msgs, "without a response to the request")
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "x", "progress": 1}}
    rid, msgs = raw_call(c, [[SSE_HEAD + f"data: {json.dumps(note)}\n\n", 1],
                             ['data: {"jsonrpc":"2.0","id":', 1]], progressToken="x")
    assert msgs[0]["method"] == "notifications/progress"
    shim_failed(db, c, rid, msgs, "without a response to the request")
    assert c.request("ping")[1].status_code == 200


def test_shim_a_backend_that_never_answers_ends_at_mcpstreamtimeout(via, faults, db):
    if via.mode != "h2tls":
        pytest.skip("one wire is enough for a 4 s timeout")
    c = Client(via.url_of(0, "/mcp-shim-faults"), http=via.http)
    rid, msgs = raw_call(c, [], then="hang")
    shim_failed(db, c, rid, msgs, "Gateway Timeout: no complete answer from the backend within "
                "MCPStreamTimeout")


def test_shim_ten_thousand_events(via, faults, db):
    if via.mode != "h2c":
        pytest.skip("one wire is enough for 10,000 events")
    c = Client(via.url_of(0, "/mcp-shim-faults-long"), http=via.http)
    n = 10000
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}}
    end = '{"jsonrpc":"2.0","id":{{id}},"result":{"content":[{"type":"text","text":"end"}]}}'
    rid, msgs = raw_call(c, [[SSE_HEAD, 1], [f"data: {json.dumps(note)}\n\n", n], [f"data: {end}\n\n", 1]],
                         progressToken="t")
    assert len(msgs) == n + 1 and msgs[-1]["id"] == rid
    assert stream_row(db, c.sid, rid) == "complete"


def test_wire_shim_input_required_forever_stops_at_mcpshimmaxrounds(via, faults, db):
    c = Client(via.url_of(0, "/mcp-shim-faults"), http=via.http)
    ir = ('{"jsonrpc":"2.0","id":{{id}},"result":{"resultType":"input_required","inputRequests":'
          '{"q":{"method":"elicitation/create","params":{"message":"again?","requestedSchema":'
          '{"type":"object","properties":{}}}}},"requestState":"forever"}}')
    rid, r = c.call("raw", {"parts": [[HEAD_JSON + ir, 1]], "then": "close", "delay_ms": 0}, stream=True)
    asked = 0
    for _, m in data_events(r):
        if m.get("method") == "elicitation/create":
            asked += 1
            assert answer(c, m, {"action": "accept", "content": {}}, via.url_of(1, "/mcp-shim-faults")
                          ).status_code == 202
        elif "id" in m:
            last = m
            break
    assert asked == 3
    assert last["id"] == rid and last["error"]["code"] == -32603
    assert "MCPShimMaxRounds (3)" in last["error"]["message"]
    assert stream_row(db, c.sid, rid) == "failed"


def test_a_malformed_server_discover_fails_initialize_precisely(shim, faults):
    r = requests.post(shim["URLS"][0].rsplit("/", 1)[0] + "/mcp-shim-bad-discover",
                      headers={"Content-Type": "application/json", "Accept": ACCEPT},
                      data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                          "protocolVersion": V25, "capabilities": {},
                          "clientInfo": {"name": "x", "version": "1"}}}), timeout=30)
    assert r.status_code == 502 and "Mcp-Session-Id" not in r.headers, r.text
    err = r.json()["error"]
    assert "server/discover result is malformed: its supportedVersions is missing or not an array" \
        in err["message"], err


def test_wire_shim_a_client_that_does_not_read_holds_back_a_flooding_backend(via, shim, faults, db):
    """A 2026 backend floods 1,500 progress notifications of 4 KiB (6 MB) on a shimmed call; the
    HTTP/2 client reads nothing for a while: the relay stops (bounded queue, blocked flush) well
    before the end, other clients are served meanwhile; then it all arrives."""
    if via.mode == "http1":
        pytest.skip("HTTP/1.1: the sockets' buffers hold megabytes (test_streams' bounded relay)")
    n = 1500
    c = Client(via.url_of(0, "/mcp-shim-faults-long"), http=via.http)
    note = {"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "f", "progress": 1, "message": "x" * 4000}}
    end = '{"jsonrpc":"2.0","id":{{id}},"result":{"content":[{"type":"text","text":"flooded"}]}}'
    rid, r = c.call("raw", {"parts": [[SSE_HEAD, 1], [f"data: {json.dumps(note)}\n\n", n],
                                      [f"data: {end}\n\n", 1]], "then": "close", "delay_ms": 0},
                    stream=True, progressToken="f")
    assert r.status_code == 200
    cur = db.cursor()
    counts = []

    def settled():
        cur.execute("SELECT count(*) FROM mcp.events e JOIN mcp.streams s ON s.id = e.stream_id "
                    "WHERE s.session_id = %s AND s.request_id = %s::jsonb", (c.sid, json.dumps(rid)))
        counts.append(cur.fetchone()[0])
        return len(counts) > 10 and counts[-1] == counts[-11] and counts[-1]
    held = wait_for(settled, timeout=30, interval=0.1, what="the relay to stop while the client reads nothing")
    assert held < n / 2, f"{held} of {n} events stored while the client read nothing"
    # Another client is served meanwhile (not another stream of this connection: this client
    # acknowledges data as it reads it, so the unread stream holds the connection's window).
    other = Client(shim["URLS"][0])
    assert other.request("ping")[1].json()["result"] == {}
    msgs = [m for _, m in data_events(r)]
    assert len(msgs) == n + 1 and msgs[-1]["result"]["content"][0]["text"] == "flooded"
    wait_for(lambda: stream_row(db, c.sid, rid) == "complete", timeout=10, what="the call to complete")
