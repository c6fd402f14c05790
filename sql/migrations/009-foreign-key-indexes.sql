-- Schema version 8 -> 9: indexes for the two foreign keys that had none (the rule: every foreign
-- key has an index on its referencing columns; test_retention checks it).
--   mcp.streams.bridged_to (ON DELETE SET NULL, migration 007): every deleted stream ran
--     "UPDATE mcp.streams SET bridged_to = NULL WHERE bridged_to = $1" as a scan of every
--     stream, so retention's batched stream deletes grew with the square of the table (500,000
--     events: mcp.maintain over 5 minutes). Partial: only a bridged call's client stream has a
--     value, so the hot path's stream inserts add no entry.
--   mcp.bridge_rounds.session_id (ON DELETE CASCADE): every deleted session scanned the rounds.
-- Stop the gateways first (README, Upgrading).

BEGIN;
CREATE INDEX IF NOT EXISTS streams_bridged_to_idx ON mcp.streams (bridged_to)
    WHERE bridged_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS bridge_rounds_session_idx ON mcp.bridge_rounds (session_id);
INSERT INTO mcp.schema_version (version, description) VALUES
    (9, 'indexes for the foreign keys of mcp.streams.bridged_to and mcp.bridge_rounds.session_id');
COMMIT;
