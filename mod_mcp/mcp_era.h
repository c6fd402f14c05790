/* mcp_era — which protocol era a request belongs to, and the 2026-07-28 request rules.
 *
 * One endpoint serves both eras (the spec's versioning page allows it). The decision is made
 * per request, on the body first and the version header second:
 *   - POST whose message carries params._meta["io.modelcontextprotocol/protocolVersion"]
 *     (the modern claim)                                   -> MCP_ROUTE_MODERN
 *   - POST carrying initialize                             -> MCP_ROUTE_LEGACY (a 2026 version
 *                                                             asked for there is counter-offered)
 *   - GET or DELETE with a modern MCP-Protocol-Version     -> MCP_ROUTE_NOT_ALLOWED (405)
 *   - POST with a modern header but no claim               -> MCP_ROUTE_NO_CLAIM (400, -32602)
 *   - anything else                                        -> MCP_ROUTE_LEGACY (as before)
 *
 * mcp_era_check applies the transport's rules to a modern request: the required _meta fields,
 * and MCP-Protocol-Version / Mcp-Method / Mcp-Name present and equal to the body (values may be
 * RFC 2047-like "=?base64?...?=" encoded; surrounding whitespace is ignored; a header sent
 * twice arrives joined with ", " and never equals the body's value, so it is refused).
 * Pure code: no httpd headers.
 */
#ifndef MCP_ERA_H
#define MCP_ERA_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>

#include "mcp_jsonrpc.h"

/* The _meta keys of the 2026-07-28 revision. */
#define MCP_ERA_META_VERSION      "io.modelcontextprotocol/protocolVersion"
#define MCP_ERA_META_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define MCP_ERA_META_CLIENT_INFO  "io.modelcontextprotocol/clientInfo"

/* Error codes of the 2026-07-28 revision. */
#define MCP_ERA_HEADER_MISMATCH       (-32020)
#define MCP_ERA_MISSING_CAPABILITY    (-32021)
#define MCP_ERA_UNSUPPORTED_VERSION   (-32022)

typedef enum {
    MCP_ROUTE_LEGACY = 0,       /* sessions, as before                                     */
    MCP_ROUTE_MODERN,           /* stateless 2026-07-28 request                            */
    MCP_ROUTE_NOT_ALLOWED,      /* GET/DELETE in the modern era: 405, Allow: POST          */
    MCP_ROUTE_NO_CLAIM          /* modern header, no _meta claim: 400, -32602              */
} mcp_era_route_t;

/* The route of a request. is_post: the method is POST (else GET/DELETE/other); version_header:
 * MCP-Protocol-Version as sent (NULL when absent); body: the parsed POST body (NULL for other
 * methods or a body that did not parse). */
mcp_era_route_t mcp_era_route(int is_post, const char *version_header,
                              const mcp_jsonrpc_body_t *body);

/* The modern claim of a message: the _meta protocolVersion value when it is a string, else
 * NULL (also when there is no params or _meta). *present is set when the key exists at all. */
const char *mcp_era_claim(json_object *msg, int *present);

/* A header value as the transport means it: surrounding whitespace (SP, HTAB) removed, and a
 * value of the form "=?base64?<data>?=" decoded (case-insensitive "base64"). Returns the value
 * allocated in p, or NULL when the encoded form does not decode (bad base64, or a decoded value
 * holding a NUL). raw NULL gives NULL. */
const char *mcp_era_header_value(apr_pool_t *p, const char *raw);

/* The headers of a modern request, as sent (NULL when absent). */
typedef struct mcp_era_headers_t {
    const char *version;    /* MCP-Protocol-Version */
    const char *method;     /* Mcp-Method           */
    const char *name;       /* Mcp-Name             */
} mcp_era_headers_t;

/* The result of mcp_era_check. */
typedef struct mcp_era_verdict_t {
    int         code;        /* 0: valid; else the JSON-RPC error code (answered with 400) */
    const char *message;     /* what is wrong, in words for the client                      */
    const char *requested;   /* MCP_ERA_UNSUPPORTED_VERSION: the version asked for           */
} mcp_era_verdict_t;

/* Checks one modern message (a request or notification, classified) against the headers;
 * supported: the modern revisions that can be served to it (comma-separated, e.g. "2026-07-28";
 * may be empty when the backend serves none). Returns the verdict's code (0 when valid). The
 * order of the checks: _meta (-32602), MCP-Protocol-Version (-32020), the version itself
 * (-32022), Mcp-Method and Mcp-Name (-32020). */
int mcp_era_check(apr_pool_t *p, const mcp_jsonrpc_msg_t *msg, const mcp_era_headers_t *h,
                  const char *supported, mcp_era_verdict_t *out);

/* The methods whose Mcp-Name header is required, and the params member it names ("name" or
 * "uri"); NULL for other methods. */
const char *mcp_era_name_member(const char *method);

/* The JSON Schema annotation of a tool argument that the client mirrors in a header. */
#define MCP_ERA_X_MCP_HEADER "x-mcp-header"

/* The x-mcp-header declarations of tools (a tools/list result's "tools" array): for each tool
 * with a name, into[name] = an array of {"header": <the annotation, an RFC 9110 token>, "type":
 * <the property's JSON Schema type or "">, "path": [<member names from arguments down>]}, found
 * through "properties" at any depth (the only places the annotation counts); [] for a tool that
 * declares none. Returns how many tools were added. */
int mcp_era_param_decls(json_object *tools, json_object *into);

/* Checks a tools/call's Mcp-Param-* headers (headers: the request's, looked up
 * case-insensitively) against its arguments, for the tool's declarations decls (an array as
 * mcp_era_param_decls makes them): for every declared argument that the body carries as a
 * primitive (a string, number or boolean; absent, null, objects and arrays expect no header),
 * Mcp-Param-<header> must be present and decode (surrounding whitespace removed; a
 * "=?base64?...?=" value must be canonical, padded base64 of UTF-8 text) to the argument's value
 * (a string as it is, booleans as true/false, numbers in decimal, compared numerically for
 * integer/number properties). Returns 0, or -32020 with out->message saying which header. */
int mcp_era_param_check(apr_pool_t *p, json_object *decls, json_object *arguments,
                        apr_table_t *headers, mcp_era_verdict_t *out);

/* Non-zero when version is one of the comma-separated list (", " separated, exact match). */
int mcp_era_listed(const char *list, const char *version);

/* What a backend's answer to a server/discover probe says of the revisions it serves (the eras
 * learned where MCPBackendProtocols is not set), as MCPBackendProtocols would say them (", "
 * separated, newest first, only revisions the gateway serves; in p):
 *   - a result whose supportedVersions lists 2026-07-28: "2026-07-28" and the 2025 revisions it
 *     lists too (none: a 2026-only backend);
 *   - any other result, a JSON-RPC error, or another HTTP 4xx answer: the 2025 era's revisions (a
 *     2025-era backend, which knows no server/discover);
 *   - no answer (http_status 0: unreachable, timed out, broken), a 5xx, 401, 403, 408 or 429
 *     (whatever the body: the backend wants credentials, or is busy), or a 2xx without a
 *     JSON-RPC response: NULL, nothing learned.
 * result: the response's result (NULL when none); error: non-zero when a JSON-RPC error came. */
const char *mcp_era_learn(apr_pool_t *p, int http_status, json_object *result, int error);

/* The same, second step, for a backend whose discover result listed no 2025 revision (modern:
 * what mcp_era_learn said of it): the answer to an initialize probe at 2025-11-25 tells whether
 * it serves the 2025 era too (a TypeScript SDK v2 server of both eras lists only 2026-07-28 in
 * server/discover). An InitializeResult naming a 2025 revision the gateway serves -> modern and
 * the 2025 era's revisions (in p); any other answer (an error, -32022, a 4xx or 5xx) -> modern:
 * a 2026-only backend; no answer (http_status 0) -> NULL, nothing learned. */
const char *mcp_era_learn_initialize(apr_pool_t *p, const char *modern, int http_status,
                                     json_object *result);

#endif
