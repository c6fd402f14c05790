/* mcp_listener — wake-ups from other processes and hosts: LISTEN on a PostgreSQL channel and
 * feed every notification to the in-process router (mcp_router.h).
 *
 * The database notifies the channel with a stream id as payload whenever events are stored on
 * that stream or its status changes (the triggers in sql/schema.sql):
 *     NOTIFY mcp_events, '<stream_id>'      -- delivered at commit
 * For each one, the listener calls mcp_router_notify(router, stream_id). A notification is only a
 * wake-up; the tables are the truth. A payload that is not a stream id in canonical form (a
 * positive decimal int64 without sign, spaces or leading zeros) is ignored (debug log).
 *
 * One listener per process (httpd child; start it in child_init, never in the parent), with a
 * thread of its own and ONE dedicated connection, never a pooled one: a LISTEN belongs to its
 * session, and a pooled connection would be shared and silently reconnected.
 *
 * Robustness: when the connection fails (PostgreSQL restarted or terminated the backend, the
 * socket died, or a keep-alive query — sent after idle_ping without traffic — is not answered
 * within ping_timeout), the listener marks itself disconnected, wakes every follower
 * (mcp_router_notify_all: they notice the disconnection and poll faster), and reconnects with
 * exponential backoff (100 ms doubling to 5 s). The backoff starts over once a connection has
 * stayed up for backoff_max, so a server that accepts and at once drops connections is not
 * hammered. After each successful connect and LISTEN it marks itself connected, then wakes every
 * follower again: notifications sent while it was away are lost, so everybody re-reads the table.
 *
 * Connection parameters come from a callback, called before every connect attempt (in the
 * listener's thread), so they may follow configuration or be cloned from a pooled connection
 * (mcp_listener_params_from_conn). The connection is made without blocking (PQconnectStartParams
 * with expand_dbname 0), bounded by connect_timeout, so stopping never waits for it — but a
 * params callback that blocks (a DNS look-up, a pool acquire, a blocking connect of its own)
 * delays a stop until it returns.
 *
 * Stopping is prompt: the thread waits on its socket together with a self-pipe, and also waits
 * out its backoff on that pipe. mcp_listener_start registers a pre-cleanup on the pool, which
 * stops (and joins) the thread before anything in the pool or its subpools is destroyed; the
 * router may therefore live in the same pool.
 *
 * Logging goes through a callback (the file includes no httpd header): connects and reconnects
 * at info, lost connections and the first failed attempt of an outage at warning (then every
 * 12th failed attempt; the others at debug), each with libpq's error text; messages the server
 * sends (e.g. "terminating connection due to administrator command") at warning; ignored
 * notifications at debug. Nothing is logged for a routed notification.
 *
 * Memory: the listener is allocated once in the pool given to mcp_listener_start; connection
 * parameters go to a private pool that is cleared before every connect attempt, and messages are
 * formatted on the stack, so nothing grows per notification or per reconnect.
 *
 * Pure code: APR and libpq only, POSIX poll(2) and pipe(2). Without APR thread support,
 * mcp_listener_start returns APR_ENOTIMPL.
 */
#ifndef MCP_LISTENER_H
#define MCP_LISTENER_H

#include <apr_pools.h>
#include <apr_time.h>

#include "mcp_router.h"

/* level: 0 debug, 1 info, 2 warning, 3 error. msg is one line, no trailing newline; it is only
 * valid during the call. Called from the listener's thread. */
typedef void mcp_listener_log_fn(void *baton, int level, const char *msg);

#define MCP_LISTENER_LOG_DEBUG   0
#define MCP_LISTENER_LOG_INFO    1
#define MCP_LISTENER_LOG_WARNING 2
#define MCP_LISTENER_LOG_ERROR   3

/* Sets *keywords and *values to NULL-terminated arrays for PQconnectStartParams (allocated in
 * p, which is cleared before the next attempt), and returns 0. Anything else (or NULL arrays)
 * counts as a failed connect attempt: e.g. the parameters are cloned from a pooled connection,
 * and none can be had while the database is down. Called from the listener's thread. */
typedef int mcp_listener_params_fn(void *baton, apr_pool_t *p, const char *const **keywords,
                                   const char *const **values);

typedef struct mcp_listener_t mcp_listener_t;

/* Timings (all > 0, backoff_min <= backoff_max). The defaults are in brackets. */
typedef struct mcp_listener_timing_t {
    apr_interval_time_t backoff_min;      /* first wait before reconnecting         [100 ms] */
    apr_interval_time_t backoff_max;      /* doubling stops here                      [5 s] */
    apr_interval_time_t connect_timeout;  /* one attempt: connect and LISTEN         [10 s] */
    apr_interval_time_t idle_ping;        /* send a keep-alive query after this quiet [30 s] */
    apr_interval_time_t ping_timeout;     /* its answer must come within this        [10 s] */
} mcp_listener_timing_t;

/* Validates the arguments and starts the thread, which connects in the background (so this
 * does not wait for the database). channel must be a plain lower-case identifier
 * ([a-z_][a-z0-9_]*, at most 63 characters): it is written into "LISTEN" (which takes no bound
 * parameters). log may be NULL. Registers a pre-cleanup on p that stops the listener.
 * APR_EINVAL for a bad argument; an APR or errno status when the pipe or thread cannot be made. */
apr_status_t mcp_listener_start(mcp_listener_t **out, apr_pool_t *p, mcp_router_t *router,
                                const char *channel, mcp_listener_params_fn *params,
                                mcp_listener_log_fn *log, void *baton);

/* The same with explicit timings (NULL: the defaults). For tests, and for configuration. */
apr_status_t mcp_listener_start_ex(mcp_listener_t **out, apr_pool_t *p, mcp_router_t *router,
                                   const char *channel, mcp_listener_params_fn *params,
                                   mcp_listener_log_fn *log, void *baton,
                                   const mcp_listener_timing_t *timing);

/* Stops the thread and waits for it (closing its connection): returns within milliseconds,
 * whether the thread is connected, connecting or waiting to retry — unless a params callback is
 * running, which it waits for. Idempotent; NULL is ignored. Meant for the listener's owner
 * (one thread): a second, concurrent call returns at once, without waiting for the thread. */
void mcp_listener_stop(mcp_listener_t *l);

/* 1 while the connection is up and listening, else 0 (also for NULL and after stop). Any
 * thread. Followers poll the table more often while it is 0. */
int mcp_listener_connected(const mcp_listener_t *l);

/* Number of notifications routed (valid payloads) since start; 0 for NULL. Any thread. */
apr_uint64_t mcp_listener_notifications(const mcp_listener_t *l);

/* Turns a live connection (a PGconn *) into NULL-terminated keyword/value arrays for
 * PQconnectdbParams / PQconnectStartParams (expand_dbname 0), from PQconninfo: only options
 * with a non-empty value are kept. Everything is copied into p (a password too, if the
 * connection used one). Returns 0, or -1 for NULL arguments or when libpq is out of memory. */
int mcp_listener_params_from_conn(apr_pool_t *p, void *pgconn, const char *const **keywords,
                                  const char *const **values);

#endif
