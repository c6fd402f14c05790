/* mod_mcp_lease — see mod_mcp_lease.h. */
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_log.h>

#include "mcp_router.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_request.h"
#include "mod_mcp_lease.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

/* How often the keeper looks for leases due (a third of the shortest lease at most). */
#define KEEPER_TICK apr_time_from_msec(100)

typedef struct keeper_t {
    server_rec         *s;
    mcp_leases_t       *leases;
    apr_thread_t       *thread;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t  *wake;
    int                 stopping;
    int                 failing;    /* the last round could not renew (logged once per run) */
} keeper_t;

/* One round: every due lease renewed in one statement (one try: the next round is soon). */
static void renew_due(keeper_t *k, apr_pool_t *p)
{
    mcp_lease_batch_t due;
    apr_array_header_t *alive = NULL, *lost;
    mcp_store_t *db;
    int i;
    apr_time_t now = apr_time_now();

    mcp_leases_due(k->leases, p, now, &due);
    if (due.ids->nelts == 0) {
        return;
    }
    db = mcp_db_server(p, k->s, 0);
    if (mcp_store_streams_renew(db, p, due.ids->nelts, (const apr_int64_t *)due.ids->elts,
                                (const char *const *)due.sessions->elts,
                                (const int *)due.secs->elts, &alive) != MCP_STORE_OK) {
        /* An outage is logged by the gate; the next round tries again (every KEEPER_TICK:
         * one line for the first failed round of an outage, not ten a second). */
        if (!k->failing) {
            ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, k->s, "leases not renewed (tried again "
                         "every round, logged again once they are renewed): %s", db->error);
        }
        k->failing = 1;
        return;
    }
    k->failing = 0;
    lost = apr_array_make(p, 4, sizeof(apr_int64_t));
    mcp_leases_renewed(k->leases, &due, alive, now, lost);
    /* Whoever relays a lost stream stops at once: a wake-up makes it look (a parked stream
     * has no thread that would look on its own). */
    for (i = 0; i < lost->nelts; i++) {
        mcp_router_notify(mcp_child.router, APR_ARRAY_IDX(lost, i, apr_int64_t));
    }
}

static void *APR_THREAD_FUNC keeper_main(apr_thread_t *thread, void *data)
{
    keeper_t *k = data;
    apr_pool_t *p;

    apr_pool_create(&p, apr_thread_pool_get(thread));
    apr_thread_mutex_lock(k->lock);
    while (!k->stopping) {
        apr_thread_cond_timedwait(k->wake, k->lock, KEEPER_TICK);
        if (k->stopping) {
            break;
        }
        apr_thread_mutex_unlock(k->lock);
        renew_due(k, p);
        mcp_status_child_tick();
        apr_pool_clear(p);
        apr_thread_mutex_lock(k->lock);
    }
    apr_thread_mutex_unlock(k->lock);
    apr_pool_destroy(p);
    apr_thread_exit(thread, APR_SUCCESS);
    return NULL;
}

static apr_status_t keeper_stop(void *data)
{
    keeper_t *k = data;
    apr_status_t rv;

    apr_thread_mutex_lock(k->lock);
    k->stopping = 1;
    apr_thread_cond_signal(k->wake);
    apr_thread_mutex_unlock(k->lock);
    apr_thread_join(&rv, k->thread);
    return APR_SUCCESS;
}

mcp_leases_t *mcp_lease_keeper_start(apr_pool_t *pchild, server_rec *s)
{
    keeper_t *k = apr_pcalloc(pchild, sizeof(*k));

    k->s = s;
    if (!(k->leases = mcp_leases_create(pchild))
        || apr_thread_mutex_create(&k->lock, APR_THREAD_MUTEX_DEFAULT, pchild) != APR_SUCCESS
        || apr_thread_cond_create(&k->wake, pchild) != APR_SUCCESS
        || apr_thread_create(&k->thread, NULL, keeper_main, k, pchild) != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "cannot start the lease keeper thread; "
                     "streams relayed longer than MCPStreamLease may be finished by others");
        return NULL;
    }
    /* Before the pool's own cleanups (the registry's mutex among them). */
    apr_pool_pre_cleanup_register(pchild, k, keeper_stop);
    return k->leases;
}
