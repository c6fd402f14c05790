-- Schema version 16 -> 17: mcp.streams loses streams_open_holder_idx, the open streams by holder.
-- It served the per-principal stream limit's count, which stream slots (schema 15) replaced; no
-- statement has looked a stream up by holder since. It still took an entry for every stream
-- opened, and, as every holder's entries fold into a few pages (one holder for all the
-- unauthenticated clients behind one address), it was the planner's pick for reading "the open
-- streams" whole: with statistics from when few streams were open, a call's finish read every
-- open stream through it and kept its own (10,000 connected clients: 10,000 rows per call).
-- Stop the gateways first (README, Upgrading).

BEGIN;
DROP INDEX IF EXISTS mcp.streams_open_holder_idx;
INSERT INTO mcp.schema_version (version, description) VALUES
    (17, 'no index of the open streams by holder (unused since stream slots)');
COMMIT;
