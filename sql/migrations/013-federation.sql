-- Schema version 12 -> 13: federation (<MCPMember> sections: several backends behind one
-- endpoint). One row per member of a federated session: the backend session the gateway holds
-- with that member (opened at initialize, or when first needed after a failure), so any process
-- and host routes the session's messages to its members. mcp.streams.member says which member
-- answered a stream (NULL: the Location's only backend, or the gateway itself for a merged
-- answer). Stop the gateways first (README, Upgrading).

BEGIN;
CREATE TABLE IF NOT EXISTS mcp.session_members (
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
ALTER TABLE mcp.streams ADD COLUMN IF NOT EXISTS member text;
INSERT INTO mcp.schema_version (version, description) VALUES
    (13, 'federation: each federated session''s member sessions (mcp.session_members), mcp.streams.member');
COMMIT;
