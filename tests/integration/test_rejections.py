"""Bad input gets a precise HTTP status and a JSON-RPC error body saying what was wrong; nothing
is stored for it, and the server keeps serving."""

import json
import secrets

import pytest
import requests

from mcp_client import ACCEPT_BOTH

LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})


def initialize_body(version="2025-11-25", rid=1):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize",
                       "params": {"protocolVersion": version, "capabilities": {},
                                  "clientInfo": {"name": "t", "version": "0"}}})


def assert_jsonrpc_error(r, status, code=None, says=None):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert body["jsonrpc"] == "2.0" and "id" in body
    if code is not None:
        assert body["error"]["code"] == code, body
    if says is not None:
        assert says.lower() in body["error"]["message"].lower(), body
    return body


def count_sessions(pg):
    with pg.cursor() as cur:
        cur.execute("SELECT count(*) FROM mcp.sessions")
        return cur.fetchone()[0]


@pytest.fixture
def session(mcp):
    s = mcp()
    s.initialize()
    return s


def test_missing_session_id_is_400(session):
    r = session.post_raw(LIST, headers={"Mcp-Session-Id": None})
    assert_jsonrpc_error(r, 400, -32000, "Mcp-Session-Id header is required")


# (ids: a random parameter must not name the test, or pytest-xdist's workers collect differently)
@pytest.mark.parametrize("sid", ["A" * 32, "not-a-session-id", secrets.token_urlsafe(24)],
                         ids=["all-A", "malformed", "random"])
def test_unknown_session_is_404(session, sid):
    r = session.post_raw(LIST, headers={"Mcp-Session-Id": sid})
    assert_jsonrpc_error(r, 404, -32001, "Session not found")


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream", "text/html", None])
def test_post_must_accept_json_and_sse(session, accept):
    r = session.post_raw(LIST, headers={"Accept": accept})
    assert_jsonrpc_error(r, 406, -32000, "Not Acceptable")


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
def test_post_must_be_json(session, ctype):
    r = session.post_raw(LIST, headers={"Content-Type": ctype})
    assert_jsonrpc_error(r, 415, -32000, "Content-Type must be application/json")


@pytest.mark.parametrize("body", [b"{", b"not json", b"", b"{'jsonrpc':'2.0'}", b"\xff\xfe"])
def test_unparseable_json_is_parse_error(session, body):
    r = session.post_raw(body)
    assert_jsonrpc_error(r, 400, -32700, "Parse error")


@pytest.mark.parametrize("body", ['{"id":1,"method":"x"}', '[]', '42', '{"jsonrpc":"2.0","id":1}',
                                  '{"jsonrpc":"2.0","id":{"a":1},"method":"x"}'])
def test_json_that_is_not_jsonrpc_is_invalid_request(session, body):
    r = session.post_raw(body)
    assert_jsonrpc_error(r, 400, -32600, "Invalid Request")


def test_invalid_request_echoes_its_id(session):
    r = session.post_raw('{"jsonrpc":"2.0","id":"abc","method":"x","params":7}')
    body = assert_jsonrpc_error(r, 400, -32600, "params")
    assert body["id"] == "abc"


def test_body_over_the_limit_is_413(session):
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": "x" * (4 * 1024 * 1024)}}})
    r = session.post_raw(big)
    assert_jsonrpc_error(r, 413, -32600, "MCPMaxMessageSize (4194304 bytes)")


def test_chunked_body_over_the_limit_is_413(session):
    def chunks():
        for _ in range(5):
            yield b" " * (1024 * 1024)
        yield LIST.encode()
    r = session.post_raw(chunks())
    assert_jsonrpc_error(r, 413, -32600, "MCPMaxMessageSize")


def test_unsupported_protocol_version_header_is_400(session):
    r = session.post_raw(LIST, headers={"MCP-Protocol-Version": "1999-01-01"})
    body = assert_jsonrpc_error(r, 400, -32022, "unsupported protocol version: '1999-01-01'")
    assert body["error"]["data"] == {"supported": ["2025-11-25", "2025-06-18", "2025-03-26"],
                                     "requested": "1999-01-01"}


def test_other_methods_are_405_with_allow(stack, session):
    for method in ("PUT", "PATCH", "OPTIONS"):
        r = requests.request(method, stack["MCP_URL"], headers={"Accept": ACCEPT_BOTH,
                             "Mcp-Session-Id": session.session_id}, timeout=10)
        assert_jsonrpc_error(r, 405, -32000, "Method Not Allowed")
        assert r.headers["Allow"] == "GET, POST, DELETE"


def test_batch_rejected_after_2025_03_26(session):
    batch = json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        {"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    assert_jsonrpc_error(session.post_raw(batch), 400, -32600, "batches are allowed only")


def test_batch_served_in_2025_03_26(mcp):
    s = mcp(protocol_version="2025-03-26")
    s.initialize()
    batch = json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "add", "arguments": {"a": 1, "b": 2}}},
                        {"jsonrpc": "2.0", "method": "notifications/progress",
                         "params": {"progressToken": 1, "progress": 1}}])
    r = s.post_raw(batch)
    assert r.status_code == 200, r.text
    answers = {m["id"]: m for m in r.json()}
    assert answers[1]["result"] == {}
    assert answers[2]["result"]["content"][0]["text"] == "3"


def test_initialize_in_a_batch_is_rejected(mcp, pg):
    s = mcp(protocol_version="2025-03-26")
    before = count_sessions(pg)
    r = s.post_raw("[" + initialize_body("2025-03-26") + "]", with_session=False)
    assert_jsonrpc_error(r, 400, -32600, "initialize must not be part of a batch")
    assert count_sessions(pg) == before


def test_initialize_with_a_session_header_is_rejected(session, pg):
    before = count_sessions(pg)
    r = session.post_raw(initialize_body(rid=77))
    body = assert_jsonrpc_error(r, 400, -32600, "without Mcp-Session-Id")
    assert body["id"] == 77
    assert count_sessions(pg) == before


def test_unreachable_backend_is_502_and_stores_nothing(stack, pg):
    url = stack["MCP_URL"].rsplit("/", 1)[0] + "/mcp-unreachable"
    before = count_sessions(pg)
    r = requests.post(url, data=initialize_body(rid="init-1"),
                      headers={"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}, timeout=30)
    body = assert_jsonrpc_error(r, 502, -32002, "backend is unreachable")
    assert body["id"] == "init-1"
    # The cause is named (libcurl's words: the connection was refused).
    assert "connect" in body["error"]["message"].lower()
    assert count_sessions(pg) == before


def test_server_keeps_serving_after_garbage(session):
    for body in (b"\x00" * 100, b"[" * 10000, b'{"jsonrpc":"2.0","method":' + b'"x' * 1000):
        session.post_raw(body)
    assert "tools" in session.call("tools/list")
