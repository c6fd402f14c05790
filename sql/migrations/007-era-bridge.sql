-- Schema version 6 -> 7: the era bridge (issue 14; MCPEraBridge): a 2026-07-28 client served
-- through a 2025-era backend.
--   mcp.bridge_sessions  backend sessions the gateway pools per principal + backend + canonical
--                        client capabilities. Each is an mcp.sessions row (never given to a
--                        client), so the sweep expires it when idle and DELETEs it upstream.
--   mcp.bridge_backends  each backend's InitializeResult, for server/discover, with its time.
--   mcp.bridge_rounds    input-required rounds: a requestState handle, single use, bound to the
--                        principal, the original request and an expiry; it names the backend
--                        stream being relayed and the position the retry follows it from.
--   mcp.streams.bridged_to  a bridged call's client stream -> the backend stream on the pooled
--                        session (the audit shows both sides).
-- Stop the gateways first (README, Upgrading).

BEGIN;
CREATE TABLE mcp.bridge_sessions (
    session_id       text        PRIMARY KEY REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    principal        text,
    backend_url      text        NOT NULL,
    capabilities_key text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bridge_sessions_key_idx
    ON mcp.bridge_sessions (backend_url, capabilities_key, principal);
CREATE TABLE mcp.bridge_backends (
    backend_url       text        PRIMARY KEY,
    initialize_result text        NOT NULL,
    fetched_at        timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE mcp.bridge_rounds (
    state              text        PRIMARY KEY CHECK (length(state) >= 22),
    principal          text,
    request_digest     text        NOT NULL,
    session_id         text        NOT NULL REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    stream_id          bigint      NOT NULL REFERENCES mcp.streams (id) ON DELETE CASCADE,
    backend_request_id bigint      NOT NULL,
    position           bigint      NOT NULL,
    pending            text        NOT NULL,
    expires_at         timestamptz NOT NULL,
    used_at            timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bridge_rounds_stream_idx ON mcp.bridge_rounds (stream_id, position);
ALTER TABLE mcp.streams ADD COLUMN bridged_to bigint REFERENCES mcp.streams (id) ON DELETE SET NULL;
INSERT INTO mcp.schema_version (version, description) VALUES
    (7, 'the era bridge: pooled backend sessions, InitializeResults, input-required rounds');
COMMIT;
