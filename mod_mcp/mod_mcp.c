/* mod_mcp — an MCP Streamable HTTP gateway for Apache httpd 2.4.
 *
 * This file is the module record and its hooks; the handler, the configuration and the database
 * glue live in mod_mcp_*.c, the protocol logic in the pure mcp_*.c files.
 */
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_core.h>
#include <http_request.h>
#include <ap_mpm.h>
#include <util_cfgtree.h>
#include <apr_strings.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mod_watchdog.h>
#include <mpm_common.h>

#include "mcp_backend.h"
#include "mcp_id.h"
#include "mcp_listener.h"
#include "mod_mcp_authz.h"
#include "mod_mcp_oauth.h"
#include "mcp_router.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_detach.h"
#include "mod_mcp_console.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_handler.h"
#include "mod_mcp_lease.h"
#include "mod_mcp_members.h"
#include "mod_mcp_park.h"
#include "mod_mcp_request.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stdio.h"

/* Idle backend connections kept per child for reuse. */
#define MCP_BACKEND_IDLE_HANDLES 64
/* Wake-up slots for parked streams per process (more are served with a thread each). */
#define MCP_PARKED_STREAMS_MAX 20000

/* The channel the schema's triggers notify (sql/schema.sql). */
#define MCP_NOTIFY_CHANNEL "mcp_events"

static apr_status_t backend_global_cleanup(void *data)
{
    (void)data;
    mcp_backend_global_cleanup();
    return APR_SUCCESS;
}

/* ---- the sweep: streams whose owner died and that nobody follows, idle sessions ----------- */

/* Sessions idle past their MCPSessionIdleTimeout, expired by the sweep at most this many at a
 * time, and how long telling each backend may take (the sweep runs in one watchdog thread). */
#define SWEEP_SESSIONS 32
#define SWEEP_DELETE_CONNECT_MS 2000
#define SWEEP_DELETE_MS 5000

typedef struct expired_t {
    const char *id, *backend_url, *backend_session_id, *protocol_version;
} expired_t;

static void note_expired(void *baton, const char *id, const char *backend_url,
                         const char *backend_session_id, const char *protocol_version)
{
    expired_t *e = apr_array_push(baton);

    e->id = id;
    e->backend_url = backend_url;
    e->backend_session_id = backend_session_id;
    e->protocol_version = protocol_version;
}

/* Tells a backend (spec: MCPBackend or a member's Backend, as written) that its session of
 * expired session id ended (DELETE). */
static void tell_backend(server_rec *s, apr_pool_t *pool, const char *id, const char *spec,
                         const char *backend_session_id, const char *protocol_version)
{
    mcp_backend_target_t target;
    const mcp_backend_target_t *stdio = mcp_stdio_target_of(spec);
    const char *bad = NULL, *err = NULL;
    long status = 0;

    if (!stdio && (bad = mcp_backend_target_parse(pool, spec, &target))) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "sweep: session %s: %s",
                     mcp_id_tag(pool, id), bad);
        return;
    }
    /* (Without a request, no section's TLS settings: libcurl's defaults.) */
    if (mcp_backend_delete_session(mcp_child.backends, pool, stdio ? stdio : &target, NULL,
                                   backend_session_id, protocol_version,
                                   SWEEP_DELETE_CONNECT_MS, SWEEP_DELETE_MS, &status, &err)
        != MCP_BACKEND_OK) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "sweep: the backend was not told that "
                     "its session %s ended (expired): %s",
                     mcp_id_tag(pool, backend_session_id), err);
    }
}

/* A federated session's members (<MCPMember>): each open one is told. */
static void tell_members(server_rec *s, apr_pool_t *pool, mcp_store_t *db, const char *id)
{
    apr_array_header_t *members;
    const char *info, *caps;
    int i;

    if (mcp_store_members_get(db, pool, id, &members, &info, &caps) != MCP_STORE_OK) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "sweep: the members of session %s were "
                     "not told that it expired: %s", mcp_id_tag(pool, id), db->error);
        return;
    }
    for (i = 0; i < members->nelts; i++) {
        const mcp_store_member_t *m = &APR_ARRAY_IDX(members, i, mcp_store_member_t);
        if (m->open && m->backend_session_id) {
            tell_backend(s, pool, id, m->backend_url, m->backend_session_id,
                         m->protocol_version);
        }
    }
}

/* Expires idle sessions and tells their backends (DELETE), after the database is given back. */
static void sweep_sessions(server_rec *s, apr_pool_t *pool)
{
    apr_array_header_t *expired = apr_array_make(pool, SWEEP_SESSIONS, sizeof(expired_t));
    /* One try: the sweep comes again. An outage is logged by the gate, not here. */
    mcp_store_t *db = mcp_db_server(pool, s, 0);
    long n = 0;
    int i;

    if (mcp_store_sessions_expire_idle(db, pool, SWEEP_SESSIONS, note_expired, expired, &n)
        == MCP_STORE_REFUSED) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "sweep: %s", db->error);
    }
    for (i = 0; i < expired->nelts; i++) {
        expired_t *e = &APR_ARRAY_IDX(expired, i, expired_t);

        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "sweep: session %s expired "
                     "(MCPSessionIdleTimeout)", mcp_id_tag(pool, e->id));
        if (!mcp_child.backends) {
            continue;
        }
        if (strncmp(e->backend_url, MCP_MEMBERS_SPEC_PREFIX,
                    sizeof(MCP_MEMBERS_SPEC_PREFIX) - 1) == 0) {
            tell_members(s, pool, db, e->id);
        }
        else if (e->backend_session_id) {
            tell_backend(s, pool, e->id, e->backend_url, e->backend_session_id,
                         e->protocol_version);
        }
    }
}

/* ---- retention: the day partitions of mcp.events (sql/retention.sql) ----------------------- */

/* How often the sweep runs the retention job (the first sweep runs it at once). */
#define MCP_MAINTAIN_EVERY apr_time_from_sec(600)
/* Days of partitions made ahead. */
#define MCP_PARTITIONS_AHEAD 3

static void maintain(server_rec *s, apr_pool_t *pool)
{
    static apr_time_t next;   /* the sweep is one thread per host */
    apr_interval_time_t retention = mcp_config_retention(s);
    mcp_store_maintained_t done;
    mcp_store_t *db;
    mcp_store_status_t st;

    if (apr_time_now() < next) {
        return;
    }
    db = mcp_db_server(pool, s, 0);
    st = mcp_store_maintain(db, pool, retention < 0 ? -1 : (long)apr_time_sec(retention),
                            MCP_PARTITIONS_AHEAD, &done);
    if (st != MCP_STORE_UNAVAILABLE) {   /* an outage: the next sweep tries again */
        next = apr_time_now() + MCP_MAINTAIN_EVERY;
    }
    if (st == MCP_STORE_REFUSED) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "retention: %s", db->error);
    }
    else if (st == MCP_STORE_OK && (done.created || done.dropped || done.deleted)) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "retention: made %d day partition(s) ahead, "
                     "dropped %d expired one(s), deleted %" APR_INT64_T_FMT " row(s) of streams "
                     "and sessions after them", done.created, done.dropped, done.deleted);
    }
}

static apr_status_t sweep(int state, void *data, apr_pool_t *pool)
{
    server_rec *s = data;
    mcp_store_t *db;
    long finished = 0;
    mcp_store_status_t st;

    if (state != AP_WATCHDOG_STATE_RUNNING) {
        return APR_SUCCESS;
    }
    /* One try: the sweep comes again. An outage is logged by the gate, not here. */
    db = mcp_db_server(pool, s, 0);
    st = mcp_store_streams_expire(db, pool, 0, MCP_OWNER_GONE_MESSAGE, &finished);
    mcp_status_count(MCP_STAT_SWEEPS, 1);
    mcp_status_count(MCP_STAT_SWEPT, (apr_uint64_t)finished);
    if (st == MCP_STORE_REFUSED) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "sweep: %s", db->error);
    }
    else if (finished > 0) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "sweep: finished %ld stream(s) whose owner "
                     "stopped renewing its lease", finished);
    }
    sweep_sessions(s, pool);
    maintain(s, pool);
    return APR_SUCCESS;
}

/* One sweeping process per host (a singleton child watchdog); many hosts may sweep at once, as
 * finishing a stream is a conditional update that only one of them wins. */
static void register_sweep(apr_pool_t *pconf, server_rec *s)
{
    APR_OPTIONAL_FN_TYPE(ap_watchdog_get_instance) *get_instance =
        APR_RETRIEVE_OPTIONAL_FN(ap_watchdog_get_instance);
    APR_OPTIONAL_FN_TYPE(ap_watchdog_register_callback) *register_callback =
        APR_RETRIEVE_OPTIONAL_FN(ap_watchdog_register_callback);
    apr_interval_time_t interval = mcp_config_sweep_interval(s);
    ap_watchdog_t *wd;

    if (interval <= 0) {
        return;
    }
    if (!get_instance || !register_callback) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "mod_watchdog is not available: streams "
                     "whose owner died are finished only when a client resumes them");
        return;
    }
    if (get_instance(&wd, "mcp-sweep", 0, 1, pconf) != APR_SUCCESS
        || register_callback(wd, interval, s, sweep) != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "cannot register the stream sweep");
    }
}

/* ---- the listener: wake-ups from other processes and hosts ------------------------------- */

/* The listener's connection parameters, cloned once per child from a mod_dbd connection (so
 * DBDParams stays the one place to configure the database), then reused: borrowing a pooled
 * connection can block, and the listener must stay prompt to stop. */
typedef struct listener_conf_t {
    server_rec         *s;
    apr_pool_t         *pool;      /* pchild */
    const char *const  *keywords;  /* NULL until the first successful clone */
    const char *const  *values;
} listener_conf_t;

static const char *const *copy_strings(apr_pool_t *p, const char *const *in, int n)
{
    const char **out = apr_pcalloc(p, sizeof(char *) * (n + 1));
    int i;

    for (i = 0; i < n; i++) {
        out[i] = apr_pstrdup(p, in[i]);
    }
    return out;
}

static int listener_params(void *baton, apr_pool_t *p, const char *const **keywords,
                           const char *const **values)
{
    listener_conf_t *lc = baton;

    if (!lc->keywords) {
        const char *const *k, *const *v;
        int n;

        if (mcp_db_conn_params(p, lc->s, &k, &v) != 0) {
            return -1;
        }
        for (n = 0; k[n]; n++) {
        }
        lc->values = copy_strings(lc->pool, v, n);
        lc->keywords = copy_strings(lc->pool, k, n);
    }
    *keywords = lc->keywords;
    *values = lc->values;
    return 0;
}

static void listener_log(void *baton, int level, const char *msg)
{
    static const int levels[] = { APLOG_DEBUG, APLOG_INFO, APLOG_WARNING, APLOG_ERR };

    ap_log_error(APLOG_MARK, levels[level < 0 ? 0 : level > 3 ? 3 : level], 0,
                 ((listener_conf_t *)baton)->s, "listener: %s", msg);
}

/* ---- how many threads can run a request ------------------------------------------------- */

/* Threads per child that can run a request, and so hold a follower at once: set in post_config
 * (in the parent, before the children are forked). */
static int request_threads = 1;

/* The largest value given to a directive anywhere in the configuration tree (inside sections
 * too: a section that does not apply only makes the answer larger), or 0. */
static int directive_max(const ap_directive_t *d, const char *name)
{
    int best = 0, n;

    for (; d; d = d->next) {
        if (d->directive && !ap_cstr_casecmp(d->directive, name) && d->args) {
            n = atoi(d->args);
            best = n > best ? n : best;
        }
        n = directive_max(d->first_child, name);
        best = n > best ? n : best;
    }
    return best;
}

/* The MPM's threads per child, plus mod_http2's workers when it is loaded: HTTP/2 streams run on
 * those, not on MPM threads. mod_http2 keeps its settings to itself, so they are read from the
 * configuration as it does: H2MaxWorkers, by default max(4, 3/2 H2MinWorkers), H2MinWorkers
 * defaulting to the MPM's threads per child. */
static int count_request_threads(server_rec *s)
{
    int mpm_threads = 0, h2_workers = 0, h2_min;

    ap_mpm_query(AP_MPMQ_MAX_THREADS, &mpm_threads);
    mpm_threads = mpm_threads > 0 && mpm_threads < MCP_ROUTER_MAX_CAPACITY ? mpm_threads : 1;
    if (ap_find_linked_module("mod_http2.c")) {
        h2_workers = directive_max(ap_conftree, "H2MaxWorkers");
        if (h2_workers <= 0) {
            h2_min = directive_max(ap_conftree, "H2MinWorkers");
            h2_min = h2_min > 0 ? h2_min : mpm_threads;
            h2_workers = 3 * h2_min / 2 > 4 ? 3 * h2_min / 2 : 4;
        }
    }
    if (h2_workers > MCP_ROUTER_MAX_CAPACITY - mpm_threads) {
        h2_workers = MCP_ROUTER_MAX_CAPACITY - mpm_threads;
    }
    ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, "stream followers: room for %d per process "
                 "(%d MPM threads, %d mod_http2 workers)", mpm_threads + h2_workers, mpm_threads,
                 h2_workers);
    return mpm_threads + h2_workers;
}

/* ---- hooks -------------------------------------------------------------------------------- */

static int mcp_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp, server_rec *s)
{
    (void)plog;
    (void)ptemp;
    /* The first pass only checks the configuration. */
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        return OK;
    }
    /* libcurl's global set-up is not thread-safe: once, in the parent, before any child. */
    if (mcp_backend_global_init() != 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "libcurl could not be initialised");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    apr_pool_cleanup_register(pconf, NULL, backend_global_cleanup, apr_pool_cleanup_null);
    if (!mcp_dbd_init(s)) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s,
                     "mod_dbd is not loaded: every MCP request will fail until it is "
                     "(LoadModule dbd_module, DBDriver pgsql, DBDParams ...)");
    }
    register_sweep(pconf, s);
    mcp_status_post_config(s);
    request_threads = count_request_threads(s);
    return OK;
}

/* The era bridge's pooled sessions whose tool list reads and marks seen a process remembers, and
 * its pools whose session starts it remembers (each read again, marked or started by one
 * request at a time: mcp_refresh), and how long one may hold the others back (a backend that
 * takes longer has its list read by the next request to find it old as well). */
#define POOLED_KNOWN         64
#define POOLED_REFRESH_STUCK apr_time_from_sec(60)

static void mcp_child_init(apr_pool_t *pchild, server_rec *s)
{
    char host[APRMAXHOSTLEN + 1];
    listener_conf_t *listener;

    mcp_child.backends = mcp_backend_pool_create(pchild, MCP_BACKEND_IDLE_HANDLES);
    /* A follower of a stream holds the thread that runs its request, or is parked (two slots:
     * the parked stream's and its backend half's). */
    mcp_child.router = mcp_router_create(pchild, request_threads + 2 * MCP_PARKED_STREAMS_MAX);
    if (apr_gethostname(host, sizeof(host), pchild) != APR_SUCCESS) {
        apr_cpystrn(host, "localhost", sizeof(host));
    }
    mcp_child.owner = apr_psprintf(pchild, "%s:%" APR_PID_T_FMT, host, getpid());
    mcp_dbd_child_init(pchild, s);
    mcp_status_child_init(pchild, s);
    mcp_child.leases = mcp_lease_keeper_start(pchild, s);
    mcp_child.tool_lists = mcp_refresh_create(pchild, POOLED_KNOWN, POOLED_REFRESH_STUCK);
    mcp_child.pooled_marks = mcp_refresh_create(pchild, POOLED_KNOWN, POOLED_REFRESH_STUCK);
    mcp_child.pool_starts = mcp_refresh_create(pchild, POOLED_KNOWN, POOLED_REFRESH_STUCK);
    mcp_park_child_init(pchild, s);
    mcp_detach_child_init(pchild, s);
    mcp_exchange_child_init(pchild);
    listener = apr_pcalloc(pchild, sizeof(*listener));
    listener->s = s;
    listener->pool = pchild;
    if (mcp_child.router
        && mcp_listener_start(&mcp_child.listener, pchild, mcp_child.router, MCP_NOTIFY_CHANNEL,
                              listener_params, listener_log, listener) != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "cannot start the LISTEN thread; followers of "
                     "streams relayed elsewhere will poll the database instead");
        mcp_child.listener = NULL;
    }
    mcp_status_child_tick();
    if (!mcp_child.backends || !mcp_child.router) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                     "cannot set up mod_mcp's per-process state; MCP requests will fail");
    }
}

/* An MCP endpoint (SetHandler mcp) maps to no file: skip core's directory and file walk (a
 * stat() and an .htaccess open() per path element) as mod_proxy does for its URLs. core resets
 * the configuration to the server's before map_to_storage runs, so translate_name (which still
 * sees the <Location> sections) notes whether the request is for the mcp handler. <Location>
 * sections apply as before (core walks them again after map_to_storage); TRACE is left to core. */
static const char mcp_endpoint_note[] = "mcp-endpoint";

static int mcp_translate_name(request_rec *r)
{
    core_dir_config *d = ap_get_core_module_config(r->per_dir_config);
    const char *err = NULL, *handler;

    if (r->method_number != M_TRACE && d && d->expr_handler
        && (handler = ap_expr_str_exec(r, d->expr_handler, &err)) && !err
        && strcmp(handler, "mcp") == 0) {
        apr_table_setn(r->notes, mcp_endpoint_note, "1");
    }
    return DECLINED;
}

static int mcp_map_to_storage(request_rec *r)
{
    return apr_table_get(r->notes, mcp_endpoint_note) ? OK : DECLINED;
}

static void mcp_suspend_connection(conn_rec *c, request_rec *r)
{
    (void)r;
    mcp_park_suspended(c);
}

static void mcp_register_hooks(apr_pool_t *p)
{
    ap_hook_translate_name(mcp_translate_name, NULL, NULL, APR_HOOK_FIRST);
    ap_hook_map_to_storage(mcp_map_to_storage, NULL, NULL, APR_HOOK_FIRST);
    ap_hook_post_config(mcp_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(mcp_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_stopping(mcp_detach_child_stopping, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_handler(mcp_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_suspend_connection(mcp_suspend_connection, NULL, NULL, APR_HOOK_MIDDLE);
    mcp_status_register_hooks();
    mcp_console_register_hooks();
    mcp_authz_register_hooks(p);
    mcp_oauth_register_hooks();
    mcp_stdio_register_hooks();
}

AP_DECLARE_MODULE(mcp) = {
    STANDARD20_MODULE_STUFF,
    mcp_config_create_dir,
    mcp_config_merge_dir,
    mcp_config_create_server,
    mcp_config_merge_server,
    mcp_config_cmds,
    mcp_register_hooks,
    AP_MODULE_FLAG_NONE
};
