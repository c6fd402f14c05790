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
 *
 * What a user may not call is not listed either: the items of a tools/list, prompts/list or
 * resources/list answer that the request's Require lines would refuse to call are removed from
 * it before it is stored and sent (mcp_authz_filter_answer), per request, so per user. Each item
 * is judged by httpd's own authorization, run again for the request with the item's name in
 * place of its body (mcp_authz_allows): the same lines, containers and providers decide. When no
 * Require mcp-* line is reached (e.g. `Require valid-user` alone, or a RequireAny that a user
 * passes on another line), the first judgment says so and the rest of the list is kept as it is.
 */
#ifndef MOD_MCP_AUTHZ_H
#define MOD_MCP_AUTHZ_H

#include <httpd.h>

#include "mcp_jsonrpc.h"

void mcp_authz_register_hooks(apr_pool_t *p);

/* Would the request's Require lines let it call the tool, prompt or resource (kind) name? 1
 * when they would. *consulted (may be NULL): whether a Require mcp-* line was evaluated (0: the
 * answer is the same for every name). */
int mcp_authz_allows(request_rec *r, mcp_target_kind_t kind, const char *name, int *consulted);

/* Non-zero when requests hold a list request (tools/list, prompts/list, resources/list): only
 * then can an answer on the request's stream need filtering. */
int mcp_authz_lists_requested(const mcp_jsonrpc_body_t *requests);

/* json (a message on the stream of requests): when it is the response to one of its list
 * requests and items were removed (above), the message as it is to be stored and sent (in
 * r->pool, *out_len bytes); else NULL (json stands as it is). */
const char *mcp_authz_filter_answer(request_rec *r, const mcp_jsonrpc_body_t *requests,
                                    const char *json, apr_size_t len, apr_size_t *out_len);

#endif
