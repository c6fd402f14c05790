/* mcp_store_limits — admission control: the statements that check the limits (mcp.admit_*,
 * sql/schema.sql) and store what they admit in one, a session, a request's or a standalone
 * stream, a follower; see mcp_store.h. */
#include <string.h>

#include <apr_strings.h>

#include "mcp_store_members.h"
#include "mcp_store_private.h"

mcp_store_refusal_t mcp_store__refusal(const char *text)
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

mcp_store_status_t mcp_store_session_insert_admitted(mcp_store_t *db, apr_pool_t *p,
                                                     const mcp_store_session_t *s,
                                                     const char *holder, const char *init_request,
                                                     const char *init_response, int max_live,
                                                     int max_per_holder, int idle_secs,
                                                     mcp_store_refusal_t *refused)
{
    static const char sql[] =
        "WITH a AS ("
        "  SELECT mcp.admit_session($1, $2::int, $3::int, $4::int) AS refused"
        "), s AS ("
        "  INSERT INTO mcp.sessions (id, backend_url, backend_session_id, protocol_version,"
        "                            principal, client_info, client_capabilities, server_info,"
        "                            holder, idle_timeout_secs, trace_id)"
        "  SELECT $5, $6, $7, $8, $9, mcp.audit_jsonb($10::text), mcp.audit_jsonb($11::text),"
        "         mcp.audit_jsonb($12::text), $1, $4::int, $15 FROM a"
        "   WHERE a.refused IS NULL"
        "  RETURNING id, principal"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, direction, kind, message_text, message, principal)"
        "  SELECT s.id, v.direction, 'message', v.t, mcp.audit_jsonb(v.t), s.principal"
        "    FROM s, (VALUES (1, 'in', $13::text), (2, 'out', $14::text)) AS v(ord, direction, t)"
        "   ORDER BY v.ord"
        ")"
        "SELECT a.refused, s.id FROM a LEFT JOIN s ON true";
    const char *args[15];
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    args[0] = holder;
    args[1] = mcp_store__int_text(p, max_live);
    args[2] = mcp_store__int_text(p, max_per_holder);
    args[3] = mcp_store__int_text(p, idle_secs);
    args[4] = s->id;
    args[5] = s->backend_url;
    args[6] = s->backend_session_id;
    args[7] = s->protocol_version;
    args[8] = s->principal;
    args[9] = s->client_info;
    args[10] = s->client_capabilities;
    args[11] = s->server_info;
    args[12] = init_request;
    args[13] = init_response;
    args[14] = s->trace_id;
    rv = mcp_store_exec(db, p, "storing the session", sql, NARGS(args), args, &res);
    if (rv == MCP_STORE_REFUSED && db->sqlstate && strcmp(db->sqlstate, "23505") == 0
        && strstr(db->error, "sessions_pkey")) {
        /* A retry after a try whose outcome was unknown (the connection broke after the
         * server got it): that try stored the session (its id is 192 random bits: nothing
         * else can hold it). */
        return MCP_STORE_OK;
    }
    if (rv != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        db->sqlstate = NULL;
        db->error = "storing the session: no result";
        return MCP_STORE_REFUSED;
    }
    *refused = mcp_store__refusal(mcp_store_cell(res, 0, 0));
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_session_admissible(mcp_store_t *db, apr_pool_t *p,
                                                const char *holder, int max_live,
                                                int max_per_holder, int idle_secs,
                                                mcp_store_refusal_t *refused)
{
    static const char sql[] =
        "SELECT $1::int > 0 AND count(*) >= $1::int,"
        "       $2::int > 0 AND count(*) FILTER (WHERE holder = $3) >= $2::int"
        "  FROM mcp.sessions WHERE terminated_at IS NULL"
        "   AND ($4::int = 0 OR last_seen_at > now() - make_interval(secs => $4::int))";
    const char *args[4];
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    if (max_live <= 0 && max_per_holder <= 0) {
        return MCP_STORE_OK;
    }
    args[0] = mcp_store__int_text(p, max_live);
    args[1] = mcp_store__int_text(p, max_per_holder);
    args[2] = holder;
    args[3] = mcp_store__int_text(p, idle_secs);
    if ((rv = mcp_store_exec(db, p, "counting live sessions", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 0), "t") == 0) {
        *refused = MCP_STORE_REFUSED_SESSIONS;
    }
    else if (PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 1), "t") == 0) {
        *refused = MCP_STORE_REFUSED_HOLDER_SESSIONS;
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

/* The opening of several request streams (the group's merge of the statement below): each
 * parameter the array of the instances' own, x.ord numbering them. The session rows are locked
 * in id order, each in one mode as there (touched when stale, else FOR KEY SHARE), once for all
 * its instances, and re-checked for each instance after the lock (the idle limit against its
 * activity before the touch); mcp.admit_streams admits the live ones in order, each counting
 * the slots of those before it. */
#define LIVE_FOR_X(s) \
        MCP_STORE_SESSION_UNENDED(s ".") " AND " s ".principal IS NOT DISTINCT FROM x.principal" \
        " AND " s ".backend_url = x.backend_url" \
        " AND (x.idle = 0 OR " s ".last_seen_at > now() - make_interval(secs => x.idle))"
#define OPEN_MANY(JSONB) \
        "WITH x AS (" \
        "  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[]," \
        "                       $6::int[], $7::int[], $8::text[], $9::text[], $10::text[]," \
        "                       $11::int[], $12::text[], $13::text[], $14::text[], $15::text[]," \
        "                       $16::boolean[])" \
        "         WITH ORDINALITY AS x(session_id, principal, backend_url, idle, holder," \
        "                              max_session, max_holder, request_id, method, owner," \
        "                              lease, inbound, primed, trace_id, member, members, ord)" \
        "), cur AS (" \
        "  SELECT id, " MCP_STORE_SESSION_STALE " AS stale FROM mcp.sessions" \
        "   WHERE id = ANY ($1::text[])" \
        "), stale AS (" \
        "  SELECT s.id, s.last_seen_at FROM mcp.sessions s" \
        "   WHERE s.id IN (SELECT id FROM cur WHERE stale)" \
        "     AND EXISTS (SELECT 1 FROM x WHERE x.session_id = s.id AND " LIVE_FOR_X("s") ")" \
        "   ORDER BY s.id FOR NO KEY UPDATE" \
        "), touched AS (" \
        "  UPDATE mcp.sessions s SET last_seen_at = now() FROM stale" \
        "   WHERE s.id = stale.id" \
        "  RETURNING s.id, s.principal, s.backend_url, stale.last_seen_at, s.terminated_at," \
        "            s.backend_session_id, s.protocol_version" \
        "), held AS (" \
        "  SELECT s.id, s.principal, s.backend_url, s.last_seen_at, s.terminated_at," \
        "         s.backend_session_id, s.protocol_version FROM mcp.sessions s" \
        "   WHERE s.id IN (SELECT id FROM cur WHERE stale IS FALSE)" \
        "     AND EXISTS (SELECT 1 FROM x WHERE x.session_id = s.id AND " LIVE_FOR_X("s") ")" \
        "   ORDER BY s.id FOR KEY SHARE" \
        "), se AS (" \
        "  SELECT x.ord, s.id, s.principal, s.backend_session_id, s.protocol_version" \
        "    FROM x JOIN (SELECT * FROM touched UNION ALL SELECT * FROM held) s" \
        "      ON s.id = x.session_id" \
        "   WHERE " LIVE_FOR_X("s") \
        "), a AS (" \
        "  SELECT f.* FROM (" \
        "    SELECT array_agg(x.ord ORDER BY x.ord) AS ords, array_agg(se.id ORDER BY x.ord) AS ids," \
        "           array_agg(x.holder ORDER BY x.ord) AS holders," \
        "           array_agg(x.max_session ORDER BY x.ord) AS max_session," \
        "           array_agg(x.max_holder ORDER BY x.ord) AS max_holder" \
        "      FROM se JOIN x ON x.ord = se.ord) g," \
        "   mcp.admit_streams(g.ords, g.ids, g.holders, g.max_session, g.max_holder) f" \
        "), s AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, trace_id, member)" \
        "  SELECT a.id, se.id, 'request', x.request_id, " JSONB("x.request_id") ", x.method," \
        "         x.owner, now() + make_interval(secs => x.lease), x.holder, x.trace_id, x.member" \
        "    FROM a JOIN se ON se.ord = a.ord JOIN x ON x.ord = a.ord WHERE a.refused IS NULL" \
        "   ORDER BY a.id" \
        "  RETURNING id, session_id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT v.* FROM (" \
        "    SELECT s.session_id, s.id, 0 AS seq, 'in' AS direction, 'message' AS kind," \
        "           x.inbound AS t, " JSONB("x.inbound") " AS m, se.principal" \
        "      FROM s JOIN a ON a.id = s.id JOIN se ON se.ord = a.ord JOIN x ON x.ord = a.ord" \
        "    UNION ALL" \
        "    SELECT s.session_id, s.id, 1, 'out', 'priming', NULL, NULL, se.principal" \
        "      FROM s JOIN a ON a.id = s.id JOIN se ON se.ord = a.ord JOIN x ON x.ord = a.ord" \
        "     WHERE se.protocol_version = ANY (x.primed::text[])) v" \
        "   ORDER BY v.id, v.seq" \
        ")" \
        "SELECT s.id, se.backend_session_id, se.protocol_version, a.refused," \
        "       m.backend_session_id, m.protocol_version, m.state, m.member, m.backend_url," \
        "       m.error, se.ord" \
        "  FROM se JOIN x ON x.ord = se.ord JOIN a ON a.ord = se.ord" \
        "  LEFT JOIN s ON s.id = a.id" \
        "  LEFT JOIN mcp.session_members m" \
        "    ON m.session_id = se.id AND (m.member = x.member OR x.members)"

/* Live for principal $2 at backend $3, active within $4 seconds (0: no idle limit). */
#define SESSION_LIVE \
    MCP_STORE_SESSION_UNENDED("") " AND principal IS NOT DISTINCT FROM $2 AND backend_url = $3" \
    " AND ($4::int = 0 OR last_seen_at > now() - make_interval(secs => $4::int))"

/* The CTEs cur, touched, held and se: the columns cols of session row id (an SQL expression)
 * when it is live (live), the row locked in one mode only, chosen from a plain read: an UPDATE
 * (the touch) when its activity is stale (MCP_STORE_SESSION_STALE), else FOR KEY SHARE, the
 * lock a stream's foreign key takes anyway (no new row version, none of the row's CHECKs, no
 * second lock).
 * Either waits for a termination in flight and re-checks the row after it. A transaction that
 * never upgrades a lock it holds on the row cannot deadlock with another on it, and other
 * requests' KEY SHARE never blocks the UPDATE. A stale read makes the UPDATE, which waits for
 * the lock instead of skipping: a session in use is touched. */
#define SESSION_TOUCHED_OR_SHARED(id, live, cols) \
    "cur AS (" \
    "  SELECT " MCP_STORE_SESSION_STALE " AS stale FROM mcp.sessions" \
    "   WHERE id = " id \
    "), touched AS (" \
    "  UPDATE mcp.sessions SET last_seen_at = now()" \
    "   WHERE id = " id " AND (SELECT stale FROM cur) AND " live \
    "  RETURNING " cols \
    "), held AS (" \
    "  SELECT " cols " FROM mcp.sessions" \
    "   WHERE id = " id " AND (SELECT stale FROM cur) IS FALSE AND " live \
    "     FOR KEY SHARE" \
    "), se AS (" \
    "  SELECT * FROM touched UNION ALL SELECT * FROM held" \
    ")"

mcp_store_status_t mcp_store_stream_open_request_admitted(
    mcp_store_t *db, apr_pool_t *p, mcp_store_session_t *session, int idle_secs,
    const char *request_id, const char *method, const char *inbound, const char *trace_id,
    const char *owner, int lease_secs, const mcp_store_limits_t *limits, int n_primed,
    const char *const *primed, struct mcp_store_member_t *member,
    apr_array_header_t *members, apr_int64_t *stream_id, mcp_store_refusal_t *refused)
{
    /* The admission comes between the session's check and the stream's insert; the session's
     * row in one mode (SESSION_TOUCHED_OR_SHARED). Other requests' KEY SHARE (their foreign
     * keys, their statement 2, grouped or not) never blocks its touch. */
#define SQL(JSONB) \
        "WITH " SESSION_TOUCHED_OR_SHARED("$1", SESSION_LIVE, \
                                          "id, principal, backend_session_id, protocol_version") \
        ", a AS (" \
        "  SELECT i.id, mcp.admit_stream(se.id, $5, 0, $6::int, $7::int, 0, i.id, NULL)" \
        "         AS refused FROM se, (SELECT mcp.stream_id_new() AS id) i" \
        "), s AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, trace_id, member)" \
        "  SELECT a.id, se.id, 'request', $8, " JSONB("$8") ", $9, $10," \
        "         now() + make_interval(secs => $11::int), $5, $14, $15" \
        "    FROM se, a WHERE a.refused IS NULL" \
        "  RETURNING id, session_id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT s.session_id, s.id, 0, 'in', 'message', $12, " JSONB("$12") "," \
        "         se.principal FROM s, se" \
        "  UNION ALL" \
        "  SELECT s.session_id, s.id, 1, 'out', 'priming', NULL, NULL, se.principal FROM s, se" \
        "   WHERE se.protocol_version = ANY ($13::text[])" \
        ")" \
        "SELECT s.id, se.backend_session_id, se.protocol_version, a.refused," \
        "       m.backend_session_id, m.protocol_version, m.state, m.member, m.backend_url," \
        "       m.error" \
        "  FROM se CROSS JOIN a LEFT JOIN s ON true" \
        "  LEFT JOIN mcp.session_members m" \
        "    ON m.session_id = se.id AND (m.member = $15 OR $16::boolean)"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    /* Instances ordered by session (args[0]): their rows are locked in that order. */
    static const mcp_store__mergeable_t plain_many = { OPEN_MANY(JSONB_PLAIN), 1, 0, 0 },
                                        audited_many = { OPEN_MANY(JSONB_AUDITED), 1, 0, 0 };
    const char *args[16];
    mcp_store_status_t rv;
    PGresult *res;
    int i, is_plain;

    *refused = MCP_STORE_ADMITTED;
    args[0] = session->id;
    args[1] = session->principal;
    args[2] = session->backend_url;
    args[3] = mcp_store__int_text(p, idle_secs);
    args[4] = limits->holder;
    args[5] = mcp_store__int_text(p, limits->max_session_streams);
    args[6] = mcp_store__int_text(p, limits->max_holder_streams);
    args[7] = request_id;
    args[8] = method;
    args[9] = owner;
    args[10] = mcp_store__int_text(p, lease_secs);
    args[11] = inbound;
    args[12] = mcp_store__text_array(p, n_primed, primed);
    args[13] = trace_id;
    args[14] = member ? member->member : NULL;
    args[15] = members ? "true" : "false";
    /* request_id and inbound are valid JSON (the caller parsed them). In the child's group,
     * after the statements of streams (MCP_STORE__KEY_SESSIONS): its locks are the session's
     * row and slots (taken skipping, never waited for). */
    is_plain = mcp_store__plain_jsonb(request_id) && mcp_store__plain_jsonb(inbound);
    if ((rv = mcp_store__exec_mergeable(db, p, "storing the request and its stream",
                                        is_plain ? plain : audited, NARGS(args), args, &res,
                                        MCP_STORE__KEY_SESSIONS,
                                        is_plain ? &plain_many : &audited_many))
        != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        return MCP_STORE_NOT_FOUND;
    }
    session->backend_session_id = mcp_store_cell(res, 0, 1);
    session->protocol_version = mcp_store_cell(res, 0, 2);
    *refused = mcp_store__refusal(mcp_store_cell(res, 0, 3));
    if (member) {
        const char *state = mcp_store_cell(res, 0, 6);
        member->backend_session_id = mcp_store_cell(res, 0, 4);
        member->protocol_version = mcp_store_cell(res, 0, 5);
        member->open = state && strcmp(state, "open") == 0;
        member->error = state ? NULL : "no session with it yet";
    }
    for (i = 0; members && i < PQntuples(res); i++) {
        static const mcp_store__member_cols_t cols = { 7, 8, 4, 5, 6, 9, -1 };
        mcp_store__member_push(members, res, i, &cols);
    }
    if (!*refused) {
        *stream_id = apr_atoi64(PQgetvalue(res, 0, 0));
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

/* The opening of several stateless request streams (the group's merge of the statement
 * below): each parameter the array of the instances' own, x.ord numbering them; admitted in
 * order by mcp.admit_streams (no session: only the holder's limit), each counting the slots of
 * those before it. */
#define OPEN_STATELESS_MANY(JSONB) \
        "WITH x AS (" \
        "  SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]," \
        "                       $6::int[], $7::text[], $8::text[], $9::text[], $10::text[]," \
        "                       $11::text[])" \
        "         WITH ORDINALITY AS x(holder, max_holder, request_id, method, owner, lease," \
        "                              protocol_version, principal, inbound, trace_id, member," \
        "                              ord)" \
        "), a AS (" \
        MCP_STORE__ADMIT_STATELESS_X \
        "), s AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, protocol_version, principal," \
        "                           trace_id, member)" \
        "  SELECT a.id, NULL, 'request', x.request_id, " JSONB("x.request_id") ", x.method," \
        "         x.owner, now() + make_interval(secs => x.lease), x.holder, x.protocol_version," \
        "         x.principal, x.trace_id, x.member" \
        "    FROM a JOIN x ON x.ord = a.ord WHERE a.refused IS NULL" \
        "   ORDER BY a.id" \
        "  RETURNING id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT NULL, s.id, 0, 'in', 'message', x.inbound, " JSONB("x.inbound") "," \
        "         x.principal" \
        "    FROM s JOIN a ON a.id = s.id JOIN x ON x.ord = a.ord ORDER BY s.id" \
        ")" \
        "SELECT s.id, a.refused, a.ord FROM a LEFT JOIN s ON s.id = a.id"

mcp_store_status_t mcp_store_stream_open_stateless_admitted(
    mcp_store_t *db, apr_pool_t *p, const char *protocol_version, const char *principal,
    const char *request_id, const char *method, const char *inbound, const char *trace_id,
    const char *owner, int lease_secs, const mcp_store_limits_t *limits, const char *member,
    apr_int64_t *stream_id, mcp_store_refusal_t *refused)
{
#define SQL(JSONB) \
        "WITH a AS (" \
        "  SELECT i.id, mcp.admit_stream(NULL, $1, 0, 0, $2::int, 0, i.id, NULL) AS refused" \
        "    FROM (SELECT mcp.stream_id_new() AS id) i" \
        "), s AS (" \
        "  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method," \
        "                           owner, lease_until, holder, protocol_version, principal," \
        "                           trace_id, member)" \
        "  SELECT a.id, NULL, 'request', $3, " JSONB("$3") ", $4, $5," \
        "         now() + make_interval(secs => $6::int), $1, $7, $8, $10, $11" \
        "    FROM a WHERE a.refused IS NULL" \
        "  RETURNING id" \
        "), e AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT NULL, s.id, 0, 'in', 'message', $9, " JSONB("$9") ", $8 FROM s" \
        ")" \
        "SELECT s.id, a.refused FROM a LEFT JOIN s ON true"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    static const mcp_store__mergeable_t
        plain_many = { OPEN_STATELESS_MANY(JSONB_PLAIN), 1, -1, 0 },
        audited_many = { OPEN_STATELESS_MANY(JSONB_AUDITED), 1, -1, 0 };
    const char *args[11];
    mcp_store_status_t rv;
    PGresult *res;
    int is_plain;

    *refused = MCP_STORE_ADMITTED;
    args[0] = limits->holder;
    args[1] = mcp_store__int_text(p, limits->max_holder_streams);
    args[2] = request_id;
    args[3] = method;
    args[4] = owner;
    args[5] = mcp_store__int_text(p, lease_secs);
    args[6] = protocol_version;
    args[7] = principal;
    args[8] = inbound;
    args[9] = trace_id;
    args[10] = member;
    /* In the child's group, with the openings of sessions' streams: its locks are slots
     * (taken skipping, never waited for). request_id and inbound are valid JSON (the caller
     * parsed them). */
    is_plain = mcp_store__plain_jsonb(request_id) && mcp_store__plain_jsonb(inbound);
    if ((rv = mcp_store__exec_mergeable(db, p, "storing the stateless request and its stream",
                                        is_plain ? plain : audited, NARGS(args), args, &res,
                                        MCP_STORE__KEY_SESSIONS,
                                        is_plain ? &plain_many : &audited_many))
        != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        db->error = "storing the stateless request: no result";
        return MCP_STORE_UNAVAILABLE;
    }
    *refused = mcp_store__refusal(mcp_store_cell(res, 0, 1));
    if (!*refused) {
        *stream_id = apr_atoi64(PQgetvalue(res, 0, 0));
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_open_standalone_admitted(
    mcp_store_t *db, apr_pool_t *p, const mcp_store_session_t *session, const char *trace_id,
    const char *owner, int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused)
{
    static const char close_stale[] =
        "WITH c AS ("
        "  UPDATE mcp.streams SET status = 'closed', completed_at = now()"
        "   WHERE session_id = $1 AND kind = 'standalone' AND status = 'open'"
        "     AND lease_until < now()"
        "  RETURNING id"
        ")"
        "SELECT pg_notify('mcp_events', id::text) FROM c";   /* for its owner, if alive */
    static const char sql[] =
        "WITH a AS ("
        "  SELECT i.id, mcp.admit_stream($1, $2, 0, $3::int, $4::int, 0, i.id, NULL) AS refused"
        "    FROM (SELECT mcp.stream_id_new() AS id) i"
        "), s AS ("
        "  INSERT INTO mcp.streams (id, session_id, kind, owner, lease_until, holder, trace_id)"
        "  SELECT a.id, $1, 'standalone', $5, now() + make_interval(secs => $6::int), $2, $8"
        "    FROM a WHERE a.refused IS NULL"
        "  ON CONFLICT (session_id) WHERE kind = 'standalone' AND status = 'open' DO NOTHING"
        "  RETURNING id, session_id"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text,"
        "                          message, principal)"
        "  SELECT session_id, id, 0, 'out', 'priming', NULL, NULL, $7 FROM s"
        ")"
        "SELECT a.refused, s.id FROM a LEFT JOIN s ON true";
    const char *args[8], *id;
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    args[0] = session->id;
    args[1] = limits->holder;
    args[2] = mcp_store__int_text(p, limits->max_session_streams);
    args[3] = mcp_store__int_text(p, limits->max_holder_streams);
    args[4] = owner;
    args[5] = mcp_store__int_text(p, lease_secs);
    args[6] = session->principal;
    args[7] = trace_id;
    /* A stale open stream (its owner stopped renewing) is closed by a statement of its own:
     * the insert's conflict check would not see a change made in the same statement. */
    if ((rv = mcp_store_exec(db, p, "closing a stale standalone stream", close_stale, 1, args,
                             NULL)) != MCP_STORE_OK) {
        return rv;
    }
    if ((rv = mcp_store_exec(db, p, "opening the standalone stream", sql, NARGS(args), args,
                             &res)) != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        mcp_store__result_done(p, res);
        db->sqlstate = NULL;
        db->error = "opening the standalone stream: no result";
        return MCP_STORE_REFUSED;
    }
    *refused = mcp_store__refusal(mcp_store_cell(res, 0, 0));
    id = mcp_store_cell(res, 0, 1);
    rv = *refused ? MCP_STORE_LIMIT : id && *id ? MCP_STORE_OK : MCP_STORE_CONFLICT;
    if (rv == MCP_STORE_OK) {
        *stream_id = apr_atoi64(id);
    }
    /* The stream's request pool would hold it for the stream's life. */
    mcp_store__result_done(p, res);
    return rv;
}

mcp_store_status_t mcp_store_stream_follow(mcp_store_t *db, apr_pool_t *p,
                                           const char *session_id, apr_int64_t stream_id,
                                           apr_int64_t seq, const char *owner, int lease_secs,
                                           const mcp_store_limits_t *limits,
                                           mcp_store_stream_t *out, apr_int64_t *follower_id,
                                           mcp_store_refusal_t *refused)
{
    /* The look-up, then the follower's admission and row. */
    static const char sql[] =
        "WITH st AS ("
        "  SELECT s.id, s.kind, s.status, (s.status = 'open' AND s.lease_until < now()) AS expired,"
        "         (SELECT max(seq) FROM mcp.events WHERE stream_id = s.id) AS last_seq, s.owner,"
        "         s.followed"
        "    FROM mcp.streams s"
        "   WHERE s.id = $1::bigint AND s.session_id = $2"
        "     AND EXISTS (SELECT 1 FROM mcp.events e WHERE e.stream_id = s.id"
        "                    AND e.seq = $3::bigint AND e.direction = 'out')"
        "), a AS ("
        "  SELECT i.id, mcp.admit_stream($2, $4, st.id, $5::int, $6::int, $7::int, NULL, i.id)"
        "         AS refused"
        "    FROM st, (SELECT nextval('mcp.followers_id_seq') AS id) i WHERE st.status = 'open'"
        "), f AS ("
        "  INSERT INTO mcp.followers (id, stream_id, session_id, holder, owner, lease_until)"
        "  SELECT a.id, st.id, $2, $4, $8, now() + make_interval(secs => $9::int)"
        "    FROM st, a WHERE a.refused IS NULL"
        "  RETURNING id"
        /* Writers notify followed streams only: the flag is set under the row's FOR UPDATE
         * lock, which waits for every writer that read the flag unset (their FOR KEY SHARE);
         * the caller reads the stream after this commit. */
        "), lk AS ("
        "  SELECT s.id FROM mcp.streams s, st, a"
        "   WHERE s.id = st.id AND a.refused IS NULL AND NOT st.followed FOR UPDATE OF s"
        "), fl AS ("
        "  UPDATE mcp.streams s SET followed = true FROM lk WHERE s.id = lk.id"
        ")"
        "SELECT st.kind, st.status, st.expired, st.last_seq, st.owner, a.refused, f.id"
        "  FROM st LEFT JOIN a ON true LEFT JOIN f ON true";
    const char *args[9], *id;
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    *follower_id = 0;
    args[0] = mcp_store__i64(p, stream_id);
    args[1] = session_id;
    args[2] = mcp_store__i64(p, seq);
    args[3] = limits->holder;
    args[4] = mcp_store__int_text(p, limits->max_session_streams);
    args[5] = mcp_store__int_text(p, limits->max_holder_streams);
    args[6] = mcp_store__int_text(p, limits->max_stream_followers);
    args[7] = owner;
    args[8] = mcp_store__int_text(p, lease_secs);
    if ((rv = mcp_store_exec_row(db, p, "looking up an event", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    mcp_store__read_stream(res, stream_id, out);
    *refused = mcp_store__refusal(mcp_store_cell(res, 0, 5));
    id = mcp_store_cell(res, 0, 6);
    if (id && *id) {
        *follower_id = apr_atoi64(id);
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}
