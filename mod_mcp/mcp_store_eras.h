/* mcp_store_eras — the protocol eras each backend serves, as learned (mcp.backend_eras).
 *
 * Where a <Location> does not say its backend's revisions (MCPBackendProtocols), the gateway
 * learns them by a server/discover probe (mod_mcp_eras) and keeps the answer here, one row per
 * backend (MCPBackend as written) with a lifetime, so that every process and host uses it and
 * only one probe per lifetime is needed. Two statements: one reads, one upserts.
 * Pure code: no httpd headers.
 */
#ifndef MCP_STORE_ERAS_H
#define MCP_STORE_ERAS_H

#include "mcp_store.h"

/* The stored revisions of backend (", " separated, as MCPBackendProtocols) in *protocols, and
 * how long the row is still good in *left_ms (0 or less: expired; the caller may still use it
 * when a new probe learns nothing). NOT_FOUND: no row. */
mcp_store_status_t mcp_store_eras_get(mcp_store_t *db, apr_pool_t *p, const char *backend,
                                      const char **protocols, apr_int64_t *left_ms);

/* Stores what was learned of backend, good for ttl_ms from now (a row there is replaced). */
mcp_store_status_t mcp_store_eras_put(mcp_store_t *db, apr_pool_t *p, const char *backend,
                                      const char *protocols, apr_int64_t ttl_ms);

#endif
