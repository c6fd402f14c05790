/* Unit tests for mcp_refresh: of the threads that find a cached thing old, one reads it again;
 * those with no copy to go on with await that read. */
#include <string.h>

#include <apr_atomic.h>
#include <apr_thread_proc.h>
#include <check.h>

#include "unit_main.h"

#include "mcp_refresh.h"

#define SEC APR_USEC_PER_SEC

START_TEST(one_reads_the_others_go_on_with_their_copy)
{
    apr_pool_t *p;
    mcp_refresh_t *r;
    apr_time_t t0 = 1000 * SEC;

    apr_pool_create(&p, NULL);
    r = mcp_refresh_create(p, 4, 30 * SEC);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0, t0 + 1), 1);
    /* While it reads: the others go on, whenever they looked. */
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0, t0 + 2), 0);
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0 + 3, t0 + 4), 0);
    /* Another key is another read. */
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-b", t0, t0 + 5), 1);
    mcp_refresh_done(r, "pool-a", t0 + SEC);
    /* Whoever asked before that read ended found the copy before it: goes on. */
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0 + SEC - 1, t0 + SEC + 1), 0);
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0 + SEC, t0 + SEC + 2), 0);
    /* Whoever found it old after that read: the copy got old again; it reads. */
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0 + 90 * SEC, t0 + 90 * SEC + 1), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, "pool-a", t0 + 90 * SEC, t0 + 90 * SEC + 2), 0);
    apr_pool_destroy(p);
}
END_TEST

START_TEST(a_stuck_read_holds_nobody_back_for_long)
{
    apr_pool_t *p;
    mcp_refresh_t *r;
    apr_time_t t0 = 1000 * SEC;

    apr_pool_create(&p, NULL);
    r = mcp_refresh_create(p, 4, 30 * SEC);
    ck_assert_int_eq(mcp_refresh_begin(r, "k", t0, t0), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, "k", t0, t0 + 30 * SEC - 1), 0);
    ck_assert_int_eq(mcp_refresh_begin(r, "k", t0, t0 + 30 * SEC), 1);     /* taken over */
    ck_assert_int_eq(mcp_refresh_begin(r, "k", t0, t0 + 30 * SEC + 1), 0);
    apr_pool_destroy(p);
}
END_TEST

START_TEST(a_full_table_or_a_long_key_never_makes_anyone_wait)
{
    apr_pool_t *p;
    mcp_refresh_t *r;
    apr_time_t t0 = 1000 * SEC;
    char longkey[MCP_REFRESH_KEY_MAX + 2];

    apr_pool_create(&p, NULL);
    r = mcp_refresh_create(p, 2, 30 * SEC);
    ck_assert_int_eq(mcp_refresh_begin(r, "a", t0, t0), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, "b", t0, t0), 1);
    /* Both entries are being read: c reads, ungated (twice: nothing remembers it). */
    ck_assert_int_eq(mcp_refresh_begin(r, "c", t0, t0 + 1), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, "c", t0, t0 + 2), 1);
    mcp_refresh_done(r, "c", t0 + 3);                                     /* no entry: no-op */
    mcp_refresh_done(r, "b", t0 + 4);
    mcp_refresh_done(r, "a", t0 + 5);
    /* c takes the entry whose read ended first (b's) and is gated from now on. */
    ck_assert_int_eq(mcp_refresh_begin(r, "c", t0, t0 + 6), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, "c", t0, t0 + 7), 0);
    ck_assert_int_eq(mcp_refresh_begin(r, "a", t0, t0 + 8), 0);           /* a still known */
    ck_assert_int_eq(mcp_refresh_begin(r, "b", t0, t0 + 9), 1);           /* b forgotten   */

    memset(longkey, 'x', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    ck_assert_int_eq(mcp_refresh_begin(r, longkey, t0, t0), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, longkey, t0, t0), 1);
    mcp_refresh_done(r, longkey, t0);
    ck_assert_int_eq(mcp_refresh_begin(NULL, "a", t0, t0), 1);
    mcp_refresh_done(NULL, "a", t0);
    ck_assert_ptr_null(mcp_refresh_create(p, 0, SEC));
    apr_pool_destroy(p);
}
END_TEST

/* Many threads finding the same key old at once: exactly one reads. */
enum { THREADS = 16 };
static mcp_refresh_t *shared;
static volatile apr_uint32_t readers;

static void *APR_THREAD_FUNC finder(apr_thread_t *t, void *data)
{
    (void)data;
    if (mcp_refresh_begin(shared, "pooled", 1000 * SEC, 1001 * SEC)) {
        apr_atomic_inc32(&readers);
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

START_TEST(of_many_threads_at_once_exactly_one_reads)
{
    apr_pool_t *p;
    apr_thread_t *t[THREADS];
    apr_status_t rv;
    int i, round;

    apr_pool_create(&p, NULL);
    for (round = 0; round < 50; round++) {
        shared = mcp_refresh_create(p, 8, 30 * SEC);
        apr_atomic_set32(&readers, 0);
        for (i = 0; i < THREADS; i++) {
            ck_assert_int_eq(apr_thread_create(&t[i], NULL, finder, NULL, p), APR_SUCCESS);
        }
        for (i = 0; i < THREADS; i++) {
            apr_thread_join(&rv, t[i]);
        }
        ck_assert_uint_eq(apr_atomic_read32(&readers), 1);
    }
    apr_pool_destroy(p);
}
END_TEST

START_TEST(an_await_after_a_read_reads_the_stored_copy)
{
    apr_pool_t *p;
    mcp_refresh_t *r;
    apr_time_t now = apr_time_now(), soon = now + 10 * SEC;

    apr_pool_create(&p, NULL);
    r = mcp_refresh_create(p, 4, 30 * SEC);
    /* Nobody reads it: the caller does, and is then the read under way for begin. */
    ck_assert_int_eq(mcp_refresh_await(r, "pool", now, soon), 1);
    ck_assert_int_eq(mcp_refresh_begin(r, "pool", now, apr_time_now()), 0);
    mcp_refresh_done(r, "pool", apr_time_now());
    /* Found empty before that read ended: what it stored is newer. */
    ck_assert_int_eq(mcp_refresh_await(r, "pool", now, soon), 0);
    /* Found empty after it: read again. */
    ck_assert_int_eq(mcp_refresh_await(r, "pool", apr_time_now() + 1, soon), 1);
    mcp_refresh_done(r, "pool", apr_time_now() + 2);
    ck_assert_int_eq(mcp_refresh_await(NULL, "pool", now, soon), 1);
    ck_assert_int_eq(mcp_refresh_awaiting(r, "pool"), 0);
    apr_pool_destroy(p);
}
END_TEST

START_TEST(an_await_gives_up_at_its_deadline)
{
    apr_pool_t *p;
    mcp_refresh_t *r;
    apr_time_t now = apr_time_now(), until = now + apr_time_from_msec(50);

    apr_pool_create(&p, NULL);
    r = mcp_refresh_create(p, 4, 30 * SEC);
    ck_assert_int_eq(mcp_refresh_begin(r, "pool", now, now), 1);   /* a read that never ends */
    ck_assert_int_eq(mcp_refresh_await(r, "pool", now, until), 1);
    ck_assert(apr_time_now() >= until);
    /* The entry is still the first read's: a caller with a copy still goes on with it. */
    ck_assert_int_eq(mcp_refresh_begin(r, "pool", now, apr_time_now()), 0);
    apr_pool_destroy(p);
}
END_TEST

/* Threads with no copy find a read under way: they sleep until it ends, then read what it
 * stored; none reads itself, and none wakes before the read ended. */
static volatile apr_uint32_t read_ended, woke_early, woke;

static void *APR_THREAD_FUNC awaiter(apr_thread_t *t, void *data)
{
    apr_time_t found_at = *(apr_time_t *)data;

    if (mcp_refresh_await(shared, "pool", found_at, apr_time_now() + 60 * SEC)) {
        apr_atomic_inc32(&readers);
    }
    if (!apr_atomic_read32(&read_ended)) {
        apr_atomic_inc32(&woke_early);
    }
    apr_atomic_inc32(&woke);
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

START_TEST(awaiting_threads_wake_when_the_read_ends)
{
    apr_pool_t *p;
    apr_thread_t *t[THREADS];
    apr_status_t rv;
    apr_time_t found_at;
    int i;

    apr_pool_create(&p, NULL);
    shared = mcp_refresh_create(p, 8, 30 * SEC);
    apr_atomic_set32(&readers, 0);
    found_at = apr_time_now();
    ck_assert_int_eq(mcp_refresh_await(shared, "pool", found_at, found_at + 60 * SEC), 1);
    for (i = 0; i < THREADS; i++) {
        ck_assert_int_eq(apr_thread_create(&t[i], NULL, awaiter, &found_at, p), APR_SUCCESS);
    }
    while (mcp_refresh_awaiting(shared, "pool") < THREADS) {
        apr_thread_yield();
    }
    ck_assert_uint_eq(apr_atomic_read32(&woke), 0);
    apr_atomic_set32(&read_ended, 1);
    mcp_refresh_done(shared, "pool", apr_time_now());
    for (i = 0; i < THREADS; i++) {
        apr_thread_join(&rv, t[i]);
    }
    ck_assert_uint_eq(apr_atomic_read32(&woke), THREADS);
    ck_assert_uint_eq(apr_atomic_read32(&woke_early), 0);
    ck_assert_uint_eq(apr_atomic_read32(&readers), 0);
    ck_assert_int_eq(mcp_refresh_awaiting(shared, "pool"), 0);
    apr_pool_destroy(p);
}
END_TEST

static Suite *refresh_suite(void)
{
    Suite *s = suite_create("mcp_refresh");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, one_reads_the_others_go_on_with_their_copy);
    tcase_add_test(tc, a_stuck_read_holds_nobody_back_for_long);
    tcase_add_test(tc, a_full_table_or_a_long_key_never_makes_anyone_wait);
    tcase_add_test(tc, of_many_threads_at_once_exactly_one_reads);
    tcase_add_test(tc, an_await_after_a_read_reads_the_stored_copy);
    tcase_add_test(tc, an_await_gives_up_at_its_deadline);
    tcase_add_test(tc, awaiting_threads_wake_when_the_read_ends);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(refresh_suite());
}
