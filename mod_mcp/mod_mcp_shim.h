/* mod_mcp_shim — the era shim: 2025-era clients served in front of a 2026-only backend.
 *
 * A <Location> whose backend serves 2026-07-28 and no 2025 revision (MCPBackendProtocols says so,
 * or mod_mcp_eras learned it) has a backend that knows neither initialize nor sessions.
 * mod_mcp_handler sends that Location's 2025-era traffic here (mcp_eras_shimmed); the
 * translations themselves are mcp_shim's:
 *   - initialize: answered from the backend's server/discover (cached per backend and process
 *     for its ttlMs, 60 s when it gives none); the session is the gateway's (mcp.sessions, no
 *     backend session id), so every process and host serves it;
 *   - a request: recorded like any (stream, inbound row, priming row), then sent statelessly,
 *     stamped from the stored session; the answer relayed on the client's POST stream as SSE
 *     (stored before written, event ids, resumable with Last-Event-ID anywhere), cleaned of the
 *     revision's own fields. The stamped requests the backend got, and its InputRequiredResults,
 *     are stored on the stream too as 'in' rows (seq > 1; never replayed): the audit shows both
 *     sides;
 *   - an InputRequiredResult: its inputRequests go to the client as server->client requests on
 *     the same stream; the client's answers, POSTed to any process (mcp_shim_post), are stored
 *     and the owning process woken (pg_notify on the stream's channel); when the round is
 *     complete the request is retried (new id, inputResponses, requestState); more than
 *     MCPShimMaxRounds rounds end the call with a JSON-RPC error;
 *   - ping: answered by the gateway; logging/setLevel, resources/(un)subscribe: -32601 (the
 *     revision has none); notifications/cancelled: the request's stream is marked cancelled and
 *     its owner closes the backend request; other notifications are stored only;
 *   - GET (no Last-Event-ID): a subscriptions/listen request to the backend; its notifications
 *     relayed, untagged, on the standalone stream; DELETE: the gateway's session ends (the
 *     backend has none).
 */
#ifndef MOD_MCP_SHIM_H
#define MOD_MCP_SHIM_H

#include "mod_mcp_request.h"

/* The backend's answer to server/discover. */
typedef struct mcp_shim_discovered_t {
    json_object *result;      /* the response's result, parsed in r->pool (NULL: none)        */
    const char  *error;       /* a JSON-RPC error answer, as text (NULL: none)                 */
    int          http_status; /* the answer's HTTP status; 0: none (unreachable, timed out,
                               * broken)                                                      */
    const char  *why;         /* when there is no result: what went wrong, for messages        */
} mcp_shim_discovered_t;

/* Asks the backend's server/discover (bounded by timeout; the request stamped as the shim stamps
 * every request), or takes the result from the per-process cache: a result the shim can use
 * (mcp_shim_discover_problem) is kept there, per backend, for its ttlMs (60 s when it gives
 * none, at most an hour). Used by initialize, and by mod_mcp_eras to learn a backend's eras. */
void mcp_shim_discover(mcp_req_t *q, apr_interval_time_t timeout, mcp_shim_discovered_t *out);

/* initialize (the body parsed into q, a single message). Returns DONE. */
int mcp_shim_initialize(mcp_req_t *q);

/* Any other 2025-era POST to such a Location (requests, notifications, the client's answers).
 * Returns DONE. */
int mcp_shim_post(mcp_req_t *q);

/* GET without Last-Event-ID (q->session loaded): the standalone stream from
 * subscriptions/listen. Returns DONE. */
int mcp_shim_listen(mcp_req_t *q);

/* The same after a resumption (mod_mcp_replay) replayed a standalone stream that had ended: a
 * new listen goes on, live, on the response already begun; failures end the response. */
int mcp_shim_listen_resumed(mcp_req_t *q);

#endif
