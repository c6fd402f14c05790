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
    mcp_leases_renewed(ls, &due, alive, t0 + SEC, NULL);
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

START_TEST(a_round_of_many_streams_is_linear)
{
    /* 50,000 streams due at once, half of them still open (a parked stream each): with a scan
     * of the batch per stream, as before, this round alone ran past the case's timeout. */
    enum { N = 50000 };
    apr_pool_t *p;
    mcp_leases_t *ls;
    mcp_lease_batch_t due;
    apr_array_header_t *alive, *lost;
    apr_time_t t0 = 1000 * SEC;
    static mcp_lease_t *l[N];
    int i;

    apr_pool_create(&p, NULL);
    ls = mcp_leases_create(p);
    for (i = 0; i < N; i++) {
        l[i] = mcp_leases_add(ls, i + 1, "s", 3 * SEC, t0);
    }
    mcp_leases_due(ls, p, t0 + 2 * SEC, &due);
    ck_assert_int_eq(due.ids->nelts, N);
    alive = apr_array_make(p, N / 2, sizeof(apr_int64_t));
    for (i = 0; i < N; i += 2) {
        APR_ARRAY_PUSH(alive, apr_int64_t) = i + 1;
    }
    lost = apr_array_make(p, 1, sizeof(apr_int64_t));
    mcp_leases_renewed(ls, &due, alive, t0 + 2 * SEC, lost);
    ck_assert_int_eq(lost->nelts, N / 2);
    ck_assert(!mcp_lease_lost(ls, l[0]) && mcp_lease_lost(ls, l[1]));
    for (i = 0; i < N; i++) {
        mcp_leases_remove(ls, l[i]);
    }
    apr_pool_destroy(p);
}
END_TEST

START_TEST(a_stream_not_renewed_is_lost_and_no_longer_due)
{
    apr_pool_t *p;
    mcp_leases_t *ls;
    mcp_lease_t *a, *late;
    mcp_lease_batch_t due;
    apr_array_header_t *alive, *lost;
    apr_time_t t0 = 1000 * SEC;

    apr_pool_create(&p, NULL);
    ls = mcp_leases_create(p);
    a = mcp_leases_add(ls, 1, "s", 3 * SEC, t0);
    mcp_leases_due(ls, p, t0 + 2 * SEC, &due);
    /* Registered after the batch was taken: not judged by its outcome. */
    late = mcp_leases_add(ls, 2, "s", 3 * SEC, t0 + 2 * SEC);
    alive = apr_array_make(p, 1, sizeof(apr_int64_t));
    lost = apr_array_make(p, 1, sizeof(apr_int64_t));
    mcp_leases_renewed(ls, &due, alive, t0 + 2 * SEC, lost);
    ck_assert(mcp_lease_lost(ls, a));
    ck_assert(!mcp_lease_lost(ls, late));
    /* Reported once, so that its relay is woken. */
    ck_assert_int_eq(lost->nelts, 1);
    ck_assert_int_eq(APR_ARRAY_IDX(lost, 0, apr_int64_t), 1);
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

START_TEST(only_due_streams_come_and_a_failed_round_leaves_them_due)
{
    /* 10,000 streams registered a millisecond apart: a round finds exactly those due; one
     * whose renewal failed (renewed not called) is due again at the next round; one removed
     * while its batch was out is skipped; the renewed ones are due a third of the lease on. */
    enum { N = 10000 };
    apr_pool_t *p;
    mcp_leases_t *ls;
    mcp_lease_batch_t due, again;
    apr_array_header_t *alive, *lost;
    apr_time_t t0 = 1000 * SEC, ms = 1000;
    static mcp_lease_t *l[N];
    int i;

    apr_pool_create(&p, NULL);
    ls = mcp_leases_create(p);
    for (i = 0; i < N; i++) {
        l[i] = mcp_leases_add(ls, i + 1, "s", 3 * SEC, t0 + i * ms);
    }
    mcp_leases_due(ls, p, t0 + SEC + 99 * ms, &due);   /* registered by t0 + 99 ms */
    ck_assert_int_eq(due.ids->nelts, 100);
    for (i = 0; i < due.ids->nelts; i++) {
        ck_assert_int_le(APR_ARRAY_IDX(due.ids, i, apr_int64_t), 100);
    }
    mcp_leases_due(ls, p, t0 + SEC + 99 * ms, &again);  /* not renewed: due again */
    ck_assert_int_eq(again.ids->nelts, 100);
    mcp_leases_remove(ls, l[4]);                         /* id 5, while its batch is out */
    l[4] = NULL;
    alive = apr_array_make(p, 100, sizeof(apr_int64_t));
    for (i = 1; i <= 100; i++) {
        if (i != 7) {
            APR_ARRAY_PUSH(alive, apr_int64_t) = i;
        }
    }
    lost = apr_array_make(p, 1, sizeof(apr_int64_t));
    mcp_leases_renewed(ls, &again, alive, t0 + 2 * SEC, lost);
    ck_assert_int_eq(lost->nelts, 1);
    ck_assert_int_eq(APR_ARRAY_IDX(lost, 0, apr_int64_t), 7);
    ck_assert_int_eq(mcp_leases_count(ls), N - 1);
    /* At t0 + 2.999 s: the ones registered by 1.999 s, but not the renewed nor the lost. */
    mcp_leases_due(ls, p, t0 + 2 * SEC + 999 * ms, &due);
    ck_assert_int_eq(due.ids->nelts, 2000 - 100);
    for (i = 0; i < due.ids->nelts; i++) {
        apr_int64_t id = APR_ARRAY_IDX(due.ids, i, apr_int64_t);
        ck_assert(id > 100 && id <= 2000);
    }
    mcp_leases_due(ls, p, t0 + 3 * SEC, &due);           /* the renewed ones come again */
    ck_assert_int_eq(due.ids->nelts, 2001 - 100 + 98);
    for (i = 0; i < N; i++) {
        mcp_leases_remove(ls, l[i]);
    }
    ck_assert_int_eq(mcp_leases_count(ls), 0);
    apr_pool_destroy(p);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("mcp_lease");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, due_after_a_third_of_the_lease_then_renewed);
    tcase_add_test(tc, a_stream_not_renewed_is_lost_and_no_longer_due);
    tcase_add_test(tc, a_round_of_many_streams_is_linear);
    tcase_add_test(tc, only_due_streams_come_and_a_failed_round_leaves_them_due);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(lease_suite());
}
