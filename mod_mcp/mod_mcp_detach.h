/* mod_mcp_detach — a backend exchange that goes on after the request that began it has ended.
 *
 * Used by the era bridge: a 2026-07-28 call whose 2025 backend asked the client for input is
 * answered with an InputRequiredResult, but the backend's answer to the call is still to come
 * (after the client's retry, on any process or host, has answered the input requests). The
 * backend's stream must be read and stored to its end, and nobody needs the request for that:
 * so its exchange is detached, and the request ends at once. Under HTTP/2 that is what lets a
 * connection hold more pending rounds than mod_http2 processes streams of it at a time (a
 * request that waits keeps its stream's slot and its h2 worker); under HTTP/1.1 the connection
 * stays open for the client's next request.
 *
 * Everything the exchange needs after the request lives in the detached pool (its own allocator;
 * one owner at a time), with a stand-in request: the request's configuration, user, client
 * address and log id, copied, on a stand-in connection with a bucket allocator of its own.
 * Code that stores on the request's behalf or talks to the backend uses the stand-in as it
 * would the request (mcp_detach_req); nothing of the client's request or connection may be
 * reachable from it, and nothing may be written to it (it has no filters).
 *
 * Who owns the detached pool when:
 *
 *   the request thread  from mcp_detach_create; the transfer runs on the process's event loop
 *                       (mcp_loop) and its news are handed to the hooks on this thread
 *                       (mcp_detach_wait);
 *   one loop worker     at a time after mcp_detach_go, until a hook says the exchange is done:
 *                       the hooks run there (news as they come, ticks);
 *   nobody              after that: the pool is destroyed by the worker. A detached exchange
 *                       that was never let go is destroyed with its request.
 *
 * A graceful restart does not end a detached exchange: the process, which the MPM would let go
 * as soon as its connections are over (a detached exchange has none), waits for its detached
 * exchanges before it exits (each is bounded by its transfer's MCPStreamTimeout). A stop ends
 * them (on_stop): their streams' leases then run out and whoever follows them finishes them.
 *
 * Where it is used: the event MPM with mod_mcp's event loop (mod_mcp_park), MCPAsyncStreams On,
 * whatever the client's wire (HTTP/1.x, HTTP/2, TLS); elsewhere mcp_detach_create says no and
 * the caller keeps its thread, as before. mod_status counts detached exchanges
 * (MCPDetachedExchanges).
 */
#ifndef MOD_MCP_DETACH_H
#define MOD_MCP_DETACH_H

#include "mcp_loop.h"
#include "mod_mcp_request.h"

typedef struct mcp_detach_t mcp_detach_t;

/* Per process (child_init, after the lease keeper started: it must outlive the wait at exit). */
void mcp_detach_child_init(apr_pool_t *pchild, server_rec *s);

/* The MPM's word that this process stops (its child_stopping hook): graceful or not. */
void mcp_detach_child_stopping(apr_pool_t *pchild, int graceful);

/* What runs the exchange; on the request thread, then on a loop worker. A non-zero return
 * means the exchange is done (the hook finished what it stands for; a transfer still running
 * is cut). */
typedef struct mcp_detach_hooks_t {
    int  (*on_news)(void *baton, const mcp_loop_news_t *news);
    int  (*on_tick)(void *baton);                  /* every tick                            */
    void (*on_stop)(void *baton, const char *why);  /* the process stops (after mcp_detach_go) */
    void  *baton;
    apr_interval_time_t tick;                       /* > 0                                   */
} mcp_detach_hooks_t;

/* A detached pool with a stand-in for q's request, and a held source on the event loop; NULL
 * where exchanges cannot be detached (see above). Destroyed with q's request unless let go. */
mcp_detach_t *mcp_detach_create(mcp_req_t *q);

/* The stand-in request (in the detached pool): r, conf and nothing else set; the caller fills
 * in what its code needs (session, raw). Its r->pool is the detached pool. */
mcp_req_t *mcp_detach_req(mcp_detach_t *d);

/* Starts call on the loop (one transfer at a time; a new one once the last one's end was
 * handed to on_news). The call's strings and body must live in the detached pool. Non-zero,
 * with *err, when it cannot start (the caller performs the exchange itself). */
int mcp_detach_start(mcp_detach_t *d, const mcp_backend_call_t *call,
                     const mcp_detach_hooks_t *hooks, const char **err);

/* On the request thread: hands the news to the hooks, and ticks them, until a hook says done
 * (returns 1) or detachable(baton) says the rest may go on without the request (returns 0).
 * -1 when the process stops meanwhile (the transfer is cut; on_stop is not called). */
int mcp_detach_wait(mcp_detach_t *d, int (*detachable)(void *baton));

/* The rest runs on the loop's workers: after this the request thread must not touch anything
 * in the detached pool. */
void mcp_detach_go(mcp_detach_t *d);

#endif
