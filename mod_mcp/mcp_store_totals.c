/* mcp_store_totals — what the whole cluster holds: live sessions, open streams, followers;
 * see mcp_store.h. */
#include <string.h>

#include <apr_strings.h>

#include "mcp_store_private.h"

mcp_store_status_t mcp_store_totals(mcp_store_t *db, apr_pool_t *p, mcp_store_totals_t *out)
{
    static const char sql[] =
        "SELECT (SELECT count(*) FROM mcp.sessions WHERE terminated_at IS NULL),"
        " (SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = 'request'),"
        " (SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = 'standalone'),"
        " (SELECT count(*) FROM mcp.followers WHERE lease_until > now())";
    mcp_store_status_t rv;
    PGresult *res;

    memset(out, 0, sizeof(*out));
    if ((rv = mcp_store_exec(db, p, "counting live sessions and streams", sql, 0, NULL, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) == 1 && PQnfields(res) == 4) {
        out->live_sessions = apr_atoi64(PQgetvalue(res, 0, 0));
        out->open_request_streams = apr_atoi64(PQgetvalue(res, 0, 1));
        out->open_standalone_streams = apr_atoi64(PQgetvalue(res, 0, 2));
        out->followers = apr_atoi64(PQgetvalue(res, 0, 3));
    }
    return MCP_STORE_OK;
}
