/* mod_mcp_federation — a federated endpoint's requests: several backend MCP servers (its
 * <MCPMember> sections, mod_mcp_members) behind one <Location>, served as one MCP server.
 *
 * The gateway's session holds one backend session per member (mcp.session_members, so any
 * process and host serves it): all of them are opened at initialize, at once; a member that
 * fails there is left out (logged, and told the client in a notifications/message) and opened
 * again when next needed. What each request becomes:
 *
 *   initialize           every member's, at once; one InitializeResult (mcp_fed_merge_initialize)
 *   tools/call ...       the member that the name's prefix (the URI's scheme prefix) names, the
 *                        request rewritten to the member's own names; its answer streamed through
 *                        the relay like a single backend's (mcp_fed_outbound on every message)
 *   the four lists       the members (the cursor's), at once; one merged page
 *   ping, setLevel       every open member, at once; one empty result
 *   notifications        every open member; the client's answers to a member's requests (and
 *                        cancellations of them) go to that member, with its own id
 *   GET                  one stream of every member's standalone stream: parked where streams
 *                        can be (mod_mcp_park: a backend half per member, its GET in a transfer
 *                        slot of the stream's loop source, all storing on the one stream), else
 *                        held by its thread
 *   DELETE               every member's session ends
 *
 * Store before write, resumption with Last-Event-ID, the audit and the limits are the gateway's
 * as for a single backend: every answer goes through a stored stream.
 *
 * A 2026-07-28 client (mcp_federation_modern) has no session: each member is asked in its own
 * era, as a single-backend Location asks its backend (its eras learned per member: a 2026-07-28
 * member directly, a 2025-era one through the era bridge's pooled sessions, per member):
 *
 *   server/discover      each member's (its discover, or the InitializeResult the bridge
 *                        recorded), merged as initialize is; the gateway's serverInfo
 *   the four lists       the cursor's members, at once, each in its era; one merged page,
 *                        stamped (resultType, ttlMs 0, cacheScope "private")
 *   tools/call ...       routed as above, Mcp-Name rewritten too, then the single-backend
 *                        modern path (mcp_modern_forward, or the bridge: rounds, their
 *                        retries routed by the same name) with the answer in the client's names
 *   notifications        stored, 202 (nothing a 2026-07-28 client notifies is a member's)
 *   subscriptions/listen each member's part of the filter (its resource URIs, in its own
 *                        names) in its era — a 2026-07-28 member's own listen, a 2025-era
 *                        member's pooled session's GET stream (URIs subscribed there) — all on
 *                        one stream, parked (a transfer slot per member); acknowledged once,
 *                        with what the members' merged capabilities honour; every notification
 *                        tagged with the client's listen id, in the client's names
 */
#ifndef MOD_MCP_FEDERATION_H
#define MOD_MCP_FEDERATION_H

#include "mod_mcp_request.h"

/* initialize on a federated endpoint: session->id is the new session's id (nothing else set);
 * request_text what the client sent. Answers; returns DONE. */
int mcp_federation_initialize(mcp_req_t *q, mcp_store_session_t *session,
                              const char *request_text);

/* A POST of a federated session that is not initialize (a request, or notifications and
 * responses). Answers; returns DONE (or SUSPENDED: a parked answer, as mcp_relay_requests). */
int mcp_federation_post(mcp_req_t *q);

/* The standalone GET stream of a federated session (q->session loaded): the members' GET
 * streams, merged. resumed: as mcp_relay_standalone_resumed. */
int mcp_federation_listen(mcp_req_t *q, int resumed);

/* A checked 2026-07-28 request (q->session its stand-in) of revision version. Answers; returns
 * DONE (or SUSPENDED: a routed call's parked answer). */
int mcp_federation_modern(mcp_req_t *q, const char *version);

/* Tells every open member that its session ended (DELETE), best effort (logged). */
void mcp_federation_end(mcp_req_t *q, const char *why);

/* The relay's hook for a message a member sent the client (obj, parsed from json): rewritten
 * for the client (mcp_fed_outbound). Non-zero, with *json and *len the new text (in p), when it
 * changed. */
int mcp_federation_outbound(mcp_req_t *q, apr_pool_t *p, json_object *obj, const char **json,
                            apr_size_t *len);

/* The relay's hook once a routed request's stream is open (q->member->row read with it): NULL
 * when the member's session is open (opened now, if it was not); else why it could not be. */
const char *mcp_federation_member_ready(mcp_req_t *q);

/* The relay's hook for a member that no longer knows its session (404 with a JSON-RPC error):
 * the member is marked failed, to be opened again at the next request; the gateway's session
 * goes on. Returns the message for the client. */
const char *mcp_federation_member_lost(mcp_req_t *q);

#endif
