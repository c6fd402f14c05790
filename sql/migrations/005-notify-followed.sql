-- Schema version 4 -> 5: only streams that someone follows are notified (issue 12). A follower
-- sets mcp.streams.followed when it registers; the gateway notifies a followed stream's stored
-- messages itself, so the statement trigger that notified every outbound insert (events_notify)
-- goes, and the status trigger (streams_notify, in functions.sql, loaded by sql/upgrade.sql
-- after the migrations) fires only for followed streams. Streams stored before keep false: a
-- follower that registers after the upgrade sets it. Stop the gateways first (README, Upgrading).

BEGIN;
ALTER TABLE mcp.streams ADD COLUMN followed boolean NOT NULL DEFAULT false;
DROP TRIGGER IF EXISTS events_notify ON mcp.events;
DROP FUNCTION IF EXISTS mcp.notify_stream_events();
INSERT INTO mcp.schema_version (version, description) VALUES
    (5, 'notify only followed streams (mcp.streams.followed)');
COMMIT;
