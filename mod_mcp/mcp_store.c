/* mcp_store — see mcp_store.h. */
#include <apr_strings.h>

#include "mcp_store.h"

static mcp_store_status_t db_error(const mcp_store_t *db, apr_pool_t *p, int rv, const char *what,
                                   const char **err)
{
    const char *msg = apr_dbd_error(db->driver, db->handle, rv);

    *err = apr_psprintf(p, "%s: %s", what, msg ? msg : "unknown database error");
    return MCP_STORE_ERROR;
}

/* Prepared without a label: the driver runs it with PQexecParams, keeping no server-side
 * prepared statement that a PostgreSQL restart could take away. */
static int prepare(const mcp_store_t *db, apr_pool_t *p, const char *sql,
                   apr_dbd_prepared_t **stmt)
{
    *stmt = NULL;   /* the driver fills in a non-NULL *stmt instead of allocating one */
    return apr_dbd_prepare(db->driver, p, db->handle, sql, NULL, stmt);
}

static const char *entry(const mcp_store_t *db, apr_pool_t *p, apr_dbd_row_t *row, int col)
{
    const char *v = apr_dbd_get_entry(db->driver, row, col);

    return v ? apr_pstrdup(p, v) : NULL;
}

mcp_store_status_t mcp_store_session_insert(const mcp_store_t *db, apr_pool_t *p,
                                            const mcp_store_session_t *s, const char **err)
{
    static const char sql[] =
        "INSERT INTO mcp.sessions (id, backend_url, backend_session_id, protocol_version,"
        " principal, client_info, client_capabilities, server_info)"
        " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb)";
    apr_dbd_prepared_t *stmt;
    int rv, nrows = 0;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the session insert", err);
    }
    rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt, s->id, s->backend_url,
                         s->backend_session_id, s->protocol_version, s->principal,
                         s->client_info, s->client_capabilities, s->server_info);
    if (rv != 0) {
        return db_error(db, p, rv, "storing the session", err);
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_session_touch(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, mcp_store_session_t **out,
                                           const char **err)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET last_seen_at = now()"
        " WHERE id = %s AND terminated_at IS NULL AND principal IS NOT DISTINCT FROM %s"
        " RETURNING backend_url, backend_session_id, protocol_version";
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    mcp_store_session_t *s;
    int rv;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the session look-up", err);
    }
    /* seek=1: read the whole (one-row) result now and leave the connection idle. */
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, id, principal);
    if (rv != 0) {
        return db_error(db, p, rv, "looking up the session", err);
    }
    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        return MCP_STORE_NOT_FOUND;
    }
    s = apr_pcalloc(p, sizeof(*s));
    s->id = apr_pstrdup(p, id);
    s->principal = principal ? apr_pstrdup(p, principal) : NULL;
    s->backend_url = entry(db, p, row, 0);
    s->backend_session_id = entry(db, p, row, 1);
    s->protocol_version = entry(db, p, row, 2);
    *out = s;
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_session_terminate(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                               const char *principal, const char *by,
                                               const char **err)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET terminated_at = now(), terminated_by = %s"
        " WHERE id = %s AND terminated_at IS NULL AND principal IS NOT DISTINCT FROM %s";
    apr_dbd_prepared_t *stmt;
    int rv, nrows = 0;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the session termination", err);
    }
    rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt, by, id, principal);
    if (rv != 0) {
        return db_error(db, p, rv, "terminating the session", err);
    }
    return nrows > 0 ? MCP_STORE_OK : MCP_STORE_NOT_FOUND;
}
