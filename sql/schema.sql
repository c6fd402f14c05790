-- mod_mcp schema, the one-shot install into an empty database (the one DBDParams names):
--     psql "dbname=mcp" -v ON_ERROR_STOP=1 -f sql/schema.sql
-- A database that holds an older mod_mcp schema is upgraded with sql/upgrade.sql instead (it
-- applies the numbered files of sql/migrations/ that it lacks); this file refuses to load over
-- one. The module never creates or alters tables itself; it checks mcp.schema_version.

BEGIN;

CREATE SCHEMA IF NOT EXISTS mcp;

DO $$
BEGIN
    IF to_regclass('mcp.sessions') IS NOT NULL THEN
        RAISE EXCEPTION 'mod_mcp''s tables exist already: upgrade them with sql/upgrade.sql';
    END IF;
END
$$;

-- The schema's version: one row per migration applied (sql/migrations/NNN-*.sql), or all of
-- them for a database installed by this file. mod_mcp refuses to work with a database whose
-- highest version is not the one it was built for (MCP_SCHEMA_VERSION).
CREATE TABLE mcp.schema_version (
    version     integer     PRIMARY KEY,
    description text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO mcp.schema_version (version, description) VALUES
    (1, 'sessions, streams, events, audit views'),
    (2, 'byte-exact message texts, admission limits, followers'),
    (3, 'mcp.events partitioned by day of the stream''s start; retention (mcp.maintain)'),
    (4, 'each session''s idle timeout; mcp.json_pg_safe'),
    (5, 'notify only followed streams (mcp.streams.followed)'),
    (6, 'stateless 2026-07-28 requests: streams and events without a session'),
    (7, 'the era bridge: pooled backend sessions, InitializeResults, input-required rounds'),
    (8, 'the era bridge: each pooled session''s x-mcp-header declarations'),
    (9, 'indexes for the foreign keys of mcp.streams.bridged_to and mcp.bridge_rounds.session_id'),
    (10, 'the console''s indexes: sessions by md5(id) and by created_at'),
    (11, 'the W3C trace id of each session''s initialize and of each stream''s request'),
    (12, 'the protocol eras each backend serves, learned by server/discover (mcp.backend_eras)'),
    (13, 'federation: each federated session''s member sessions (mcp.session_members), mcp.streams.member'),
    (14, 'mcp.events.session_id references mcp.sessions on mcp.events_default only (rows of no stream)'),
    (15, 'stream slots: admissions of one session or holder do not wait for each other''s commit'),
    (16, 'a lease renewal rewrites its stream''s row in place (HOT): lease_until in no index, room on each page'),
    (17, 'the open streams by id: the one index that "status = ''open''" alone implies');

-- One row per gateway session. The id is what clients send in Mcp-Session-Id;
-- backend_session_id is what the backend issued (NULL for a stateless backend).
CREATE TABLE IF NOT EXISTS mcp.sessions (
    id                  text PRIMARY KEY
                        CHECK (id ~ '^[\x21-\x7e]+$' AND length(id) BETWEEN 22 AND 128),
    backend_url         text        NOT NULL,
    backend_session_id  text,
    protocol_version    text        NOT NULL,
    principal           text,                       -- r->user when the request was authenticated
    -- From the initialize exchange (stored exactly as events), through mcp.audit_jsonb.
    client_info         jsonb,                      -- initialize params.clientInfo
    client_capabilities jsonb,                      -- initialize params.capabilities
    server_info         jsonb,                      -- InitializeResult.serverInfo
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    terminated_at       timestamptz,
    terminated_by       text CHECK (terminated_by IN ('client', 'expired', 'backend')),
    idle_timeout_secs   integer                     -- MCPSessionIdleTimeout where it began (0: none)
);

CREATE INDEX IF NOT EXISTS sessions_live_idx
    ON mcp.sessions (last_seen_at) WHERE terminated_at IS NULL;
CREATE INDEX IF NOT EXISTS sessions_principal_idx
    ON mcp.sessions (principal, created_at);

-- One row per SSE stream: a POST that carries requests ('request'), or a session's standalone GET
-- stream ('standalone'). The owner is the process relaying it; it renews lease_until while it
-- works, so a stream whose owner died can be recognised and finished by someone else.
-- A stream's id carries its start time (mcp.stream_id_new, sql/retention.sql).
-- A request of the 2026-07-28 revision has no session: it is a stream of its own (kind
-- 'request', session_id NULL) that records its revision and principal itself; its events have
-- session_id NULL too. 'cancelled': the client closed the response before it was complete,
-- which in that revision cancels the request (the backend's request is closed at once).
CREATE SEQUENCE mcp.streams_id_seq;
CREATE TABLE IF NOT EXISTS mcp.streams (
    id            bigint      PRIMARY KEY DEFAULT nextval('mcp.streams_id_seq'),
    session_id    text        REFERENCES mcp.sessions (id) ON DELETE CASCADE,  -- NULL: 2026-07-28
    kind          text        NOT NULL CHECK (kind IN ('request', 'standalone')),
    request_id_text text,                 -- the JSON-RPC id as JSON text (an array of ids for a batch)
    request_id    jsonb,                  -- ... as jsonb (mcp.audit_jsonb)
    method        text,                   -- the request's method (first request of a batch)
    status        text        NOT NULL DEFAULT 'open'
                  CHECK (status IN ('open', 'complete', 'failed', 'closed', 'cancelled')),
    owner         text,                   -- host:pid of the relaying process
    lease_until   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    followed      boolean     NOT NULL DEFAULT false, -- a follower registered (mcp_events wake-ups)
    protocol_version text,                -- NULL: the session's
    principal     text,                   -- stateless streams: r->user
    CONSTRAINT streams_session_or_version_check
        CHECK (session_id IS NOT NULL OR protocol_version IS NOT NULL)
) WITH (fillfactor = 80);

-- An open stream's lease is renewed every few seconds (MCPStreamLease / 3) for as long as it
-- lasts: lease_until is in no index, and each page keeps a fifth free, so that a renewal is a
-- heap-only update on the row's own page (no new entry in each of the table's indexes: the
-- stream rows' WAL per idle stream falls from 73 to 18 bytes per second, 28-33 in all with its
-- session's mark once a minute; bench/idle_streams.py --idle-secs).
-- The sweep's search for open streams whose lease ran out reads the open ones in id order.
CREATE INDEX IF NOT EXISTS streams_session_idx ON mcp.streams (session_id, created_at);
CREATE INDEX IF NOT EXISTS streams_open_idx ON mcp.streams (id) WHERE status = 'open';
CREATE INDEX IF NOT EXISTS streams_stateless_idx ON mcp.streams (created_at)
    WHERE session_id IS NULL;
-- At most one open standalone GET stream per session (a second one is answered 409).
CREATE UNIQUE INDEX IF NOT EXISTS streams_one_standalone_idx
    ON mcp.streams (session_id) WHERE kind = 'standalone' AND status = 'open';

-- Every message in both directions. Messages on a stream have its order (seq): for a request
-- stream seq 0 is the inbound request, seq 1 the priming row (stored before the request goes to
-- the backend; only for sessions whose revision sends priming events, 2025-11-25), then what the
-- client is sent (from seq 2). The SSE event id of a row is '<stream_id>-<seq>'.
-- Inbound notifications and responses, and the initialize exchange, belong to no stream.
-- Partitioned by stream (sql/retention.sql): no primary key (it would have to hold stream_id,
-- which may be NULL); ids come from the sequence. A stream's rows are unique by (stream_id, seq).
CREATE SEQUENCE mcp.events_id_seq;
CREATE TABLE IF NOT EXISTS mcp.events (
    id          bigint      NOT NULL DEFAULT nextval('mcp.events_id_seq'),
    session_id  text,                     -- NULL: 2026-07-28 (its foreign key: below)
    stream_id   bigint      REFERENCES mcp.streams (id) ON DELETE CASCADE,
    seq         bigint,
    direction   text        NOT NULL CHECK (direction IN ('in', 'out')),
    kind        text        NOT NULL CHECK (kind IN ('priming', 'message')),
    message_text text,                    -- the message exactly as sent; NULL for priming rows
    message     jsonb,                    -- ... as jsonb, for queries (mcp.audit_jsonb)
    principal   text,                     -- the session's authenticated user (for the audit)
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((stream_id IS NULL) = (seq IS NULL)),
    CHECK ((kind = 'priming') = (message_text IS NULL)),
    CHECK (message IS NULL OR message_text IS NOT NULL)
) PARTITION BY RANGE (stream_id);
ALTER SEQUENCE mcp.streams_id_seq OWNED BY mcp.streams.id;
ALTER SEQUENCE mcp.events_id_seq OWNED BY mcp.events.id;
-- Rows of no stream, and of streams no day partition holds.
CREATE TABLE mcp.events_default PARTITION OF mcp.events DEFAULT;
-- session_id references mcp.sessions here only (schema 14): a row of a stream names its session
-- through stream_id too (mcp.streams.session_id, checked once per stream, ON DELETE CASCADE), and
-- its session_id is the stream's (every statement stores that one; the test stacks compare them).
-- Checked per row, the key cost a query and a FOR KEY SHARE lock of the session's row per row
-- (concurrent calls of one session: a MultiXact per answer).
ALTER TABLE mcp.events_default ADD CONSTRAINT events_default_session_id_fkey
    FOREIGN KEY (session_id) REFERENCES mcp.sessions (id) ON DELETE CASCADE;

-- Replay reads a stream's rows after a cursor, in order.
CREATE UNIQUE INDEX IF NOT EXISTS events_stream_seq_idx ON mcp.events (stream_id, seq);
CREATE INDEX IF NOT EXISTS events_session_idx ON mcp.events (session_id, id);

-- ---- limits (admission control) -----------------------------------------------------------
-- Who holds a session, a stream or a follower, for the per-principal limits: 'user:<name>' for
-- an authenticated client, 'addr:<client address>' otherwise.
ALTER TABLE mcp.sessions ADD COLUMN IF NOT EXISTS holder text;
ALTER TABLE mcp.streams  ADD COLUMN IF NOT EXISTS holder text;
CREATE INDEX IF NOT EXISTS sessions_holder_live_idx
    ON mcp.sessions (holder) WHERE terminated_at IS NULL;
-- (streams_open_idx must stay the one index of mcp.streams that "status = 'open'" alone
-- implies: a finish names its streams by key and status, and with another such index stale
-- statistics made it read that one whole; schema 17.)
CREATE INDEX IF NOT EXISTS streams_open_session_idx ON mcp.streams (session_id)
    WHERE status = 'open' AND session_id IS NOT NULL;

-- Clients following a stream (GET with Last-Event-ID) while it is open: each holds a worker
-- thread like a stream does. The process serving it renews the lease and deletes the row when
-- the follower ends; a row whose lease ran out (its process died) no longer counts.
CREATE TABLE IF NOT EXISTS mcp.followers (
    id           bigserial   PRIMARY KEY,
    stream_id    bigint      NOT NULL REFERENCES mcp.streams (id) ON DELETE CASCADE,
    session_id   text        NOT NULL REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    holder       text,
    owner        text,                   -- host:pid of the serving process
    lease_until  timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS followers_stream_idx ON mcp.followers (stream_id);
CREATE INDEX IF NOT EXISTS followers_session_idx ON mcp.followers (session_id);
CREATE INDEX IF NOT EXISTS followers_holder_idx ON mcp.followers (holder);
CREATE INDEX IF NOT EXISTS followers_lease_idx ON mcp.followers (lease_until);

-- Stream slots: a session's (scope 'session:<id>') or a holder's ('holder:<holder>') streams
-- and followers each occupy one of its slots 1..limit (mcp.slots_claim, in mcp.admit_stream);
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

-- ---- the era bridge (MCPEraBridge; sql/migrations/007-era-bridge.sql says what each is) ----
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
-- (sql/migrations/008-bridge-tool-headers.sql)
ALTER TABLE mcp.bridge_sessions ADD COLUMN tool_headers jsonb;
ALTER TABLE mcp.bridge_sessions ADD COLUMN tools_fetched_at timestamptz;
-- (sql/migrations/009-foreign-key-indexes.sql) every foreign key has an index on its referencing
-- columns: a deleted stream or session must not scan a whole table.
CREATE INDEX IF NOT EXISTS streams_bridged_to_idx ON mcp.streams (bridged_to)
    WHERE bridged_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS bridge_rounds_session_idx ON mcp.bridge_rounds (session_id);
-- (sql/migrations/010-console.sql) a session by its tag or the console's handle (prefixes of
-- md5(id); the id itself is a bearer token, never shown), and sessions newest first.
CREATE INDEX IF NOT EXISTS sessions_digest_idx ON mcp.sessions (md5(id) text_pattern_ops);
CREATE INDEX IF NOT EXISTS sessions_created_idx ON mcp.sessions (created_at);
-- (sql/migrations/011-trace-id.sql) the W3C trace id (traceparent, 32 hex) of the request that
-- began a session (its initialize) and of the request each stream answers: a call can be
-- followed from the client through the gateway to the backend, which gets the same trace id.
ALTER TABLE mcp.sessions ADD COLUMN trace_id text;
ALTER TABLE mcp.streams  ADD COLUMN trace_id text;
-- (sql/migrations/012-backend-eras.sql) the protocol eras each backend serves (MCPBackend as
-- written), learned by a server/discover probe where MCPBackendProtocols does not say them:
-- every process and host uses the row until expires_at, then probes again.
CREATE TABLE mcp.backend_eras (
    backend_url text        PRIMARY KEY,
    protocols   text        NOT NULL,
    learned_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
-- (sql/migrations/013-federation.sql) federation (<MCPMember> sections): the backend session the
-- gateway holds with each member of a federated session, so any process and host routes its
-- messages; a member that failed is tried again when first needed. streams.member: which member
-- answered (NULL: the only backend, or the gateway's own merged answer).
CREATE TABLE mcp.session_members (
    session_id         text        NOT NULL REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    member             text        NOT NULL,
    backend_url        text        NOT NULL,
    backend_session_id text,
    protocol_version   text,
    state              text        NOT NULL CHECK (state IN ('open', 'failed')),
    error              text,
    initialize_result  text,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, member)
);
ALTER TABLE mcp.streams ADD COLUMN member text;

\ir functions.sql
-- Partitions and retention; the partitions of today and the next days.
\ir retention.sql
ALTER TABLE mcp.streams ALTER COLUMN id SET DEFAULT mcp.stream_id_new();
SELECT mcp.partition_create(d::date)
  FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                       (now() AT TIME ZONE 'UTC')::date + 3, '1 day') AS d;

COMMIT;

-- The audit views.
\ir audit.sql
