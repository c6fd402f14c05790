/* mod_mcp_eras — see mod_mcp_eras.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>

#include "mcp_era.h"
#include "mcp_memo.h"
#include "mcp_protocol.h"
#include "mcp_shim.h"
#include "mcp_store_eras.h"
#include "mod_mcp_eras.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_shim.h"

APLOG_USE_MODULE(mcp);

/* Backends whose eras a process remembers; the least fresh one gives way. */
#define ERAS_CACHE 32
/* A probe waits at most this long (or MCPBackendTimeout when shorter). */
#define PROBE_TIMEOUT apr_time_from_sec(10)

/* What this process knows of its backends' eras: fresh until their lifetime ends, then kept as
 * the last eras known; NULL: nothing learned. */
static mcp_memo_slot_t eras_slots[ERAS_CACHE];
static mcp_memo_t eras_memo = MCP_MEMO_INIT(eras_slots);

static void keep(const char *backend, const char *protocols, apr_interval_time_t ttl)
{
    mcp_memo_put(&eras_memo, backend, protocols, apr_time_now() + ttl);
}

/* The eras of q's backend as another process or host learned them; 1 while still good. */
static int stored(mcp_req_t *q, const char **protocols)
{
    apr_int64_t left_ms = 0;
    const char *found = NULL;

    if (mcp_store_eras_get(mcp_req_db(q), q->r->pool, q->conf->backend_spec, &found, &left_ms)
        != MCP_STORE_OK || !found) {
        return 0;
    }
    *protocols = found;
    if (left_ms <= 0) {
        return 0;
    }
    keep(q->conf->backend_spec, found, apr_time_from_msec(left_ms));
    return 1;
}

/* The second step for a backend whose discover result listed 2026-07-28 alone: an initialize
 * at 2025-11-25 (a backend session it opens is ended at once). */
static const char *learn_initialize(mcp_req_t *q, const char *modern, const char **why)
{
    static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":\"mcp-eras-initialize\","
        "\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\","
        "\"capabilities\":{},\"clientInfo\":{\"name\":\"mod_mcp\",\"version\":\"1\"}}}";
    apr_array_header_t *messages;
    json_object *result = NULL, *msg;
    mcp_store_session_t s;
    mcp_exchange_t x;
    const char *err = NULL;
    int i;

    if (mcp_exchange_collect(q, NULL, NULL, init, &x, &messages, &err) != MCP_BACKEND_OK) {
        *why = apr_psprintf(q->r->pool, "initialize failed: %s", err ? err : "no answer");
        return NULL;
    }
    for (i = 0; i < messages->nelts; i++) {
        const char *text = APR_ARRAY_IDX(messages, i, const char *);

        if ((msg = mcp_jsonrpc_parse_value(q->r->pool, text, strlen(text)))
            && json_object_object_get_ex(msg, "result", &result)) {
            break;
        }
    }
    if (x.response.session_id) {
        memset(&s, 0, sizeof(s));
        s.protocol_version = "2025-11-25";
        q->session = &s;
        mcp_req_end_backend_session(q, x.response.session_id, "eras probe");
        q->session = NULL;
    }
    return mcp_era_learn_initialize(q->r->pool, modern, (int)x.response.status, result);
}

/* Probes the backend (server/discover, then initialize when discover lists no 2025 revision)
 * through probe, a copy of the request with its own bounds; the eras learned (kept in the table
 * and this process), or NULL. */
static const char *learn(mcp_req_t *probe)
{
    request_rec *r = probe->r;
    const char *backend = probe->conf->backend_spec, *protocols, *how = "server/discover";
    apr_interval_time_t ttl = probe->conf->backend_protocols_ttl;
    mcp_shim_discovered_t d;
    mcp_store_status_t rv;
    long ttl_ms;

    mcp_shim_discover(probe, probe->conf->backend_timeout, &d);
    protocols = mcp_era_learn(r->pool, d.http_status, d.result, d.error != NULL);
    if (protocols && strcmp(protocols, mcp_protocol_list(MCP_ERA_2026)) == 0) {
        protocols = learn_initialize(probe, protocols, &d.why);
        how = "server/discover and initialize";
    }
    else if (!d.result) {
        how = apr_psprintf(r->pool, "server/discover, which it refused with %s",
                           apr_psprintf(r->pool, "%sHTTP %d", d.error ? "an error, " : "",
                                        d.http_status));
    }
    if (!protocols) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "backend %s: its protocol eras are not "
                      "learned (%s); asked again in %" APR_TIME_T_FMT "s", backend,
                      d.why ? d.why : apr_psprintf(r->pool, "HTTP %d", d.http_status),
                      apr_time_sec(MCP_ERAS_RETRY));
        return NULL;
    }
    if (d.result && (ttl_ms = mcp_shim_discover_ttl(d.result, 0)) > 0) {
        ttl = apr_time_from_msec(ttl_ms);
    }
    keep(backend, protocols, ttl);
    rv = mcp_store_eras_put(mcp_req_db(probe), r->pool, backend, protocols, apr_time_as_msec(ttl));
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "backend %s serves %s (learned by %s; for %"
                  APR_TIME_T_FMT "s%s)", backend, protocols, how, apr_time_sec(ttl),
                  rv == MCP_STORE_OK ? "" : "; not stored: the database failed");
    return protocols;
}

const char *mcp_eras_backend(mcp_req_t *q)
{
    const char *backend = q->conf->backend_spec, *known = NULL, *learned;
    mcp_dir_conf_t conf;
    mcp_req_t probe;

    if (q->conf->backend_protocols) {
        return q->conf->backend_protocols;
    }
    if (!backend || (q->conf->backend && q->conf->backend->stdio)) {
        return mcp_protocol_list(MCP_ERA_2025);
    }
    if (mcp_memo_get(&eras_memo, q->r->pool, backend, apr_time_now(), &known)
        || stored(q, &known)) {
        return known ? known : mcp_protocol_list(MCP_ERA_2025);
    }
    /* The probe's own bounds: MCPBackendTimeout, at most PROBE_TIMEOUT. */
    conf = *q->conf;
    conf.backend_timeout = conf.backend_timeout > 0 && conf.backend_timeout < PROBE_TIMEOUT
        ? conf.backend_timeout : PROBE_TIMEOUT;
    probe = *q;
    probe.conf = &conf;
    probe.session = NULL;
    if ((learned = learn(&probe))) {
        return learned;
    }
    /* Nothing learned (the backend is down, say): the last eras known, else the 2025 era's,
     * until the next try. */
    keep(backend, known, MCP_ERAS_RETRY);
    return known ? known : mcp_protocol_list(MCP_ERA_2025);
}

int mcp_eras_shimmed(mcp_req_t *q)
{
    char legacy[256], *version, *last = NULL;
    const char *protocols;

    if (!q->conf->era_bridge) {
        return 0;
    }
    protocols = mcp_eras_backend(q);
    if (!mcp_era_listed(protocols, MCP_SHIM_VERSION)) {
        return 0;
    }
    apr_cpystrn(legacy, mcp_protocol_list(MCP_ERA_2025), sizeof(legacy));
    for (version = apr_strtok(legacy, ", ", &last); version;
         version = apr_strtok(NULL, ", ", &last)) {
        if (mcp_era_listed(protocols, version)) {
            return 0;
        }
    }
    return 1;
}
