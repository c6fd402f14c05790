-- mod_mcp schema. Load once into the database that DBDParams names:
--     psql "dbname=mcp" -v ON_ERROR_STOP=1 -f sql/schema.sql
-- The module never creates or alters tables itself.

BEGIN;

CREATE SCHEMA IF NOT EXISTS mcp;

-- One row per gateway session. The id is what clients send in Mcp-Session-Id;
-- backend_session_id is what the backend issued (NULL for a stateless backend).
CREATE TABLE IF NOT EXISTS mcp.sessions (
    id                  text PRIMARY KEY
                        CHECK (id ~ '^[\x21-\x7e]+$' AND length(id) BETWEEN 22 AND 128),
    backend_url         text        NOT NULL,
    backend_session_id  text,
    protocol_version    text        NOT NULL,
    principal           text,                       -- r->user when the request was authenticated
    client_info         jsonb,                      -- initialize params.clientInfo
    client_capabilities jsonb,                      -- initialize params.capabilities
    server_info         jsonb,                      -- InitializeResult.serverInfo
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    terminated_at       timestamptz,
    terminated_by       text CHECK (terminated_by IN ('client', 'expired', 'backend'))
);

CREATE INDEX IF NOT EXISTS sessions_live_idx
    ON mcp.sessions (last_seen_at) WHERE terminated_at IS NULL;
CREATE INDEX IF NOT EXISTS sessions_principal_idx
    ON mcp.sessions (principal, created_at);

-- Streams (one per POST that carries a request, one standalone GET stream per session) and
-- their events are added by the transport's event store; see the issue that introduces them.

COMMIT;
