/* mcp_store_retention — retention: the partitions' upkeep and the deletion of what is
 * older than the retention period (mcp.maintain, sql/retention.sql); see mcp_store.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>

#include "mcp_store_private.h"

mcp_store_status_t mcp_store_maintain(mcp_store_t *db, apr_pool_t *p, long retention_secs,
                                      int ahead, mcp_store_maintained_t *out)
{
    /* A procedure that commits after each step (sql/retention.sql): never inside a
     * transaction block, which this one statement is not. */
    static const char sql[] = "CALL mcp.maintain(make_interval(secs => $1::bigint), $2::int)";
    const char *args[2];
    mcp_store_status_t rv;
    PGresult *res;

    memset(out, 0, sizeof(*out));
    args[0] = retention_secs >= 0 ? apr_ltoa(p, retention_secs) : NULL;
    args[1] = mcp_store__int_text(p, ahead);
    if ((rv = mcp_store_exec(db, p, "maintaining partitions (mcp.maintain)", sql, NARGS(args),
                             args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) == 1 && PQnfields(res) == 3) {
        out->created = atoi(PQgetvalue(res, 0, 0));
        out->dropped = atoi(PQgetvalue(res, 0, 1));
        out->deleted = apr_atoi64(PQgetvalue(res, 0, 2));
    }
    return MCP_STORE_OK;
}
