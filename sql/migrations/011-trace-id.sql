-- Schema version 10 -> 11: the W3C trace id (traceparent's, 32 lowercase hex) of the request that
-- began each session (its initialize) and of the request each stream answers (a GET's for a
-- standalone stream). The gateway passes the same trace id to the backend (a client's own, or one
-- it started), so a call can be followed from the client through the gateway to the backend:
--   SELECT * FROM mcp.tool_calls WHERE trace_id = '4bf92f3577b34da6a3ce929d0e0e4736';
-- NULL for rows stored before this version. Stop the gateways first (README, Upgrading).

BEGIN;
ALTER TABLE mcp.sessions ADD COLUMN IF NOT EXISTS trace_id text;
ALTER TABLE mcp.streams  ADD COLUMN IF NOT EXISTS trace_id text;
INSERT INTO mcp.schema_version (version, description) VALUES
    (11, 'the W3C trace id of each session''s initialize and of each stream''s request');
COMMIT;
