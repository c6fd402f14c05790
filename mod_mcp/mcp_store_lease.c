/* mcp_store_lease — the leases' statements: renewing the streams a process owns, renewing
 * and releasing a follower; see mcp_store.h (and mcp_lease.h for the bookkeeping). */
#include <apr_strings.h>

#include "mcp_store_private.h"

mcp_store_status_t mcp_store_streams_renew(mcp_store_t *db, apr_pool_t *p, int n,
                                           const apr_int64_t *ids, const char *const *sessions,
                                           const int *secs, apr_array_header_t **alive)
{
    static const char sql[] =
        "WITH v AS ("
        "  SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[]) AS v(id, session_id, secs)"
        /* Row locks in id order, as the group commit takes them: never a deadlock with it.
         * By key alone, then status: joined with "status = 'open'", streams_open_idx read whole
         * (priced at a few rows by statistics from a time with few streams open) could be
         * hashed against the due ones, every open stream read at every round. */
        "), found AS ("
        "  SELECT s.id, s.status FROM mcp.streams s JOIN v ON v.id = s.id"
        "   ORDER BY s.id FOR NO KEY UPDATE OF s"
        "), locked AS ("
        "  SELECT id FROM found WHERE status = 'open'"
        "), st AS ("
        "  UPDATE mcp.streams s SET lease_until = now() + make_interval(secs => v.secs)"
        "    FROM v WHERE s.id = v.id AND s.id IN (SELECT id FROM locked)"
        "  RETURNING s.id, s.session_id"
        /* Then the session rows, in id order too, as a group's openings of streams take them
         * after its streams' rows; only stale ones (MCP_STORE_SESSION_STALE): enough to keep a
         * session with a stream from expiring, and a session row's update (a new version and
         * an entry in each of its indexes) was most of a renewal's WAL when every renewal made
         * one (bench/idle_streams.py --idle-secs). */
        "), sl AS ("
        "  SELECT id FROM mcp.sessions WHERE id IN (SELECT session_id FROM st)"
        "     AND " MCP_STORE_SESSION_STALE
        "   ORDER BY id FOR NO KEY UPDATE"
        "), se AS ("
        "  UPDATE mcp.sessions SET last_seen_at = now()"
        "   WHERE id IN (SELECT id FROM sl)"
        ")"
        "SELECT id FROM st";
    apr_array_header_t *idv = apr_array_make(p, n, sizeof(const char *));
    apr_array_header_t *secv = apr_array_make(p, n, sizeof(const char *));
    const char *args[3];
    mcp_store_status_t rv;
    PGresult *res;
    int i;

    for (i = 0; i < n; i++) {
        APR_ARRAY_PUSH(idv, const char *) = mcp_store__i64(p, ids[i]);
        APR_ARRAY_PUSH(secv, const char *) = mcp_store__int_text(p, secs[i]);
    }
    args[0] = apr_pstrcat(p, "{", apr_array_pstrcat(p, idv, ','), "}", NULL);
    args[1] = mcp_store__text_array(p, n, sessions);
    args[2] = apr_pstrcat(p, "{", apr_array_pstrcat(p, secv, ','), "}", NULL);
    if ((rv = mcp_store_exec(db, p, "renewing leases", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    *alive = apr_array_make(p, PQntuples(res) + 1, sizeof(apr_int64_t));
    for (i = 0; i < PQntuples(res); i++) {
        APR_ARRAY_PUSH(*alive, apr_int64_t) = apr_atoi64(PQgetvalue(res, i, 0));
    }
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_follower_renew(mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t follower_id, int lease_secs)
{
    static const char sql[] =
        "UPDATE mcp.followers SET lease_until = now() + make_interval(secs => $1::int)"
        " WHERE id = $2::bigint";
    const char *args[2];

    args[0] = mcp_store__int_text(p, lease_secs);
    args[1] = mcp_store__i64(p, follower_id);
    return mcp_store_exec(db, p, "renewing a follower's lease", sql, NARGS(args), args, NULL);
}

mcp_store_status_t mcp_store_follower_release(mcp_store_t *db, apr_pool_t *p,
                                              apr_int64_t follower_id)
{
    static const char sql[] = "DELETE FROM mcp.followers WHERE id = $1::bigint";
    const char *args[1];

    args[0] = mcp_store__i64(p, follower_id);
    return mcp_store_exec(db, p, "releasing a follower", sql, NARGS(args), args, NULL);
}
