/* mod_mcp_status — see mod_mcp_status.h. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <apr_shm.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <ap_mpm.h>
#include <mod_status.h>
#include <json-c/json.h>

#include "mcp_metrics.h"
#include "mcp_store.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_request.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

#define SHM_KEY "mod_mcp_status_shm"
#define FIRST_STATUS 400
#define STATUSES 200          /* 400 ... 599 */

/* What only one child knows. pid 0: a free slot. */
typedef struct child_slot_t {
    pid_t        pid;
    int          listener;        /* 1 connected, 0 not, -1 none (no LISTEN thread)          */
    apr_time_t   last_wakeup;     /* last notification routed (0: none yet)                 */
    apr_uint64_t wakeups;         /* notifications routed                                   */
    apr_uint64_t db_in_use;       /* connections borrowed right now (a signed count)        */
    apr_uint64_t parked;          /* streams parked in its event loop (a signed count)      */
    apr_uint64_t detached;        /* backend exchanges going on after their request (signed) */
} child_slot_t;

typedef struct shared_t {
    apr_time_t         started;
    apr_uint64_t       counters[MCP_STAT_COUNTERS];
    apr_uint64_t       rejected[STATUSES];
    mcp_metrics_hist_t hists[MCP_HIST_COUNT];
    int                nslots;
    child_slot_t       slots[1];  /* nslots of them */
} shared_t;

static shared_t *shared;
static child_slot_t *my_slot;

static const struct {
    const char *metric, *key, *help;
} counters[MCP_STAT_COUNTERS] = {
    [MCP_STAT_REQUESTS] = { "mcp_requests_total", "MCPRequests", "HTTP requests to an mcp handler." },
    [MCP_STAT_CALLS] = { "mcp_calls_total", "MCPCalls", "JSON-RPC requests relayed to a backend." },
    [MCP_STAT_SESSIONS] = { "mcp_sessions_started_total", "MCPSessionsStarted", "Sessions started." },
    [MCP_STAT_EVENTS] = { "mcp_events_stored_total", "MCPEventsStored", "Messages stored on streams." },
    [MCP_STAT_BYTES] = { "mcp_stored_bytes_total", "MCPBytesStored",
                         "Bytes of the messages stored on streams." },
    [MCP_STAT_RESUMPTIONS] = { "mcp_resumptions_total", "MCPResumptions",
                               "Streams resumed with Last-Event-ID." },
    [MCP_STAT_TAKEOVERS] = { "mcp_lease_takeovers_total", "MCPLeaseTakeovers",
                             "Streams finished by a follower after their owner stopped renewing "
                             "its lease." },
    [MCP_STAT_SWEEPS] = { "mcp_sweeps_total", "MCPSweeps", "Rounds of the stream sweep." },
    [MCP_STAT_SWEPT] = { "mcp_swept_streams_total", "MCPSweptStreams",
                         "Streams the sweep finished because their owner died." },
    [MCP_STAT_DENIED] = { "mcp_authz_denied_total", "MCPAuthzDenied",
                          "Calls refused by Require mcp-tool, mcp-prompt or mcp-resource." },
};

static const struct {
    const char *metric, *help;
} hists[MCP_HIST_COUNT] = {
    [MCP_HIST_BACKEND] = { "mcp_backend_latency_seconds",
                           "From sending a request to the backend to its answer's headers." },
    [MCP_HIST_STORE] = { "mcp_store_latency_seconds",
                         "One database statement, from borrowing the connection to giving it "
                         "back." },
    [MCP_HIST_FIRST_EVENT] = { "mcp_time_to_first_event_seconds",
                               "From a request's arrival to the first stored message of its "
                               "stream." },
};

/* ---- the segment and the slots -------------------------------------------------------------- */

void mcp_status_post_config(server_rec *s)
{
    apr_pool_t *pp = s->process->pool;
    apr_shm_t *shm = NULL;
    apr_size_t size;
    int limit = 0, nslots;
    void *data = NULL;

    apr_pool_userdata_get(&data, SHM_KEY, pp);
    if (data) {
        shared = data;
        return;
    }
    ap_mpm_query(AP_MPMQ_HARD_LIMIT_DAEMONS, &limit);
    /* Old children finish their requests after a graceful restart while new ones start. */
    nslots = (limit > 0 ? limit : 16) * 2;
    size = sizeof(shared_t) + sizeof(child_slot_t) * (apr_size_t)(nslots - 1);
    if (apr_shm_create(&shm, size, NULL, pp) != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "no shared memory for mod_mcp's counters; "
                     "server-status and mcp-metrics show none");
        return;
    }
    shared = apr_shm_baseaddr_get(shm);
    memset(shared, 0, size);
    shared->nslots = nslots;
    shared->started = apr_time_now();
    apr_pool_userdata_setn(shared, SHM_KEY, NULL, pp);
}

static int alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

static apr_status_t release_slot(void *data)
{
    (void)data;
    if (my_slot) {
        __atomic_store_n(&my_slot->pid, 0, __ATOMIC_RELEASE);
        my_slot = NULL;
    }
    return APR_SUCCESS;
}

void mcp_status_child_init(apr_pool_t *pchild, server_rec *s)
{
    pid_t me = getpid();
    int i;

    if (!shared) {
        return;
    }
    /* A free slot, or one a dead child left behind. */
    for (i = 0; i < shared->nslots && !my_slot; i++) {
        child_slot_t *slot = &shared->slots[i];
        pid_t was = __atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE);

        if ((was == 0 || !alive(was))
            && __atomic_compare_exchange_n(&slot->pid, &was, me, 0, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE)) {
            my_slot = slot;
            slot->listener = -1;
            slot->last_wakeup = 0;
            slot->wakeups = 0;
            slot->db_in_use = 0;
            slot->parked = 0;
            slot->detached = 0;
        }
    }
    if (!my_slot) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "no status slot free for this process; "
                     "server-status does not list it");
        return;
    }
    apr_pool_cleanup_register(pchild, NULL, release_slot, apr_pool_cleanup_null);
}

/* ---- recording ------------------------------------------------------------------------------ */

void mcp_status_count(mcp_stat_t which, apr_uint64_t n)
{
    if (shared && which < MCP_STAT_COUNTERS) {
        mcp_metrics_add(&shared->counters[which], n);
    }
}

void mcp_status_stored(const apr_array_header_t *messages, int n)
{
    apr_uint64_t bytes = 0;
    int i;

    if (!shared) {
        return;
    }
    for (i = 0; i < n && i < messages->nelts; i++) {
        bytes += strlen(APR_ARRAY_IDX(messages, i, const char *));
    }
    mcp_metrics_add(&shared->counters[MCP_STAT_EVENTS], (apr_uint64_t)n);
    mcp_metrics_add(&shared->counters[MCP_STAT_BYTES], bytes);
}

void mcp_status_rejected(int http_status)
{
    if (shared && http_status >= FIRST_STATUS && http_status < FIRST_STATUS + STATUSES) {
        mcp_metrics_add(&shared->rejected[http_status - FIRST_STATUS], 1);
    }
}

void mcp_status_observe(mcp_hist_t which, apr_time_t since)
{
    if (shared && which < MCP_HIST_COUNT && since > 0) {
        mcp_metrics_observe(&shared->hists[which], apr_time_now() - since);
    }
}

void mcp_status_db_in_use(int delta)
{
    if (my_slot) {
        mcp_metrics_add(&my_slot->db_in_use, (apr_uint64_t)(apr_int64_t)delta);
    }
}

void mcp_status_parked(int delta)
{
    if (my_slot) {
        mcp_metrics_add(&my_slot->parked, (apr_uint64_t)(apr_int64_t)delta);
    }
}

void mcp_status_detached(int delta)
{
    if (my_slot) {
        mcp_metrics_add(&my_slot->detached, (apr_uint64_t)(apr_int64_t)delta);
    }
}

void mcp_status_child_tick(void)
{
    apr_uint64_t n;

    if (!my_slot) {
        return;
    }
    __atomic_store_n(&my_slot->listener, mcp_child.listener
                     ? mcp_listener_connected(mcp_child.listener) : -1, __ATOMIC_RELAXED);
    n = mcp_listener_notifications(mcp_child.listener);
    if (n != mcp_metrics_read(&my_slot->wakeups)) {
        __atomic_store_n(&my_slot->last_wakeup, apr_time_now(), __ATOMIC_RELAXED);
        __atomic_store_n(&my_slot->wakeups, n, __ATOMIC_RELAXED);
    }
}

/* ---- reading -------------------------------------------------------------------------------- */

typedef struct view_t {
    mcp_store_totals_t totals;
    int                totals_ok;   /* the database answered */
    const char        *db_error;
    int                children, listening;
    apr_int64_t        db_in_use;
    apr_int64_t        parked;
    apr_int64_t        detached;
} view_t;

static void take_view(request_rec *r, view_t *v)
{
    mcp_store_t *db = mcp_db_request(r, 0);
    int i;

    memset(v, 0, sizeof(*v));
    v->totals_ok = mcp_store_totals(db, r->pool, &v->totals) == MCP_STORE_OK;
    v->db_error = v->totals_ok ? NULL : db->error;
    for (i = 0; i < shared->nslots; i++) {
        child_slot_t *slot = &shared->slots[i];

        if (alive(__atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE))) {
            v->children++;
            v->listening += __atomic_load_n(&slot->listener, __ATOMIC_RELAXED) == 1;
            v->db_in_use += (apr_int64_t)mcp_metrics_read(&slot->db_in_use);
            v->parked += (apr_int64_t)mcp_metrics_read(&slot->parked);
            v->detached += (apr_int64_t)mcp_metrics_read(&slot->detached);
        }
    }
}

static const char *listener_text(int state)
{
    return state == 1 ? "connected" : state == 0 ? "disconnected" : "none";
}

static const char *ago(apr_pool_t *p, apr_time_t when)
{
    return when ? apr_psprintf(p, "%.1f", (double)(apr_time_now() - when) / APR_USEC_PER_SEC)
                : "-";
}

static void status_short(request_rec *r, const view_t *v)
{
    int i;

    if (v->totals_ok) {
        ap_rprintf(r, "MCPLiveSessions: %" APR_INT64_T_FMT "\n", v->totals.live_sessions);
        ap_rprintf(r, "MCPOpenRequestStreams: %" APR_INT64_T_FMT "\n",
                   v->totals.open_request_streams);
        ap_rprintf(r, "MCPOpenStandaloneStreams: %" APR_INT64_T_FMT "\n",
                   v->totals.open_standalone_streams);
        ap_rprintf(r, "MCPFollowers: %" APR_INT64_T_FMT "\n", v->totals.followers);
    }
    ap_rprintf(r, "MCPDatabase: %s\n", v->totals_ok ? "up" : "unavailable");
    ap_rprintf(r, "MCPChildren: %d\nMCPListenersConnected: %d\n", v->children, v->listening);
    ap_rprintf(r, "MCPDatabaseConnectionsInUse: %" APR_INT64_T_FMT "\n", v->db_in_use);
    ap_rprintf(r, "MCPParkedStreams: %" APR_INT64_T_FMT "\n", v->parked);
    ap_rprintf(r, "MCPDetachedExchanges: %" APR_INT64_T_FMT "\n", v->detached);
    for (i = 0; i < MCP_STAT_COUNTERS; i++) {
        ap_rprintf(r, "%s: %" APR_UINT64_T_FMT "\n", counters[i].key,
                   mcp_metrics_read(&shared->counters[i]));
    }
    for (i = 0; i < STATUSES; i++) {
        apr_uint64_t n = mcp_metrics_read(&shared->rejected[i]);
        if (n) {
            ap_rprintf(r, "MCPRejected%d: %" APR_UINT64_T_FMT "\n", FIRST_STATUS + i, n);
        }
    }
    for (i = 0; i < shared->nslots; i++) {
        child_slot_t *slot = &shared->slots[i];
        pid_t pid = __atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE);

        if (alive(pid)) {
            ap_rprintf(r, "MCPListener%" APR_PID_T_FMT ": %s\n", pid, listener_text(slot->listener));
            ap_rprintf(r, "MCPLastWakeupAgo%" APR_PID_T_FMT ": %s\n", pid,
                       ago(r->pool, slot->last_wakeup));
            ap_rprintf(r, "MCPParkedStreams%" APR_PID_T_FMT ": %" APR_INT64_T_FMT "\n", pid,
                       (apr_int64_t)mcp_metrics_read(&slot->parked));
        }
    }
}

static void status_html(request_rec *r, const view_t *v)
{
    int i;

    ap_rputs("<hr />\n<h2>mod_mcp</h2>\n<dl>\n", r);
    if (v->totals_ok) {
        ap_rprintf(r, "<dt>Live sessions (all hosts): %" APR_INT64_T_FMT "</dt>\n"
                   "<dt>Open streams (all hosts): %" APR_INT64_T_FMT " request, %"
                   APR_INT64_T_FMT " standalone</dt>\n"
                   "<dt>Followers (all hosts): %" APR_INT64_T_FMT "</dt>\n",
                   v->totals.live_sessions, v->totals.open_request_streams,
                   v->totals.open_standalone_streams, v->totals.followers);
    }
    else {
        ap_rprintf(r, "<dt>Database: unavailable (%s)</dt>\n",
                   ap_escape_html(r->pool, v->db_error ? v->db_error : "?"));
    }
    ap_rprintf(r, "<dt>Database connections in use (this host): %" APR_INT64_T_FMT "</dt>\n",
               v->db_in_use);
    ap_rprintf(r, "<dt>Streams parked, holding no thread (this host): %" APR_INT64_T_FMT
               "</dt>\n", v->parked);
    ap_rprintf(r, "<dt>Backend exchanges going on after their request (this host): %"
               APR_INT64_T_FMT "</dt>\n", v->detached);
    for (i = 0; i < MCP_STAT_COUNTERS; i++) {
        ap_rprintf(r, "<dt>%s: %" APR_UINT64_T_FMT " <small>(%s)</small></dt>\n", counters[i].key,
                   mcp_metrics_read(&shared->counters[i]), counters[i].help);
    }
    for (i = 0; i < STATUSES; i++) {
        apr_uint64_t n = mcp_metrics_read(&shared->rejected[i]);
        if (n) {
            ap_rprintf(r, "<dt>Rejected with %d: %" APR_UINT64_T_FMT "</dt>\n", FIRST_STATUS + i,
                       n);
        }
    }
    ap_rputs("</dl>\n<table border=\"0\"><tr><th>PID</th><th>Listener</th>"
             "<th>Last wake-up (s ago)</th><th>Wake-ups</th><th>DB connections in use</th>"
             "<th>Parked streams</th></tr>\n",
             r);
    for (i = 0; i < shared->nslots; i++) {
        child_slot_t *slot = &shared->slots[i];
        pid_t pid = __atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE);

        if (alive(pid)) {
            ap_rprintf(r, "<tr><td>%" APR_PID_T_FMT "</td><td>%s</td><td>%s</td><td>%"
                       APR_UINT64_T_FMT "</td><td>%" APR_INT64_T_FMT "</td><td>%"
                       APR_INT64_T_FMT "</td></tr>\n", pid,
                       listener_text(slot->listener), ago(r->pool, slot->last_wakeup),
                       mcp_metrics_read(&slot->wakeups),
                       (apr_int64_t)mcp_metrics_read(&slot->db_in_use),
                       (apr_int64_t)mcp_metrics_read(&slot->parked));
        }
    }
    ap_rputs("</table>\n", r);
}

static int status_hook(request_rec *r, int flags)
{
    view_t v;

    if (!shared) {
        return OK;
    }
    take_view(r, &v);
    if (flags & AP_STATUS_SHORT) {
        status_short(r, &v);
    }
    else {
        status_html(r, &v);
    }
    return OK;
}

/* ---- the console's overview ----------------------------------------------------------------- */

static apr_status_t json_release(void *obj)
{
    json_object_put(obj);
    return APR_SUCCESS;
}

static json_object *child_json(apr_pool_t *p, const child_slot_t *slot, pid_t pid)
{
    json_object *c = json_object_new_object();

    json_object_object_add(c, "pid", json_object_new_int64(pid));
    json_object_object_add(c, "listener", json_object_new_string(listener_text(slot->listener)));
    json_object_object_add(c, "db_in_use",
                           json_object_new_int64((apr_int64_t)mcp_metrics_read(&slot->db_in_use)));
    json_object_object_add(c, "parked",
                           json_object_new_int64((apr_int64_t)mcp_metrics_read(&slot->parked)));
    json_object_object_add(c, "detached",
                           json_object_new_int64((apr_int64_t)mcp_metrics_read(&slot->detached)));
    json_object_object_add(c, "wakeups",
                           json_object_new_int64((apr_int64_t)mcp_metrics_read(&slot->wakeups)));
    json_object_object_add(c, "last_wakeup_ago_s", slot->last_wakeup
                           ? json_object_new_string(ago(p, slot->last_wakeup)) : NULL);
    return c;
}

json_object *mcp_status_json(apr_pool_t *p)
{
    json_object *o, *counts, *rejected, *children;
    apr_int64_t parked = 0;
    char since[APR_RFC822_DATE_LEN];
    apr_time_exp_t t;
    apr_size_t len;
    int i;

    if (!shared) {
        return NULL;
    }
    o = json_object_new_object();
    apr_pool_cleanup_register(p, o, json_release, apr_pool_cleanup_null);
    apr_time_exp_gmt(&t, shared->started);
    apr_strftime(since, &len, sizeof(since), "%Y-%m-%dT%H:%M:%S+00:00", &t);
    json_object_object_add(o, "since", json_object_new_string(since));
    counts = json_object_new_object();
    for (i = 0; i < MCP_STAT_COUNTERS; i++) {
        json_object_object_add(counts, counters[i].key, json_object_new_int64(
                                   (apr_int64_t)mcp_metrics_read(&shared->counters[i])));
    }
    json_object_object_add(o, "counters", counts);
    rejected = json_object_new_object();
    for (i = 0; i < STATUSES; i++) {
        apr_uint64_t n = mcp_metrics_read(&shared->rejected[i]);

        if (n) {
            json_object_object_add(rejected, apr_itoa(p, FIRST_STATUS + i),
                                   json_object_new_int64((apr_int64_t)n));
        }
    }
    json_object_object_add(o, "rejected", rejected);
    children = json_object_new_array();
    for (i = 0; i < shared->nslots; i++) {
        child_slot_t *slot = &shared->slots[i];
        pid_t pid = __atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE);

        if (alive(pid)) {
            parked += (apr_int64_t)mcp_metrics_read(&slot->parked);
            json_object_array_add(children, child_json(p, slot, pid));
        }
    }
    json_object_object_add(o, "children", children);
    json_object_object_add(o, "parked", json_object_new_int64(parked));
    return o;
}

/* ---- Prometheus ----------------------------------------------------------------------------- */

static void gauge(mcp_metrics_text_t *t, const char *name, const char *help, apr_int64_t value)
{
    mcp_metrics_family(t, name, "gauge", help);
    mcp_metrics_sample(t, name, NULL, NULL, value);
}

static const char *metrics_text(request_rec *r, const view_t *v, apr_size_t *len)
{
    mcp_metrics_text_t *t = mcp_metrics_text_create(r->pool);
    int i;

    for (i = 0; i < MCP_STAT_COUNTERS; i++) {
        mcp_metrics_family(t, counters[i].metric, "counter", counters[i].help);
        mcp_metrics_sample(t, counters[i].metric, NULL, NULL,
                           (apr_int64_t)mcp_metrics_read(&shared->counters[i]));
    }
    mcp_metrics_family(t, "mcp_rejected_requests_total", "counter",
                       "Requests answered with an error status, by status.");
    for (i = 0; i < STATUSES; i++) {
        apr_uint64_t n = mcp_metrics_read(&shared->rejected[i]);
        if (n) {
            mcp_metrics_sample(t, "mcp_rejected_requests_total", "status",
                               apr_itoa(r->pool, FIRST_STATUS + i), (apr_int64_t)n);
        }
    }
    for (i = 0; i < MCP_HIST_COUNT; i++) {
        mcp_metrics_histogram(t, hists[i].metric, hists[i].help, &shared->hists[i]);
    }
    gauge(t, "mcp_database_up", "1 when PostgreSQL answered this scrape's query.", v->totals_ok);
    if (v->totals_ok) {
        gauge(t, "mcp_live_sessions", "Live sessions on every host.", v->totals.live_sessions);
        mcp_metrics_family(t, "mcp_open_streams", "gauge", "Open streams on every host, by kind.");
        mcp_metrics_sample(t, "mcp_open_streams", "kind", "request",
                           v->totals.open_request_streams);
        mcp_metrics_sample(t, "mcp_open_streams", "kind", "standalone",
                           v->totals.open_standalone_streams);
        gauge(t, "mcp_followers", "Resumptions following a stream, on every host.",
              v->totals.followers);
    }
    gauge(t, "mcp_children", "httpd processes of this server running mod_mcp.", v->children);
    gauge(t, "mcp_listeners_connected", "Processes whose LISTEN connection is up.", v->listening);
    gauge(t, "mcp_database_connections_in_use", "Database connections borrowed right now.",
          v->db_in_use);
    gauge(t, "mcp_parked_streams", "Streams parked in an event loop (holding no thread).",
          v->parked);
    gauge(t, "mcp_detached_exchanges", "Backend exchanges going on in an event loop after "
          "their request ended (era-bridge calls waiting for their input round).", v->detached);
    gauge(t, "mcp_start_time_seconds", "When the counters started (Unix time).",
          apr_time_sec(shared->started));
    return mcp_metrics_text_get(t, len);
}

static int metrics_handler(request_rec *r)
{
    const char *text;
    apr_size_t len;
    view_t v;

    if (!r->handler || strcmp(r->handler, "mcp-metrics") != 0) {
        return DECLINED;
    }
    if (r->method_number != M_GET) {
        /* httpd's 405 names what r->allowed_methods holds in its Allow header. */
        ap_allow_standard_methods(r, REPLACE_ALLOW, M_GET, -1);
        return HTTP_METHOD_NOT_ALLOWED;
    }
    if (!shared) {
        return HTTP_SERVICE_UNAVAILABLE;
    }
    take_view(r, &v);
    text = metrics_text(r, &v, &len);
    ap_set_content_type(r, "text/plain; version=0.0.4; charset=utf-8");
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (!r->header_only) {
        ap_rwrite(text, (int)len, r);
    }
    return OK;
}

void mcp_status_register_hooks(void)
{
    APR_OPTIONAL_HOOK(ap, status_hook, status_hook, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_handler(metrics_handler, NULL, NULL, APR_HOOK_MIDDLE);
}
