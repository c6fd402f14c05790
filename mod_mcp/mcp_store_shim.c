/* mcp_store_shim — see mcp_store_shim.h. */
#include <apr_strings.h>

#include "mcp_store_shim.h"

#define NARGS(a) MCP_STORE_NARGS(a)

mcp_store_status_t mcp_store_shim_client(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const char **caps, const char **info,
                                         const char **log_level)
{
    static const char sql[] =
        "SELECT client_capabilities::text, client_info::text,"
        "       (SELECT e.message->'params'->>'level' FROM mcp.events e"
        "         WHERE e.session_id = $1 AND e.stream_id IS NULL AND e.direction = 'in'"
        "           AND e.message->>'method' = 'logging/setLevel'"
        "         ORDER BY e.id DESC LIMIT 1)"
        "  FROM mcp.sessions WHERE id = $1";
    const char *args[1];
    mcp_store_status_t rv;
    PGresult *res;

    args[0] = session_id;
    *caps = *info = *log_level = NULL;
    if ((rv = mcp_store_exec_row(db, p, "reading the session's client", sql, NARGS(args), args,
                                 &res)) != MCP_STORE_OK) {
        return rv;
    }
    *caps = mcp_store_cell(res, 0, 0);
    *info = mcp_store_cell(res, 0, 1);
    *log_level = mcp_store_cell(res, 0, 2);
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_shim_pending(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                          apr_int64_t stream_id, const char *id)
{
    static const char sql[] =
        "SELECT 1 FROM mcp.streams s"
        " WHERE s.id = $2::bigint AND s.session_id = $1 AND s.status = 'open'"
        "   AND EXISTS (SELECT 1 FROM mcp.events e WHERE e.stream_id = s.id"
        "                  AND e.direction = 'out' AND e.kind = 'message'"
        "                  AND e.message ? 'method' AND e.message->>'id' = $3)"
        "   AND NOT EXISTS (SELECT 1 FROM mcp.events e WHERE e.session_id = $1"
        "                  AND e.stream_id IS NULL AND e.direction = 'in'"
        "                  AND NOT e.message ? 'method' AND e.message->>'id' = $3)";
    const char *args[3];
    PGresult *res;

    args[0] = session_id;
    args[1] = apr_psprintf(p, "%" APR_INT64_T_FMT, stream_id);
    args[2] = id;
    return mcp_store_exec_row(db, p, "looking up a pending server request", sql, NARGS(args),
                              args, &res);
}

mcp_store_status_t mcp_store_shim_answers(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                          const char *ids_json, mcp_store_shim_answer_fn *fn,
                                          void *baton)
{
    static const char sql[] =
        "SELECT message_text FROM mcp.events"
        " WHERE session_id = $1 AND stream_id IS NULL AND direction = 'in'"
        "   AND NOT message ? 'method'"
        "   AND message->>'id' IN (SELECT jsonb_array_elements_text($2::jsonb))"
        " ORDER BY id";
    const char *args[2];
    mcp_store_status_t rv;
    PGresult *res;
    int i;

    args[0] = session_id;
    args[1] = ids_json;
    if ((rv = mcp_store_exec(db, p, "reading the client's answers", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    for (i = 0; i < PQntuples(res); i++) {
        fn(baton, PQgetvalue(res, i, 0));
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_shim_wake(mcp_store_t *db, apr_pool_t *p, apr_int64_t stream_id)
{
    static const char sql[] = "SELECT pg_notify('mcp_events', $1)";
    const char *args[1];

    args[0] = apr_psprintf(p, "%" APR_INT64_T_FMT, stream_id);
    return mcp_store_exec(db, p, "waking a stream's relay", sql, NARGS(args), args, NULL);
}

mcp_store_status_t mcp_store_shim_cancel(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const char *request_id, apr_int64_t *stream_id)
{
    static const char sql[] =
        "WITH c AS (UPDATE mcp.streams SET status = 'cancelled', completed_at = now()"
        "            WHERE session_id = $1 AND kind = 'request' AND status = 'open'"
        "              AND request_id = $2::jsonb RETURNING id)"
        "SELECT id, pg_notify('mcp_events', id::text) FROM c";
    const char *args[2];
    mcp_store_status_t rv;
    PGresult *res;

    *stream_id = 0;
    args[0] = session_id;
    args[1] = request_id;
    if ((rv = mcp_store_exec_row(db, p, "cancelling a request", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    *stream_id = apr_atoi64(PQgetvalue(res, 0, 0));
    return MCP_STORE_OK;
}
