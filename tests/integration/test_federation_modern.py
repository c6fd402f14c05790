"""A 2026-07-28 (stateless) client on a federated endpoint (issue 22, "both eras";
mod_mcp_federation_modern.c, mcp_federation_modern in mod_mcp_federation.h).

A stack of this module's own (two httpd instances, h2c and h2 over TLS) serves these Locations,
whose three members are of both eras:

  /fed-modern        alpha (the stack's C test backend, 2025 era, unprefixed), beta (the same
                     backend, prefix beta_, resources under beta+) and gamma (the TS SDK v2
                     modern-backend.mjs --modern-only: 2026-07-28 only, prefix m_, resources
                     under gamma+); no member's eras are configured: the gateway learns them
  /fed-modern-off    the same members, MCPEraBridge Off: the 2025-era members cannot be asked
  /fed-modern-authz  Require mcp-tool echo m_test_simple_text (behind Basic auth)
  /fed-modern-two    beta and gamma only (a listen: one pooled session's GET stream per backend)
  /fed-modern-shimmed  alpha, and gamma through a Location of the era shim's (/shim-gamma)
  /fed-three         alpha, gamma through /shim-gamma, and ev: server-everything (prefix ev_)
  /fed-modern-down   alpha, and a member on a port where nothing listens

Each member is asked in its own era: alpha and beta through the era bridge's pooled sessions
(one per member), gamma directly; lists are merged, calls routed by name with Mcp-Name rewritten
(the TS SDK server checks it against the body), answers in the client's names.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from mcp_client import McpSession, iter_sse
from conftest import (database, node_backend, own_stack, plain_endpoints, run_dir, wanted_modes,
                      wire_client)
from test_node_peers import node22  # noqa: F401  (a fixture)
from waiting import wait_for

V = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
CAPS = {"elicitation": {}, "sampling": {}}
ALICE = ("alice", "alice-pw")

CONF = """
<IfModule !env_module>
    LoadModule env_module /usr/lib/apache2/modules/mod_env.so
</IfModule>

<Location /fed-modern>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
        Prefix beta_
    </MCPMember>
    <MCPMember gamma>
        Backend http://127.0.0.1:{modern}/mcp
        Prefix m_
    </MCPMember>
</Location>

<Location /fed-modern-off>
    SetHandler mcp
    MCPEraBridge Off
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember gamma>
        Backend http://127.0.0.1:{modern}/mcp
        Prefix m_
    </MCPMember>
</Location>

<Location /fed-modern-authz>
    SetHandler mcp
    AuthType Basic
    AuthName "mcp"
    AuthUserFile "${{MCP_STACK_DIR}}/htpasswd"
    AuthzSendForbiddenOnFailure On
    <RequireAll>
        Require valid-user
        Require mcp-tool echo m_test_simple_text
    </RequireAll>
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember gamma>
        Backend http://127.0.0.1:{modern}/mcp
        Prefix m_
    </MCPMember>
</Location>

<Location /fed-modern-two>
    SetHandler mcp
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
        Prefix beta_
    </MCPMember>
    <MCPMember gamma>
        Backend http://127.0.0.1:{modern}/mcp
        Prefix m_
    </MCPMember>
</Location>

# The 2026-only backend behind a Location of its own (the era shim serves 2025-era clients there),
# named as a member's Backend: how a 2025-era session federates a 2026-only server.
# (No keep-alive there: a connection of httpd's to itself still open at the stack's stop makes
# LeakSanitizer report the event MPM's allocator of the worker that held it.)
<Location /shim-gamma>
    SetHandler mcp
    MCPBackend http://127.0.0.1:{modern}/mcp
    MCPBackendProtocols 2026-07-28
    SetEnv nokeepalive 1
</Location>

<Location /fed-modern-shimmed>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember gamma>
        Backend ${{MCP_HTTPD_URL}}/shim-gamma
        Prefix m_
    </MCPMember>
</Location>

# Three members as a team would put them together: the C test backend (2025 era), the 2026-only
# backend (through /shim-gamma: both eras), and @modelcontextprotocol/server-everything (2025
# era, the TypeScript SDK v1's reference server).
<Location /fed-three>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember gamma>
        Backend ${{MCP_HTTPD_URL}}/shim-gamma
        Prefix m_
    </MCPMember>
    <MCPMember ev>
        Backend http://127.0.0.1:{everything}/mcp
        Prefix ev_
    </MCPMember>
</Location>

<Location /fed-modern-down>
    SetHandler mcp
    MCPBackendTimeout 3
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember gone>
        Backend http://127.0.0.1:{down}/mcp
        Prefix gone_
    </MCPMember>
</Location>
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


EVERYTHING = (Path(__file__).resolve().parents[2] / "tests" / "node" / "node_modules"
              / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")


@contextlib.contextmanager
def everything(node: str, d: Path):
    """server-everything (Streamable HTTP) on a free port of the loopback; yields the port."""
    port = free_port()
    with open(d / "everything.log", "wb") as log:
        proc = subprocess.Popen([node, "--import", str(EVERYTHING.parents[4] / "loopback.mjs"),
                                 str(EVERYTHING), "streamableHttp"],
                                cwd=EVERYTHING.parents[4], env={**os.environ, "PORT": str(port)},
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        def up():
            if proc.poll() is not None:
                return "exited"
            with socket.socket() as c:
                return c.connect_ex(("127.0.0.1", port)) == 0 and "up"
        assert wait_for(up, timeout=30, what="server-everything to listen") == "up", \
            (d / "everything.log").read_text()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def fm(node22):  # noqa: F811
    d = run_dir("mcp-fed-modern.")
    with node_backend(node22, d, "modern-backend.mjs", "--modern-only") as port, \
            everything(node22, d) as ev_port:
        conf = d / "fed-modern.conf"
        conf.write_text(CONF.format(modern=port, down=free_port(), everything=ev_port))
        with own_stack(d, "--httpd", "2", "--tls", "--http2", "--conf", str(conf)) as env:
            env = plain_endpoints(env)
            bases = [u.rsplit("/", 1)[0] for u in env["MCP_URLS"].split()]
            env.update(URL=f"{bases[0]}/fed-modern", URL2=f"{bases[1]}/fed-modern",
                       OFF_URL=f"{bases[0]}/fed-modern-off",
                       AUTHZ_URL=f"{bases[0]}/fed-modern-authz",
                       TWO_URL=f"{bases[0]}/fed-modern-two", TWO_URL2=f"{bases[1]}/fed-modern-two",
                       DOWN_URL=f"{bases[0]}/fed-modern-down",
                       SHIMMED_URL=f"{bases[0]}/fed-modern-shimmed",
                       THREE_URL=f"{bases[0]}/fed-three", THREE_URL2=f"{bases[1]}/fed-three")
            yield env


@pytest.fixture
def db(fm):
    with database(fm) as conn:
        yield conn


def call(url, rid, method, params=None, name=None, http=None, auth=None, caps=None):
    params = dict(params or {})
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": V,
                       "io.modelcontextprotocol/clientCapabilities": CAPS if caps is None else caps,
                       "io.modelcontextprotocol/clientInfo": {"name": "test_fed_modern",
                                                              "version": "1"}}
    h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": V,
         "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    return (http or requests).post(url, data=json.dumps(body), headers=h, auth=auth, timeout=30)


def tool(url, rid, name, arguments=None, extra=None, **kw):
    params = {"name": name, "arguments": arguments or {}}
    params.update(extra or {})
    return call(url, rid, "tools/call", params, name=name, **kw)


def final(resp):
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        msgs = [json.loads(line[5:]) for line in resp.text.splitlines()
                if line.startswith("data:")]
    else:
        msgs = [resp.json()]
    assert msgs and "id" in msgs[-1], resp.text
    return msgs[-1]


def text_of(resp):
    msg = final(resp)
    assert "result" in msg, msg
    return msg["result"]["content"][0]["text"]


def listed(url, method, key, **kw):
    """Every item of a list method, page after page, and the pages' results."""
    items, cursor, pages = [], None, []
    while True:
        r = call(url, f"l-{method}-{len(pages)}", method, {"cursor": cursor} if cursor else {},
                 **kw)
        assert r.status_code == 200, r.text
        result = final(r)["result"]
        pages.append(result)
        items += result[key]
        cursor = result.get("nextCursor")
        if not cursor:
            return items, pages


def test_discover_merges_the_members_of_both_eras(fm):
    """server/discover: alpha and beta (2025 era: their InitializeResult, through the bridge)
    and gamma (its own discover) merged: the union of their capabilities, gamma's instructions
    under its name, the gateway's serverInfo with the module's version."""
    r = call(fm["URL"], "d-1", "server/discover")
    assert r.status_code == 200, r.text
    result = final(r)["result"]
    assert result["resultType"] == "complete"
    assert V in result["supportedVersions"]
    assert result["serverInfo"]["name"] == "mod_mcp"
    assert result["serverInfo"]["title"] == "mod_mcp federation of 3 member(s)"
    assert result["serverInfo"]["version"] not in ("", None)
    caps = result["capabilities"]
    assert {"tools", "prompts", "resources"} <= set(caps)
    assert "gamma: Test backend of mod_mcp (both protocol eras)." in result["instructions"]


def test_lists_merge_every_member_in_its_own_era(fm, db):
    """tools/list, prompts/list, resources/list and resources/templates/list: every member's
    items, in the client's names (alpha's as they are, beta_ and m_ prefixed, beta+ and gamma+
    URIs), stamped as 2026-07-28 results; the answer stored on a stream of no session."""
    tools, pages = listed(fm["URL"], "tools/list", "tools")
    names = {t["name"] for t in tools}
    assert {"echo", "beta_echo", "m_test_simple_text", "m_test_input_required_result_elicitation"
            } <= names, sorted(names)
    assert "test_simple_text" in names   # alpha's own (the C backend has it too)
    assert not any(n.startswith("beta_m_") or n.startswith("m_beta_") for n in names)
    assert all(p["resultType"] == "complete" and "ttlMs" in p and p["cacheScope"] == "private"
               for p in pages)
    resources, _ = listed(fm["URL"], "resources/list", "resources")
    uris = {r["uri"] for r in resources}
    assert {"test://static-text", "beta+test://static-text", "gamma+test://static-text"} <= uris
    templates, _ = listed(fm["URL"], "resources/templates/list", "resourceTemplates")
    assert "gamma+test://template/{id}/data" in {t["uriTemplate"] for t in templates}
    prompts, _ = listed(fm["URL"], "prompts/list", "prompts")
    assert {"test_simple_prompt", "beta_test_simple_prompt", "m_test_simple_prompt"} <= {
        p["name"] for p in prompts}
    with db.cursor() as cur:
        cur.execute("""SELECT status FROM mcp.streams WHERE session_id IS NULL
                          AND request_id = '"l-tools/list-0"'::jsonb ORDER BY id DESC LIMIT 1""")
        assert cur.fetchone()[0] == "complete"


def test_a_forged_cursor_is_refused(fm):
    """A cursor this endpoint did not give is -32602; one naming a member it lacks too."""
    r = call(fm["URL"], "c-1", "tools/list", {"cursor": "not-a-cursor"})
    assert final(r)["error"]["code"] == -32602
    forged = base64.urlsafe_b64encode(b'[["zeta","x"]]').decode().rstrip("=")
    r = call(fm["URL"], "c-2", "tools/list", {"cursor": forged})
    assert "does not have" in final(r)["error"]["message"]


def test_calls_are_routed_to_their_member_in_its_era(fm, db):
    """A call reaches the member its name says, under the member's own name (Mcp-Name too:
    gamma's TS SDK server refuses a header that disagrees with the body), in its era: alpha
    and beta through the bridge (each its own pooled session), gamma directly."""
    assert text_of(tool(fm["URL"], "r-1", "echo", {"text": "to alpha"})) == "to alpha"
    assert text_of(tool(fm["URL"], "r-2", "beta_echo", {"text": "to beta"})) == "to beta"
    r = tool(fm["URL"], "r-3", "m_test_simple_text")
    assert r.status_code == 200, r.text
    assert "test" in text_of(r).lower()
    r = tool(fm["URL"], "r-4", "nope")
    assert final(r)["error"]["code"] == -32602 and "nope" in final(r)["error"]["message"]
    with db.cursor() as cur:
        # The bridged calls' client streams are linked to a backend stream of a pooled session
        # of the member's backend; gamma's went directly.
        cur.execute("""SELECT c.request_id #>> '{}', b.id IS NOT NULL, s.backend_url
                         FROM mcp.streams c LEFT JOIN mcp.streams b ON b.id = c.bridged_to
                         LEFT JOIN mcp.sessions s ON s.id = b.session_id
                        WHERE c.session_id IS NULL
                          AND c.request_id IN ('"r-1"', '"r-2"', '"r-3"')""")
        rows = {rid: (linked, url) for rid, linked, url in cur.fetchall()}
        # The audit: the member that answered, and the request as the client sent it.
        cur.execute("""SELECT c.request_id #>> '{}', c.member, e.message #>> '{params,name}'
                         FROM mcp.streams c JOIN mcp.events e ON e.stream_id = c.id AND e.seq = 0
                        WHERE c.session_id IS NULL
                          AND c.request_id IN ('"r-1"', '"r-2"', '"r-3"')""")
        audit = {rid: (member, name) for rid, member, name in cur.fetchall()}
    assert rows["r-1"] == (True, fm["MCP_BACKEND_URL"]), rows
    assert rows["r-2"] == (True, fm["MCP_BACKEND_URL"]), rows
    assert rows["r-3"] == (False, None), rows
    assert audit == {"r-1": ("alpha", "echo"), "r-2": ("beta", "beta_echo"),
                     "r-3": ("gamma", "m_test_simple_text")}, audit


def test_answers_come_back_in_the_clients_names(fm):
    """resources/read of a prefixed member's URI: the member gets its own URI, the contents
    come back under the client's (beta+ through the bridge, gamma+ directly); a prompt of the
    2026-only member by its prefixed name."""
    r = call(fm["URL"], "n-1", "resources/read", {"uri": "beta+test://static-text"},
             name="beta+test://static-text")
    assert r.status_code == 200, r.text
    assert final(r)["result"]["contents"][0]["uri"] == "beta+test://static-text"
    r = call(fm["URL"], "n-2", "resources/read", {"uri": "gamma+test://static-text"},
             name="gamma+test://static-text")
    assert r.status_code == 200, r.text
    assert final(r)["result"]["contents"][0]["uri"] == "gamma+test://static-text"
    r = call(fm["URL"], "n-3", "prompts/get", {"name": "m_test_simple_prompt"},
             name="m_test_simple_prompt")
    assert r.status_code == 200, r.text
    assert final(r)["result"]["messages"]


def test_input_required_rounds_of_both_eras_are_retried_on_the_other_instance(fm):
    """A 2025-era member's elicitation becomes the bridge's round (its requestState a row in
    PostgreSQL); the 2026-only member's InputRequiredResult passes through; both retries,
    routed by the same name, land on the other instance and complete."""
    r = tool(fm["URL"], "e-1", "beta_test_elicitation", {"message": "Who are you?"})
    result = final(r)["result"]
    assert result["resultType"] == "input_required", result
    (key,) = result["inputRequests"]
    answer = {"action": "accept", "content": {"username": "al", "email": "al@example.com"}}
    r = tool(fm["URL2"], "e-2", "beta_test_elicitation", {"message": "Who are you?"},
             extra={"requestState": result["requestState"], "inputResponses": {key: answer}})
    assert r.status_code == 200, r.text
    assert "al@example.com" in text_of(r)

    r = tool(fm["URL"], "e-3", "m_test_input_required_result_elicitation")
    result = final(r)["result"]
    assert result["resultType"] == "input_required", result
    assert "user_name" in result["inputRequests"]
    extra = {"inputResponses": {"user_name": {"action": "accept", "content": {"name": "Al"}}}}
    if "requestState" in result:
        extra["requestState"] = result["requestState"]
    r = tool(fm["URL2"], "e-4", "m_test_input_required_result_elicitation", extra=extra)
    assert r.status_code == 200, r.text
    assert text_of(r) == "Hello, Al!"


def test_what_2026_removed_is_not_found_and_notifications_are_accepted(fm):
    """ping (and the other methods 2026-07-28 removed) is 404 -32601 as on any 2026-07-28
    server; a listen without its filter is -32602; a notification is stored and accepted."""
    r = call(fm["URL"], "g-1", "ping")
    assert r.status_code == 404 and r.json()["error"]["code"] == -32601
    r = call(fm["URL"], "g-2", "subscriptions/listen")
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602, r.text
    body = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": V,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}
    r = requests.post(fm["URL"], data=json.dumps(body), timeout=30,
                      headers={"Content-Type": "application/json", "Accept": ACCEPT,
                               "MCP-Protocol-Version": V,
                               "Mcp-Method": "notifications/roots/list_changed"})
    assert r.status_code == 202, r.text


def test_a_listen_hears_every_member_in_the_clients_names(fm, db):
    """subscriptions/listen: acknowledged once for the endpoint, then the notifications of both
    members (beta's through its pooled session's GET stream, its URI subscribed there; gamma's
    own listen), each tagged with the listen's id, a resource's URI in the client's names; the
    calls that cause them go through the other instance. Closing the response ends the stream
    (closed), and the members' parts with it."""
    params = {"notifications": {"toolsListChanged": True,
                                "resourceSubscriptions": ["beta+test://watched-resource",
                                                          "gamma+test://watched-resource"]}}
    body = {"jsonrpc": "2.0", "id": "L-1", "method": "subscriptions/listen",
            "params": dict(params, _meta={"io.modelcontextprotocol/protocolVersion": V,
                                          "io.modelcontextprotocol/clientCapabilities": CAPS})}
    lr = requests.post(fm["TWO_URL"], data=json.dumps(body), stream=True, timeout=30,
                       headers={"Content-Type": "application/json", "Accept": ACCEPT,
                                "MCP-Protocol-Version": V, "Mcp-Method": "subscriptions/listen"})
    assert lr.status_code == 200, lr.text
    events = (json.loads(ev.data) for ev in iter_sse(lr) if ev.data)
    ack = next(events)
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L-1"
    assert set(ack["params"]["notifications"]["resourceSubscriptions"]) == {
        "beta+test://watched-resource", "gamma+test://watched-resource"}
    # beta (the C test backend, through the bridge) tells of its resource's change.
    r = tool(fm["TWO_URL2"], "L-t1", "beta_touch_resource", {"uri": "test://watched-resource"})
    assert r.status_code == 200, r.text
    update = next(events)
    assert update["method"] == "notifications/resources/updated", update
    assert update["params"]["uri"] == "beta+test://watched-resource"
    assert update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L-1"
    # gamma (2026-07-28, its own listen) tells of its tool list's change.
    r = tool(fm["TWO_URL2"], "L-t2", "m_test_trigger_tool_change")
    assert r.status_code == 200, r.text
    change = next(events)
    assert change["method"] == "notifications/tools/list_changed", change
    assert change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L-1"
    lr.close()
    with db.cursor() as cur:
        def status():
            cur.execute("""SELECT status FROM mcp.streams WHERE session_id IS NULL
                             AND request_id = '"L-1"'::jsonb""")
            return cur.fetchone()[0]
        wait_for(lambda: status() == "closed", timeout=10, what="the listen to close")


def test_with_the_era_bridge_off_only_the_2026_member_serves(fm):
    """MCPEraBridge Off: the 2025-era member cannot be asked for a 2026-07-28 client: its tools
    are missing from the list, a call to one is 502 naming the member and why."""
    tools, _ = listed(fm["OFF_URL"], "tools/list", "tools")
    names = {t["name"] for t in tools}
    assert "m_test_simple_text" in names and "echo" not in names
    r = tool(fm["OFF_URL"], "o-1", "echo", {"text": "x"})
    assert r.status_code == 502
    assert "alpha" in r.json()["error"]["message"] and "MCPEraBridge" in r.json()["error"]["message"]


def test_a_user_sees_and_calls_only_what_they_may(fm):
    """Require mcp-tool echo m_test_simple_text: the merged list (both eras) holds those two
    only; a call of another is 403."""
    tools, _ = listed(fm["AUTHZ_URL"], "tools/list", "tools", auth=ALICE)
    assert {t["name"] for t in tools} == {"echo", "m_test_simple_text"}
    assert text_of(tool(fm["AUTHZ_URL"], "a-1", "echo", {"text": "ok"}, auth=ALICE)) == "ok"
    r = tool(fm["AUTHZ_URL"], "a-2", "m_test_image_content", auth=ALICE)
    assert r.status_code == 403, r.text


def test_a_member_that_is_down_is_left_out(fm):
    """A member nobody listens for: the list holds the other's tools, discover the other's
    capabilities; a call of the missing member's tool is a 502 saying why."""
    tools, _ = listed(fm["DOWN_URL"], "tools/list", "tools")
    names = {t["name"] for t in tools}
    assert "echo" in names and not any(n.startswith("gone_") for n in names)
    r = call(fm["DOWN_URL"], "dn-1", "server/discover")
    assert r.status_code == 200 and "tools" in final(r)["result"]["capabilities"]
    r = tool(fm["DOWN_URL"], "dn-2", "gone_echo", {"text": "x"})
    assert r.status_code in (502, 504), r.text


@pytest.fixture(params=wanted_modes())
def via(request, fm):
    with wire_client(request.param, fm) as s:
        yield s


def test_wire_lists_and_routed_calls(via, fm):
    """Over HTTP/1.1, h2c and h2 over TLS: a merged list and a call to each era's member."""
    url = via.url_of(0, "/fed-modern")
    r = call(url, f"{via.mode}-l", "tools/list", http=via.http)
    assert r.status_code == 200, r.text
    assert "m_test_simple_text" in {t["name"] for t in final(r)["result"]["tools"]}
    r = tool(url, f"{via.mode}-b", "beta_echo", {"text": via.mode}, http=via.http)
    assert text_of(r) == via.mode
    r = tool(url, f"{via.mode}-g", "m_test_simple_text", http=via.http)
    assert r.status_code == 200, r.text


def test_a_2025_session_leaves_a_2026_only_member_out_unless_the_shim_serves_it(fm):
    """A 2025-era session opens every member with initialize, which the 2026-only gamma refuses:
    it is left out (alpha's and beta's tools are there, gamma's are not). Named through a Location of the era shim's, gamma is a member like any: its
    tools listed under m_, and called."""
    with McpSession(fm["URL"]) as s:
        s.initialize()
        names = {t["name"] for t in s.call("tools/list")["tools"]}
        assert "echo" in names and "beta_echo" in names
        assert not any(n.startswith("m_") for n in names), sorted(names)
    with McpSession(fm["SHIMMED_URL"]) as s:
        s.initialize()
        names = {t["name"] for t in s.call("tools/list")["tools"]}
        assert {"echo", "m_test_simple_text"} <= names, sorted(names)
        result = s.call("tools/call", {"name": "m_test_simple_text", "arguments": {}})
        assert result["content"][0]["type"] == "text", result


def test_three_members_for_a_2025_session(fm):
    """/fed-three for a 2025-era session: the C test backend's, the 2026-only backend's (through
    the era shim's Location) and server-everything's tools in one list; a call to each; and
    sampling from alpha and from server-everything at once (both number their requests from
    the start: the client sees them apart, tagged by member), each answer completing its call."""
    with McpSession(fm["THREE_URL"]) as s:
        s.initialize(capabilities={"sampling": {}})
        names = {t["name"] for t in s.call("tools/list")["tools"]}
        assert {"echo", "m_test_simple_text", "ev_echo", "ev_get-sum",
                "ev_trigger-sampling-request"} <= names, sorted(names)
        assert "3" in s.call("tools/call", {"name": "ev_get-sum",
                                            "arguments": {"a": 1, "b": 2}})["content"][0]["text"]
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": "a"}}
                      )["content"][0]["text"] == "a"
        assert s.call("tools/call", {"name": "m_test_simple_text", "arguments": {}}
                      )["content"][0]["type"] == "text"
        asks: "queue.Queue[tuple]" = queue.Queue()
        finals: dict = {}

        def run(tool, arguments):
            caller = McpSession(s.url)
            caller.session_id, caller.protocol_version, caller.initialized = (
                s.session_id, s.protocol_version, True)
            try:
                for ev in caller.request_stream("tools/call", {"name": tool,
                                                               "arguments": arguments}):
                    m = ev.json
                    if isinstance(m, dict) and m.get("method") == "sampling/createMessage":
                        asks.put((tool, m))
                    elif isinstance(m, dict) and ("result" in m or "error" in m):
                        finals[tool] = m
            except Exception as e:   # noqa: BLE001 - the assertions below say what went wrong
                finals[tool] = e
            finally:
                caller.close()

        threads = [threading.Thread(target=run, args=a, daemon=True)
                   for a in (("sample", {"prompt": "for alpha"}),
                             ("ev_trigger-sampling-request", {"prompt": "for ev"}))]
        for t in threads:
            t.start()
        got = dict(asks.get(timeout=20) for _ in range(2))
        ida, ide = got["sample"]["id"], got["ev_trigger-sampling-request"]["id"]
        assert ida.startswith("mcpfed:alpha:") and ide.startswith("mcpfed:ev:"), (ida, ide)
        for rid, text in ((ide, "answer for ev"), (ida, "answer for alpha")):
            r = s.respond(rid, {"role": "assistant", "model": "test",
                                "content": {"type": "text", "text": text}})
            assert r.status_code == 202, r.text
        for t in threads:
            t.join(20)
        assert "answer for alpha" in json.dumps(finals["sample"]), finals
        assert "answer for ev" in json.dumps(finals["ev_trigger-sampling-request"]), finals
        s.delete()


def test_three_members_for_a_2026_client(fm):
    """/fed-three for a 2026-07-28 client: one list of the three members' tools; server-
    everything's sampling request becomes an input-required round (through the era bridge),
    retried on the other instance; gamma (through the shim's Location, which passes a 2026-07-28
    request through) answers directly."""
    tools, _ = listed(fm["THREE_URL"], "tools/list", "tools")
    names = {t["name"] for t in tools}
    assert {"echo", "m_test_simple_text", "ev_get-sum", "ev_trigger-sampling-request"} <= names
    assert "3" in text_of(tool(fm["THREE_URL"], "3-1", "ev_get-sum", {"a": 1, "b": 2}))
    r = tool(fm["THREE_URL"], "3-2", "m_test_simple_text")
    assert r.status_code == 200, r.text
    r = tool(fm["THREE_URL"], "3-3", "ev_trigger-sampling-request", {"prompt": "hello"})
    result = final(r)["result"]
    assert result["resultType"] == "input_required", result
    (key,) = result["inputRequests"]
    answer = {"role": "assistant", "model": "test",
              "content": {"type": "text", "text": "sampled for ev"}}
    r = tool(fm["THREE_URL2"], "3-4", "ev_trigger-sampling-request", {"prompt": "hello"},
             extra={"requestState": result["requestState"], "inputResponses": {key: answer}})
    assert r.status_code == 200, r.text
    assert "sampled for ev" in json.dumps(final(r)["result"])
