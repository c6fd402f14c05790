-- Schema version 5 -> 6: requests of the stateless 2026-07-28 revision (issue 13). Such a
-- request has no session: it is a stream of its own (kind 'request', session_id NULL) that
-- records its revision and principal itself; its events have session_id NULL too. Status
-- 'cancelled': the client closed the response before it was complete, which in that revision
-- cancels the request. The audit view mcp.tool_calls (sql/audit.sql, loaded by sql/upgrade.sql
-- after the migrations) covers both eras; mcp.maintain already treats a stream without a
-- session as owned by nobody. Stop the gateways first (README, Upgrading).

BEGIN;
ALTER TABLE mcp.streams ALTER COLUMN session_id DROP NOT NULL;
ALTER TABLE mcp.events  ALTER COLUMN session_id DROP NOT NULL;
ALTER TABLE mcp.streams ADD COLUMN protocol_version text;  -- NULL: the session's
ALTER TABLE mcp.streams ADD COLUMN principal text;         -- stateless streams: r->user
ALTER TABLE mcp.streams DROP CONSTRAINT streams_status_check;
ALTER TABLE mcp.streams ADD CONSTRAINT streams_status_check
    CHECK (status IN ('open', 'complete', 'failed', 'closed', 'cancelled'));
ALTER TABLE mcp.streams ADD CONSTRAINT streams_session_or_version_check
    CHECK (session_id IS NOT NULL OR protocol_version IS NOT NULL);
CREATE INDEX streams_stateless_idx ON mcp.streams (created_at) WHERE session_id IS NULL;
INSERT INTO mcp.schema_version (version, description) VALUES
    (6, 'stateless 2026-07-28 requests: streams and events without a session');
COMMIT;
