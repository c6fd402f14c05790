/* mod_mcp_bridge — the era bridge: a 2026-07-28 (stateless) client served through a backend
 * that serves the 2025 era only (MCPEraBridge On, MCPBackendProtocols, or what mod_mcp_eras
 * learned of the backend, without 2026-07-28).
 *
 * mod_mcp_modern hands such a request here after its checks. The translations are mcp_bridge's;
 * the state is PostgreSQL's (mcp_store_bridge):
 *
 *   server/discover  answered from the backend's InitializeResult, recorded per backend when a
 *                    pooled session is initialized (one is initialized when none was yet).
 *   pooled sessions  keyed by principal (r->user or none) + backend + canonical client
 *                    capabilities; initialized on the client's behalf (2025-11-25, its
 *                    clientInfo and capabilities) with notifications/initialized; each is an
 *                    mcp.sessions row, so the sweep expires it when idle (MCPSessionIdleTimeout)
 *                    and DELETEs it upstream. A backend 404 for one: it is marked terminated,
 *                    a new one initialized, the request retried once.
 *   a call           two streams: the client's (stateless: the message as received, what the
 *                    client was sent) and the backend's, a request stream of the pooled
 *                    session (the request as sent upstream with the gateway's backend-side id,
 *                    which is the client stream's id, then the backend's messages as received),
 *                    linked by mcp.streams.bridged_to.
 *   rounds           the backend's sampling/elicitation/roots requests on the call's stream end
 *                    the client's response with an InputRequiredResult. The round cut: the
 *                    requests that came in one piece of the backend's SSE answer (one read: the
 *                    backend's one write) are one round, keyed by their own JSON-RPC ids; a
 *                    round split over two reads costs one more round, never an answer (the
 *                    follower finds the rest stored after the round's position). One that needs
 *                    a capability the request's clientCapabilities lack ends the call instead:
 *                    -32021 (400, data.requiredCapabilities), notifications/cancelled upstream.
 *                    The requestState is a
 *                    random handle (192 bits) of a mcp.bridge_rounds row; this process goes on
 *                    reading and storing the backend's stream. The retry, on any process or
 *                    host, claims the row once (principal, request digest, expiry), posts the
 *                    answers upstream as JSON-RPC responses, and follows the backend stream
 *                    from the round's position (router wake-ups, NOTIFY) to the response or the
 *                    next round. A round not claimed within MCPEraBridgeInputTimeout: the
 *                    backend call is cancelled (notifications/cancelled) and its stream ended.
 *   the response     JSON until the first message is relayed (so a lone response, -32601 as 404,
 *                    or a -32021 keeps its own HTTP status), SSE from then on; a round always
 *                    ends an SSE response (the relay reads on after the client's response ended).
 *   ping             a backend's ping on the call's stream is answered by the gateway (stored
 *                    as an inbound event of the pooled session), never shown to the client.
 *   cancellation     the client closing its response: notifications/cancelled upstream for
 *                    the backend-side id, both streams stored 'cancelled'.
 */
#ifndef MOD_MCP_BRIDGE_H
#define MOD_MCP_BRIDGE_H

#include "mod_mcp_request.h"

/* A checked modern request (q->session set up as a stateless one) for a 2025-era backend.
 * Returns DONE. */
int mcp_bridge_post(mcp_req_t *q, const char *version);

/* For a caller that makes its own exchanges through the bridge (a federated endpoint's lists and
 * server/discover, its 2025-era members asked for a 2026-07-28 client): q a checked modern
 * request whose conf names the backend. */

/* The pooled session of q's principal, backend and clientCapabilities: found, or initialized
 * now (always, when fresh). NULL with *why. */
mcp_store_session_t *mcp_bridge_pooled(mcp_req_t *q, int fresh, const char **why);

/* Pooled session s, which the backend no longer knows (404), ends: the next mcp_bridge_pooled
 * initializes a new one. */
void mcp_bridge_pooled_lost(mcp_req_t *q, const mcp_store_session_t *s);

/* The backend's InitializeResult (JSON text) as recorded when a pooled session was initialized
 * (one is, now, when none was yet). NULL with *why. */
const char *mcp_bridge_init_result(mcp_req_t *q, const char **why);

#endif
