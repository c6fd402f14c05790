/* mcp_store — see mcp_store.h. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>

#include "mcp_store.h"
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

/* Waits until the connection's socket is ready for events; non-zero at the deadline (0: none). */
static int wait_socket(PGconn *conn, short events, apr_time_t deadline)
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

/* libpq's messages end with a newline. */
static const char *trimmed(apr_pool_t *p, const char *msg)
{
    apr_size_t n = msg ? strlen(msg) : 0;

    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) {
        n--;
    }
    return n ? apr_pstrmemdup(p, msg, n) : "unknown database error";
}

/* The name of the server-side prepared statement for a statement's text: "mcp_" and the
 * text's 64-bit FNV-1a hash in hex (the store's statements are a fixed set of constants). */
static void statement_name(const char *sql, char name[24])
{
    apr_uint64_t h = APR_UINT64_C(14695981039346656037);
    const unsigned char *c;

    for (c = (const unsigned char *)sql; *c; c++) {
        h = (h ^ *c) * APR_UINT64_C(1099511628211);
    }
    apr_snprintf(name, 24, "mcp_%016" APR_UINT64_T_HEX_FMT, h);
}

/* Sends what was queued on a non-blocking connection, reading meanwhile so that neither side
 * blocks: 0, -1 when the connection failed, -2 at the deadline. */
static int flush_sent(PGconn *conn, apr_time_t deadline)
{
    int rv;

    while ((rv = PQflush(conn)) == 1) {
        if (wait_socket(conn, POLLIN | POLLOUT, deadline) != 0) {
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

    if ((rv = flush_sent(conn, deadline)) != 0) {
        if (rv == -2) {
            goto timed_out;
        }
        goto failed;
    }
    for (;;) {
        while (PQisBusy(conn)) {
            if (wait_socket(conn, POLLIN, deadline) != 0) {
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
    *err = trimmed(p, PQerrorMessage(conn));
    return NULL;
}

/* Whether a result says that the named prepared statement does not exist on this connection. */
static int not_prepared(PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    return PQresultStatus(res) == PGRES_FATAL_ERROR && state && strcmp(state, "26000") == 0;
}

/* Runs the statement as a named prepared statement of this connection, so that PostgreSQL
 * parses and plans it once per connection instead of once per call. A connection that does not
 * have it yet (new, reset by its pool, or the database restarted) answers 26000: the statement
 * is then prepared and run again, on the same connection. Each statement runs on its own (no
 * transaction is open around it), so the refused first try changes nothing.
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
    char name[24];
    int tries;

    *broken = 0;
    statement_name(sql, name);
    /* Non-blocking while it is ours: sending a large statement to a server that stopped
     * reading must not block either. */
    if (PQsetnonblocking(conn, 1) != 0) {
        *broken = 1;
        *err = trimmed(p, PQerrorMessage(conn));
        return NULL;
    }
    for (tries = 0; tries < 2; tries++) {
        if (!PQsendQueryPrepared(conn, name, n, params, NULL, NULL, 0)) {
            *broken = 1;
            *err = trimmed(p, PQerrorMessage(conn));
            res = NULL;
            break;
        }
        if (!(res = await_result(db, p, conn, deadline, err, broken)) || !not_prepared(res)
            || tries > 0) {
            break;
        }
        PQclear(res);
        if (!PQsendPrepare(conn, name, sql, n, NULL)) {
            *broken = 1;
            *err = trimmed(p, PQerrorMessage(conn));
            res = NULL;
            break;
        }
        if (!(res = await_result(db, p, conn, deadline, err, broken))
            || PQresultStatus(res) != PGRES_COMMAND_OK) {
            break;   /* the statement's own error (a syntax error is permanent) */
        }
        PQclear(res);
        res = NULL;
    }
    PQsetnonblocking(conn, 0);   /* as the pool lent it */
    return res;
}

/* ---- group commit (see mcp_store.h) -------------------------------------------------------- */

/* One caller's statement, waiting in a group. Everything the committer hands back is either a
 * libpq result (malloc'd, owned by the waiter once done) or copied into the entry: the
 * committer never allocates from the waiter's pool, and the waiter's strings (sql, params) stay
 * valid because the waiter does not leave before done. */
typedef struct group_entry_t {
    const char            *sql;
    int                    n;
    const char *const     *params;
    apr_int64_t            key;        /* the stream id: the order within a transaction      */
    int                    taken;      /* in a committer's batch                              */
    int                    done;
    PGresult              *res;        /* its result (success or its own error), or NULL:     */
    int                    broken;     /* ... the connection failed (err says how)            */
    int                    fatal;      /* ... the lender said no connection will do (err)     */
    char                   state[6];   /* ... or the group's retryable error's SQLSTATE ("")  */
    char                   err[512];
    struct group_entry_t  *next;
} group_entry_t;

struct mcp_store_group_t {
    apr_thread_mutex_t *lock;
    apr_thread_cond_t  *done;
    group_entry_t      *head, *tail;   /* waiting, not yet taken by a committer              */
    int                 busy;          /* committers at work                                 */
    int                 committers;    /* ... at most                                        */
    int                 max;
    apr_uint64_t        transactions, statements;
};

apr_status_t mcp_store_group_create(mcp_store_group_t **group, apr_pool_t *p, int max,
                                    int committers)
{
    mcp_store_group_t *g = apr_pcalloc(p, sizeof(*g));
    apr_status_t rv;

    g->max = max > 0 ? max : 1;
    g->committers = committers > 0 ? committers : 1;
    if ((rv = apr_thread_mutex_create(&g->lock, APR_THREAD_MUTEX_DEFAULT, p)) != APR_SUCCESS
        || (rv = apr_thread_cond_create(&g->done, p)) != APR_SUCCESS) {
        return rv;
    }
    *group = g;
    return APR_SUCCESS;
}

void mcp_store_group_counts(const mcp_store_group_t *group, apr_uint64_t *transactions,
                            apr_uint64_t *statements)
{
    *transactions = group ? group->transactions : 0;
    *statements = group ? group->statements : 0;
}

static void entry_fail(group_entry_t *e, const char *err, const char *state, int broken)
{
    apr_cpystrn(e->err, err ? err : "unknown database error", sizeof(e->err));
    apr_cpystrn(e->state, state ? state : "", sizeof(e->state));
    e->broken = broken;
}

/* The next result of a pipeline (NULL: the end of the current statement's results, or the
 * connection failed: *failed), never waiting past the deadline. */
static PGresult *pipeline_result(PGconn *conn, apr_time_t deadline, int *failed)
{
    while (PQisBusy(conn)) {
        if (wait_socket(conn, POLLIN, deadline) != 0 || !PQconsumeInput(conn)) {
            *failed = 1;
            return NULL;
        }
    }
    return PQgetResult(conn);
}

/* Gives a connection that failed mid-pipeline up for good (see await_result). */
static void give_up(PGconn *conn)
{
    shutdown(PQsocket(conn), SHUT_RDWR);
    PQconsumeInput(conn);
}

/* A connection whose server refused a write as read-only is given up, so that the next borrow
 * connects anew: with a multi-host DBDParams (target_session_attrs=read-write) that finds the
 * server that takes writes now (a failover's new primary), where the old connection would go on
 * asking a demoted one. Non-zero when it was. */
static int give_up_if_read_only(PGconn *conn, const char *sqlstate)
{
    if (!conn || !sqlstate || strcmp(sqlstate, MCP_STORE_READ_ONLY) != 0) {
        return 0;
    }
    give_up(conn);
    return 1;
}

/* Prepares every distinct statement of the batch on conn, each in its own implicit
 * transaction (one that exists already answers 42P05, which is fine). Non-zero when the
 * connection failed. */
static int pipeline_prepare(PGconn *conn, group_entry_t **v, int m, apr_time_t deadline)
{
    int i, j, sent = 0, failed = 0;
    char name[24];

    for (i = 0; i < m; i++) {
        for (j = 0; j < i && v[j]->sql != v[i]->sql; j++) {
        }
        if (j < i) {
            continue;
        }
        statement_name(v[i]->sql, name);
        if (!PQsendPrepare(conn, name, v[i]->sql, v[i]->n, NULL) || !PQpipelineSync(conn)) {
            return -1;
        }
        sent++;
    }
    if (flush_sent(conn, deadline) != 0) {
        return -1;
    }
    while (sent > 0) {
        PGresult *res = pipeline_result(conn, deadline, &failed);
        if (failed) {
            return -1;
        }
        if (res && PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
            sent--;
        }
        PQclear(res);
    }
    return 0;
}

/* What one run of a batch came to. */
enum { RUN_COMMITTED, RUN_REFUSED_ONE, RUN_NOT_PREPARED, RUN_GROUP_FAILED, RUN_CONN_FAILED };

/* Runs v[0..m) in one pipeline: the statements, then a Sync, which commits them as one
 * implicit transaction (an error anywhere rolls all of them back). On RUN_COMMITTED each
 * entry's res holds its result; on RUN_REFUSED_ONE v[*at] failed for good (its res holds the
 * error), the others' results are dropped; on RUN_GROUP_FAILED *res_out holds the retryable
 * error; on RUN_CONN_FAILED the connection is given up. */
static int pipeline_run(PGconn *conn, group_entry_t **v, int m, apr_time_t deadline, int *at,
                        PGresult **res_out)
{
    PGresult *res, *error = NULL;
    int i, failed = 0, error_at = -1, synced = 0;
    char name[24];

    for (i = 0; i < m; i++) {
        statement_name(v[i]->sql, name);
        if (!PQsendQueryPrepared(conn, name, v[i]->n, v[i]->params, NULL, NULL, 0)) {
            return RUN_CONN_FAILED;
        }
    }
    if (!PQpipelineSync(conn) || flush_sent(conn, deadline) != 0) {
        return RUN_CONN_FAILED;
    }
    for (i = 0; i <= m && !failed; i++) {
        /* A statement's result and the NULL after it; then the Sync's (after the commit). */
        while ((res = pipeline_result(conn, deadline, &failed))) {
            ExecStatusType t = PQresultStatus(res);
            if (t == PGRES_PIPELINE_SYNC) {
                PQclear(res);
                synced = 1;
                break;
            }
            if (i < m && !v[i]->res && (t == PGRES_TUPLES_OK || t == PGRES_COMMAND_OK)) {
                v[i]->res = res;
            }
            else if (t == PGRES_FATAL_ERROR && !error) {
                error = res;
                error_at = i < m ? i : -1;
            }
            else {
                PQclear(res);   /* PGRES_PIPELINE_ABORTED: skipped after an error */
            }
        }
    }
    if (!error && !failed && synced && PQstatus(conn) == CONNECTION_OK) {
        return RUN_COMMITTED;
    }
    /* Not committed (or not known to be): no statement's result may reach its caller. */
    for (i = 0; i < m; i++) {
        PQclear(v[i]->res);
        v[i]->res = NULL;
    }
    if (failed || !synced || PQstatus(conn) != CONNECTION_OK) {
        PQclear(error);
        return RUN_CONN_FAILED;
    }
    *res_out = error;
    *at = error_at;
    if (not_prepared(error)) {
        return RUN_NOT_PREPARED;
    }
    if (error_at >= 0 && mcp_store_classify(PQresultErrorField(error, PG_DIAG_SQLSTATE), 1)
                         == MCP_STORE_FAULT_PERMANENT) {
        return RUN_REFUSED_ONE;
    }
    return RUN_GROUP_FAILED;
}

static int by_key(const void *a, const void *b)
{
    const group_entry_t *x = *(group_entry_t *const *)a, *y = *(group_entry_t *const *)b;

    return x->key < y->key ? -1 : x->key > y->key;
}

/* The committer's work: the batch v[0..m), sorted, on one borrowed connection, until every
 * entry has its answer. Runs without the group's lock. */
static void group_commit(mcp_store_group_t *g, mcp_store_t *db, apr_pool_t *p,
                         group_entry_t **v, int m, apr_time_t until)
{
    const char *err = NULL;
    PGconn *conn;
    int i, prepared = 0, broken = 0;

    group_entry_t *w[256];

    /* The caller keeps its own list of the batch (to mark every entry done): work on a copy. */
    memcpy(w, v, sizeof(v[0]) * m);
    v = w;
    qsort(v, m, sizeof(v[0]), by_key);
    conn = db->lender->borrow(db, &err);
    if (!conn) {
        for (i = 0; i < m; i++) {
            entry_fail(v[i], db->fatal ? db->fatal : err ? err : "no connection", NULL, 1);
            v[i]->fatal = db->fatal != NULL;
        }
        return;
    }
    if (PQsetnonblocking(conn, 1) != 0 || !PQenterPipelineMode(conn)) {
        err = trimmed(p, PQerrorMessage(conn));
        for (i = 0; i < m; i++) {
            entry_fail(v[i], err, NULL, 1);
        }
        db->lender->give_back(db, conn, 1);
        return;
    }
    while (m > 0) {
        PGresult *error = NULL;
        int at = -1, rc = pipeline_run(conn, v, m, until, &at, &error);

        if (rc == RUN_COMMITTED) {
            apr_thread_mutex_lock(g->lock);
            g->transactions++;
            g->statements += m;
            apr_thread_mutex_unlock(g->lock);
            break;
        }
        if (rc == RUN_NOT_PREPARED && !prepared) {
            PQclear(error);
            prepared = 1;
            if (pipeline_prepare(conn, v, m, until) == 0) {
                continue;
            }
            rc = RUN_CONN_FAILED;
        }
        if (rc == RUN_REFUSED_ONE) {
            /* Its own answer; the others go again without it. */
            v[at]->res = error;
            memmove(v + at, v + at + 1, sizeof(v[0]) * (m - at - 1));
            m--;
            continue;
        }
        if (rc == RUN_CONN_FAILED) {
            err = trimmed(p, PQerrorMessage(conn));
            if (PQstatus(conn) == CONNECTION_OK) {
                err = apr_psprintf(p, "no answer in time (MCPDatabaseTimeout %" APR_TIME_T_FMT
                                   " ms); connection given up",
                                   apr_time_as_msec(db->statement_timeout));
                give_up(conn);
            }
            broken = 1;
            for (i = 0; i < m; i++) {
                entry_fail(v[i], err, NULL, 1);
            }
        }
        else {
            /* Retryable (or, from the Sync, not one statement's): every caller decides. */
            const char *state = PQresultErrorField(error, PG_DIAG_SQLSTATE);

            err = trimmed(p, PQresultErrorMessage(error));
            for (i = 0; i < m; i++) {
                entry_fail(v[i], err, state, 0);
            }
            broken = give_up_if_read_only(conn, state);
            PQclear(error);
        }
        break;
    }
    if (!broken) {
        PQexitPipelineMode(conn);
        PQsetnonblocking(conn, 0);
    }
    db->lender->give_back(db, conn, broken);
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

/* Runs the statement in the child's group: returns when it is committed (its result), or
 * failed (its error result, or NULL with *err, *state, *broken). deadline: when the caller's
 * patience ends (a committer's statement bound starts when it starts committing). */
static PGresult *group_run(mcp_store_t *db, apr_pool_t *p, const char *sql, int n,
                           const char *const *params, apr_int64_t key, apr_time_t deadline,
                           const char **err, const char **state, int *broken, int *fatal)
{
    mcp_store_group_t *g = db->group;
    group_entry_t e;

    memset(&e, 0, sizeof(e));
    e.sql = sql;
    e.n = n;
    e.params = params;
    e.key = key;
    apr_thread_mutex_lock(g->lock);
    if (g->tail) {
        g->tail->next = &e;
    }
    else {
        g->head = &e;
    }
    g->tail = &e;
    while (!e.done) {
        if (!e.taken && g->busy < g->committers) {
            /* This thread commits the waiting ones (its own among them). */
            group_entry_t *v[256], *x;
            int i, m = 0, max = g->max < 256 ? g->max : 256;

            g->busy++;
            while (g->head && m < max) {
                x = g->head;
                g->head = x->next;
                x->next = NULL;
                x->taken = 1;
                v[m++] = x;
            }
            if (!g->head) {
                g->tail = NULL;
            }
            apr_thread_mutex_unlock(g->lock);
            db->until = db->patience > 0 ? deadline
                        : db->statement_timeout > 0 ? apr_time_now() + db->statement_timeout
                        : 0;
            group_commit(g, db, p, v, m, statement_until(db, deadline));
            apr_thread_mutex_lock(g->lock);
            for (i = 0; i < m; i++) {
                v[i]->done = 1;
            }
            g->busy--;
            apr_thread_cond_broadcast(g->done);
        }
        else {
            apr_thread_cond_wait(g->done, g->lock);
        }
    }
    apr_thread_mutex_unlock(g->lock);
    *broken = e.broken;
    *fatal = e.fatal;
    if (!e.res) {
        *err = apr_pstrdup(p, e.err);
        *state = e.state[0] ? apr_pstrdup(p, e.state) : NULL;
    }
    return e.res;
}

/* mcp_store_exec, in the child's group (see mcp_store.h) when key >= 0 and the handle has one:
 * for the hot path's writes only (statements whose locks are their own stream's row). */
static mcp_store_status_t exec_as(mcp_store_t *db, apr_pool_t *p, const char *what,
                                  const char *sql, int n, const char *const *params,
                                  PGresult **out, apr_int64_t key)
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

            res = group_run(db, p, sql, n, params, key, deadline, &err, &state, &broken,
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
            err = trimmed(p, PQresultErrorMessage(res));
            fault = mcp_store_classify(state, !broken);
            PQclear(res);
            if (give_up_if_read_only(conn, state)) {
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

mcp_store_status_t mcp_store_exec(mcp_store_t *db, apr_pool_t *p, const char *what,
                                  const char *sql, int n, const char *const *params,
                                  PGresult **out)
{
    return exec_as(db, p, what, sql, n, params, out, -1);
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
        *err = trimmed(p, PQresultErrorMessage(res));
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

/* A result read to the end by its caller (what is kept of it was copied into p) goes now
 * instead of with p. */
static void result_done(apr_pool_t *p, PGresult *res)
{
    apr_pool_cleanup_run(p, res, clear_result);
}

static const char *cell_dup(apr_pool_t *p, PGresult *res, int row, int col)
{
    const char *v = mcp_store_cell(res, row, col);

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

/* The first column of the first row as a bigint; NOT_FOUND when there is no row. */
static mcp_store_status_t first_id(PGresult *res, apr_int64_t *out)
{
    if (PQntuples(res) < 1) {
        return MCP_STORE_NOT_FOUND;
    }
    *out = apr_atoi64(PQgetvalue(res, 0, 0));
    return MCP_STORE_OK;
}

#define NARGS(a) MCP_STORE_NARGS(a)

mcp_store_status_t mcp_store_exec_row(mcp_store_t *db, apr_pool_t *p, const char *what,
                                      const char *sql, int n, const char *const *params,
                                      PGresult **res)
{
    mcp_store_status_t rv = mcp_store_exec(db, p, what, sql, n, params, res);

    return rv != MCP_STORE_OK ? rv : PQntuples(*res) < 1 ? MCP_STORE_NOT_FOUND : MCP_STORE_OK;
}

/* ---- sessions ---------------------------------------------------------------------------- */

/* A session's activity, recorded at most once a second: last_seen_at is indexed, so an update
 * that changes it can never be HOT (new index entries, more WAL); one that keeps it can. */
#define TOUCH_SESSION MCP_STORE_TOUCH_SESSION

/* Ending a session (terminated_at set) locks its row FOR UPDATE first, not with the UPDATE's
 * own NO KEY UPDATE: the lock conflicts with the FOR KEY SHARE that a request's record-then-
 * dispatch holds on a fresh session (mcp_store_stream_open_request_admitted), so the two are
 * serialised: a request admitted first has its stream committed before the session ends (and
 * ended with it), one that comes later re-checks the row after the end and is refused. */
#define SESSION_END_LOCK "FOR UPDATE"

/* Live for principal $2 at backend $3, active within $4 seconds (0: no idle limit). */
#define SESSION_LIVE \
    "terminated_at IS NULL AND principal IS NOT DISTINCT FROM $2 AND backend_url = $3" \
    " AND ($4::int = 0 OR last_seen_at > now() - make_interval(secs => $4::int))"


mcp_store_status_t mcp_store_session_touch(mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, int idle_secs,
                                           mcp_store_session_t **out)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET " TOUCH_SESSION
        " WHERE id = $1 AND terminated_at IS NULL AND principal IS NOT DISTINCT FROM $3"
        "   AND ($2::int = 0 OR last_seen_at > now() - make_interval(secs => $2::int))"
        " RETURNING backend_url, backend_session_id, protocol_version";
    const char *args[3];
    mcp_store_session_t *s;
    mcp_store_status_t rv;
    PGresult *res;

    args[0] = id;
    args[1] = int_text(p, idle_secs);
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
    result_done(p, res);
    *out = s;
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_session_terminate(mcp_store_t *db, apr_pool_t *p, const char *id,
                                               const char *principal, const char *by)
{
    static const char sql[] =
        "UPDATE mcp.sessions SET terminated_at = now(), terminated_by = $1"
        " WHERE id = (SELECT id FROM mcp.sessions"
        "              WHERE id = $2 AND terminated_at IS NULL"
        "                AND principal IS NOT DISTINCT FROM $3 " SESSION_END_LOCK ")"
        "   AND terminated_at IS NULL";
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
        "              WHERE id = $1 AND backend_url = $2 AND terminated_at IS NULL"
        "                AND $3::int > 0"
        "                AND last_seen_at <= now() - make_interval(secs => $3::int) "
        SESSION_END_LOCK ")"
        "   AND terminated_at IS NULL"
        " RETURNING backend_session_id";
    const char *args[3];
    mcp_store_status_t rv;
    PGresult *res;

    *backend_session_id = NULL;
    args[0] = id;
    args[1] = backend_url;
    args[2] = int_text(p, idle_secs);
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
        "   AND terminated_at IS NULL"
        " RETURNING id, backend_url, backend_session_id, protocol_version";
    const char *args[1];
    mcp_store_status_t rv;
    PGresult *res;
    int i;

    *expired = 0;
    args[0] = int_text(p, limit);
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

/* ---- streams and events ------------------------------------------------------------------ */

/* The jsonb copies of messages known to be valid JSON: a statement comes in two texts, one with
 * a plain cast for texts that certainly cast (mcp_text_jsonb_plain), one with mcp.audit_jsonb,
 * which never fails a statement but costs a plpgsql call and a subtransaction per message (~20
 * us each: bench/results.md, issue 12, fourth pass). Two texts, not a CASE on a parameter: with
 * one, PostgreSQL re-plans the prepared statement on every call (a custom plan folds the CASE,
 * so it always looks cheaper than the generic one). */
#define JSONB_PLAIN(param)   param "::text::jsonb"
#define JSONB_AUDITED(param) "mcp.audit_jsonb(" param "::text)"

static int plain_jsonb(const char *json)
{
    return json && mcp_text_jsonb_plain(json, strlen(json));
}

/* A PostgreSQL array literal of n strings. */
static const char *text_array(apr_pool_t *p, int n, const char *const *v)
{
    apr_array_header_t *parts = apr_array_make(p, n, sizeof(const char *));
    int i;

    for (i = 0; i < n; i++) {
        const char *c;
        char *out = apr_palloc(p, 2 * strlen(v[i]) + 3), *o = out;
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

mcp_store_status_t mcp_store_streams_renew(mcp_store_t *db, apr_pool_t *p, int n,
                                           const apr_int64_t *ids, const char *const *sessions,
                                           const int *secs, apr_array_header_t **alive)
{
    static const char sql[] =
        "WITH v AS ("
        "  SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[]) AS v(id, session_id, secs)"
        /* Row locks in id order, as the group commit takes them: never a deadlock with it. */
        "), locked AS ("
        "  SELECT s.id FROM mcp.streams s JOIN v ON v.id = s.id WHERE s.status = 'open'"
        "   ORDER BY s.id FOR NO KEY UPDATE OF s"
        "), st AS ("
        "  UPDATE mcp.streams s SET lease_until = now() + make_interval(secs => v.secs)"
        "    FROM v WHERE s.id = v.id AND s.status = 'open' AND s.id IN (SELECT id FROM locked)"
        "  RETURNING s.id, s.session_id"
        "), se AS ("
        "  UPDATE mcp.sessions SET last_seen_at = now()"
        "   WHERE id IN (SELECT session_id FROM st)"
        ")"
        "SELECT id FROM st";
    apr_array_header_t *idv = apr_array_make(p, n, sizeof(const char *));
    apr_array_header_t *secv = apr_array_make(p, n, sizeof(const char *));
    const char *args[3];
    mcp_store_status_t rv;
    PGresult *res;
    int i;

    for (i = 0; i < n; i++) {
        APR_ARRAY_PUSH(idv, const char *) = i64(p, ids[i]);
        APR_ARRAY_PUSH(secv, const char *) = int_text(p, secs[i]);
    }
    args[0] = apr_pstrcat(p, "{", apr_array_pstrcat(p, idv, ','), "}", NULL);
    args[1] = text_array(p, n, sessions);
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
    args[2] = int_text(p, code);
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
    return streams_end(db, p, "finishing streams whose owner is gone",
                       "lease_until < now() AND ($1::bigint = 0 OR id = $1::bigint)",
                       i64(p, stream_id), -32002, message, finished);
}

mcp_store_status_t mcp_store_session_streams_end(mcp_store_t *db, apr_pool_t *p,
                                                 const char *session_id, const char *message,
                                                 long *ended)
{
    return streams_end(db, p, "ending a session's streams", "session_id = $1", session_id,
                       -32001, message, ended);
}

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
    args[1] = i64(p, stream_id);
    args[2] = i64(p, first_seq);
    args[3] = direction;
    args[4] = session->principal;
    args[5] = messages;
    /* In the child's group: its locks are its own stream row's (and none for stream 0).
     * messages is valid JSON ($6::json refuses it otherwise). */
    if ((rv = exec_as(db, p, "storing events", plain_jsonb(messages) ? plain : audited,
                      NARGS(args), args, &res, stream_id))
        != MCP_STORE_OK) {
        return rv;
    }
    return PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? MCP_STORE_OK
                                                                         : MCP_STORE_NOT_FOUND;
}

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
    const char *args[6];

    args[0] = session->id;
    args[1] = i64(p, stream_id);
    args[2] = i64(p, first_seq);
    args[3] = session->principal;
    args[4] = messages;
    args[5] = status;
    /* messages is valid JSON ($5::json refuses it otherwise). */
    return exec_as(db, p, "storing a stream's last messages and its end",
                   plain_jsonb(messages) ? plain : audited, NARGS(args), args, NULL, stream_id);
}

mcp_store_status_t mcp_store_events_append_finish2(mcp_store_t *db, apr_pool_t *p,
                                                   const mcp_store_session_t *session_a,
                                                   apr_int64_t stream_a, apr_int64_t first_a,
                                                   const char *messages_a,
                                                   const mcp_store_session_t *session_b,
                                                   apr_int64_t stream_b, apr_int64_t first_b,
                                                   const char *messages_b, const char *status)
{
    /* Each side as in mcp_store_events_append_finish; one UPDATE ends both (rows locked in id
     * order, as the expiry locks them). */
    static const char sql[] =
        "WITH ins AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text,"
        "                          message, principal)"
        "  SELECT x.session_id, x.stream_id, x.first + t.ord - 1, 'out', 'message',"
        "         t.value::text, mcp.audit_jsonb(t.value::text), x.principal"
        "    FROM (VALUES ($1, $2::bigint, $3::bigint, $4, $5::json),"
        "                 ($6, $7::bigint, $8::bigint, $9, $10::json))"
        "         AS x(session_id, stream_id, first, principal, messages),"
        "         json_array_elements(x.messages) WITH ORDINALITY AS t(value, ord)"
        "   WHERE EXISTS (SELECT 1 FROM mcp.streams WHERE id = x.stream_id AND status = 'open')"
        "   ORDER BY x.stream_id, t.ord"
        "  ON CONFLICT (stream_id, seq) DO NOTHING"
        ")"
        "UPDATE mcp.streams SET status = $11, completed_at = now()"
        " WHERE id IN ($2::bigint, $7::bigint) AND status = 'open'";
    const char *args[11];

    args[0] = session_a ? session_a->id : NULL;
    args[1] = i64(p, stream_a);
    args[2] = i64(p, first_a);
    args[3] = session_a ? session_a->principal : NULL;
    args[4] = messages_a;
    args[5] = session_b ? session_b->id : NULL;
    args[6] = i64(p, stream_b);
    args[7] = i64(p, first_b);
    args[8] = session_b ? session_b->principal : NULL;
    args[9] = messages_b;
    args[10] = status;
    return mcp_store_exec(db, p, "storing two streams' last messages and their end", sql,
                          NARGS(args), args, NULL);
}

#define STREAM_COLUMNS \
    "SELECT s.kind, s.status, (s.status = 'open' AND s.lease_until < now())," \
    "       (SELECT max(seq) FROM mcp.events WHERE stream_id = s.id), s.owner" \
    "  FROM mcp.streams s"

/* The first row's kind, status, lease_expired, last_seq and owner (columns 0-4). */
static void read_stream(PGresult *res, apr_int64_t stream_id, mcp_store_stream_t *out)
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
    read_stream(res, stream_id, out);
    return MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_get(mcp_store_t *db, apr_pool_t *p,
                                        apr_int64_t stream_id, mcp_store_stream_t *out)
{
    static const char sql[] = STREAM_COLUMNS " WHERE s.id = $1::bigint";
    const char *args[1];

    args[0] = i64(p, stream_id);
    return select_stream(db, p, sql, "looking up a stream", NARGS(args), args, stream_id, out);
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
        "                            holder, idle_timeout_secs)"
        "  SELECT $5, $6, $7, $8, $9, mcp.audit_jsonb($10::text), mcp.audit_jsonb($11::text),"
        "         mcp.audit_jsonb($12::text), $1, $4::int FROM a"
        "   WHERE a.refused IS NULL"
        "  RETURNING id, principal"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, direction, kind, message_text, message, principal)"
        "  SELECT s.id, v.direction, 'message', v.t, mcp.audit_jsonb(v.t), s.principal"
        "    FROM s, (VALUES (1, 'in', $13::text), (2, 'out', $14::text)) AS v(ord, direction, t)"
        "   ORDER BY v.ord"
        ")"
        "SELECT a.refused, s.id FROM a LEFT JOIN s ON true";
    const char *args[14];
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    args[0] = holder;
    args[1] = int_text(p, max_live);
    args[2] = int_text(p, max_per_holder);
    args[3] = int_text(p, idle_secs);
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
    *refused = refusal(mcp_store_cell(res, 0, 0));
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
    args[0] = int_text(p, max_live);
    args[1] = int_text(p, max_per_holder);
    args[2] = holder;
    args[3] = int_text(p, idle_secs);
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

mcp_store_status_t mcp_store_stream_open_request_admitted(
    mcp_store_t *db, apr_pool_t *p, mcp_store_session_t *session, int idle_secs,
    const char *request_id, const char *method, const char *inbound, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, int n_primed, const char *const *primed,
    apr_int64_t *stream_id, mcp_store_refusal_t *refused)
{
    /* The admission comes between the session's check and the stream's insert. The session's
     * row is locked in one mode only, chosen from a plain read: an UPDATE (the touch) when its
     * activity is over a second old, else FOR KEY SHARE, the lock the stream's foreign key
     * takes anyway (no new row version, none of the row's CHECKs, no second lock). Either waits
     * for a termination in flight (SESSION_END_LOCK) and re-checks the row after it, and a
     * termination waits for either. A transaction that never upgrades a lock it holds on the
     * row cannot deadlock with another on it; other requests' KEY SHARE (their foreign keys,
     * their statement 2, grouped or not) never blocks this UPDATE. A stale read makes the
     * UPDATE, which waits for the lock instead of skipping: a session in use is touched. */
#define SQL(JSONB) \
        "WITH cur AS (" \
        "  SELECT last_seen_at < now() - interval '1 second' AS stale FROM mcp.sessions" \
        "   WHERE id = $1" \
        "), touched AS (" \
        "  UPDATE mcp.sessions SET last_seen_at = now()" \
        "   WHERE id = $1 AND (SELECT stale FROM cur) AND " SESSION_LIVE \
        "  RETURNING id, principal, backend_session_id, protocol_version" \
        "), held AS (" \
        "  SELECT id, principal, backend_session_id, protocol_version FROM mcp.sessions" \
        "   WHERE id = $1 AND (SELECT stale FROM cur) IS FALSE AND " SESSION_LIVE \
        "     FOR KEY SHARE" \
        "), se AS (" \
        "  SELECT * FROM touched UNION ALL SELECT * FROM held" \
        "), a AS (" \
        "  SELECT mcp.admit_stream(se.id, $5, 0, $6::int, $7::int, 0) AS refused FROM se" \
        "), s AS (" \
        "  INSERT INTO mcp.streams (session_id, kind, request_id_text, request_id, method, owner," \
        "                           lease_until, holder)" \
        "  SELECT se.id, 'request', $8, " JSONB("$8") ", $9, $10," \
        "         now() + make_interval(secs => $11::int), $5" \
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
        "SELECT s.id, se.backend_session_id, se.protocol_version, a.refused" \
        "  FROM se CROSS JOIN a LEFT JOIN s ON true"
    static const char plain[] = SQL(JSONB_PLAIN), audited[] = SQL(JSONB_AUDITED);
#undef SQL
    const char *args[13];
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    args[0] = session->id;
    args[1] = session->principal;
    args[2] = session->backend_url;
    args[3] = int_text(p, idle_secs);
    args[4] = limits->holder;
    args[5] = int_text(p, limits->max_session_streams);
    args[6] = int_text(p, limits->max_holder_streams);
    args[7] = request_id;
    args[8] = method;
    args[9] = owner;
    args[10] = int_text(p, lease_secs);
    args[11] = inbound;
    args[12] = text_array(p, n_primed, primed);
    /* request_id and inbound are valid JSON (the caller parsed them). */
    if ((rv = mcp_store_exec_row(db, p, "storing the request and its stream",
                                 plain_jsonb(request_id) && plain_jsonb(inbound) ? plain : audited,
                                 NARGS(args), args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    session->backend_session_id = mcp_store_cell(res, 0, 1);
    session->protocol_version = mcp_store_cell(res, 0, 2);
    *refused = refusal(mcp_store_cell(res, 0, 3));
    if (!*refused) {
        *stream_id = apr_atoi64(PQgetvalue(res, 0, 0));
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_open_stateless_admitted(
    mcp_store_t *db, apr_pool_t *p, const char *protocol_version, const char *principal,
    const char *request_id, const char *method, const char *inbound, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused)
{
    static const char sql[] =
        "WITH a AS ("
        "  SELECT mcp.admit_stream(NULL, $1, 0, 0, $2::int, 0) AS refused"
        "), s AS ("
        "  INSERT INTO mcp.streams (session_id, kind, request_id_text, request_id, method, owner,"
        "                           lease_until, holder, protocol_version, principal)"
        "  SELECT NULL, 'request', $3, mcp.audit_jsonb($3::text), $4, $5,"
        "         now() + make_interval(secs => $6::int), $1, $7, $8"
        "    FROM a WHERE a.refused IS NULL"
        "  RETURNING id"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text,"
        "                          message, principal)"
        "  SELECT NULL, s.id, 0, 'in', 'message', $9, mcp.audit_jsonb($9::text), $8 FROM s"
        ")"
        "SELECT s.id, a.refused FROM a LEFT JOIN s ON true";
    const char *args[9];
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    args[0] = limits->holder;
    args[1] = int_text(p, limits->max_holder_streams);
    args[2] = request_id;
    args[3] = method;
    args[4] = owner;
    args[5] = int_text(p, lease_secs);
    args[6] = protocol_version;
    args[7] = principal;
    args[8] = inbound;
    if ((rv = mcp_store_exec(db, p, "storing the stateless request and its stream", sql,
                             NARGS(args), args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) < 1) {
        db->error = "storing the stateless request: no result";
        return MCP_STORE_UNAVAILABLE;
    }
    *refused = refusal(mcp_store_cell(res, 0, 1));
    if (!*refused) {
        *stream_id = apr_atoi64(PQgetvalue(res, 0, 0));
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_stream_open_standalone_admitted(
    mcp_store_t *db, apr_pool_t *p, const mcp_store_session_t *session, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
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
        "  SELECT mcp.admit_stream($1, $2, 0, $3::int, $4::int, 0) AS refused"
        "), s AS ("
        "  INSERT INTO mcp.streams (session_id, kind, owner, lease_until, holder)"
        "  SELECT $1, 'standalone', $5, now() + make_interval(secs => $6::int), $2"
        "    FROM a WHERE a.refused IS NULL"
        "  ON CONFLICT (session_id) WHERE kind = 'standalone' AND status = 'open' DO NOTHING"
        "  RETURNING id, session_id"
        "), e AS ("
        "  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text,"
        "                          message, principal)"
        "  SELECT session_id, id, 0, 'out', 'priming', NULL, NULL, $7 FROM s"
        ")"
        "SELECT a.refused, s.id FROM a LEFT JOIN s ON true";
    const char *args[7], *id;
    mcp_store_status_t rv;
    PGresult *res;

    *refused = MCP_STORE_ADMITTED;
    args[0] = session->id;
    args[1] = limits->holder;
    args[2] = int_text(p, limits->max_session_streams);
    args[3] = int_text(p, limits->max_holder_streams);
    args[4] = owner;
    args[5] = int_text(p, lease_secs);
    args[6] = session->principal;
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
        result_done(p, res);
        db->sqlstate = NULL;
        db->error = "opening the standalone stream: no result";
        return MCP_STORE_REFUSED;
    }
    *refused = refusal(mcp_store_cell(res, 0, 0));
    id = mcp_store_cell(res, 0, 1);
    rv = *refused ? MCP_STORE_LIMIT : id && *id ? MCP_STORE_OK : MCP_STORE_CONFLICT;
    if (rv == MCP_STORE_OK) {
        *stream_id = apr_atoi64(id);
    }
    result_done(p, res);   /* the stream's request pool would hold it for the stream's life */
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
        "  SELECT mcp.admit_stream($2, $4, st.id, $5::int, $6::int, $7::int) AS refused"
        "    FROM st WHERE st.status = 'open'"
        "), f AS ("
        "  INSERT INTO mcp.followers (stream_id, session_id, holder, owner, lease_until)"
        "  SELECT st.id, $2, $4, $8, now() + make_interval(secs => $9::int)"
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
    args[0] = i64(p, stream_id);
    args[1] = session_id;
    args[2] = i64(p, seq);
    args[3] = limits->holder;
    args[4] = int_text(p, limits->max_session_streams);
    args[5] = int_text(p, limits->max_holder_streams);
    args[6] = int_text(p, limits->max_stream_followers);
    args[7] = owner;
    args[8] = int_text(p, lease_secs);
    if ((rv = mcp_store_exec_row(db, p, "looking up an event", sql, NARGS(args), args, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    read_stream(res, stream_id, out);
    *refused = refusal(mcp_store_cell(res, 0, 5));
    id = mcp_store_cell(res, 0, 6);
    if (id && *id) {
        *follower_id = apr_atoi64(id);
    }
    return *refused ? MCP_STORE_LIMIT : MCP_STORE_OK;
}

mcp_store_status_t mcp_store_follower_renew(mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t follower_id, int lease_secs)
{
    static const char sql[] =
        "UPDATE mcp.followers SET lease_until = now() + make_interval(secs => $1::int)"
        " WHERE id = $2::bigint";
    const char *args[2];

    args[0] = int_text(p, lease_secs);
    args[1] = i64(p, follower_id);
    return mcp_store_exec(db, p, "renewing a follower's lease", sql, NARGS(args), args, NULL);
}

mcp_store_status_t mcp_store_follower_release(mcp_store_t *db, apr_pool_t *p,
                                              apr_int64_t follower_id)
{
    static const char sql[] = "DELETE FROM mcp.followers WHERE id = $1::bigint";
    const char *args[1];

    args[0] = i64(p, follower_id);
    return mcp_store_exec(db, p, "releasing a follower", sql, NARGS(args), args, NULL);
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
    args[1] = i64(p, stream_id);
    args[2] = i64(p, after_seq);
    args[3] = int_text(p, max_rows);
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

/* ---- what the whole cluster holds ----------------------------------------------------------- */

mcp_store_status_t mcp_store_totals(mcp_store_t *db, apr_pool_t *p, mcp_store_totals_t *out)
{
    static const char sql[] =
        "SELECT (SELECT count(*) FROM mcp.sessions WHERE terminated_at IS NULL),"
        " (SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = 'request'),"
        " (SELECT count(*) FROM mcp.streams WHERE status = 'open' AND kind = 'standalone'),"
        " (SELECT count(*) FROM mcp.followers WHERE lease_until > now())";
    mcp_store_status_t rv;
    PGresult *res;

    memset(out, 0, sizeof(*out));
    if ((rv = mcp_store_exec(db, p, "counting live sessions and streams", sql, 0, NULL, &res))
        != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) == 1 && PQnfields(res) == 4) {
        out->live_sessions = apr_atoi64(PQgetvalue(res, 0, 0));
        out->open_request_streams = apr_atoi64(PQgetvalue(res, 0, 1));
        out->open_standalone_streams = apr_atoi64(PQgetvalue(res, 0, 2));
        out->followers = apr_atoi64(PQgetvalue(res, 0, 3));
    }
    return MCP_STORE_OK;
}

/* ---- retention -------------------------------------------------------------------------- */

mcp_store_status_t mcp_store_maintain(mcp_store_t *db, apr_pool_t *p, long retention_secs,
                                      int ahead, mcp_store_maintained_t *out)
{
    /* A procedure that commits after each step (sql/retention.sql): never inside a
     * transaction block, which this one statement is not. */
    static const char sql[] = "CALL mcp.maintain(make_interval(secs => $1::bigint), $2::int)";
    const char *args[2];
    mcp_store_status_t rv;
    PGresult *res;

    memset(out, 0, sizeof(*out));
    args[0] = retention_secs >= 0 ? apr_ltoa(p, retention_secs) : NULL;
    args[1] = int_text(p, ahead);
    if ((rv = mcp_store_exec(db, p, "maintaining partitions (mcp.maintain)", sql, NARGS(args),
                             args, &res)) != MCP_STORE_OK) {
        return rv;
    }
    if (PQntuples(res) == 1 && PQnfields(res) == 3) {
        out->created = atoi(PQgetvalue(res, 0, 0));
        out->dropped = atoi(PQgetvalue(res, 0, 1));
        out->deleted = apr_atoi64(PQgetvalue(res, 0, 2));
    }
    return MCP_STORE_OK;
}
