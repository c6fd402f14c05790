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
    terminated_by       text CHECK (terminated_by IN ('client', 'expired', 'backend')),
    idle_timeout_secs   integer                     -- MCPSessionIdleTimeout where it began (0: none)
);
-- Schemas loaded before the column existed.
ALTER TABLE mcp.sessions ADD COLUMN IF NOT EXISTS idle_timeout_secs integer;

CREATE INDEX IF NOT EXISTS sessions_live_idx
    ON mcp.sessions (last_seen_at) WHERE terminated_at IS NULL;
CREATE INDEX IF NOT EXISTS sessions_principal_idx
    ON mcp.sessions (principal, created_at);

-- One row per SSE stream: a POST that carries requests ('request'), or a session's standalone GET
-- stream ('standalone'). The owner is the process relaying it; it renews lease_until while it
-- works, so a stream whose owner died can be recognised and finished by someone else.
CREATE TABLE IF NOT EXISTS mcp.streams (
    id            bigserial   PRIMARY KEY,
    session_id    text        NOT NULL REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    kind          text        NOT NULL CHECK (kind IN ('request', 'standalone')),
    request_id    jsonb,                  -- the JSON-RPC id (an array of ids for a batch)
    method        text,                   -- the request's method (first request of a batch)
    status        text        NOT NULL DEFAULT 'open'
                  CHECK (status IN ('open', 'complete', 'failed', 'closed')),
    owner         text,                   -- host:pid of the relaying process
    lease_until   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz
);

CREATE INDEX IF NOT EXISTS streams_session_idx ON mcp.streams (session_id, created_at);
CREATE INDEX IF NOT EXISTS streams_open_idx ON mcp.streams (lease_until) WHERE status = 'open';
-- At most one open standalone GET stream per session (a second one is answered 409).
CREATE UNIQUE INDEX IF NOT EXISTS streams_one_standalone_idx
    ON mcp.streams (session_id) WHERE kind = 'standalone' AND status = 'open';

-- Every message in both directions. Messages on a stream have its order (seq): for a request
-- stream seq 0 is the inbound request, seq 1 the priming row (stored before the request goes to
-- the backend), then what the client is sent. The SSE event id of a row is '<stream_id>-<seq>'.
-- Inbound notifications and responses, and the initialize exchange, belong to no stream.
CREATE TABLE IF NOT EXISTS mcp.events (
    id          bigserial   PRIMARY KEY,
    session_id  text        NOT NULL REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    stream_id   bigint      REFERENCES mcp.streams (id) ON DELETE CASCADE,
    seq         bigint,
    direction   text        NOT NULL CHECK (direction IN ('in', 'out')),
    kind        text        NOT NULL CHECK (kind IN ('priming', 'message')),
    message     jsonb,                    -- NULL for priming rows
    principal   text,                     -- the session's authenticated user (for the audit)
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((stream_id IS NULL) = (seq IS NULL)),
    CHECK ((kind = 'priming') = (message IS NULL))
);

-- Replay reads a stream's rows after a cursor, in order.
CREATE UNIQUE INDEX IF NOT EXISTS events_stream_seq_idx ON mcp.events (stream_id, seq);
CREATE INDEX IF NOT EXISTS events_session_idx ON mcp.events (session_id, id);

-- Wake-ups for followers in other processes and on other hosts: every statement that stores
-- outbound messages on a stream, and every change of a stream's status, notifies channel
-- mcp_events with the stream id. A notification is only a wake-up (delivered at commit); the
-- tables are the truth. Each transaction that notifies takes PostgreSQL's database-wide notify
-- lock through its commit, so the gateway notifies once per stored batch and stores a stream's
-- last messages and its end in one transaction (identical notifications of one transaction
-- are folded into one). Inbound rows and priming rows wake nobody: no follower reads them.
CREATE OR REPLACE FUNCTION mcp.notify_stream_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcp_events', d.stream_id::text)
       FROM (SELECT DISTINCT stream_id FROM new_events
              WHERE stream_id IS NOT NULL AND direction = 'out' AND kind = 'message') AS d;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_notify
    AFTER INSERT ON mcp.events REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION mcp.notify_stream_events();

CREATE OR REPLACE FUNCTION mcp.notify_stream_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcp_events', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER streams_notify
    AFTER UPDATE OF status ON mcp.streams
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION mcp.notify_stream_status();

COMMIT;

-- The audit views.
\ir audit.sql
