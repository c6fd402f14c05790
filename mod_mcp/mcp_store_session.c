/* mcp_store_session — a session's statements: its look-up (the touch), its end (terminated
 * by its client, expired when idle, the sweep of idle ones); see mcp_store.h. Storing one
 * (admitted under the limits) is in mcp_store_limits.c. */
#include <stdlib.h>

#include <apr_strings.h>

#include "mcp_store_private.h"

/* A session's activity, recorded at most once a minute (MCP_STORE_SESSION_STALE): last_seen_at
 * is indexed, so an update that changes it can never be HOT (new index entries, more WAL); one
 * that keeps it can. */
#define TOUCH_SESSION MCP_STORE_TOUCH_SESSION

/* Ending a session (terminated_at set) locks its row FOR UPDATE first, not with the UPDATE's
 * own NO KEY UPDATE: the lock conflicts with the FOR KEY SHARE that a request's record-then-
 * dispatch holds on a fresh session (mcp_store_stream_open_request_admitted), so the two are
 * serialised: a request admitted first has its stream committed before the session ends (and
 * ended with it), one that comes later re-checks the row after the end and is refused. */
#define SESSION_END_LOCK "FOR UPDATE"

static const char *cell_dup(apr_pool_t *p, PGresult *res, int row, int col)
{
    const char *v = mcp_store_cell(res, row, col);

    return v ? apr_pstrdup(p, v) : NULL;
}

mcp_store_status_t mcp_store_session_touch(mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, int idle_secs,
                                           mcp_store_session_t **out)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET " TOUCH_SESSION
        " WHERE id = $1 AND " MCP_STORE_SESSION_UNENDED("")
        "   AND principal IS NOT DISTINCT FROM $3"
        "   AND ($2::int = 0 OR last_seen_at > now() - make_interval(secs => $2::int))"
        " RETURNING backend_url, backend_session_id, protocol_version";
    const char *args[3];
    mcp_store_session_t *s;
    mcp_store_status_t rv;
    PGresult *res;

    args[0] = id;
    args[1] = mcp_store__int_text(p, idle_secs);
    args[2] = principal;
    if ((rv = mcp_store_exec_row(db, p, "looking up the session", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    s = apr_pcalloc(p, sizeof(*s));
    s->id = apr_pstrdup(p, id);
    s->principal = principal ? apr_pstrdup(p, principal) : NULL;
    /* Copied: every request holds its session for its life, a stream's for the stream's. */
    s->backend_url = cell_dup(p, res, 0, 0);
    s->backend_session_id = cell_dup(p, res, 0, 1);
    s->protocol_version = cell_dup(p, res, 0, 2);
    mcp_store__result_done(p, res);
    *out = s;
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_session_terminate(mcp_store_t *db, apr_pool_t *p, const char *id,
                                               const char *principal, const char *by)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET terminated_at = now(), terminated_by = $1"
        " WHERE id = (SELECT id FROM mcp.sessions"
        "              WHERE id = $2 AND " MCP_STORE_SESSION_UNENDED("")
        "                AND principal IS NOT DISTINCT FROM $3 " SESSION_END_LOCK ")"
        "   AND " MCP_STORE_SESSION_UNENDED("");
    const char *args[3];
    mcp_store_status_t rv;
    PGresult *res;

    args[0] = by;
    args[1] = id;
    args[2] = principal;
    if ((rv = mcp_store_exec(db, p, "terminating the session", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    return atoi(PQcmdTuples(res)) > 0 ? MCP_STORE_OK : MCP_STORE_NOT_FOUND;
}

mcp_store_status_t mcp_store_session_expire(mcp_store_t *db, apr_pool_t *p, const char *id,
                                            const char *backend_url, int idle_secs,
                                            const char **backend_session_id)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET terminated_at = now(), terminated_by = 'expired'"
        " WHERE id = (SELECT id FROM mcp.sessions"
        "              WHERE id = $1 AND backend_url = $2 AND " MCP_STORE_SESSION_UNENDED("")
        "                AND $3::int > 0"
        "                AND last_seen_at <= now() - make_interval(secs => $3::int) "
        SESSION_END_LOCK ")"
        "   AND " MCP_STORE_SESSION_UNENDED("")
        " RETURNING backend_session_id";
    const char *args[3];
    mcp_store_status_t rv;
    PGresult *res;

    *backend_session_id = NULL;
    args[0] = id;
    args[1] = backend_url;
    args[2] = mcp_store__int_text(p, idle_secs);
    if ((rv = mcp_store_exec_row(db, p, "expiring the session", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    *backend_session_id = mcp_store_cell(res, 0, 0);
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_sessions_expire_idle(mcp_store_t *db, apr_pool_t *p, int limit,
                                                  mcp_store_expired_fn *fn, void *baton,
                                                  long *expired)
{
    /* SKIP LOCKED: sweeps on several hosts share the work instead of waiting for each other
     * (and pass over a session a request holds: it is in use). FOR UPDATE: SESSION_END_LOCK. */
    static const char sql[] =
        "UPDATE mcp.sessions SET terminated_at = now(), terminated_by = 'expired'"
        " WHERE id IN (SELECT id FROM mcp.sessions"
        "               WHERE terminated_at IS NULL AND idle_timeout_secs > 0"
        "                 AND last_seen_at <= now() - make_interval(secs => idle_timeout_secs)"
        "               LIMIT $1::int FOR UPDATE SKIP LOCKED)"
        "   AND " MCP_STORE_SESSION_UNENDED("")
        " RETURNING id, backend_url, backend_session_id, protocol_version";
    const char *args[1];
    mcp_store_status_t rv;
    PGresult *res;
    int i;

    *expired = 0;
    args[0] = mcp_store__int_text(p, limit);
    if ((rv = mcp_store_exec(db, p, "expiring idle sessions", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    for (i = 0; i < PQntuples(res); i++) {
        fn(baton, mcp_store_cell(res, i, 0), mcp_store_cell(res, i, 1),
           mcp_store_cell(res, i, 2), mcp_store_cell(res, i, 3));
        (*expired)++;
    }
    return MCP_STORE_OK;
}
