-- Schema version 7 -> 8: the era bridge checks Mcp-Param-* headers (2026-07-28, x-mcp-header)
-- against the backend's tool list, cached per pooled session (a backend may list other tools
-- to other principals; a pooled session is one principal's):
--   mcp.bridge_sessions.tool_headers      {tool name: [{header, type, path}, ...]} for every
--                                         tool of the session's last complete tools/list
--                                         (mcp_era_param_decls; [] for a tool with none)
--   mcp.bridge_sessions.tools_fetched_at  when that list was read (MCPEraBridgeToolsTTL)
-- Stop the gateways first (README, Upgrading).

BEGIN;
ALTER TABLE mcp.bridge_sessions ADD COLUMN tool_headers jsonb;
ALTER TABLE mcp.bridge_sessions ADD COLUMN tools_fetched_at timestamptz;
INSERT INTO mcp.schema_version (version, description) VALUES
    (8, 'the era bridge: each pooled session''s x-mcp-header declarations');
COMMIT;
