/* mcp_lease — see mcp_lease.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_hash.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>

#include "mcp_lease.h"

struct mcp_lease_t {
    mcp_lease_t        *prev, *next;
    apr_int64_t         stream_id;
    char               *session_id;
    apr_interval_time_t lease;
    apr_time_t          renewed;     /* last renewal (or registration)               */
    int                 lost;
};

struct mcp_leases_t {
    apr_thread_mutex_t *lock;
    mcp_lease_t        *head;
    int                 count;
};

mcp_leases_t *mcp_leases_create(apr_pool_t *p)
{
    mcp_leases_t *ls = apr_pcalloc(p, sizeof(*ls));

    if (apr_thread_mutex_create(&ls->lock, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS) {
        return NULL;
    }
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
    l->renewed = now;
    apr_thread_mutex_lock(ls->lock);
    l->next = ls->head;
    if (ls->head) {
        ls->head->prev = l;
    }
    ls->head = l;
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
    if (l->prev) {
        l->prev->next = l->next;
    }
    else {
        ls->head = l->next;
    }
    if (l->next) {
        l->next->prev = l->prev;
    }
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
    lost = l->lost;
    apr_thread_mutex_unlock(ls->lock);
    return lost;
}

void mcp_leases_due(mcp_leases_t *ls, apr_pool_t *p, apr_time_t now, mcp_lease_batch_t *due)
{
    mcp_lease_t *l;

    due->ids = apr_array_make(p, 8, sizeof(apr_int64_t));
    due->sessions = apr_array_make(p, 8, sizeof(const char *));
    due->secs = apr_array_make(p, 8, sizeof(int));
    apr_thread_mutex_lock(ls->lock);
    for (l = ls->head; l; l = l->next) {
        if (!l->lost && now - l->renewed >= l->lease / 3) {
            apr_time_t secs = apr_time_sec(l->lease + APR_USEC_PER_SEC - 1);
            APR_ARRAY_PUSH(due->ids, apr_int64_t) = l->stream_id;
            APR_ARRAY_PUSH(due->sessions, const char *) = apr_pstrdup(p, l->session_id);
            APR_ARRAY_PUSH(due->secs, int) = secs > 0x7fffffff ? 0x7fffffff : (int)secs;
        }
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
    mcp_lease_t *l;

    apr_thread_mutex_lock(ls->lock);
    for (l = ls->head; l; l = l->next) {
        if (!apr_hash_get(due_set, &l->stream_id, sizeof(apr_int64_t))) {
            continue;
        }
        if (apr_hash_get(alive_set, &l->stream_id, sizeof(apr_int64_t))) {
            l->renewed = now;
        }
        else {
            if (!l->lost && lost) {
                APR_ARRAY_PUSH(lost, apr_int64_t) = l->stream_id;
            }
            l->lost = 1;
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
