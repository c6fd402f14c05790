/* mod_mcp_detach — see mod_mcp_detach.h. */
#include <string.h>

#include <apr_atomic.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>

#include "mod_mcp_dbd.h"
#include "mod_mcp_detach.h"
#include "mod_mcp_park.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* How soon a detached exchange looks again while the database is away. */
#define DB_AWAY_LOOK apr_time_from_msec(250)
/* How often a process that exits looks whether its detached exchanges are done. */
#define DRAIN_LOOK apr_time_from_msec(100)
/* A detached exchange's transfer ends by its MCPStreamTimeout; what it does after (a store, a
 * cancellation upstream) is given this much more. */
#define DRAIN_SLACK apr_time_from_sec(10)

/* Detached exchanges of this process, and the time by which every one is over. */
static apr_uint32_t live;
static apr_time_t drain_until;
static int ungraceful;         /* the MPM stops this process ungracefully */

struct mcp_detach_t {
    apr_pool_t               *pool;       /* the detached pool (its own allocator; the loop's
                                           * spare, given back at the end)                  */
    apr_pool_t               *scratch;    /* cleared per run                                 */
    mcp_req_t                 q;          /* the stand-in request                            */
    mcp_dir_conf_t            conf;
    mcp_loop_t               *loop;
    mcp_loop_src_t           *src;
    const mcp_detach_hooks_t *hooks;
    apr_time_t                next_tick;
    request_rec              *client;     /* the request, until the exchange is let go        */
};

/* ---- the stand-in request ------------------------------------------------------------------ */

static char *dup_or_null(apr_pool_t *p, const char *s)
{
    return s ? apr_pstrdup(p, s) : NULL;
}

/* A connection and a request in p that log as r does (same server, client address, log ids)
 * and reach nothing of r. */
static request_rec *stand_in(apr_pool_t *p, const request_rec *r)
{
    const conn_rec *rc = r->connection;
    conn_rec *c = apr_pcalloc(p, sizeof(*c));
    request_rec *s = apr_pcalloc(p, sizeof(*s));

    c->pool = p;
    c->base_server = rc->base_server;
    c->id = rc->id;
    c->client_ip = dup_or_null(p, rc->client_ip);
    c->local_ip = dup_or_null(p, rc->local_ip);
    /* Copied, so that the log lines of the detached exchange carry the request's ids (and the
     * log never generates ids for the stand-in: a generator may need more of a request). */
    c->log_id = apr_pstrdup(p, rc->log_id ? rc->log_id : "-");
    c->conn_config = ap_create_conn_config(p);
    c->notes = apr_table_make(p, 1);
    c->bucket_alloc = apr_bucket_alloc_create(p);
    c->keepalive = AP_CONN_CLOSE;

    s->pool = p;
    s->connection = c;
    s->server = r->server;
    s->request_time = r->request_time;
    s->method = dup_or_null(p, r->method);
    s->method_number = r->method_number;
    s->uri = dup_or_null(p, r->uri);
    s->user = dup_or_null(p, r->user);
    s->ap_auth_type = dup_or_null(p, r->ap_auth_type);
    s->useragent_ip = dup_or_null(p, r->useragent_ip);
    s->log_id = apr_pstrdup(p, r->log_id ? r->log_id : "-");
    s->headers_in = apr_table_make(p, 1);
    s->headers_out = apr_table_make(p, 1);
    s->err_headers_out = apr_table_make(p, 1);
    s->subprocess_env = apr_table_make(p, 1);
    s->notes = apr_table_make(p, 1);
    s->request_config = ap_create_request_config(p);
    /* The server's defaults: the request's own merged configuration lives in its pool. What
     * mod_mcp needs of it is copied (mcp_detach_req's conf); a per-directory LogLevel is not. */
    s->per_dir_config = r->server->lookup_defaults;
    return s;
}

/* ---- the source's life --------------------------------------------------------------------- */

static void done(mcp_detach_t *d)
{
    mcp_loop_src_release(d->src);
    d->src = NULL;
}

/* The request ended before the exchange was let go: everything goes with it. */
static apr_status_t destroy_with_request(void *data)
{
    mcp_detach_t *d = data;

    if (d->src) {
        done(d);
    }
    mcp_loop_pool_give(d->loop, d->pool);   /* d with it */
    return APR_SUCCESS;
}

/* Hands one take of news to on_news. Non-zero when the exchange is done. */
static int news(mcp_detach_t *d)
{
    mcp_loop_news_t n;

    if (!mcp_loop_src_take(d->src, d->pool, d->scratch, &n)) {
        return 0;
    }
    return d->hooks->on_news(d->hooks->baton, &n);
}

static int tick(mcp_detach_t *d, apr_time_t now)
{
    if (now < d->next_tick) {
        return 0;
    }
    d->next_tick = now + d->hooks->tick;
    return d->hooks->on_tick(d->hooks->baton);
}

/* A run on a loop worker, after mcp_detach_go. */
static void run(mcp_loop_src_t *src, unsigned events, void *baton)
{
    mcp_detach_t *d = baton;
    int finished = 0;

    (void)src;
    apr_pool_clear(d->scratch);
    /* A graceful restart's word is not for us: the process serves until we are done. */
    if ((events & MCP_LOOP_STOPPING) && mcp_loop_stopping(d->loop)) {
        d->hooks->on_stop(d->hooks->baton, "the server stops");
        finished = 1;
    }
    if (!finished && mcp_db_away()) {
        /* Its stores would wait out the outage at the gate on one of the loop's few workers,
         * which parked streams need meanwhile: what the backend sends waits in the transfer's
         * bounded buffer (the transfer is paused when it is full). */
        mcp_loop_src_timer(d->src, apr_time_now() + DB_AWAY_LOOK);
        return;
    }
    if (!finished) {
        finished = news(d);   /* whatever the events: news put off above are taken now */
    }
    if (!finished) {
        finished = tick(d, apr_time_now());
    }
    if (!finished) {
        mcp_loop_src_timer(d->src, d->next_tick);
        return;
    }
    done(d);
    mcp_status_detached(-1);
    apr_atomic_dec32(&live);
    mcp_loop_pool_give(d->loop, d->pool);   /* d with it */
}

/* ---- a process's exit ----------------------------------------------------------------------- */

static void later_drain(apr_time_t until)
{
    apr_time_t was = __atomic_load_n(&drain_until, __ATOMIC_RELAXED);

    while (until > was && !__atomic_compare_exchange_n(&drain_until, &was, until, 0,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* Before the lease keeper and the loop stop (a pre-cleanup registered after the keeper's runs
 * before it): a graceful exit waits for the detached exchanges. */
static apr_status_t drain(void *data)
{
    server_rec *s = data;
    apr_uint32_t n = apr_atomic_read32(&live);
    apr_time_t until = __atomic_load_n(&drain_until, __ATOMIC_RELAXED);

    if (n == 0 || __atomic_load_n(&ungraceful, __ATOMIC_RELAXED)) {
        return APR_SUCCESS;
    }
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "mod_mcp: this process waits for %u detached "
                 "backend exchange(s) (era-bridge calls waiting for their rounds' retries) "
                 "before it exits, for up to %" APR_TIME_T_FMT " s", n,
                 apr_time_sec(until - apr_time_now()));
    while (apr_atomic_read32(&live) > 0 && apr_time_now() < until
           && !__atomic_load_n(&ungraceful, __ATOMIC_RELAXED)) {
        apr_sleep(DRAIN_LOOK);
    }
    return APR_SUCCESS;
}

void mcp_detach_child_init(apr_pool_t *pchild, server_rec *s)
{
    apr_atomic_set32(&live, 0);
    drain_until = 0;
    ungraceful = 0;
    apr_pool_pre_cleanup_register(pchild, s, drain);
}

void mcp_detach_child_stopping(apr_pool_t *pchild, int graceful)
{
    (void)pchild;
    if (!graceful) {
        __atomic_store_n(&ungraceful, 1, __ATOMIC_RELAXED);
    }
}

/* ---- the face ------------------------------------------------------------------------------ */

mcp_detach_t *mcp_detach_create(mcp_req_t *q)
{
    mcp_loop_t *loop = mcp_park_loop();
    apr_pool_t *pool;
    mcp_detach_t *d;

    if (!loop || !q->conf->async_streams || mcp_loop_stopping(loop)
        || mcp_stream_server_stopping()) {
        return NULL;
    }
    /* Its own allocator: its owner changes threads. */
    if (!(pool = mcp_loop_pool_take(loop))) {
        return NULL;
    }
    d = apr_pcalloc(pool, sizeof(*d));
    d->pool = pool;
    d->loop = loop;
    apr_pool_create(&d->scratch, pool);
    d->conf = *q->conf;
    /* Pointers into the request's pool (defaults filled in by mcp_config_get): the client-facing
     * checks are done by the time anything runs detached. */
    d->conf.allowed_origins = NULL;
    d->conf.allowed_hosts = NULL;
    d->q.r = stand_in(pool, q->r);
    d->q.conf = &d->conf;
    d->src = mcp_loop_src_add(loop, run, d);
    if (!d->src) {
        mcp_loop_pool_give(loop, pool);
        return NULL;
    }
    d->client = q->r;
    apr_pool_cleanup_register(q->r->pool, d, destroy_with_request, apr_pool_cleanup_null);
    return d;
}

mcp_req_t *mcp_detach_req(mcp_detach_t *d)
{
    return &d->q;
}

int mcp_detach_start(mcp_detach_t *d, const mcp_backend_call_t *call,
                     const mcp_detach_hooks_t *hooks, const char **err)
{
    d->hooks = hooks;
    if (mcp_loop_src_start(d->src, mcp_child.backends, call,
                           (apr_size_t)d->conf.stream_queue_bytes, 0, err) != 0) {
        return -1;
    }
    d->next_tick = apr_time_now() + hooks->tick;
    return 0;
}

int mcp_detach_wait(mcp_detach_t *d, int (*detachable)(void *baton))
{
    for (;;) {
        apr_time_t now = apr_time_now();
        unsigned events;

        if (detachable(d->hooks->baton)) {
            return 0;
        }
        if (tick(d, now)) {
            return 1;
        }
        events = mcp_loop_src_wait(d->src, d->next_tick > now ? d->next_tick - now : 0);
        if ((events & MCP_LOOP_STOPPING) && mcp_loop_stopping(d->loop)) {
            mcp_loop_src_cut(d->src);
            return -1;
        }
        apr_pool_clear(d->scratch);
        if (news(d)) {
            return 1;
        }
    }
}

void mcp_detach_go(mcp_detach_t *d)
{
    apr_pool_cleanup_kill(d->client->pool, d, destroy_with_request);
    ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, d->client, "its backend exchange goes on in the "
                  "event loop; the request ends");
    d->client = NULL;
    mcp_status_detached(1);
    apr_atomic_inc32(&live);
    later_drain(apr_time_now() + d->conf.stream_timeout + DRAIN_SLACK);
    mcp_loop_src_timer(d->src, d->next_tick);
    mcp_loop_src_go(d->src, 0);
}
