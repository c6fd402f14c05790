/* mcp_listing — the results of the list methods, and what each item names: tools/list's tools
 * and prompts/list's prompts by name, resources/list's resources by uri (the names Require
 * mcp-tool, mcp-prompt and mcp-resource judge; mcp_jsonrpc_target names them in a request).
 *
 * resources/templates/list is not one of them: a template (uriTemplate) names no resource, and
 * whether a URI made from it may be read is judged when it is read.
 *
 * Pure code: json-c only.
 */
#ifndef MCP_LISTING_H
#define MCP_LISTING_H

#include <json-c/json.h>

#include "mcp_jsonrpc.h"

/* The kind of name the items of method's result carry: MCP_TARGET_TOOL for "tools/list",
 * MCP_TARGET_PROMPT for "prompts/list", MCP_TARGET_RESOURCE for "resources/list", else
 * MCP_TARGET_NONE (NULL too). */
mcp_target_kind_t mcp_listing_kind(const char *method);

/* Non-zero keeps the item that names name. */
typedef int mcp_listing_keep_fn(void *baton, mcp_target_kind_t kind, const char *name);

/* Removes from a successful response's result (response.result.tools, .prompts or .resources,
 * as kind says) every item that keep refuses, and every item whose name is missing or not a
 * string (what cannot be judged is not shown); the order of the rest and every other member
 * (nextCursor, _meta) stay. Returns how many were removed, 0 when response is not such a
 * result (an error, no array): nothing is changed then. */
int mcp_listing_filter(json_object *response, mcp_target_kind_t kind, mcp_listing_keep_fn *keep,
                       void *baton);

#endif
