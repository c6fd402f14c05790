-- mod_mcp audit views over mcp.events (loaded by schema.sql; safe to re-run).
--
--   Which tools each user called, with arguments, outcome and duration:
--     SELECT "user", tool, arguments, outcome, duration FROM mcp.tool_calls ORDER BY started_at;
--   The full transcript of one session, in order:
--     SELECT * FROM mcp.session_transcript WHERE session_id = '...' ORDER BY event_id;
--
-- The views read the jsonb copies (mcp.audit_jsonb: where jsonb cannot hold a message, \u0000
-- and lone surrogates read as U+FFFD there), so they work on every row; the *_text columns
-- are exactly what crossed the wire.

-- One row per tools/call request (batched calls of 2025-03-26 are not broken out), of both eras:
-- a 2026-07-28 call has no session (session_id NULL) and outcome 'cancelled' when its client
-- closed the response first. A call served by the era bridge is counted once, as its client
-- sent it (the client's stream); the request the gateway made of the backend for it on a pooled
-- session (mcp.bridge_sessions) is that row's backend_stream_id, not a row of its own. A bridged
-- call answered with an InputRequiredResult has outcome 'input required'; its retry (a new
-- request) is a row of its own.
-- outcome: ok | tool error (result.isError) | error (JSON-RPC error) | input required | running
--          | cancelled | no response
CREATE OR REPLACE VIEW mcp.tool_calls AS
SELECT s.id                                   AS stream_id,
       s.session_id,
       coalesce(ses.principal, s.principal)   AS "user",
       req.message -> 'params' ->> 'name'     AS tool,
       req.message -> 'params' -> 'arguments' AS arguments,
       CASE
           WHEN resp.message_text IS NULL AND s.status = 'open' THEN 'running'
           WHEN resp.message_text IS NULL AND s.status = 'cancelled' THEN 'cancelled'
           WHEN resp.message_text IS NULL THEN 'no response'
           WHEN resp.message ? 'error' THEN 'error'
           WHEN resp.message -> 'result' -> 'isError' = 'true'::jsonb THEN 'tool error'
           WHEN resp.message -> 'result' ->> 'resultType' = 'input_required' THEN 'input required'
           ELSE 'ok'
       END                                    AS outcome,
       resp.message -> 'result'               AS result,
       resp.message -> 'error'                AS error,
       s.created_at                           AS started_at,
       coalesce(resp.created_at, s.completed_at) AS finished_at,
       coalesce(resp.created_at, s.completed_at) - s.created_at AS duration,
       req.message_text                       AS request_text,
       resp.message_text                      AS response_text,
       s.bridged_to                           AS backend_stream_id,
       s.trace_id,                            -- the W3C trace id the backend got too
       s.member                               -- the <MCPMember> that answered (NULL: the
                                              -- Location's only backend)
  FROM mcp.streams s
  LEFT JOIN mcp.sessions ses ON ses.id = s.session_id   -- none for 2026-07-28 requests
  JOIN mcp.events req ON req.stream_id = s.id AND req.seq = 0 AND req.direction = 'in'
  LEFT JOIN LATERAL (
        SELECT e.message, e.message_text, e.created_at
          FROM mcp.events e
         WHERE e.stream_id = s.id AND e.direction = 'out' AND e.kind = 'message'
           AND e.message -> 'id' = s.request_id
           AND (e.message ? 'result' OR e.message ? 'error')
         ORDER BY e.seq
         LIMIT 1) resp ON true
 WHERE s.kind = 'request' AND s.method = 'tools/call' AND jsonb_typeof(s.request_id) <> 'array'
   AND NOT EXISTS (SELECT 1 FROM mcp.bridge_sessions b WHERE b.session_id = s.session_id);

-- Every message of every session, both directions, with its stream position and SSE event id.
CREATE OR REPLACE VIEW mcp.session_transcript AS
SELECT e.session_id,
       e.id                                  AS event_id,
       e.created_at,
       e.principal                           AS "user",
       e.direction,
       e.kind,
       e.stream_id,
       e.seq,
       CASE WHEN e.stream_id IS NOT NULL AND e.direction = 'out'
            THEN e.stream_id || '-' || e.seq END AS sse_event_id,
       e.message ->> 'method'                AS method,
       e.message -> 'id'                     AS jsonrpc_id,
       e.message,
       e.message_text,
       st.trace_id                           -- the W3C trace id of the stream's request (NULL
                                             -- without a stream: mcp.sessions.trace_id is
                                             -- initialize's)
  FROM mcp.events e
  LEFT JOIN mcp.streams st ON st.id = e.stream_id;
