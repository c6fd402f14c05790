/* mcp_lease — see mcp_lease.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_hash.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>

#include "mcp_heap.h"
#include "mcp_lease.h"

struct mcp_lease_t {
    mcp_heap_node_t     due;         /* when its renewal is due: armed until it is lost  */
    apr_int64_t         stream_id;
    char               *session_id;
    apr_interval_time_t lease;
};

/* The streams by when their renewal is due: a round looks at the due ones only (a walk over
 * every stream ten times a second was an eighth of an idle process's CPU with 2,000 parked
 * streams). A lost stream is no longer among them. */
struct mcp_leases_t {
    apr_thread_mutex_t *lock;
    mcp_heap_t          due;
    int                 count;
};

static apr_time_t renewal_due(const mcp_lease_t *l, apr_time_t renewed)
{
    return renewed + l->lease / 3;
}

static void collect(mcp_heap_node_t *node, void *found)
{
    APR_ARRAY_PUSH((apr_array_header_t *)found, mcp_lease_t *) =
        MCP_HEAP_OWNER(node, mcp_lease_t, due);
}

/* Lock held: the leases due at or before at, in p (linear in them). */
static apr_array_header_t *due_at(mcp_leases_t *ls, apr_pool_t *p, apr_time_t at)
{
    apr_array_header_t *found = apr_array_make(p, 8, sizeof(mcp_lease_t *));

    mcp_heap_each_due(&ls->due, at, collect, found);
    return found;
}

static apr_status_t leases_cleanup(void *data)
{
    mcp_heap_free(&((mcp_leases_t *)data)->due);
    return APR_SUCCESS;
}

mcp_leases_t *mcp_leases_create(apr_pool_t *p)
{
    mcp_leases_t *ls = apr_pcalloc(p, sizeof(*ls));

    if (apr_thread_mutex_create(&ls->lock, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS) {
        return NULL;
    }
    apr_pool_cleanup_register(p, ls, leases_cleanup, apr_pool_cleanup_null);
    return ls;
}

mcp_lease_t *mcp_leases_add(mcp_leases_t *ls, apr_int64_t stream_id, const char *session_id,
                            apr_interval_time_t lease, apr_time_t now)
{
    mcp_lease_t *l;

    if (!ls || !(l = calloc(1, sizeof(*l)))) {
        return NULL;
    }
    if (!(l->session_id = strdup(session_id ? session_id : ""))) {
        free(l);
        return NULL;
    }
    l->stream_id = stream_id;
    l->lease = lease < APR_USEC_PER_SEC ? APR_USEC_PER_SEC : lease;
    apr_thread_mutex_lock(ls->lock);
    if (mcp_heap_set(&ls->due, &l->due, renewal_due(l, now)) != 0) {
        apr_thread_mutex_unlock(ls->lock);
        free(l->session_id);
        free(l);
        return NULL;
    }
    ls->count++;
    apr_thread_mutex_unlock(ls->lock);
    return l;
}

void mcp_leases_remove(mcp_leases_t *ls, mcp_lease_t *l)
{
    if (!ls || !l) {
        return;
    }
    apr_thread_mutex_lock(ls->lock);
    mcp_heap_remove(&ls->due, &l->due);
    ls->count--;
    apr_thread_mutex_unlock(ls->lock);
    free(l->session_id);
    free(l);
}

int mcp_lease_lost(mcp_leases_t *ls, const mcp_lease_t *l)
{
    int lost;

    if (!ls || !l) {
        return 0;
    }
    apr_thread_mutex_lock(ls->lock);
    lost = !mcp_heap_armed(&l->due);
    apr_thread_mutex_unlock(ls->lock);
    return lost;
}

void mcp_leases_due(mcp_leases_t *ls, apr_pool_t *p, apr_time_t now, mcp_lease_batch_t *due)
{
    apr_array_header_t *found;
    int i;

    due->at = now;
    due->ids = apr_array_make(p, 8, sizeof(apr_int64_t));
    due->sessions = apr_array_make(p, 8, sizeof(const char *));
    due->secs = apr_array_make(p, 8, sizeof(int));
    apr_thread_mutex_lock(ls->lock);
    found = due_at(ls, p, now);
    for (i = 0; i < found->nelts; i++) {
        const mcp_lease_t *l = APR_ARRAY_IDX(found, i, mcp_lease_t *);
        apr_time_t secs = apr_time_sec(l->lease + APR_USEC_PER_SEC - 1);

        APR_ARRAY_PUSH(due->ids, apr_int64_t) = l->stream_id;
        APR_ARRAY_PUSH(due->sessions, const char *) = apr_pstrdup(p, l->session_id);
        APR_ARRAY_PUSH(due->secs, int) = secs > 0x7fffffff ? 0x7fffffff : (int)secs;
    }
    apr_thread_mutex_unlock(ls->lock);
}

/* The ids as a set (keys: the int64s themselves), in p: renewal rounds of thousands of streams
 * must cost linear time, not a scan per stream. */
static apr_hash_t *id_set(apr_pool_t *p, const apr_array_header_t *ids)
{
    apr_hash_t *set = apr_hash_make(p);
    int i;

    for (i = 0; i < ids->nelts; i++) {
        apr_hash_set(set, &APR_ARRAY_IDX(ids, i, apr_int64_t), sizeof(apr_int64_t), "");
    }
    return set;
}

void mcp_leases_renewed(mcp_leases_t *ls, const mcp_lease_batch_t *due,
                        const apr_array_header_t *alive, apr_time_t now,
                        apr_array_header_t *lost)
{
    apr_hash_t *due_set = id_set(due->ids->pool, due->ids);
    apr_hash_t *alive_set = id_set(due->ids->pool, alive);
    apr_array_header_t *found;
    int i;

    apr_thread_mutex_lock(ls->lock);
    /* The batch's streams are still among those due at its time (nothing else renews them);
     * one registered since was not due then, and one removed since is not found. */
    found = due_at(ls, due->ids->pool, due->at);
    for (i = 0; i < found->nelts; i++) {
        mcp_lease_t *l = APR_ARRAY_IDX(found, i, mcp_lease_t *);
        if (!apr_hash_get(due_set, &l->stream_id, sizeof(apr_int64_t))) {
            continue;
        }
        if (apr_hash_get(alive_set, &l->stream_id, sizeof(apr_int64_t))) {
            mcp_heap_set(&ls->due, &l->due, renewal_due(l, now));   /* armed: cannot fail */
        }
        else {
            if (lost) {   /* found due: armed, so not lost before */
                APR_ARRAY_PUSH(lost, apr_int64_t) = l->stream_id;
            }
            mcp_heap_remove(&ls->due, &l->due);
        }
    }
    apr_thread_mutex_unlock(ls->lock);
}

int mcp_leases_count(mcp_leases_t *ls)
{
    int n;

    apr_thread_mutex_lock(ls->lock);
    n = ls->count;
    apr_thread_mutex_unlock(ls->lock);
    return n;
}
