/* mod_mcp_dbd — the one way mod_mcp borrows the database.
 *
 * A store handle (mcp_store_t, see mcp_store.h) made here lends mod_dbd's pooled connections:
 * each mcp_store_* call borrows one with ap_dbd_open for its one statement and gives it back at
 * once (ap_dbd_acquire would pin one for a whole SSE stream, and DBDMax exhaustion blocks
 * without a timeout). The handle carries the caller's retry policy (its patience); every
 * statement is bounded by MCPDatabaseTimeout.
 *
 * Outages are waited out per child, together: the first thread that finds the database gone
 * marks the child's gate closed; every thread that needs the database then waits at the gate
 * (bounded by its patience) instead of trying connections, while one of them at a time pings
 * PostgreSQL (PQpingParams, every 100 ms) until it answers. The error log gets one line when
 * an outage is confirmed and one when it ends, per child — not one per request.
 *
 * mcp_db_answer() is the one mapping from a failed store call to what a client is told.
 */
#ifndef MOD_MCP_DBD_H
#define MOD_MCP_DBD_H

#include <httpd.h>

#include "mcp_store.h"

/* Looks up mod_dbd's functions (from post_config: LoadModule order must not matter) and gives
 * libpq a connect timeout (PGCONNECT_TIMEOUT, unless the environment sets one) so that no
 * connection attempt of mod_dbd can hang on a database that accepts but never answers.
 * Returns non-zero when mod_dbd is loaded. */
int mcp_dbd_init(server_rec *s);

/* Per-child state (the gate); from child_init. */
void mcp_dbd_child_init(apr_pool_t *pchild, server_rec *s);

/* A store handle for work done on behalf of request r (pool r->pool): connection faults are
 * retried for patience (0: one try, no waiting). */
mcp_store_t *mcp_db_request(request_rec *r, apr_interval_time_t patience);

/* The same outside a request (background threads of a child), allocated in p. */
mcp_store_t *mcp_db_server(apr_pool_t *p, server_rec *s, apr_interval_time_t patience);

/* Non-zero while this child's gate holds the database for away (a ping is made first when one
 * is due, so a caller that never waits also sees it come back). For work that must not wait
 * out an outage on its thread (a parked stream's half, on one of the loop's few workers): it
 * puts its statements off instead. */
int mcp_db_away(void);

/* The connection parameters of the pooled connections (DBDParams, as libpq resolved them),
 * cloned from one of them the first time one can be had, for connections mod_mcp makes itself
 * (the LISTEN connection, the gate's pings). -1 while none could be had yet. */
int mcp_db_conn_params(apr_pool_t *p, server_rec *s, const char *const **keywords,
                       const char *const **values);

/* What a client is told when a store call ended with st (UNAVAILABLE or REFUSED): *http (503
 * for an outage, 400 for data PostgreSQL cannot take (SQLSTATE class 22), 500 otherwise), the
 * JSON-RPC *code and *message. Logs the failure once (an outage at warning, a refusal at
 * error, with PostgreSQL's message). */
void mcp_db_answer(request_rec *r, const mcp_store_t *db, mcp_store_status_t st, int *http,
                   int *code, const char **message);

#endif
