/* Unit tests for mcp_loop: held sources record and do not run, one run at a time per source
 * however many threads wake it, timers, a descriptor's hang-up and writability, release from a
 * run, stopping, and backend transfers on the multi handle (headers, every byte through a
 * buffer far smaller than the body — pause and resume — the end, a cut). Runs happen on the
 * loop's workers: they record what they saw under a mutex, the test asserts afterwards. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <apr_atomic.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <apr_time.h>

#include "mcp_backend.h"
#include "mcp_loop.h"

#include "unit_main.h"


#define MS(n) ((apr_interval_time_t)(n) * 1000)

typedef struct probe_t {
    apr_thread_mutex_t *mutex;
    mcp_loop_src_t     *src;
    unsigned            seen;         /* every event bit seen                                */
    int                 runs;
    apr_time_t          first_run_at;
    apr_uint32_t        inside;       /* runs under way now (must never exceed 1)           */
    int                 overlapped;
    int                 release_on;   /* events that make the run release the source         */
    int                 released;
    apr_interval_time_t sleep;        /* each run sleeps this long                          */
    /* transfers */
    apr_pool_t         *pool;
    int                 headers;
    long                status;
    char                content_type[64];
    apr_size_t          bytes;
    int                 done;
    mcp_backend_status_t end;
    char                body[200000];
    /* transfers in slots (slotted: the run takes every slot's news, not slot 0's) */
    int                 slotted;
    apr_size_t          slot_bytes[MCP_LOOP_SLOTS];
    int                 slot_done[MCP_LOOP_SLOTS];
    mcp_backend_status_t slot_end[MCP_LOOP_SLOTS];
    char                slot_err[MCP_LOOP_SLOTS][160];   /* why a slot's transfer ended       */
    int                 slot_mixed;   /* a slot got bytes that are not its server's          */
} probe_t;

static apr_pool_t *pool;
static mcp_loop_t *loop;

static void setup(void)
{
    const char *err = NULL;

    apr_pool_create(&pool, NULL);
    loop = mcp_loop_create(pool, 4, &err);
    ck_assert_msg(loop != NULL, "%s", err ? err : "?");
}

static void teardown(void)
{
    apr_pool_destroy(pool);   /* stops the loop */
    loop = NULL;
}

static void run(mcp_loop_src_t *src, unsigned events, void *baton)
{
    probe_t *p = baton;
    mcp_loop_news_t news;

    if (apr_atomic_inc32(&p->inside) != 0) {
        p->overlapped = 1;
    }
    if (p->sleep) {
        apr_sleep(p->sleep);
    }
    apr_thread_mutex_lock(p->mutex);
    p->seen |= events;
    if (!p->runs++) {
        p->first_run_at = apr_time_now();
    }
    if (p->slotted && (events & MCP_LOOP_XFER)) {
        int slot;
        apr_size_t i;
        for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
            while (mcp_loop_src_take_slot(src, slot, p->pool, p->pool, &news)) {
                /* slot k's server sends 'A' + k */
                for (i = 0; i < news.len; i++) {
                    p->slot_mixed |= news.data[i] != (char)('A' + slot);
                }
                p->slot_bytes[slot] += news.len;
                if (news.done) {
                    p->slot_done[slot] = 1;
                    p->slot_end[slot] = news.status;
                    apr_cpystrn(p->slot_err[slot], news.err ? news.err : "",
                                sizeof(p->slot_err[0]));
                    break;
                }
            }
        }
        events &= ~MCP_LOOP_XFER;
    }
    while ((events & MCP_LOOP_XFER) && mcp_loop_src_take(src, p->pool, p->pool, &news)) {
        if (news.headers) {
            p->headers = 1;
            p->status = news.response.status;
            apr_cpystrn(p->content_type, news.response.content_type ? news.response.content_type
                                                                     : "", sizeof(p->content_type));
        }
        if (news.len && p->bytes + news.len <= sizeof(p->body)) {
            memcpy(p->body + p->bytes, news.data, news.len);
        }
        p->bytes += news.len;
        if (news.done) {
            p->done = 1;
            p->end = news.status;
            break;
        }
    }
    if (events & (unsigned)p->release_on) {
        p->released = 1;
        mcp_loop_src_release(src);
    }
    apr_thread_mutex_unlock(p->mutex);
    apr_atomic_dec32(&p->inside);
}

static probe_t *probe_new(void)
{
    probe_t *p = apr_pcalloc(pool, sizeof(*p));

    apr_thread_mutex_create(&p->mutex, APR_THREAD_MUTEX_DEFAULT, pool);
    apr_pool_create(&p->pool, pool);
    p->release_on = MCP_LOOP_STOPPING;   /* as every owner must */
    p->src = mcp_loop_src_add(loop, run, p);
    ck_assert_ptr_nonnull(p->src);
    return p;
}

/* Waits (up to timeout) until pred holds, looked at under the probe's mutex. */
static int await(probe_t *p, int (*pred)(probe_t *), apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;
    int ok;

    for (;;) {
        apr_thread_mutex_lock(p->mutex);
        ok = pred(p);
        apr_thread_mutex_unlock(p->mutex);
        if (ok || apr_time_now() > deadline) {
            return ok;
        }
        apr_sleep(MS(2));
    }
}

static int saw_woken(probe_t *p) { return (p->seen & MCP_LOOP_WOKEN) != 0; }
static int saw_timer(probe_t *p) { return (p->seen & MCP_LOOP_TIMER) != 0; }
static int saw_hangup(probe_t *p) { return (p->seen & MCP_LOOP_HANGUP) != 0; }
static int saw_writable(probe_t *p) { return (p->seen & MCP_LOOP_WRITABLE) != 0; }
static int saw_stopping(probe_t *p) { return (p->seen & MCP_LOOP_STOPPING) != 0; }
static int is_done(probe_t *p) { return p->done; }

static int sources(void)
{
    int n = -1;
    mcp_loop_stats(loop, &n, NULL);
    return n;
}

/* ---- sources ------------------------------------------------------------------------------ */

START_TEST(test_held_records_and_does_not_run)
{
    probe_t *p = probe_new();

    mcp_loop_wake(p->src);
    mcp_loop_wake(p->src);
    apr_sleep(MS(100));
    ck_assert_int_eq(p->runs, 0);
    /* The owner of a held source takes its events itself. */
    ck_assert_uint_eq(mcp_loop_src_wait(p->src, MS(10)), MCP_LOOP_WOKEN);
    ck_assert_uint_eq(mcp_loop_src_wait(p->src, MS(10)), 0);
    mcp_loop_wake(p->src);
    mcp_loop_src_go(p->src, 0);
    ck_assert(await(p, saw_woken, MS(2000)));
    ck_assert_int_eq(p->runs, 1);
    ck_assert_int_eq(sources(), 1);
}
END_TEST

START_TEST(test_go_later_waits_for_the_loops_look)
{
    probe_t *p = probe_new();

    mcp_loop_wake(p->src);
    mcp_loop_src_go(p->src, apr_time_now() + MS(150));
    apr_sleep(MS(60));
    ck_assert_int_eq(p->runs, 0);
    ck_assert(await(p, saw_woken, MS(2000)));
}
END_TEST

typedef struct waker_t {
    mcp_loop_src_t *src;
    int             n;
} waker_t;

static void *APR_THREAD_FUNC waker(apr_thread_t *t, void *data)
{
    waker_t *w = data;
    int i;

    for (i = 0; i < w->n; i++) {
        mcp_loop_wake(w->src);
        if (i % 64 == 0) {
            apr_sleep(100);
        }
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

START_TEST(test_one_run_at_a_time)
{
    probe_t *p = probe_new();
    apr_thread_t *threads[4];
    waker_t w;
    apr_status_t rv;
    int i, runs;

    p->sleep = 300;   /* 0.3 ms per run: wakes pile up while it runs */
    mcp_loop_src_go(p->src, 0);
    w.src = p->src;
    w.n = 2000;
    for (i = 0; i < 4; i++) {
        apr_thread_create(&threads[i], NULL, waker, &w, pool);
    }
    for (i = 0; i < 4; i++) {
        apr_thread_join(&rv, threads[i]);
    }
    /* A wake after the last run began is not lost: a run follows it. */
    apr_sleep(MS(100));
    apr_thread_mutex_lock(p->mutex);
    runs = p->runs;
    p->seen = 0;
    apr_thread_mutex_unlock(p->mutex);
    mcp_loop_wake(p->src);
    ck_assert(await(p, saw_woken, MS(2000)));
    ck_assert_int_eq(p->overlapped, 0);
    ck_assert_int_ge(runs, 1);
    ck_assert_int_lt(runs, 8000);   /* wakes coalesce while a run is queued */
}
END_TEST

START_TEST(test_timer)
{
    probe_t *p = probe_new();
    apr_time_t at = apr_time_now() + MS(120);

    mcp_loop_src_timer(p->src, at);
    mcp_loop_src_go(p->src, 0);
    apr_sleep(MS(60));
    ck_assert_int_eq(p->runs, 0);
    ck_assert(await(p, saw_timer, MS(2000)));
    ck_assert(apr_time_now() >= at);
    /* Once: it does not come again unless set again. */
    apr_sleep(MS(150));
    ck_assert_int_eq(p->runs, 1);
}
END_TEST

/* Timers of many sources (kept in order, not looked at one by one): each comes once, not before
 * it is due; one moved later comes later, one moved earlier comes sooner, one cleared never; a
 * held source's timer and its let-go time are each kept. (Only "not before": how late a timer
 * comes depends on the machine's load.) */
START_TEST(test_many_timers_each_when_due)
{
    enum { N = 100 };
    probe_t *p[N], *later, *sooner, *cleared, *held;
    apr_time_t t0, at[N];
    int i;

    /* Made first (slow under ASan on a busy machine), then armed from t0 with a second of room
     * before any first timer is due, so that the moves below come before it. */
    for (i = 0; i < N; i++) {
        p[i] = probe_new();
    }
    held = probe_new();
    t0 = apr_time_now();
    for (i = 0; i < N; i++) {
        at[i] = t0 + MS(1000) + MS(4) * ((i * 37) % N);   /* 1.0 .. 1.4 s, shuffled */
        mcp_loop_src_timer(p[i]->src, at[i]);
        mcp_loop_src_go(p[i]->src, 0);
    }
    later = p[0];
    sooner = p[1];
    cleared = p[2];
    mcp_loop_src_timer(later->src, at[0] = t0 + MS(1900));
    mcp_loop_src_timer(sooner->src, at[1] = t0 + MS(60));
    mcp_loop_src_timer(cleared->src, 0);
    mcp_loop_src_timer(held->src, t0 + MS(300));
    mcp_loop_src_go(held->src, t0 + MS(150));   /* let go first, then its timer comes */
    ck_assert(await(sooner, saw_timer, MS(5000)));
    ck_assert(await(held, saw_timer, MS(5000)));
    ck_assert(held->first_run_at >= t0 + MS(300));
    for (i = 3; i < N; i++) {
        ck_assert(await(p[i], saw_timer, MS(5000)));
    }
    ck_assert(await(later, saw_timer, MS(5000)));
    apr_sleep(MS(100));
    for (i = 0; i < N; i++) {
        if (p[i] != cleared) {
            ck_assert_int_eq(p[i]->runs, 1);
            ck_assert(p[i]->first_run_at >= at[i]);
        }
    }
    ck_assert_int_eq(cleared->runs, 0);
    ck_assert_int_eq(held->runs, 1);
}
END_TEST

START_TEST(test_hangup)
{
    probe_t *p = probe_new();
    int sv[2];

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    mcp_loop_src_fd(p->src, sv[0], 0);
    mcp_loop_src_go(p->src, 0);
    apr_sleep(MS(60));
    ck_assert_int_eq(p->runs, 0);   /* an idle peer is not a hang-up */
    close(sv[1]);
    ck_assert(await(p, saw_hangup, MS(2000)));
    mcp_loop_src_fd(p->src, -1, 0);
    close(sv[0]);
}
END_TEST

START_TEST(test_writable_only_when_asked_and_possible)
{
    probe_t *p = probe_new();
    char buf[65536];
    int sv[2], full = 0;

    memset(buf, 'x', sizeof(buf));
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    while (!full) {
        full = write(sv[0], buf, sizeof(buf)) < 0 && errno == EAGAIN;
    }
    mcp_loop_src_fd(p->src, sv[0], 1);
    mcp_loop_src_go(p->src, 0);
    apr_sleep(MS(80));
    ck_assert_int_eq(p->runs, 0);   /* full: not writable */
    while (read(sv[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf)) {
    }
    ck_assert(await(p, saw_writable, MS(2000)));
    mcp_loop_src_fd(p->src, -1, 0);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(test_release_from_a_run)
{
    probe_t *p = probe_new();

    p->release_on |= MCP_LOOP_WOKEN;
    mcp_loop_src_go(p->src, 0);
    ck_assert_int_eq(sources(), 1);
    mcp_loop_wake(p->src);
    ck_assert(await(p, saw_woken, MS(2000)));
    apr_sleep(MS(100));
    ck_assert_int_eq(sources(), 0);
    ck_assert_int_eq(p->released, 1);
}
END_TEST

START_TEST(test_release_while_held)
{
    probe_t *p = probe_new();

    mcp_loop_src_release(p->src);
    apr_sleep(MS(100));
    ck_assert_int_eq(sources(), 0);
    ck_assert_int_eq(p->runs, 0);
}
END_TEST

START_TEST(test_stop_tells_every_source)
{
    probe_t *a = probe_new(), *b = probe_new();

    mcp_loop_src_go(a->src, 0);
    mcp_loop_src_go(b->src, 0);
    mcp_loop_stop(loop, apr_time_from_sec(5));
    ck_assert(saw_stopping(a) && saw_stopping(b));
    ck_assert(a->released && b->released);
    ck_assert_ptr_null(mcp_loop_src_add(loop, run, a));
}
END_TEST

/* An owner waiting for its held source's events on a thread of its own. */
typedef struct owner_t {
    mcp_loop_src_t *src;
    apr_thread_t   *thread;
    unsigned        events;
    apr_uint32_t    returned;
} owner_t;

static void *APR_THREAD_FUNC owner_waits(apr_thread_t *t, void *data)
{
    owner_t *o = data;

    o->events = mcp_loop_src_wait(o->src, apr_time_from_sec(20));
    if (o->events & MCP_LOOP_STOPPING) {
        mcp_loop_src_release(o->src);
    }
    apr_atomic_set32(&o->returned, 1);
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static owner_t *owner_start(void)
{
    owner_t *o = apr_pcalloc(pool, sizeof(*o));

    o->src = probe_new()->src;
    ck_assert_int_eq(apr_thread_create(&o->thread, NULL, owner_waits, o, pool), APR_SUCCESS);
    return o;
}

static int owner_returned(owner_t *o, apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;

    while (!apr_atomic_read32(&o->returned) && apr_time_now() < deadline) {
        apr_sleep(MS(2));
    }
    return apr_atomic_read32(&o->returned) != 0;
}

/* Owners waiting at once (request threads waiting for their answers) are each woken by their own
 * source's events; and every one of them by the loop's stop. */
START_TEST(test_waiting_owners_are_woken_each_by_their_own_source)
{
    owner_t *a = owner_start(), *b = owner_start(), *c = owner_start(), *d = owner_start();
    apr_status_t rv;

    apr_sleep(MS(50));   /* (an event before the wait is taken by it all the same) */
    mcp_loop_wake(a->src);
    ck_assert(owner_returned(a, apr_time_from_sec(5)));
    ck_assert_uint_eq(a->events, MCP_LOOP_WOKEN);
    ck_assert(!owner_returned(b, MS(100)));
    mcp_loop_wake(b->src);
    ck_assert(owner_returned(b, apr_time_from_sec(5)));
    ck_assert_uint_eq(b->events, MCP_LOOP_WOKEN);
    apr_thread_join(&rv, a->thread);
    apr_thread_join(&rv, b->thread);
    mcp_loop_src_release(a->src);
    mcp_loop_src_release(b->src);
    ck_assert(!owner_returned(c, MS(50)) && !owner_returned(d, MS(1)));
    mcp_loop_stop(loop, apr_time_from_sec(5));
    ck_assert(owner_returned(c, apr_time_from_sec(1)) && owner_returned(d, apr_time_from_sec(1)));
    ck_assert(c->events & MCP_LOOP_STOPPING);
    ck_assert(d->events & MCP_LOOP_STOPPING);
    apr_thread_join(&rv, c->thread);
    apr_thread_join(&rv, d->thread);
    ck_assert_int_eq(sources(), 0);
}
END_TEST

static volatile int restarting;
static int is_restarting(void)
{
    return restarting;
}

START_TEST(test_stop_check_tells_sources_and_the_loop_goes_on)
{
    probe_t *a = probe_new(), *b;

    mcp_loop_set_stop_check(loop, is_restarting);
    mcp_loop_src_go(a->src, 0);
    apr_sleep(MS(100));
    ck_assert_int_eq(a->runs, 0);
    restarting = 1;
    ck_assert(await(a, saw_stopping, MS(2000)));
    ck_assert(a->released);
    /* The loop still runs: a source added now is told at once, and once only. */
    b = probe_new();
    b->release_on = 0;
    mcp_loop_src_go(b->src, 0);
    ck_assert(await(b, saw_stopping, MS(2000)));
    apr_sleep(MS(200));
    ck_assert_int_eq(b->runs, 1);
    b->release_on = MCP_LOOP_WOKEN;
    mcp_loop_wake(b->src);
    ck_assert(await(b, saw_woken, MS(2000)));
    restarting = 0;
}
END_TEST

/* ---- transfers ---------------------------------------------------------------------------- */

/* A one-shot HTTP server on loopback: answers the first connection with head + a body of n
 * bytes ('a' + i % 26), written in pieces; or, with silent, reads and never answers. */
typedef struct server_t {
    int         fd;
    int         port;
    apr_size_t  n;
    int         silent;
    char        fill;     /* every byte is this one (0: the alphabet)                    */
} server_t;

static void *APR_THREAD_FUNC serve(apr_thread_t *t, void *data)
{
    server_t *s = data;
    char req[4096], piece[4096];
    int c = accept(s->fd, NULL, NULL);
    apr_size_t sent = 0, i;

    if (c >= 0) {
        ssize_t got = read(c, req, sizeof(req));
        (void)got;
        if (s->silent) {
            apr_sleep(apr_time_from_sec(1));
        }
        else {
            /* Formatted on this thread's stack: the test's pool is not for threads (the
             * main thread allocates from it meanwhile, e.g. the next server's URL). */
            char head[128];
            apr_size_t len = apr_snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type:"
                                          " text/event-stream\r\nContent-Length: %"
                                          APR_SIZE_T_FMT "\r\n\r\n", s->n);
            ssize_t w = write(c, head, len);
            (void)w;
            while (sent < s->n) {
                apr_size_t k = s->n - sent < sizeof(piece) ? s->n - sent : sizeof(piece);
                for (i = 0; i < k; i++) {
                    piece[i] = s->fill ? s->fill : (char)('a' + (sent + i) % 26);
                }
                w = write(c, piece, k);
                if (w <= 0) {
                    break;
                }
                sent += (apr_size_t)w;
            }
        }
        close(c);
    }
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static apr_thread_t *server_start(server_t *s)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    apr_thread_t *t;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s->fd, 4), 0);
    getsockname(s->fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    apr_thread_create(&t, NULL, serve, s, pool);
    return t;
}

static void start_get(probe_t *p, server_t *s, apr_size_t max_buffered)
{
    static mcp_backend_target_t target;
    mcp_backend_pool_t *bp = mcp_backend_pool_create(pool, 2);
    mcp_backend_call_t call;
    const char *err = NULL;

    target.url = apr_psprintf(pool, "http://127.0.0.1:%d/mcp", s->port);
    target.unix_socket = NULL;
    memset(&call, 0, sizeof(call));
    call.target = &target;
    call.method = "GET";
    call.connect_timeout_ms = 2000;
    ck_assert_int_eq(mcp_loop_src_start(p->src, bp, &call, max_buffered, 0, &err), 0);
}

START_TEST(test_transfer_through_a_small_buffer)
{
    probe_t *p = probe_new();
    server_t s = { 0, 0, 150000, 0, 0 };
    apr_thread_t *t = server_start(&s);
    apr_status_t rv;
    apr_size_t i;

    start_get(p, &s, 1000);   /* far below the body: curl pauses and resumes many times */
    mcp_loop_src_go(p->src, 0);
    ck_assert(await(p, is_done, apr_time_from_sec(10)));
    apr_thread_join(&rv, t);
    close(s.fd);
    ck_assert(p->headers);
    ck_assert_int_eq(p->status, 200);
    ck_assert_str_eq(p->content_type, "text/event-stream");
    ck_assert_int_eq(p->end, MCP_BACKEND_OK);
    ck_assert_uint_eq(p->bytes, s.n);
    for (i = 0; i < s.n; i++) {
        if (p->body[i] != (char)('a' + i % 26)) {
            ck_abort_msg("byte %zu differs", (size_t)i);
        }
    }
    ck_assert_int_eq(p->overlapped, 0);
}
END_TEST

START_TEST(test_transfer_cut)
{
    probe_t *p = probe_new();
    server_t s = { 0, 0, 0, 1, 0 };
    apr_thread_t *t = server_start(&s);
    apr_status_t rv;

    start_get(p, &s, 4096);
    mcp_loop_src_go(p->src, 0);
    apr_sleep(MS(200));
    ck_assert_int_eq(p->done, 0);
    /* The owner cuts it (as its run would); the end comes as news. */
    apr_thread_mutex_lock(p->mutex);
    mcp_loop_src_cut(p->src);
    apr_thread_mutex_unlock(p->mutex);
    ck_assert(await(p, is_done, apr_time_from_sec(5)));
    ck_assert_int_eq(p->end, MCP_BACKEND_ABORTED);
    apr_thread_join(&rv, t);
    close(s.fd);
}
END_TEST

START_TEST(test_release_cuts_a_running_transfer)
{
    probe_t *p = probe_new();
    server_t s = { 0, 0, 0, 1, 0 };
    apr_thread_t *t = server_start(&s);
    apr_status_t rv;
    int transfers = -1;

    start_get(p, &s, 4096);
    mcp_loop_src_go(p->src, 0);
    apr_sleep(MS(200));
    mcp_loop_stats(loop, NULL, &transfers);
    ck_assert_int_eq(transfers, 1);
    p->release_on |= MCP_LOOP_WOKEN;
    mcp_loop_wake(p->src);
    ck_assert(await(p, saw_woken, MS(2000)));
    apr_sleep(MS(200));
    mcp_loop_stats(loop, NULL, &transfers);
    ck_assert_int_eq(transfers, 0);
    ck_assert_int_eq(sources(), 0);
    apr_thread_join(&rv, t);
    close(s.fd);
}
END_TEST

/* A transfer's handle goes back to the cache when the transfer ends, and the next transfer may
 * take it at once; freeing the first transfer's remains afterwards must leave it alone (it
 * once cleared the handle's private pointer, and the second transfer's end was never seen). */
START_TEST(test_a_handle_given_back_is_left_alone)
{
    probe_t *a = probe_new(), *b = probe_new();
    server_t sa = { 0, 0, 100, 0, 0 }, sb = { 0, 0, 100, 0, 0 };
    apr_thread_t *ta = server_start(&sa), *tb = server_start(&sb);
    static mcp_backend_target_t target;
    mcp_backend_pool_t *bp = mcp_backend_pool_create(pool, 2);
    mcp_backend_call_t call;
    const char *err = NULL;
    apr_status_t rv;

    memset(&call, 0, sizeof(call));
    call.target = &target;
    call.method = "GET";
    call.connect_timeout_ms = 2000;
    /* a: started and ended, its end not taken yet (the source is held) */
    target.url = apr_psprintf(pool, "http://127.0.0.1:%d/mcp", sa.port);
    ck_assert_int_eq(mcp_loop_src_start(a->src, bp, &call, 4096, 1, &err), 0);
    apr_thread_join(&rv, ta);
    apr_sleep(MS(300));
    /* b takes the handle a gave back */
    target.url = apr_psprintf(pool, "http://127.0.0.1:%d/mcp", sb.port);
    ck_assert_int_eq(mcp_loop_src_start(b->src, bp, &call, 4096, 0, &err), 0);
    /* now a's end is taken (its remains are freed, after b was added) */
    mcp_loop_src_go(a->src, 0);
    ck_assert(await(a, is_done, apr_time_from_sec(5)));
    mcp_loop_src_go(b->src, 0);
    ck_assert_msg(await(b, is_done, apr_time_from_sec(5)), "the second transfer's end was lost");
    ck_assert_int_eq(b->end, MCP_BACKEND_OK);
    ck_assert_uint_eq(b->bytes, 100);
    apr_thread_join(&rv, tb);
    close(sa.fd);
    close(sb.fd);
}
END_TEST

/* Several transfers on one source, each in a slot of its own: each one's bytes come out of its
 * slot only (through buffers far below the bodies: pauses and resumes per slot), every end
 * is seen, the runs never overlap; a source released while two slots' transfers wait cuts
 * both. */
static int slots_done(probe_t *p)
{
    return p->slot_done[0] && p->slot_done[3] && p->slot_done[MCP_LOOP_SLOTS - 1];
}

START_TEST(test_transfers_in_slots)
{
    probe_t *p = probe_new();
    static const int slot[3] = { 0, 3, MCP_LOOP_SLOTS - 1 };
    server_t s[3];
    apr_thread_t *t[3];
    static mcp_backend_target_t target[3];
    mcp_backend_pool_t *bp = mcp_backend_pool_create(pool, 4);
    mcp_backend_call_t call;
    const char *err = NULL;
    apr_status_t rv;
    int i;

    p->slotted = 1;
    for (i = 0; i < 3; i++) {
        memset(&s[i], 0, sizeof(s[i]));
        s[i].n = 60000 + (apr_size_t)i * 10000;
        s[i].fill = (char)('A' + slot[i]);
        t[i] = server_start(&s[i]);
        target[i].url = apr_psprintf(pool, "http://127.0.0.1:%d/mcp", s[i].port);
        memset(&call, 0, sizeof(call));
        call.target = &target[i];
        call.method = "GET";
        call.connect_timeout_ms = 2000;
        ck_assert_int_eq(mcp_loop_src_start_slot(p->src, slot[i], bp, &call, 1000, i == 1,
                                                 &err), 0);
    }
    /* One transfer per slot; no slot past the last. */
    ck_assert_int_ne(mcp_loop_src_start_slot(p->src, 3, bp, &call, 1000, 0, &err), 0);
    ck_assert_int_ne(mcp_loop_src_start_slot(p->src, MCP_LOOP_SLOTS, bp, &call, 1000, 0, &err),
                     0);
    mcp_loop_src_go(p->src, 0);
    ck_assert(await(p, slots_done, apr_time_from_sec(10)));
    for (i = 0; i < 3; i++) {
        apr_thread_join(&rv, t[i]);
        close(s[i].fd);
        ck_assert_msg(p->slot_end[slot[i]] == MCP_BACKEND_OK, "slot %d ended with %d: %s",
                      slot[i], (int)p->slot_end[slot[i]], p->slot_err[slot[i]]);
        ck_assert_uint_eq(p->slot_bytes[slot[i]], s[i].n);
    }
    ck_assert_int_eq(p->slot_mixed, 0);
    ck_assert_int_eq(p->overlapped, 0);
}
END_TEST

START_TEST(test_release_cuts_every_slot)
{
    probe_t *p = probe_new();
    server_t a = { 0, 0, 0, 1, 0 }, b = { 0, 0, 0, 1, 0 };
    apr_thread_t *ta = server_start(&a), *tb = server_start(&b);
    static mcp_backend_target_t target[2];
    mcp_backend_pool_t *bp = mcp_backend_pool_create(pool, 4);
    mcp_backend_call_t call;
    const char *err = NULL;
    apr_status_t rv;
    int transfers = -1;

    p->slotted = 1;
    memset(&call, 0, sizeof(call));
    call.method = "GET";
    call.connect_timeout_ms = 2000;
    target[0].url = apr_psprintf(pool, "http://127.0.0.1:%d/mcp", a.port);
    call.target = &target[0];
    ck_assert_int_eq(mcp_loop_src_start_slot(p->src, 1, bp, &call, 4096, 1, &err), 0);
    target[1].url = apr_psprintf(pool, "http://127.0.0.1:%d/mcp", b.port);
    call.target = &target[1];
    ck_assert_int_eq(mcp_loop_src_start_slot(p->src, 2, bp, &call, 4096, 1, &err), 0);
    mcp_loop_src_go(p->src, 0);
    apr_sleep(MS(200));
    mcp_loop_stats(loop, NULL, &transfers);
    ck_assert_int_eq(transfers, 2);
    /* A cut of one slot ends that one only. */
    apr_thread_mutex_lock(p->mutex);
    mcp_loop_src_cut_slot(p->src, 1);
    apr_thread_mutex_unlock(p->mutex);
    apr_sleep(MS(200));
    apr_thread_mutex_lock(p->mutex);
    ck_assert(p->slot_done[1] && !p->slot_done[2]);
    ck_assert_int_eq(p->slot_end[1], MCP_BACKEND_ABORTED);
    apr_thread_mutex_unlock(p->mutex);
    mcp_loop_stats(loop, NULL, &transfers);
    ck_assert_int_eq(transfers, 1);
    p->release_on |= MCP_LOOP_WOKEN;
    mcp_loop_wake(p->src);
    ck_assert(await(p, saw_woken, MS(2000)));
    apr_sleep(MS(200));
    mcp_loop_stats(loop, NULL, &transfers);
    ck_assert_int_eq(transfers, 0);
    ck_assert_int_eq(sources(), 0);
    apr_thread_join(&rv, ta);
    apr_thread_join(&rv, tb);
    close(a.fd);
    close(b.fd);
}
END_TEST

static Suite *loop_suite(void)
{
    Suite *s = suite_create("loop");
    TCase *tc = tcase_create("sources");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_held_records_and_does_not_run);
    tcase_add_test(tc, test_go_later_waits_for_the_loops_look);
    tcase_add_test(tc, test_one_run_at_a_time);
    tcase_add_test(tc, test_timer);
    tcase_add_test(tc, test_hangup);
    tcase_add_test(tc, test_writable_only_when_asked_and_possible);
    tcase_add_test(tc, test_release_from_a_run);
    tcase_add_test(tc, test_release_while_held);
    tcase_add_test(tc, test_many_timers_each_when_due);
    tcase_add_test(tc, test_stop_tells_every_source);
    tcase_add_test(tc, test_waiting_owners_are_woken_each_by_their_own_source);
    tcase_add_test(tc, test_stop_check_tells_sources_and_the_loop_goes_on);
    suite_add_tcase(s, tc);

    tc = tcase_create("transfers");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_transfer_through_a_small_buffer);
    tcase_add_test(tc, test_transfer_cut);
    tcase_add_test(tc, test_release_cuts_a_running_transfer);
    tcase_add_test(tc, test_a_handle_given_back_is_left_alone);
    tcase_add_test(tc, test_transfers_in_slots);
    tcase_add_test(tc, test_release_cuts_every_slot);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    mcp_backend_global_init();
    return mcp_unit_run(loop_suite());
}
