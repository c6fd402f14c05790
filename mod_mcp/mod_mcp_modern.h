/* mod_mcp_modern — the 2026-07-28 (stateless) request path.
 *
 * mod_mcp_handler routes a request here (mcp_era_route) after the checks both eras share
 * (Origin/Host, Accept, Content-Type, body size, JSON). A POST carrying the modern _meta claim
 * is validated (mcp_era_check: _meta, MCP-Protocol-Version, Mcp-Method, Mcp-Name; exactly one
 * request or notification), checked against the revisions the backend serves
 * (MCPBackendProtocols, or learned: mcp_eras_backend; otherwise the era bridge, or -32022 with
 * the supported list), recorded as a stream of its own with no session (inbound message at
 * seq 0), and forwarded with its MCP headers
 * (Mcp-Param-* untouched). The answer, JSON or SSE, is stored message by message and relayed;
 * SSE events carry no ids (no resumption in this revision).
 *
 * Disconnect is cancellation: when the client closes its response (mod_mcp_stream's client-gone
 * state: a failed write, c->aborted, or the connection's close noticed at a tick), the backend
 * request is closed at once, nothing more is relayed, and the stream is stored as 'cancelled'.
 * subscriptions/listen is such a stream that lasts (no MCPStreamTimeout), counted against
 * MCPMaxStreamsPerPrincipal. InputRequiredResult and requestState pass through untouched.
 */
#ifndef MOD_MCP_MODERN_H
#define MOD_MCP_MODERN_H

#include "mod_mcp_request.h"

/* A POST routed MCP_ROUTE_MODERN (its body read and parsed into q). Returns DONE. */
int mcp_modern_post(mcp_req_t *q);

/* The checked request (q->session its stand-in, q->conf its backend's) forwarded to a backend
 * that serves version: a notification stored, forwarded, 202; a request on a stream of its own,
 * its answer relayed. A federated endpoint's routed call comes here with its member's conf (and
 * q->member: the answer is rewritten into the client's names). Returns DONE (or SUSPENDED: a
 * parked answer). */
int mcp_modern_forward(mcp_req_t *q, const char *version);

/* A POST routed MCP_ROUTE_NO_CLAIM: 400, -32602. Returns DONE. */
int mcp_modern_no_claim(mcp_req_t *q);

/* GET or DELETE routed MCP_ROUTE_NOT_ALLOWED: 405 with Allow: POST. Returns DONE. */
int mcp_modern_not_allowed(mcp_req_t *q);

#endif
