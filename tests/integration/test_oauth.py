"""OAuth protected-resource metadata (RFC 9728) and bearer tokens validated by mod_auth_openidc
in resource-server mode (README "Authorization"). The test runs its own authorization server
(tests/oauth_as.py: a key made at start, a JWKS, client-credentials tokens) and its own stack
whose /mcp-oauth location trusts it."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import psycopg2
import pytest
import requests

from conftest import REPO, own_stack, run_dir
from mcp_client import McpError, McpSession
from waiting import wait_for

OPENIDC = Path("/usr/lib/apache2/modules/mod_auth_openidc.so")

CONF = """
LoadModule auth_openidc_module {openidc}
OIDCCryptoPassphrase {passphrase}
OIDCOAuthVerifyJwksUri {issuer}/jwks
OIDCOAuthRemoteUserClaim sub
OIDCOAuthSSLValidateServer Off

<Location /mcp-oauth>
    SetHandler mcp
    MCPBackend ${{MCP_BACKEND_URL}}
    MCPProtectedResource ${{MCP_HTTPD_URL}}/mcp-oauth
    MCPAuthorizationServers {issuer}
    MCPResourceScopes mcp:tools
    AuthType oauth20
    <RequireAll>
        Require valid-user
        Require claim aud:${{MCP_HTTPD_URL}}/mcp-oauth
    </RequireAll>
</Location>
"""


@pytest.fixture(scope="module")
def oauth_stack():
    assert OPENIDC.is_file(), "mod_auth_openidc is missing: run scripts/deps"
    d = run_dir("mcp-oauth.")
    portfile = d / "as.port"
    as_log = open(d / "as.log", "wb")
    as_proc = subprocess.Popen(["/usr/bin/python3", str(REPO / "tests" / "oauth_as.py"),
                                "--portfile", str(portfile), "--certfile", str(d / "as.pem")],
                               stdin=subprocess.DEVNULL,
                               stdout=as_log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: portfile.is_file() or as_proc.poll() is not None,
                 what="the authorization server's port")
        assert as_proc.poll() is None, (d / "as.log").read_text()
        issuer = f"https://127.0.0.1:{portfile.read_text().strip()}"
        conf = d / "oauth.conf"
        conf.write_text(CONF.format(openidc=OPENIDC, issuer=issuer,
                                    passphrase=secrets.token_hex(16)))
        # own_stack: the sanitizer pass's module too, and `down` fails on a sanitizer report
        with own_stack(d, "--httpd", "1", "--conf", str(conf)) as env:
            base = env["MCP_URL"].rsplit("/", 1)[0]
            yield {"issuer": issuer, "url": base + "/mcp-oauth", "base": base, "env": env,
                   "ca": str(d / "as.pem")}
    finally:
        as_proc.terminate()
        as_proc.wait(timeout=10)
        as_log.close()


def _token(ca, issuer, client, resource, lifetime=300):
    r = requests.post(issuer + "/token", verify=ca, data={
        "grant_type": "client_credentials", "client_id": client, "client_secret": client + "-secret",
        "resource": resource, "scope": "mcp:tools", "lifetime": str(lifetime)}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["access_token"]


def _bearer(token):
    return {"Authorization": f"Bearer {token}"}


def _challenge(resp) -> str:
    values = resp.headers.get("WWW-Authenticate", "")
    assert "Bearer" in values, resp.headers
    return values


def test_metadata_and_discovery_flow(oauth_stack):
    url, issuer = oauth_stack["url"], oauth_stack["issuer"]
    # 1. No token: 401 with the metadata's URL and the scope hint. (Every session is closed
    # when done: a connection still open at `tests/stack down` ends in a LeakSanitizer report
    # in the sanitizer pass; README, Sanitizers.)
    with McpSession(url) as s, pytest.raises(McpError) as e:
        s.initialize()
    r = e.value.response
    assert r.status_code == 401
    challenge = _challenge(r)
    expected = oauth_stack["base"] + "/.well-known/oauth-protected-resource/mcp-oauth"
    assert f'resource_metadata="{expected}"' in challenge, challenge
    assert 'scope="mcp:tools"' in challenge
    # 2. The metadata, public.
    meta = requests.get(expected, timeout=10)
    assert meta.status_code == 200 and meta.headers["Content-Type"].startswith("application/json")
    doc = meta.json()
    assert doc["resource"] == url
    assert doc["authorization_servers"] == [issuer]
    assert doc["scopes_supported"] == ["mcp:tools"]
    assert doc["bearer_methods_supported"] == ["header"]
    # 3. The authorization server's metadata, a token for this resource, and calls.
    asm = requests.get(doc["authorization_servers"][0] + "/.well-known/oauth-authorization-server",
                       timeout=10, verify=oauth_stack["ca"]).json()
    tok = requests.post(asm["token_endpoint"], verify=oauth_stack["ca"], data={
        "grant_type": "client_credentials", "client_id": "client-a",
        "client_secret": "client-a-secret", "resource": doc["resource"]}, timeout=10).json()
    with McpSession(url) as s:
        s.http.headers.update(_bearer(tok["access_token"]))
        s.initialize()
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": "with a token"}})
        info = s.call("tools/call", {"name": "session_info", "arguments": {}})
        # The backend never sees the client's token.
        text = info["content"][0]["text"] if "content" in info else str(info)
        assert '"authorizationHeaders":0' in text.replace(" ", ""), text
        s.delete()


def test_session_bound_to_token_subject(oauth_stack):
    url, issuer, env = oauth_stack["url"], oauth_stack["issuer"], oauth_stack["env"]
    with McpSession(url) as a, McpSession(url) as b:
        a.http.headers.update(_bearer(_token(oauth_stack["ca"], issuer, "client-a", url)))
        a.initialize()
        with psycopg2.connect(env["MCP_PG"]) as conn, conn.cursor() as cur:
            cur.execute("SELECT principal FROM mcp.sessions WHERE id = %s", (a.session_id,))
            assert cur.fetchone()[0] == "client-a"
        # Another subject's valid token cannot use that session.
        b.http.headers.update(_bearer(_token(oauth_stack["ca"], issuer, "client-b", url)))
        b.session_id, b.initialized, b.protocol_version = a.session_id, True, a.protocol_version
        with pytest.raises(McpError) as e:
            b.call("tools/list")
        assert e.value.response.status_code == 404


def test_wrong_audience_expired_and_missing_tokens(oauth_stack):
    url, issuer = oauth_stack["url"], oauth_stack["issuer"]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    cases = {
        "wrong audience": _bearer(_token(oauth_stack["ca"], issuer, "client-a", "https://elsewhere.example/mcp")),
        "expired": _bearer(_token(oauth_stack["ca"], issuer, "client-a", url, lifetime=-120)),
        "missing": {},
        "garbage": _bearer("not.a.token"),
    }
    for what, auth in cases.items():
        r = requests.post(url, json=init, headers={**h, **auth}, timeout=10)
        assert r.status_code == 401, (what, r.status_code, r.text[:200])
        challenge = _challenge(r)
        assert "resource_metadata=" in challenge, (what, r.headers)
        assert challenge.count("Bearer") == 1, challenge
