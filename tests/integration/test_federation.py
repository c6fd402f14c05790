"""Federation (issue 22; mod_mcp_federation.h, mcp_federation.h): several backends behind one
<Location>, its <MCPMember> sections. A stack of this module's own (two httpd instances, TLS,
HTTP/2) serves tests/stack's /mcp-federated (members alpha, unprefixed, and beta, prefix beta_,
both the stack's test backend) and the Locations of CONF below:

  /fed-idle      /mcp-federated's members, sessions idle for 2 s expire (MCPSweepInterval 1)
  /fed-two       alpha and beta (default prefix beta_) on two test backends of this module's own
                 (ports chosen up front, started after the stack), whose tools/list pages (7 and 5
                 tools a page, --page-size): pagination across members, and two backends whose
                 server->client ids collide (each process numbers its own from srv-1)
  /fed-late      alpha (the stack's backend) and late (prefix late_), whose port nobody listens
                 on until test_member_down_at_initialize_comes_back starts a backend there
  /fed-race      as /fed-late, its member race (prefix race_) on a port of its own
  /fed-restart   alpha and again (prefix again_), whose backend restarts in its test
  /fed-down      two members on a port where nothing ever listens
  /fed-authz     Require mcp-tool beta_echo echo, mcp-prompt beta_test_simple_prompt,
                 mcp-resource beta+test://static-* (behind Basic auth)
  /fed-identity  MCPBackendHeader X-User from the authenticated user (behind Basic auth); a
                 third member, gamma, with a Header of its own instead
  /fed-small     beta's list answers limited (MaxAnswerSize 2000)
  /fed-shaped    AllowTools, DenyTools, RenameTool and DescribeTool on both members

What each test proves is in its docstring. The config test (MCPBackend beside <MCPMember>) runs
`apache2 -t` only, as test_config.py does.
"""
from __future__ import annotations

import base64
import json
import os
import queue
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import (REPO, database, own_stack, plain_endpoints, run_dir, wanted_modes,
                      wire_client)
from mcp_client import McpSession
from waiting import wait_for

ALICE = ("alice", "alice-pw")
PAGE_A, PAGE_B = 7, 5   # --page-size of /fed-two's two backends

CONF = """
# The sweep (expired sessions) runs every second.
MCPSweepInterval 1

<Location /fed-idle>
    SetHandler mcp
    MCPSessionIdleTimeout 2
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
    </MCPMember>
</Location>

<Location /fed-two>
    SetHandler mcp
    <MCPMember alpha>
        Backend http://127.0.0.1:{port_a}/mcp
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend http://127.0.0.1:{port_b}/mcp
    </MCPMember>
</Location>

<Location /fed-late>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember late>
        Backend http://127.0.0.1:{port_late}/mcp
        Prefix late_
    </MCPMember>
</Location>

<Location /fed-race>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember race>
        Backend http://127.0.0.1:{port_race}/mcp
    </MCPMember>
</Location>

<Location /fed-restart>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember again>
        Backend http://127.0.0.1:{port_restart}/mcp
    </MCPMember>
</Location>

<Location /fed-down>
    SetHandler mcp
    <MCPMember nobody>
        Backend http://127.0.0.1:{port_dead}/mcp
        Prefix none
    </MCPMember>
    <MCPMember nobody2>
        Backend http://127.0.0.1:{port_dead}/mcp
    </MCPMember>
</Location>

<Location /fed-authz>
    SetHandler mcp
    AuthType Basic
    AuthName "mcp"
    AuthUserFile "${{MCP_STACK_DIR}}/htpasswd"
    AuthzSendForbiddenOnFailure On
    <RequireAll>
        Require valid-user
        Require mcp-tool beta_echo echo
        Require mcp-prompt beta_test_simple_prompt
        Require mcp-resource beta+test://static-*
    </RequireAll>
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
    </MCPMember>
</Location>

<Location /fed-identity>
    SetHandler mcp
    AuthType Basic
    AuthName "mcp"
    AuthUserFile "${{MCP_STACK_DIR}}/htpasswd"
    Require valid-user
    MCPBackendHeader X-User "%{{REMOTE_USER}}"
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
    </MCPMember>
    <MCPMember gamma>
        Backend ${{MCP_BACKEND_URL}}
        Header X-Member "gamma for %{{REMOTE_USER}}"
    </MCPMember>
</Location>

<Location /fed-small>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
    </MCPMember>
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
        MaxAnswerSize 2000
    </MCPMember>
</Location>

<Location /fed-shaped>
    SetHandler mcp
    <MCPMember alpha>
        Backend ${{MCP_BACKEND_URL}}
        Prefix none
        DenyTools "test_*" json_schema_2020_12_tool fail
        RenameTool add plus
        DescribeTool echo "Echoes, through the federation."
    </MCPMember>
    <MCPMember beta>
        Backend ${{MCP_BACKEND_URL}}
        Prefix b-
        AllowTools echo "sess*" add slow
        DenyTools slow
        RenameTool echo say
        DescribeTool session_info "Beta's session."
    </MCPMember>
</Location>
"""


# ---- the stack and the extra backends -----------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """One more mcp-test-backend (the stack's program, with the stack's sanitizer settings when
    it is an ASan build) on a given port; stopped with stop()."""

    def __init__(self, env: dict, d: Path, name: str, port: int, *args: str):
        self.port = port
        self.log = d / f"{name}.log"
        run_env = dict(os.environ)
        san = Path(env["MCP_STACK_DIR"], "sanitizer", "backend.env")
        if san.is_file():
            run_env.update(line.split("=", 1) for line in san.read_text().splitlines()
                           if "=" in line)
        portfile = d / f"{name}.port"
        portfile.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [env["MCP_TEST_BACKEND_BIN"], "--port", str(port), "--portfile", str(portfile),
                 *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=run_env, start_new_session=True)
        wait_for(lambda: portfile.is_file() and portfile.read_text().strip()
                 or self.proc.poll() is not None, 15, f"backend {name} on port {port}")
        assert self.proc.poll() is None, self.log.read_text()
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def env():
    d = run_dir("mcp-federation-")
    ports = {"port_a": free_port(), "port_b": free_port(), "port_late": free_port(),
             "port_race": free_port(), "port_restart": free_port(), "port_dead": free_port()}
    conf = d / "federation.conf"
    conf.write_text(CONF.format(**ports))
    with own_stack(d, "--httpd", "2", "--tls", "--http2", "--conf", str(conf)) as e:
        e = plain_endpoints(e)
        e.update({k.upper(): str(v) for k, v in ports.items()})
        e["RUN_DIR"] = str(d)
        backends = []
        try:
            backends.append(Backend(e, d, "backend-a", ports["port_a"], "--page-size", str(PAGE_A)))
            backends.append(Backend(e, d, "backend-b", ports["port_b"], "--page-size", str(PAGE_B)))
            e["_backends"] = backends   # test_member_down_at_initialize_comes_back adds one
            yield e
        finally:
            for b in e.get("_backends", backends):
                b.stop()


@pytest.fixture
def db(env):
    with database(env) as conn:
        yield conn


def url(env, path: str, instance: int = 0) -> str:
    return env["MCP_HTTP_URLS"].split()[instance].rsplit("/", 1)[0] + path


@pytest.fixture
def mcp(env):
    """factory: mcp(path, instance=0, **kw) -> an McpSession (HTTP/1.1) to the Location path;
    the sessions made are ended (DELETE) and closed after the test."""
    made: list[McpSession] = []

    def make(path="/mcp-federated", instance=0, **kw) -> McpSession:
        s = McpSession(url(env, path, instance), **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            if s.session_id:
                s.delete()
        except Exception:
            pass
        s.close()


def joined(s: McpSession, u: str) -> McpSession:
    """The same MCP session, through another URL (the other instance)."""
    other = McpSession(u, auth=s.auth, transport=s.transport, ca=s.ca)
    other.session_id, other.protocol_version, other.initialized = (
        s.session_id, s.protocol_version, True)
    return other


# ---- helpers ------------------------------------------------------------------------------------

def names(result, key="tools", field="name") -> list[str]:
    return [item[field] for item in result[key]]


def text_of(result) -> str:
    return result["content"][0]["text"]


def info(s: McpSession, tool="session_info") -> dict:
    return json.loads(text_of(s.call("tools/call", {"name": tool, "arguments": {}})))


def backend_lists(env) -> dict:
    """The stack's backend's own lists, through the plain /mcp."""
    s = McpSession(url(env, "/mcp"))
    try:
        s.initialize()
        return {"tools": names(s.call("tools/list")),
                "prompts": names(s.call("prompts/list"), "prompts"),
                "resources": names(s.call("resources/list"), "resources", "uri"),
                "templates": names(s.call("resources/templates/list"), "resourceTemplates",
                                   "uriTemplate")}
    finally:
        s.delete()
        s.close()


def own_tools(backend_url: str) -> list[str]:
    """A backend's tool names, every page, asked directly."""
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    r = requests.post(backend_url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                         "params": {"protocolVersion": "2025-06-18",
                                                    "capabilities": {},
                                                    "clientInfo": {"name": "t", "version": "0"}}},
                      headers=h, timeout=10)
    h.update({"Mcp-Session-Id": r.headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-06-18"})
    out, cursor = [], None
    while True:
        params = {"cursor": cursor} if cursor else {}
        res = requests.post(backend_url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                                               "params": params}, headers=h, timeout=10).json()
        out += names(res["result"])
        cursor = res["result"].get("nextCursor")
        if not cursor:
            break
    requests.delete(backend_url, headers=h, timeout=10)
    return out


def error_of(s: McpSession, method: str, params: dict) -> dict:
    resp = s.request(method, params)
    assert "error" in resp, resp
    return resp["error"]


class Listener:
    """The session's standalone GET stream, read by a thread (through a session of its own, so
    that the test's session goes on): .events as they arrive; ends at the stream's end or when
    until(events) says so."""

    def __init__(self, s: McpSession, until=lambda events: False):
        self.s = joined(s, s.url)
        self.until = until
        self.events: list = []
        self.ids: list = []      # the SSE event id of each of events
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for ev in self.s.get_stream(timeout=30):
                if ev.json is not None:
                    self.events.append(ev.json)
                    self.ids.append(ev.id)
                if self.until(self.events):
                    break
        except Exception as e:    # (shown by the test's assertion)
            self.error = e
        finally:
            self.s.close()

    def opened(self):
        wait_for(lambda: self.s.last_response is not None or self.error, 15, "the GET stream")
        assert self.error is None, self.error
        assert self.s.last_response.status_code == 200

    def wait(self, pred, what):
        """The first message pred accepts (waits for it; fails when the stream failed)."""
        got = wait_for(lambda: next((m for m in self.events if pred(m)), None)
                       or (self.error and ("failed", self.error)), 20, what)
        assert isinstance(got, dict), f"{what}: the GET stream {got}"
        return got


# ---- 1. merged lists, and pagination across members ---------------------------------------------

def test_merged_lists(env, mcp):
    """tools/list, prompts/list, resources/list and resources/templates/list of /mcp-federated:
    alpha's items as the backend has them, then beta's under beta_ (tools, prompts) and beta+
    (URIs and URI templates); one page (no nextCursor); initialize's answer is the gateway's
    (merged capabilities)."""
    own = backend_lists(env)
    prefix = env["MCP_FEDERATED_PREFIX"]
    assert prefix == "beta_"
    s = mcp()
    init = s.initialize()
    assert init["serverInfo"]["name"] == "mod_mcp", init
    assert {"tools", "prompts", "resources"} <= set(init["capabilities"]), init
    tools = s.call("tools/list")
    assert names(tools) == own["tools"] + [prefix + n for n in own["tools"]]
    assert "nextCursor" not in tools
    # An item's other fields are the backend's.
    echo = next(t for t in tools["tools"] if t["name"] == "beta_echo")
    assert echo["description"] == "Returns the given text unchanged." and echo["inputSchema"]
    assert names(s.call("prompts/list"), "prompts") == \
        own["prompts"] + [prefix + n for n in own["prompts"]]
    assert names(s.call("resources/list"), "resources", "uri") == \
        own["resources"] + ["beta+" + u for u in own["resources"]]
    assert names(s.call("resources/templates/list"), "resourceTemplates", "uriTemplate") == \
        own["templates"] + ["beta+" + u for u in own["templates"]]


def b64(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()) \
        .decode().rstrip("=")


def test_pagination_across_members(env, mcp):
    """/fed-two's members page tools/list (7 and 5 a page): walking the gateway's cursors gives
    every tool of both, once, in as many pages as the longer member needs; the cursor names the
    members still to list; a tampered cursor, one naming no member, and one whose member cursor
    is not the member's are refused with -32602 (invalid params)."""
    a, b = env["_backends"][0], env["_backends"][1]
    tools_a, tools_b = own_tools(a.url), own_tools(b.url)
    assert len(tools_a) > 3 * PAGE_A
    s = mcp("/fed-two")
    s.initialize()
    seen, pages, cursor, cursors = [], 0, None, []
    while True:
        page = s.call("tools/list", {"cursor": cursor} if cursor else {})
        pages += 1
        seen += names(page)
        cursor = page.get("nextCursor")
        if not cursor:
            break
        cursors.append(cursor)
        assert pages < 50
    assert sorted(seen) == sorted(tools_a + ["beta_" + n for n in tools_b])
    assert len(seen) == len(set(seen))
    # Both members page at once: as many pages as the member with most.
    n_a, n_b = -(-len(tools_a) // PAGE_A), -(-len(tools_b) // PAGE_B)
    assert pages == max(n_a, n_b), (pages, n_a, n_b)
    # The first page holds the first page of each.
    first = s.call("tools/list")
    assert names(first) == tools_a[:PAGE_A] + ["beta_" + n for n in tools_b[:PAGE_B]]
    # The cursors decode to the members still to list, with their own cursors.
    pairs = json.loads(base64.urlsafe_b64decode(cursors[0] + "=" * (-len(cursors[0]) % 4)))
    assert pairs == [["alpha", str(PAGE_A)], ["beta", str(PAGE_B)]], pairs
    last = cursors[-1]
    pairs = json.loads(base64.urlsafe_b64decode(last + "=" * (-len(last) % 4)))
    assert [p[0] for p in pairs] == ["beta"], pairs
    # A page asked again with the same cursor is the same page.
    assert names(s.call("tools/list", {"cursor": cursors[0]})) == seen[PAGE_A + PAGE_B:
                                                                        2 * (PAGE_A + PAGE_B)]
    # Tampered cursors.
    tampered = ("X" if cursors[0][0] != "X" else "Y") + cursors[0][1:]
    for bad in (tampered, cursors[0] + "x", "not a cursor!", b64([["gamma", "7"]]), 17):
        err = error_of(s, "tools/list", {"cursor": bad})
        assert err["code"] == -32602, (bad, err)


def test_forged_member_cursor_is_invalid_params(env, mcp):
    """A gateway cursor that decodes well but carries a member cursor the member never gave
    (the member answers -32602) is the client's error, -32602, as for a single backend's
    tampered cursor; not a Bad Gateway, nor a page without that member. (Both were, before
    5403aaf.)"""
    s = mcp("/fed-two")
    s.initialize()
    alone = s.request("tools/list", {"cursor": b64([["alpha", "999"]])})
    # Beside a member whose cursor is good: the page is refused too, not answered without
    # alpha (which would end alpha's listing silently).
    beside = s.request("tools/list", {"cursor": b64([["alpha", "999"], ["beta", str(PAGE_B)]])})
    assert [alone.get("error", {}).get("code"), beside.get("error", {}).get("code")] == \
        [-32602, -32602], (alone, beside)


# ---- 2. routing ---------------------------------------------------------------------------------

def test_routing(env, mcp, db):
    """echo and beta_echo reach two backend sessions (session_info reports the backend session:
    alpha's and beta's are the ones mcp.session_members holds); resources/read of a beta+ URI is
    beta's resource with the beta+ URI; prompts/get of beta_'s prompt; unknown tools are -32602
    "Unknown tool"."""
    s = mcp()
    s.initialize()
    assert text_of(s.call("tools/call", {"name": "echo", "arguments": {"text": "to alpha"}})) \
        == "to alpha"
    assert text_of(s.call("tools/call", {"name": "beta_echo", "arguments": {"text": "to beta"}})) \
        == "to beta"
    ia, ib = info(s), info(s, "beta_session_info")
    assert ia["session"] and ib["session"] and ia["session"] != ib["session"]
    with db.cursor() as cur:
        cur.execute("SELECT member, backend_session_id, state FROM mcp.session_members "
                    "WHERE session_id = %s ORDER BY member", (s.session_id,))
        rows = cur.fetchall()
    assert rows == [("alpha", ia["session"], "open"), ("beta", ib["session"], "open")]
    # The audit says which member answered each call (mcp.streams.member), by the client's name.
    with db.cursor() as cur:
        cur.execute("SELECT tool, member, outcome FROM mcp.tool_calls WHERE session_id = %s "
                    "AND tool LIKE '%%echo' ORDER BY started_at", (s.session_id,))
        assert cur.fetchall() == [("echo", "alpha", "ok"), ("beta_echo", "beta", "ok")]
    assert s.session_id not in (ia["session"], ib["session"])
    # Resources.
    r = s.call("resources/read", {"uri": "beta+test://static-text"})
    assert [c["uri"] for c in r["contents"]] == ["beta+test://static-text"], r
    r = s.call("resources/read", {"uri": "test://static-text"})
    assert [c["uri"] for c in r["contents"]] == ["test://static-text"], r
    r = s.call("resources/read", {"uri": "beta+test://template/42/data"})
    assert r["contents"][0]["uri"] == "beta+test://template/42/data", r
    # A resource embedded in beta's tool result carries the beta+ URI; alpha's its own.
    r = s.call("tools/call", {"name": "beta_test_embedded_resource", "arguments": {}})
    assert [c["resource"]["uri"] for c in r["content"] if c["type"] == "resource"] == \
        ["beta+test://embedded-resource"], r
    r = s.call("tools/call", {"name": "test_embedded_resource", "arguments": {}})
    assert [c["resource"]["uri"] for c in r["content"] if c["type"] == "resource"] == \
        ["test://embedded-resource"], r
    # Prompts, and completion by a prompt's or a template's exposed name.
    assert s.call("prompts/get", {"name": "beta_test_simple_prompt"})["messages"]
    for ref in ({"type": "ref/prompt", "name": "beta_test_prompt_with_arguments"},
                {"type": "ref/prompt", "name": "test_prompt_with_arguments"}):
        c = s.call("completion/complete", {"ref": ref, "argument": {"name": "arg1", "value": ""}})
        assert c["completion"]["values"], (ref, c)
    c = s.call("completion/complete", {"ref": {"type": "ref/resource",
                                               "uri": "beta+test://template/{id}/data"},
                                       "argument": {"name": "id", "value": ""}})
    assert c["completion"]["values"], c
    err = error_of(s, "completion/complete", {"ref": {"type": "ref/prompt", "name": "nosuch"},
                                              "argument": {"name": "arg1", "value": ""}})
    assert err["code"] == -32602, err
    # Unknown names.
    err = error_of(s, "tools/call", {"name": "nosuch", "arguments": {}})
    assert err["code"] == -32602 and "Unknown tool" in err["message"], err
    err = error_of(s, "tools/call", {"name": "beta_nosuch", "arguments": {}})
    assert err["code"] == -32602, err
    err = error_of(s, "prompts/get", {"name": "nosuch"})
    assert err["code"] == -32602, err
    # The client's notifications go to every member (initialized at the start, this one now).
    assert s.notify("notifications/roots/list_changed").status_code == 202
    for i in (info(s), info(s, "beta_session_info")):
        assert i["notifications"].get("notifications/roots/list_changed") == 1, i
        assert i["notifications"].get("notifications/initialized") == 1, i
    # ping and logging/setLevel go to every member: one empty result.
    assert s.call("ping") == {}
    assert s.call("logging/setLevel", {"level": "error"}) == {}
    assert info(s)["logLevel"] == "error" and info(s, "beta_session_info")["logLevel"] == "error"


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18"])
def test_older_revisions(env, mcp, version):
    """A federated session of an older revision: negotiated as asked (the members too: their
    requests carry it), lists, routed calls and a beta+ resource work. (The gateway's own answers,
    the merged lists, are SSE whatever the revision; a single backend's 2025-06-18 list answer
    is relayed as the backend gives it, JSON from the test backend: both are the transport's.)"""
    s = mcp(protocol_version=version)
    assert s.initialize()["protocolVersion"] == version
    tools = s.call("tools/list")
    assert "beta_echo" in names(tools)
    assert text_of(s.call("tools/call", {"name": "beta_echo", "arguments": {"text": version}})) \
        == version
    assert info(s, "beta_session_info")["protocolVersionHeader"] == version
    assert info(s)["protocolVersionHeader"] == version
    r = s.call("resources/read", {"uri": "beta+test://static-text"})
    assert r["contents"][0]["uri"] == "beta+test://static-text"


# ---- 3. a member down at initialize, and back ---------------------------------------------------

def test_member_down_at_initialize_comes_back(env, mcp, db):
    """/fed-late's member late has nobody on its port: initialize succeeds with alpha's tools only,
    and a notifications/message names the missing member before the answer (an SSE answer: a
    POST's Accept always allows one);
    a call of a late_ tool is an error that names it. Then a backend starts on that port: the
    next tools/list has late's tools, a late_ call works, and the member's row is open."""
    # A session whose member is down ends (DELETE) like any.
    gone = mcp("/fed-late")
    gone.initialize()
    assert gone.delete().status_code in (200, 204)
    gone.session_id = None
    s = mcp("/fed-late")
    s.initialize()
    notes = [m for m in s.side_messages if m.get("method") == "notifications/message"]
    assert len(notes) == 1, s.side_messages
    assert notes[0]["params"]["level"] == "warning"
    assert "late" in notes[0]["params"]["data"] and "alpha" not in notes[0]["params"]["data"], notes
    tools = names(s.call("tools/list"))
    own = backend_lists(env)["tools"]
    assert tools == own, tools
    err = error_of(s, "tools/call", {"name": "late_echo", "arguments": {"text": "x"}})
    assert "late" in err["message"], err
    with db.cursor() as cur:
        cur.execute("SELECT state, error FROM mcp.session_members WHERE session_id = %s "
                    "AND member = 'late'", (s.session_id,))
        state, error = cur.fetchone()
    assert state == "failed" and error, (state, error)
    # The GET stream serves the members that are there.
    listen = Listener(s)
    listen.opened()
    s.call("tools/call", {"name": "notify", "arguments": {"text": "alpha alone"}})
    listen.wait(lambda m: m.get("params", {}).get("data") == "alpha alone",
                "alpha's notification while late is down")

    late = Backend(env, Path(env["RUN_DIR"]), "backend-late", int(env["PORT_LATE"]))
    env["_backends"].append(late)
    tools = names(s.call("tools/list"))
    assert tools == own + ["late_" + n for n in own], tools
    assert text_of(s.call("tools/call", {"name": "late_echo", "arguments": {"text": "back"}})) \
        == "back"
    late_info = info(s, "late_session_info")
    with db.cursor() as cur:
        cur.execute("SELECT state, backend_session_id FROM mcp.session_members "
                    "WHERE session_id = %s AND member = 'late'", (s.session_id,))
        assert cur.fetchone() == ("open", late_info["session"])
    # A new session now starts with both members and no notice.
    s2 = mcp("/fed-late")
    s2.initialize()
    assert not [m for m in s2.side_messages if m.get("method") == "notifications/message"]
    assert names(s2.call("tools/list")) == tools

    # The member restarts (a new process: its sessions are gone). The next call to it is told
    # that the member lost its session (502 or a JSON-RPC error naming it), the row is marked
    # failed, and the call after that opens the member again; alpha's session is untouched.
    alpha_session = info(s)["session"]
    late.stop()
    env["_backends"].remove(late)
    late = Backend(env, Path(env["RUN_DIR"]), "backend-late-2", int(env["PORT_LATE"]))
    env["_backends"].append(late)
    resp = None
    try:
        resp = s.request("tools/call", {"name": "late_echo", "arguments": {"text": "lost"}})
    except Exception as e:      # (an HTTP error status)
        resp = {"error": {"message": str(e)}}
    assert "error" in resp and "late" in resp["error"]["message"], resp
    assert text_of(s.call("tools/call", {"name": "late_echo", "arguments": {"text": "again"}})) \
        == "again"
    new_late = info(s, "late_session_info")["session"]
    assert new_late != late_info["session"]
    assert info(s)["session"] == alpha_session
    with db.cursor() as cur:
        cur.execute("SELECT state, backend_session_id FROM mcp.session_members "
                    "WHERE session_id = %s AND member = 'late'", (s.session_id,))
        assert cur.fetchone() == ("open", new_late)


def test_every_member_down_at_initialize(env, mcp):
    """/fed-down: no member can start a session, so initialize fails (502, -32002) naming both,
    and no gateway session is made."""
    s = mcp("/fed-down")
    r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "t", "version": "0"}}}))
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert err["code"] == -32002, err
    assert "nobody:" in err["message"] and "nobody2:" in err["message"], err
    assert "Mcp-Session-Id" not in r.headers


def test_concurrent_requests_open_a_returning_member_once(env, mcp):
    """/fed-race's member race is down at initialize, then comes up; several requests of the
    session at once (tools/list on both instances) all find it again, and every backend session
    opened for it but not kept is ended: the backend has exactly one session of it left (the one
    the next call uses). (Each request kept its own before b19fa13, the last stored, the others
    never ended.)"""
    s = mcp("/fed-race")
    s.initialize()
    assert not [t for t in names(s.call("tools/list")) if t.startswith("race_")]
    race = Backend(env, Path(env["RUN_DIR"]), "backend-race", int(env["PORT_RACE"]))
    env["_backends"].append(race)
    results, errors = [], []

    def ask(instance):
        other = joined(s, url(env, "/fed-race", instance))
        try:
            results.append(names(other.call("tools/list")))
        except Exception as e:
            errors.append(e)
        finally:
            other.close()

    threads = [threading.Thread(target=ask, args=(k % 2,), daemon=True) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(results) == 6 and all("race_echo" in r for r in results), results
    assert text_of(s.call("tools/call", {"name": "race_echo", "arguments": {"text": "x"}})) == "x"
    kept = info(s, "race_session_info")["session"]

    def sessions():
        log = race.log.read_text().splitlines()
        opened = {l.split("session=")[1].split()[0] for l in log if "rpc=initialize -> 200" in l}
        ended = {l.split("session=")[1].split()[0] for l in log
                 if l.startswith("DELETE") and "session=" in l}
        return opened, ended

    try:   # (the DELETEs of the sessions not kept may come a moment after the answers)
        wait_for(lambda: sessions()[0] - sessions()[1] == {kept}, 5, "one session left")
    except AssertionError:
        pass
    opened, ended = sessions()
    assert kept in opened and kept not in ended, (kept, opened, ended)
    assert opened - ended == {kept}, f"backend sessions left open: {opened - ended - {kept}}"


def test_member_restarted_is_listed_again(env, mcp):
    """/fed-restart: member again's backend restarts (its sessions are gone) while the session
    lives. The lists do not lose it for good: by the second tools/list after the restart its
    tools are back (a list that finds its session gone opens it again, as a call does). (It was
    left out of every list until a call to it before b19fa13.)"""
    d = Path(env["RUN_DIR"])
    b = Backend(env, d, "backend-restart", int(env["PORT_RESTART"]))
    env["_backends"].append(b)
    s = mcp("/fed-restart")
    s.initialize()
    own = backend_lists(env)["tools"]
    assert names(s.call("tools/list")) == own + ["again_" + n for n in own]
    b.stop()
    env["_backends"].remove(b)
    b = Backend(env, d, "backend-restart-2", int(env["PORT_RESTART"]))
    env["_backends"].append(b)
    lists = [names(s.call("tools/list")) for _ in range(3)]
    assert lists[-1] == own + ["again_" + n for n in own], lists


# ---- 4. sampling from two members at once -------------------------------------------------------

@pytest.mark.parametrize("mode", wanted_modes())
def test_sampling_from_two_members_with_colliding_ids(env, mode):
    """/fed-two: sample (alpha) and beta_sample at once, on two backends that number their
    server->client requests alike (each process its own srv-1, srv-2, ...; only this test asks
    them, once each per mode): both sampling/createMessage requests reach the client with ids
    tagged by member, different, though the backends' own are the same; each answer, POSTed
    with the tagged id, completes its own call. Over every wire (HTTP/2: both calls on one
    connection)."""
    with wire_client(mode, env) as s:
        s.url = s.url_of(0, "/fed-two")
        s.initialize(capabilities={"sampling": {}})
        try:
            sample_two(s)
        finally:
            s.delete()


def sample_two(s: McpSession):
    asks: "queue.Queue[tuple]" = queue.Queue()
    finals: dict = {}

    def run(tool):
        caller = joined(s, s.url) if s.transport == "http1" else s   # h2: one connection
        try:
            for ev in caller.request_stream("tools/call", {"name": tool,
                                                           "arguments": {"prompt": tool}}):
                m = ev.json
                if isinstance(m, dict) and m.get("method") == "sampling/createMessage":
                    asks.put((tool, m))
                elif isinstance(m, dict) and ("result" in m or "error" in m):
                    finals[tool] = m
        except Exception as e:
            finals[tool] = e
        finally:
            if caller is not s:
                caller.close()

    threads = [threading.Thread(target=run, args=(t,), daemon=True)
               for t in ("sample", "beta_sample")]
    for t in threads:
        t.start()
    got = dict(asks.get(timeout=20) for _ in range(2))
    ida, idb = got["sample"]["id"], got["beta_sample"]["id"]
    assert ida != idb
    assert ida.startswith("mcpfed:alpha:") and idb.startswith("mcpfed:beta:"), (ida, idb)
    # The backends' own ids, the same: srv-N of each process.
    own_a, own_b = ida[len("mcpfed:alpha:"):], idb[len("mcpfed:beta:"):]
    assert own_a == own_b and json.loads(own_a).startswith("srv-"), (ida, idb)
    assert got["beta_sample"]["params"]["messages"][0]["content"]["text"] == "beta_sample"
    # Answered in the other order than asked, each with its own text.
    for rid, text in ((idb, "answer for beta"), (ida, "answer for alpha")):
        r = s.respond(rid, {"role": "assistant", "model": "test",
                            "content": {"type": "text", "text": text}})
        assert r.status_code == 202, r.text
    for t in threads:
        t.join(20)
    assert text_of(finals["sample"]["result"]) == "sampled: answer for alpha", finals
    assert text_of(finals["beta_sample"]["result"]) == "sampled: answer for beta", finals
    # An answer to an id no member's request had is dropped, not an error to the client.
    r = s.respond("mcpfed:beta:\"srv-999\"", {"role": "assistant", "model": "t",
                                               "content": {"type": "text", "text": "x"}})
    assert r.status_code == 202


def test_sampling_answered_through_the_other_instance(env, mcp):
    """beta_sample's sampling/createMessage arrives on instance 1's stream; the client's answer,
    POSTed to instance 2 with the tagged id, reaches beta and completes the call; an error
    answer does too (the tool reports it)."""
    s = mcp()
    s.initialize(capabilities={"sampling": {}})
    other = joined(s, url(env, "/mcp-federated", 1))
    try:
        for answer in ({"result": {"role": "assistant", "model": "t",
                                   "content": {"type": "text", "text": "via 2"}}},
                       {"error": {"code": -1, "message": "the user declined"}}):
            events = s.request_stream("tools/call", {"name": "beta_sample",
                                                     "arguments": {"prompt": "p"}})
            ask = next(ev.json for ev in events
                       if ev.json and ev.json.get("method") == "sampling/createMessage")
            assert ask["id"].startswith("mcpfed:beta:"), ask
            r = other.respond(ask["id"], **answer)
            assert r.status_code == 202, r.text
            final = [ev.json for ev in events if ev.json][-1]
            if "result" in answer:
                assert text_of(final["result"]) == "sampled: via 2", final
            else:
                assert "error" in final or final["result"].get("isError"), final
    finally:
        other.close()


# ---- 5. cancellation ----------------------------------------------------------------------------

def test_cancellation_of_a_call_routed_to_beta(env, mcp, db):
    """notifications/cancelled for a slow call of beta_slow: the call ends early at beta's backend
    session (its cancelled list has the id) and the gateway's stream is no longer open."""
    s = mcp()
    s.initialize()
    rid = f"cancel-me-{s.next_id()}"
    events = s.request_stream("tools/call", {"name": "beta_slow",
                                             "arguments": {"count": 50, "interval_ms": 100},
                                             "_meta": {"progressToken": "c"}}, request_id=rid)
    got = []
    for ev in events:
        if ev.json and ev.json.get("method") == "notifications/progress":
            got.append(ev.json)
            break
    assert got, "no progress before the cancellation"
    r = s.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
    assert r.status_code == 202
    rest = [ev.json for ev in events if ev.json]
    # Ended early: far fewer than the 50 progress notifications of the whole call.
    progress = [m for m in rest if m.get("method") == "notifications/progress"]
    assert len(progress) < 40, rest
    assert rid in info(s, "beta_session_info")["cancelled"]
    with db.cursor() as cur:
        cur.execute("SELECT status FROM mcp.streams WHERE session_id = %s AND request_id = %s",
                    (s.session_id, json.dumps(rid)))
        (status,), = cur.fetchall()
    assert status != "open", status


# ---- 6. notifications on the GET stream ---------------------------------------------------------

def test_list_change_and_notifications_on_the_get_stream(env, mcp):
    """/fed-two: beta_test_trigger_tool_change (beta's backend only, which tells its sessions) is
    seen on the federated GET stream as notifications/tools/list_changed. /mcp-federated: notify
    of alpha and of beta (each on its own backend session) both arrive on the one GET stream, and
    a beta resource update carries the beta+ URI."""
    s = mcp("/fed-two")
    s.initialize()
    listen = Listener(s, lambda ev: any(m.get("method") == "notifications/tools/list_changed"
                                        for m in ev))
    listen.opened()
    s.call("tools/call", {"name": "beta_test_trigger_tool_change", "arguments": {}})
    listen.wait(lambda m: m.get("method") == "notifications/tools/list_changed",
                "tools/list_changed on the federated GET stream")

    s = mcp()
    s.initialize()
    s.call("resources/subscribe", {"uri": "beta+test://watched-resource"})
    assert info(s, "beta_session_info")["subscriptions"] == ["test://watched-resource"]
    assert info(s)["subscriptions"] == []
    listen = Listener(s)
    listen.opened()
    for tool, text in (("notify", "from alpha"), ("beta_notify", "from beta")):
        s.call("tools/call", {"name": tool, "arguments": {"text": text}})
    s.call("tools/call", {"name": "beta_touch_resource",
                          "arguments": {"uri": "test://watched-resource"}})
    for text in ("from alpha", "from beta"):
        listen.wait(lambda m, t=text: m.get("method") == "notifications/message"
                    and m["params"].get("data") == t, f"'{text}' on the GET stream")
    upd = listen.wait(lambda m: m.get("method") == "notifications/resources/updated",
                      "resources/updated")
    assert upd["params"]["uri"] == "beta+test://watched-resource", upd


# ---- 7. the other instance ----------------------------------------------------------------------

def test_resume_on_the_other_instance(env, mcp):
    """A federated session started on instance 1: a call through instance 2 works (the members'
    sessions are read from PostgreSQL), and a beta_slow stream dropped on instance 1 is resumed
    with Last-Event-ID on instance 2: every event once, in order, to the result."""
    s = mcp()
    s.initialize()
    other = joined(s, url(env, "/mcp-federated", 1))
    try:
        assert text_of(other.call("tools/call", {"name": "beta_echo",
                                                 "arguments": {"text": "on 2"}})) == "on 2"
        assert info(other, "beta_session_info")["session"] == \
            info(s, "beta_session_info")["session"]
        events = s.request_stream("tools/call", {"name": "beta_slow",
                                                 "arguments": {"count": 6, "interval_ms": 150},
                                                 "_meta": {"progressToken": "r"}},
                                  include_empty=True)
        got = [next(events) for _ in range(3)]   # priming, progress 1, progress 2
        s.last_response.close()
        assert got[0].id and got[0].data in (None, "")
        resumed = [ev for ev in other.get_stream(last_event_id=got[-1].id)]
        seqs = [int(e.id.split("-")[1]) for e in got + resumed if e.id]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
        progress = [e.json["params"]["progress"] for e in got[1:] + resumed
                    if e.json and e.json.get("method") == "notifications/progress"]
        assert progress == [1, 2, 3, 4, 5, 6], progress
        assert "result" in resumed[-1].json and "slow done" in text_of(resumed[-1].json["result"])
    finally:
        other.close()


def test_get_stream_resumed_on_the_other_instance(env, mcp, db):
    """The federated standalone GET stream, opened on instance 1 and dropped after beta's first
    notification (instance 1 sees its client go and closes it), is resumed with its
    Last-Event-ID on instance 2: the stream goes on there, live, with every member's: alpha's
    and beta's next notifications arrive, and the first is not sent again."""
    s = mcp()
    s.initialize()
    first = Listener(s, lambda ev: any(m.get("params", {}).get("data") == "one" for m in ev))
    first.opened()
    s.call("tools/call", {"name": "beta_notify", "arguments": {"text": "one"}})
    first.thread.join(20)
    assert not first.thread.is_alive() and first.error is None, first.error
    first_id = first.ids[-1]      # the event id of "one"
    assert first_id, first.ids

    def status():
        with db.cursor() as cur:
            cur.execute("SELECT status FROM mcp.streams WHERE id = %s",
                        (int(first_id.split("-")[0]),))
            return cur.fetchone()[0]
    wait_for(lambda: status() != "open", 10, "instance 1 to close the dropped GET stream")
    other = joined(s, url(env, "/mcp-federated", 1))
    got = []

    def resume():
        try:
            for ev in other.get_stream(last_event_id=first_id, timeout=30):
                if ev.json is not None:
                    got.append(ev.json)
                if {"two", "three"} <= {m.get("params", {}).get("data") for m in got}:
                    break
        except Exception as e:
            got.append({"error": str(e)})
        finally:
            other.close()

    t = threading.Thread(target=resume, daemon=True)
    t.start()
    time.sleep(0.3)
    s.call("tools/call", {"name": "notify", "arguments": {"text": "two"}})
    s.call("tools/call", {"name": "beta_notify", "arguments": {"text": "three"}})
    t.join(20)
    datas = [m.get("params", {}).get("data") for m in got]
    assert {"two", "three"} <= set(datas), got
    assert "one" not in datas, got


def test_batches_are_refused_and_the_2026_era_is_checked_as_anywhere(env, mcp):
    """A federated endpoint takes one request per POST (a batch of requests is 400 -32600). It
    serves the 2026-07-28 era (test_federation_modern), with the checks of any endpoint: the
    revision's header without the _meta claim is 400 -32602; a revision it does not serve is
    -32022 listing the ones it does; initialize asking for 2026-07-28 gets a 2025-11-25
    session."""
    s = mcp(protocol_version="2025-03-26")
    s.initialize()
    batch = [{"jsonrpc": "2.0", "id": s.next_id(), "method": "tools/call",
              "params": {"name": "echo", "arguments": {"text": "a"}}},
             {"jsonrpc": "2.0", "id": s.next_id(), "method": "tools/call",
              "params": {"name": "beta_echo", "arguments": {"text": "b"}}}]
    r = s.post_raw(json.dumps(batch))
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600, r.text
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
    r = requests.post(url(env, "/mcp-federated"),
                      data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                                       "params": {}}), headers=headers, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602, r.text
    claim = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                       "io.modelcontextprotocol/clientCapabilities": {}}}
    r = requests.post(url(env, "/mcp-federated"),
                      data=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "server/discover",
                                       "params": claim}),
                      headers=dict(headers, **{"MCP-Protocol-Version": "2099-01-01"}), timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32022, r.text
    assert "2026-07-28" in r.json()["error"]["data"]["supported"], r.text
    s2 = mcp(protocol_version="2026-07-28")
    assert s2.initialize()["protocolVersion"] == "2025-11-25"


# ---- 8. authorization ---------------------------------------------------------------------------

def test_require_mcp_tool_filters_the_list(env, mcp):
    """/fed-authz (Require mcp-tool beta_echo echo): tools/list shows those two only, in member
    order, and both can be called. The prompt and resource lines name exposed names too:
    prompts/list and resources/list show only what they allow, and that can be used."""
    s = mcp("/fed-authz", auth=ALICE)
    s.initialize()
    assert names(s.call("tools/list")) == ["echo", "beta_echo"]
    assert names(s.call("prompts/list"), "prompts") == ["beta_test_simple_prompt"]
    uris = names(s.call("resources/list"), "resources", "uri")
    assert uris and all(u.startswith("beta+test://static-") for u in uris), uris
    assert s.call("prompts/get", {"name": "beta_test_simple_prompt"})["messages"]
    assert s.call("resources/read", {"uri": uris[0]})["contents"][0]["uri"] == uris[0]
    assert text_of(s.call("tools/call", {"name": "beta_echo", "arguments": {"text": "b"}})) == "b"
    assert text_of(s.call("tools/call", {"name": "echo", "arguments": {"text": "a"}})) == "a"


def test_require_mcp_tool_refuses_other_tools(env, mcp):
    """/fed-authz: beta_add and add, which no Require line allows, are refused (403, the tool
    named), as on a single-backend Location. (Every call was granted on a federated Location
    before 5bf77bf.)"""
    s = mcp("/fed-authz", auth=ALICE)
    s.initialize()
    for tool in ("beta_add", "add"):
        r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": s.next_id(), "method": "tools/call",
                                   "params": {"name": tool, "arguments": {"a": 1, "b": 2}}}))
        assert r.status_code == 403, (tool, r.status_code, r.text)
        assert f"tool '{tool}'" in r.json()["error"]["message"], r.text
    for method, params, what in (
            ("prompts/get", {"name": "test_simple_prompt"}, "prompt 'test_simple_prompt'"),
            ("resources/read", {"uri": "beta+test://watched-resource"}, "Require mcp-resource"),
            ("resources/read", {"uri": "test://static-text"}, "Require mcp-resource")):
        r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": s.next_id(), "method": method,
                                   "params": params}))
        assert r.status_code == 403 and what in r.json()["error"]["message"], (method, r.text)


# ---- 9. identity --------------------------------------------------------------------------------

def test_identity_header_reaches_both_members(env, mcp):
    """/fed-identity: MCPBackendHeader X-User reaches alpha's and beta's backend sessions; gamma's
    own Header replaces the Location's for gamma (X-Member, no X-User); the client's
    Authorization header reaches none."""
    for user, pw in (ALICE, ("bob", "bob-pw")):
        s = mcp("/fed-identity", auth=(user, pw))
        s.initialize()
        for tool in ("session_info", "beta_session_info", "gamma_session_info"):
            i = info(s, tool)
            headers = {k.lower(): v for k, v in (i["headers"] or {}).items()}
            if tool.startswith("gamma"):
                assert headers.get("x-member") == f"gamma for {user}", (tool, i)
                assert "x-user" not in headers, (tool, i)
            else:
                assert headers.get("x-user") == user and "x-member" not in headers, (tool, i)
            assert "authorization" not in headers and i["authorizationHeaders"] == 0, (tool, i)


def test_max_answer_size(env, mcp):
    """/fed-small: beta's tools/list answer is larger than its MaxAnswerSize, so the merged list
    is alpha's alone; beta's smaller answers (prompts/list) are merged, and its tools can still
    be called (the limit is on list answers)."""
    own = backend_lists(env)
    s = mcp("/fed-small")
    s.initialize()
    assert names(s.call("tools/list")) == own["tools"]
    assert names(s.call("prompts/list"), "prompts") == \
        own["prompts"] + ["beta_" + n for n in own["prompts"]]
    assert text_of(s.call("tools/call", {"name": "beta_echo", "arguments": {"text": "ok"}})) \
        == "ok"


# ---- 10. shaping ---------------------------------------------------------------------------------

def test_shaping(env, mcp):
    """/fed-shaped: alpha without test_*, json_schema_2020_12_tool and fail, add renamed plus, echo
    described anew; beta (prefix b-) only echo (renamed say), session_info (described anew) and
    add (slow allowed but denied: deny wins). A renamed tool is called by its new name only; a
    denied or not allowed tool is neither listed nor callable."""
    own = backend_lists(env)["tools"]
    s = mcp("/fed-shaped")
    s.initialize()
    listed = s.call("tools/list")["tools"]
    got = [t["name"] for t in listed]
    want_alpha = ["plus" if n == "add" else n for n in own
                  if not n.startswith("test_") and n not in ("json_schema_2020_12_tool", "fail")]
    assert got == want_alpha + ["b-say", "b-add", "b-session_info"], got
    desc = {t["name"]: t.get("description") for t in listed}
    assert desc["echo"] == "Echoes, through the federation."
    assert desc["b-session_info"] == "Beta's session."
    assert desc["b-say"] == "Returns the given text unchanged."
    # Renamed: callable by the new name, not the old.
    assert s.call("tools/call", {"name": "plus", "arguments": {"a": 2, "b": 3}}) \
        ["structuredContent"]["sum"] == 5
    assert text_of(s.call("tools/call", {"name": "b-say", "arguments": {"text": "said"}})) == "said"
    for name in ("add", "b-echo", "test_simple_text", "fail", "b-slow", "b-notify"):
        err = error_of(s, "tools/call", {"name": name, "arguments": {"a": 1, "b": 1, "text": "x"}})
        assert err["code"] == -32602, (name, err)
    assert info(s, "b-session_info")["session"] != info(s)["session"]
    # The globs apply to prompts too (alpha's are all test_*, beta allows none of its own); a
    # prefixed member's URIs go by its name (beta+), whatever its Prefix.
    assert s.call("prompts/list")["prompts"] == []
    uris = names(s.call("resources/list"), "resources", "uri")
    assert "beta+test://static-text" in uris and "test://static-text" in uris, uris
    assert not [u for u in uris if u.startswith("b-")], uris


# ---- 11. DELETE ---------------------------------------------------------------------------------

def test_delete_ends_every_member_session(env, mcp):
    """DELETE of a federated session ends alpha's and beta's backend sessions: the backend answers
    404 on each old session id afterwards (and answered it before)."""
    s = mcp()
    s.initialize()
    sids = [info(s)["session"], info(s, "beta_session_info")["session"]]
    assert [backend_ping(env, sid) for sid in sids] == [200, 200]
    assert s.delete().status_code in (200, 204)
    s.session_id = None
    assert [backend_ping(env, sid) for sid in sids] == [404, 404]


def test_one_get_stream_per_session_and_delete_ends_it(env, mcp):
    """A federated session has one standalone GET stream: a second GET is 409 while the first
    is open; DELETE ends the open one (its response ends)."""
    s = mcp()
    s.initialize()
    listen = Listener(s)
    listen.opened()
    r = s.get_raw(headers={"Accept": "text/event-stream", "Mcp-Session-Id": s.session_id,
                           "MCP-Protocol-Version": s.protocol_version}, timeout=10)
    assert r.status_code == 409, (r.status_code, r.text)
    assert s.delete().status_code in (200, 204)
    s.session_id = None
    listen.thread.join(10)
    assert not listen.thread.is_alive(), "the GET stream outlived its session"


def backend_ping(env, sid: str, version="2025-11-25") -> int:
    """The HTTP status of a ping straight to the stack's backend in its session sid."""
    return requests.post(env["MCP_BACKEND_URL"], json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         headers={"Accept": "application/json, text/event-stream",
                                  "Content-Type": "application/json", "Mcp-Session-Id": sid,
                                  "MCP-Protocol-Version": version}, timeout=10).status_code


def test_expired_session_ends_every_member_session(env, mcp, db):
    """/fed-idle: a federated session idle past MCPSessionIdleTimeout (2 s) is expired by the
    sweep, which ends alpha's and beta's backend sessions without the client coming back (the
    backend answers 404 in them); the client's next request is 404."""
    s = mcp("/fed-idle")
    s.initialize()
    sids = [info(s)["session"], info(s, "beta_session_info")["session"]]
    assert [backend_ping(env, sid) for sid in sids] == [200, 200]
    t0 = time.monotonic()
    wait_for(lambda: [backend_ping(env, sid) for sid in sids] == [404, 404], 2 + 1 + 5,
             "the members' sessions to end")
    assert time.monotonic() - t0 >= 1.0
    with db.cursor() as cur:
        cur.execute("SELECT terminated_by FROM mcp.sessions WHERE id = %s", (s.session_id,))
        assert cur.fetchone()[0] == "expired"
    r = s.post_raw(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                               "params": {"name": "echo", "arguments": {"text": "x"}}}))
    assert r.status_code == 404, r.text
    s.session_id = None


# ---- 12. HTTP/2 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", wanted_modes())
def test_lists_and_calls_over_every_wire(env, mode):
    """The main path (initialize, tools/list, a call to each member, a beta+ resource, DELETE)
    over HTTP/1.1, h2c and HTTP/2 over TLS."""
    with wire_client(mode, env) as s:
        s.url = s.url_of(0, "/mcp-federated")
        s.initialize()
        if mode != "http1":
            assert s.last_response.http_version == "HTTP/2", s.last_response.http_version
        tools = names(s.call("tools/list"))
        assert "echo" in tools and "beta_echo" in tools
        assert text_of(s.call("tools/call", {"name": "echo", "arguments": {"text": mode}})) == mode
        assert text_of(s.call("tools/call", {"name": "beta_add", "arguments": {"a": 1, "b": 2}})) \
            == "3"
        r = s.call("resources/read", {"uri": "beta+test://static-text"})
        assert r["contents"][0]["uri"] == "beta+test://static-text"
        # The GET stream: a member's notification reaches it.
        listen = Listener(s)
        listen.opened()
        s.call("tools/call", {"name": "beta_notify", "arguments": {"text": f"over {mode}"}})
        listen.wait(lambda m: m.get("params", {}).get("data") == f"over {mode}",
                    f"beta's notification over {mode}")
        assert s.delete().status_code in (200, 204)


# ---- config -------------------------------------------------------------------------------------

CONFIG = """ServerRoot {d}
PidFile {d}/pid
ErrorLog {d}/error.log
DefaultRuntimeDir {d}
Mutex file:{d}
ServerName localhost
Listen 127.0.0.1:1
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule dbd_module /usr/lib/apache2/modules/mod_dbd.so
LoadModule mcp_module {module}
<Location /mcp>
    SetHandler mcp
{lines}
</Location>
"""
MEMBER = "    <MCPMember a>\n        Backend http://127.0.0.1:9/mcp\n    </MCPMember>"


@pytest.mark.parametrize("lines,error", [
    ("    MCPBackend http://127.0.0.1:9/mcp\n" + MEMBER,
     "<MCPMember> and MCPBackend exclude each other: a Location has one backend, or members"),
    (MEMBER + "\n    MCPBackend http://127.0.0.1:9/mcp",
     "MCPBackend and <MCPMember> exclude each other: a Location has one backend, or members"),
    (MEMBER, None),
], ids=["backend-then-member", "member-then-backend", "members-only"])
def test_backend_and_members_exclude_each_other(lines, error):
    module = REPO / "mod_mcp" / ".libs" / "mod_mcp.so"
    d = run_dir("mcp-config-")
    try:
        (d / "httpd.conf").write_text(CONFIG.format(d=d, module=module, lines=lines))
        p = subprocess.run(["/usr/sbin/apache2", "-t", "-d", str(d), "-f", str(d / "httpd.conf")],
                           capture_output=True, text=True, timeout=30)
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)
    if error is None:
        assert p.returncode == 0 and "Syntax OK" in p.stderr, p.stderr
    else:
        assert p.returncode != 0
        assert any(error in line for line in p.stderr.splitlines()), p.stderr
