-- Schema version 2 -> 3: stream ids that carry their start time, mcp.events partitioned by the
-- day of its stream's start (sql/retention.sql). mcp.events is rebuilt: its rows are copied
-- once (into mcp.events_default: the streams they belong to are older than every partition),
-- which takes a while on a big table (about a minute per few million rows) and holds an
-- exclusive lock on it meanwhile: stop the gateways first.
-- Applied by sql/upgrade.sql, which then loads the functions and views.

BEGIN;

LOCK TABLE mcp.sessions, mcp.streams, mcp.events IN ACCESS EXCLUSIVE MODE;

-- The views read mcp.events: upgrade.sql makes them again.
DROP VIEW IF EXISTS mcp.tool_calls;
DROP VIEW IF EXISTS mcp.session_transcript;

ALTER TABLE mcp.events RENAME TO events_v2;
ALTER SEQUENCE mcp.events_id_seq OWNED BY NONE;
CREATE TABLE mcp.events (
    id          bigint      NOT NULL DEFAULT nextval('mcp.events_id_seq'),
    session_id  text        NOT NULL
                CONSTRAINT events_session_id_fkey REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    stream_id   bigint
                CONSTRAINT events_stream_id_fkey REFERENCES mcp.streams (id) ON DELETE CASCADE,
    seq         bigint,
    direction   text        NOT NULL CONSTRAINT events_direction_check CHECK (direction IN ('in', 'out')),
    kind        text        NOT NULL CONSTRAINT events_kind_check CHECK (kind IN ('priming', 'message')),
    message_text text,
    message     jsonb,
    principal   text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- The names a fresh install gives them (the old table still holds those names here).
    CONSTRAINT events_check CHECK ((stream_id IS NULL) = (seq IS NULL)),
    CONSTRAINT events_check1 CHECK ((kind = 'priming') = (message_text IS NULL)),
    CONSTRAINT events_check2 CHECK (message IS NULL OR message_text IS NOT NULL)
) PARTITION BY RANGE (stream_id);
ALTER SEQUENCE mcp.events_id_seq OWNED BY mcp.events.id;
CREATE TABLE mcp.events_default PARTITION OF mcp.events DEFAULT;
INSERT INTO mcp.events (id, session_id, stream_id, seq, direction, kind, message_text, message,
                        principal, created_at)
SELECT id, session_id, stream_id, seq, direction, kind, message_text, message, principal,
       created_at
  FROM mcp.events_v2 ORDER BY id;
DROP TABLE mcp.events_v2;
CREATE UNIQUE INDEX events_stream_seq_idx ON mcp.events (stream_id, seq);
CREATE INDEX events_session_idx ON mcp.events (session_id, id);

\ir ../retention.sql
ALTER TABLE mcp.streams ALTER COLUMN id SET DEFAULT mcp.stream_id_new();
SELECT mcp.partition_create(d::date)
  FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                       (now() AT TIME ZONE 'UTC')::date + 3, '1 day') AS d;

INSERT INTO mcp.schema_version (version, description) VALUES
    (3, 'mcp.events partitioned by day of the stream''s start; retention (mcp.maintain)');

COMMIT;
