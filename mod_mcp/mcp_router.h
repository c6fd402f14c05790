/* mcp_router — in-process wake-ups for the followers of a stored SSE stream.
 *
 * A client that resumes a stream (GET with Last-Event-ID) is served by a follower: it replays
 * the stored events from the database and then waits for more. Whoever stores a new event on
 * stream S calls mcp_router_notify(S), and every follower of S in this process wakes up and
 * re-reads the table from its own cursor. A wake-up carries no data, because the table is the
 * truth; wake-ups therefore coalesce: each subscription has one pending flag, and any number
 * of notifies before the follower's next wait count as one.
 *
 * Usage by a follower (the order matters; it is what makes wake-ups impossible to lose):
 *     sub = mcp_router_subscribe(router, stream_id);   // NULL: fall back to polling
 *     for (;;) {
 *         read and send every event after the cursor, advance the cursor;
 *         if (!mcp_router_wait(sub, keepalive_interval))
 *             send a keep-alive comment;   // also notices a client that went away
 *     }
 *     mcp_router_unsubscribe(sub);
 * Subscribe before the first read: a notify that lands between a read and the next wait leaves
 * the pending flag set, so that wait returns at once; one that lands between subscribe and
 * the first read only costs one extra, empty, re-read.
 *
 * Threads: notify, notify_all, subscribe, unsubscribe and stats may be called from any thread
 * (a LISTEN thread will notify for events stored by other processes). They only take the
 * router's one short mutex and never wait for a follower. A subscription belongs to one
 * follower: mcp_router_wait and mcp_router_unsubscribe on the same subscription must not run
 * at the same time, and a subscription must not be used after it is unsubscribed (its slot is
 * reused).
 *
 * Memory: everything (slots, their condition variables, the hash buckets) is allocated in the
 * pool given to mcp_router_create, up front. Subscribing and unsubscribing allocate nothing, so
 * a router in a long-lived pool does not grow. The mutex and condition variables are destroyed
 * with that pool, which must therefore outlive every follower using the router.
 *
 * Cost: subscribe and unsubscribe are O(1); notify is O(subscribers whose stream id hashes to
 * the same bucket as stream_id) — there are at least as many buckets as slots, so this is
 * about the number of followers of that stream; notify_all is O(capacity).
 *
 * Pure code: APR only, no httpd headers. Without APR thread support (APR_HAS_THREADS == 0)
 * mcp_router_create returns NULL and callers poll.
 */
#ifndef MCP_ROUTER_H
#define MCP_ROUTER_H

#include <apr_pools.h>
#include <apr_time.h>

typedef struct mcp_router_t mcp_router_t;
typedef struct mcp_router_sub_t mcp_router_sub_t;

/* Largest capacity mcp_router_create accepts (far above any real MaxRequestWorkers). */
#define MCP_ROUTER_MAX_CAPACITY (1 << 20)

/* A router with room for capacity subscriptions at once (1 .. MCP_ROUTER_MAX_CAPACITY), all
 * allocated in p now. NULL when capacity is out of range, when APR cannot create the mutex or
 * a condition variable, or without APR thread support. */
mcp_router_t *mcp_router_create(apr_pool_t *p, int capacity);

/* Takes a free slot and subscribes it to stream_id, with no wake-up pending. NULL when r is
 * NULL or every slot is taken: the caller then polls the table instead of waiting. */
mcp_router_sub_t *mcp_router_subscribe(mcp_router_t *r, apr_int64_t stream_id);

/* The same for a follower that does not wait on the router (a stream parked in the event loop,
 * mcp_loop): every wake-up also calls wake_fn(baton), under the router's mutex, from the
 * notifying thread — it must be short and must not call the router. The pending flag works as
 * for any subscription (mcp_router_wait(sub, 0) consumes it). */
typedef void mcp_router_wake_fn(void *baton);
mcp_router_sub_t *mcp_router_subscribe_fn(mcp_router_t *r, apr_int64_t stream_id,
                                          mcp_router_wake_fn *wake_fn, void *baton);

/* Gives the slot back (a pending wake-up is dropped). NULL is ignored. */
void mcp_router_unsubscribe(mcp_router_sub_t *sub);

/* Marks a wake-up pending on every subscription of stream_id and wakes those that are waiting.
 * Never blocks on a follower; a stream with no subscriber here costs one bucket look-up.
 * NULL r is ignored. */
void mcp_router_notify(mcp_router_t *r, apr_int64_t stream_id);

/* The same for every subscription, whatever its stream (e.g. after the database connection
 * was re-established and notifications may have been missed: everybody re-reads). */
void mcp_router_notify_all(mcp_router_t *r);

/* Waits until a wake-up is pending on sub, then consumes it and returns 1. Returns 0 when the
 * timeout passes first (nothing is consumed then). A wake-up that became pending before the
 * call, even long before, returns 1 at once. timeout 0 only checks; a negative timeout waits
 * without limit. Spurious returns from the condition variable are absorbed. The timeout
 * follows the wall clock, as APR's condition variables do; if that clock steps backwards the
 * wait returns 0 early rather than oversleeping, which a follower handles like any timeout.
 * Returns 0 at once for a NULL sub. */
int mcp_router_wait(mcp_router_sub_t *sub, apr_interval_time_t timeout);

/* Snapshot for logs and tests (either pointer may be NULL): the number of slots in use, and
 * the number of wake-ups requested since creation — each notify or notify_all adds one per
 * subscription it reached, whether or not one was already pending (coalesced). */
void mcp_router_stats(mcp_router_t *r, int *in_use, apr_uint64_t *notified);

#endif
