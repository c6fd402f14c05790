/* mcp_loop — see mcp_loop.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <curl/curl.h>

#include "mcp_heap.h"
#include "mcp_loop.h"

#define MAX_WORKERS 64

#define EVENTS_PER_WAIT 256

/* What a worker's scratch pool keeps after a run (more goes back to the system). */
#define SCRATCH_KEEP (64 * 1024)

/* Pools kept for the next transfers and detached exchanges once cleared, and what each keeps
 * (at most 8 MiB per process, after a burst of 64 exchanges at once). A new pool of its own
 * allocator was an mmap per block and a munmap of each when it was destroyed: ~5 % of httpd's
 * CPU per call (a transfer's), ~20 % (an era-bridge call's detached exchange); and a detached
 * exchange uses more than 32 KiB: kept to 32 KiB, its clear gave the rest back (~6 %). */
#define SPARE_POOLS 64
#define SPARE_KEEP (128 * 1024)

/* Idle backend connections the multi handle keeps for the next transfers, beyond one per running
 * transfer (CURLMOPT_MAXCONNECTS, set to ntransfers + this whenever ntransfers changes).
 * libcurl's own default is four per transfer added at the moment a connection is given back,
 * and a call's transfer is short beside its stores: at c = 32 often only a few are running, so
 * the connections of the calls that had just ended were closed and the next calls connected
 * anew (0.12 new backend connections per call). A backend closes what it keeps idle too long
 * itself (libcurl sees that before it reuses one). */
#define IDLE_CONNECTIONS 64

/* Waiting owners a curl action wakes once the mutex is free (more are woken under it). */
#define WAKE_AFTER 32

#define TOLD_CHECK 1u   /* by the stop check (a graceful restart: the loop goes on) */
#define TOLD_STOP  2u   /* by mcp_loop_stop                                       */

/* What an epoll registration points to. */
typedef enum { TAG_WAKE, TAG_SOURCE, TAG_CURL } tag_kind_t;

typedef struct tag_t {
    tag_kind_t     kind;
    int            fd;
    int            dead;     /* TAG_CURL: curl let go of the socket                      */
} tag_t;

typedef enum { SRC_HELD, SRC_IDLE, SRC_QUEUED, SRC_RUNNING, SRC_DEAD } src_state_t;

typedef struct xfer_t xfer_t;

/* A thread waiting for its held source's events (mcp_loop_src_wait), on a condition of its own:
 * news of one source wakes its owner only (one condition shared by every held source woke all
 * the request threads waiting for answers at each answer). Kept for the next wait once done:
 * a loop makes as many as threads ever waited at once. */
typedef struct waiter_t {
    apr_thread_cond_t *cond;
    struct waiter_t   *next;
} waiter_t;

struct mcp_loop_src_t {
    tag_t             tag;       /* first: epoll's pointer is the source's                  */
    mcp_loop_t       *loop;
    mcp_loop_run_fn  *run;
    void             *baton;
    src_state_t       state;
    unsigned          pending;   /* events since the last run                               */
    int               released;
    int               fd_added;
    apr_time_t        timer_at;
    apr_time_t        go_at;     /* held: let go at the loop's first look after it (0: not yet) */
    mcp_heap_node_t   due;       /* among the loop's timers: the earlier of the two above    */
    unsigned          told;      /* MCP_LOOP_STOPPING was sent: TOLD_CHECK, TOLD_STOP        */
    waiter_t         *waiter;    /* held: its owner waits for events on this                 */
    apr_pool_t       *scratch;   /* running: its worker's scratch pool                      */
    xfer_t           *xfer[MCP_LOOP_SLOTS];   /* its transfers, by slot                     */
    mcp_loop_src_t   *prev, *next;   /* every source                                        */
    mcp_loop_src_t   *qnext;         /* the run queue, or the graveyard                     */
    mcp_loop_src_t   *dnext;         /* the loop's deferred marks (on_deferred)             */
    int               on_deferred;
};

/* A backend transfer and what it brought that its source has not taken yet. Everything below
 * `a` is guarded by the loop's mutex; the pool and the transfer are the loop thread's. */
struct xfer_t {
    mcp_loop_t             *loop;
    apr_pool_t             *pool;      /* own allocator: only the loop thread allocates in it  */
    mcp_backend_async_t    *a;
    CURL                   *curl;
    int                     in_multi;
    mcp_loop_src_t         *src;       /* NULL once the source let go                        */
    char                   *buf;       /* bytes not taken yet                                */
    apr_size_t              len, cap, max;
    int                     paused;    /* the write callback asked curl to wait for room     */
    int                     headers;   /* the headers came and were not taken yet            */
    int                     headers_taken;
    int                     done;
    int                     queued;    /* commands naming it that the loop has not run yet    */
    mcp_backend_status_t    status;
    const char             *err;       /* in pool                                            */
};

/* A worker thread and its scratch pool (its own allocator: only that thread allocates in it). */
typedef struct worker_t {
    mcp_loop_t    *loop;
    apr_thread_t  *thread;
    apr_pool_t    *scratch;
} worker_t;

typedef enum { CMD_ADD, CMD_RESUME, CMD_CUT, CMD_FREE } cmd_kind_t;

typedef struct cmd_t {
    cmd_kind_t     kind;
    xfer_t        *xfer;
    struct cmd_t  *next;
} cmd_t;

struct mcp_loop_t {
    apr_pool_t          *pool;
    apr_thread_mutex_t  *mutex;
    apr_thread_cond_t   *work;       /* a source was queued, or the workers must exit       */
    apr_thread_cond_t   *gone;       /* a source was freed (mcp_loop_stop waits on it)      */
    apr_pool_t          *waiter_pool;   /* the waiters' (allocated in with the mutex held) */
    waiter_t            *spare_waiters;
    int                  epfd;
    tag_t                wake;       /* the eventfd                                          */
    CURLM               *multi;
    apr_time_t           curl_at;    /* when curl wants its timeout action (0: never)        */
    apr_thread_t        *thread;
    worker_t             workers[MAX_WORKERS];
    int                  nworkers;
    mcp_loop_src_t      *sources;
    int                  nsources;
    mcp_heap_t           timers;     /* the sources with a timer or a let-go time (room for
                                      * every source is made when it is added)              */
    unsigned             told;       /* the stop words every source was given (TOLD_*)      */
    int                  ntransfers;
    mcp_loop_src_t      *runq, *runq_tail;
    mcp_loop_src_t      *graveyard;
    cmd_t               *cmds, *cmds_tail;
    tag_t              **curl_tags;  /* by descriptor number (the loop thread's)             */
    apr_size_t           ncurl_tags;
    apr_pool_t          *spare[SPARE_POOLS];   /* spare pools, cleared, for the next users   */
    int                  nspare;
    int                  acting;     /* in curl_action (the loop thread's)                   */
    mcp_loop_src_t      *deferred;   /* sources with transfer news marked at its end          */
    int                  stopping;   /* sources are told to go                               */
    int                (*stop_check)(void);   /* ... also once this says so                   */
    int                  exiting;    /* threads end                                          */
};

/* ---- small helpers (callers hold the mutex where it says so) ---------------------------- */

static void poke(mcp_loop_t *loop)
{
    uint64_t one = 1;
    ssize_t n = write(loop->wake.fd, &one, sizeof(one));
    (void)n;   /* EAGAIN: the counter is already non-zero, the loop wakes anyway */
}

/* Mutex held. */
static void enqueue(mcp_loop_src_t *src)
{
    mcp_loop_t *loop = src->loop;

    src->state = SRC_QUEUED;
    src->qnext = NULL;
    if (loop->runq_tail) {
        loop->runq_tail->qnext = src;
    }
    else {
        loop->runq = src;
    }
    loop->runq_tail = src;
    apr_thread_cond_signal(loop->work);
}

/* Mutex held: records events for src, queues it when it waits in the loop, and returns the
 * condition its owner waits on when it is held and waited for (NULL otherwise): the caller
 * signals it. */
static apr_thread_cond_t *marked(mcp_loop_src_t *src, unsigned events)
{
    if (src->released || src->state == SRC_DEAD) {
        return NULL;
    }
    src->pending |= events;
    if (src->state == SRC_IDLE) {
        enqueue(src);
    }
    else if (src->state == SRC_HELD && src->waiter) {
        return src->waiter->cond;
    }
    return NULL;
}

/* Mutex held: src's place among the loop's timers, after its timer or let-go time changed. */
static void schedule(mcp_loop_src_t *src)
{
    apr_time_t at = src->timer_at;

    if (src->state == SRC_HELD && src->go_at && (!at || src->go_at < at)) {
        at = src->go_at;
    }
    if (at && src->state != SRC_DEAD) {
        mcp_heap_set(&src->loop->timers, &src->due, at);   /* cannot fail: room was made */
    }
    else {
        mcp_heap_remove(&src->loop->timers, &src->due);
    }
}

/* Mutex held. */
static void mark(mcp_loop_src_t *src, unsigned events)
{
    apr_thread_cond_t *waiter = marked(src, events);

    if (waiter) {
        apr_thread_cond_signal(waiter);
    }
}

/* Mutex held: the transfer of src has news. Within a curl action (headers, body and end often
 * come in one read) its source is told once, at the action's end (curl_action): a thread that
 * waits for it is woken once, not once for each, to find the mutex held by the loop thread. */
static void mark_xfer(mcp_loop_src_t *src)
{
    mcp_loop_t *loop = src->loop;

    if (!loop->acting) {
        mark(src, MCP_LOOP_XFER);
    }
    else if (!src->on_deferred) {
        src->on_deferred = 1;
        src->dnext = loop->deferred;
        loop->deferred = src;
    }
}

static void bury(mcp_loop_src_t *src);

/* Mutex held: a held source starts its life in the loop. */
static void let_go(mcp_loop_src_t *src)
{
    mcp_loop_t *loop = src->loop;

    src->go_at = 0;
    schedule(src);
    if (src->released) {
        bury(src);
    }
    else if (src->pending || loop->stopping) {
        src->pending |= loop->stopping ? MCP_LOOP_STOPPING : 0;
        enqueue(src);
    }
    else {
        src->state = SRC_IDLE;
    }
}

/* Mutex held. */
static void command(mcp_loop_t *loop, cmd_kind_t kind, xfer_t *xfer)
{
    cmd_t *c = calloc(1, sizeof(*c));

    if (!c) {
        return;   /* out of memory: the transfer is then finished when the loop stops */
    }
    c->kind = kind;
    c->xfer = xfer;
    xfer->queued++;
    if (loop->cmds_tail) {
        loop->cmds_tail->next = c;
    }
    else {
        loop->cmds = c;
    }
    loop->cmds_tail = c;
    poke(loop);
}

/* Mutex held: the source goes to the graveyard (freed by the loop thread between batches: at
 * its next wake-up, within MCP_LOOP_TICK; nothing waits for that, so it is not woken for it). */
static void bury(mcp_loop_src_t *src)
{
    mcp_loop_t *loop = src->loop;

    src->state = SRC_DEAD;
    mcp_heap_remove(&loop->timers, &src->due);
    if (src->prev) {
        src->prev->next = src->next;
    }
    else {
        loop->sources = src->next;
    }
    if (src->next) {
        src->next->prev = src->prev;
    }
    loop->nsources--;
    src->qnext = loop->graveyard;
    loop->graveyard = src;
}

/* ---- transfers (loop thread, except where it says otherwise) ---------------------------- */

/* A transfer's pool (the loop thread allocates in it: headers, while the source's owner
 * allocates in its own pools), or a detached exchange's: see mcp_loop.h. */
apr_pool_t *mcp_loop_pool_take(mcp_loop_t *loop)
{
    apr_allocator_t *alloc = NULL;
    apr_pool_t *p = NULL;

    apr_thread_mutex_lock(loop->mutex);
    if (loop->nspare > 0) {
        p = loop->spare[--loop->nspare];
    }
    apr_thread_mutex_unlock(loop->mutex);
    if (p) {
        return p;
    }
    if (apr_allocator_create(&alloc) != APR_SUCCESS
        || apr_pool_create_ex(&p, NULL, NULL, alloc) != APR_SUCCESS) {
        if (alloc) {
            apr_allocator_destroy(alloc);
        }
        return NULL;
    }
    apr_allocator_owner_set(alloc, p);
    apr_allocator_max_free_set(alloc, SPARE_KEEP);
    return p;
}

void mcp_loop_pool_give(mcp_loop_t *loop, apr_pool_t *p)
{
    apr_pool_clear(p);
    apr_thread_mutex_lock(loop->mutex);
    if (loop->nspare < SPARE_POOLS && !loop->exiting) {
        loop->spare[loop->nspare++] = p;
        p = NULL;
    }
    apr_thread_mutex_unlock(loop->mutex);
    if (p) {
        apr_pool_destroy(p);
    }
}

/* The transfer's easy handle goes back to the process's cache (for blocking exchanges too), its
 * options as the cache keeps them; once only: from then on another transfer, on any thread,
 * may have it, so x->curl is forgotten. */
static mcp_backend_status_t give_handle_back(xfer_t *x, CURLcode rc, const char **err)
{
    if (!x->curl) {
        *err = NULL;
        return MCP_BACKEND_FAILED;
    }
    curl_easy_setopt(x->curl, CURLOPT_PRIVATE, NULL);
    curl_easy_setopt(x->curl, CURLOPT_BUFFERSIZE, (long)CURL_MAX_WRITE_SIZE);
    x->curl = NULL;
    return mcp_backend_async_finish(x->a, (int)rc, err);
}

/* Loop thread (or before it runs): a transfer went into or out of the multi handle (delta). */
static void count_transfers(mcp_loop_t *loop, int delta)
{
    loop->ntransfers += delta;
    curl_multi_setopt(loop->multi, CURLMOPT_MAXCONNECTS,
                      (long)(loop->ntransfers + IDLE_CONNECTIONS));
}

/* On the loop thread; or on any thread once the transfer is done (out of the multi handle, its
 * handle given back) and no command names it (xfer_let_go), the loop then holding no
 * pointer to it. */
static void xfer_free(mcp_loop_t *loop, xfer_t *x)
{
    const char *err;

    if (x->in_multi) {
        curl_multi_remove_handle(loop->multi, x->curl);
        x->in_multi = 0;
        count_transfers(loop, -1);
    }
    give_handle_back(x, CURLE_ABORTED_BY_CALLBACK, &err);
    free(x->buf);
    mcp_loop_pool_give(loop, x->pool);
}

/* curl's write callback's baton: the body's bytes go to the buffer; past the bound, curl waits. */
static int xfer_on_body(void *baton, const char *buf, apr_size_t len)
{
    xfer_t *x = baton;
    mcp_loop_t *loop = x->loop;
    int rv = 0;

    apr_thread_mutex_lock(loop->mutex);
    if (!x->src) {
        rv = 1;   /* the source let go: the transfer is being cut */
    }
    else if (x->len > 0 && x->len + len > x->max) {
        x->paused = 1;
        rv = MCP_BACKEND_BODY_PAUSE;
    }
    else {
        if (x->len + len > x->cap) {
            apr_size_t cap = x->cap ? x->cap : 4096;
            char *b;
            while (cap < x->len + len) {
                cap *= 2;
            }
            b = realloc(x->buf, cap);
            if (!b) {
                apr_thread_mutex_unlock(loop->mutex);
                return 1;
            }
            x->buf = b;
            x->cap = cap;
        }
        memcpy(x->buf + x->len, buf, len);
        x->len += len;
        if (x->src) {
            mark_xfer(x->src);
        }
    }
    apr_thread_mutex_unlock(loop->mutex);
    return rv;
}

static int xfer_on_headers(void *baton, const mcp_backend_response_t *response)
{
    xfer_t *x = baton;
    mcp_loop_t *loop = x->loop;
    int rv = 1;   /* the source let go: the transfer is being cut */

    (void)response;   /* the async transfer's own, read by the source once it takes them */
    apr_thread_mutex_lock(loop->mutex);
    x->headers = 1;
    if (x->src) {
        mark_xfer(x->src);
        rv = 0;
    }
    apr_thread_mutex_unlock(loop->mutex);
    return rv;
}

/* The transfer ended (curl said so, or the loop cut it). */
static void xfer_done(mcp_loop_t *loop, xfer_t *x, CURLcode rc, int cut)
{
    const char *err = NULL;
    mcp_backend_status_t status;

    if (!x->in_multi) {
        return;
    }
    curl_multi_remove_handle(loop->multi, x->curl);
    x->in_multi = 0;
    count_transfers(loop, -1);
    status = give_handle_back(x, rc, &err);
    apr_thread_mutex_lock(loop->mutex);
    x->done = 1;
    x->status = cut ? MCP_BACKEND_ABORTED : status;
    x->err = cut ? "stopped by the gateway" : err;
    if (x->src) {
        mark_xfer(x->src);
    }
    apr_thread_mutex_unlock(loop->mutex);
}

static void run_commands(mcp_loop_t *loop)
{
    cmd_t *c, *next;

    apr_thread_mutex_lock(loop->mutex);
    c = loop->cmds;
    loop->cmds = loop->cmds_tail = NULL;
    apr_thread_mutex_unlock(loop->mutex);
    for (; c; c = next) {
        xfer_t *x = c->xfer;
        next = c->next;
        switch (c->kind) {
        case CMD_ADD:
            if (!x->done && curl_multi_add_handle(loop->multi, x->curl) == CURLM_OK) {
                x->in_multi = 1;
                count_transfers(loop, +1);
            }
            else {
                apr_thread_mutex_lock(loop->mutex);
                x->done = 1;
                x->status = MCP_BACKEND_FAILED;
                x->err = "the transfer could not be started";
                if (x->src) {
                    mark(x->src, MCP_LOOP_XFER);
                }
                apr_thread_mutex_unlock(loop->mutex);
            }
            break;
        case CMD_RESUME:
            if (x->in_multi && x->curl) {
                curl_easy_pause(x->curl, CURLPAUSE_CONT);
            }
            break;
        case CMD_CUT:
            xfer_done(loop, x, CURLE_ABORTED_BY_CALLBACK, 1);
            break;
        case CMD_FREE:
            xfer_free(loop, x);
            x = NULL;
            break;
        }
        if (x) {
            apr_thread_mutex_lock(loop->mutex);
            x->queued--;
            apr_thread_mutex_unlock(loop->mutex);
        }
        free(c);
    }
}

/* ---- curl's side of the multi handle ------------------------------------------------------ */

/* curl's sockets are watched through one tag per descriptor number, kept for the loop's life:
 * curl may close a socket and open another with the same number before or after it says so,
 * and the kernel drops a closed descriptor from the epoll set by itself, so the set's state is
 * never trusted: a MOD that finds nothing ADDs, an ADD that finds one MODs. */
static tag_t *curl_tag(mcp_loop_t *loop, curl_socket_t s)
{
    if ((apr_size_t)s >= loop->ncurl_tags) {
        apr_size_t n = loop->ncurl_tags ? loop->ncurl_tags : 256;
        tag_t **t;
        while (n <= (apr_size_t)s) {
            n *= 2;
        }
        t = realloc(loop->curl_tags, n * sizeof(*t));
        if (!t) {
            return NULL;
        }
        memset(t + loop->ncurl_tags, 0, (n - loop->ncurl_tags) * sizeof(*t));
        loop->curl_tags = t;
        loop->ncurl_tags = n;
    }
    if (!loop->curl_tags[s]) {
        loop->curl_tags[s] = calloc(1, sizeof(tag_t));
        if (!loop->curl_tags[s]) {
            return NULL;
        }
        loop->curl_tags[s]->kind = TAG_CURL;
        loop->curl_tags[s]->fd = s;
    }
    return loop->curl_tags[s];
}

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    mcp_loop_t *loop = userp;
    tag_t *tag;
    struct epoll_event ev;

    (void)easy;
    (void)socketp;
    if (s < 0 || !(tag = curl_tag(loop, s))) {
        return -1;
    }
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, s, NULL);
        tag->dead = 1;   /* its events of this batch, if any, are stale */
        return 0;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    ev.data.ptr = tag;
    tag->dead = 0;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, s, &ev) == 0
        || (errno == ENOENT && epoll_ctl(loop->epfd, EPOLL_CTL_ADD, s, &ev) == 0)) {
        return 0;
    }
    return -1;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    mcp_loop_t *loop = userp;

    (void)multi;
    loop->curl_at = timeout_ms < 0 ? 0 : apr_time_now() + apr_time_from_msec(timeout_ms);
    return 0;
}

static void curl_action(mcp_loop_t *loop, curl_socket_t s, int flags)
{
    int running = 0;
    CURLMsg *msg;
    int left, i, nwoken = 0;
    mcp_loop_src_t *src;
    apr_thread_cond_t *waiter, *woken[WAKE_AFTER];

    loop->acting = 1;
    curl_multi_socket_action(loop->multi, s, flags, &running);
    while ((msg = curl_multi_info_read(loop->multi, &left))) {
        if (msg->msg == CURLMSG_DONE) {
            xfer_t *x = NULL;
            CURLcode rc = msg->data.result;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            if (x) {
                xfer_done(loop, x, rc, 0);
            }
        }
    }
    /* The marks deferred meanwhile (mark_xfer); a source buried since is freed only by this
     * thread, later, and mark skips it. */
    apr_thread_mutex_lock(loop->mutex);
    loop->acting = 0;
    while ((src = loop->deferred)) {
        loop->deferred = src->dnext;
        src->on_deferred = 0;
        if ((waiter = marked(src, MCP_LOOP_XFER))) {
            if (nwoken < WAKE_AFTER) {
                woken[nwoken++] = waiter;
            }
            else {
                apr_thread_cond_signal(waiter);
            }
        }
    }
    apr_thread_mutex_unlock(loop->mutex);
    /* Once the mutex is free: signalled under it, a waiter woke only to sleep on it until this
     * thread let it go. A waiter's condition outlives its use (spare waiters are kept), so a
     * late signal can only wake a thread that finds nothing for it. */
    for (i = 0; i < nwoken; i++) {
        apr_thread_cond_signal(woken[i]);
    }
}

/* ---- the loop thread ---------------------------------------------------------------------- */

/* The stop order, and the timers due: only those (a walk over every source at each look was a
 * quarter of an idle process's CPU with 2,000 parked streams). */
static void look_at_sources(mcp_loop_t *loop, apr_time_t now)
{
    mcp_loop_src_t *src;
    mcp_heap_node_t *due;
    unsigned tell = loop->stop_check && loop->stop_check() ? TOLD_CHECK : 0;

    apr_thread_mutex_lock(loop->mutex);
    tell |= loop->stopping ? TOLD_STOP : 0;
    /* Told once by each word: a source that lives on after a graceful restart's is told again
     * when the loop itself stops. Sources added later are told as they are added. */
    if (tell & ~loop->told) {
        loop->told |= tell;
        for (src = loop->sources; src; src = src->next) {
            if ((tell & ~src->told) && src->state != SRC_DEAD) {
                src->told |= tell;
                mark(src, MCP_LOOP_STOPPING);
            }
        }
    }
    while ((due = mcp_heap_pop_due(&loop->timers, now))) {
        src = MCP_HEAP_OWNER(due, mcp_loop_src_t, due);
        if (src->state == SRC_HELD && src->go_at && now >= src->go_at) {
            let_go(src);
        }
        if (src->timer_at && now >= src->timer_at) {
            src->timer_at = 0;
            mark(src, MCP_LOOP_TIMER);
        }
        schedule(src);   /* what is not due yet of the two */
    }
    apr_thread_mutex_unlock(loop->mutex);
}

static void free_the_dead(mcp_loop_t *loop)
{
    mcp_loop_src_t *src, *next;

    apr_thread_mutex_lock(loop->mutex);
    src = loop->graveyard;
    loop->graveyard = NULL;
    apr_thread_mutex_unlock(loop->mutex);
    for (; src; src = next) {
        next = src->qnext;
        free(src);
        apr_thread_mutex_lock(loop->mutex);
        apr_thread_cond_broadcast(loop->gone);
        apr_thread_mutex_unlock(loop->mutex);
    }
}

static void *APR_THREAD_FUNC loop_main(apr_thread_t *thread, void *data)
{
    mcp_loop_t *loop = data;
    struct epoll_event evs[EVENTS_PER_WAIT];
    apr_time_t next_look = 0;

    for (;;) {
        apr_time_t now = apr_time_now(), until;
        int i, n, ms;

        free_the_dead(loop);
        apr_thread_mutex_lock(loop->mutex);
        if (loop->exiting) {
            apr_thread_mutex_unlock(loop->mutex);
            break;
        }
        apr_thread_mutex_unlock(loop->mutex);
        if (now >= next_look) {
            look_at_sources(loop, now);
            next_look = now + MCP_LOOP_TICK;
        }
        until = next_look;
        if (loop->curl_at && loop->curl_at < until) {
            until = loop->curl_at;
        }
        ms = until > now ? (int)((until - now + 999) / 1000) : 0;
        n = epoll_wait(loop->epfd, evs, EVENTS_PER_WAIT, ms);
        for (i = 0; i < n; i++) {
            tag_t *tag = evs[i].data.ptr;
            if (tag->kind == TAG_WAKE) {
                uint64_t count;
                ssize_t r = read(loop->wake.fd, &count, sizeof(count));
                (void)r;
                run_commands(loop);
            }
            else if (tag->kind == TAG_SOURCE) {
                mcp_loop_src_t *src = (mcp_loop_src_t *)tag;
                unsigned what = 0;
                if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                    what |= MCP_LOOP_HANGUP;
                }
                if (evs[i].events & EPOLLOUT) {
                    what |= MCP_LOOP_WRITABLE;
                }
                apr_thread_mutex_lock(loop->mutex);
                mark(src, what);
                apr_thread_mutex_unlock(loop->mutex);
            }
            else if (!tag->dead) {
                int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0)
                          | (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0)
                          | (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
                curl_action(loop, tag->fd, flags);
            }
        }
        if (loop->curl_at && apr_time_now() >= loop->curl_at) {
            loop->curl_at = 0;
            curl_action(loop, CURL_SOCKET_TIMEOUT, 0);
        }
    }
    apr_thread_exit(thread, APR_SUCCESS);
    return NULL;
}

/* ---- workers ------------------------------------------------------------------------------ */

static void *APR_THREAD_FUNC worker_main(apr_thread_t *thread, void *data)
{
    worker_t *w = data;
    mcp_loop_t *loop = w->loop;

    apr_thread_mutex_lock(loop->mutex);
    for (;;) {
        mcp_loop_src_t *src;
        unsigned events;

        while (!loop->runq && !loop->exiting) {
            apr_thread_cond_wait(loop->work, loop->mutex);
        }
        if (!loop->runq) {
            break;
        }
        src = loop->runq;
        loop->runq = src->qnext;
        if (!loop->runq) {
            loop->runq_tail = NULL;
        }
        src->state = SRC_RUNNING;
        events = src->pending;
        src->pending = 0;
        src->scratch = w->scratch;
        apr_thread_mutex_unlock(loop->mutex);

        src->run(src, events, src->baton);
        /* src may be released: what the run left in the scratch pool goes now, without it. */
        apr_pool_clear(w->scratch);

        apr_thread_mutex_lock(loop->mutex);
        src->scratch = NULL;
        if (src->released) {
            bury(src);
        }
        else if (src->pending) {
            enqueue(src);
        }
        else {
            src->state = SRC_IDLE;
        }
    }
    apr_thread_mutex_unlock(loop->mutex);
    apr_thread_exit(thread, APR_SUCCESS);
    return NULL;
}

/* ---- the face ----------------------------------------------------------------------------- */

static apr_status_t loop_cleanup(void *data)
{
    mcp_loop_stop(data, apr_time_from_sec(2));
    return APR_SUCCESS;
}

mcp_loop_t *mcp_loop_create(apr_pool_t *p, int workers, const char **err)
{
    mcp_loop_t *loop = apr_pcalloc(p, sizeof(*loop));
    struct epoll_event ev;
    int i;

    *err = NULL;
    if (workers < 1 || workers > MAX_WORKERS) {
        *err = apr_psprintf(p, "workers must be 1..%d", MAX_WORKERS);
        return NULL;
    }
    loop->pool = p;
    loop->epfd = -1;
    loop->wake.fd = -1;
    loop->wake.kind = TAG_WAKE;
    if (apr_thread_mutex_create(&loop->mutex, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS
        || apr_thread_cond_create(&loop->work, p) != APR_SUCCESS
        || apr_thread_cond_create(&loop->gone, p) != APR_SUCCESS
        || apr_pool_create(&loop->waiter_pool, p) != APR_SUCCESS) {
        *err = "no mutex or condition variable";
        return NULL;
    }
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->epfd < 0 || loop->wake.fd < 0) {
        *err = apr_psprintf(p, "epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.ptr = &loop->wake;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wake.fd, &ev) != 0) {
        *err = apr_psprintf(p, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    loop->multi = curl_multi_init();
    if (!loop->multi) {
        *err = "curl_multi_init failed";
        goto fail;
    }
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETDATA, loop);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERDATA, loop);
    count_transfers(loop, 0);   /* the connection cache's bound, before the loop thread runs */
    if (apr_thread_create(&loop->thread, NULL, loop_main, loop, p) != APR_SUCCESS) {
        *err = "cannot start the loop thread";
        goto fail;
    }
    for (i = 0; i < workers; i++) {
        worker_t *w = &loop->workers[i];
        apr_allocator_t *alloc = NULL;

        w->loop = loop;
        if (apr_allocator_create(&alloc) != APR_SUCCESS
            || apr_pool_create_ex(&w->scratch, NULL, NULL, alloc) != APR_SUCCESS) {
            if (alloc) {
                apr_allocator_destroy(alloc);
            }
            *err = "out of memory";
            break;
        }
        apr_allocator_owner_set(alloc, w->scratch);
        apr_allocator_max_free_set(alloc, SCRATCH_KEEP);
        if (apr_thread_create(&w->thread, NULL, worker_main, w, p) != APR_SUCCESS) {
            apr_pool_destroy(w->scratch);
            w->scratch = NULL;
            *err = "cannot start a worker thread";
            break;
        }
        loop->nworkers++;
    }
    apr_pool_cleanup_register(p, loop, loop_cleanup, apr_pool_cleanup_null);
    if (*err) {
        mcp_loop_stop(loop, 0);
        return NULL;
    }
    return loop;

fail:
    if (loop->multi) {
        curl_multi_cleanup(loop->multi);
    }
    if (loop->epfd >= 0) {
        close(loop->epfd);
    }
    if (loop->wake.fd >= 0) {
        close(loop->wake.fd);
    }
    return NULL;
}

void mcp_loop_stop(mcp_loop_t *loop, apr_interval_time_t grace)
{
    apr_time_t deadline = apr_time_now() + grace;
    apr_status_t rv;
    mcp_loop_src_t *src;
    int i;

    if (!loop || loop->epfd < 0) {
        return;
    }
    apr_thread_mutex_lock(loop->mutex);
    loop->stopping = 1;
    poke(loop);
    for (src = loop->sources; src; src = src->next) {
        if (src->waiter) {
            apr_thread_cond_signal(src->waiter->cond);
        }
    }
    while (loop->nsources > 0 && apr_time_now() < deadline) {
        apr_thread_cond_timedwait(loop->gone, loop->mutex, apr_time_from_msec(20));
    }
    loop->exiting = 1;
    apr_thread_cond_broadcast(loop->work);
    poke(loop);
    apr_thread_mutex_unlock(loop->mutex);
    for (i = 0; i < loop->nworkers; i++) {
        apr_thread_join(&rv, loop->workers[i].thread);
    }
    if (loop->thread) {
        apr_thread_join(&rv, loop->thread);
    }
    /* Whatever is left is abandoned. */
    run_commands(loop);
    free_the_dead(loop);
    while ((src = loop->sources)) {
        loop->sources = src->next;
        for (i = 0; i < MCP_LOOP_SLOTS; i++) {
            if (src->xfer[i]) {
                src->xfer[i]->src = NULL;
                xfer_free(loop, src->xfer[i]);
            }
        }
        free(src);
    }
    mcp_heap_free(&loop->timers);
    curl_multi_cleanup(loop->multi);
    while (loop->nspare > 0) {
        apr_pool_destroy(loop->spare[--loop->nspare]);
    }
    for (i = 0; i < loop->nworkers; i++) {
        apr_pool_destroy(loop->workers[i].scratch);
        loop->workers[i].scratch = NULL;
    }
    loop->nworkers = 0;
    for (i = 0; i < (int)loop->ncurl_tags; i++) {
        free(loop->curl_tags[i]);
    }
    free(loop->curl_tags);
    loop->curl_tags = NULL;
    loop->ncurl_tags = 0;
    close(loop->epfd);
    close(loop->wake.fd);
    loop->epfd = -1;
    apr_pool_cleanup_kill(loop->pool, loop, loop_cleanup);
}

mcp_loop_src_t *mcp_loop_src_add(mcp_loop_t *loop, mcp_loop_run_fn *run, void *baton)
{
    mcp_loop_src_t *src;

    if (!loop) {
        return NULL;
    }
    src = calloc(1, sizeof(*src));
    if (!src) {
        return NULL;
    }
    src->tag.kind = TAG_SOURCE;
    src->tag.fd = -1;
    src->loop = loop;
    src->run = run;
    src->baton = baton;
    src->state = SRC_HELD;
    apr_thread_mutex_lock(loop->mutex);
    if (loop->stopping || mcp_heap_reserve(&loop->timers, (size_t)loop->nsources + 1) != 0) {
        apr_thread_mutex_unlock(loop->mutex);
        free(src);
        return NULL;
    }
    if (loop->told) {   /* the graceful restart's word came before it */
        src->told = loop->told;
        src->pending |= MCP_LOOP_STOPPING;
    }
    src->next = loop->sources;
    if (loop->sources) {
        loop->sources->prev = src;
    }
    loop->sources = src;
    loop->nsources++;
    apr_thread_mutex_unlock(loop->mutex);
    return src;
}

void mcp_loop_src_go(mcp_loop_src_t *src, apr_time_t not_before)
{
    mcp_loop_t *loop = src->loop;

    apr_thread_mutex_lock(loop->mutex);
    if (src->state == SRC_HELD) {
        if (not_before > 0) {
            src->go_at = not_before;
            schedule(src);
        }
        else {
            let_go(src);
        }
    }
    apr_thread_mutex_unlock(loop->mutex);
}

/* Mutex held: a spare waiter, or a new one; NULL when none can be made. */
static waiter_t *waiter_get(mcp_loop_t *loop)
{
    waiter_t *w = loop->spare_waiters;

    if (w) {
        loop->spare_waiters = w->next;
        return w;
    }
    w = apr_pcalloc(loop->waiter_pool, sizeof(*w));
    return apr_thread_cond_create(&w->cond, loop->waiter_pool) == APR_SUCCESS ? w : NULL;
}

unsigned mcp_loop_src_wait(mcp_loop_src_t *src, apr_interval_time_t timeout)
{
    mcp_loop_t *loop = src->loop;
    apr_time_t deadline = apr_time_now() + timeout;
    unsigned events;

    apr_thread_mutex_lock(loop->mutex);
    while (src->state == SRC_HELD && !src->pending && !loop->stopping) {
        apr_time_t now = apr_time_now();
        if (now >= deadline) {
            break;
        }
        if (!src->waiter && !(src->waiter = waiter_get(loop))) {
            break;   /* out of memory: the caller waits again */
        }
        apr_thread_cond_timedwait(src->waiter->cond, loop->mutex, deadline - now);
    }
    if (src->waiter) {
        src->waiter->next = loop->spare_waiters;
        loop->spare_waiters = src->waiter;
        src->waiter = NULL;
    }
    events = src->pending | (loop->stopping ? MCP_LOOP_STOPPING : 0);
    src->pending = 0;
    apr_thread_mutex_unlock(loop->mutex);
    return events;
}

void mcp_loop_src_fd(mcp_loop_src_t *src, int fd, int want_write)
{
    struct epoll_event ev;

    if (fd < 0) {
        if (src->fd_added) {
            epoll_ctl(src->loop->epfd, EPOLL_CTL_DEL, src->tag.fd, NULL);
            src->fd_added = 0;
        }
        src->tag.fd = -1;
        return;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLRDHUP | EPOLLONESHOT | (want_write ? EPOLLOUT : 0);
    ev.data.ptr = &src->tag;
    if (src->fd_added && src->tag.fd == fd) {
        epoll_ctl(src->loop->epfd, EPOLL_CTL_MOD, fd, &ev);
        return;
    }
    if (src->fd_added) {
        epoll_ctl(src->loop->epfd, EPOLL_CTL_DEL, src->tag.fd, NULL);
    }
    src->tag.fd = fd;
    src->fd_added = epoll_ctl(src->loop->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

apr_pool_t *mcp_loop_src_scratch(const mcp_loop_src_t *src)
{
    return src->scratch;
}

void mcp_loop_src_timer(mcp_loop_src_t *src, apr_time_t at)
{
    apr_thread_mutex_lock(src->loop->mutex);
    src->timer_at = at;
    schedule(src);
    apr_thread_mutex_unlock(src->loop->mutex);
}

void mcp_loop_wake(mcp_loop_src_t *src)
{
    apr_thread_mutex_lock(src->loop->mutex);
    mark(src, MCP_LOOP_WOKEN);
    apr_thread_mutex_unlock(src->loop->mutex);
}

int mcp_loop_src_start_slot(mcp_loop_src_t *src, int slot, mcp_backend_pool_t *bp,
                            const mcp_backend_call_t *call, apr_size_t max_buffered, int lean,
                            const char **err)
{
    mcp_loop_t *loop = src->loop;
    mcp_backend_call_t c = *call;
    apr_pool_t *p;
    xfer_t *x;

    *err = NULL;
    if (slot < 0 || slot >= MCP_LOOP_SLOTS) {
        *err = "no such transfer slot";
        return -1;
    }
    if (src->xfer[slot]) {
        *err = "the source has a transfer in that slot already";
        return -1;
    }
    if (!(p = mcp_loop_pool_take(loop))) {
        *err = "out of memory";
        return -1;
    }
    x = apr_pcalloc(p, sizeof(*x));
    x->loop = loop;
    x->pool = p;
    x->max = max_buffered;
    x->src = src;
    c.on_headers = xfer_on_headers;
    c.on_body = xfer_on_body;
    c.on_tick = NULL;
    c.baton = x;
    x->a = mcp_backend_async_create(bp, p, &c, lean, err);
    if (!x->a) {
        mcp_loop_pool_give(loop, p);
        return -1;
    }
    x->curl = mcp_backend_async_curl(x->a);
    curl_easy_setopt(x->curl, CURLOPT_PRIVATE, (char *)x);
    curl_easy_setopt(x->curl, CURLOPT_BUFFERSIZE,
                     (long)(lean ? MCP_LOOP_LEAN_BUFFER : MCP_LOOP_BUFFER));
    apr_thread_mutex_lock(loop->mutex);
    src->xfer[slot] = x;
    if (loop->stopping) {
        x->done = 1;
        x->status = MCP_BACKEND_ABORTED;
        x->err = "the server is stopping";
        mark(src, MCP_LOOP_XFER);
    }
    command(loop, CMD_ADD, x);
    apr_thread_mutex_unlock(loop->mutex);
    return 0;
}

int mcp_loop_src_start(mcp_loop_src_t *src, mcp_backend_pool_t *bp,
                       const mcp_backend_call_t *call, apr_size_t max_buffered, int lean,
                       const char **err)
{
    return mcp_loop_src_start_slot(src, 0, bp, call, max_buffered, lean, err);
}

/* Mutex held: a transfer its source lets go of. Non-zero when the caller frees it (after
 * unlocking) instead of the loop thread: it is done and no command names it, so the loop
 * thread is not woken only for that (one wake-up less per call). */
static int xfer_let_go(mcp_loop_t *loop, xfer_t *x)
{
    x->src = NULL;
    if (x->done && x->queued == 0) {
        return 1;
    }
    command(loop, CMD_FREE, x);
    return 0;
}

int mcp_loop_src_take_slot(mcp_loop_src_t *src, int slot, apr_pool_t *p, apr_pool_t *scratch,
                           mcp_loop_news_t *news)
{
    mcp_loop_t *loop = src->loop;
    xfer_t *x;
    int any = 0, free_it = 0;

    memset(news, 0, sizeof(*news));
    if (slot < 0 || slot >= MCP_LOOP_SLOTS || !(x = src->xfer[slot])) {
        return 0;
    }
    apr_thread_mutex_lock(loop->mutex);
    if (x->headers && !x->headers_taken) {
        const mcp_backend_response_t *from = mcp_backend_async_response(x->a);
        const apr_array_header_t *arr = apr_table_elts(from->headers);
        const apr_table_entry_t *e = (const apr_table_entry_t *)arr->elts;
        int i;

        x->headers_taken = 1;
        news->headers = 1;
        news->response.status = from->status;
        news->response.content_type = from->content_type ? apr_pstrdup(p, from->content_type)
                                                         : NULL;
        news->response.session_id = from->session_id ? apr_pstrdup(p, from->session_id) : NULL;
        news->response.headers = apr_table_make(p, arr->nelts > 0 ? arr->nelts : 1);
        for (i = 0; i < arr->nelts; i++) {
            apr_table_add(news->response.headers, e[i].key, e[i].val);
        }
        any = 1;
    }
    if (x->len) {
        news->data = apr_pstrmemdup(scratch, x->buf, x->len);
        news->len = x->len;
        x->len = 0;
        /* An idle stream holds no buffer: the next bytes get a new one. */
        free(x->buf);
        x->buf = NULL;
        x->cap = 0;
        any = 1;
        if (x->paused) {
            x->paused = 0;
            command(loop, CMD_RESUME, x);
        }
    }
    if (x->done) {
        news->done = 1;
        news->status = x->status;
        news->err = x->err ? apr_pstrdup(p, x->err) : NULL;
        src->xfer[slot] = NULL;
        free_it = xfer_let_go(loop, x);
        any = 1;
    }
    apr_thread_mutex_unlock(loop->mutex);
    if (free_it) {
        xfer_free(loop, x);
    }
    return any;
}

int mcp_loop_src_take(mcp_loop_src_t *src, apr_pool_t *p, apr_pool_t *scratch,
                      mcp_loop_news_t *news)
{
    return mcp_loop_src_take_slot(src, 0, p, scratch, news);
}

void mcp_loop_src_cut_slot(mcp_loop_src_t *src, int slot)
{
    if (slot < 0 || slot >= MCP_LOOP_SLOTS) {
        return;
    }
    apr_thread_mutex_lock(src->loop->mutex);
    if (src->xfer[slot]) {
        command(src->loop, CMD_CUT, src->xfer[slot]);
    }
    apr_thread_mutex_unlock(src->loop->mutex);
}

void mcp_loop_src_cut(mcp_loop_src_t *src)
{
    mcp_loop_src_cut_slot(src, 0);
}

void mcp_loop_src_release(mcp_loop_src_t *src)
{
    mcp_loop_t *loop = src->loop;
    xfer_t *to_free[MCP_LOOP_SLOTS];
    int i, n = 0;

    mcp_loop_src_fd(src, -1, 0);
    apr_thread_mutex_lock(loop->mutex);
    src->released = 1;
    src->timer_at = 0;
    schedule(src);
    src->pending = 0;
    for (i = 0; i < MCP_LOOP_SLOTS; i++) {
        xfer_t *x = src->xfer[i];
        if (x) {
            src->xfer[i] = NULL;
            if (xfer_let_go(loop, x)) {
                to_free[n++] = x;
            }
        }
    }
    /* A held source is not run: it goes now. A running one goes when its run returns. */
    if (src->state == SRC_HELD) {
        bury(src);
    }
    apr_thread_mutex_unlock(loop->mutex);
    for (i = 0; i < n; i++) {
        xfer_free(loop, to_free[i]);
    }
}

void mcp_loop_set_stop_check(mcp_loop_t *loop, int (*stopping)(void))
{
    loop->stop_check = stopping;
}

int mcp_loop_stopping(const mcp_loop_t *loop)
{
    return !loop || loop->stopping;
}

void mcp_loop_stats(mcp_loop_t *loop, int *sources, int *transfers)
{
    int n = 0, t = 0;

    if (loop) {
        apr_thread_mutex_lock(loop->mutex);
        n = loop->nsources;
        t = loop->ntransfers;
        apr_thread_mutex_unlock(loop->mutex);
    }
    if (sources) {
        *sources = n;
    }
    if (transfers) {
        *transfers = t;
    }
}
