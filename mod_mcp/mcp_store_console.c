/* mcp_store_console — see mcp_store_console.h. */
#include <apr_strings.h>

#include "mcp_store_console.h"
#include "mcp_store_private.h"

/* Runs one of the console's statements and gives its one cell, the page's document. */
static mcp_store_status_t document(mcp_store_t *db, apr_pool_t *p, const char *what,
                                   const char *sql, int n, const char *const *args,
                                   const char **json)
{
    mcp_store_status_t rv;
    PGresult *res;

    *json = NULL;
    if ((rv = mcp_store_exec_row(db, p, what, sql, n, args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    *json = apr_pstrdup(p, mcp_store_cell(res, 0, 0));
    return *json ? MCP_STORE_OK : MCP_STORE_NOT_FOUND;
}

/* A request's answer: its stream's last message to the client (for a single request, the
 * response), as `a` (message, created_at), for a row of `calls` with id and status. since: the
 * parameter that holds the lowest stream id of the calls, so that PostgreSQL plans the look-up
 * for the day partitions that can hold them (planned for all of mcp.events' partitions, a
 * sample of 10,000 calls costs enough to be JIT-compiled, 1.3 s a page; bench/console.py). */
#define LAST_ANSWER(calls, since) \
    "      LEFT JOIN LATERAL ( " \
    "            SELECT e.message, e.created_at FROM mcp.events e " \
    "             WHERE e.stream_id = " calls ".id AND e.stream_id >= " since \
    "               AND e.direction = 'out' AND e.kind = 'message' " \
    "             ORDER BY e.seq DESC LIMIT 1) a ON true "

/* The backend of a call's session: one look-up by key per call (a join lets PostgreSQL hash
 * every session instead). */
#define BACKEND_OF(calls) \
    "(SELECT x.backend_url FROM mcp.sessions x WHERE x.id = " calls ".session_id)"

/* How a request ended, from its stream's status and LAST_ANSWER: the words of mcp.tool_calls'
 * outcome (sql/audit.sql). */
#define OUTCOME(calls) \
    "CASE WHEN a.message IS NULL AND " calls ".status = 'open' THEN 'running' " \
    "     WHEN a.message IS NULL AND " calls ".status = 'cancelled' THEN 'cancelled' " \
    "     WHEN a.message IS NULL THEN 'no response' " \
    "     WHEN a.message ? 'error' THEN 'error' " \
    "     WHEN a.message -> 'result' -> 'isError' = 'true'::jsonb THEN 'tool error' " \
    "     ELSE 'ok' END"

/* A message of a transcript or a stream, from a row p of mcp.events; $4: the most of its text
 * shown. */
#define EVENT_FIELDS \
    "'id', p.id, 'time', p.created_at, 'direction', p.direction, 'kind', p.kind, " \
    "'seq', p.seq, 'bytes', octet_length(p.message_text), 'text', left(p.message_text, $4), "

/* The sessions whose md5(id) begins with the hex digits in param: as a range of
 * sessions_digest_idx (text_pattern_ops), which a generic plan uses too; a LIKE with a
 * parameter it cannot (after five executions on a connection, PostgreSQL may plan the prepared
 * statement once for every value: then a transcript read every session). 'g' follows every hex
 * digit. */
#define TAG_PREFIX(sessions, param) \
    "(md5(" sessions ".id) ~>=~ " param " AND md5(" sessions ".id) ~<~ (" param " || 'g'))"

/* The lowest stream id of streams started in the last secs seconds (mcp.stream_id_at), as a
 * parameter: a constant for the planner, where now() would not be. */
static const char *stream_id_since(apr_pool_t *p, int secs)
{
    return mcp_store__i64(p, (apr_time_sec(apr_time_now()) - secs) * APR_INT64_C(1000000));
}

/* $1 the sample's size, $2 the lowest stream id of the last hour. The outcome of a request is
 * its stream's last message to the client (its answer, for a single request); errors are named
 * by their JSON-RPC code. */
mcp_store_status_t mcp_store_console_overview(mcp_store_t *db, apr_pool_t *p, int sample,
                                              const char **json)
{
    static const char sql[] =
        "WITH recent AS ( "
        "    SELECT s.id, s.session_id, s.status, s.created_at "
        "      FROM mcp.streams s "
        "     WHERE s.id >= $2 AND s.kind = 'request' "
        "     ORDER BY s.id DESC LIMIT $1 "
        "), answered AS ( "
        "    SELECT r.id, r.status, r.created_at, " BACKEND_OF("r") " AS backend, "
        "           CASE WHEN a.message ? 'error' "
        "                THEN 'error ' || coalesce(a.message -> 'error' ->> 'code', '?') "
        "                ELSE " OUTCOME("r") " END AS outcome, "
        "           left(a.message -> 'error' ->> 'message', 200) AS error_message "
        "      FROM recent r "
        LAST_ANSWER("r", "$2")
        "), minutes AS ( "
        "    SELECT m FROM generate_series(date_trunc('minute', now()) - interval '14 minutes', "
        "                                  date_trunc('minute', now()), interval '1 minute') m "
        "), per_minute AS ( "
        "    SELECT s.id / 60000000 AS minute, count(*) AS n "
        "      FROM mcp.streams s "
        "     WHERE s.id >= mcp.stream_id_at(date_trunc('minute', now()) - interval '14 minutes') "
        "     GROUP BY 1 "
        ") "
        "SELECT json_build_object( "
        "    'page', 'overview', "
        "    'generated_at', now(), "
        "    'sessions', json_build_object( "
        "        'live', (SELECT count(*) FROM mcp.sessions WHERE terminated_at IS NULL), "
        "        'started_last_hour', "
        "            (SELECT count(*) FROM mcp.sessions WHERE created_at > now() - interval '1 "
        "                hour')), "
        "    'streams', json_build_object( "
        "        'request', (SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = "
        "            'request'), "
        "        'standalone', "
        "            (SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = "
        "                'standalone'), "
        "        'followers', (SELECT count(*) FROM mcp.followers WHERE lease_until > now())), "
        "    'calls_per_minute', ( "
        "        SELECT json_agg(json_build_object('minute', m, 'calls', coalesce(pm.n, 0)) ORDER "
        "            BY m) "
        "          FROM minutes LEFT JOIN per_minute pm "
        "            ON pm.minute = floor(extract(epoch FROM m))::bigint / 60), "
        "    'sample', json_build_object('calls', (SELECT count(*) FROM answered), 'limit', "
        "        $1::int, "
        "                                'since', now() - interval '1 hour'), "
        "    'outcomes', coalesce(( "
        "        SELECT json_agg(json_build_object('outcome', outcome, 'calls', n, "
        "            'last_message', msg) "
        "                        ORDER BY n DESC, outcome) "
        "          FROM (SELECT outcome, count(*) AS n, "
        "                       (array_agg(error_message ORDER BY id DESC))[1] AS msg "
        "                  FROM answered GROUP BY outcome) o), '[]'), "
        "    'backends', coalesce(( "
        "        SELECT json_agg(json_build_object( "
        "                   'backend', backend, 'live_sessions', coalesce(b.live, 0), "
        "                   'calls', coalesce(h.calls, 0), 'failed', coalesce(h.failed, 0), "
        "                   'last_call', h.last_call, 'last_outcome', h.last_outcome, "
        "                   'health', CASE WHEN h.calls IS NULL THEN 'idle' "
        "                                  WHEN h.last_outcome = 'no response' "
        "                                    OR h.failed * 2 > h.calls THEN 'failing' "
        "                                  ELSE 'ok' END) "
        "                   ORDER BY backend) "
        "          FROM (SELECT backend_url AS backend, count(*) AS live FROM mcp.sessions "
        "                 WHERE terminated_at IS NULL GROUP BY 1) b "
        "          FULL JOIN ( "
        "                SELECT a.backend, count(*) AS calls, "
        "                       count(*) FILTER (WHERE a.outcome = 'no response' "
        "                                           OR a.status = 'failed') AS failed, "
        "                       max(a.created_at) AS last_call, "
        "                       (array_agg(a.outcome ORDER BY a.id DESC))[1] AS last_outcome "
        "                  FROM answered a "
        "                 WHERE a.outcome <> 'running' AND a.backend IS NOT NULL "
        "                 GROUP BY 1) h USING (backend)), '[]'), "
        "    'owners', coalesce(( "
        "        SELECT json_agg(json_build_object('owner', owner, 'streams', streams, "
        "                                          'followers', followers) ORDER BY owner) "
        "          FROM (SELECT coalesce(s.owner, f.owner) AS owner, coalesce(s.n, 0) AS streams, "
        "                       coalesce(f.n, 0) AS followers "
        "                  FROM (SELECT owner, count(*) AS n FROM mcp.streams "
        "                         WHERE status = 'open' GROUP BY owner) s "
        "                  FULL JOIN (SELECT owner, count(*) AS n FROM mcp.followers "
        "                              WHERE lease_until > now() GROUP BY owner) f "
        "                    ON f.owner = s.owner) o), '[]') "
        ")::text";
    const char *args[2];

    args[0] = mcp_store__i64(p, sample);
    args[1] = stream_id_since(p, 3600);
    return document(db, p, "reading the console's overview", sql, NARGS(args), args, json);
}

/* $1 q, $2 before (NULL: now), $3 state, $4 rows. Fetches one row more than it shows, to know
 * whether a next page exists. */
mcp_store_status_t mcp_store_console_sessions(mcp_store_t *db, apr_pool_t *p, const char *q,
                                              const char *before, const char *state, int rows,
                                              const char **json)
{
    static const char sql[] =
        "WITH page AS ( "
        "    SELECT s.id, s.created_at, s.last_seen_at, s.terminated_at, s.terminated_by, "
        "        s.principal, "
        "           s.protocol_version, s.backend_url, s.client_info "
        "      FROM mcp.sessions s "
        "     WHERE ($2::timestamptz IS NULL OR s.created_at < $2::timestamptz) "
        "       AND ($3 = 'all' OR ($3 = 'live') = (s.terminated_at IS NULL)) "
        "       AND ($1 = '' "
        "            OR ($1 ~ '^[0-9a-f]{8,32}$' AND " TAG_PREFIX("s", "$1") ") "
        "            OR starts_with(s.principal, $1) "
        "            OR strpos(lower(s.client_info ->> 'name'), lower($1)) > 0) "
        "     ORDER BY s.created_at DESC "
        "     LIMIT $4 + 1 "
        ") "
        "SELECT json_build_object( "
        "    'page', 'sessions', "
        "    'generated_at', now(), "
        "    'query', json_build_object('q', $1, 'before', $2::timestamptz, 'state', $3), "
        "    'sessions', coalesce(( "
        "        SELECT json_agg(json_build_object( "
        "                   'tag', left(md5(p.id), 8), 'ref', left(md5(p.id), 16), "
        "                   'user', p.principal, "
        "                   'client', p.client_info ->> 'name', 'client_version', p.client_info "
        "                       ->> 'version', "
        "                   'protocol', p.protocol_version, 'backend', p.backend_url, "
        "                   'started', p.created_at, 'last_seen', p.last_seen_at, "
        "                   'ended', p.terminated_at, 'ended_by', p.terminated_by, "
        "                   'state', CASE WHEN p.terminated_at IS NULL THEN 'live' ELSE 'ended' "
        "                       END, "
        "                   'calls', (SELECT count(*) FROM mcp.streams st "
        "                              WHERE st.session_id = p.id AND st.kind = 'request')) "
        "                   ORDER BY p.created_at DESC) "
        "          FROM (SELECT * FROM page ORDER BY created_at DESC LIMIT $4) p), '[]'), "
        "    'next', CASE WHEN (SELECT count(*) FROM page) > $4 "
        "                 THEN (SELECT created_at FROM page ORDER BY created_at DESC OFFSET $4 - "
        "                     1 LIMIT 1) "
        "            END "
        ")::text";
    const char *args[4];

    args[0] = q;
    args[1] = before;
    args[2] = state;
    args[3] = mcp_store__i64(p, rows);
    return document(db, p, "reading the console's sessions list", sql, NARGS(args), args, json);
}

/* $1 ref, $2 after, $3 rows, $4 text_max. The sessions of the tag are found without an order
 * (ordered by start, a generic plan walks sessions_created_idx and filters every session: 170 ms
 * with 80,000); two of them are enough to know that the tag is ambiguous. */
mcp_store_status_t mcp_store_console_session(mcp_store_t *db, apr_pool_t *p, const char *ref,
                                             apr_int64_t after, int rows, int text_max,
                                             const char **json)
{
    static const char sql[] =
        "WITH found AS ( "
        "    SELECT s.* FROM mcp.sessions s WHERE " TAG_PREFIX("s", "$1") " LIMIT 2 "
        "), one AS ( "
        "    SELECT * FROM found WHERE (SELECT count(*) FROM found) = 1 "
        "), page AS ( "
        "    SELECT e.id, e.created_at, e.direction, e.kind, e.stream_id, e.seq, e.message_text "
        "      FROM mcp.events e, one "
        "     WHERE e.session_id = one.id AND e.id > $2 "
        "     ORDER BY e.id "
        "     LIMIT $3 + 1 "
        ") "
        "SELECT json_build_object( "
        "    'page', 'session', "
        "    'generated_at', now(), "
        "    'query', json_build_object('s', $1, 'after', $2::bigint), "
        "    'matches', (SELECT json_agg(json_build_object('tag', left(md5(f.id), 8), "
        "                                                  'ref', left(md5(f.id), 16), "
        "                                                  'started', f.created_at) ORDER BY "
        "                                                      f.created_at) "
        "                  FROM found f), "
        "    'session', (SELECT json_build_object( "
        "                   'tag', left(md5(o.id), 8), 'ref', left(md5(o.id), 16), 'user', "
        "                       o.principal, "
        "                   'client', o.client_info ->> 'name', 'client_version', o.client_info "
        "                       ->> 'version', "
        "                   'client_info', o.client_info::text, "
        "                   'client_capabilities', o.client_capabilities::text, 'server_info', "
        "                       o.server_info::text, "
        "                   'protocol', o.protocol_version, 'backend', o.backend_url, "
        "                   'backend_session_tag', left(md5(o.backend_session_id), 8), "
        "                   'started', o.created_at, 'last_seen', o.last_seen_at, "
        "                   'ended', o.terminated_at, 'ended_by', o.terminated_by, "
        "                   'state', CASE WHEN o.terminated_at IS NULL THEN 'live' ELSE 'ended' "
        "                       END, "
        "                   'streams', (SELECT json_build_object( "
        "                                   'request', count(*) FILTER (WHERE st.kind = "
        "                                       'request'), "
        "                                   'standalone', count(*) FILTER (WHERE st.kind = "
        "                                       'standalone'), "
        "                                   'open', count(*) FILTER (WHERE st.status = 'open'), "
        "                                   'failed', count(*) FILTER (WHERE st.status = "
        "                                       'failed'), "
        "                                   'cancelled', count(*) FILTER (WHERE st.status = "
        "                                       'cancelled')) "
        "                                 FROM mcp.streams st WHERE st.session_id = o.id), "
        "                   'events', (SELECT count(*) FROM mcp.events e WHERE e.session_id = "
        "                       o.id)) "
        "                  FROM one o), "
        "    'events', coalesce(( "
        "        SELECT json_agg(json_build_object( " EVENT_FIELDS
        "                   'stream', p.stream_id, "
        "                   'event_id', CASE WHEN p.stream_id IS NOT NULL AND p.direction = 'out' "
        "                                    THEN p.stream_id || '-' || p.seq END) "
        "                   ORDER BY p.id) "
        "          FROM (SELECT * FROM page ORDER BY id LIMIT $3) p), '[]'), "
        "    'next', CASE WHEN (SELECT count(*) FROM page) > $3 "
        "                 THEN (SELECT id FROM page ORDER BY id OFFSET $3 - 1 LIMIT 1) END "
        ")::text";
    const char *args[4];

    args[0] = ref;
    args[1] = mcp_store__i64(p, after);
    args[2] = mcp_store__i64(p, rows);
    args[3] = mcp_store__i64(p, text_max);
    return document(db, p, "reading a session's transcript for the console", sql, NARGS(args),
                    args, json);
}

/* $1 the stream, $2 after (a seq), $3 rows, $4 text_max. */
mcp_store_status_t mcp_store_console_stream(mcp_store_t *db, apr_pool_t *p, apr_int64_t id,
                                            apr_int64_t after, int rows, int text_max,
                                            const char **json)
{
    static const char sql[] =
        "WITH st AS ( "
        "    SELECT s.* FROM mcp.streams s WHERE s.id = $1 "
        "), page AS ( "
        "    SELECT e.id, e.created_at, e.direction, e.kind, e.seq, e.message_text "
        "      FROM mcp.events e "
        "     WHERE e.stream_id = $1 AND e.seq > $2 "
        "     ORDER BY e.seq "
        "     LIMIT $3 + 1 "
        ") "
        "SELECT json_build_object( "
        "    'page', 'stream', "
        "    'generated_at', now(), "
        "    'query', json_build_object('id', $1::bigint, 'after', $2::bigint), "
        "    'stream', (SELECT json_build_object( "
        "                   'id', s.id, 'kind', s.kind, 'method', s.method, 'request_id', "
        "                       s.request_id, "
        "                   'status', s.status, 'owner', s.owner, 'started', s.created_at, "
        "                   'completed', s.completed_at, "
        "                   'duration_ms', round(extract(epoch FROM s.completed_at - "
        "                       s.created_at) * 1000, 1), "
        "                   'protocol', coalesce(s.protocol_version, ses.protocol_version), "
        "                   'user', coalesce(ses.principal, s.principal), "
        "                   'session_tag', left(md5(s.session_id), 8), "
        "                   'session_ref', left(md5(s.session_id), 16), "
        "                   'bridged_to', s.bridged_to, "
        "                   'followers', (SELECT count(*) FROM mcp.followers f "
        "                                  WHERE f.stream_id = s.id AND f.lease_until > now()), "
        "                   'events', (SELECT count(*) FROM mcp.events e WHERE e.stream_id = "
        "                       s.id)) "
        "                  FROM st s LEFT JOIN mcp.sessions ses ON ses.id = s.session_id), "
        "    'events', coalesce(( "
        "        SELECT json_agg(json_build_object( " EVENT_FIELDS
        "                   'event_id', CASE WHEN p.direction = 'out' THEN $1 || '-' || p.seq END, "
        "                   'offset_ms', "
        "                       round(extract(epoch FROM p.created_at - st.created_at) * 1000, 1)) "
        "                   ORDER BY p.seq) "
        "          FROM (SELECT * FROM page ORDER BY seq LIMIT $3) p, st), '[]'), "
        "    'next', CASE WHEN (SELECT count(*) FROM page) > $3 "
        "                 THEN (SELECT seq FROM page ORDER BY seq OFFSET $3 - 1 LIMIT 1) END "
        ")::text";
    const char *args[4];

    args[0] = mcp_store__i64(p, id);
    args[1] = mcp_store__i64(p, after);
    args[2] = mcp_store__i64(p, rows);
    args[3] = mcp_store__i64(p, text_max);
    return document(db, p, "reading a stream for the console", sql, NARGS(args), args, json);
}

/* $1 the window in seconds, $2 the sample's size, $3 the lowest stream id of the sample. A
 * call's tool is its request's params.name (seq 0; a look-up per call: a join lets PostgreSQL
 * read a whole day's requests when the window spans days), its latency from its stream's start
 * to its answer. */
mcp_store_status_t mcp_store_console_tools(mcp_store_t *db, apr_pool_t *p, int window_secs,
                                           int sample, const char **json)
{
    static const char sql[] =
        "WITH calls AS ( "
        "    SELECT s.id, s.session_id, s.status, s.created_at, s.completed_at "
        "      FROM mcp.streams s "
        "     WHERE s.id >= $3 AND s.kind = 'request' AND s.method = 'tools/call' "
        "     ORDER BY s.id DESC LIMIT $2 "
        "), judged AS ( "
        "    SELECT c.id, c.created_at, "
        "           coalesce((SELECT r.message -> 'params' ->> 'name' FROM mcp.events r "
        "                      WHERE r.stream_id = c.id AND r.seq = 0 AND r.stream_id >= $3), "
        "                    '?') AS tool, "
        "           coalesce(" BACKEND_OF("c") ", '') AS backend, "
        "           extract(epoch FROM coalesce(a.created_at, c.completed_at) - c.created_at) "
        "               * 1000 AS ms, "
        "           " OUTCOME("c") " AS outcome "
        "      FROM calls c "
        LAST_ANSWER("c", "$3")
        "), span AS ( "
        "    SELECT $1::int / 30 AS w, "
        "           (ceil(extract(epoch FROM now()) / ($1::int / 30)) * ($1::int / 30))::bigint "
        "               - $1::int AS start_s "
        "), buckets AS ( "
        "    SELECT b, to_timestamp(start_s + b * w) AS t FROM span, generate_series(0, 29) b "
        ") "
        "SELECT json_build_object( "
        "    'page', 'tools', "
        "    'generated_at', now(), "
        "    'query', json_build_object('window_s', $1::int), "
        "    'sample', json_build_object('calls', (SELECT count(*) FROM judged), 'limit', $2::int, "
        "                                'since', now() - make_interval(secs => $1::int)), "
        "    'tools', coalesce(( "
        "        SELECT json_agg(json_build_object( "
        "                   'tool', tool, 'backend', backend, 'calls', n, 'errors', errors, "
        "                   'error_rate', round(errors::numeric / n, 4), "
        "                   'p50_ms', round(p[1]::numeric, 1), 'p90_ms', round(p[2]::numeric, 1), "
        "                   'p99_ms', round(p[3]::numeric, 1), 'max_ms', round(mx::numeric, 1)) "
        "                   ORDER BY n DESC, tool, backend) "
        "          FROM (SELECT tool, backend, count(*) AS n, "
        "                       count(*) FILTER (WHERE outcome NOT IN ('ok', 'running')) AS "
        "                           errors, "
        "                       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY ms) "
        "                           FILTER (WHERE outcome <> 'running') AS p, "
        "                       max(ms) AS mx "
        "                  FROM judged GROUP BY tool, backend) t), '[]'), "
        "    'timeline', ( "
        "        SELECT json_agg(json_build_object('from', bk.t, 'calls', coalesce(x.n, 0), "
        "                                          'errors', coalesce(x.errors, 0)) ORDER BY bk.b) "
        "          FROM buckets bk "
        "          LEFT JOIN (SELECT greatest(0, least(29, floor((extract(epoch FROM j.created_at) "
        "                                - start_s) / w)))::int AS b, "
        "                            count(*) AS n, "
        "                            count(*) FILTER (WHERE outcome NOT IN ('ok', 'running')) AS "
        "                                errors "
        "                       FROM judged j, span GROUP BY 1) x ON x.b = bk.b) "
        ")::text";
    /* The sample's lowest id first: the look-ups are then planned for the partitions the
     * sample lies in, not every day of the window (a week of them, and the statement costs
     * enough to be JIT-compiled and optimized: 1.6 s). */
    static const char lowest[] =
        "SELECT coalesce(min(id), $1) FROM ( "
        "    SELECT s.id FROM mcp.streams s "
        "     WHERE s.id >= $1 AND s.kind = 'request' AND s.method = 'tools/call' "
        "     ORDER BY s.id DESC LIMIT $2) c";
    const char *args[3];
    mcp_store_status_t rv;
    PGresult *res;

    args[0] = stream_id_since(p, window_secs);
    args[1] = mcp_store__i64(p, sample);
    if ((rv = mcp_store_exec_row(db, p, "finding the console's sample of tool calls", lowest, 2,
                                 args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    args[2] = apr_pstrdup(p, mcp_store_cell(res, 0, 0));
    args[0] = mcp_store__i64(p, window_secs);
    return document(db, p, "reading the console's tools page", sql, NARGS(args), args, json);
}
