/* mod_mcp_park — SSE streams that wait without a thread: a parked stream is a client connection
 * handed to the process's event loop (mcp_loop) while it only waits.
 *
 * Who owns a parked stream's connection, request and pools when:
 *
 *   the request thread   from mcp_park_create until its handler returns SUSPENDED: it sends the
 *                        SSE headers and what is stored already (the catch-up), maybe starts a
 *                        backend transfer on the loop and waits for its headers
 *                        (mcp_park_wait);
 *   the MPM              from SUSPENDED until its suspend_connection hook (mcp_park_suspended):
 *                        it still touches the connection; nothing of the stream runs;
 *   one loop worker      at a time from then on (mcp_loop's runs): it reads what was stored
 *                        after the cursor and writes it without blocking (what the socket does
 *                        not take waits in the core output filter, and the loop waits for
 *                        writability; nothing more is read meanwhile, so memory stays bounded
 *                        by MCPStreamQueueBytes and a slow client only slows itself); keep-alive
 *                        comments; the client's hang-up (FIN, RST, TLS close); the stream's end;
 *                        a graceful restart or stop (a retry: hint, so that the client resumes
 *                        with Last-Event-ID on a new process); the lease of a follower; the
 *                        backend half's news (below);
 *   nobody               after the worker ended the response: the request is finalized and
 *                        logged (one access log line, when it ends), the connection closed and
 *                        its pool destroyed, as the event MPM would have done.
 *
 * Storage order = wire order, stored before written: a parked stream only ever writes what it
 * read from the table. A wake-up is the router's (mcp_router_subscribe_fn): this process stored
 * something on the stream, or the LISTEN connection says another did.
 *
 * The backend half (the standalone stream's backend GET, mod_mcp_relay): a transfer on the
 * loop's curl multi handle whose news is handed to the half's hooks in the parked stream's runs,
 * so parsing and storing happen on a worker, never in the loop thread. A parked stream may have
 * several halves, one per transfer slot of its source (mcp_park_backend_slot: a federated
 * stream's members' GETs, all storing on the one stream): each run hands each half its own
 * slot's news, one half after the other, never two at once; the stream's halves are over when
 * every one of them is done.
 *
 * Where it is used: MCPAsyncStreams On, the event MPM, an httpd release it was tested on, and a
 * request on the client's own connection (HTTP/1.x, with or without TLS; an HTTP/2 stream is
 * not: mod_http2 has no way to suspend one). Elsewhere streams hold their thread, as before.
 */
#ifndef MOD_MCP_PARK_H
#define MOD_MCP_PARK_H

#include "mcp_loop.h"
#include "mod_mcp_request.h"
#include "mod_mcp_stream.h"

typedef struct mcp_park_t mcp_park_t;

/* How long a request's answer is waited for with the request's thread before it is parked. A
 * parked answer ends its connection (httpd 2.4 cannot take a suspended connection back for
 * keep-alive), and a client that already sent its next request on it sees that request fail
 * (wrk in bench/run's server-everything run at c=32, with 100 ms). Only answers that are
 * really slow are parked. */
#define MCP_PARK_AFTER apr_time_from_sec(2)

/* The backend half of a parked stream; its hooks run on the parked stream's worker (or on the
 * request thread before it is parked). A non-zero return means the half is done (it finished
 * its stream); a transfer still running is then cut. */
typedef struct mcp_park_half_t {
    int  (*on_news)(void *baton, const mcp_loop_news_t *news);
    int  (*on_tick)(void *baton);                 /* every tick (below), and at wake-ups   */
    void (*on_stop)(void *baton, const char *why); /* the half must stop now                */
    void  *baton;
    apr_interval_time_t tick;   /* how often on_tick runs (0: the parked stream's own pace)   */
    int   lean;                 /* its transfer mostly waits (a standalone stream): it is read
                                 * through a smaller buffer (mcp_loop_src_start)             */
    int   outlives_client;      /* a request's answer: when the client's side ends (it went,
                                 * a graceful restart) the half goes on storing until it is
                                 * done, and only then is the connection given back; on_stop
                                 * only when the process exits                              */
    int   outlives_restart;     /* a stateless call's answer, which no client can resume
                                 * elsewhere: a graceful restart does not end the client's
                                 * response (the MPM waits for the connection); a stop does   */
} mcp_park_half_t;

/* Decides once per process (child_init) whether streams can be parked here, and starts the
 * loop when they can; the error log says which it is. */
void mcp_park_child_init(apr_pool_t *pchild, server_rec *s);

/* The MPM let go of c (its suspend_connection hook): a stream parked on it goes to the loop. */
void mcp_park_suspended(conn_rec *c);

/* The process's event loop: NULL where streams cannot be parked (another MPM, an httpd it was
 * not tested on, a loop that did not start). Other waiting work runs on it too
 * (mod_mcp_detach). */
mcp_loop_t *mcp_park_loop(void);

/* Non-zero when q's stream may be parked (see above). */
int mcp_park_possible(const mcp_req_t *q);

/* A parked stream for stream_id whose SSE response has begun, the client having been sent
 * everything up to seq cursor. follower_id: its mcp.followers row (0: none), renewed while it
 * follows and released when it ends. owned: the stream is this request's own (the backend half
 * finishes it), so its end needs no look at the table. NULL when it cannot be made (the caller
 * goes on with its thread). */
mcp_park_t *mcp_park_create(mcp_req_t *q, apr_int64_t stream_id, apr_int64_t cursor,
                            apr_int64_t follower_id, int owned);

/* Starts the backend half: call (on the loop's multi handle; the loop sets its callbacks) and
 * the hooks that take its news. Non-zero, with *err, when the transfer cannot start. */
int mcp_park_backend(mcp_park_t *pk, const mcp_backend_call_t *call,
                     const mcp_park_half_t *half, const char **err);

/* The same in transfer slot (0 .. MCP_LOOP_SLOTS - 1; mcp_park_backend is slot 0): one half per
 * slot. A half whose transfer cannot start is not the stream's (the others go on). */
int mcp_park_backend_slot(mcp_park_t *pk, int slot, const mcp_backend_call_t *call,
                          const mcp_park_half_t *half, const char **err);

/* The backend half stores on st (the parked stream's own, owned): what it stores is written from
 * memory at once when the client has everything before it, instead of being read back from
 * the table; only a client that fell behind is served from the table. A stateless st (a
 * 2026-07-28 call's) gets its events written without ids, as its own writes would be. */
void mcp_park_write_through(mcp_park_t *pk, mcp_stream_t *st);

/* Before the handler returns: hands the backend halves' news to their hooks on this thread until
 * done() says enough (its baton is the half's: the lowest slot's) or timeout passes, and writes
 * (blocking, as a handler does) what the halves wrote through. Returns non-zero when every half
 * is done meanwhile: a request whose answer came that soon is ended by its handler as any other
 * (the connection stays open for the client's next request), with mcp_park_abandon. */
int mcp_park_wait(mcp_park_t *pk, int (*done)(void *baton), apr_interval_time_t timeout);

/* For the half's hooks: a pool for what they need only while they run (cleared after the run
 * or the wait's round that called them, so that an idle parked stream holds none); NULL
 * outside them. */
apr_pool_t *mcp_park_scratch(const mcp_park_t *pk);

/* Non-zero once a write to the client failed (the connection is aborted). Such a stream must
 * not be parked (the event MPM closes an aborted connection whatever the handler returned):
 * the caller finishes with its thread, then mcp_park_abandon. */
int mcp_park_gone(const mcp_park_t *pk);

/* Parks it, the client having been sent everything up to seq cursor: returns SUSPENDED for the
 * handler to return. */
int mcp_park_go(mcp_park_t *pk, apr_int64_t cursor);

/* Gives up on parking before mcp_park_go (the request goes on with its thread, or ends): the
 * backend halves' transfers are cut without their hooks. */
void mcp_park_abandon(mcp_park_t *pk);

#endif
