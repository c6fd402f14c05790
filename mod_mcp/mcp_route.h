/* mcp_route — where the messages of one stdio server process go (docs/stdio.md, "The
 * supervisor's HTTP API"), and the bookkeeping of the request ids in flight in its session.
 *
 * An *exchange* is an HTTP request of the session that waits for messages: the initialize POST
 * (answered with one JSON body), a POST whose body holds requests (an SSE stream that ends when
 * each of them is answered) or the session's GET stream. Each is opened with the ids of the
 * requests it carries and the progress tokens of those requests (params._meta.progressToken).
 * A message the process writes goes:
 *   1. when it is a response: to the exchange that carries its id;
 *   2. when it carries params.progressToken: to the exchange whose request gave that token;
 *   3. otherwise (server requests, log messages, list_changed, an id no exchange carries): to
 *      the GET stream when one is open, else to the oldest open POST stream, else into a
 *      bounded queue that the next exchange to open (not an initialize) takes first.
 * Ids and tokens are compared as canonical JSON text (json-c's plain serialisation of the
 * value), so 7 and "7" differ, as JSON-RPC has them.
 *
 * An exchange closed before all its ids were answered (its client went away) leaves them
 * *orphaned*: still in flight (a new request with one of them is refused), their answers
 * routed as in 3. When the process dies, mcp_route_fail_all names every unanswered id of every
 * open exchange, for the caller to answer each with an error.
 *
 * Owners are the caller's (its connections): opaque pointers here. Work per message is linear
 * in the session's open exchanges and unanswered ids, which stay few: no session-wide table is
 * walked. Pure code: libc only.
 */
#ifndef MCP_ROUTE_H
#define MCP_ROUTE_H

#include <stddef.h>

typedef struct mcp_route_t mcp_route_t;
typedef struct mcp_route_exchange_t mcp_route_exchange_t;

/* Kinds of exchange. */
#define MCP_ROUTE_INIT 0   /* the initialize POST: takes its answer only, never queued ones */
#define MCP_ROUTE_POST 1   /* a POST stream */
#define MCP_ROUTE_GET  2   /* the session's GET stream (no ids; at most one open) */

/* Results. */
#define MCP_ROUTE_OK        0
#define MCP_ROUTE_DUPLICATE (-1)  /* an id is in flight already, or twice in this exchange */
#define MCP_ROUTE_GET_OPEN  (-2)  /* a GET stream is open already */
#define MCP_ROUTE_NOMEM     (-3)

/* A route whose queue holds at most queue_max_messages messages and queue_max_bytes bytes of
 * them. NULL when out of memory. */
mcp_route_t *mcp_route_create(size_t queue_max_messages, size_t queue_max_bytes);
/* Frees the route, its exchanges and its queue (the owners are the caller's). */
void mcp_route_destroy(mcp_route_t *r);

/* Opens an exchange for owner with n_ids request ids and n_tokens progress tokens (canonical
 * JSON texts, copied). MCP_ROUTE_DUPLICATE sets *dup to the offending id (one of ids, so valid
 * as long as the caller's array is); nothing is opened on an error. */
int mcp_route_open(mcp_route_t *r, int kind, void *owner, const char *const *ids, size_t n_ids,
                   const char *const *tokens, size_t n_tokens, mcp_route_exchange_t **out,
                   const char **dup);

/* Closes an exchange: its unanswered ids become orphans, its tokens are forgotten. */
void mcp_route_close(mcp_route_t *r, mcp_route_exchange_t *x);

/* Where a message went. */
typedef struct mcp_route_dest_t {
    mcp_route_exchange_t *exchange;  /* NULL: queued (or dropped, see mcp_route_dropped)     */
    void                 *owner;     /* the exchange's owner                                  */
    int                   answered;  /* it answered one of the exchange's ids                 */
    int                   last;      /* ... and that was the exchange's last unanswered id:
                                        the caller ends the exchange and closes it            */
} mcp_route_dest_t;

/* Routes a message of len bytes at msg that the process wrote. id: its id's canonical text when
 * it is a response (result or error, no method), else NULL; token: params.progressToken's
 * canonical text when it has one, else NULL. A queued message is copied. Returns MCP_ROUTE_OK
 * or MCP_ROUTE_NOMEM. */
int mcp_route_message(mcp_route_t *r, const char *id, const char *token, const char *msg,
                      size_t len, mcp_route_dest_t *dest);

/* The client cancelled request id (notifications/cancelled): a server does not answer a
 * cancelled request, so its exchange stops waiting for it, as if it were answered (dest says
 * which exchange, and whether that was its last id: the caller ends it). An id not in flight,
 * or an orphan (forgotten), leaves dest->exchange NULL. A response that comes all the same then
 * goes where messages for nobody go. */
void mcp_route_cancel(mcp_route_t *r, const char *id, mcp_route_dest_t *dest);

/* The oldest queued message (malloc'd, NUL-terminated; the caller frees it) and its length;
 * NULL when the queue is empty. The caller drains the queue into each exchange it opens (but an
 * initialize's). */
char *mcp_route_queue_pop(mcp_route_t *r, size_t *len);

/* Messages dropped from the queue's head to keep it in its bounds since the last call (the
 * caller logs a warning), and resets the count. */
size_t mcp_route_dropped(mcp_route_t *r);

/* The process died: fn is called with the owner and id of each unanswered id of each open
 * exchange, in the order the exchanges were opened; then every id and token is forgotten (the
 * exchanges stay open: the caller ends and closes them) and the queue is emptied. */
typedef void mcp_route_fail_fn(void *baton, void *owner, mcp_route_exchange_t *x, const char *id);
void mcp_route_fail_all(mcp_route_t *r, mcp_route_fail_fn *fn, void *baton);

/* The owner of an exchange, and its kind. */
void *mcp_route_owner(const mcp_route_exchange_t *x);
int mcp_route_kind(const mcp_route_exchange_t *x);

/* Open exchanges (of any kind), unanswered ids (orphans included), queued messages: what the
 * idle timeout and the status look at. */
size_t mcp_route_exchanges(const mcp_route_t *r);
size_t mcp_route_in_flight(const mcp_route_t *r);
size_t mcp_route_queued(const mcp_route_t *r);

#endif
