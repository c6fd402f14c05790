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

#endif
