/* mod_mcp_handler — the "mcp" handler: the Streamable HTTP endpoint (POST, GET, DELETE).
 *
 * The request path validates, looks the session up in PostgreSQL, forwards to the backend and
 * relays the answer. Protocol rules come from the pure mcp_* files; this file is the httpd glue.
 */
#ifndef MOD_MCP_HANDLER_H
#define MOD_MCP_HANDLER_H

#include <httpd.h>

int mcp_handler(request_rec *r);

#endif
