"""Headers toward the backend (README, MCPBackendHeader): the user's identity from an httpd
expression and a static value from a file reach the backend on every request of the session;
an empty value is not sent; the client's own Authorization header never is (gateway.conf's
/mcp-identity, behind Basic auth)."""
from __future__ import annotations

import json
from pathlib import Path


def backend_saw(s) -> dict:
    result = s.call("tools/call", {"name": "session_info", "arguments": {}})
    return json.loads(result["content"][0]["text"])


def base(stack) -> str:
    return stack["MCP_HTTP_URLS"].split()[0].rsplit("/", 1)[0]


def test_identity_headers_reach_the_backend(stack, mcp):
    static = Path("/etc/debian_version").read_text().strip()
    for user, password in (("alice", "alice-pw"), ("bob", "bob-pw")):
        s = mcp(base(stack) + "/mcp-identity", auth=(user, password))
        s.initialize()
        info = backend_saw(s)
        headers = {k.lower(): v for k, v in (info["headers"] or {}).items()}
        assert headers.get("x-user") == user, info
        assert headers.get("x-team") == f"{user}-team", info
        assert headers.get("x-static") == static, info
        assert "x-absent" not in headers, info
        # The client's Basic credentials stay at the gateway.
        assert "authorization" not in headers and info["authorizationHeaders"] == 0, info
        s.close()


def test_without_the_directives_nothing_is_added(stack, mcp):
    s = mcp(stack["MCP_HTTP_AUTH_URLS"].split()[0], auth=("alice", "alice-pw"))
    s.initialize()
    info = backend_saw(s)
    assert not any(k.lower().startswith("x-") for k in (info["headers"] or {})), info
    assert info["authorizationHeaders"] == 0, info
    s.close()
