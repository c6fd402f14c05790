-- Schema version 13 -> 14: mcp.events.session_id references mcp.sessions on mcp.events_default
-- only, the partition of the rows of no stream (the initialize exchange, inbound notifications
-- and responses; and rows of streams no day partition holds). A row of a stream in a day
-- partition names its session twice: session_id, and stream_id -> mcp.streams.session_id, whose
-- foreign key (ON DELETE CASCADE) is checked once per stream; every statement that stores such a
-- row stores the stream's session (tests/integration/conftest.py compares them after each run).
-- Per row, the session's foreign key was a query and a FOR KEY SHARE lock of the session's row:
-- concurrent calls of one session made a MultiXact of each other's locks on every answer
-- (bench/before-after.md, issue 25, fifth pass). Deleting a session still deletes every row of
-- it: its streams' rows through them, its rows of no stream through this key.
-- Stop the gateways first (README, Upgrading).

BEGIN;
ALTER TABLE mcp.events DROP CONSTRAINT events_session_id_fkey;
ALTER TABLE mcp.events_default ADD CONSTRAINT events_default_session_id_fkey
    FOREIGN KEY (session_id) REFERENCES mcp.sessions (id) ON DELETE CASCADE;
INSERT INTO mcp.schema_version (version, description) VALUES
    (14, 'mcp.events.session_id references mcp.sessions on mcp.events_default only (rows of no stream)');
COMMIT;
