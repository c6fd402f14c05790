/* mcp_store_members — see mcp_store_members.h. */
#include <string.h>

#include <apr_strings.h>
#include <json-c/json.h>

#include "mcp_store_members.h"
#include "mcp_store_private.h"

static void add_text(json_object *o, const char *key, const char *v)
{
    json_object_object_add(o, key, v ? json_object_new_string(v) : NULL);
}

/* The rows as one JSON array (one statement stores them all), in p. */
static const char *rows_json(apr_pool_t *p, const mcp_store_member_t *members, int n)
{
    json_object *rows = json_object_new_array();
    const char *text;
    int i;

    for (i = 0; i < n; i++) {
        json_object *row = json_object_new_object();
        add_text(row, "member", members[i].member);
        add_text(row, "backend_url", members[i].backend_url);
        add_text(row, "backend_session_id", members[i].backend_session_id);
        add_text(row, "protocol_version", members[i].protocol_version);
        add_text(row, "state", members[i].open ? "open" : "failed");
        add_text(row, "error", members[i].error);
        add_text(row, "initialize_result", members[i].initialize_result);
        json_object_array_add(rows, row);
    }
    text = apr_pstrdup(p, json_object_to_json_string_ext(rows, JSON_C_TO_STRING_PLAIN));
    json_object_put(rows);
    return text;
}

#define UPSERT(WHERE) \
        "INSERT INTO mcp.session_members (session_id, member, backend_url, backend_session_id," \
        "                                 protocol_version, state, error, initialize_result)" \
        " SELECT $1, m.member, m.backend_url, m.backend_session_id, m.protocol_version," \
        "        m.state, m.error, m.initialize_result" \
        "   FROM jsonb_to_recordset($2::jsonb) AS m(member text, backend_url text," \
        "        backend_session_id text, protocol_version text, state text, error text," \
        "        initialize_result text)" \
        " ON CONFLICT (session_id, member) DO UPDATE" \
        "   SET backend_url = EXCLUDED.backend_url," \
        "       backend_session_id = EXCLUDED.backend_session_id," \
        "       protocol_version = EXCLUDED.protocol_version, state = EXCLUDED.state," \
        "       error = EXCLUDED.error, initialize_result = EXCLUDED.initialize_result," \
        "       updated_at = now()" WHERE

mcp_store_status_t mcp_store_members_put(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const mcp_store_member_t *members, int n)
{
    static const char sql[] = UPSERT("");
    const char *args[2];

    args[0] = session_id;
    args[1] = rows_json(p, members, n);
    return mcp_store_exec(db, p, "storing the session's members", sql, NARGS(args), args, NULL);
}

mcp_store_status_t mcp_store_members_reopened(mcp_store_t *db, apr_pool_t *p,
                                              const char *session_id,
                                              const mcp_store_member_t *members, int n,
                                              int *stored)
{
    static const char sql[] = UPSERT(" WHERE mcp.session_members.state <> 'open'"
                                     " RETURNING member");
    const char *args[2];
    mcp_store_status_t rv;
    PGresult *res;
    int i, k;

    args[0] = session_id;
    args[1] = rows_json(p, members, n);
    if ((rv = mcp_store_exec(db, p, "storing the session's members", sql, NARGS(args), args,
                             &res)) != MCP_STORE_OK) {
        return rv;
    }
    for (i = 0; stored && i < n; i++) {
        stored[i] = 0;
        for (k = 0; k < PQntuples(res); k++) {
            stored[i] = stored[i] || strcmp(mcp_store_cell(res, k, 0), members[i].member) == 0;
        }
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_member_lost(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const char *member, const char *backend_session_id,
                                         const char *why)
{
    static const char sql[] =
        "UPDATE mcp.session_members SET state = 'failed', error = $4, updated_at = now()"
        " WHERE session_id = $1 AND member = $2 AND state = 'open'"
        "   AND backend_session_id IS NOT DISTINCT FROM $3";
    const char *args[4];

    args[0] = session_id;
    args[1] = member;
    args[2] = backend_session_id;
    args[3] = why;
    return mcp_store_exec(db, p, "marking a member failed", sql, NARGS(args), args, NULL);
}

mcp_store_status_t mcp_store_members_get(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         apr_array_header_t **members, const char **client_info,
                                         const char **client_capabilities)
{
    static const char sql[] =
        "SELECT m.member, m.backend_url, m.backend_session_id, m.protocol_version, m.state,"
        "       m.error, m.initialize_result, s.client_info::text, s.client_capabilities::text"
        "  FROM mcp.sessions s LEFT JOIN mcp.session_members m ON m.session_id = s.id"
        " WHERE s.id = $1";
    static const mcp_store__member_cols_t cols = { 0, 1, 2, 3, 4, 5, 6 };
    const char *args[1];
    mcp_store_status_t rv;
    PGresult *res;
    int i;

    args[0] = session_id;
    *members = apr_array_make(p, 4, sizeof(mcp_store_member_t));
    *client_info = *client_capabilities = NULL;
    if ((rv = mcp_store_exec_row(db, p, "reading the session's members", sql, NARGS(args), args,
                                 &res)) != MCP_STORE_OK) {
        return rv;
    }
    *client_info = mcp_store_cell(res, 0, 7);
    *client_capabilities = mcp_store_cell(res, 0, 8);
    for (i = 0; i < PQntuples(res); i++) {
        mcp_store__member_push(*members, res, i, &cols);
    }
    return MCP_STORE_OK;
}

void mcp_store__member_push(apr_array_header_t *members, PGresult *res, int i,
                            const mcp_store__member_cols_t *cols)
{
    mcp_store_member_t *m;
    const char *state;

    if (!mcp_store_cell(res, i, cols->member)) {
        return;
    }
    m = apr_array_push(members);
    memset(m, 0, sizeof(*m));
    m->member = mcp_store_cell(res, i, cols->member);
    m->backend_url = mcp_store_cell(res, i, cols->backend_url);
    m->backend_session_id = mcp_store_cell(res, i, cols->backend_session_id);
    m->protocol_version = mcp_store_cell(res, i, cols->protocol_version);
    state = mcp_store_cell(res, i, cols->state);
    m->open = state && strcmp(state, "open") == 0;
    m->error = mcp_store_cell(res, i, cols->error);
    m->initialize_result = cols->initialize_result < 0 ? NULL
                         : mcp_store_cell(res, i, cols->initialize_result);
}
