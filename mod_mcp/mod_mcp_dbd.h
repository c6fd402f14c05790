/* mod_mcp_dbd — borrowing PostgreSQL connections from mod_dbd.
 *
 * Connections are taken with ap_dbd_open and given back with ap_dbd_close around each short piece
 * of work, never held for a request's life (ap_dbd_acquire would pin one for a whole SSE stream,
 * and DBDMax exhaustion blocks without a timeout).
 */
#ifndef MOD_MCP_DBD_H
#define MOD_MCP_DBD_H

#include <httpd.h>
#include <apr_dbd.h>
#include <mod_dbd.h>

#include "mcp_store.h"

/* Looks up mod_dbd's functions (from post_config: LoadModule order must not matter).
 * Returns non-zero when mod_dbd is loaded. */
int mcp_dbd_init(void);

/* A connection for one short piece of work, or NULL (logged) when the database is unavailable.
 * store is filled for mcp_store_* calls. */
ap_dbd_t *mcp_dbd_open(request_rec *r, mcp_store_t *store);
void mcp_dbd_close(request_rec *r, ap_dbd_t *dbd);

/* The same outside a request (background threads of a child). */
ap_dbd_t *mcp_dbd_open_server(apr_pool_t *p, server_rec *s, mcp_store_t *store);
void mcp_dbd_close_server(server_rec *s, ap_dbd_t *dbd);

#endif
