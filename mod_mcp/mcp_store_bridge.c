/* mcp_store_bridge — see mcp_store_bridge.h. */
#include <stdlib.h>

#include <apr_strings.h>

#include "mcp_store_bridge.h"
#include "mcp_store_private.h"

#define NARGS(a) MCP_STORE_NARGS(a)

static const char *i64(apr_pool_t *p, apr_int64_t v)
{
    return apr_psprintf(p, "%" APR_INT64_T_FMT, v);
}

/* The live pooled session of principal pr for backend url and capabilities key caps (its id,
 * backend session id, protocol version, serverInfo: columns 0-3), and what its cached tool list
 * says of tool (a list was read, its age in seconds, the tool's declarations: 4-6); more
 * columns in extra. Each an SQL expression: POOLED_AND's are $1-$4. */
#define POOLED_OF(url, caps, pr, tool, extra) \
    "SELECT s.id, s.backend_session_id, s.protocol_version, s.server_info::text AS server_info," \
    "       b.tools_fetched_at IS NOT NULL AS tools_cached," \
    "       extract(epoch FROM now() - b.tools_fetched_at) AS tools_age," \
    "       (b.tool_headers -> " tool ")::text AS tool_decls" \
    extra \
    "  FROM mcp.bridge_sessions b JOIN mcp.sessions s ON s.id = b.session_id" \
    " WHERE b.backend_url = " url " AND b.capabilities_key = " caps \
    "   AND b.principal IS NOT DISTINCT FROM " pr " AND " MCP_STORE_SESSION_UNENDED("s.") \
    "   AND (coalesce(s.idle_timeout_secs, 0) = 0" \
    "        OR s.last_seen_at > now() - make_interval(secs => s.idle_timeout_secs))" \
    " ORDER BY b.created_at DESC LIMIT 1"
#define POOLED_AND(extra) POOLED_OF("$1", "$2", "$3", "$4", extra)
#define POOLED POOLED_AND("")

/* POOLED's row's columns 0-6, at column at of res. */
static void read_pooled(apr_pool_t *p, PGresult *res, int at, const char *principal,
                        const char *backend_url, mcp_store_session_t **out,
                        mcp_store_bridge_tools_t *tools, apr_time_t asked_at)
{
    mcp_store_session_t *s = apr_pcalloc(p, sizeof(*s));

    s->id = mcp_store_cell(res, 0, at);
    s->backend_session_id = mcp_store_cell(res, 0, at + 1);
    s->protocol_version = mcp_store_cell(res, 0, at + 2);
    s->server_info = mcp_store_cell(res, 0, at + 3);
    s->principal = principal;
    s->backend_url = backend_url;
    *out = s;
    if (tools) {
        tools->cached = *PQgetvalue(res, 0, at + 4) == 't';
        tools->age = tools->cached ? strtod(PQgetvalue(res, 0, at + 5), NULL) : 0;
        tools->decls = mcp_store_cell(res, 0, at + 6);
        tools->asked_at = asked_at;
    }
}

mcp_store_status_t mcp_store_bridge_pooled(mcp_store_t *db, apr_pool_t *p, const char *principal,
                                           const char *backend_url, const char *caps_key,
                                           mcp_store_session_t **out)
{
    static const char sql[] = POOLED;
    const char *args[] = { backend_url, caps_key, principal, NULL };   /* no tool */
    mcp_store_status_t rv;
    PGresult *res;

    rv = mcp_store_exec_row(db, p, "finding a pooled backend session", sql, NARGS(args), args,
                            &res);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    read_pooled(p, res, 0, principal, backend_url, out, NULL, 0);
    return MCP_STORE_OK;
}

/* Marks pooled session id seen when it is stale (MCP_STORE_SESSION_STALE), skipping a row that
 * another call marks meanwhile: its own transaction, one row's lock (see
 * mcp_store_bridge_open_call). A failure is left for the pool's next bridged call, which finds
 * the row still stale and tries again: the call that asked for it was already opened and does
 * not depend on it. */
static void pooled_touch(mcp_store_t *db, apr_pool_t *p, const char *id)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET last_seen_at = now()"
        " WHERE id = (SELECT id FROM mcp.sessions"
        "              WHERE id = $1 AND " MCP_STORE_SESSION_UNENDED("")
        "                AND " MCP_STORE_SESSION_STALE
        "                FOR NO KEY UPDATE SKIP LOCKED)";
    const char *args[] = { id };

    mcp_store_exec(db, p, "marking a pooled session seen", sql, NARGS(args), args, NULL);
}

/* pooled_touch by one of the calls of this process that found the row stale at once (the others,
 * and those that found it stale before that mark ended, leave it: marked, or being marked). At
 * the minute a pool's row goes stale every call in flight found it so, and each mark was a
 * transaction on a connection of its own (a new one, with cold caches, when the pool had no
 * idle one). */
static void pooled_touch_once(mcp_store_t *db, apr_pool_t *p, mcp_refresh_t *marks,
                              const char *id, apr_time_t asked_at)
{
    if (mcp_refresh_begin(marks, id, asked_at, apr_time_now())) {
        pooled_touch(db, p, id);
        mcp_refresh_done(marks, id, apr_time_now());
    }
}

/* POOLED, and whether a call of tool $4 (NULL: not a tool call) may go without a check of its
 * Mcp-Param-* headers first: the pool's tool list is younger than $5 seconds and declares none
 * for it (column go, after POOLED's; GO_OF for other expressions). */
#define GO_OF(tool, ttl) \
        ", (" tool " IS NULL OR (b.tools_fetched_at > now() - make_interval(secs => " ttl ")" \
        "                  AND coalesce(b.tool_headers -> " tool ", '[]') = '[]')) AS go"
#define POOLED_GO POOLED_AND(GO_OF("$4", "$5::float8"))

/* The pooled session of CTE p, when go (and cond), its row FOR KEY SHARE: id, principal and
 * whether it is to be marked seen (stale). */
#define POOLED_SHARED(cond) \
        "  SELECT id, principal, " MCP_STORE_SESSION_STALE " AS stale" \
        "    FROM mcp.sessions WHERE id = (SELECT id FROM p WHERE go)" \
        "     AND " MCP_STORE_SESSION_UNENDED("") cond \
        "     FOR KEY SHARE"

mcp_store_status_t mcp_store_bridge_open_call(mcp_store_t *db, apr_pool_t *p,
                                              const mcp_store_bridge_open_t *call,
                                              mcp_store_session_t **out,
                                              mcp_store_bridge_tools_t *tools,
                                              apr_int64_t *stream_id)
{
    /* The pool's look-up (as mcp_store_bridge_pooled), then what
     * mcp_store_stream_open_request_admitted does without limits (the bridge admits its
     * backend streams unlimited: the client's stream was admitted), then the link. The pooled
     * session's row is only ever taken FOR KEY SHARE here (every bridged call of the pool shares
     * it; an UPDATE on each call held it to the commit, and each waited for the others' WAL
     * flush), so the statement runs in the child's group with the other calls' statements,
     * keyed by the client's stream (the one row it updates): KEY SHARE conflicts with no lock a
     * group, a lease renewal or a touch takes, so the group's lock order holds. A stale row
     * (MCP_STORE_SESSION_STALE) is marked seen afterwards, in a transaction of its own
     * (pooled_touch). */
#define SQL(JSONB) \
        "WITH p AS (" POOLED_GO "), se AS (" POOLED_SHARED("") "), s AS (" \
        "  INSERT INTO mcp.streams (session_id, kind, request_id_text, request_id, method, owner," \
        "                           lease_until, holder, trace_id)" \
        "  SELECT se.id, 'request', $6, " JSONB("$6") ", $7, $8," \
        "         now() + make_interval(secs => $9::int), $10," \
        "         (SELECT c.trace_id FROM mcp.streams c WHERE c.id = $12) FROM se" \
        "  RETURNING id, session_id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT s.session_id, s.id, 0, 'in', 'message', $11, " JSONB("$11") "," \
        "         se.principal FROM s, se" \
        "  UNION ALL" \
        "  SELECT s.session_id, s.id, 1, 'out', 'priming', NULL, NULL, se.principal FROM s, se" \
        "), l AS (" \
        "  UPDATE mcp.streams c SET bridged_to = s.id FROM s WHERE c.id = $12" \
        ")" \
        "SELECT p.*, s.id, se.stale FROM p LEFT JOIN s ON true LEFT JOIN se ON true"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    const char *args[] = {
        call->backend_url, call->caps_key, call->principal, call->tool,
        apr_psprintf(p, "%.3f", call->tools_ttl), call->request_id, call->method, call->owner,
        apr_itoa(p, call->lease_secs), call->holder, call->sent, i64(p, call->client_stream)
    };
    mcp_store_status_t rv;
    PGresult *res;
    apr_time_t asked_at = apr_time_now();

    /* The request id is a decimal number; the request sent, valid JSON (json-c wrote it). */
    rv = mcp_store__exec_as(db, p, "opening a bridged call's backend stream",
                            mcp_store__plain_jsonb(call->sent) ? plain : audited, NARGS(args),
                            args, &res, call->client_stream);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        return MCP_STORE_NOT_FOUND;
    }
    read_pooled(p, res, 0, call->principal, call->backend_url, out, tools, asked_at);
    *stream_id = PQgetisnull(res, 0, 8) ? 0 : apr_atoi64(PQgetvalue(res, 0, 8));   /* after p.* */
    if (*PQgetvalue(res, 0, 9) == 't') {
        pooled_touch_once(db, p, call->marks, (*out)->id, asked_at);
    }
    return MCP_STORE_OK;
}

/* The group's merge of mcp_store_bridge_open_stateless's statement: each parameter the array of
 * the instances' own, x.ord numbering them. The client streams are admitted in order by
 * mcp.admit_streams, each counting the slots of those before it (as OPEN_STATELESS_MANY); each
 * admitted call looks up its own pooled session, and those to be opened on are locked once
 * each, FOR KEY SHARE, in id order.
 * x's LIMIT (its own length) changes nothing but the plan PostgreSQL keeps: with it the generic
 * plan counts one row of x (a LIMIT not known when planning is costed at a tenth of its input),
 * not ten, and costs less than any plan made for the rows of one run, so each connection keeps
 * it after its first five runs. Without it a plan made for a run of a few instances could look
 * the cheaper one (costs 159 against the generic 226 for three), and the statement was then
 * planned again at each run, 1.1 ms of planning where its execution takes 0.9 (in one
 * benchmark run of two: 0.53 plans per run, ~100 us of PostgreSQL CPU per bridged call). The
 * other merged statements' generic plans cost no more than one made for a run. */
#define OPEN_STATELESS_CALLS(JSONB) \
        "WITH x AS (" \
        "  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[]," \
        "                       $6::text[], $7::int[], $8::text[], $9::text[], $10::text[]," \
        "                       $11::int[], $12::text[], $13::text[], $14::text[], $15::text[]," \
        "                       $16::text[])" \
        "         WITH ORDINALITY AS x(backend_url, caps_key, principal, tool, ttl, holder," \
        "                              max_holder, request_id, method, owner, lease," \
        "                              protocol_version, inbound, trace_id, member, tail, ord)" \
        "   LIMIT cardinality($1::text[])" \
        "), a AS (" \
        MCP_STORE__ADMIT_STATELESS_X \
        "), p AS (" \
        "  SELECT x.ord, pl.* FROM x LEFT JOIN LATERAL (" \
        POOLED_OF("x.backend_url", "x.caps_key", "x.principal", "x.tool", \
                  GO_OF("x.tool", "x.ttl")) \
        "  ) pl ON true" \
        "), se AS (" \
        "  SELECT id, principal, " MCP_STORE_SESSION_STALE " AS stale FROM mcp.sessions" \
        "   WHERE id IN (SELECT p.id FROM p JOIN a ON a.ord = p.ord" \
        "                 WHERE p.go AND a.refused IS NULL)" \
        "     AND " MCP_STORE_SESSION_UNENDED("") \
        "   ORDER BY id FOR KEY SHARE" \
        "), c AS (" \
        "  SELECT a.ord, a.id, mcp.stream_id_new() AS bid, se.id AS session_id, se.principal" \
        "    FROM a JOIN p ON p.ord = a.ord JOIN se ON se.id = p.id WHERE a.refused IS NULL" \
        "), bs AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, trace_id)" \
        "  SELECT c.bid, c.session_id, 'request', c.id::text, to_jsonb(c.id), x.method, x.owner," \
        "         now() + make_interval(secs => x.lease), x.holder, x.trace_id" \
        "    FROM c JOIN x ON x.ord = c.ord ORDER BY c.bid" \
        "  RETURNING id, session_id" \
        "), s AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, protocol_version, principal," \
        "                           trace_id, member, bridged_to)" \
        "  SELECT a.id, NULL, 'request', x.request_id, " JSONB("x.request_id") ", x.method," \
        "         x.owner, now() + make_interval(secs => x.lease), x.holder, x.protocol_version," \
        "         x.principal, x.trace_id, x.member, (SELECT bs.id FROM bs WHERE bs.id = c.bid)" \
        "    FROM a JOIN x ON x.ord = a.ord LEFT JOIN c ON c.ord = a.ord" \
        "   WHERE a.refused IS NULL ORDER BY a.id" \
        "  RETURNING id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT v.* FROM (" \
        "    SELECT NULL AS session_id, s.id, 0 AS seq, 'in' AS direction, 'message' AS kind," \
        "           x.inbound AS t, " JSONB("x.inbound") " AS m, x.principal" \
        "      FROM s JOIN a ON a.id = s.id JOIN x ON x.ord = a.ord" \
        "    UNION ALL" \
        "    SELECT bs.session_id, bs.id, 0, 'in', 'message', w.t, " JSONB("w.t") ", c.principal" \
        "      FROM bs JOIN c ON c.bid = bs.id" \
        "      JOIN LATERAL (SELECT '{\"id\":' || c.id || x.tail AS t FROM x WHERE x.ord = c.ord) w" \
        "        ON true" \
        "    UNION ALL" \
        "    SELECT bs.session_id, bs.id, 1, 'out', 'priming', NULL, NULL, c.principal" \
        "      FROM bs JOIN c ON c.bid = bs.id) v" \
        "   ORDER BY v.id, v.seq" \
        ")" \
        "SELECT p.id, p.backend_session_id, p.protocol_version, p.server_info, p.tools_cached," \
        "       p.tools_age, p.tool_decls, p.go, a.id, a.refused, c.bid, se.stale, x.ord" \
        "  FROM x JOIN a ON a.ord = x.ord LEFT JOIN p ON p.ord = x.ord" \
        "  LEFT JOIN c ON c.ord = x.ord LEFT JOIN se ON se.id = c.session_id"

mcp_store_status_t mcp_store_bridge_open_stateless(mcp_store_t *db, apr_pool_t *p,
                                                   const mcp_store_stateless_t *client,
                                                   const mcp_store_bridge_open_t *call,
                                                   apr_int64_t *client_stream,
                                                   mcp_store_refusal_t *refused,
                                                   mcp_store_session_t **out,
                                                   mcp_store_bridge_tools_t *tools,
                                                   apr_int64_t *stream_id)
{
    /* mcp_store_stream_open_stateless_admitted's statement and mcp_store_bridge_open_call's
     * in one: a call's two openings with one commit. Both stream ids are made first (the
     * backend one is wasted when the backend stream is not opened): the client stream is
     * inserted linked (bridged_to, checked at the statement's end, when both rows are there),
     * and the backend's request is the call's text with the client stream's id written in
     * ('{"id":' || id || tail: the text C sends, mcp_bridge_request_join). The pooled session
     * only when the client stream was admitted. In the group as the stateless opening, after
     * the streams' statements: its locks are slots (taken skipping) and the pooled session's
     * row FOR KEY SHARE (see mcp_store_bridge_open_call). */
#define SQL(JSONB) \
        "WITH a AS (" \
        "  SELECT i.id, i.bid," \
        "         mcp.admit_stream(NULL, $6, 0, 0, $7::int, 0, i.id, NULL) AS refused" \
        "    FROM (SELECT mcp.stream_id_new() AS id, mcp.stream_id_new() AS bid) i" \
        "), p AS (" POOLED_GO \
        "), se AS (" POOLED_SHARED(" AND (SELECT refused FROM a) IS NULL") \
        "), bs AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, trace_id)" \
        "  SELECT a.bid, se.id, 'request', a.id::text, to_jsonb(a.id), $9, $10," \
        "         now() + make_interval(secs => $11::int), $6, $14 FROM a, se" \
        "  RETURNING id, session_id" \
        "), s AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, protocol_version, principal," \
        "                           trace_id, member, bridged_to)" \
        "  SELECT a.id, NULL, 'request', $8, " JSONB("$8") ", $9, $10," \
        "         now() + make_interval(secs => $11::int), $6, $12, $3, $14, $15," \
        "         (SELECT id FROM bs)" \
        "    FROM a WHERE a.refused IS NULL" \
        "  RETURNING id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT NULL, s.id, 0, 'in', 'message', $13, " JSONB("$13") ", $3 FROM s" \
        "  UNION ALL" \
        "  SELECT bs.session_id, bs.id, 0, 'in', 'message', v.t, " JSONB("v.t") ", se.principal" \
        "    FROM bs, se, (SELECT '{\"id\":' || a.id || $16 AS t FROM a) v" \
        "  UNION ALL" \
        "  SELECT bs.session_id, bs.id, 1, 'out', 'priming', NULL, NULL, se.principal FROM bs, se" \
        ")" \
        "SELECT p.*, a.id, a.refused, bs.id, se.stale" \
        "  FROM a LEFT JOIN p ON true LEFT JOIN bs ON true LEFT JOIN se ON true"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    static const mcp_store__mergeable_t
        plain_many = { OPEN_STATELESS_CALLS(JSONB_PLAIN), 1, -1, 0 },
        audited_many = { OPEN_STATELESS_CALLS(JSONB_AUDITED), 1, -1, 0 };
    const char *args[] = {
        call->backend_url, call->caps_key, call->principal, call->tool,
        apr_psprintf(p, "%.3f", call->tools_ttl), client->limits->holder,
        mcp_store__int_text(p, client->limits->max_holder_streams), client->request_id,
        client->method, client->owner, mcp_store__int_text(p, client->lease_secs),
        client->protocol_version, client->inbound, client->trace_id, client->member,
        call->sent
    };
    mcp_store_status_t rv;
    PGresult *res;
    apr_time_t asked_at = apr_time_now();
    int is_plain = mcp_store__plain_jsonb(client->request_id)
                   && mcp_store__plain_jsonb(client->inbound) && mcp_store__plain_jsonb(call->sent);

    *client_stream = *stream_id = 0;
    *out = NULL;
    *refused = MCP_STORE_ADMITTED;
    rv = mcp_store__exec_mergeable(db, p, "storing a bridged call's request and its two streams",
                                   is_plain ? plain : audited, NARGS(args), args, &res,
                                   MCP_STORE__KEY_SESSIONS, is_plain ? &plain_many : &audited_many);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        db->error = "storing a bridged call's request: no result";
        return MCP_STORE_UNAVAILABLE;
    }
    /* p.*: POOLED's 7 columns and go; then 8-11. */
    if ((*refused = mcp_store__refusal(mcp_store_cell(res, 0, 9))) != MCP_STORE_ADMITTED) {
        return MCP_STORE_LIMIT;
    }
    *client_stream = apr_atoi64(PQgetvalue(res, 0, 8));
    if (PQgetisnull(res, 0, 0)) {
        return MCP_STORE_NOT_FOUND;
    }
    read_pooled(p, res, 0, call->principal, call->backend_url, out, tools, asked_at);
    *stream_id = PQgetisnull(res, 0, 10) ? 0 : apr_atoi64(PQgetvalue(res, 0, 10));
    if (*PQgetvalue(res, 0, 11) == 't') {
        pooled_touch_once(db, p, call->marks, (*out)->id, asked_at);
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_bridge_tools_set(mcp_store_t *db, apr_pool_t *p,
                                              const char *session_id, const char *headers)
{
    static const char sql[] =
        "UPDATE mcp.bridge_sessions SET tool_headers = $2::jsonb, tools_fetched_at = now()"
        " WHERE session_id = $1";
    const char *args[] = { session_id, headers };

    return mcp_store_exec(db, p, "caching a pooled session's tool list", sql, NARGS(args), args,
                          NULL);
}

mcp_store_status_t mcp_store_bridge_pool_add(mcp_store_t *db, apr_pool_t *p,
                                             const char *session_id, const char *principal,
                                             const char *backend_url, const char *caps_key,
                                             const char *init_result)
{
    static const char sql[] =
        "WITH b AS ("
        "  INSERT INTO mcp.bridge_sessions (session_id, principal, backend_url, capabilities_key)"
        "  VALUES ($1, $2, $3, $4)"
        ") INSERT INTO mcp.bridge_backends (backend_url, initialize_result) VALUES ($3, $5)"
        "  ON CONFLICT (backend_url) DO UPDATE"
        "  SET initialize_result = EXCLUDED.initialize_result, fetched_at = now()";
    const char *args[] = { session_id, principal, backend_url, caps_key, init_result };

    return mcp_store_exec(db, p, "pooling a backend session", sql, NARGS(args), args, NULL);
}

mcp_store_status_t mcp_store_bridge_init_result(mcp_store_t *db, apr_pool_t *p,
                                                const char *backend_url, const char **out)
{
    static const char sql[] =
        "SELECT initialize_result FROM mcp.bridge_backends WHERE backend_url = $1";
    const char *args[] = { backend_url };
    mcp_store_status_t rv;
    PGresult *res;

    rv = mcp_store_exec_row(db, p, "reading a backend's InitializeResult", sql, NARGS(args),
                            args, &res);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    *out = mcp_store_cell(res, 0, 0);
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_bridge_link(mcp_store_t *db, apr_pool_t *p,
                                         apr_int64_t client_stream, apr_int64_t backend_stream)
{
    static const char sql[] = "UPDATE mcp.streams SET bridged_to = $2 WHERE id = $1";
    const char *args[] = { i64(p, client_stream), i64(p, backend_stream) };

    return mcp_store_exec(db, p, "linking a bridged call's streams", sql, NARGS(args), args,
                          NULL);
}

mcp_store_status_t mcp_store_bridge_call_of(mcp_store_t *db, apr_pool_t *p, const char *principal,
                                            const char *request_id, int max_age_secs,
                                            mcp_store_bridge_call_t *out)
{
    static const char sql[] =
        "SELECT s.id, s.backend_session_id, s.protocol_version, b.id, b.request_id #>> '{}'"
        "  FROM mcp.streams c"
        "  JOIN mcp.streams b ON b.id = c.bridged_to AND b.status = 'open'"
        "  JOIN mcp.sessions s ON s.id = b.session_id"
        " WHERE c.session_id IS NULL AND c.request_id = $1::jsonb"
        "   AND c.principal IS NOT DISTINCT FROM $2"
        "   AND c.created_at > now() - make_interval(secs => $3::int)"
        " ORDER BY c.id DESC LIMIT 1";
    const char *args[] = { request_id, principal, apr_itoa(p, max_age_secs) };
    mcp_store_status_t rv;
    PGresult *res;

    rv = mcp_store_exec_row(db, p, "finding a bridged call", sql, NARGS(args), args, &res);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    out->session_id = mcp_store_cell(res, 0, 0);
    out->backend_session_id = mcp_store_cell(res, 0, 1);
    out->protocol_version = mcp_store_cell(res, 0, 2);
    out->stream_id = apr_atoi64(PQgetvalue(res, 0, 3));
    out->backend_request_id = apr_atoi64(PQgetvalue(res, 0, 4));
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_bridge_cancel(mcp_store_t *db, apr_pool_t *p, apr_int64_t stream_id)
{
    static const char sql[] =
        "WITH c AS (UPDATE mcp.streams SET status = 'cancelled', completed_at = now()"
        "            WHERE id = $1 AND status = 'open' RETURNING id)"
        "SELECT pg_notify('mcp_events', id::text) FROM c";
    const char *args[] = { i64(p, stream_id) };

    return mcp_store_exec(db, p, "cancelling a bridged backend stream", sql, NARGS(args), args,
                          NULL);
}

mcp_store_status_t mcp_store_bridge_round_add(mcp_store_t *db, apr_pool_t *p, const char *state,
                                              const char *principal, const char *digest,
                                              const mcp_store_bridge_round_t *round,
                                              int ttl_secs)
{
    static const char sql[] =
        "WITH f AS (UPDATE mcp.streams SET followed = true WHERE id = $5 AND NOT followed)"
        "INSERT INTO mcp.bridge_rounds (state, principal, request_digest, session_id, stream_id,"
        "                               backend_request_id, position, pending, expires_at)"
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9::int))";
    const char *args[] = {
        state, principal, digest, round->session_id, i64(p, round->stream_id),
        i64(p, round->backend_request_id), i64(p, round->position), round->pending,
        apr_itoa(p, ttl_secs)
    };

    return mcp_store_exec(db, p, "storing an input-required round", sql, NARGS(args), args,
                          NULL);
}

mcp_store_status_t mcp_store_bridge_round_claim(mcp_store_t *db, apr_pool_t *p, const char *state,
                                                const char *principal, const char *digest,
                                                mcp_store_bridge_claim_t *verdict,
                                                mcp_store_bridge_round_t *out)
{
    static const char sql[] =
        "WITH r AS (SELECT * FROM mcp.bridge_rounds WHERE state = $1),"
        " u AS (UPDATE mcp.bridge_rounds SET used_at = now()"
        "        WHERE state = $1 AND used_at IS NULL AND expires_at > now()"
        "          AND principal IS NOT DISTINCT FROM $2 AND request_digest = $3"
        "        RETURNING session_id, stream_id, backend_request_id, position, pending)"
        "SELECT r.state IS NOT NULL, r.principal IS NOT DISTINCT FROM $2,"
        "       r.request_digest = $3, r.expires_at > now(), r.used_at IS NULL,"
        "       u.session_id, s.backend_session_id, s.protocol_version, u.stream_id,"
        "       u.backend_request_id, u.position, u.pending, s.server_info::text"
        "  FROM (SELECT 1) AS one LEFT JOIN r ON true LEFT JOIN u ON true"
        "  LEFT JOIN mcp.sessions s ON s.id = u.session_id";
    const char *args[] = { state, principal, digest };
    mcp_store_status_t rv;
    PGresult *res;

    rv = mcp_store_exec(db, p, "claiming an input-required round", sql, NARGS(args), args, &res);
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1 || *PQgetvalue(res, 0, 0) != 't') {
        *verdict = MCP_STORE_BRIDGE_UNKNOWN;
    }
    else if (*PQgetvalue(res, 0, 1) != 't') {
        *verdict = MCP_STORE_BRIDGE_OTHER_PRINCIPAL;
    }
    else if (*PQgetvalue(res, 0, 2) != 't') {
        *verdict = MCP_STORE_BRIDGE_OTHER_REQUEST;
    }
    else if (*PQgetvalue(res, 0, 4) != 't') {
        *verdict = MCP_STORE_BRIDGE_USED;
    }
    else if (*PQgetvalue(res, 0, 3) != 't' || PQgetisnull(res, 0, 5)) {
        *verdict = MCP_STORE_BRIDGE_EXPIRED;
    }
    else {
        *verdict = MCP_STORE_BRIDGE_CLAIMED;
        out->session_id = mcp_store_cell(res, 0, 5);
        out->backend_session_id = mcp_store_cell(res, 0, 6);
        out->protocol_version = mcp_store_cell(res, 0, 7);
        out->stream_id = apr_atoi64(PQgetvalue(res, 0, 8));
        out->backend_request_id = apr_atoi64(PQgetvalue(res, 0, 9));
        out->position = apr_atoi64(PQgetvalue(res, 0, 10));
        out->pending = mcp_store_cell(res, 0, 11);
        out->server_info = mcp_store_cell(res, 0, 12);
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_bridge_round_claimed(mcp_store_t *db, apr_pool_t *p,
                                                  apr_int64_t stream_id, apr_int64_t position,
                                                  int *claimed)
{
    static const char sql[] =
        "SELECT count(*) FILTER (WHERE used_at IS NOT NULL) > 0 FROM mcp.bridge_rounds"
        " WHERE stream_id = $1 AND position = $2";
    const char *args[] = { i64(p, stream_id), i64(p, position) };
    mcp_store_status_t rv;
    PGresult *res;

    rv = mcp_store_exec(db, p, "looking at an input-required round", sql, NARGS(args), args,
                        &res);
    if (rv == MCP_STORE_OK) {
        *claimed = PQntuples(res) > 0 && *PQgetvalue(res, 0, 0) == 't';
    }
    return rv;
}
