/* mod_mcp_relay — relaying the backend's answers through stored streams.
 *
 * A POST that carries requests is recorded before it is dispatched: one statement stores the
 * inbound message, creates the stream and stores its priming row; only then does the request go
 * to the backend. Whatever the backend answers (an SSE stream or one JSON body) is stored message
 * by message and relayed through mod_mcp_stream's bounded queue. The client's disconnect is not a
 * cancellation: relaying and storing go on until the response is in or MCPStreamTimeout passes.
 *
 * How the client is answered:
 *   - sessions at 2025-11-25 or later: always SSE. The priming event (id, retry:, empty data) is
 *     sent before the backend is asked, so every answer, JSON or SSE, is resumable.
 *   - older sessions: the backend's choice. SSE is relayed as SSE (events with ids, resumable,
 *     no priming: those clients cannot parse an empty event); a JSON answer is stored and sent
 *     as JSON.
 */
#ifndef MOD_MCP_RELAY_H
#define MOD_MCP_RELAY_H

#include "mod_mcp_request.h"

/* POST whose body holds at least one request. When q->session is not set yet, the session is
 * checked, touched and the stream opened in one statement (one round trip for all of it). */
int mcp_relay_requests(mcp_req_t *q);

/* GET without Last-Event-ID: the session's one standalone stream, relaying the backend's GET
 * stream; 409 when the session has one open already, 405 when the backend offers none. */
int mcp_relay_standalone(mcp_req_t *q);

/* The same after a resumption (mod_mcp_replay) replayed a standalone stream that had ended
 * (a graceful restart, MCPStreamCloseAfter, or the client going cut it): a new standalone
 * stream goes on, live, on the response already begun (its priming event gives the client its
 * next Last-Event-ID). When that cannot be (the session ended, the backend refuses), the
 * response ends and the client resumes again later. */
int mcp_relay_standalone_resumed(mcp_req_t *q);

#endif
