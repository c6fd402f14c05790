/* mcp_store_shim — the era shim's statements (mcp_shim, mod_mcp_shim), on the existing tables.
 *
 * A shim session is an ordinary mcp.sessions row without a backend session id. The server->
 * client requests of an input-required round are outbound events of the request's stream
 * (minted ids, mcp_shim.h); the client's answers are inbound events of no stream, like any
 * response a client POSTs. A request is pending while its stream is open, the request is
 * stored on it, and no answer with its id is stored yet. Wake-ups go through the channel the
 * listener routes by stream id (pg_notify('mcp_events', stream id)).
 * Pure code: no httpd headers.
 */
#ifndef MCP_STORE_SHIM_H
#define MCP_STORE_SHIM_H

#include "mcp_store.h"

/* The session's client capabilities and clientInfo as JSON texts (NULL when not stored), and
 * the level of its latest logging/setLevel (an inbound event of no stream; NULL: none). */
mcp_store_status_t mcp_store_shim_client(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const char **caps, const char **info,
                                         const char **log_level);

/* OK when the server->client request id is pending on stream_id of session_id; NOT_FOUND when
 * it is not (unknown, answered already, its stream ended, another session's). */
mcp_store_status_t mcp_store_shim_pending(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                          apr_int64_t stream_id, const char *id);

/* Called for each stored answer (its JSON text), oldest first. */
typedef void mcp_store_shim_answer_fn(void *baton, const char *message);

/* The client's stored answers to the ids (a JSON array of strings' text). */
mcp_store_status_t mcp_store_shim_answers(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                          const char *ids_json, mcp_store_shim_answer_fn *fn,
                                          void *baton);

/* Wakes whoever relays (or follows) stream_id, on any process or host. */
mcp_store_status_t mcp_store_shim_wake(mcp_store_t *db, apr_pool_t *p, apr_int64_t stream_id);

/* The client cancelled its request request_id (JSON text) of session_id: its open stream is
 * marked 'cancelled' and its owner woken. *stream_id gets it (0 and NOT_FOUND: no such open
 * stream). */
mcp_store_status_t mcp_store_shim_cancel(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const char *request_id, apr_int64_t *stream_id);

#endif
