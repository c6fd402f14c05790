-- Schema version 16 -> 17: streams_open_idx, the open streams by id, is the one index of
-- mcp.streams whose condition "status = 'open'" alone implies, so that a statement naming open
-- streams by key ("id = ANY(...) AND status = 'open'": a call's finish) is planned as lookups
-- in it whatever the statistics say. With a second such index the planner read that one whole
-- and kept the rows it wanted whenever its statistics were from a time with few streams open
-- (a big mcp.streams that gets 10,000 connected clients has changed by 1 %, and autovacuum does
-- not analyze it again): 10,000 rows read for every call.
--   * streams_open_holder_idx goes: it served the per-principal stream limit's count, which
--     stream slots (schema 15) replaced; no statement has looked a stream up by holder since.
--   * streams_open_session_idx keeps the open streams of sessions only (session_id IS NOT NULL,
--     implied by every statement that names a session).
-- Stop the gateways first (README, Upgrading).

BEGIN;
DROP INDEX IF EXISTS mcp.streams_open_holder_idx;
DROP INDEX mcp.streams_open_session_idx;
CREATE INDEX streams_open_session_idx ON mcp.streams (session_id)
    WHERE status = 'open' AND session_id IS NOT NULL;
INSERT INTO mcp.schema_version (version, description) VALUES
    (17, 'the open streams by id: the one index that "status = ''open''" alone implies');
COMMIT;
