-- Schema version 15 -> 16: a stream's lease renewal rewrites its row in place. lease_until was
-- the key of streams_open_idx, so every renewal (each open stream, every MCPStreamLease / 3)
-- made a new row version with an entry in each of mcp.streams' indexes: 73 bytes of WAL per
-- second per idle stream, ~700 KB/s for 10,000 connected clients doing nothing
-- (bench/idle_streams.py --idle-secs; bench/before-after.md, issue 25). The index now holds the
-- open streams by id (the sweep reads them in that order, checking each one's lease), and
-- mcp.streams' pages keep a fifth free for the new versions: a renewal is a heap-only update,
-- and the stream rows' share of an idle stream's WAL falls to 18 bytes per second (28-33 in
-- all, with its session's mark once a minute). Pages written before the upgrade stay full
-- until their rows go (retention) or VACUUM FULL mcp.streams rewrites them. Stop the gateways
-- first (README, Upgrading).

BEGIN;
DROP INDEX mcp.streams_open_idx;
CREATE INDEX streams_open_idx ON mcp.streams (id) WHERE status = 'open';
ALTER TABLE mcp.streams SET (fillfactor = 80);
INSERT INTO mcp.schema_version (version, description) VALUES
    (16, 'a lease renewal rewrites its stream''s row in place (HOT): lease_until in no index, room on each page');
COMMIT;
