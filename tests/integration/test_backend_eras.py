"""The backend's protocol eras learned by the gateway where MCPBackendProtocols does not say them
(mod_mcp_eras): a server/discover probe, the answer kept in PostgreSQL (mcp.backend_eras) with a
lifetime and shared by every process and host. A stack of its own, two httpd instances, with
tests/integration/gateway-backend-eras.conf in front of:

* tests/node/modern-backend.mjs --modern-only (2026 only): 2026-07-28 calls pass through (they
  were 502 "the backend refused initialize" while the default was the 2025 era), 2025-era
  clients are served by the era shim;
* tests/node/modern-backend.mjs (both eras): both eras go straight through, nothing bridged;
* the C test backend (2025 only, it refuses server/discover): 2026-07-28 calls still go through
  the era bridge;
* an unreachable backend: nothing learned, nothing stored; a Location that says
  MCPBackendProtocols: no probe; MCPBackendProtocolsTTL: the lifetime, then learned again;
* what one instance learned, the other uses without probing (the node backends log each
  server/discover they get).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests

from conftest import database, node_backend, own_stack, run_dir
from test_node_peers import node22  # noqa: F401  (a fixture)
from waiting import wait_for

V26 = "2026-07-28"
V25 = "2025-11-25"
LEGACY = "2025-11-25, 2025-06-18, 2025-03-26"
ACCEPT = "application/json, text/event-stream"
CONF = Path(__file__).resolve().parent / "gateway-backend-eras.conf"


@pytest.fixture(scope="module")
def eras(node22):  # noqa: F811
    d = run_dir("mcp-backend-eras.")
    (d / "modern-only").mkdir()
    (d / "dual").mkdir()
    with node_backend(node22, d / "modern-only", "modern-backend.mjs", "--modern-only") as mport, \
            node_backend(node22, d / "dual", "modern-backend.mjs") as dport:
        modern_only = f"http://127.0.0.1:{mport}/mcp"
        dual = f"http://127.0.0.1:{dport}/mcp"
        with own_stack(d, "--httpd", "2", "--httpd-env", f"MCP_ERAS_MODERN_ONLY={modern_only}",
                       "--httpd-env", f"MCP_ERAS_DUAL={dual}", "--conf", str(CONF)) as env:
            env.update(BASES=[u.rsplit("/", 1)[0] for u in env["MCP_URLS"].split()],
                       MODERN_ONLY=modern_only, DUAL=dual, DIR=d)
            yield env


@pytest.fixture
def db(eras):
    with database(eras) as conn:
        yield conn


def discovers(eras, which: str) -> int:
    """How many server/discover requests the node backend `which` (modern-only, dual) got."""
    return (eras["DIR"] / which / "backend.log").read_text().count("server/discover")


def learned(db, backend: str):
    with db.cursor() as cur:
        cur.execute("""SELECT protocols, extract(epoch FROM expires_at - learned_at), learned_at
                         FROM mcp.backend_eras WHERE backend_url = %s""", (backend,))
        return cur.fetchone()


def bridge_sessions(db, backend: str) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM mcp.bridge_sessions WHERE backend_url = %s", (backend,))
        return cur.fetchone()[0]


def modern(url, rid, method, params=None, name=None):
    """A 2026-07-28 request; the response and its JSON-RPC messages."""
    params = dict(params or {})
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": V26,
                       "io.modelcontextprotocol/clientCapabilities": {}}
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": V26,
         "Mcp-Method": method}
    if name:
        h["Mcp-Name"] = name
    r = requests.post(url, data=json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                            "params": params}), headers=h, timeout=30)
    return r, messages(r)


def messages(r):
    if r.headers.get("Content-Type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    try:
        return [r.json()]
    except ValueError:
        return []


def tool_text(msgs) -> str:
    result = msgs[-1]["result"]
    return result["content"][0]["text"]


def legacy_session(url):
    """initialize + notifications/initialized at url (2025-11-25): the session id."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": V25, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = requests.post(url, json=body, headers={"Accept": ACCEPT}, timeout=30)
    assert r.status_code == 200, r.text
    sid = r.headers["Mcp-Session-Id"]
    assert messages(r)[0]["result"]["protocolVersion"] == V25
    n = requests.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                      headers={"Accept": ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": V25},
                      timeout=30)
    assert n.status_code == 202, n.text
    return sid


def legacy_call(url, sid, rid, name, arguments=None):
    r = requests.post(url, json={"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                 "params": {"name": name, "arguments": arguments or {}}},
                      headers={"Accept": ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": V25},
                      timeout=30)
    assert r.status_code == 200, r.text
    return messages(r)


def error_log(eras, instance: int = 1) -> str:
    return (eras["DIR"] / "stack" / f"httpd-{instance}" / "error_log").read_text(errors="replace")


# ---- a 2026-only backend ---------------------------------------------------------------------


def test_a_2026_call_through_a_2026_only_backend_passes_through(eras, db):
    url = eras["BASES"][0] + "/eras-modern-only"
    r, msgs = modern(url, 1, "tools/list")
    assert r.status_code == 200, r.text
    assert any(t["name"] == "test_simple_text" for t in msgs[-1]["result"]["tools"])
    r, msgs = modern(url, 2, "tools/call", {"name": "test_simple_text", "arguments": {}},
                     name="test_simple_text")
    assert r.status_code == 200, r.text
    assert "result" in msgs[-1], msgs
    row = learned(db, eras["MODERN_ONLY"])
    assert row and row[0] == V26
    assert bridge_sessions(db, eras["MODERN_ONLY"]) == 0
    assert f"backend {eras['MODERN_ONLY']} serves {V26} (learned by server/discover" in error_log(eras)


def test_a_2025_client_of_a_2026_only_backend_gets_the_shim(eras, db):
    url = eras["BASES"][0] + "/eras-modern-only"
    sid = legacy_session(url)
    msgs = legacy_call(url, sid, 2, "test_simple_text")
    assert msgs[-1]["id"] == 2 and "resultType" not in msgs[-1]["result"]   # cleaned by the shim
    with db.cursor() as cur:
        cur.execute("SELECT backend_session_id FROM mcp.sessions WHERE id = %s", (sid,))
        assert cur.fetchone() == (None,)   # the gateway's own session
    # The backend saw one 2025-era request: the gateway's initialize probe when it learned the
    # eras (its discover listed 2026-07-28 alone); the client's traffic came the 2026 way.
    assert tool_text(legacy_call(url, sid, 3, "legacy_seen")) == "1"


# ---- a backend of both eras ------------------------------------------------------------------


def test_a_dual_backend_serves_both_eras_directly(eras, db):
    url = eras["BASES"][0] + "/eras-dual"
    r, msgs = modern(url, 1, "tools/call", {"name": "legacy_seen", "arguments": {}}, name="legacy_seen")
    assert r.status_code == 200, r.text
    before = int(tool_text(msgs))
    row = learned(db, eras["DUAL"])
    assert row and row[0].startswith(f"{V26}, {V25}"), row
    assert bridge_sessions(db, eras["DUAL"]) == 0
    # A 2025-era client reaches the backend in its era (not through the shim).
    sid = legacy_session(url)
    msgs = legacy_call(url, sid, 2, "legacy_seen")
    assert int(tool_text(msgs)) > before


# ---- one instance learns, every one uses it --------------------------------------------------


def test_what_one_instance_learned_the_other_uses_without_probing(eras, db):
    first, second = eras["BASES"]
    for which, path, key in (("modern-only", "/eras-modern-only", "MODERN_ONLY"), ("dual", "/eras-dual", "DUAL")):
        r, _ = modern(first + path, 10, "tools/list")
        assert r.status_code == 200, r.text
        assert learned(db, eras[key])
        seen = discovers(eras, which)
        assert seen >= 1
        for i in range(12):   # several children of the other instance
            r, msgs = modern(second + path, 20 + i, "tools/list")
            assert r.status_code == 200, r.text
            assert "tools" in msgs[-1]["result"]
        assert discovers(eras, which) == seen, f"{which}: probed again"
    assert "learned by server/discover" not in error_log(eras, 2)


# ---- a 2025-only backend ---------------------------------------------------------------------


def test_a_2025_only_backend_is_still_bridged(eras, db):
    backend = eras["MCP_BACKEND_URL"]
    r, msgs = modern(eras["BASES"][0] + "/mcp", 1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}},
                     name="echo")
    assert r.status_code == 200, r.text
    assert tool_text(msgs) == "hi"
    assert learned(db, backend)[0] == LEGACY
    assert bridge_sessions(db, backend) >= 1
    # ... and 2025-era clients go to it as ever.
    sid = legacy_session(eras["BASES"][1] + "/mcp")
    assert tool_text(legacy_call(eras["BASES"][1] + "/mcp", sid, 2, "echo", {"text": "yo"})) == "yo"


def test_the_learned_lifetime_is_MCPBackendProtocolsTTL_then_learned_again(eras, db):
    backend = eras["MCP_BACKEND_URL"] + "?eras=short"
    url = eras["BASES"][0] + "/eras-short"
    r, _ = modern(url, 1, "tools/list")
    assert r.status_code == 200, r.text
    protocols, lifetime, at = learned(db, backend)
    assert protocols == LEGACY and 0.9 < float(lifetime) < 1.5
    time.sleep(1.5)
    r, _ = modern(url, 2, "tools/list")
    assert r.status_code == 200, r.text
    assert learned(db, backend)[2] > at


# ---- nothing to learn, or nothing asked ------------------------------------------------------


def test_an_unreachable_backend_is_not_learned(eras, db):
    r, _ = modern(eras["BASES"][0] + "/eras-down", 1, "tools/list")
    assert r.status_code == 502, r.text       # taken to be of the 2025 era: the bridge tries it
    assert learned(db, "http://127.0.0.1:9/eras-down") is None
    wait_for(lambda: "backend http://127.0.0.1:9/eras-down: its protocol eras are not learned"
             in error_log(eras), timeout=10, what="the log line")


def test_a_location_that_says_its_protocols_is_not_probed(eras, db):
    backend = eras["MODERN_ONLY"] + "?said"
    seen = discovers(eras, "modern-only")
    r, _ = modern(eras["BASES"][0] + "/eras-said", 1, "tools/list")
    # Bridged as before: this backend refuses initialize.
    assert r.status_code == 502 and "refused initialize" in r.text, r.text
    assert learned(db, backend) is None
    assert discovers(eras, "modern-only") == seen
