/* mod_mcp_replay — resuming a stream: GET with Last-Event-ID.
 *
 * The event is looked up in PostgreSQL and must belong to a stream of the requesting session
 * (and so of the same user); the stored events after it are replayed in order, and while the
 * stream is still open the client follows it live until it completes. Everything is read from
 * the table, never from process memory: a wake-up only says "read again". A follower subscribes
 * before it reads, so an event stored while it reads is never missed.
 */
#ifndef MOD_MCP_REPLAY_H
#define MOD_MCP_REPLAY_H

#include "mod_mcp_request.h"

int mcp_replay(mcp_req_t *q, const char *last_event_id);

/* What every follower does, threaded or parked (mod_mcp_park), all in p: */

/* The stream's owner died (its lease ran out: state): finish it (unless another process or
 * host just did) with a terminal error for its request, which the next read delivers. */
void mcp_follower_owner_gone(mcp_req_t *q, apr_pool_t *p, apr_int64_t stream_id,
                             const mcp_store_stream_t *state);

/* Renews the lease of follower row follower_id (0: none), which keeps it counted against
 * MCPMaxFollowersPerStream and the stream limits. */
void mcp_follower_renew(mcp_req_t *q, apr_pool_t *p, apr_int64_t stream_id,
                        apr_int64_t follower_id);

/* The follower ended: its row no longer counts (0: none). */
void mcp_follower_release(mcp_req_t *q, apr_pool_t *p, apr_int64_t stream_id,
                          apr_int64_t follower_id);

#endif
