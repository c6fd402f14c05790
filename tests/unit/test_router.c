/* Unit tests for mcp_router: wake-up semantics (pending before wait, coalescing, per-stream
 * delivery, notify_all), capacity, constant memory, and threaded tests that would hang or fail
 * on a lost wake-up. Threads never call ck_assert (Check reports failures from the test's own
 * thread only); they record what they saw and the test asserts after joining them. */

#include <check.h>
#include <stdlib.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <apr_time.h>

#include "mcp_router.h"

#include "unit_main.h"
#include "unit_pool.h"

#define MS(n) ((apr_interval_time_t)(n) * 1000)

static int in_use_of(mcp_router_t *r)
{
    int n = -1;
    mcp_router_stats(r, &n, NULL);
    return n;
}

static apr_uint64_t notified_of(mcp_router_t *r)
{
    apr_uint64_t k = 0;
    mcp_router_stats(r, NULL, &k);
    return k;
}

/* ---- single-threaded semantics ------------------------------------------------------------ */

START_TEST(test_create_bounds)
{
    int n = 7;
    apr_uint64_t k = 7;

    ck_assert_ptr_null(mcp_router_create(pool, 0));
    ck_assert_ptr_null(mcp_router_create(pool, -1));
    ck_assert_ptr_null(mcp_router_create(pool, MCP_ROUTER_MAX_CAPACITY + 1));
    ck_assert_ptr_null(mcp_router_create(NULL, 4));
    ck_assert_ptr_nonnull(mcp_router_create(pool, 1));
    ck_assert_ptr_nonnull(mcp_router_create(pool, 1000));

    /* NULL is harmless everywhere */
    ck_assert_ptr_null(mcp_router_subscribe(NULL, 1));
    mcp_router_unsubscribe(NULL);
    mcp_router_notify(NULL, 1);
    mcp_router_notify_all(NULL);
    ck_assert_int_eq(mcp_router_wait(NULL, MS(1)), 0);
    mcp_router_stats(NULL, &n, &k);
    ck_assert_int_eq(n, 0);
    ck_assert(k == 0);
}
END_TEST

START_TEST(test_notify_before_wait_returns_at_once)
{
    mcp_router_t *r = mcp_router_create(pool, 4);
    mcp_router_sub_t *s = mcp_router_subscribe(r, 42);
    apr_time_t t0;

    ck_assert_ptr_nonnull(s);
    mcp_router_notify(r, 42);
    t0 = apr_time_now();
    ck_assert_int_eq(mcp_router_wait(s, apr_time_from_sec(10)), 1);
    ck_assert(apr_time_now() - t0 < apr_time_from_sec(1));
    /* consumed: a poll now finds nothing */
    ck_assert_int_eq(mcp_router_wait(s, 0), 0);
    /* a pending wake-up is also returned by a poll (timeout 0) and by an unlimited wait */
    mcp_router_notify(r, 42);
    ck_assert_int_eq(mcp_router_wait(s, 0), 1);
    mcp_router_notify(r, 42);
    ck_assert_int_eq(mcp_router_wait(s, -1), 1);
    mcp_router_unsubscribe(s);
}
END_TEST

START_TEST(test_timeout)
{
    mcp_router_t *r = mcp_router_create(pool, 4);
    mcp_router_sub_t *s = mcp_router_subscribe(r, 1);
    apr_time_t t0, dt;

    t0 = apr_time_now();
    ck_assert_int_eq(mcp_router_wait(s, 0), 0);
    ck_assert(apr_time_now() - t0 < MS(100));

    t0 = apr_time_now();
    ck_assert_int_eq(mcp_router_wait(s, MS(50)), 0);
    dt = apr_time_now() - t0;
    ck_assert_msg(dt >= MS(45), "returned after %ld us", (long)dt);
    ck_assert_msg(dt < apr_time_from_sec(2), "returned after %ld us", (long)dt);

    /* a timeout consumes nothing: a later notify is still seen */
    mcp_router_notify(r, 1);
    ck_assert_int_eq(mcp_router_wait(s, MS(50)), 1);
    mcp_router_unsubscribe(s);
}
END_TEST

START_TEST(test_other_stream_does_not_wake)
{
    /* capacity 1 and 2 put every stream in one or two buckets: chains are shared, so the
     * stream id itself must be compared */
    static const int caps[] = { 1, 2, 64 };
    size_t i;

    for (i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        mcp_router_t *r = mcp_router_create(pool, caps[i]);
        mcp_router_sub_t *s = mcp_router_subscribe(r, 7);

        ck_assert_ptr_nonnull(s);
        mcp_router_notify(r, 8);
        mcp_router_notify(r, -7);
        mcp_router_notify(r, 7 + ((apr_int64_t)1 << 32));
        ck_assert_int_eq(mcp_router_wait(s, MS(20)), 0);
        ck_assert(notified_of(r) == 0);
        mcp_router_notify(r, 7);
        ck_assert_int_eq(mcp_router_wait(s, 0), 1);
        mcp_router_unsubscribe(s);
    }
}
END_TEST

START_TEST(test_extreme_stream_ids)
{
    static const apr_int64_t ids[] = { 0, -1, APR_INT64_MIN, APR_INT64_MAX, 1, 2 };
    const size_t n = sizeof(ids) / sizeof(ids[0]);
    mcp_router_t *r = mcp_router_create(pool, (int)n);
    mcp_router_sub_t *subs[sizeof(ids) / sizeof(ids[0])];
    size_t i, j;

    for (i = 0; i < n; i++) {
        subs[i] = mcp_router_subscribe(r, ids[i]);
        ck_assert_ptr_nonnull(subs[i]);
    }
    for (i = 0; i < n; i++) {
        mcp_router_notify(r, ids[i]);
        for (j = 0; j < n; j++)
            ck_assert_int_eq(mcp_router_wait(subs[j], 0), i == j);
    }
    for (i = 0; i < n; i++)
        mcp_router_unsubscribe(subs[i]);
    ck_assert_int_eq(in_use_of(r), 0);
}
END_TEST

/* The i-th of n distinct ids: 0 .. n/2-1, then 1<<32, 2<<32, ... (equal low halves). */
static apr_int64_t id_of(int i, int n)
{
    return i < n / 2 ? i : ((apr_int64_t)(i - n / 2 + 1) << 32);
}

START_TEST(test_many_streams_hash)
{
    /* sequential ids and ids that differ only in their high half, all at once */
    enum { N = 512 };
    mcp_router_t *r = mcp_router_create(pool, N);
    mcp_router_sub_t *subs[N];
    int i, j;

    for (i = 0; i < N; i++) {
        subs[i] = mcp_router_subscribe(r, id_of(i, N));
        ck_assert_ptr_nonnull(subs[i]);
    }
    ck_assert_ptr_null(mcp_router_subscribe(r, 1));
    for (i = 0; i < N; i += 37) {
        mcp_router_notify(r, id_of(i, N));
        for (j = 0; j < N; j++)
            ck_assert_msg(mcp_router_wait(subs[j], 0) == (j == i), "notify %d woke %d", i, j);
    }
    /* unsubscribing from the middle of chains keeps the others reachable */
    for (i = 0; i < N; i += 2)
        mcp_router_unsubscribe(subs[i]);
    for (i = 1; i < N; i += 2) {
        mcp_router_notify(r, id_of(i, N));
        ck_assert_int_eq(mcp_router_wait(subs[i], 0), 1);
    }
    ck_assert_int_eq(in_use_of(r), N / 2);
}
END_TEST

START_TEST(test_two_subscribers_both_wake)
{
    mcp_router_t *r = mcp_router_create(pool, 4);
    mcp_router_sub_t *a = mcp_router_subscribe(r, 5);
    mcp_router_sub_t *b = mcp_router_subscribe(r, 5);
    mcp_router_sub_t *c = mcp_router_subscribe(r, 6);

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(a, b);
    mcp_router_notify(r, 5);
    ck_assert_int_eq(mcp_router_wait(a, MS(100)), 1);
    ck_assert_int_eq(mcp_router_wait(b, MS(100)), 1);
    ck_assert_int_eq(mcp_router_wait(c, 0), 0);
    /* each consumed only its own */
    ck_assert_int_eq(mcp_router_wait(a, 0), 0);
    ck_assert_int_eq(mcp_router_wait(b, 0), 0);
    ck_assert(notified_of(r) == 2);
}
END_TEST

START_TEST(test_notifies_coalesce)
{
    mcp_router_t *r = mcp_router_create(pool, 2);
    mcp_router_sub_t *s = mcp_router_subscribe(r, 3);
    int i;

    for (i = 0; i < 1000; i++)
        mcp_router_notify(r, 3);
    ck_assert_int_eq(mcp_router_wait(s, MS(100)), 1);
    ck_assert_int_eq(mcp_router_wait(s, MS(20)), 0);
    /* stats count every request, coalesced or not */
    ck_assert(notified_of(r) == 1000);
}
END_TEST

START_TEST(test_capacity)
{
    mcp_router_t *r = mcp_router_create(pool, 3);
    mcp_router_sub_t *a = mcp_router_subscribe(r, 1);
    mcp_router_sub_t *b = mcp_router_subscribe(r, 1);
    mcp_router_sub_t *c = mcp_router_subscribe(r, 2);
    mcp_router_sub_t *d;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(in_use_of(r), 3);
    ck_assert_ptr_null(mcp_router_subscribe(r, 1));
    ck_assert_ptr_null(mcp_router_subscribe(r, 9));
    ck_assert_int_eq(in_use_of(r), 3);

    /* b leaves with a wake-up pending; its slot comes back clean */
    mcp_router_notify(r, 1);
    mcp_router_unsubscribe(b);
    ck_assert_int_eq(in_use_of(r), 2);
    d = mcp_router_subscribe(r, 1);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(mcp_router_wait(d, 0), 0);
    ck_assert_int_eq(mcp_router_wait(a, 0), 1);
    ck_assert_ptr_null(mcp_router_subscribe(r, 1));

    /* a slot can move to another stream */
    mcp_router_unsubscribe(d);
    d = mcp_router_subscribe(r, 77);
    ck_assert_ptr_nonnull(d);
    mcp_router_notify(r, 1);
    ck_assert_int_eq(mcp_router_wait(d, 0), 0);
    ck_assert_int_eq(mcp_router_wait(a, 0), 1);
    mcp_router_notify(r, 77);
    ck_assert_int_eq(mcp_router_wait(d, 0), 1);

    mcp_router_unsubscribe(a);
    mcp_router_unsubscribe(c);
    mcp_router_unsubscribe(d);
    ck_assert_int_eq(in_use_of(r), 0);
}
END_TEST

START_TEST(test_notify_all)
{
    mcp_router_t *r = mcp_router_create(pool, 8);
    mcp_router_sub_t *s[4];
    int i;

    for (i = 0; i < 4; i++)
        s[i] = mcp_router_subscribe(r, 100 + i % 3);
    mcp_router_unsubscribe(s[3]);
    mcp_router_notify_all(r);
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(mcp_router_wait(s[i], MS(100)), 1);
        ck_assert_int_eq(mcp_router_wait(s[i], 0), 0);
    }
    ck_assert(notified_of(r) == 3);   /* the unsubscribed slot is not counted */
}
END_TEST

START_TEST(test_stats)
{
    mcp_router_t *r = mcp_router_create(pool, 8);
    mcp_router_sub_t *a, *b, *c;
    int n = -1;
    apr_uint64_t k = 99;

    mcp_router_stats(r, &n, &k);
    ck_assert_int_eq(n, 0);
    ck_assert(k == 0);
    a = mcp_router_subscribe(r, 1);
    b = mcp_router_subscribe(r, 1);
    c = mcp_router_subscribe(r, 2);
    mcp_router_notify(r, 1);        /* +2 */
    mcp_router_notify(r, 3);        /* nobody: +0 */
    mcp_router_notify_all(r);       /* +3 */
    mcp_router_notify(r, 2);        /* +1, coalesced with the notify_all */
    mcp_router_stats(r, &n, &k);
    ck_assert_int_eq(n, 3);
    ck_assert(k == 6);
    mcp_router_unsubscribe(a);
    mcp_router_unsubscribe(b);
    mcp_router_unsubscribe(c);
    mcp_router_stats(r, &n, NULL);
    ck_assert_int_eq(n, 0);
    ck_assert(notified_of(r) == 6);  /* a running total: unsubscribing does not undo it */
}
END_TEST

START_TEST(test_constant_memory)
{
    /* Nothing is allocated in the pool after creation: the next allocation lands right after
     * the one made before the churn (pool blocks are handed out contiguously). */
    mcp_router_t *r = mcp_router_create(pool, 16);
    char *before, *after;
    int i;

    before = apr_palloc(pool, 8);
    for (i = 0; i < 100000; i++) {
        mcp_router_sub_t *s = mcp_router_subscribe(r, i);
        ck_assert_ptr_nonnull(s);
        mcp_router_notify(r, i);
        if (i % 100 == 0)
            mcp_router_notify_all(r);
        ck_assert_int_eq(mcp_router_wait(s, 0), 1);
        mcp_router_unsubscribe(s);
    }
    after = apr_palloc(pool, 8);
    ck_assert_ptr_eq(after, before + 8);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------- */

static apr_thread_t *start(void *(APR_THREAD_FUNC *fn)(apr_thread_t *, void *), void *arg)
{
    apr_thread_t *t;
    ck_assert_int_eq(apr_thread_create(&t, NULL, fn, arg, pool), APR_SUCCESS);
    return t;
}

static void join(apr_thread_t *t)
{
    apr_status_t rv;
    ck_assert_int_eq(apr_thread_join(&rv, t), APR_SUCCESS);
}

/* A follower that is already blocked in the condition variable is woken by notify. */
typedef struct blocked_waiter {
    mcp_router_sub_t   *sub;
    apr_interval_time_t timeout;
    int                 result;
    apr_time_t          elapsed;
} blocked_waiter;

static void *APR_THREAD_FUNC blocked_wait_thread(apr_thread_t *t, void *arg)
{
    blocked_waiter *w = arg;
    apr_time_t t0 = apr_time_now();
    w->result = mcp_router_wait(w->sub, w->timeout);
    w->elapsed = apr_time_now() - t0;
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

START_TEST(test_wakes_blocked_waiters)
{
    /* two followers of one stream, one with a timeout and one without, plus one of another
     * stream; they are given time to block before the notify */
    mcp_router_t *r = mcp_router_create(pool, 4);
    blocked_waiter w[3];
    apr_thread_t *t[3];
    int i;

    w[0].sub = mcp_router_subscribe(r, 11);
    w[0].timeout = apr_time_from_sec(20);
    w[1].sub = mcp_router_subscribe(r, 11);
    w[1].timeout = -1;
    w[2].sub = mcp_router_subscribe(r, 12);
    w[2].timeout = MS(400);
    for (i = 0; i < 3; i++)
        t[i] = start(blocked_wait_thread, &w[i]);
    apr_sleep(MS(100));
    mcp_router_notify(r, 11);
    for (i = 0; i < 3; i++)
        join(t[i]);
    ck_assert_int_eq(w[0].result, 1);
    ck_assert_int_eq(w[1].result, 1);
    ck_assert_int_eq(w[2].result, 0);
    ck_assert_msg(w[0].elapsed < apr_time_from_sec(10), "woke after %ld us", (long)w[0].elapsed);
    ck_assert_msg(w[2].elapsed >= MS(390), "timed out after %ld us", (long)w[2].elapsed);

    /* notify_all reaches a blocked follower too */
    w[2].timeout = apr_time_from_sec(20);
    t[0] = start(blocked_wait_thread, &w[2]);
    apr_sleep(MS(50));
    mcp_router_notify_all(r);
    join(t[0]);
    ck_assert_int_eq(w[2].result, 1);
    ck_assert(w[2].elapsed < apr_time_from_sec(10));
}
END_TEST

/* The table a follower reads: a counter under its own mutex, as the database would be. */
typedef struct shared_table {
    apr_thread_mutex_t *mutex;
    long                value;
} shared_table;

static long table_read(shared_table *tb)
{
    long v;
    apr_thread_mutex_lock(tb->mutex);
    v = tb->value;
    apr_thread_mutex_unlock(tb->mutex);
    return v;
}

typedef struct producer {
    mcp_router_t *router;
    shared_table *table;
    apr_int64_t   stream_id;
    long          count;
    int           use_notify_all;   /* every 64th store announces itself with notify_all */
} producer;

static void *APR_THREAD_FUNC producer_thread(apr_thread_t *t, void *arg)
{
    producer *p = arg;
    long i;

    for (i = 0; i < p->count; i++) {
        /* store, then notify, outside the table lock: exactly what a storing request does */
        apr_thread_mutex_lock(p->table->mutex);
        p->table->value++;
        apr_thread_mutex_unlock(p->table->mutex);
        if (p->use_notify_all && i % 64 == 63)
            mcp_router_notify_all(p->router);
        else
            mcp_router_notify(p->router, p->stream_id);
        if (i % 256 == 0)
            apr_thread_yield();   /* let followers block now and then */
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

typedef struct consumer {
    mcp_router_sub_t *sub;
    shared_table     *table;
    long              target;
    long              final_value;
    long              wakeups;
    long              lost;          /* waits that timed out while the counter was short */
} consumer;

static void *APR_THREAD_FUNC consumer_thread(apr_thread_t *t, void *arg)
{
    consumer *c = arg;

    for (;;) {
        long v = table_read(c->table);   /* "read from the cursor" */
        if (v >= c->target) {
            c->final_value = v;
            break;
        }
        /* v < target, so the producer has at least one more store to make and will notify
         * after it: the wait must return 1. Only a lost wake-up lets it time out. */
        if (mcp_router_wait(c->sub, apr_time_from_sec(10)))
            c->wakeups++;
        else if (++c->lost > 2)
            break;   /* fail instead of hanging */
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static void run_producer_consumers(int use_notify_all)
{
    enum { CONSUMERS = 4, COUNT = 20000 };
    mcp_router_t *r = mcp_router_create(pool, CONSUMERS + 2);
    shared_table table = { NULL, 0 }, noise_table = { NULL, 0 };
    producer prod = { r, &table, 1, COUNT, use_notify_all };
    producer noise = { r, &noise_table, 2, COUNT, 0 };   /* another stream, same router */
    consumer cons[CONSUMERS];
    apr_thread_t *tc[CONSUMERS], *tp, *tn;
    int i;

    ck_assert_int_eq(apr_thread_mutex_create(&table.mutex, APR_THREAD_MUTEX_DEFAULT, pool),
                     APR_SUCCESS);
    ck_assert_int_eq(apr_thread_mutex_create(&noise_table.mutex, APR_THREAD_MUTEX_DEFAULT, pool),
                     APR_SUCCESS);
    for (i = 0; i < CONSUMERS; i++) {
        cons[i].sub = mcp_router_subscribe(r, 1);   /* before the first read */
        ck_assert_ptr_nonnull(cons[i].sub);
        cons[i].table = &table;
        cons[i].target = COUNT;
        cons[i].final_value = -1;
        cons[i].wakeups = 0;
        cons[i].lost = 0;
        tc[i] = start(consumer_thread, &cons[i]);
    }
    tn = start(producer_thread, &noise);
    tp = start(producer_thread, &prod);
    join(tp);
    join(tn);
    for (i = 0; i < CONSUMERS; i++) {
        join(tc[i]);
        ck_assert_int_eq(cons[i].lost, 0);
        ck_assert_int_eq(cons[i].final_value, COUNT);
        /* coalescing: never more wake-ups than notifies that could reach it */
        ck_assert_int_le(cons[i].wakeups, COUNT);
        mcp_router_unsubscribe(cons[i].sub);
    }
    ck_assert_int_eq(in_use_of(r), 0);
}

START_TEST(test_no_lost_wakeup)
{
    run_producer_consumers(0);
}
END_TEST

START_TEST(test_no_lost_wakeup_with_notify_all)
{
    run_producer_consumers(1);
}
END_TEST

/* Lock-step: the producer stores only after the follower has read, and the follower delays
 * (as it would while writing to the client) before waiting, so most notifies land exactly in
 * the window between the read and the wait. A router that dropped a wake-up there would leave
 * the follower waiting for a store that never comes. */
typedef struct lockstep {
    mcp_router_t       *router;
    mcp_router_sub_t   *sub;
    apr_thread_mutex_t *mutex;
    long                value;     /* stored by the producer */
    long                seen;      /* last value the follower read */
    long                rounds;
    long                lost;
} lockstep;

static void *APR_THREAD_FUNC lockstep_producer(apr_thread_t *t, void *arg)
{
    lockstep *ls = arg;
    long k;

    for (k = 1; k <= ls->rounds; k++) {
        for (;;) {
            long seen, lost;
            apr_thread_mutex_lock(ls->mutex);
            seen = ls->seen;
            lost = ls->lost;
            apr_thread_mutex_unlock(ls->mutex);
            if (lost)
                goto out;
            if (seen == k - 1)
                break;
            apr_thread_yield();
        }
        apr_thread_mutex_lock(ls->mutex);
        ls->value = k;
        apr_thread_mutex_unlock(ls->mutex);
        mcp_router_notify(ls->router, 9);
    }
out:
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static void *APR_THREAD_FUNC lockstep_follower(apr_thread_t *t, void *arg)
{
    lockstep *ls = arg;
    long v = 0;

    while (v < ls->rounds) {
        int i;
        apr_thread_mutex_lock(ls->mutex);
        v = ls->value;
        ls->seen = v;
        apr_thread_mutex_unlock(ls->mutex);
        for (i = 0; i < (int)(v % 4) * 50; i++)
            apr_thread_yield();   /* "sending the events": the producer runs meanwhile */
        if (v < ls->rounds && !mcp_router_wait(ls->sub, apr_time_from_sec(10))) {
            apr_thread_mutex_lock(ls->mutex);
            ls->lost++;
            apr_thread_mutex_unlock(ls->mutex);
            break;
        }
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

START_TEST(test_no_lost_wakeup_lockstep)
{
    lockstep ls = { NULL, NULL, NULL, 0, -1, 2000, 0 };
    apr_thread_t *tp, *tf;

    ls.router = mcp_router_create(pool, 1);
    ls.sub = mcp_router_subscribe(ls.router, 9);
    ck_assert_ptr_nonnull(ls.sub);
    ck_assert_int_eq(apr_thread_mutex_create(&ls.mutex, APR_THREAD_MUTEX_DEFAULT, pool),
                     APR_SUCCESS);
    tf = start(lockstep_follower, &ls);
    tp = start(lockstep_producer, &ls);
    join(tp);
    join(tf);
    ck_assert_int_eq(ls.lost, 0);
    ck_assert_int_eq(ls.seen, ls.rounds);
}
END_TEST

/* Followers come and go while notifies fly: exercises subscribe/unsubscribe against notify on
 * shared chains (under -fsanitize=thread this is the data-race check). */
typedef struct churner {
    mcp_router_t *router;
    long          rounds;
    long          full;         /* subscribe returned NULL */
} churner;

static void *APR_THREAD_FUNC churn_thread(apr_thread_t *t, void *arg)
{
    churner *c = arg;
    long i;

    for (i = 0; i < c->rounds; i++) {
        mcp_router_sub_t *s = mcp_router_subscribe(c->router, i % 5);
        if (!s) {
            c->full++;
            continue;
        }
        mcp_router_wait(s, i % 3 == 0 ? MS(1) : 0);
        mcp_router_unsubscribe(s);
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

typedef struct notifier {
    mcp_router_t     *router;
    volatile apr_uint32_t stop;
} notifier;

static void *APR_THREAD_FUNC notify_thread(apr_thread_t *t, void *arg)
{
    notifier *n = arg;
    long i = 0;

    while (!__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE)) {
        if (++i % 50 == 0)
            mcp_router_notify_all(n->router);
        else
            mcp_router_notify(n->router, i % 7);
        if (i % 128 == 0)
            apr_thread_yield();
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

START_TEST(test_churn)
{
    enum { CHURNERS = 6, CAP = 4 };
    mcp_router_t *r = mcp_router_create(pool, CAP);
    churner ch[CHURNERS];
    notifier nt = { r, 0 };
    apr_thread_t *tc[CHURNERS], *tn[2];
    long total_full = 0;
    int i;

    tn[0] = start(notify_thread, &nt);
    tn[1] = start(notify_thread, &nt);
    for (i = 0; i < CHURNERS; i++) {
        ch[i].router = r;
        ch[i].rounds = 5000;
        ch[i].full = 0;
        tc[i] = start(churn_thread, &ch[i]);
    }
    for (i = 0; i < CHURNERS; i++) {
        join(tc[i]);
        total_full += ch[i].full;
    }
    __atomic_store_n(&nt.stop, 1, __ATOMIC_RELEASE);
    join(tn[0]);
    join(tn[1]);
    ck_assert_int_eq(in_use_of(r), 0);
    ck_assert_int_lt(total_full, (long)CHURNERS * 5000);
    /* every slot is usable again */
    for (i = 0; i < CAP; i++)
        ck_assert_ptr_nonnull(mcp_router_subscribe(r, i));
    ck_assert_ptr_null(mcp_router_subscribe(r, 0));
}
END_TEST

static Suite *router_suite(void)
{
    Suite *s = suite_create("mcp_router");
    TCase *tc;

    tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_create_bounds);
    tcase_add_test(tc, test_notify_before_wait_returns_at_once);
    tcase_add_test(tc, test_timeout);
    tcase_add_test(tc, test_other_stream_does_not_wake);
    tcase_add_test(tc, test_extreme_stream_ids);
    tcase_add_test(tc, test_many_streams_hash);
    tcase_add_test(tc, test_two_subscribers_both_wake);
    tcase_add_test(tc, test_notifies_coalesce);
    tcase_add_test(tc, test_capacity);
    tcase_add_test(tc, test_notify_all);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_constant_memory);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_wakes_blocked_waiters);
    tcase_add_test(tc, test_no_lost_wakeup);
    tcase_add_test(tc, test_no_lost_wakeup_with_notify_all);
    tcase_add_test(tc, test_no_lost_wakeup_lockstep);
    tcase_add_test(tc, test_churn);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(router_suite());
}
