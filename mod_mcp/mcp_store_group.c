/* mcp_store_group — the group commit (see mcp_store.h): the hot path's writes of a child's
 * concurrent requests, run by one thread at a time (the committer) in one transaction on one
 * borrowed connection, each caller waiting until its own statement is committed. Instances of
 * one mergeable statement run as one (mcp_store_private.h). */
#include <errno.h>
#include <poll.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include <apr_atomic.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>

#include "mcp_store_prepared.h"
#include "mcp_store_private.h"

/* A thread's wake-up: how a committer wakes one waiting caller, and only that one. A condition
 * shared by all woke every waiter at each commit, each to take the group's lock and most to
 * sleep again: at 8 concurrent calls ~2 context switches per call more (perf stat, 11.5 against
 * 9.2), and the herd fought for the lock (bench/before-after.md, twenty-third pass).
 *
 * One per thread that ever ran a statement in the group, made at its first and kept until the
 * group's pool goes: the group is made in the child's init before any of the module's threads
 * that run statements start, so their ends (pool cleanups) come before its own, and the MPM's
 * workers end before the child's pool goes. A committer posts after letting the lock go, so a
 * post may reach a thread after its statement is done and it has left: that is a spurious
 * wake-up at the thread's next wait, which every wait tolerates (it looks again under the
 * lock), and the waker is still there to take it. */
typedef struct group_waker_t {
    sem_t                  sem;
    struct group_waker_t  *next;       /* the group's list of them (to destroy them)          */
} group_waker_t;

/* One caller's statement, waiting in a group. Everything the committer hands back is either a
 * libpq result (malloc'd, owned by the waiter once done) or copied into the entry: the
 * committer never allocates from the waiter's pool, and the waiter's strings (sql, params) stay
 * valid because the waiter does not leave before done. */
typedef struct group_entry_t {
    const char            *sql;
    apr_uint64_t           hash;       /* mcp_store__statement_hash(sql)                      */
    int                    n;
    const char *const     *params;
    apr_int64_t            key;        /* the stream id: the order within a transaction      */
    const mcp_store__mergeable_t *merge;   /* how instances run as one; NULL: never     */
    struct group_entry_t **parts;      /* a merged entry's callers' entries (nparts >= 2)   */
    int                    nparts;
    int                    taken;      /* in a committer's batch                              */
    apr_uint32_t           done;       /* set (atomically) once its answer is in the entry    */
    group_waker_t         *waker;      /* its thread's                                        */
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
    apr_threadkey_t    *waker_key;     /* each thread's group_waker_t                        */
    group_waker_t      *wakers;        /* all of them, under lock                             */
    group_entry_t      *head, *tail;   /* waiting, not yet taken by a committer              */
    int                 busy;          /* committers at work                                 */
    int                 committers;    /* ... at most                                        */
    int                 max;
    apr_uint64_t        transactions, statements;
};

/* Destroys the wakers (the group's pool is going: no thread waits any more). */
static apr_status_t wakers_destroy(void *data)
{
    mcp_store_group_t *g = data;

    while (g->wakers) {
        group_waker_t *w = g->wakers;

        g->wakers = w->next;
        sem_destroy(&w->sem);
        free(w);
    }
    return APR_SUCCESS;
}

apr_status_t mcp_store_group_create(mcp_store_group_t **group, apr_pool_t *p, int max,
                                    int committers)
{
    mcp_store_group_t *g = apr_pcalloc(p, sizeof(*g));
    apr_status_t rv;

    g->max = max > 0 ? max : 1;
    g->committers = committers > 0 ? committers : 1;
    if ((rv = apr_thread_mutex_create(&g->lock, APR_THREAD_MUTEX_DEFAULT, p)) != APR_SUCCESS
        || (rv = apr_threadkey_private_create(&g->waker_key, NULL, p)) != APR_SUCCESS) {
        return rv;
    }
    apr_pool_cleanup_register(p, g, wakers_destroy, apr_pool_cleanup_null);
    *group = g;
    return APR_SUCCESS;
}

/* This thread's waker, made at its first statement in the group (NULL: out of memory). */
static group_waker_t *thread_waker(mcp_store_group_t *g)
{
    void *found = NULL;
    group_waker_t *w;

    if (apr_threadkey_private_get(&found, g->waker_key) == APR_SUCCESS && found) {
        return found;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        return NULL;
    }
    if (sem_init(&w->sem, 0, 0) != 0
        || apr_threadkey_private_set(w, g->waker_key) != APR_SUCCESS) {
        free(w);
        return NULL;
    }
    apr_thread_mutex_lock(g->lock);
    w->next = g->wakers;
    g->wakers = w;
    apr_thread_mutex_unlock(g->lock);
    return w;
}

/* Sleeps until this thread's waker is posted, or (until, when set) that time. */
static void waker_wait(group_waker_t *w, apr_time_t until)
{
    struct timespec at;

    if (!until) {
        while (sem_wait(&w->sem) != 0 && errno == EINTR) {
        }
        return;
    }
    at.tv_sec = (time_t)apr_time_sec(until);
    at.tv_nsec = (long)apr_time_usec(until) * 1000;
    while (sem_timedwait(&w->sem, &at) != 0 && errno == EINTR) {
    }
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
        if (mcp_store__wait_socket(conn, POLLIN, deadline) != 0 || !PQconsumeInput(conn)) {
            *failed = 1;
            return NULL;
        }
    }
    return PQgetResult(conn);
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
        mcp_store__statement_name(hash, name);
        if (!PQsendPrepare(conn, name, v[i]->sql, v[i]->n, NULL) || !PQpipelineSync(conn)) {
            return -1;
        }
        sent[nsent++] = hash;
    }
    if (!nsent) {
        return 0;
    }
    if (mcp_store__flush_sent(conn, deadline) != 0) {
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
        else if (res && mcp_store__prepare_done(res)) {
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
        mcp_store__statement_name(v[i]->hash, name);
        if (!PQsendQueryPrepared(conn, name, v[i]->n, v[i]->params, NULL, NULL, 0)) {
            return RUN_CONN_FAILED;
        }
    }
    if (!PQpipelineSync(conn) || mcp_store__flush_sent(conn, deadline) != 0) {
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
    if (mcp_store__not_prepared(error)) {
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
        merged->hash = mcp_store__statement_hash(merged->sql);
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
        err = mcp_store__trimmed(p, PQerrorMessage(conn));
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
            err = mcp_store__trimmed(p, PQerrorMessage(conn));
            if (PQstatus(conn) == CONNECTION_OK) {
                err = apr_psprintf(p, "no answer in time (MCPDatabaseTimeout %" APR_TIME_T_FMT
                                   " ms); connection given up",
                                   apr_time_as_msec(db->statement_timeout));
                mcp_store__give_up(conn);
            }
            broken = 1;
            for (i = 0; i < m; i++) {
                entry_fail(v[i], err, NULL, 1);
            }
        }
        else {
            /* Retryable (or, from the Sync, not one statement's): every caller decides. */
            const char *state = PQresultErrorField(error, PG_DIAG_SQLSTATE);

            err = mcp_store__trimmed(p, PQresultErrorMessage(error));
            for (i = 0; i < m; i++) {
                entry_fail(v[i], err, state, 0);
            }
            broken = mcp_store__give_up_if_read_only(conn, state);
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

/* See mcp_store_private.h. */
PGresult *mcp_store__group_run(mcp_store_t *db, apr_pool_t *p, const char *sql, int n,
                               const char *const *params, apr_int64_t key,
                               const mcp_store__mergeable_t *merge, apr_time_t until,
                               const char **err, const char **state, int *broken, int *fatal)
{
    mcp_store_group_t *g = db->group;
    group_entry_t e;

    memset(&e, 0, sizeof(e));
    e.sql = sql;
    e.hash = mcp_store__statement_hash(sql);
    e.n = n;
    e.params = params;
    e.key = key;
    e.merge = merge;
    e.until = until;
    if (!(e.waker = thread_waker(g))) {
        entry_fail(&e, "out of memory", NULL, 0);
        goto answered;
    }
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
            group_waker_t *next = NULL;

            group_unlink(g, &e);
            entry_fail(&e, apr_psprintf(p, "no answer in time (MCPDatabaseTimeout %"
                                        APR_TIME_T_FMT " ms): the commits before it did not end",
                                        apr_time_as_msec(db->statement_timeout)), NULL, 1);
            if (g->head && g->busy < g->committers) {
                /* It may have been the one asked to commit next: the next one is. */
                next = g->head->waker;
            }
            apr_thread_mutex_unlock(g->lock);
            if (next) {
                sem_post(&next->sem);
            }
            goto answered;
        }
        if (!e.taken && g->busy < g->committers) {
            /* This thread commits the waiting ones (its own among them). */
            group_entry_t *v[256], *x;
            group_waker_t **woken;
            const char *fault;
            apr_time_t until = 0;
            int i, m = 0, nwoken = 0, queued = 0, finished, max = g->max < 256 ? g->max : 256;

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
            /* Whom to post: the batch's callers, those queued when a fault fails them too,
             * and the next committer. */
            for (x = fault ? g->head : NULL; x; x = x->next) {
                queued++;
            }
            woken = apr_palloc(p, sizeof(*woken) * (m + queued + 1));
            for (i = 0; i < m; i++) {
                if (v[i] != &e) {
                    woken[nwoken++] = v[i]->waker;
                }
                apr_atomic_set32(&v[i]->done, 1);
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
                if (x != &e) {
                    woken[nwoken++] = x->waker;
                }
                apr_atomic_set32(&x->done, 1);
            }
            if (fault) {
                g->tail = NULL;
            }
            g->busy--;
            if (e.done && g->head && g->busy < g->committers) {
                /* The first of those queued meanwhile commits them next (this thread, while
                 * its own statement waits, goes on committing itself): woken first, so that
                 * the database waits as little as can be for the next batch. */
                woken[nwoken] = nwoken ? woken[0] : NULL;
                nwoken++;
                woken[0] = g->head->waker;
            }
            /* Posted once the lock is free: posted under it, each would wake only to sleep
             * again on the lock until this thread let it go. */
            finished = e.done;
            apr_thread_mutex_unlock(g->lock);
            for (i = 0; i < nwoken; i++) {
                sem_post(&woken[i]->sem);
            }
            if (finished) {
                goto answered;
            }
            apr_thread_mutex_lock(g->lock);
            continue;
        }
        else {
            apr_time_t until = !e.taken ? e.until : 0;

            apr_thread_mutex_unlock(g->lock);
            waker_wait(e.waker, until);
            if (apr_atomic_read32(&e.done)) {
                goto answered;
            }
            apr_thread_mutex_lock(g->lock);
        }
    }
    apr_thread_mutex_unlock(g->lock);
answered:
    *broken = e.broken;
    *fatal = e.fatal;
    if (!e.res) {
        *err = apr_pstrdup(p, e.err);
        *state = e.state[0] ? apr_pstrdup(p, e.state) : NULL;
    }
    return e.res;
}
