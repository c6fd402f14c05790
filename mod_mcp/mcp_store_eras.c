/* mcp_store_eras — see mcp_store_eras.h. */
#include <apr_strings.h>

#include "mcp_store_eras.h"

#define NARGS(a) MCP_STORE_NARGS(a)

mcp_store_status_t mcp_store_eras_get(mcp_store_t *db, apr_pool_t *p, const char *backend,
                                      const char **protocols, apr_int64_t *left_ms)
{
    static const char sql[] =
        "SELECT protocols, floor(extract(epoch FROM expires_at - now()) * 1000)::bigint"
        "  FROM mcp.backend_eras WHERE backend_url = $1";
    const char *args[1], *left;
    mcp_store_status_t rv;
    PGresult *res;

    args[0] = backend;
    *protocols = NULL;
    *left_ms = 0;
    if ((rv = mcp_store_exec_row(db, p, "reading the backend's eras", sql, NARGS(args), args,
                                 &res)) != MCP_STORE_OK) {
        return rv;
    }
    *protocols = mcp_store_cell(res, 0, 0);
    left = mcp_store_cell(res, 0, 1);
    *left_ms = left ? apr_atoi64(left) : 0;
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_eras_put(mcp_store_t *db, apr_pool_t *p, const char *backend,
                                      const char *protocols, apr_int64_t ttl_ms)
{
    static const char sql[] =
        "INSERT INTO mcp.backend_eras (backend_url, protocols, learned_at, expires_at)"
        " VALUES ($1, $2, now(), now() + $3::bigint * interval '1 millisecond')"
        " ON CONFLICT (backend_url) DO UPDATE"
        "   SET protocols = EXCLUDED.protocols, learned_at = EXCLUDED.learned_at,"
        "       expires_at = EXCLUDED.expires_at";
    const char *args[3];

    args[0] = backend;
    args[1] = protocols;
    args[2] = apr_psprintf(p, "%" APR_INT64_T_FMT, ttl_ms);
    return mcp_store_exec(db, p, "storing the backend's eras", sql, NARGS(args), args, NULL);
}
