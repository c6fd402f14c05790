-- Schema version 11 -> 12: the protocol eras each backend serves, as the gateway learned them
-- (a server/discover probe) for the <Location>s that do not say them with MCPBackendProtocols.
-- One row per backend (MCPBackend as written); every process and host reads it and probes again
-- only once expires_at has passed. Stop the gateways first (README, Upgrading).

BEGIN;
CREATE TABLE IF NOT EXISTS mcp.backend_eras (
    backend_url text        PRIMARY KEY,
    protocols   text        NOT NULL,
    learned_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
INSERT INTO mcp.schema_version (version, description) VALUES
    (12, 'the protocol eras each backend serves, learned by server/discover (mcp.backend_eras)');
COMMIT;
