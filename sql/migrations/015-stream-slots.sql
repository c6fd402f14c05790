-- Schema version 14 -> 15: streams and followers are admitted into slots (mcp.stream_slots,
-- mcp.slot_claim) instead of under an advisory lock per session and per holder held until the
-- admitting transaction commits: that lock made concurrent calls of one session, and every
-- call of one principal or client address, wait for each other's commit, WAL flush included
-- (bench/before-after.md, issue 25). mcp.admit_stream takes the id of the stream or follower it
-- admits (two more arguments); functions.sql, loaded after the migrations, creates it.
-- Streams open before the upgrade hold no slot. Stop the gateways first (README, Upgrading).

BEGIN;
-- Stream slots: a session's (scope 'session:<id>') or a holder's ('holder:<holder>') streams
-- and followers each occupy one of its slots 1..limit (mcp.slot_claim, in mcp.admit_stream);
-- a slot is free again once its stream ended or its lease ran out (mcp.slot_held), so nothing
-- is written when a stream ends. No foreign keys: an occupant that is gone holds nothing, and
-- mcp.maintain deletes free slots.
CREATE TABLE IF NOT EXISTS mcp.stream_slots (
    scope        text    NOT NULL,
    n            int     NOT NULL,
    stream_id    bigint,
    follower_id  bigint,
    PRIMARY KEY (scope, n)
);
DROP FUNCTION IF EXISTS mcp.admit_stream(text, text, bigint, int, int, int);
INSERT INTO mcp.schema_version (version, description) VALUES
    (15, 'stream slots: admissions of one session or holder do not wait for each other''s commit');
COMMIT;
