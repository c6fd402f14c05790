/* mcp_store_stream — a stream's statements: its look-up, and the end of the open streams
 * whose owner is gone or whose session ended (with a stored error for each unanswered
 * request id); see mcp_store.h. Opening one (admitted under the limits) is in
 * mcp_store_limits.c, its events in mcp_store_event.c, its lease in mcp_store_lease.c. */
#include <string.h>

#include <apr_strings.h>

#include "mcp_store_private.h"

#define STREAM_COLUMNS \
    "SELECT s.kind, s.status, (s.status = 'open' AND s.lease_until < now())," \
    "       (SELECT max(seq) FROM mcp.events WHERE stream_id = s.id), s.owner" \
    "  FROM mcp.streams s"

/* The first row's kind, status, lease_expired, last_seq and owner (columns 0-4). */
void mcp_store__read_stream(PGresult *res, apr_int64_t stream_id, mcp_store_stream_t *out)
{
    const char *last = mcp_store_cell(res, 0, 3);

    out->id = stream_id;
    out->kind = mcp_store_cell(res, 0, 0);
    out->status = mcp_store_cell(res, 0, 1);
    out->lease_expired = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    out->last_seq = last && *last ? apr_atoi64(last) : -1;
    out->owner = mcp_store_cell(res, 0, 4);
}

/* One stream row selected by sql (STREAM_COLUMNS ...) with n bound arguments. */
static mcp_store_status_t select_stream(mcp_store_t *db, apr_pool_t *p, const char *sql,
                                        const char *what, int n, const char *const *args,
                                        apr_int64_t stream_id, mcp_store_stream_t *out)
{
    mcp_store_status_t rv;
    PGresult *res;

    if ((rv = mcp_store_exec_row(db, p, what, sql, n, args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    mcp_store__read_stream(res, stream_id, out);
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_get(mcp_store_t *db, apr_pool_t *p,
                                        apr_int64_t stream_id, mcp_store_stream_t *out)
{
    static const char sql[] = STREAM_COLUMNS " WHERE s.id = $1::bigint";
    const char *args[1];

    args[0] = mcp_store__i64(p, stream_id);
    return select_stream(db, p, sql, "looking up a stream", NARGS(args), args, stream_id, out);
}
/* The first column of the first row as a bigint; NOT_FOUND when there is no row. */
static mcp_store_status_t first_id(PGresult *res, apr_int64_t *out)
{
    if (PQntuples(res) < 1) {
        return MCP_STORE_NOT_FOUND;
    }
    *out = apr_atoi64(PQgetvalue(res, 0, 0));
    return MCP_STORE_OK;
}

/* Ends the open streams that where_sql ($1) selects: request streams become 'failed' and
 * answer each of their request ids that has no stored response with a stored JSON-RPC error
 * (code, message: $2), standalone streams become 'closed'. The status change wakes their owners
 * and followers (NOTIFY). The conditional UPDATE is the "exactly once": it locks each row, and
 * whoever comes second finds the stream no longer open. *ended gets how many this call ended.
 *
 * Whether an id has a response is read from the texts (a jsonb copy may be NULL: a number
 * beyond numeric's range anywhere in the message), through the json type, which keeps numbers
 * as written: the response's id answers the request's when their JSON texts are the same (with
 * \u0000 and surrogate escapes read as \ufffd, mcp.json_pg_safe: ids differing only there
 * count as one), or, for ids whose text holds no escape, when their jsonb values are (1.0
 * answers 1). */
static mcp_store_status_t streams_end(mcp_store_t *db, apr_pool_t *p, const char *what,
                                      const char *where_sql, const char *selector, int code,
                                      const char *message, long *ended)
{
    static const char head[] =
        "WITH ended AS ("
        "  UPDATE mcp.streams"
        "     SET status = CASE kind WHEN 'request' THEN 'failed' ELSE 'closed' END,"
        "         completed_at = now()"
        "   WHERE status = 'open' AND ";
    /* Row locks in id order, as the group commit takes them: never a deadlock with it. */
    static const char locked[] =
        "     AND id IN (SELECT id FROM mcp.streams WHERE status = 'open' AND ";
    static const char tail[] =
        "                 ORDER BY id FOR NO KEY UPDATE)"
        "  RETURNING id, session_id, kind, request_id_text"
        "), ids AS ("
        "  SELECT x.id AS stream_id, x.session_id, r.id::text AS id, r.ord"
        "    FROM ended x,"
        "         json_array_elements(CASE json_typeof(x.request_id_text::json) WHEN 'array'"
        "                             THEN x.request_id_text ELSE '[' || x.request_id_text || ']'"
        "                             END::json) WITH ORDINALITY AS r(id, ord)"
        "   WHERE x.kind = 'request'"
        /* Only ids without a stored response: never two answers for one request. */
        "     AND NOT EXISTS ("
        "         SELECT 1 FROM mcp.events e,"
        "                LATERAL (SELECT mcp.json_pg_safe(e.message_text)::json AS m) j"
        "          WHERE e.stream_id = x.id AND e.direction = 'out' AND e.kind = 'message'"
        "            AND json_typeof(j.m) = 'object'"
        "            AND (j.m -> 'result' IS NOT NULL OR j.m -> 'error' IS NOT NULL)"
        "            AND ((j.m -> 'id')::text = mcp.json_pg_safe(r.id::text)"
        "                 OR (strpos(r.id::text, '\\') = 0"
        "                     AND e.message -> 'id' = mcp.audit_jsonb(r.id::text))))"
        "), answers AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text,"
        "                          message, principal)"
        "  SELECT i.session_id, i.stream_id,"
        "         (SELECT coalesce(max(e.seq), 0) FROM mcp.events e WHERE e.stream_id = i.stream_id)"
        "           + row_number() OVER (PARTITION BY i.stream_id ORDER BY i.ord),"
        "         'out', 'message', a.t, mcp.audit_jsonb(a.t),"
        "         (SELECT principal FROM mcp.sessions s WHERE s.id = i.session_id)"
        "    FROM ids i,"
        "         LATERAL (SELECT '{\"jsonrpc\":\"2.0\",\"id\":' || i.id"
        "                         || ',\"error\":{\"code\":' || $3::int || ',\"message\":'"
        "                         || to_json($2::text)::text || '}}' AS t) a"
        "   ORDER BY i.stream_id, i.ord"
        /* Their owners watch them (a relay stops when its stream ended elsewhere): every stream
         * ended here is notified, followed or not (the status trigger only notifies followed
         * ones, so that an owner's own finish takes no notify lock). */
        "), woken AS ("
        "  SELECT pg_notify('mcp_events', id::text) FROM ended"
        ")"
        "SELECT (SELECT count(*) FROM ended), (SELECT count(*) FROM woken)";
    const char *args[3];
    mcp_store_status_t rv;
    apr_int64_t n = 0;
    PGresult *res;

    args[0] = selector;
    args[1] = message;
    args[2] = mcp_store__int_text(p, code);
    rv = mcp_store_exec(db, p, what, apr_pstrcat(p, head, where_sql, locked, where_sql, tail,
                                                  NULL),
                        NARGS(args), args, &res);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    first_id(res, &n);
    *ended = (long)n;
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_streams_expire(mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t stream_id, const char *message,
                                            long *finished)
{
    /* Two texts, not one with "$1 = 0 OR id = $1": its generic plan read every open stream
     * (streams_open_idx) for one id too. By id, the primary key finds the one stream; the
     * sweep reads the open ones and checks each one's lease. */
    return streams_end(db, p, "finishing streams whose owner is gone",
                       stream_id ? "lease_until < now() AND id = $1::bigint"
                                 : "lease_until < now() AND $1::bigint = 0",
                       mcp_store__i64(p, stream_id), -32002, message, finished);
}

mcp_store_status_t mcp_store_session_streams_end(mcp_store_t *db, apr_pool_t *p,
                                                 const char *session_id, const char *message,
                                                 long *ended)
{
    return streams_end(db, p, "ending a session's streams", "session_id = $1", session_id,
                       -32001, message, ended);
}
