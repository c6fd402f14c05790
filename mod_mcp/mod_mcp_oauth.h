/* mod_mcp_oauth — OAuth 2.0 protected-resource metadata (RFC 9728), as MCP authorization asks:
 *
 *   - MCPProtectedResource URL (with MCPAuthorizationServers, MCPResourceScopes) in an MCP
 *     <Location> makes the server answer GET /.well-known/oauth-protected-resource<URL's path>
 *     with the resource's metadata (JSON: resource, authorization_servers, scopes_supported,
 *     bearer_methods_supported), before any access check (it is public by design);
 *   - every 401 sent for that location — by the token-validating auth module in front (e.g.
 *     mod_auth_openidc, AuthType oauth20) or by the handler itself when no user was
 *     authenticated — carries WWW-Authenticate: Bearer resource_metadata="..." (and
 *     scope="..."), added to the auth module's own Bearer challenge when there is one.
 *
 * Validating the token is the auth module's job; the gateway binds the session to r->user
 * (the token's subject) as for any other authentication, and never forwards the client's
 * Authorization header to the backend (mcp_backend sends only the headers it sets itself).
 */
#ifndef MOD_MCP_OAUTH_H
#define MOD_MCP_OAUTH_H

#include <httpd.h>
#include <http_config.h>

#include "mod_mcp_request.h"

/* MCPProtectedResource URL (registers the metadata path for the server). */
const char *mcp_oauth_set_resource(cmd_parms *cmd, void *dconf, const char *url);

/* With MCPProtectedResource set and no authenticated user: answers 401 with the challenge and
 * returns DONE; else OK. */
int mcp_oauth_require_user(mcp_req_t *q);

/* The metadata quick handler and the challenge on 401s. */
void mcp_oauth_register_hooks(void);

#endif
