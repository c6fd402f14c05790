"""Schema versions: a database holding the schema as first released (06100ae, version 1) is
refused by today's gateway (503 naming both versions), upgraded with sql/upgrade.sql keeping
every row, equal in structure to a fresh sql/schema.sql install, and its stored stream replays
through today's gateway (GET with Last-Event-ID). Its own stack, loaded with --schema."""

from __future__ import annotations

import re
import secrets
import subprocess
from pathlib import Path

import psycopg2
import pytest

from conftest import REPO, own_stack, run_dir
from mcp_client import McpSession
from waiting import wait_for

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The version this build needs (mod_mcp/mcp_store.h).
VERSION = int(re.search(r"#define MCP_STORE_SCHEMA_VERSION (\d+)",
                        (REPO / "mod_mcp" / "mcp_store.h").read_text()).group(1))


@pytest.fixture(scope="module")
def old_stack():
    # own_stack: the sanitizer pass's module too, and `down` fails on a sanitizer report
    with own_stack(run_dir("mcp-upgrade."), "--httpd", "1",
                   "--schema", str(FIXTURES / "schema-v1.sql")) as env:
        yield env


def structure(conninfo: str) -> list[str]:
    out = subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", conninfo, "-f",
                          str(FIXTURES / "structure.sql")], capture_output=True, text=True,
                         check=True).stdout
    return out.splitlines()


# Rows as 06100ae's module wrote them: the initialize exchange (no stream), a tools/call stream
# with its request (seq 0), priming row (1), a progress notification (2) and response (3).
OLD_ROWS = """
INSERT INTO mcp.sessions (id, backend_url, protocol_version, client_info)
     VALUES (%(sid)s, %(backend)s, '2025-06-18', '{"name": "old-client"}');
INSERT INTO mcp.events (session_id, direction, kind, message) VALUES
    (%(sid)s, 'in', 'message', '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}'),
    (%(sid)s, 'out', 'message', '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18"}}');
INSERT INTO mcp.streams (session_id, kind, request_id, method, status, owner, lease_until,
                         completed_at)
     VALUES (%(sid)s, 'request', '5', 'tools/call', 'complete', 'old:1', now(), now());
INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message)
SELECT %(sid)s, s.id, v.seq, v.direction, v.kind, v.message::jsonb
  FROM mcp.streams s,
       (VALUES (0, 'in', 'message', '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'),
               (1, 'out', 'priming', NULL),
               (2, 'out', 'message', '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'),
               (3, 'out', 'message', '{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"hi"}]}}'))
       AS v(seq, direction, kind, message);
"""


def test_upgrade_from_06100ae_keeps_rows_and_replays(old_stack):
    pg_url = old_stack["MCP_PG"]
    sid = secrets.token_urlsafe(24)
    with psycopg2.connect(pg_url) as c, c.cursor() as cur:
        cur.execute(OLD_ROWS, {"sid": sid, "backend": old_stack["MCP_BACKEND_URL"]})
        cur.execute("SELECT id FROM mcp.streams")
        stream_id = cur.fetchone()[0]
        cur.execute("SELECT id, stream_id, seq, message::text FROM mcp.events ORDER BY id")
        before = cur.fetchall()

    # Today's gateway refuses the old schema, naming both versions.
    s = McpSession(old_stack["MCP_URL"])
    r = s.post_raw('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
                   '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
                   with_session=False)
    assert r.status_code == 503, r.text
    assert "schema is version 1" in r.text and f"needs version {VERSION}" in r.text, r.text
    log = Path(old_stack["MCP_STACK_DIR"], "httpd-1", "error_log").read_text()
    assert "refusing to use the database: the database schema is version 1" in log

    up = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", pg_url, "-f",
                         str(REPO / "sql" / "upgrade.sql")], capture_output=True, text=True)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"mod_mcp schema version {VERSION}" in up.stdout

    with psycopg2.connect(pg_url) as c, c.cursor() as cur:
        cur.execute("SELECT id, stream_id, seq, message_text FROM mcp.events ORDER BY id")
        after = cur.fetchall()
        cur.execute("SELECT count(*) FROM mcp.sessions WHERE id = %s AND client_info->>'name' = 'old-client'", (sid,))
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT request_id_text, status FROM mcp.streams WHERE id = %s", (stream_id,))
        assert cur.fetchone() == ("5", "complete")
        cur.execute("SELECT outcome, tool FROM mcp.tool_calls WHERE stream_id = %s", (stream_id,))
        assert cur.fetchone() == ("ok", "echo")
        cur.execute("SELECT max(version) FROM mcp.schema_version")
        assert cur.fetchone()[0] == VERSION
    assert after == before   # every row, its id, stream, seq, and its text

    # The same structure as a fresh install.
    admin = old_stack["MCP_PG_ADMIN"]
    c = psycopg2.connect(admin)
    c.autocommit = True
    c.cursor().execute("CREATE DATABASE mcp_fresh OWNER mcp")
    c.close()
    fresh = pg_url.replace("dbname=mcp", "dbname=mcp_fresh")
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", fresh, "-f",
                    str(REPO / "sql" / "schema.sql")], check=True, capture_output=True)
    migrated, installed = structure(pg_url), structure(fresh)
    assert migrated == installed, "\n".join(
        [f"- {x}" for x in migrated if x not in installed] + [f"+ {x}" for x in installed if x not in migrated])
    # Running it again changes nothing.
    again = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", pg_url, "-f",
                            str(REPO / "sql" / "upgrade.sql")], capture_output=True, text=True)
    assert again.returncode == 0 and structure(pg_url) == installed

    # The stored stream replays through today's gateway (it re-reads the version within 1 s).
    old = McpSession(old_stack["MCP_URL"])
    old.session_id, old.protocol_version, old.initialized = sid, "2025-06-18", True

    def replayed():
        try:
            return [(e.id, e.data) for e in old.get_stream(last_event_id=f"{stream_id}-1")]
        except Exception:   # 503 until the version is read again
            return None
    events = wait_for(replayed, timeout=10, what="the replay after the upgrade")
    assert events == [(f"{stream_id}-{seq}", text) for (_, st, seq, text) in after
                      if st == stream_id and seq >= 2]

    # And new work lands in today's partition.
    s = McpSession(old_stack["MCP_URL"])
    s.initialize()
    assert s.request("tools/call", {"name": "echo", "arguments": {"text": "new"}})
    with psycopg2.connect(pg_url) as c, c.cursor() as cur:
        cur.execute("SELECT DISTINCT tableoid::regclass::text FROM mcp.events WHERE stream_id > %s",
                    (stream_id,))
        parts = [r[0] for r in cur.fetchall()]
    assert len(parts) == 1 and parts[0].startswith("events_2"), parts
    s.delete()
