/* Unit tests for mcp_lease: which leases are due, and streams lost to another process. */
#include <check.h>

#include "unit_main.h"

#include "mcp_lease.h"

#define SEC APR_USEC_PER_SEC

START_TEST(due_after_a_third_of_the_lease_then_renewed)
{
    apr_pool_t *p;
    mcp_leases_t *ls;
    mcp_lease_t *a, *b;
    mcp_lease_batch_t due;
    apr_array_header_t *alive;
    apr_time_t t0 = 1000 * SEC;

    apr_pool_create(&p, NULL);
    ls = mcp_leases_create(p);
    a = mcp_leases_add(ls, 7, "sess-a", 30 * SEC, t0);
    b = mcp_leases_add(ls, 8, "sess-b", 3 * SEC, t0);
    ck_assert_int_eq(mcp_leases_count(ls), 2);

    mcp_leases_due(ls, p, t0 + SEC / 2, &due);
    ck_assert_int_eq(due.ids->nelts, 0);
    mcp_leases_due(ls, p, t0 + SEC, &due);          /* b: a third of 3 s */
    ck_assert_int_eq(due.ids->nelts, 1);
    ck_assert_int_eq(APR_ARRAY_IDX(due.ids, 0, apr_int64_t), 8);
    ck_assert_str_eq(APR_ARRAY_IDX(due.sessions, 0, const char *), "sess-b");
    ck_assert_int_eq(APR_ARRAY_IDX(due.secs, 0, int), 3);

    alive = apr_array_make(p, 1, sizeof(apr_int64_t));
    APR_ARRAY_PUSH(alive, apr_int64_t) = 8;
    mcp_leases_renewed(ls, &due, alive, t0 + SEC);
    ck_assert(!mcp_lease_lost(ls, b));
    mcp_leases_due(ls, p, t0 + SEC + SEC / 2, &due);
    ck_assert_int_eq(due.ids->nelts, 0);            /* renewed at t0 + 1 s */

    mcp_leases_due(ls, p, t0 + 10 * SEC, &due);     /* both due now */
    ck_assert_int_eq(due.ids->nelts, 2);
    mcp_leases_remove(ls, a);
    mcp_leases_remove(ls, b);
    ck_assert_int_eq(mcp_leases_count(ls), 0);
    apr_pool_destroy(p);
}
END_TEST

START_TEST(a_stream_not_renewed_is_lost_and_no_longer_due)
{
    apr_pool_t *p;
    mcp_leases_t *ls;
    mcp_lease_t *a, *late;
    mcp_lease_batch_t due;
    apr_array_header_t *alive;
    apr_time_t t0 = 1000 * SEC;

    apr_pool_create(&p, NULL);
    ls = mcp_leases_create(p);
    a = mcp_leases_add(ls, 1, "s", 3 * SEC, t0);
    mcp_leases_due(ls, p, t0 + 2 * SEC, &due);
    /* Registered after the batch was taken: not judged by its outcome. */
    late = mcp_leases_add(ls, 2, "s", 3 * SEC, t0 + 2 * SEC);
    alive = apr_array_make(p, 1, sizeof(apr_int64_t));
    mcp_leases_renewed(ls, &due, alive, t0 + 2 * SEC);
    ck_assert(mcp_lease_lost(ls, a));
    ck_assert(!mcp_lease_lost(ls, late));
    mcp_leases_due(ls, p, t0 + 10 * SEC, &due);
    ck_assert_int_eq(due.ids->nelts, 1);
    ck_assert_int_eq(APR_ARRAY_IDX(due.ids, 0, apr_int64_t), 2);
    mcp_leases_remove(ls, a);
    mcp_leases_remove(ls, late);
    mcp_leases_remove(ls, NULL);
    ck_assert(!mcp_lease_lost(ls, NULL));
    ck_assert_ptr_null(mcp_leases_add(NULL, 3, "s", SEC, t0));
    apr_pool_destroy(p);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("mcp_lease");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, due_after_a_third_of_the_lease_then_renewed);
    tcase_add_test(tc, a_stream_not_renewed_is_lost_and_no_longer_due);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(lease_suite());
}
