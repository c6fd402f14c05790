/* mcp_store — the store's core (see mcp_store.h): the handle, running a statement
 * (mcp_store_exec, mcp_store_exec_row, mcp_store_cell) with the retry policy and the
 * classification of database failures, and the wire helpers it shares with the group commit
 * that exec runs the hot path's writes in (mcp_store_group.c). The statements live beside it,
 * one file per noun (mcp_store_session.c, mcp_store_stream.c, mcp_store_event.c,
 * mcp_store_lease.c, mcp_store_limits.c, mcp_store_totals.c, mcp_store_retention.c), sharing
 * the helpers that mcp_store_private.h declares. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <apr_strings.h>

#include "mcp_store_prepared.h"
#include "mcp_store_private.h"
#include "mcp_text.h"

/* ---- running statements ------------------------------------------------------------------ */

mcp_store_fault_t mcp_store_classify(const char *sqlstate, int connection_ok)
{
    static const char *const retry[] = {
        "57P01", "57P02", "57P03",   /* admin shutdown, crash shutdown, cannot connect now */
        "57014",                     /* query canceled (a server-side statement_timeout)   */
        "40001", "40P01",            /* serialization failure, deadlock                    */
        MCP_STORE_READ_ONLY,         /* the server takes no writes (now): see mcp_store.h  */
        NULL
    };
    int i;

    if (!connection_ok || !sqlstate || strlen(sqlstate) != 5) {
        return MCP_STORE_FAULT_RETRY;
    }
    /* 08: connection exception; 53: insufficient resources (too many connections, ...) */
    if (strncmp(sqlstate, "08", 2) == 0 || strncmp(sqlstate, "53", 2) == 0) {
        return MCP_STORE_FAULT_RETRY;
    }
    for (i = 0; retry[i]; i++) {
        if (strcmp(sqlstate, retry[i]) == 0) {
            return MCP_STORE_FAULT_RETRY;
        }
    }
    return MCP_STORE_FAULT_PERMANENT;
}

void mcp_store_init(mcp_store_t *db, const mcp_store_lender_t *lender, void *baton,
                    apr_interval_time_t patience, apr_interval_time_t statement_timeout)
{
    memset(db, 0, sizeof(*db));
    db->lender = lender;
    db->baton = baton;
    db->patience = patience;
    db->statement_timeout = statement_timeout;
}

static apr_status_t clear_result(void *res)
{
    PQclear(res);
    return APR_SUCCESS;
}

/* See mcp_store_private.h. */
int mcp_store__wait_socket(PGconn *conn, short events, apr_time_t deadline)
{
    struct pollfd pfd;
    int rv;

    pfd.fd = PQsocket(conn);
    pfd.events = events;
    for (;;) {
        int ms = -1;
        if (deadline) {
            apr_time_t left = deadline - apr_time_now();
            if (left <= 0) {
                return -1;
            }
            ms = (int)((left + 999) / 1000);
        }
        pfd.revents = 0;
        rv = poll(&pfd, 1, ms);
        if (rv > 0) {
            return 0;
        }
        if (rv < 0 && errno != EINTR) {
            return -1;
        }
    }
}

/* See mcp_store_private.h. */
const char *mcp_store__trimmed(apr_pool_t *p, const char *msg)
{
    apr_size_t n = msg ? strlen(msg) : 0;

    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) {
        n--;
    }
    return n ? apr_pstrmemdup(p, msg, n) : "unknown database error";
}

/* See mcp_store_private.h. */
apr_uint64_t mcp_store__statement_hash(const char *sql)
{
    apr_uint64_t h = APR_UINT64_C(14695981039346656037);
    const unsigned char *c;

    for (c = (const unsigned char *)sql; *c; c++) {
        h = (h ^ *c) * APR_UINT64_C(1099511628211);
    }
    return h;
}

/* See mcp_store_private.h. */
void mcp_store__statement_name(apr_uint64_t h, char name[24])
{
    apr_snprintf(name, 24, "mcp_%016" APR_UINT64_T_HEX_FMT, h);
}

/* See mcp_store_private.h. */
int mcp_store__flush_sent(PGconn *conn, apr_time_t deadline)
{
    int rv;

    while ((rv = PQflush(conn)) == 1) {
        if (mcp_store__wait_socket(conn, POLLIN | POLLOUT, deadline) != 0) {
            return -2;
        }
        if (!PQconsumeInput(conn)) {
            return -1;
        }
    }
    return rv < 0 ? -1 : 0;
}

/* Flushes what was sent and reads the result without ever blocking past the deadline (see
 * run). Returns the first result, or NULL with *err and *broken. */
static PGresult *await_result(mcp_store_t *db, apr_pool_t *p, PGconn *conn, apr_time_t deadline,
                              const char **err, int *broken)
{
    PGresult *res, *first = NULL;
    int rv;

    if ((rv = mcp_store__flush_sent(conn, deadline)) != 0) {
        if (rv == -2) {
            goto timed_out;
        }
        goto failed;
    }
    for (;;) {
        while (PQisBusy(conn)) {
            if (mcp_store__wait_socket(conn, POLLIN, deadline) != 0) {
                goto timed_out;
            }
            if (!PQconsumeInput(conn)) {
                PQclear(first);
                goto failed;
            }
        }
        if (!(res = PQgetResult(conn))) {
            break;
        }
        if (first) {
            PQclear(res);
        }
        else {
            first = res;
        }
    }
    if (!first) {
        goto failed;
    }
    *broken = PQstatus(conn) != CONNECTION_OK;
    return first;

timed_out:
    PQclear(first);
    /* Whatever libpq still waits for never comes: close the socket so that the connection is
     * seen broken (and reset by its pool) instead of answering late on someone else's turn. */
    shutdown(PQsocket(conn), SHUT_RDWR);
    PQconsumeInput(conn);
    *broken = 1;
    *err = apr_psprintf(p, "no answer in time (MCPDatabaseTimeout %" APR_TIME_T_FMT " ms); "
                        "connection given up", apr_time_as_msec(db->statement_timeout));
    return NULL;

failed:
    *broken = 1;
    *err = mcp_store__trimmed(p, PQerrorMessage(conn));
    return NULL;
}

/* See mcp_store_private.h. */
int mcp_store__not_prepared(PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    return PQresultStatus(res) == PGRES_FATAL_ERROR && state && strcmp(state, "26000") == 0;
}

/* See mcp_store_private.h. */
int mcp_store__prepare_done(PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    return PQresultStatus(res) == PGRES_COMMAND_OK
           || (PQresultStatus(res) == PGRES_FATAL_ERROR && state && strcmp(state, "42P05") == 0);
}

/* Runs the statement as a named prepared statement of this connection, so that PostgreSQL
 * parses and plans it once per connection instead of once per call. A statement that the
 * connection is not known to have (mcp_store_prepared.h: new, reset by its pool, or the
 * database restarted) is prepared first. One that it answers 26000 for all the same (its
 * memory was wrong) is prepared and run again, once, on the same connection. Each statement
 * runs on its own (no transaction is open around it), so a refused try changes nothing.
 *
 * Never blocks longer than the statement timeout: a database that stopped answering (SIGSTOP,
 * a dropped network) costs at most that, after which the connection is shut down (a cancel
 * request would hang the same way). Returns the result (possibly an error result), or NULL with
 * *err when the connection failed; *broken is set when the connection must not be used as it
 * is. */
static PGresult *run(mcp_store_t *db, apr_pool_t *p, PGconn *conn, const char *sql, int n,
                     const char *const *params, apr_time_t deadline, const char **err,
                     int *broken)
{
    PGresult *res = NULL;
    apr_uint64_t hash = mcp_store__statement_hash(sql);
    char name[24];
    int tries;

    *broken = 0;
    mcp_store__statement_name(hash, name);
    /* Non-blocking while it is ours: sending a large statement to a server that stopped
     * reading must not block either. */
    if (PQsetnonblocking(conn, 1) != 0) {
        *broken = 1;
        *err = mcp_store__trimmed(p, PQerrorMessage(conn));
        return NULL;
    }
    for (tries = 0; tries < 2; tries++) {
        if (!mcp_store_prepared_has(conn, hash)) {
            if (!PQsendPrepare(conn, name, sql, n, NULL)) {
                *broken = 1;
                *err = mcp_store__trimmed(p, PQerrorMessage(conn));
                res = NULL;
                break;
            }
            if (!(res = await_result(db, p, conn, deadline, err, broken))) {
                break;
            }
            if (!mcp_store__prepare_done(res)) {
                break;   /* the statement's own error (a syntax error is permanent) */
            }
            PQclear(res);
            res = NULL;
            mcp_store_prepared_add(conn, hash);
        }
        if (!PQsendQueryPrepared(conn, name, n, params, NULL, NULL, 0)) {
            *broken = 1;
            *err = mcp_store__trimmed(p, PQerrorMessage(conn));
            res = NULL;
            break;
        }
        if (!(res = await_result(db, p, conn, deadline, err, broken))
            || !mcp_store__not_prepared(res) || tries > 0) {
            break;
        }
        PQclear(res);
        res = NULL;
        mcp_store_prepared_forget(conn);
    }
    PQsetnonblocking(conn, 0);   /* as the pool lent it */
    return res;
}

/* See mcp_store_private.h. */
void mcp_store__give_up(PGconn *conn)
{
    shutdown(PQsocket(conn), SHUT_RDWR);
    PQconsumeInput(conn);
}

/* See mcp_store_private.h. */
int mcp_store__give_up_if_read_only(PGconn *conn, const char *sqlstate)
{
    if (!conn || !sqlstate || strcmp(sqlstate, MCP_STORE_READ_ONLY) != 0) {
        return 0;
    }
    mcp_store__give_up(conn);
    return 1;
}

/* When a statement started now must be done: at most the statement timeout, and no later than
 * the caller's patience lasts (deadline). */
static apr_time_t statement_until(const mcp_store_t *db, apr_time_t deadline)
{
    apr_time_t now = apr_time_now();
    apr_time_t until = db->statement_timeout > 0 ? now + db->statement_timeout : 0;

    if (db->patience > 0 && (!until || until > deadline)) {
        until = deadline > now ? deadline : now + 1000;
    }
    return until;
}

/* mcp_store__exec_as and mcp_store__exec_mergeable (merge: NULL for the former). */
static mcp_store_status_t exec_in_group(mcp_store_t *db, apr_pool_t *p, const char *what,
                                        const char *sql, int n, const char *const *params,
                                        PGresult **out, apr_int64_t key,
                                        const mcp_store__mergeable_t *merge)
{
    apr_time_t deadline = apr_time_now() + db->patience;

    db->deadline = db->patience > 0 ? deadline : 0;
    for (;;) {
        mcp_store_fault_t fault = MCP_STORE_FAULT_RETRY;
        const char *err = NULL, *state = NULL;
        PGresult *res = NULL;
        PGconn *conn = NULL;
        int broken = 1;

        /* Waiting for a connection counts against the same bound as the statement. */
        db->until = db->patience > 0 ? deadline
                    : db->statement_timeout > 0 ? apr_time_now() + db->statement_timeout : 0;
        if (key >= 0 && db->group) {
            int fatal = 0;

            res = mcp_store__group_run(db, p, sql, n, params, key, merge,
                                       statement_until(db, deadline), &err, &state, &broken,
                                       &fatal);
            if (fatal) {
                db->fatal = err;
                db->sqlstate = NULL;
                db->error = apr_psprintf(p, "%s: %s", what, err);
                return MCP_STORE_UNAVAILABLE;
            }
            if (!res && state) {
                fault = mcp_store_classify(state, !broken);
            }
        }
        else {
            conn = db->lender->borrow(db, &err);
            if (!conn && db->fatal) {
                db->sqlstate = NULL;
                db->error = apr_psprintf(p, "%s: %s", what, db->fatal);
                return MCP_STORE_UNAVAILABLE;
            }
            if (conn) {
                res = run(db, p, conn, sql, n, params, statement_until(db, deadline), &err,
                          &broken);
            }
        }
        if (res && (PQresultStatus(res) == PGRES_TUPLES_OK
                    || PQresultStatus(res) == PGRES_COMMAND_OK)) {
            if (conn) {
                db->lender->give_back(db, conn, 0);
            }
            /* A result nobody reads goes at once, not with p (a long-lived stream's request
             * pool would hold it, 2 KiB or more, for the stream's life). */
            if (out) {
                apr_pool_cleanup_register(p, res, clear_result, apr_pool_cleanup_null);
                *out = res;
            }
            else {
                PQclear(res);
            }
            return MCP_STORE_OK;
        }
        if (res) {
            const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            state = s ? apr_pstrdup(p, s) : NULL;
            err = mcp_store__trimmed(p, PQresultErrorMessage(res));
            fault = mcp_store_classify(state, !broken);
            PQclear(res);
            if (mcp_store__give_up_if_read_only(conn, state)) {
                broken = 1;
            }
        }
        if (conn) {
            db->lender->give_back(db, conn, broken);
        }
        db->sqlstate = state;
        db->error = apr_psprintf(p, "%s: %s%s%s%s", what, err ? err : "no connection",
                                 state ? " (SQLSTATE " : "", state ? state : "", state ? ")" : "");
        if (fault == MCP_STORE_FAULT_PERMANENT) {
            return MCP_STORE_REFUSED;
        }
        if (apr_time_now() >= deadline) {
            return MCP_STORE_UNAVAILABLE;
        }
        if (db->lender->wait) {
            if (db->lender->wait(db, deadline, db->error) != 0) {
                return MCP_STORE_UNAVAILABLE;
            }
        }
        else {
            apr_interval_time_t left = deadline - apr_time_now();
            apr_sleep(left < apr_time_from_msec(100) ? (left > 0 ? left : 0)
                                                     : apr_time_from_msec(100));
        }
    }
}

/* See mcp_store_private.h. */
mcp_store_status_t mcp_store__exec_as(mcp_store_t *db, apr_pool_t *p, const char *what,
                                      const char *sql, int n, const char *const *params,
                                      PGresult **out, apr_int64_t key)
{
    return exec_in_group(db, p, what, sql, n, params, out, key, NULL);
}

/* See mcp_store_private.h. */
mcp_store_status_t mcp_store__exec_mergeable(mcp_store_t *db, apr_pool_t *p, const char *what,
                                             const char *sql, int n,
                                             const char *const *params, PGresult **out,
                                             apr_int64_t key,
                                             const mcp_store__mergeable_t *merge)
{
    return exec_in_group(db, p, what, sql, n, params, out, key, merge);
}

mcp_store_status_t mcp_store_exec(mcp_store_t *db, apr_pool_t *p, const char *what,
                                  const char *sql, int n, const char *const *params,
                                  PGresult **out)
{
    return exec_in_group(db, p, what, sql, n, params, out, -1, NULL);
}

/* One parameterless query on conn for an integer (the first column of its one row; NULL: 0). */
static int query_int(mcp_store_t *db, apr_pool_t *p, PGconn *conn, const char *sql,
                     const char **err, int *broken)
{
    apr_time_t now = apr_time_now();
    apr_time_t until = db->statement_timeout > 0 ? now + db->statement_timeout : 0;
    PGresult *res;

    if (db->deadline && (!until || until > db->deadline)) {
        until = db->deadline > now ? db->deadline : now + 1000;
    }
    res = run(db, p, conn, sql, 0, NULL, until, err, broken);
    int v = -1;

    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        v = PQgetisnull(res, 0, 0) ? 0 : atoi(PQgetvalue(res, 0, 0));
    }
    else if (res) {
        *err = mcp_store__trimmed(p, PQresultErrorMessage(res));
    }
    PQclear(res);
    return v;
}

int mcp_store_schema_version(mcp_store_t *db, apr_pool_t *p, PGconn *conn, const char **err,
                             int *broken)
{
    static const char which[] =
        "SELECT CASE WHEN to_regclass('mcp.sessions') IS NULL THEN 0"
        "            WHEN to_regclass('mcp.schema_version') IS NULL THEN 1"
        "            ELSE -2 END";
    static const char versioned[] = "SELECT max(version) FROM mcp.schema_version";
    int v = query_int(db, p, conn, which, err, broken);

    return v == -2 && !*broken ? query_int(db, p, conn, versioned, err, broken) : v;
}

const char *mcp_store_cell(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/* ---- helpers the statement files share (mcp_store_private.h) ----------------------------- */

/* A result read to the end by its caller (what is kept of it was copied into p) goes now
 * instead of with p. */
void mcp_store__result_done(apr_pool_t *p, PGresult *res)
{
    apr_pool_cleanup_run(p, res, clear_result);
}

const char *mcp_store__i64(apr_pool_t *p, apr_int64_t v)
{
    return apr_psprintf(p, "%" APR_INT64_T_FMT, v);
}

const char *mcp_store__int_text(apr_pool_t *p, int v)
{
    return apr_psprintf(p, "%d", v);
}

int mcp_store__plain_jsonb(const char *json)
{
    return json && mcp_text_jsonb_plain(json, strlen(json));
}

/* A PostgreSQL array literal of n strings. */
const char *mcp_store__text_array(apr_pool_t *p, int n, const char *const *v)
{
    apr_array_header_t *parts = apr_array_make(p, n, sizeof(const char *));
    int i;

    for (i = 0; i < n; i++) {
        const char *c;
        char *out, *o;

        if (!v[i]) {
            APR_ARRAY_PUSH(parts, const char *) = "NULL";
            continue;
        }
        out = o = apr_palloc(p, 2 * strlen(v[i]) + 3);
        *o++ = '"';
        for (c = v[i]; *c; c++) {
            if (*c == '"' || *c == '\\') {
                *o++ = '\\';
            }
            *o++ = *c;
        }
        *o++ = '"';
        *o = '\0';
        APR_ARRAY_PUSH(parts, const char *) = out;
    }
    return apr_pstrcat(p, "{", apr_array_pstrcat(p, parts, ','), "}", NULL);
}

mcp_store_status_t mcp_store_exec_row(mcp_store_t *db, apr_pool_t *p, const char *what,
                                      const char *sql, int n, const char *const *params,
                                      PGresult **res)
{
    mcp_store_status_t rv = mcp_store_exec(db, p, what, sql, n, params, res);

    return rv != MCP_STORE_OK ? rv : PQntuples(*res) < 1 ? MCP_STORE_NOT_FOUND : MCP_STORE_OK;
}
