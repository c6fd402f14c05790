/* Unit tests for mcp_store: the classification of database failures and the retry policy of a
 * store handle (with a lender that never has a connection). The statements themselves run
 * against PostgreSQL in the integration tests. */
#include <apr_thread_proc.h>
#include <check.h>
#include <limits.h>
#include <string.h>

#include "unit_main.h"

#include "mcp_store.h"
#include "mcp_store_prepared.h"

#define N_CASES(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* What a failed statement's SQLSTATE (NULL: none, as for libpq's own "server closed the
 * connection") and the connection's state say: retry (an outage) or give up (the data). */
static const struct {
    const char           *sqlstate;
    int                   connection_ok;
    mcp_store_fault_t     fault;
} classify_cases[] = {
    /* the connection class, the server going away, too many clients, serialization, deadlock,
     * statement_timeout: retried */
    { "08006", 1, MCP_STORE_FAULT_RETRY },
    { "08001", 1, MCP_STORE_FAULT_RETRY },
    { "57P01", 1, MCP_STORE_FAULT_RETRY },
    { "57P02", 1, MCP_STORE_FAULT_RETRY },
    { "57P03", 1, MCP_STORE_FAULT_RETRY },
    { "53300", 1, MCP_STORE_FAULT_RETRY },
    { "40001", 1, MCP_STORE_FAULT_RETRY },
    { "40P01", 1, MCP_STORE_FAULT_RETRY },
    { "57014", 1, MCP_STORE_FAULT_RETRY },
    /* a read-only server (a failover's demoted primary, default_transaction_read_only) */
    { "25006", 1, MCP_STORE_FAULT_RETRY },
    /* no SQLSTATE, or a broken connection whatever the SQLSTATE */
    { NULL, 1, MCP_STORE_FAULT_RETRY },
    { "", 1, MCP_STORE_FAULT_RETRY },
    { "22P02", 0, MCP_STORE_FAULT_RETRY },
    /* data (untranslatable text), constraints, a missing table or prepared statement, a dropped
     * database: permanent */
    { "22P05", 1, MCP_STORE_FAULT_PERMANENT },
    { "22021", 1, MCP_STORE_FAULT_PERMANENT },
    { "23505", 1, MCP_STORE_FAULT_PERMANENT },
    { "23514", 1, MCP_STORE_FAULT_PERMANENT },
    { "42P01", 1, MCP_STORE_FAULT_PERMANENT },
    { "26000", 1, MCP_STORE_FAULT_PERMANENT },
    { "57P04", 1, MCP_STORE_FAULT_PERMANENT },
    { "25001", 1, MCP_STORE_FAULT_PERMANENT },
};

START_TEST(classify)
{
    ck_assert_msg(mcp_store_classify(classify_cases[_i].sqlstate, classify_cases[_i].connection_ok)
                  == classify_cases[_i].fault, "SQLSTATE %s, connection %s",
                  classify_cases[_i].sqlstate ? classify_cases[_i].sqlstate : "(none)",
                  classify_cases[_i].connection_ok ? "ok" : "broken");
}
END_TEST

typedef struct counts_t {
    int borrows;
    int waits;
    int give_up_after;   /* wait() says stop after this many waits (0: never) */
} counts_t;

static PGconn *no_conn(mcp_store_t *db, const char **err)
{
    ((counts_t *)db->baton)->borrows++;
    *err = "the database is unreachable";
    return NULL;
}

static void give_back(mcp_store_t *db, PGconn *conn, int broken)
{
    (void)db;
    (void)conn;
    (void)broken;
}

static int count_wait(mcp_store_t *db, apr_time_t deadline, const char *err)
{
    counts_t *c = db->baton;

    ck_assert_ptr_nonnull(strstr(err, "unreachable"));
    c->waits++;
    if (c->give_up_after && c->waits >= c->give_up_after) {
        return 1;
    }
    apr_sleep(deadline - apr_time_now() < apr_time_from_msec(10) ? 0 : apr_time_from_msec(10));
    return 0;
}

static const mcp_store_lender_t lender = { no_conn, give_back, count_wait };

/* A lender that finds a schema it does not understand. */
static PGconn *wrong_schema(mcp_store_t *db, const char **err)
{
    ((counts_t *)db->baton)->borrows++;
    db->fatal = "the database schema is version 1, this mod_mcp needs version 3";
    *err = "unused";
    return NULL;
}

static const mcp_store_lender_t fatal_lender = { wrong_schema, give_back, count_wait };

/* The retry policy: a statement on a handle whose lender never has a connection. */
static const struct {
    const mcp_store_lender_t *lender;
    apr_interval_time_t       patience;
    int                       give_up_after;  /* the lender's wait stops the retries (0: never) */
    int                       min_borrows, max_borrows;
    int                       waits;          /* -1: one fewer than borrows (none after the last) */
    apr_interval_time_t       min_took, max_took;
    const char               *error;          /* db.error, when it matters */
} retry_cases[] = {
    /* no patience: one try */
    { &lender, 0, 0, 1, 1, -1, 0, apr_time_from_sec(1), "testing: the database is unreachable" },
    /* retried, with a wait between tries, until the patience runs out */
    { &lender, apr_time_from_msec(100), 0, 3, INT_MAX, -1, apr_time_from_msec(100),
      apr_time_from_sec(2), NULL },
    /* the lender may stop the retries long before */
    { &lender, apr_time_from_sec(30), 2, 2, 2, 2, 0, apr_time_from_sec(1), NULL },
    /* a fatal lender (a schema it does not understand) fails at once, not after 30 s */
    { &fatal_lender, apr_time_from_sec(30), 0, 1, 1, -1, 0, apr_time_from_sec(1),
      "testing: the database schema is version 1, this mod_mcp needs version 3" },
};

START_TEST(retry_policy)
{
    apr_pool_t *p;
    mcp_store_t db;
    counts_t c = { 0, 0, retry_cases[_i].give_up_after };
    apr_time_t start = apr_time_now(), took;

    apr_pool_create(&p, NULL);
    mcp_store_init(&db, retry_cases[_i].lender, &c, retry_cases[_i].patience, 0);
    ck_assert_int_eq(mcp_store_exec(&db, p, "testing", "SELECT 1", 0, NULL, NULL),
                     MCP_STORE_UNAVAILABLE);
    took = apr_time_now() - start;
    ck_assert_int_ge(took, retry_cases[_i].min_took);
    ck_assert_int_lt(took, retry_cases[_i].max_took);
    ck_assert_int_ge(c.borrows, retry_cases[_i].min_borrows);
    ck_assert_int_le(c.borrows, retry_cases[_i].max_borrows);
    ck_assert_int_eq(c.waits, retry_cases[_i].waits < 0 ? c.borrows - 1 : retry_cases[_i].waits);
    ck_assert_ptr_null(db.sqlstate);
    if (retry_cases[_i].error) {
        ck_assert_str_eq(db.error, retry_cases[_i].error);
    }
    apr_pool_destroy(p);
}
END_TEST

/* ---- group commit: every waiter gets its own answer ------------------------------------------ */

typedef struct caller_t {
    mcp_store_group_t       *group;
    const mcp_store_lender_t *lender;
    counts_t                *counts;
    mcp_store_status_t       rv;
    const char              *error;
    int                      fatal_set;
    apr_pool_t              *pool;
} caller_t;

static void *APR_THREAD_FUNC grouped_call(apr_thread_t *t, void *data)
{
    caller_t *c = data;
    mcp_store_session_t session = { .id = "s1" };
    mcp_store_t db;

    (void)t;
    mcp_store_init(&db, c->lender, c->counts, 0, 0);
    db.group = c->group;
    c->rv = mcp_store_events_append(&db, c->pool, &session, 7, 2, "out", "[{\"a\":1}]");
    c->error = db.error;
    c->fatal_set = db.fatal != NULL;
    return NULL;
}

/* Callers whose statements the group could not run (no connection, or a lender that refuses
 * for good) each get the failure: none hangs, none is told OK. */
static void run_grouped(const mcp_store_lender_t *l, mcp_store_status_t want, const char *err,
                        int fatal)
{
    enum { N = 8 };
    apr_pool_t *p;
    apr_thread_t *t[N];
    caller_t c[N];
    counts_t counts = { 0, 0, 0 };
    mcp_store_group_t *g;
    apr_status_t rv;
    int i;

    apr_pool_create(&p, NULL);
    ck_assert_int_eq(mcp_store_group_create(&g, p, 64, 1), APR_SUCCESS);
    for (i = 0; i < N; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].group = g;
        c[i].lender = l;
        c[i].counts = &counts;
        apr_pool_create(&c[i].pool, p);
        ck_assert_int_eq(apr_thread_create(&t[i], NULL, grouped_call, &c[i], p), APR_SUCCESS);
    }
    for (i = 0; i < N; i++) {
        apr_thread_join(&rv, t[i]);
        ck_assert_int_eq(c[i].rv, want);
        ck_assert_ptr_nonnull(strstr(c[i].error, err));
        ck_assert_int_eq(c[i].fatal_set, fatal);
    }
    /* One committer at a time borrowed for the group: at most one borrow per caller. */
    ck_assert_int_ge(counts.borrows, 1);
    ck_assert_int_le(counts.borrows, N);
    apr_pool_destroy(p);
}

START_TEST(a_group_without_a_connection_fails_every_caller)
{
    run_grouped(&lender, MCP_STORE_UNAVAILABLE, "storing events: the database is unreachable", 0);
}
END_TEST

START_TEST(a_group_whose_lender_refuses_for_good_fails_every_caller_at_once)
{
    run_grouped(&fatal_lender, MCP_STORE_UNAVAILABLE, "schema is version 1", 1);
}
END_TEST

/* What a connection has prepared: kept with the connection (a PGconn that never connected
 * holds it as well), through growth from 64 slots, 0 among the hashes, forgotten at once, and
 * freed with the connection (the sanitizers' runs see a leak or a double free). */
START_TEST(a_connection_remembers_what_it_prepared)
{
    PGconn *conn = PQconnectStart("host=/nonexistent-mod-mcp-test port=1 dbname=none");
    PGconn *other = PQconnectStart("host=/nonexistent-mod-mcp-test port=1 dbname=none");
    apr_uint64_t i;

    ck_assert_ptr_nonnull(conn);
    ck_assert_ptr_nonnull(other);
    ck_assert_int_eq(mcp_store_prepared_count(conn), 0);
    ck_assert(!mcp_store_prepared_has(conn, 7));
    for (i = 0; i < 300; i++) {
        mcp_store_prepared_add(conn, i * APR_UINT64_C(0x9e3779b97f4a7c15));
    }
    mcp_store_prepared_add(conn, 0);   /* already there: i = 0 */
    mcp_store_prepared_add(conn, APR_UINT64_C(0x9e3779b97f4a7c15));
    ck_assert_int_eq(mcp_store_prepared_count(conn), 300);
    for (i = 0; i < 300; i++) {
        ck_assert(mcp_store_prepared_has(conn, i * APR_UINT64_C(0x9e3779b97f4a7c15)));
        ck_assert(!mcp_store_prepared_has(conn, i * APR_UINT64_C(0x9e3779b97f4a7c15) + 3));
        ck_assert(!mcp_store_prepared_has(other, i * APR_UINT64_C(0x9e3779b97f4a7c15)));
    }
    mcp_store_prepared_add(other, 42);
    mcp_store_prepared_forget(conn);
    ck_assert_int_eq(mcp_store_prepared_count(conn), 0);
    ck_assert(!mcp_store_prepared_has(conn, APR_UINT64_C(0x9e3779b97f4a7c15)));
    ck_assert(mcp_store_prepared_has(other, 42));
    mcp_store_prepared_add(conn, 5);
    ck_assert(mcp_store_prepared_has(conn, 5));
    ck_assert_int_eq(mcp_store_prepared_count(conn), 1);
    PQfinish(conn);
    PQfinish(other);
}
END_TEST

static Suite *store_suite(void)
{
    Suite *s = suite_create("mcp_store");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, classify, 0, N_CASES(classify_cases));
    tcase_add_loop_test(tc, retry_policy, 0, N_CASES(retry_cases));
    tcase_add_test(tc, a_group_without_a_connection_fails_every_caller);
    tcase_add_test(tc, a_group_whose_lender_refuses_for_good_fails_every_caller_at_once);
    tcase_add_test(tc, a_connection_remembers_what_it_prepared);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(store_suite());
}
