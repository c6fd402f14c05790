"""Per-name authorization with Apache's Require grammar: Require mcp-tool / mcp-prompt /
mcp-resource (README "Authorization"). /mcp-authz in gateway.conf: everyone may call echo and
session_info; only group ops (alice) also add and test_*; one prompt and the static-* resources."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from mcp_client import McpError

ALICE = ("alice", "alice-pw")
BOB = ("bob", "bob-pw")


@pytest.fixture
def url(stack):
    Path(stack["MCP_STACK_DIR"], "groups").write_text("ops: alice\n")
    u = urlsplit(stack["MCP_URLS"].split()[0])
    return f"{u.scheme}://{u.netloc}/mcp-authz"


@pytest.fixture
def mcp(mcp):
    """The sessions end (DELETE) after the test: alice's and bob's live sessions count against
    the per-principal limits other tests check."""
    made = []

    def make(*a, **kw):
        s = mcp(*a, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        if s.session_id:
            s.delete()


def _call(s, method, params):
    msg = {"jsonrpc": "2.0", "id": s.next_id(), "method": method, "params": params}
    return msg, s.post_raw(json.dumps(msg))


def test_allowed_calls_pass(url, mcp):
    alice = mcp(url, auth=ALICE)
    alice.initialize()
    assert alice.call("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    assert alice.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    bob = mcp(url, auth=BOB)
    bob.initialize()
    assert bob.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert bob.call("prompts/get", {"name": "test_simple_prompt"})
    assert bob.call("resources/read", {"uri": "test://static-text"})


def test_denied_tool_is_a_jsonrpc_error_and_audited(url, mcp, pg):
    bob = mcp(url, auth=BOB)
    bob.initialize()
    msg, r = _call(bob, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    assert r.status_code == 403
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    assert body["id"] == msg["id"] and body["jsonrpc"] == "2.0"
    assert "tool 'add'" in body["error"]["message"]
    assert "Require mcp-tool" in body["error"]["message"]
    # The session goes on: the denial is about that call only.
    assert bob.call("tools/call", {"name": "echo", "arguments": {"text": "still here"}})
    # Stored in the audit: the refused message and the error, in the session's trail.
    with pg.cursor() as cur:
        cur.execute("SELECT direction, message FROM mcp.events WHERE session_id = %s "
                    "AND stream_id IS NULL AND message IS NOT NULL ORDER BY id", (bob.session_id,))
        rows = cur.fetchall()
    assert ("in", msg) in [(d, m) for d, m in rows]
    outs = [m for d, m in rows if d == "out" and m.get("id") == msg["id"]]
    assert outs and outs[0]["error"]["message"] == body["error"]["message"]
    # A tool that nobody may call: denied for alice too.
    alice = mcp(url, auth=ALICE)
    alice.initialize()
    _, r = _call(alice, "tools/call", {"name": "slow", "arguments": {}})
    assert r.status_code == 403 and "tool 'slow'" in r.json()["error"]["message"]


def test_denied_prompt_and_resource(url, mcp):
    bob = mcp(url, auth=BOB)
    bob.initialize()
    _, r = _call(bob, "prompts/get", {"name": "test_prompt_with_arguments",
                                      "arguments": {"arg1": "a", "arg2": "b"}})
    assert r.status_code == 403 and "prompt 'test_prompt_with_arguments'" in r.json()["error"]["message"]
    _, r = _call(bob, "resources/read", {"uri": "test://watched-resource"})
    assert r.status_code == 403 and "Require mcp-resource" in r.json()["error"]["message"]


def test_authentication_still_comes_first(url, mcp):
    anon = mcp(url)
    with pytest.raises(McpError) as e:
        anon.initialize()
    assert e.value.response.status_code == 401


def test_protected_resource_without_auth_module(stack):
    """MCPProtectedResource with nothing authenticating: the handler answers 401 with the
    RFC 9728 challenge, and the metadata is served at the well-known path."""
    u = urlsplit(stack["MCP_URLS"].split()[0])
    base = f"{u.scheme}://{u.netloc}"
    r = requests.post(base + "/mcp-protected", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                      headers={"Accept": "application/json, text/event-stream"}, timeout=10)
    assert r.status_code == 401
    # Refused before the body is read: the error carries no id.
    assert r.json()["error"]["code"] == -32000 and r.json()["id"] is None
    meta_url = base + "/.well-known/oauth-protected-resource/mcp-protected"
    assert r.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{meta_url}"'
    doc = requests.get(meta_url, timeout=10).json()
    assert doc == {"resource": base + "/mcp-protected",
                   "authorization_servers": ["https://as.example.com", "https://as2.example.com"],
                   "bearer_methods_supported": ["header"]}
    assert requests.post(meta_url, timeout=10).status_code == 405
    assert requests.get(meta_url + "-nothing", timeout=10).status_code == 404


def test_batch_with_one_denied_call(url, mcp):
    """2025-03-26 batches: every call in the batch must be allowed."""
    bob = mcp(url, auth=BOB, protocol_version="2025-03-26")
    bob.initialize()
    batch = [{"jsonrpc": "2.0", "id": bob.next_id(), "method": "tools/call",
              "params": {"name": "echo", "arguments": {"text": "a"}}},
             {"jsonrpc": "2.0", "id": bob.next_id(), "method": "tools/call",
              "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}]
    r = bob.post_raw(json.dumps(batch))
    assert r.status_code == 403
    assert r.json()["id"] is None and "tool 'add'" in r.json()["error"]["message"]
    r = bob.post_raw(json.dumps(batch[:1]))
    assert r.status_code == 200, r.text


def _names(result, key="tools", field="name"):
    return [item[field] for item in result[key]]


def test_lists_show_only_what_the_user_may_use(url, mcp, stack, pg):
    """tools/list, prompts/list and resources/list leave out what the Require lines would
    refuse this user, in the backend's order; the stored answer is the one the client got (a
    resumption replays it); templates stay (they name no resource)."""
    log = Path(stack["MCP_STACK_DIR"], "httpd-1", "error_log")
    log_from = log.stat().st_size
    plain = mcp(stack["MCP_URLS"].split()[0])
    plain.initialize()
    everything = _names(plain.call("tools/list"))
    assert {"add", "echo", "session_info", "slow"} <= set(everything)
    alice = mcp(url, auth=ALICE)
    alice.initialize()
    bob = mcp(url, auth=BOB)
    bob.initialize()
    assert _names(bob.call("tools/list")) == [n for n in everything if n in ("echo", "session_info")]
    assert _names(alice.call("tools/list")) == [
        n for n in everything if n in ("echo", "session_info", "add") or n.startswith("test_")]
    prompts = _names(bob.call("prompts/list"), "prompts")
    assert prompts == ["test_simple_prompt"]
    uris = _names(bob.call("resources/list"), "resources", "uri")
    assert uris and all(u.startswith("test://static-") for u in uris)
    assert len(uris) < len(_names(plain.call("resources/list"), "resources", "uri"))
    templates = plain.call("resources/templates/list")["resourceTemplates"]
    assert bob.call("resources/templates/list")["resourceTemplates"] == templates
    # What was stored is what bob got: the audit trail and a resumption show the same list.
    with pg.cursor() as cur:
        cur.execute("""SELECT message_text FROM mcp.events WHERE session_id = %s
                        AND direction = 'out' AND message -> 'result' ? 'tools'""",
                    (bob.session_id,))
        (text,), = cur.fetchall()
    assert _names(json.loads(text)["result"]) == [n for n in everything
                                                  if n in ("echo", "session_info")]
    # The probes are not denials: nothing in the error log says a client was refused.
    with log.open() as f:
        f.seek(log_from)
        added = f.read()
    assert "AH01630" not in added and "AH01631" not in added, added[-2000:]


def test_lists_are_filtered_in_a_json_answer_too(url, mcp):
    """A 2025-06-18 session's answer is application/json: the body sent is the filtered one."""
    bob = mcp(url, auth=BOB, protocol_version="2025-06-18")
    bob.initialize()
    msg, r = _call(bob, "tools/list", {})
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    assert sorted(_names(r.json()["result"])) == ["echo", "session_info"]
