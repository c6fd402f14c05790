/* mod_mcp_authz — per-name authorization with Apache's own grammar:
 *
 *     Require mcp-tool deploy-* status        (tools/call, by params.name)
 *     Require mcp-prompt summarize            (prompts/get, by params.name)
 *     Require mcp-resource file:///docs/a.md  (resources/read|subscribe|unsubscribe, by URI)
 *
 * Each is an authz provider (mod_authz_core) whose arguments are shell patterns (apr_fnmatch; a
 * `*` also matches `/`). It grants every request that is not of its kind (so it hides nothing
 * else: initialize, tools/list, GET streams ... pass), and a request of its kind whose name
 * matches one of the patterns; for a batch, every call of its kind must match. Combined with
 * other providers in <RequireAll>/<RequireAny>, httpd decides who may call what.
 *
 * Authorization runs before the handler (check_authz), so the provider reads the POST body
 * itself (mod_mcp_body: once, bounded by MCPMaxMessageSize; the handler reuses it). A body that
 * cannot be read or parsed is granted here and refused by the handler with its precise error.
 *
 * A denial is httpd's 403, but its body is a JSON-RPC error (application/json) naming the
 * refused name, and the refused message and the error are stored in the session's audit trail:
 * an insert_error_filter hook does both when the 403 is being sent (only then is it known that
 * no other Require line granted the request).
 */
#ifndef MOD_MCP_AUTHZ_H
#define MOD_MCP_AUTHZ_H

#include <httpd.h>

void mcp_authz_register_hooks(apr_pool_t *p);

#endif
