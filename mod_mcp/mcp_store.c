/* mcp_store — see mcp_store.h. */
#include <stdlib.h>
#include <string.h>

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

static const char *i64(apr_pool_t *p, apr_int64_t v)
{
    return apr_psprintf(p, "%" APR_INT64_T_FMT, v);
}

static const char *int_text(apr_pool_t *p, int v)
{
    return apr_psprintf(p, "%d", v);
}

mcp_store_status_t mcp_store_session_touch(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, int idle_secs,
                                           mcp_store_session_t **out, const char **err)
{
    static const char sql[] =
        "WITH expired AS ("
        "  UPDATE mcp.sessions SET terminated_at = now(), terminated_by = 'expired'"
        "   WHERE id = %s AND terminated_at IS NULL AND %s::int > 0"
        "     AND last_seen_at <= now() - make_interval(secs => %s::int)"
        ")"
        "UPDATE mcp.sessions SET last_seen_at = now()"
        " WHERE id = %s AND terminated_at IS NULL AND principal IS NOT DISTINCT FROM %s"
        "   AND (%s::int = 0 OR last_seen_at > now() - make_interval(secs => %s::int))"
        " RETURNING backend_url, backend_session_id, protocol_version";
    const char *idle = int_text(p, idle_secs);
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    mcp_store_session_t *s;
    int rv;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the session look-up", err);
    }
    /* seek=1: read the whole (one-row) result now and leave the connection idle. */
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, id, idle, idle, id, principal,
                          idle, idle);
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

/* ---- streams and events ------------------------------------------------------------------ */

/* The first column of the first row as a bigint; NOT_FOUND when there is no row. */
static mcp_store_status_t first_id(const mcp_store_t *db, apr_pool_t *p, apr_dbd_results_t *res,
                                   apr_int64_t *out)
{
    apr_dbd_row_t *row = NULL;

    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        return MCP_STORE_NOT_FOUND;
    }
    *out = apr_atoi64(apr_dbd_get_entry(db->driver, row, 0));
    /* Read to the end: a random-access result is released when its rows run out. */
    while (apr_dbd_get_row(db->driver, p, res, &row, -1) == 0) {
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_renew(const mcp_store_t *db, apr_pool_t *p,
                                          apr_int64_t stream_id, const char *session_id,
                                          int lease_secs, const char **err)
{
    static const char sql[] =
        "WITH st AS ("
        "  UPDATE mcp.streams SET lease_until = now() + make_interval(secs => %s::int)"
        "   WHERE id = %s::bigint AND status = 'open'"
        "  RETURNING id"
        "), se AS ("
        "  UPDATE mcp.sessions SET last_seen_at = now() WHERE id = %s"
        ")"
        "SELECT id FROM st";
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_int64_t id;
    int rv;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the lease renewal", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, int_text(p, lease_secs),
                          i64(p, stream_id), session_id);
    if (rv != 0) {
        return db_error(db, p, rv, "renewing a stream's lease", err);
    }
    return first_id(db, p, res, &id);
}

mcp_store_status_t mcp_store_streams_expire(const mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t stream_id, const char *message,
                                            long *finished, const char **err)
{
    /* The conditional UPDATE is the "exactly once": it locks each row, and whoever comes second
     * finds the stream no longer open. */
    static const char sql[] =
        "WITH expired AS ("
        "  UPDATE mcp.streams"
        "     SET status = CASE kind WHEN 'request' THEN 'failed' ELSE 'closed' END,"
        "         completed_at = now()"
        "   WHERE status = 'open' AND lease_until < now()"
        "     AND (%s::bigint = 0 OR id = %s::bigint)"
        "  RETURNING id, session_id, kind, request_id"
        "), answers AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message, principal)"
        "  SELECT x.session_id, x.id,"
        "         (SELECT coalesce(max(e.seq), 0) FROM mcp.events e WHERE e.stream_id = x.id)"
        "           + r.ord,"
        "         'out', 'message',"
        "         jsonb_build_object('jsonrpc', '2.0', 'id', r.id, 'error',"
        "             jsonb_build_object('code', -32002, 'message', %s::text)),"
        "         (SELECT principal FROM mcp.sessions s WHERE s.id = x.session_id)"
        "    FROM expired x,"
        "         jsonb_array_elements(CASE jsonb_typeof(x.request_id) WHEN 'array'"
        "                              THEN x.request_id ELSE jsonb_build_array(x.request_id) END)"
        "           WITH ORDINALITY AS r(id, ord)"
        "   WHERE x.kind = 'request'"
        "   ORDER BY x.id, r.ord"
        ")"
        "SELECT count(*) FROM expired";
    const char *sid = i64(p, stream_id);
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_int64_t n = 0;
    int rv;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the expiry of streams", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, sid, sid, message);
    if (rv != 0) {
        return db_error(db, p, rv, "finishing streams whose owner is gone", err);
    }
    first_id(db, p, res, &n);
    *finished = (long)n;
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_events_append(const mcp_store_t *db, apr_pool_t *p,
                                           const mcp_store_session_t *session,
                                           apr_int64_t stream_id, apr_int64_t first_seq,
                                           const char *direction, const char *messages,
                                           const char **err)
{
    static const char sql[] =
        "INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message, principal)"
        " SELECT %s, nullif(%s::bigint, 0),"
        "        CASE WHEN %s::bigint = 0 THEN NULL ELSE %s::bigint + t.ord - 1 END,"
        "        %s, 'message', t.value, %s"
        "   FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(value, ord)"
        "  ORDER BY t.ord";
    const char *sid = i64(p, stream_id);
    apr_dbd_prepared_t *stmt;
    int rv, nrows = 0;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the event insert", err);
    }
    rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt, session->id, sid, sid,
                         i64(p, first_seq), direction, session->principal, messages);
    return rv ? db_error(db, p, rv, "storing events", err) : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_events_append_finish(const mcp_store_t *db, apr_pool_t *p,
                                                  const mcp_store_session_t *session,
                                                  apr_int64_t stream_id, apr_int64_t first_seq,
                                                  const char *messages, const char *status,
                                                  const char **err)
{
    static const char sql[] =
        "WITH ins AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message, principal)"
        "  SELECT %s, %s::bigint, %s::bigint + t.ord - 1, 'out', 'message', t.value, %s"
        "    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(value, ord)"
        "   ORDER BY t.ord"
        ")"
        "UPDATE mcp.streams SET status = %s, completed_at = now()"
        " WHERE id = %s::bigint AND status = 'open'";
    const char *sid = i64(p, stream_id);
    apr_dbd_prepared_t *stmt;
    int rv, nrows = 0;

    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the final insert", err);
    }
    rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt, session->id, sid,
                         i64(p, first_seq), session->principal, messages, status, sid);
    return rv ? db_error(db, p, rv, "storing a stream's last messages and its end", err)
              : MCP_STORE_OK;
}

static void read_stream(const mcp_store_t *db, apr_pool_t *p, apr_dbd_row_t *row,
                        apr_int64_t id, mcp_store_stream_t *out)
{
    const char *last = apr_dbd_get_entry(db->driver, row, 3);

    out->id = id;
    out->kind = entry(db, p, row, 0);
    out->status = entry(db, p, row, 1);
    out->lease_expired = strcmp(apr_dbd_get_entry(db->driver, row, 2), "t") == 0;
    out->last_seq = last ? apr_atoi64(last) : -1;
    out->owner = entry(db, p, row, 4);
}

#define STREAM_COLUMNS \
    "SELECT s.kind, s.status, (s.status = 'open' AND s.lease_until < now())," \
    "       (SELECT max(seq) FROM mcp.events WHERE stream_id = s.id), s.owner" \
    "  FROM mcp.streams s"

/* One stream row selected by sql (STREAM_COLUMNS ...) with nargs bound arguments. */
static mcp_store_status_t select_stream(const mcp_store_t *db, apr_pool_t *p, const char *sql,
                                        const char *what, int nargs, const char **args,
                                        apr_int64_t stream_id, mcp_store_stream_t *out,
                                        const char **err)
{
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rv;

    if ((rv = prepare(db, p, sql, &stmt)) != 0
        || (rv = apr_dbd_pselect(db->driver, p, db->handle, &res, stmt, 1, nargs, args)) != 0) {
        return db_error(db, p, rv, what, err);
    }
    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        return MCP_STORE_NOT_FOUND;
    }
    read_stream(db, p, row, stream_id, out);
    while (apr_dbd_get_row(db->driver, p, res, &row, -1) == 0) {
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_get(const mcp_store_t *db, apr_pool_t *p,
                                        apr_int64_t stream_id, mcp_store_stream_t *out,
                                        const char **err)
{
    static const char sql[] = STREAM_COLUMNS " WHERE s.id = %s::bigint";
    const char *args[1];

    args[0] = i64(p, stream_id);
    return select_stream(db, p, sql, "looking up a stream", 1, args, stream_id, out, err);
}

/* ---- limits: admission control ------------------------------------------------------------ */

static mcp_store_refusal_t refusal(const char *text)
{
    static const struct {
        const char          *text;
        mcp_store_refusal_t  refusal;
    } names[] = {
        { "session-streams", MCP_STORE_REFUSED_SESSION_STREAMS },
        { "holder-streams", MCP_STORE_REFUSED_HOLDER_STREAMS },
        { "stream-followers", MCP_STORE_REFUSED_STREAM_FOLLOWERS },
        { "sessions", MCP_STORE_REFUSED_SESSIONS },
        { "holder-sessions", MCP_STORE_REFUSED_HOLDER_SESSIONS },
    };
    apr_size_t i;

    for (i = 0; text && *text && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(text, names[i].text) == 0) {
            return names[i].refusal;
        }
    }
    return MCP_STORE_ADMITTED;
}

/* Reads a result to its end: a random-access result is released when its rows run out. */
static void drain(const mcp_store_t *db, apr_pool_t *p, apr_dbd_results_t *res)
{
    apr_dbd_row_t *row = NULL;

    while (apr_dbd_get_row(db->driver, p, res, &row, -1) == 0) {
    }
}

mcp_store_status_t mcp_store_session_insert_admitted(const mcp_store_t *db, apr_pool_t *p,
                                                     const mcp_store_session_t *s,
                                                     const char *holder, const char *init_request,
                                                     const char *init_response, int max_live,
                                                     int max_per_holder, int idle_secs,
                                                     mcp_store_refusal_t *refused,
                                                     const char **err)
{
    static const char sql[] =
        "WITH a AS ("
        "  SELECT mcp.admit_session(%s, %s::int, %s::int, %s::int) AS refused"
        "), s AS ("
        "  INSERT INTO mcp.sessions (id, backend_url, backend_session_id, protocol_version,"
        "                            principal, client_info, client_capabilities, server_info,"
        "                            holder)"
        "  SELECT %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s FROM a"
        "   WHERE a.refused IS NULL"
        "  RETURNING id, principal"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, direction, kind, message, principal)"
        "  SELECT s.id, v.direction, 'message', v.message, s.principal"
        "    FROM s, (VALUES (1, 'in', %s::jsonb), (2, 'out', %s::jsonb)) AS v(ord, direction, message)"
        "   ORDER BY v.ord"
        ")"
        "SELECT a.refused, s.id FROM a LEFT JOIN s ON true";
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rv;

    *refused = MCP_STORE_ADMITTED;
    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the session insert", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, holder,
                          int_text(p, max_live), int_text(p, max_per_holder),
                          int_text(p, idle_secs), s->id, s->backend_url, s->backend_session_id,
                          s->protocol_version, s->principal, s->client_info,
                          s->client_capabilities, s->server_info, holder, init_request,
                          init_response);
    if (rv != 0) {
        return db_error(db, p, rv, "storing the session", err);
    }
    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        *err = "storing the session: no result";
        return MCP_STORE_ERROR;
    }
    *refused = refusal(apr_dbd_get_entry(db->driver, row, 0));
    drain(db, p, res);
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_session_admissible(const mcp_store_t *db, apr_pool_t *p,
                                                const char *holder, int max_live,
                                                int max_per_holder, int idle_secs,
                                                mcp_store_refusal_t *refused, const char **err)
{
    static const char sql[] =
        "SELECT %s::int > 0 AND count(*) >= %s::int,"
        "       %s::int > 0 AND count(*) FILTER (WHERE holder = %s) >= %s::int"
        "  FROM mcp.sessions WHERE terminated_at IS NULL"
        "   AND (%s::int = 0 OR last_seen_at > now() - make_interval(secs => %s::int))";
    const char *idle = int_text(p, idle_secs), *live = int_text(p, max_live);
    const char *per = int_text(p, max_per_holder);
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rv;

    *refused = MCP_STORE_ADMITTED;
    if (max_live <= 0 && max_per_holder <= 0) {
        return MCP_STORE_OK;
    }
    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the session count", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, live, live, per, holder, per,
                          idle, idle);
    if (rv != 0 || apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        return db_error(db, p, rv, "counting live sessions", err);
    }
    if (strcmp(apr_dbd_get_entry(db->driver, row, 0), "t") == 0) {
        *refused = MCP_STORE_REFUSED_SESSIONS;
    }
    else if (strcmp(apr_dbd_get_entry(db->driver, row, 1), "t") == 0) {
        *refused = MCP_STORE_REFUSED_HOLDER_SESSIONS;
    }
    drain(db, p, res);
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_open_request_admitted(
    const mcp_store_t *db, apr_pool_t *p, mcp_store_session_t *session, int idle_secs,
    const char *request_id, const char *method, const char *inbound, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused, const char **err)
{
    /* The admission comes between the session's check and the stream's insert. */
    static const char sql[] =
        "WITH se AS ("
        "  UPDATE mcp.sessions SET last_seen_at = now()"
        "   WHERE id = %s AND terminated_at IS NULL AND principal IS NOT DISTINCT FROM %s"
        "     AND backend_url = %s"
        "     AND (%s::int = 0 OR last_seen_at > now() - make_interval(secs => %s::int))"
        "  RETURNING id, principal, backend_session_id, protocol_version"
        "), a AS ("
        "  SELECT mcp.admit_stream(se.id, %s, 0, %s::int, %s::int, 0) AS refused FROM se"
        "), s AS ("
        "  INSERT INTO mcp.streams (session_id, kind, request_id, method, owner, lease_until,"
        "                           holder)"
        "  SELECT se.id, 'request', %s::jsonb, %s, %s, now() + make_interval(secs => %s::int), %s"
        "    FROM se, a WHERE a.refused IS NULL"
        "  RETURNING id, session_id"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message, principal)"
        "  SELECT s.session_id, s.id, 0, 'in', 'message', %s::jsonb, se.principal FROM s, se"
        "  UNION ALL"
        "  SELECT s.session_id, s.id, 1, 'out', 'priming', NULL, se.principal FROM s, se"
        ")"
        "SELECT s.id, se.backend_session_id, se.protocol_version, a.refused"
        "  FROM se CROSS JOIN a LEFT JOIN s ON true";
    const char *idle = int_text(p, idle_secs);
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rv;

    *refused = MCP_STORE_ADMITTED;
    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the stream insert", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, session->id,
                          session->principal, session->backend_url, idle, idle, limits->holder,
                          int_text(p, limits->max_session_streams),
                          int_text(p, limits->max_holder_streams), request_id, method, owner,
                          int_text(p, lease_secs), limits->holder, inbound);
    if (rv != 0) {
        return db_error(db, p, rv, "storing the request and its stream", err);
    }
    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        return MCP_STORE_NOT_FOUND;
    }
    session->backend_session_id = entry(db, p, row, 1);
    session->protocol_version = entry(db, p, row, 2);
    *refused = refusal(apr_dbd_get_entry(db->driver, row, 3));
    if (!*refused) {
        *stream_id = apr_atoi64(apr_dbd_get_entry(db->driver, row, 0));
    }
    drain(db, p, res);
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_open_standalone_admitted(
    const mcp_store_t *db, apr_pool_t *p, const mcp_store_session_t *session, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused, const char **err)
{
    static const char close_stale[] =
        "UPDATE mcp.streams SET status = 'closed', completed_at = now()"
        " WHERE session_id = %s AND kind = 'standalone' AND status = 'open'"
        "   AND lease_until < now()";
    static const char sql[] =
        "WITH a AS ("
        "  SELECT mcp.admit_stream(%s, %s, 0, %s::int, %s::int, 0) AS refused"
        "), s AS ("
        "  INSERT INTO mcp.streams (session_id, kind, owner, lease_until, holder)"
        "  SELECT %s, 'standalone', %s, now() + make_interval(secs => %s::int), %s"
        "    FROM a WHERE a.refused IS NULL"
        "  ON CONFLICT (session_id) WHERE kind = 'standalone' AND status = 'open' DO NOTHING"
        "  RETURNING id, session_id"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message, principal)"
        "  SELECT session_id, id, 0, 'out', 'priming', NULL, %s FROM s"
        ")"
        "SELECT a.refused, s.id FROM a LEFT JOIN s ON true";
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    const char *id;
    int rv, nrows = 0, opened;

    *refused = MCP_STORE_ADMITTED;
    if ((rv = prepare(db, p, close_stale, &stmt)) != 0
        || (rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt, session->id)) != 0) {
        return db_error(db, p, rv, "closing a stale standalone stream", err);
    }
    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the standalone stream insert", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, session->id, limits->holder,
                          int_text(p, limits->max_session_streams),
                          int_text(p, limits->max_holder_streams), session->id, owner,
                          int_text(p, lease_secs), limits->holder, session->principal);
    if (rv != 0) {
        return db_error(db, p, rv, "opening the standalone stream", err);
    }
    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        *err = "opening the standalone stream: no result";
        return MCP_STORE_ERROR;
    }
    *refused = refusal(apr_dbd_get_entry(db->driver, row, 0));
    id = apr_dbd_get_entry(db->driver, row, 1);
    opened = id && *id;
    if (opened) {
        *stream_id = apr_atoi64(id);
    }
    drain(db, p, res);          /* frees the result, which id points into */
    return *refused ? MCP_STORE_LIMIT : opened ? MCP_STORE_OK : MCP_STORE_CONFLICT;
}

mcp_store_status_t mcp_store_stream_follow(const mcp_store_t *db, apr_pool_t *p,
                                           const char *session_id, apr_int64_t stream_id,
                                           apr_int64_t seq, const char *owner, int lease_secs,
                                           const mcp_store_limits_t *limits,
                                           mcp_store_stream_t *out, apr_int64_t *follower_id,
                                           mcp_store_refusal_t *refused, const char **err)
{
    /* The look-up, then the follower's admission and row. */
    static const char sql[] =
        "WITH st AS ("
        "  SELECT s.id, s.kind, s.status, (s.status = 'open' AND s.lease_until < now()) AS expired,"
        "         (SELECT max(seq) FROM mcp.events WHERE stream_id = s.id) AS last_seq, s.owner"
        "    FROM mcp.streams s"
        "   WHERE s.id = %s::bigint AND s.session_id = %s"
        "     AND EXISTS (SELECT 1 FROM mcp.events e WHERE e.stream_id = s.id"
        "                    AND e.seq = %s::bigint AND e.direction = 'out')"
        "), a AS ("
        "  SELECT mcp.admit_stream(%s, %s, st.id, %s::int, %s::int, %s::int) AS refused"
        "    FROM st WHERE st.status = 'open'"
        "), f AS ("
        "  INSERT INTO mcp.followers (stream_id, session_id, holder, owner, lease_until)"
        "  SELECT st.id, %s, %s, %s, now() + make_interval(secs => %s::int)"
        "    FROM st, a WHERE a.refused IS NULL"
        "  RETURNING id"
        ")"
        "SELECT st.kind, st.status, st.expired, st.last_seq, st.owner, a.refused, f.id"
        "  FROM st LEFT JOIN a ON true LEFT JOIN f ON true";
    const char *sid = i64(p, stream_id), *id;
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rv;

    *refused = MCP_STORE_ADMITTED;
    *follower_id = 0;
    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the event look-up", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, sid, session_id,
                          i64(p, seq), session_id, limits->holder,
                          int_text(p, limits->max_session_streams),
                          int_text(p, limits->max_holder_streams),
                          int_text(p, limits->max_stream_followers), session_id, limits->holder,
                          owner, int_text(p, lease_secs));
    if (rv != 0) {
        return db_error(db, p, rv, "looking up an event", err);
    }
    if (apr_dbd_get_row(db->driver, p, res, &row, -1) != 0) {
        return MCP_STORE_NOT_FOUND;
    }
    read_stream(db, p, row, stream_id, out);
    *refused = refusal(apr_dbd_get_entry(db->driver, row, 5));
    id = apr_dbd_get_entry(db->driver, row, 6);
    if (id && *id) {
        *follower_id = apr_atoi64(id);
    }
    drain(db, p, res);
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_follower_renew(const mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t follower_id, int lease_secs,
                                            const char **err)
{
    static const char sql[] =
        "UPDATE mcp.followers SET lease_until = now() + make_interval(secs => %s::int)"
        " WHERE id = %s::bigint";
    apr_dbd_prepared_t *stmt;
    int rv, nrows = 0;

    if ((rv = prepare(db, p, sql, &stmt)) != 0
        || (rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt,
                                 int_text(p, lease_secs), i64(p, follower_id))) != 0) {
        return db_error(db, p, rv, "renewing a follower's lease", err);
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_follower_release(const mcp_store_t *db, apr_pool_t *p,
                                              apr_int64_t follower_id, const char **err)
{
    static const char sql[] = "DELETE FROM mcp.followers WHERE id = %s::bigint";
    apr_dbd_prepared_t *stmt;
    int rv, nrows = 0;

    if ((rv = prepare(db, p, sql, &stmt)) != 0
        || (rv = apr_dbd_pvquery(db->driver, p, db->handle, &nrows, stmt,
                                 i64(p, follower_id))) != 0) {
        return db_error(db, p, rv, "releasing a follower", err);
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_events_after_bounded(const mcp_store_t *db, apr_pool_t *p,
                                                  apr_int64_t stream_id, apr_int64_t after_seq,
                                                  int max_rows, apr_off_t max_bytes,
                                                  mcp_store_event_fn *fn, void *baton, int *n,
                                                  int *more, const char **err)
{
    /* The rows up to the one that brings the total to max_bytes: PostgreSQL sends (and libpq
     * holds) about max_bytes and one message, however large the stored messages are. */
    static const char sql[] =
        "SELECT seq, m, running >= %s::bigint FROM ("
        "  SELECT seq, m, sum(len) OVER (ORDER BY seq) AS running, len FROM ("
        "    SELECT seq, m, coalesce(octet_length(m), 0) AS len FROM ("
        "      SELECT seq, message::text AS m FROM mcp.events"
        "       WHERE stream_id = %s::bigint AND seq > %s::bigint AND direction = 'out'"
        "       ORDER BY seq LIMIT %s::int) r) l) t"
        " WHERE running - len < %s::bigint ORDER BY seq";
    const char *bytes = apr_off_t_toa(p, max_bytes);
    apr_dbd_prepared_t *stmt;
    apr_dbd_results_t *res = NULL;
    apr_dbd_row_t *row = NULL;
    int rv, stopped = 0, full = 0;

    *n = 0;
    *more = 0;
    if ((rv = prepare(db, p, sql, &stmt)) != 0) {
        return db_error(db, p, rv, "preparing the replay", err);
    }
    rv = apr_dbd_pvselect(db->driver, p, db->handle, &res, stmt, 1, bytes, i64(p, stream_id),
                          i64(p, after_seq), int_text(p, max_rows), bytes);
    if (rv != 0) {
        return db_error(db, p, rv, "reading stored events", err);
    }
    while (apr_dbd_get_row(db->driver, p, res, &row, -1) == 0) {
        if (!stopped) {
            full = strcmp(apr_dbd_get_entry(db->driver, row, 2), "t") == 0;
            stopped = fn(baton, apr_atoi64(apr_dbd_get_entry(db->driver, row, 0)),
                         apr_dbd_get_entry(db->driver, row, 1));
            (*n)++;
        }
    }
    *more = *n == max_rows || full;
    return MCP_STORE_OK;
}
