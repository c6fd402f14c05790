/* mcp_router — in-process wake-ups for stream followers. See mcp_router.h. */

#include "mcp_router.h"

#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>

#if APR_HAS_THREADS

/* One slot. While in use it sits in the chain of its stream id's hash bucket; while free it
 * sits on the free list (through next). Every field except router and cond is protected by
 * router->mutex. */
struct mcp_router_sub_t {
    mcp_router_t       *router;
    apr_thread_cond_t  *cond;       /* this slot's own, so a notify wakes only its followers */
    apr_int64_t         stream_id;
    mcp_router_sub_t   *next;
    mcp_router_sub_t   *prev;       /* bucket chain only; unlinking is then O(1) */
    int                 in_use;
    int                 pending;    /* a wake-up not yet consumed by mcp_router_wait */
    int                 waiting;    /* a follower is inside mcp_router_wait on cond */
    mcp_router_wake_fn *wake_fn;    /* set: a parked follower, woken by a call, not cond */
    void               *wake_baton;
};

struct mcp_router_t {
    apr_thread_mutex_t *mutex;
    mcp_router_sub_t   *slots;      /* capacity of them, for notify_all */
    mcp_router_sub_t  **buckets;    /* chains of in-use slots by stream id hash */
    apr_uint64_t        bucket_mask;
    mcp_router_sub_t   *free_list;
    int                 capacity;
    int                 in_use;
    apr_uint64_t        notified;
};

/* Stream ids are sequential, so a multiplicative hash (Fibonacci hashing) keeps neighbours in
 * different buckets; the high half is folded in because the mask keeps only low bits. */
static mcp_router_sub_t **bucket_of(mcp_router_t *r, apr_int64_t stream_id)
{
    apr_uint64_t h = (apr_uint64_t)stream_id * APR_UINT64_C(0x9E3779B97F4A7C15);
    h ^= h >> 32;
    return &r->buckets[h & r->bucket_mask];
}

/* Caller holds the mutex. */
static void wake(mcp_router_t *r, mcp_router_sub_t *s)
{
    s->pending = 1;
    r->notified++;
    /* Signalled under the mutex: the waiter cannot be between its check of pending and its
     * cond wait, because it holds the mutex for both. With nobody waiting the flag is enough. */
    if (s->wake_fn)
        s->wake_fn(s->wake_baton);
    else if (s->waiting)
        apr_thread_cond_signal(s->cond);
}

mcp_router_t *mcp_router_create(apr_pool_t *p, int capacity)
{
    mcp_router_t *r;
    apr_uint64_t nbuckets = 1;
    int i;

    if (!p || capacity < 1 || capacity > MCP_ROUTER_MAX_CAPACITY)
        return NULL;
    while (nbuckets < (apr_uint64_t)capacity)
        nbuckets <<= 1;

    r = apr_pcalloc(p, sizeof(*r));
    r->slots = apr_pcalloc(p, sizeof(*r->slots) * (apr_size_t)capacity);
    r->buckets = apr_pcalloc(p, sizeof(*r->buckets) * (apr_size_t)nbuckets);
    r->bucket_mask = nbuckets - 1;
    r->capacity = capacity;
    if (apr_thread_mutex_create(&r->mutex, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS)
        return NULL;
    /* Built from the end so that the free list hands out slot 0 first (easier to debug). */
    for (i = capacity - 1; i >= 0; i--) {
        mcp_router_sub_t *s = &r->slots[i];
        s->router = r;
        if (apr_thread_cond_create(&s->cond, p) != APR_SUCCESS)
            return NULL;   /* what was created is released with p */
        s->next = r->free_list;
        r->free_list = s;
    }
    return r;
}

mcp_router_sub_t *mcp_router_subscribe(mcp_router_t *r, apr_int64_t stream_id)
{
    return mcp_router_subscribe_fn(r, stream_id, NULL, NULL);
}

mcp_router_sub_t *mcp_router_subscribe_fn(mcp_router_t *r, apr_int64_t stream_id,
                                          mcp_router_wake_fn *wake_fn, void *baton)
{
    mcp_router_sub_t *s;

    if (!r)
        return NULL;
    apr_thread_mutex_lock(r->mutex);
    s = r->free_list;
    if (s) {
        mcp_router_sub_t **b = bucket_of(r, stream_id);
        r->free_list = s->next;
        s->stream_id = stream_id;
        s->in_use = 1;
        s->pending = 0;
        s->waiting = 0;
        s->wake_fn = wake_fn;
        s->wake_baton = baton;
        s->prev = NULL;
        s->next = *b;
        if (*b)
            (*b)->prev = s;
        *b = s;
        r->in_use++;
    }
    apr_thread_mutex_unlock(r->mutex);
    return s;
}

void mcp_router_unsubscribe(mcp_router_sub_t *sub)
{
    mcp_router_t *r;

    if (!sub)
        return;
    r = sub->router;
    apr_thread_mutex_lock(r->mutex);
    if (sub->in_use) {
        if (sub->prev)
            sub->prev->next = sub->next;
        else
            *bucket_of(r, sub->stream_id) = sub->next;
        if (sub->next)
            sub->next->prev = sub->prev;
        sub->in_use = 0;
        sub->pending = 0;
        sub->wake_fn = NULL;
        sub->prev = NULL;
        sub->next = r->free_list;
        r->free_list = sub;
        r->in_use--;
    }
    apr_thread_mutex_unlock(r->mutex);
}

void mcp_router_notify(mcp_router_t *r, apr_int64_t stream_id)
{
    mcp_router_sub_t *s;

    if (!r)
        return;
    apr_thread_mutex_lock(r->mutex);
    for (s = *bucket_of(r, stream_id); s; s = s->next) {
        if (s->stream_id == stream_id)
            wake(r, s);
    }
    apr_thread_mutex_unlock(r->mutex);
}

void mcp_router_notify_all(mcp_router_t *r)
{
    int i;

    if (!r)
        return;
    apr_thread_mutex_lock(r->mutex);
    for (i = 0; i < r->capacity; i++) {
        if (r->slots[i].in_use)
            wake(r, &r->slots[i]);
    }
    apr_thread_mutex_unlock(r->mutex);
}

int mcp_router_wait(mcp_router_sub_t *sub, apr_interval_time_t timeout)
{
    mcp_router_t *r;
    int woken;

    if (!sub)
        return 0;
    r = sub->router;
    apr_thread_mutex_lock(r->mutex);
    sub->waiting = 1;
    if (!sub->pending && timeout != 0) {
        apr_time_t last = apr_time_now();
        /* A deadline that would overflow is as good as none. */
        int unlimited = timeout < 0 || timeout > APR_INT64_MAX - last;
        apr_time_t deadline = unlimited ? 0 : last + timeout;

        /* Loop on pending, not on the wait's result: the condition variable may return
         * spuriously, and a signal may belong to a notify that an earlier wait consumed. */
        while (!sub->pending) {
            apr_status_t rv;
            if (unlimited) {
                rv = apr_thread_cond_wait(sub->cond, r->mutex);
            }
            else {
                apr_time_t now = apr_time_now();
                if (now >= deadline || now < last)  /* passed, or the clock stepped back */
                    break;
                last = now;
                rv = apr_thread_cond_timedwait(sub->cond, r->mutex, deadline - now);
            }
            /* Anything but success or a timeout is an error that would repeat at once;
             * give up rather than spin (the caller treats it as a timeout). */
            if (rv != APR_SUCCESS && !APR_STATUS_IS_TIMEUP(rv))
                break;
        }
    }
    sub->waiting = 0;
    woken = sub->pending;
    sub->pending = 0;
    apr_thread_mutex_unlock(r->mutex);
    return woken;
}

void mcp_router_stats(mcp_router_t *r, int *in_use, apr_uint64_t *notified)
{
    int n = 0;
    apr_uint64_t k = 0;

    if (r) {
        apr_thread_mutex_lock(r->mutex);
        n = r->in_use;
        k = r->notified;
        apr_thread_mutex_unlock(r->mutex);
    }
    if (in_use)
        *in_use = n;
    if (notified)
        *notified = k;
}

#else /* !APR_HAS_THREADS: no condition variables; callers poll. */

mcp_router_t *mcp_router_create(apr_pool_t *p, int capacity)
{
    (void)p;
    (void)capacity;
    return NULL;
}

mcp_router_sub_t *mcp_router_subscribe(mcp_router_t *r, apr_int64_t stream_id)
{
    (void)r;
    (void)stream_id;
    return NULL;
}

mcp_router_sub_t *mcp_router_subscribe_fn(mcp_router_t *r, apr_int64_t stream_id,
                                          mcp_router_wake_fn *wake_fn, void *baton)
{
    (void)r;
    (void)stream_id;
    (void)wake_fn;
    (void)baton;
    return NULL;
}

void mcp_router_unsubscribe(mcp_router_sub_t *sub)
{
    (void)sub;
}

void mcp_router_notify(mcp_router_t *r, apr_int64_t stream_id)
{
    (void)r;
    (void)stream_id;
}

void mcp_router_notify_all(mcp_router_t *r)
{
    (void)r;
}

int mcp_router_wait(mcp_router_sub_t *sub, apr_interval_time_t timeout)
{
    (void)sub;
    (void)timeout;
    return 0;
}

void mcp_router_stats(mcp_router_t *r, int *in_use, apr_uint64_t *notified)
{
    (void)r;
    if (in_use)
        *in_use = 0;
    if (notified)
        *notified = 0;
}

#endif
