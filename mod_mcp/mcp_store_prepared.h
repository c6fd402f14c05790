/* mcp_store_prepared — which of the store's named statements a PostgreSQL connection has
 * prepared, kept with the connection itself (libpq's instance data of an event procedure).
 *
 * The store runs every statement as a named prepared statement of its connection. Without this
 * memory it could only learn that one is missing by running it: PostgreSQL answers 26000 and
 * logs an ERROR line with the statement's text, once per statement per new connection (after a
 * restart, a failover, or as mod_dbd's pool grows). With it, a statement that this connection
 * has not prepared is prepared first, and the 26000 path is left for what nobody can see (a
 * DEALLOCATE from outside). The memory follows the connection's life: a PQreset (a new server
 * process, which has prepared nothing) empties it, PQfinish frees it.
 *
 * A statement is named by its text's 64-bit hash (mcp_store__statement_hash). A connection is
 * used by one thread at a time, as lent, and libpq calls the event procedure in the thread that
 * resets or finishes it: nothing here locks. Memory: malloc'd, a few bytes per statement per
 * connection.
 * Pure code: no httpd headers.
 */
#ifndef MCP_STORE_PREPARED_H
#define MCP_STORE_PREPARED_H

#include <apr.h>
#include <libpq-fe.h>

/* Whether conn is known to have prepared the statement named by hash. */
int mcp_store_prepared_has(const PGconn *conn, apr_uint64_t hash);

/* Records that conn has prepared the statement named by hash (once it answered the prepare, or
 * said it exists). Without memory (malloc failed) nothing is recorded: the statement is
 * prepared again next time, which is still correct. */
void mcp_store_prepared_add(PGconn *conn, apr_uint64_t hash);

/* Forgets everything conn was known to have prepared (it answered 26000 for one of them). */
void mcp_store_prepared_forget(PGconn *conn);

/* How many statements conn is known to have prepared (for tests). */
int mcp_store_prepared_count(const PGconn *conn);

#endif
