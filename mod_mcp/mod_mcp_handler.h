/* mod_mcp_handler — the "mcp" handler: the Streamable HTTP endpoint (POST, GET, DELETE).
 *
 * The request path validates, looks the session up in PostgreSQL, forwards to the backend and
 * relays the answer. Protocol rules come from the pure mcp_* files; this file is the httpd glue.
 */
#ifndef MOD_MCP_HANDLER_H
#define MOD_MCP_HANDLER_H

#include <httpd.h>

#include "mcp_backend.h"

/* Per-process state the handler needs, set up in child_init. */
void mcp_handler_child_init(apr_pool_t *pchild, mcp_backend_pool_t *backend_pool);

int mcp_handler(request_rec *r);

#endif
