/* mcp_refresh — see mcp_refresh.h. */
#include <string.h>

#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>

#include "mcp_refresh.h"

typedef struct entry_t {
    char       key[MCP_REFRESH_KEY_MAX + 1];   /* "": a free entry                         */
    int        reading;                        /* a thread reads it now (since at)         */
    apr_time_t at;                             /* the read's start, or its end when over   */
    int        awaiting;                       /* callers asleep until a read of it ends   */
} entry_t;

struct mcp_refresh_t {
    apr_thread_mutex_t  *lock;
    apr_thread_cond_t   *ended;                /* broadcast when a read someone awaits ends */
    entry_t             *entries;
    int                  capacity;
    apr_interval_time_t  stuck_after;
};

mcp_refresh_t *mcp_refresh_create(apr_pool_t *p, int capacity, apr_interval_time_t stuck_after)
{
    mcp_refresh_t *r = apr_pcalloc(p, sizeof(*r));

    if (capacity < 1
        || apr_thread_mutex_create(&r->lock, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS
        || apr_thread_cond_create(&r->ended, p) != APR_SUCCESS) {
        return NULL;
    }
    r->entries = apr_pcalloc(p, sizeof(entry_t) * (apr_size_t)capacity);
    r->capacity = capacity;
    r->stuck_after = stuck_after;
    return r;
}

static entry_t *find(mcp_refresh_t *r, const char *key)
{
    int i;

    for (i = 0; i < r->capacity; i++) {
        if (r->entries[i].key[0] && strcmp(r->entries[i].key, key) == 0) {
            return &r->entries[i];
        }
    }
    return NULL;
}

/* A free entry, else the one whose read ended longest ago; NULL when every one is being read
 * (and not stuck) or awaited (its key must stay until its callers woke). */
static entry_t *vacant(mcp_refresh_t *r, apr_time_t now)
{
    entry_t *best = NULL;
    int i;

    for (i = 0; i < r->capacity; i++) {
        entry_t *e = &r->entries[i];

        if (!e->key[0]) {
            return e;
        }
        if ((e->reading && now - e->at < r->stuck_after) || e->awaiting) {
            continue;
        }
        if (!best || e->at < best->at) {
            best = e;
        }
    }
    return best;
}

/* What a caller that found key's copy old at found_at does now (under r->lock). */
typedef enum {
    VERDICT_READ,      /* it reads: the entry, if the table had room, is its read now    */
    VERDICT_GO_ON,     /* a read ended since found_at: the stored copy is new enough      */
    VERDICT_READING    /* another thread reads it (*e, not stuck)                         */
} verdict_t;

static verdict_t judge(mcp_refresh_t *r, const char *key, apr_time_t found_at, apr_time_t now,
                       entry_t **found)
{
    entry_t *e = *found = find(r, key);

    if (e && e->reading && now - e->at < r->stuck_after) {
        return VERDICT_READING;
    }
    if (e && !e->reading && e->at >= found_at) {
        return VERDICT_GO_ON;
    }
    if (!e && (e = vacant(r, now)) != NULL) {
        strcpy(e->key, key);
    }
    if (e) {
        e->reading = 1;
        e->at = now;
    }
    return VERDICT_READ;
}

int mcp_refresh_begin(mcp_refresh_t *r, const char *key, apr_time_t found_at, apr_time_t now)
{
    entry_t *e;
    verdict_t v;

    if (!r || strlen(key) > MCP_REFRESH_KEY_MAX) {
        return 1;
    }
    apr_thread_mutex_lock(r->lock);
    v = judge(r, key, found_at, now, &e);
    apr_thread_mutex_unlock(r->lock);
    return v == VERDICT_READ;
}

int mcp_refresh_await(mcp_refresh_t *r, const char *key, apr_time_t found_at, apr_time_t until)
{
    entry_t *e;
    apr_time_t now;
    apr_interval_time_t nap;
    verdict_t v;

    if (!r || strlen(key) > MCP_REFRESH_KEY_MAX) {
        return 1;
    }
    apr_thread_mutex_lock(r->lock);
    /* Past until, the caller reads beside the read under way; the entry stays that read's. */
    while ((v = judge(r, key, found_at, now = apr_time_now(), &e)) == VERDICT_READING
           && now < until) {
        nap = until - now;
        if (e->at + r->stuck_after - now < nap) {
            nap = e->at + r->stuck_after - now;
        }
        e->awaiting++;
        apr_thread_cond_timedwait(r->ended, r->lock, nap);
        e->awaiting--;
    }
    apr_thread_mutex_unlock(r->lock);
    return v != VERDICT_GO_ON;
}

int mcp_refresh_awaiting(mcp_refresh_t *r, const char *key)
{
    entry_t *e;
    int n = 0;

    if (!r) {
        return 0;
    }
    apr_thread_mutex_lock(r->lock);
    if ((e = find(r, key)) != NULL) {
        n = e->awaiting;
    }
    apr_thread_mutex_unlock(r->lock);
    return n;
}

void mcp_refresh_done(mcp_refresh_t *r, const char *key, apr_time_t now)
{
    entry_t *e;

    if (!r || strlen(key) > MCP_REFRESH_KEY_MAX) {
        return;
    }
    apr_thread_mutex_lock(r->lock);
    if ((e = find(r, key)) != NULL) {
        e->reading = 0;
        e->at = now;
        if (e->awaiting) {
            apr_thread_cond_broadcast(r->ended);
        }
    }
    apr_thread_mutex_unlock(r->lock);
}
