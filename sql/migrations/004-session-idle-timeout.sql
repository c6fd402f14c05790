-- Schema version 3 -> 4: each session records the MCPSessionIdleTimeout it began under (the
-- sweep expires idle sessions by it), and mcp.json_pg_safe (in functions.sql, loaded by
-- sql/upgrade.sql after the migrations). Sessions stored before keep NULL: the timeout of the
-- <Location> that serves them applies.

BEGIN;
ALTER TABLE mcp.sessions ADD COLUMN idle_timeout_secs integer;
INSERT INTO mcp.schema_version (version, description) VALUES
    (4, 'each session''s idle timeout; mcp.json_pg_safe');
COMMIT;
