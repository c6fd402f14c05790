/* mcp_store — the store's core (see mcp_store.h): the handle, running a statement
 * (mcp_store_exec, mcp_store_exec_row, mcp_store_cell) with the retry policy and the
 * classification of database failures, and the group commit that exec runs the hot path's
 * writes in. The statements live beside it, one file per noun (mcp_store_session.c,
 * mcp_store_stream.c, mcp_store_event.c, mcp_store_lease.c, mcp_store_limits.c,
 * mcp_store_totals.c, mcp_store_retention.c), sharing the helpers that
 * mcp_store_private.h declares. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>

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

/* A statement's text's 64-bit FNV-1a hash: its prepared statement's name, and its key in the
 * set of what a connection has prepared (mcp_store_prepared.h). */
static apr_uint64_t statement_hash(const char *sql)
{
    apr_uint64_t h = APR_UINT64_C(14695981039346656037);
    const unsigned char *c;

    for (c = (const unsigned char *)sql; *c; c++) {
        h = (h ^ *c) * APR_UINT64_C(1099511628211);
    }
    return h;
}

/* The name of the server-side prepared statement of the text whose hash is h: "mcp_" and the
 * hash in hex (the store's statements are a fixed set of constants). */
static void statement_name(apr_uint64_t h, char name[24])
{
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

/* Whether a prepare's result leaves the statement prepared on the connection: done, or there
 * already (42P05: prepared by an earlier try whose answer was lost to this memory). */
static int prepare_done(PGresult *res)
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
    apr_uint64_t hash = statement_hash(sql);
    char name[24];
    int tries;

    *broken = 0;
    statement_name(hash, name);
    /* Non-blocking while it is ours: sending a large statement to a server that stopped
     * reading must not block either. */
    if (PQsetnonblocking(conn, 1) != 0) {
        *broken = 1;
        *err = trimmed(p, PQerrorMessage(conn));
        return NULL;
    }
    for (tries = 0; tries < 2; tries++) {
        if (!mcp_store_prepared_has(conn, hash)) {
            if (!PQsendPrepare(conn, name, sql, n, NULL)) {
                *broken = 1;
                *err = trimmed(p, PQerrorMessage(conn));
                res = NULL;
                break;
            }
            if (!(res = await_result(db, p, conn, deadline, err, broken))) {
                break;
            }
            if (!prepare_done(res)) {
                break;   /* the statement's own error (a syntax error is permanent) */
            }
            PQclear(res);
            res = NULL;
            mcp_store_prepared_add(conn, hash);
        }
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
        res = NULL;
        mcp_store_prepared_forget(conn);
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
    apr_uint64_t           hash;       /* statement_hash(sql)                                 */
    int                    n;
    const char *const     *params;
    apr_int64_t            key;        /* the stream id: the order within a transaction      */
    const mcp_store__mergeable_t *merge;   /* how instances run as one; NULL: never     */
    struct group_entry_t **parts;      /* a merged entry's callers' entries (nparts >= 2)   */
    int                    nparts;
    int                    taken;      /* in a committer's batch                              */
    int                    done;
    apr_time_t             until;      /* its statement's bound (0: none)                    */
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

/* Prepares every distinct statement of the batch that conn is not known to have, each in its
 * own implicit transaction, and records those it answers for (prepare_done). Nothing to send
 * when it has them all. Non-zero when the connection failed. */
static int pipeline_prepare(PGconn *conn, group_entry_t **v, int m, apr_time_t deadline)
{
    apr_uint64_t sent[256];
    int i, j, nsent = 0, done = 0, failed = 0;
    char name[24];

    for (i = 0; i < m && nsent < (int)(sizeof(sent) / sizeof(sent[0])); i++) {
        apr_uint64_t hash = v[i]->hash;

        for (j = 0; j < nsent && sent[j] != hash; j++) {
        }
        if (j < nsent || mcp_store_prepared_has(conn, hash)) {
            continue;
        }
        statement_name(hash, name);
        if (!PQsendPrepare(conn, name, v[i]->sql, v[i]->n, NULL) || !PQpipelineSync(conn)) {
            return -1;
        }
        sent[nsent++] = hash;
    }
    if (!nsent) {
        return 0;
    }
    if (flush_sent(conn, deadline) != 0) {
        return -1;
    }
    /* Each prepare's result, the NULL after it, then its Sync's, in the order sent. */
    while (done < nsent) {
        PGresult *res = pipeline_result(conn, deadline, &failed);
        if (failed) {
            return -1;
        }
        if (res && PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
            done++;
        }
        else if (res && prepare_done(res)) {
            mcp_store_prepared_add(conn, sent[done]);
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
        statement_name(v[i]->hash, name);
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

/* The order of a group's statements: their keys, then, among instances of one mergeable
 * statement, its order parameter's texts. */
static int by_key(const void *a, const void *b)
{
    const group_entry_t *x = *(group_entry_t *const *)a, *y = *(group_entry_t *const *)b;
    const char *u, *v;

    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    if (!x->merge || x->merge != y->merge || x->merge->order < 0) {
        return 0;
    }
    u = x->params[x->merge->order];
    v = y->params[y->merge->order];
    return !u || !v ? (u != NULL) - (v != NULL) : strcmp(u, v);
}

/* The elements of n non-empty one-dimensional array literals ("{...}") as one. */
static const char *arrays_joined(apr_pool_t *p, int n, const char *const *v)
{
    apr_size_t len = 3;
    char *out, *o;
    int i;

    for (i = 0; i < n; i++) {
        len += strlen(v[i]);
    }
    out = o = apr_palloc(p, len);
    *o++ = '{';
    for (i = 0; i < n; i++) {
        apr_size_t inner = strlen(v[i]) - 2;   /* without its braces */

        if (i > 0) {
            *o++ = ',';
        }
        memcpy(o, v[i] + 1, inner);
        o += inner;
    }
    *o++ = '}';
    *o = '\0';
    return out;
}

/* At most this many callers' statements in one merged statement. */
#define MERGE_MAX 32

/* Replaces the entries of v[0..m) that can run as one (the same mergeable statement, two or
 * more) by a merged entry each, allocated in p, in the place of its first part: the order of
 * the batch is otherwise kept. Returns the new m. */
static int merge_batch(apr_pool_t *p, group_entry_t **v, int m)
{
    group_entry_t *out[256];
    int i, j, o = 0;

    for (i = 0; i < m; i++) {
        group_entry_t *e = v[i], *merged;
        const char **params, **column;
        int x, at[MERGE_MAX], k = 0;

        if (!e) {
            continue;   /* a part of an earlier merged entry */
        }
        for (j = i; e->merge && j < m && k < MERGE_MAX; j++) {
            if (v[j] && v[j]->merge == e->merge) {
                at[k++] = j;
            }
        }
        if (k < 2) {
            out[o++] = e;
            continue;
        }
        merged = apr_pcalloc(p, sizeof(*merged));
        merged->parts = apr_palloc(p, sizeof(*merged->parts) * k);
        merged->nparts = k;
        for (j = 0; j < k; j++) {
            merged->parts[j] = v[at[j]];
            v[at[j]] = NULL;
        }
        /* Parameter x of the merged statement: the array of the parts' parameters x (or, when
         * they are arrays, their concatenation). */
        params = apr_palloc(p, sizeof(*params) * e->n);
        column = apr_palloc(p, sizeof(*column) * k);
        for (x = 0; x < e->n; x++) {
            for (j = 0; j < k; j++) {
                column[j] = merged->parts[j]->params[x];
            }
            params[x] = e->merge->arrays ? arrays_joined(p, k, column)
                                         : mcp_store__text_array(p, k, column);
        }
        merged->sql = e->merge->many;
        merged->hash = statement_hash(merged->sql);
        merged->n = e->n;
        merged->params = params;
        merged->key = e->key;
        out[o++] = merged;
    }
    memcpy(v, out, sizeof(v[0]) * o);
    return o;
}

/* Puts merged entry v[at] back as its parts, in its place (a part was refused: each then
 * runs on its own, so that only that one fails). Returns the new m. */
static int merge_undo(group_entry_t **v, int m, int at)
{
    group_entry_t *merged = v[at];

    memmove(v + at + merged->nparts, v + at + 1, sizeof(v[0]) * (m - at - 1));
    memcpy(v + at, merged->parts, sizeof(v[0]) * merged->nparts);
    m += merged->nparts - 1;
    merged->nparts = 0;
    return m;
}

/* Part i's rows of a merged result whose last column numbers the parts (1..k), in a result of
 * the other columns; NULL when out of memory. */
static PGresult *part_rows(const PGresult *merged, int i)
{
    int cols = PQnfields(merged) - 1, row, col, n = 0;
    PGresult *res = cols > 0 ? PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK) : NULL;
    PGresAttDesc attrs[32];

    if (!res || cols > (int)(sizeof(attrs) / sizeof(attrs[0]))) {
        PQclear(res);
        return NULL;
    }
    for (col = 0; col < cols; col++) {
        attrs[col].name = PQfname(merged, col);
        attrs[col].tableid = PQftable(merged, col);
        attrs[col].columnid = PQftablecol(merged, col);
        attrs[col].format = PQfformat(merged, col);
        attrs[col].typid = PQftype(merged, col);
        attrs[col].typlen = PQfsize(merged, col);
        attrs[col].atttypmod = PQfmod(merged, col);
    }
    if (!PQsetResultAttrs(res, cols, attrs)) {
        PQclear(res);
        return NULL;
    }
    for (row = 0; row < PQntuples(merged); row++) {
        if (atoi(PQgetvalue(merged, row, cols)) != i + 1) {
            continue;
        }
        for (col = 0; col < cols; col++) {
            int null = PQgetisnull(merged, row, col);

            if (!PQsetvalue(res, n, col, null ? NULL : PQgetvalue(merged, row, col),
                            null ? -1 : PQgetlength(merged, row, col))) {
                PQclear(res);
                return NULL;
            }
        }
        n++;
    }
    return res;
}

/* What a merged entry came to, for each of its callers: a success of its own (empty, or its
 * rows of the merged result: by_part), or the entry's failure. */
static void merge_done(group_entry_t *merged)
{
    int i;

    for (i = 0; i < merged->nparts; i++) {
        group_entry_t *e = merged->parts[i];

        if (merged->res) {
            e->res = e->merge->by_part ? part_rows(merged->res, i)
                                       : PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK);
            if (!e->res) {
                entry_fail(e, "out of memory", NULL, 0);
            }
        }
        else {
            memcpy(e->err, merged->err, sizeof(e->err));
            memcpy(e->state, merged->state, sizeof(e->state));
            e->broken = merged->broken;
            e->fatal = merged->fatal;
        }
    }
    PQclear(merged->res);
    merged->res = NULL;
}

/* The callers' statements among v[0..m). */
static int statements_of(group_entry_t **v, int m)
{
    int i, n = 0;

    for (i = 0; i < m; i++) {
        n += v[i]->nparts ? v[i]->nparts : 1;
    }
    return n;
}

/* The committer's work: the batch v[0..m), sorted, on one borrowed connection, until every
 * entry has its answer. Runs without the group's lock. Returns the error when the connection
 * failed under it (broken, or given up for no answer in time), else NULL. */
static const char *group_commit(mcp_store_group_t *g, mcp_store_t *db, apr_pool_t *p,
                                group_entry_t **v, int m, apr_time_t until)
{
    const char *err = NULL;
    PGconn *conn;
    apr_pool_t *merged;
    int i, forgot = 0, broken = 0;

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
        return NULL;
    }
    if (PQsetnonblocking(conn, 1) != 0 || !PQenterPipelineMode(conn)) {
        err = trimmed(p, PQerrorMessage(conn));
        for (i = 0; i < m; i++) {
            entry_fail(v[i], err, NULL, 1);
        }
        db->lender->give_back(db, conn, 1);
        return err;
    }
    apr_pool_create(&merged, p);
    m = merge_batch(merged, v, m);
    while (m > 0) {
        PGresult *error = NULL;
        int at = -1, rc = pipeline_prepare(conn, v, m, until) != 0
                          ? RUN_CONN_FAILED : pipeline_run(conn, v, m, until, &at, &error);

        if (rc == RUN_COMMITTED) {
            apr_thread_mutex_lock(g->lock);
            g->transactions++;
            g->statements += statements_of(v, m);
            apr_thread_mutex_unlock(g->lock);
            break;
        }
        if (rc == RUN_NOT_PREPARED && !forgot) {
            /* The connection's memory of what it prepared was wrong: all of it goes, and the
             * batch's statements are prepared again (once). */
            PQclear(error);
            forgot = 1;
            mcp_store_prepared_forget(conn);
            continue;
        }
        if (rc == RUN_REFUSED_ONE && v[at]->nparts) {
            /* One of its parts, and which is not known: each goes on its own (their own
             * statement is prepared first if this connection has not yet). */
            PQclear(error);
            m = merge_undo(v, m, at);
            continue;
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
    for (i = 0; i < m; i++) {
        if (v[i]->nparts) {
            merge_done(v[i]);
        }
    }
    apr_pool_destroy(merged);
    if (!broken) {
        PQexitPipelineMode(conn);
        PQsetnonblocking(conn, 0);
    }
    db->lender->give_back(db, conn, broken);
    return broken ? err : NULL;
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

/* Takes entry e out of the group's waiting list (it is there). */
static void group_unlink(mcp_store_group_t *g, group_entry_t *e)
{
    group_entry_t **at = &g->head, *prev = NULL;

    while (*at != e) {
        prev = *at;
        at = &(*at)->next;
    }
    *at = e->next;
    if (g->tail == e) {
        g->tail = prev;
    }
    e->next = NULL;
}

/* Runs the statement in the child's group: returns when it is committed (its result), or
 * failed (its error result, or NULL with *err, *state, *broken). deadline: when the caller's
 * patience ends. The statement's bound (the statement timeout, no later than the deadline)
 * starts when it is handed to the group, not when a committer takes it: a statement that
 * waited for a stuck commit fails in the time it would have alone, and a batch is bounded by
 * the earliest bound among its statements. */
static PGresult *group_run(mcp_store_t *db, apr_pool_t *p, const char *sql, int n,
                           const char *const *params, apr_int64_t key,
                           const mcp_store__mergeable_t *merge, apr_time_t deadline,
                           const char **err, const char **state, int *broken, int *fatal)
{
    mcp_store_group_t *g = db->group;
    group_entry_t e;
    int wake = 0;

    memset(&e, 0, sizeof(e));
    e.sql = sql;
    e.hash = statement_hash(sql);
    e.n = n;
    e.params = params;
    e.key = key;
    e.merge = merge;
    e.until = statement_until(db, deadline);
    apr_thread_mutex_lock(g->lock);
    if (g->tail) {
        g->tail->next = &e;
    }
    else {
        g->head = &e;
    }
    g->tail = &e;
    while (!e.done) {
        apr_time_t now = apr_time_now();

        if (!e.taken && e.until && now >= e.until) {
            /* Still waiting when its time is up (the commits before it are stuck). */
            group_unlink(g, &e);
            entry_fail(&e, apr_psprintf(p, "no answer in time (MCPDatabaseTimeout %"
                                        APR_TIME_T_FMT " ms): the commits before it did not end",
                                        apr_time_as_msec(db->statement_timeout)), NULL, 1);
            break;
        }
        if (!e.taken && g->busy < g->committers) {
            /* This thread commits the waiting ones (its own among them). */
            group_entry_t *v[256], *x;
            const char *fault;
            apr_time_t until = 0;
            int i, m = 0, max = g->max < 256 ? g->max : 256;

            g->busy++;
            while (g->head && m < max) {
                x = g->head;
                g->head = x->next;
                x->next = NULL;
                x->taken = 1;
                v[m++] = x;
                if (x->until && (!until || x->until < until)) {
                    until = x->until;
                }
            }
            if (!g->head) {
                g->tail = NULL;
            }
            apr_thread_mutex_unlock(g->lock);
            db->until = until;
            fault = group_commit(g, db, p, v, m, until);
            apr_thread_mutex_lock(g->lock);
            for (i = 0; i < m; i++) {
                v[i]->done = 1;
            }
            /* The statements queued meanwhile fail with the connection's fault, as they would
             * have on connections of their own, and each caller decides under its patience
             * (the lender's wait marks the database away and pings it before another try). A
             * committer of theirs would reconnect at once, and to a database that does not
             * answer that waits for libpq's connect timeout, past their bounds. */
            while (fault && (x = g->head)) {
                g->head = x->next;
                x->next = NULL;
                entry_fail(x, fault, NULL, 1);
                x->done = 1;
            }
            if (fault) {
                g->tail = NULL;
            }
            g->busy--;
            if (e.done) {
                /* Woken once the lock is free: woken under it, each waiter would wake only to
                 * sleep again on the lock until this thread let it go. */
                wake = 1;
                continue;
            }
            apr_thread_cond_broadcast(g->done);
        }
        else if (!e.taken && e.until) {
            apr_thread_cond_timedwait(g->done, g->lock, e.until - now);
        }
        else {
            apr_thread_cond_wait(g->done, g->lock);
        }
    }
    apr_thread_mutex_unlock(g->lock);
    if (wake) {
        apr_thread_cond_broadcast(g->done);
    }
    *broken = e.broken;
    *fatal = e.fatal;
    if (!e.res) {
        *err = apr_pstrdup(p, e.err);
        *state = e.state[0] ? apr_pstrdup(p, e.state) : NULL;
    }
    return e.res;
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

            res = group_run(db, p, sql, n, params, key, merge, deadline, &err, &state,
                            &broken, &fatal);
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
