-- Schema version 1 (06100ae) -> 2: messages and request ids kept as the exact text that crossed
-- the wire (message_text, request_id_text; jsonb copies through mcp.audit_jsonb), the columns
-- and table of the admission limits (holder, mcp.followers), and mcp.schema_version.
-- Applied by sql/upgrade.sql, which then loads the functions and views.

BEGIN;

CREATE TABLE mcp.schema_version (
    version     integer     PRIMARY KEY,
    description text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO mcp.schema_version (version, description) VALUES
    (1, 'sessions, streams, events, audit views');

-- Rows stored before kept only the jsonb: its text is the best copy there is.
ALTER TABLE mcp.streams ADD COLUMN request_id_text text;
UPDATE mcp.streams SET request_id_text = request_id::text WHERE request_id IS NOT NULL;
ALTER TABLE mcp.events ADD COLUMN message_text text;
UPDATE mcp.events SET message_text = message::text WHERE message IS NOT NULL;
ALTER TABLE mcp.events DROP CONSTRAINT events_check1;
ALTER TABLE mcp.events ADD CONSTRAINT events_check1 CHECK ((kind = 'priming') = (message_text IS NULL));
ALTER TABLE mcp.events ADD CONSTRAINT events_check2 CHECK (message IS NULL OR message_text IS NOT NULL);

ALTER TABLE mcp.sessions ADD COLUMN holder text;
ALTER TABLE mcp.streams  ADD COLUMN holder text;
CREATE INDEX sessions_holder_live_idx ON mcp.sessions (holder) WHERE terminated_at IS NULL;
CREATE INDEX streams_open_session_idx ON mcp.streams (session_id) WHERE status = 'open';
CREATE INDEX streams_open_holder_idx ON mcp.streams (holder) WHERE status = 'open';

CREATE TABLE mcp.followers (
    id           bigserial   PRIMARY KEY,
    stream_id    bigint      NOT NULL REFERENCES mcp.streams (id) ON DELETE CASCADE,
    session_id   text        NOT NULL REFERENCES mcp.sessions (id) ON DELETE CASCADE,
    holder       text,
    owner        text,
    lease_until  timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX followers_stream_idx ON mcp.followers (stream_id);
CREATE INDEX followers_session_idx ON mcp.followers (session_id);
CREATE INDEX followers_holder_idx ON mcp.followers (holder);
CREATE INDEX followers_lease_idx ON mcp.followers (lease_until);

INSERT INTO mcp.schema_version (version, description) VALUES
    (2, 'byte-exact message texts, admission limits, followers');

COMMIT;
