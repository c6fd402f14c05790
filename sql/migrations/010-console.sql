-- Schema version 9 -> 10: what the operator's console (SetHandler mcp-console) reads by.
--   md5(id): a session's tag (left(md5(id), 8), as the error log names it) and the console's
--     handle for it (left(md5(id), 16)) never show the id, which is a bearer token; the console
--     and an operator's SQL find a session by a prefix of its md5 (LIKE 'tag%': text_pattern_ops).
--   created_at: the console's sessions list, newest first, a page at a time.
-- One entry each per session; nothing per call or per event. Stop the gateways first (README,
-- Upgrading).

BEGIN;
CREATE INDEX IF NOT EXISTS sessions_digest_idx ON mcp.sessions (md5(id) text_pattern_ops);
CREATE INDEX IF NOT EXISTS sessions_created_idx ON mcp.sessions (created_at);
INSERT INTO mcp.schema_version (version, description) VALUES
    (10, 'the console''s indexes: sessions by md5(id) and by created_at');
COMMIT;
