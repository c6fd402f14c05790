/* mcp_store_event — the statements of a stream's events: appending them (in the child's
 * group commit), with the stream's end or without, and reading them back in bounded pages;
 * see mcp_store.h. */
#include <string.h>

#include <apr_strings.h>

#include "mcp_store_private.h"

mcp_store_status_t mcp_store_events_append(mcp_store_t *db, apr_pool_t *p,
                                           const mcp_store_session_t *session,
                                           apr_int64_t stream_id, apr_int64_t first_seq,
                                           const char *direction, const char *messages)
{
    mcp_store_status_t rv;
    PGresult *res;
    /* The stream row under the lock a follower's registration waits for (see the schema: a
     * follower registered before this lock is seen, one after it reads these rows). */
#define SQL(JSONB) \
        "WITH st AS (" \
        "  SELECT status = 'open' AS open, followed FROM mcp.streams" \
        "   WHERE id = $2::bigint FOR KEY SHARE" \
        "), open AS (" \
        "  SELECT $2::bigint = 0 OR coalesce((SELECT st.open FROM st), false) AS yes" \
        "), wake AS (" \
        "  SELECT pg_notify('mcp_events', $2::text) FROM st" \
        "   WHERE st.open AND st.followed AND $4::text = 'out'" \
        "), ins AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT $1, nullif($2::bigint, 0)," \
        "         CASE WHEN $2::bigint = 0 THEN NULL ELSE $3::bigint + t.ord - 1 END," \
        "         $4, 'message', t.value::text, " JSONB("t.value") ", $5" \
        "    FROM json_array_elements($6::json) WITH ORDINALITY AS t(value, ord), open" \
        "   WHERE open.yes" \
        "   ORDER BY t.ord" \
        /* A retry after a statement whose outcome was unknown (the connection broke after the \
         * server got it) finds its rows there: the same seq holds the same message. */ \
        "  ON CONFLICT (stream_id, seq) DO NOTHING" \
        ")" \
        "SELECT yes, (SELECT count(*) FROM wake) FROM open"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    const char *args[6];

    args[0] = session->id;
    args[1] = mcp_store__i64(p, stream_id);
    args[2] = mcp_store__i64(p, first_seq);
    args[3] = direction;
    args[4] = session->principal;
    args[5] = messages;
    /* In the child's group: its locks are its own stream row's (and none for stream 0).
     * messages is valid JSON ($6::json refuses it otherwise). */
    if ((rv = mcp_store__exec_as(db, p, "storing events",
                                 mcp_store__plain_jsonb(messages) ? plain : audited,
                                 NARGS(args), args, &res, stream_id))
        != MCP_STORE_OK) {
        return rv;
    }
    return PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? MCP_STORE_OK
                                                                         : MCP_STORE_NOT_FOUND;
}

/* The finishes name their streams by key and "status = 'open'": streams_open_idx, on (id)
 * where open, is the one index whose condition that implies, so the planner looks them up in it
 * whatever its statistics say. (With a second such index, the open streams by session or by
 * holder, statistics from a time with few streams open made it read that one whole and keep
 * the rows it wanted: with 10,000 connected clients, 10,000 rows for every call. Schema 17;
 * test_stale_statistics.) Naming the key alone would not do: a young table is then read whole
 * for an array of keys. */

/* The last messages and the end of several streams (the group's merge of the statement below):
 * each parameter the array of the streams' own; their rows locked in id order first, as the
 * group, lease renewal and expiry lock them. */
#define FINISH_MANY(JSONB) \
        "WITH x AS (" \
        "  SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[]," \
        "                       $6::text[])" \
        "           AS x(session_id, stream_id, first, principal, messages, status)" \
        "), locked AS (" \
        "  SELECT id FROM mcp.streams WHERE id = ANY($2::bigint[]) AND status = 'open'" \
        "   ORDER BY id FOR NO KEY UPDATE" \
        "), ins AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT x.session_id, x.stream_id, x.first + t.ord - 1, 'out', 'message'," \
        "         t.value::text, " JSONB("t.value") ", x.principal" \
        "    FROM x, json_array_elements(x.messages::json) WITH ORDINALITY AS t(value, ord)" \
        "   WHERE x.stream_id IN (SELECT id FROM locked)" \
        "   ORDER BY x.stream_id, t.ord" \
        "  ON CONFLICT (stream_id, seq) DO NOTHING" \
        ")" \
        "UPDATE mcp.streams s SET status = x.status, completed_at = now() FROM x" \
        " WHERE s.id = x.stream_id AND s.id IN (SELECT id FROM locked)"

mcp_store_status_t mcp_store_events_append_finish(mcp_store_t *db, apr_pool_t *p,
                                                  const mcp_store_session_t *session,
                                                  apr_int64_t stream_id, apr_int64_t first_seq,
                                                  const char *messages, const char *status)
{
#define SQL(JSONB) \
        "WITH ins AS (" \
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text," \
        "                          message, principal)" \
        "  SELECT $1, $2::bigint, $3::bigint + t.ord - 1, 'out', 'message', t.value::text," \
        "         " JSONB("t.value") ", $4" \
        "    FROM json_array_elements($5::json) WITH ORDINALITY AS t(value, ord)" \
        "   WHERE EXISTS (SELECT 1 FROM mcp.streams WHERE id = $2::bigint AND status = 'open')" \
        "   ORDER BY t.ord" \
        "  ON CONFLICT (stream_id, seq) DO NOTHING" \
        ")" \
        "UPDATE mcp.streams SET status = $6, completed_at = now()" \
        " WHERE id = $2::bigint AND status = 'open'"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    static const mcp_store__mergeable_t plain_many = { FINISH_MANY(JSONB_PLAIN), 0, -1, 0 },
                                        audited_many = { FINISH_MANY(JSONB_AUDITED), 0, -1, 0 };
    const char *args[6];
    int is_plain = mcp_store__plain_jsonb(messages);

    args[0] = session->id;
    args[1] = mcp_store__i64(p, stream_id);
    args[2] = mcp_store__i64(p, first_seq);
    args[3] = session->principal;
    args[4] = messages;
    args[5] = status;
    /* messages is valid JSON ($5::json refuses it otherwise). */
    return mcp_store__exec_mergeable(db, p, "storing a stream's last messages and its end",
                                     is_plain ? plain : audited, NARGS(args), args, NULL,
                                     stream_id,
                                     is_plain ? &plain_many : &audited_many);
}

mcp_store_status_t mcp_store_events_append_finish2(mcp_store_t *db, apr_pool_t *p,
                                                   const mcp_store_session_t *session_a,
                                                   apr_int64_t stream_a, apr_int64_t first_a,
                                                   const char *messages_a,
                                                   const mcp_store_session_t *session_b,
                                                   apr_int64_t stream_b, apr_int64_t first_b,
                                                   const char *messages_b, const char *status)
{
    /* The group's merged statement for two streams (rows locked in id order, as the expiry
     * locks them), run in the group like a single finish, keyed by the first stream it locks,
     * and merged with the other pairs of the group: concurrent bridged calls' ends share a
     * commit and a statement (on its own, each pair committed alone: 1.2 transactions per
     * bridged call at c = 32, most of its statement's time a WAL flush). */
    static const char plain[] = FINISH_MANY(JSONB_PLAIN), audited[] = FINISH_MANY(JSONB_AUDITED);
    static const mcp_store__mergeable_t plain_pairs = { plain, 0, -1, 1 },
                                        audited_pairs = { audited, 0, -1, 1 };
    int is_plain = mcp_store__plain_jsonb(messages_a) && mcp_store__plain_jsonb(messages_b);
    const char *sessions[2] = { session_a ? session_a->id : NULL,
                                session_b ? session_b->id : NULL },
               *streams[2] = { mcp_store__i64(p, stream_a), mcp_store__i64(p, stream_b) },
               *firsts[2] = { mcp_store__i64(p, first_a), mcp_store__i64(p, first_b) },
               *principals[2] = { session_a ? session_a->principal : NULL,
                                  session_b ? session_b->principal : NULL },
               *messages[2] = { messages_a, messages_b },
               *statuses[2] = { status, status };
    const char *args[6];

    args[0] = mcp_store__text_array(p, 2, sessions);
    args[1] = mcp_store__text_array(p, 2, streams);
    args[2] = mcp_store__text_array(p, 2, firsts);
    args[3] = mcp_store__text_array(p, 2, principals);
    args[4] = mcp_store__text_array(p, 2, messages);
    args[5] = mcp_store__text_array(p, 2, statuses);
    /* messages are valid JSON (x.messages::json refuses them otherwise). */
    return mcp_store__exec_mergeable(db, p, "storing two streams' last messages and their end",
                                     is_plain ? plain : audited, NARGS(args), args, NULL,
                                     stream_a < stream_b ? stream_a : stream_b,
                                     is_plain ? &plain_pairs : &audited_pairs);
}

mcp_store_status_t mcp_store_events_after_bounded(mcp_store_t *db, apr_pool_t *p,
                                                  apr_int64_t stream_id, apr_int64_t after_seq,
                                                  int max_rows, apr_off_t max_bytes,
                                                  mcp_store_event_fn *fn, void *baton, int *n,
                                                  int *more)
{
    /* The rows up to the one that brings the total to max_bytes: PostgreSQL sends (and libpq
     * holds) about max_bytes and one message, however large the stored messages are. */
    static const char sql[] =
        "SELECT seq, m, running >= $1::bigint FROM ("
        "  SELECT seq, m, sum(len) OVER (ORDER BY seq) AS running, len FROM ("
        "    SELECT seq, m, coalesce(octet_length(m), 0) AS len FROM ("
        "      SELECT seq, message_text AS m FROM mcp.events"
        "       WHERE stream_id = $2::bigint AND seq > $3::bigint AND direction = 'out'"
        "       ORDER BY seq LIMIT $4::int) r) l) t"
        " WHERE running - len < $1::bigint ORDER BY seq";
    const char *args[4];
    mcp_store_status_t rv;
    PGresult *res;
    int i, rows, full = 0;

    *n = 0;
    *more = 0;
    args[0] = apr_off_t_toa(p, max_bytes);
    args[1] = mcp_store__i64(p, stream_id);
    args[2] = mcp_store__i64(p, after_seq);
    args[3] = mcp_store__int_text(p, max_rows);
    if ((rv = mcp_store_exec(db, p, "reading stored events", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    /* The connection is back in its pool already: a slow client holds none. */
    rows = PQntuples(res);
    for (i = 0; i < rows; i++) {
        full = strcmp(PQgetvalue(res, i, 2), "t") == 0;
        (*n)++;
        if (fn(baton, apr_atoi64(PQgetvalue(res, i, 0)), mcp_store_cell(res, i, 1))) {
            break;
        }
    }
    *more = *n == max_rows || full;
    return MCP_STORE_OK;
}
