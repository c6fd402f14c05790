/* mod_mcp_federation_modern — a 2026-07-28 (stateless) client on a federated endpoint: see
 * mcp_federation_modern in mod_mcp_federation.h.
 *
 * There is no gateway session: each member is asked in its own era, as a single-backend
 * Location would ask it — a member that serves 2026-07-28 directly, a 2025-era one through the
 * era bridge's pooled sessions (keyed by the member's Backend, so each member has its own).
 */
#include <string.h>

#include <apr_base64.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_bridge.h"
#include "mcp_era.h"
#include "mcp_federation.h"
#include "mcp_sse.h"
#include "mcp_text.h"
#include "mod_mcp_bridge.h"
#include "mod_mcp_eras.h"
#include "mod_mcp_federation_private.h"
#include "mod_mcp_modern.h"
#include "mod_mcp_park.h"
#include "mod_mcp_shim.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* (Not PACKAGE_VERSION: httpd's ap_config_auto.h defines that one, empty.) */
#ifndef MOD_MCP_VERSION
#define MOD_MCP_VERSION "dev"
#endif

typedef struct modern_fed_t {
    fed_t        f;
    const char  *version;     /* the client's revision                                   */
    mcp_stream_t st;          /* the stream of an answer the gateway makes (lists, discover) */
} modern_fed_t;

/* The members, each with its own Backend (the eras and the bridge's pool are per backend) and
 * eras learned, not the Location's MCPBackendProtocols. */
static void members_init(modern_fed_t *mf, mcp_req_t *q, const char *version)
{
    int i;

    mf->version = version;
    mcp_federated_init(&mf->f, q);
    for (i = 0; i < mf->f.n; i++) {
        member_t *m = &mf->f.m[i];
        mcp_store_session_t *s = apr_pmemdup(q->r->pool, q->session, sizeof(*s));

        m->conf.backend_spec = m->mc->spec;
        m->conf.backend_protocols = NULL;
        s->backend_url = m->mc->spec;
        m->q.session = s;
        m->modern = 1;
    }
}

/* Non-zero when m serves the 2025 era only: the era bridge speaks to it. */
static int member_bridged(modern_fed_t *mf, member_t *m)
{
    return !mcp_era_listed(mcp_eras_backend(&m->q), mf->version);
}

/* Why m cannot be asked for this client (NULL: it can). */
static const char *member_unreachable(modern_fed_t *mf, member_t *m)
{
    if (member_bridged(mf, m) && !mf->f.q->conf->era_bridge) {
        return "it serves the 2025 era only, and MCPEraBridge is Off";
    }
    return NULL;
}

/* ---- answers the gateway makes (server/discover, the lists) --------------------------------- */

static int open_stream(modern_fed_t *mf)
{
    mcp_req_t *q = mf->f.q;
    apr_int64_t stream_id = 0;
    int rc;

    if ((rc = mcp_req_open_stateless(q, mf->version, &stream_id)) != OK) {
        return rc;
    }
    mcp_req_note_stream(q->r, stream_id);
    mcp_status_count(MCP_STAT_CALLS, 1);
    mcp_stream_init(&mf->st, q, stream_id, 1);
    mf->st.stateless = 1;
    mcp_stream_own(&mf->st);
    return OK;
}

/* The answer stored (as the client gets it: a list filtered for its user), then sent; ok: it is
 * a result. */
static int answer(modern_fed_t *mf, int status, const char *json, int ok)
{
    request_rec *r = mf->f.q->r;

    mcp_stream_add(&mf->st, json, strlen(json));
    if (mf->st.rewritten) {
        json = apr_pstrmemdup(r->pool, mf->st.rewritten, mf->st.rewritten_len);
    }
    mcp_stream_finish(&mf->st, mf->st.broken || !ok ? "failed" : "complete");
    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_rwrite(json, (int)strlen(json), r);
    return DONE;
}

static json_object *gateway_info(apr_pool_t *p, int n)
{
    json_object *info = json_object_new_object();

    json_object_object_add(info, "name", json_object_new_string("mod_mcp"));
    json_object_object_add(info, "title", json_object_new_string(apr_psprintf(
        p, "mod_mcp federation of %d member(s)", n)));
    json_object_object_add(info, "version", json_object_new_string(MOD_MCP_VERSION));
    return info;
}

/* A result of the gateway's for the client: its id, resultType, the cache fields (0 and
 * "private": a list may be filtered for its user) and the gateway's serverInfo. */
static const char *stamped(modern_fed_t *mf, json_object *result)
{
    mcp_req_t *q = mf->f.q;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    json_object *response = json_object_new_object(), *info = gateway_info(q->r->pool, mf->f.n);
    const char *out;

    json_object_object_add(response, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(response, "id", json_object_get(msg->id));
    json_object_object_add(response, "result", result);
    out = mcp_bridge_response_out(q->r->pool, response, msg->id, msg->method, info);
    json_object_put(info);
    json_object_put(response);
    return out;
}

/* Each member's capabilities and instructions (its discover; a 2025-era member's the
 * InitializeResult the bridge recorded) into results (NULL: unknown, logged, and said in
 * *failures); returns how many are known. */
static int member_results(modern_fed_t *mf, json_object **results, const char **failures)
{
    fed_t *f = &mf->f;
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    const char *why, *text;
    int i, known = 0;

    *failures = "";
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        results[i] = NULL;
        if (!(why = member_unreachable(mf, m))) {
            if (member_bridged(mf, m)) {
                if ((text = mcp_bridge_init_result(&m->q, &why))
                    && !(results[i] = mcp_jsonrpc_parse_value(p, text, strlen(text)))) {
                    why = "its recorded InitializeResult is not JSON";
                }
            }
            else {
                mcp_shim_discovered_t d;

                mcp_shim_discover(&m->q, q->conf->backend_timeout, &d);
                results[i] = d.result;
                why = d.result ? NULL : d.why ? d.why : "no server/discover result";
            }
        }
        if (why || !results[i] || !json_object_is_type(results[i], json_type_object)) {
            results[i] = NULL;
            why = why ? why : "its answer is not an object";
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "federation: %s: member %s is "
                          "left out: %s", q->body->msgs[0].method, m->mc->fed.name, why);
            *failures = apr_psprintf(p, "%s%s%s: %s", *failures, **failures ? "; " : "",
                                     m->mc->fed.name, why);
            continue;
        }
        known++;
    }
    return known;
}

/* The members' results merged as initialize merges them (the caller puts it); NULL, with
 * *failures, when no member's is known. */
static json_object *merged_capabilities(modern_fed_t *mf, const char **failures)
{
    fed_t *f = &mf->f;
    apr_pool_t *p = f->q->r->pool;
    json_object **results = apr_pcalloc(p, sizeof(*results) * (apr_size_t)f->n), *merged, *info;
    const char **names = apr_pcalloc(p, sizeof(*names) * (apr_size_t)f->n);
    int i;

    if (member_results(mf, results, failures) == 0) {
        return NULL;
    }
    for (i = 0; i < f->n; i++) {
        names[i] = f->m[i].mc->fed.name;
    }
    info = gateway_info(p, f->n);
    merged = mcp_fed_merge_initialize(p, results, names, f->n, mf->version, info);
    json_object_put(info);
    return merged;
}

/* server/discover: the members' capabilities and instructions merged. */
static int discover(modern_fed_t *mf)
{
    mcp_req_t *q = mf->f.q;
    apr_pool_t *p = q->r->pool;
    const char *failures, *out;
    json_object *merged;
    int rc;

    if ((rc = open_stream(mf)) != OK) {
        return rc;
    }
    if (!(merged = merged_capabilities(mf, &failures))) {
        return answer(mf, HTTP_BAD_GATEWAY, mcp_jsonrpc_error_body(p, q->body->msgs[0].id,
            MCP_JSONRPC_BACKEND_ERROR, apr_psprintf(p, "Bad Gateway: no member of this "
            "endpoint could say what it serves: %s", failures), NULL), 0);
    }
    out = mcp_bridge_discover(p, mcp_jsonrpc_to_string(p, merged, NULL), q->body->msgs[0].id,
                              mcp_protocol_list(MCP_ERA_2026));
    json_object_put(merged);
    return answer(mf, HTTP_OK, out, 1);
}

/* m made ready to be asked request (a copy of the client's, parsed in p, with m's cursor) in its
 * own era; NULL, or why it cannot be asked. fresh: a new pooled session for a bridged member. */
static const char *prepare(modern_fed_t *mf, member_t *m, json_object *request, int fresh)
{
    apr_pool_t *p = mf->f.q->r->pool;
    const char *why;
    mcp_store_session_t *s;

    if ((why = member_unreachable(mf, m))) {
        return why;
    }
    if (member_bridged(mf, m)) {
        if (!(s = mcp_bridge_pooled(&m->q, fresh, &why))) {
            return why;
        }
        m->q.session = s;   /* (its pooled session: a 404 ends it) */
        m->session_id = s->backend_session_id;
        m->version = s->protocol_version;
        m->headers = NULL;
        m->body = mcp_bridge_request_in(p, request, mf->st.id);
        why = apr_psprintf(p, "%" APR_INT64_T_FMT, mf->st.id);
        m->ask_id = mcp_jsonrpc_parse_value(p, why, strlen(why));
        return NULL;
    }
    m->session_id = NULL;
    m->version = mf->version;
    m->headers = apr_array_make(p, 1, sizeof(const char *));
    APR_ARRAY_PUSH(m->headers, const char *) = apr_pstrcat(p, "Mcp-Method: ",
                                                           mf->f.q->body->msgs[0].method, NULL);
    m->body = mcp_jsonrpc_to_string(p, request, NULL);
    m->ask_id = NULL;
    return NULL;
}

/* Non-zero when m answered as a backend that lost the pooled session does: 404 with a JSON-RPC
 * error. */
static int pooled_lost(apr_pool_t *p, const member_t *m)
{
    const char *body;

    return m->session_id && m->status == MCP_BACKEND_OK && m->x.response.status == HTTP_NOT_FOUND
        && m->messages && m->messages->nelts == 1
        && (body = APR_ARRAY_IDX(m->messages, 0, const char *)) != NULL
        && mcp_jsonrpc_is_error_message(p, body, strlen(body));
}

/* One page of a list method: the cursor's members, each in its era, at once; merged. */
static int list_page(modern_fed_t *mf)
{
    fed_t *f = &mf->f;
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    json_object *params = NULL, *merged;
    const char *why = NULL, *error = NULL;
    int *want = apr_pcalloc(p, sizeof(int) * (apr_size_t)f->n);
    int *again = apr_pcalloc(p, sizeof(int) * (apr_size_t)f->n);
    const char **cursors = apr_pcalloc(p, sizeof(char *) * (apr_size_t)f->n);
    int i, rc, retry = 0;

    json_object_object_get_ex(msg->obj, "params", &params);
    if (mcp_federated_list_cursor(f, params, want, cursors, &why) != 0) {
        return mcp_req_error(q, HTTP_OK, MCP_JSONRPC_INVALID_PARAMS, "%s", why);
    }
    if ((rc = open_stream(mf)) != OK) {
        return rc;
    }
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        m->asked = 0;
        if (want[i] && (why = prepare(mf, m, mcp_federated_list_request(q, cursors[i]), 0))) {
            m->row.error = why;
            continue;
        }
        m->asked = want[i];
    }
    mcp_federated_fan_out(f, 0, q->conf->backend_timeout);
    /* A bridged member that forgot its pooled session: a new one, and asked once more. */
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        again[i] = m->asked && pooled_lost(p, m);
        if (again[i]) {
            mcp_bridge_pooled_lost(&m->q, m->q.session);
            if ((why = prepare(mf, m, mcp_federated_list_request(q, cursors[i]), 1))) {
                m->row.error = why;
                m->asked = 0;
                again[i] = 0;
            }
            retry += again[i];
        }
    }
    if (retry) {
        for (i = 0; i < f->n; i++) {
            f->m[i].asked = again[i];
        }
        mcp_federated_fan_out(f, 0, q->conf->backend_timeout);
        for (i = 0; i < f->n; i++) {
            /* (asked again, or answered the first time) */
            f->m[i].asked = again[i] || (want[i] && !f->m[i].row.error);
        }
    }
    if (!(merged = mcp_federated_list_merged(f, want, cursors, msg->id, msg->method, &error))) {
        return answer(mf, HTTP_OK, error, 0);
    }
    return answer(mf, HTTP_OK, stamped(mf, merged), 1);
}

/* ---- a request routed to its member ---------------------------------------------------------- */

/* The header value for name: as it is when it is visible ASCII, else "=?base64?...?=". */
static const char *header_value(apr_pool_t *p, const char *name)
{
    const unsigned char *c;
    char *b64;

    for (c = (const unsigned char *)name; *c; c++) {
        if (*c < 0x20 || *c > 0x7e) {
            b64 = apr_palloc(p, (apr_size_t)apr_base64_encode_len((int)strlen(name)));
            apr_base64_encode(b64, name, (int)strlen(name));
            return apr_pstrcat(p, "=?base64?", b64, "?=", NULL);
        }
    }
    return name;
}

/* The request (rewritten into the member's names) sent to member index in its era, its answer
 * relayed as a single backend's would be, rewritten into the client's names. */
static int routed(modern_fed_t *mf, int index, json_object *rewritten)
{
    fed_t *f = &mf->f;
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    member_t *m = &f->m[index];
    mcp_req_member_t *rm = apr_pcalloc(p, sizeof(*rm));
    mcp_jsonrpc_body_t *body = apr_pmemdup(p, q->body, sizeof(*body));
    const char *why, *key, *value;
    json_object *params;

    if ((why = member_unreachable(mf, m))) {
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR, "Bad Gateway: the "
                             "member that serves this request (%s) cannot serve protocol version "
                             "%s: %s", m->mc->fed.name, mf->version, why);
    }
    rm->fed = &f->fed[index];
    rm->endpoint = q->conf;
    rm->row.member = m->mc->fed.name;
    rm->row.backend_url = m->mc->spec;
    rm->method = q->body->msgs[0].method;
    rm->body = mcp_jsonrpc_to_string(p, rewritten, &rm->body_len);
    m->q.member = rm;   /* (q.raw stays the client's: the stored request is what it sent) */
    body->msgs = apr_pmemdup(p, q->body->msgs, sizeof(*body->msgs));
    mcp_jsonrpc_classify(rewritten, &body->msgs[0]);
    m->q.body = body;
    /* Mcp-Name says the member's own name (or URI), as the body now does. */
    if ((key = mcp_era_name_member(rm->method))
        && json_object_object_get_ex(rewritten, "params", &params)
        && (value = mcp_jsonrpc_get_string(params, key))) {
        apr_table_set(q->r->headers_in, "Mcp-Name", header_value(p, value));
    }
    return member_bridged(mf, m) ? mcp_bridge_post(&m->q, mf->version)
                                 : mcp_modern_forward(&m->q, mf->version);
}

/* ---- subscriptions/listen: every member's, as one stream ------------------------------------ */

typedef struct flisten_t flisten_t;

/* One member's part of a listen: a 2026-07-28 member's own subscriptions/listen, or a 2025-era
 * member's pooled session's GET stream (through the bridge's filter). */
typedef struct flisten_half_t {
    flisten_t      *l;
    member_t       *m;
    int             slot;
    int             bridged;
    const char     *acked;      /* bridged: the member's filter, in its own URIs              */
    mcp_park_half_t half;
    int             over;
} flisten_half_t;

/* The listen: one stream of no session, every half storing on it (parked: a transfer slot per
 * member, their news handed over one after the other, as for a session's GET stream). */
struct flisten_t {
    modern_fed_t   *mf;
    const mcp_jsonrpc_msg_t *msg;
    mcp_park_t     *pk;
    const char     *ack;        /* the client's notifications/subscriptions/acknowledged     */
    int             n;          /* halves started                                            */
    int             live;       /* ... not over yet                                          */
    int             sse;        /* the client's response is SSE: the acknowledgement is out  */
    int             stopped;    /* the client went, or the process stops                     */
    int             finished;
};

/* The part of the client's filter (params.notifications) that concerns member i: the list
 * flags as they are, the resourceSubscriptions that are i's, in its own URIs. A new object. */
static json_object *member_filter(fed_t *f, int i, json_object *notifications)
{
    json_object *out = json_object_new_object(), *uris, *mine;
    const char *own;
    size_t k;

    json_object_object_foreach(notifications, key, v) {
        if (strcmp(key, "resourceSubscriptions") != 0) {
            json_object_object_add(out, key, json_object_get(v));
        }
    }
    if (json_object_object_get_ex(notifications, "resourceSubscriptions", &uris)
        && json_object_is_type(uris, json_type_array)) {
        mine = json_object_new_array();
        for (k = 0; k < json_object_array_length(uris); k++) {
            json_object *u = json_object_array_get_idx(uris, k);

            if (json_object_is_type(u, json_type_string)
                && mcp_fed_resolve_uri(f->fed, f->n, json_object_get_string(u), &own) == i) {
                json_object_array_add(mine, json_object_new_string(own));
            }
        }
        json_object_object_add(out, "resourceSubscriptions", mine);
    }
    return out;
}

/* resources/subscribe, on the bridged member's pooled session, of each URI of its filter; the
 * URIs it refused are taken out. Returns the filter's text. */
static const char *subscribe_member(flisten_half_t *h, const char *acked)
{
    member_t *m = h->m;
    apr_pool_t *p = m->q.r->pool;
    json_object *ack = mcp_jsonrpc_parse_value(p, acked, strlen(acked)), *uris, *kept;
    apr_array_header_t *messages;
    mcp_exchange_t x;
    const char *err = NULL, *body;
    size_t i;

    if (!ack || !json_object_object_get_ex(ack, "resourceSubscriptions", &uris)) {
        return acked;
    }
    kept = json_object_new_array();
    for (i = 0; i < json_object_array_length(uris); i++) {
        json_object *uri = json_object_array_get_idx(uris, i);

        body = apr_psprintf(p, "{\"jsonrpc\":\"2.0\",\"id\":\"listen-%" APR_INT64_T_FMT "-%d\","
                            "\"method\":\"resources/subscribe\",\"params\":{\"uri\":%s}}",
                            h->l->mf->st.id, (int)i, mcp_jsonrpc_to_string(p, uri, NULL));
        if (mcp_exchange_collect(&m->q, m->session_id, m->version, body, &x, &messages, &err)
            == MCP_BACKEND_OK && x.response.status == HTTP_OK && messages->nelts > 0
            && !mcp_jsonrpc_is_error_message(p, APR_ARRAY_IDX(messages, 0, const char *),
                                             strlen(APR_ARRAY_IDX(messages, 0, const char *)))) {
            json_object_array_add(kept, json_object_get(uri));
        }
        else {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, m->q.r, "federation: member %s refused "
                          "resources/subscribe of %s", m->mc->fed.name,
                          mcp_jsonrpc_to_string(p, uri, NULL));
        }
    }
    json_object_object_add(ack, "resourceSubscriptions", kept);
    return mcp_jsonrpc_to_string(p, ack, NULL);
}

/* The listen's end, once every half is over and the client's response is the stream's: the
 * subscription's graceful end (its complete result) when the members ended it, else closed. */
static void listen_finish(flisten_t *l)
{
    mcp_stream_t *st = &l->mf->st;
    apr_pool_t *p = l->mf->f.q->r->pool;
    const char *id, *end;

    if (l->finished) {
        return;
    }
    l->finished = 1;
    if (l->stopped || st->client_gone) {
        mcp_stream_finish(st, "closed");
        return;
    }
    id = mcp_jsonrpc_to_string(p, l->msg->id, NULL);
    end = apr_psprintf(p, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"resultType\":"
                       "\"complete\",\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":%s}}}",
                       id, id);
    mcp_stream_add(st, end, strlen(end));
    mcp_stream_finish(st, "complete");
}

static void listen_half_over(flisten_half_t *h, const char *why)
{
    flisten_t *l = h->l;

    if (h->over) {
        return;
    }
    h->over = 1;
    l->live--;
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, l->mf->f.q->r, "listen stream %" APR_INT64_T_FMT
                  " (federation): member %s's part ended: %s", l->mf->st.id,
                  h->m->mc->fed.name, why ? why : "?");
    if (l->live == 0 && l->sse) {
        listen_finish(l);
    }
}

/* A member's stream began: the client's begins, with the acknowledgement (once). */
static int listen_answer(void *baton)
{
    flisten_half_t *h = baton;
    flisten_t *l = h->l;
    mcp_stream_t *st = &l->mf->st;

    if (!h->m->x.sse || l->sse) {
        return 0;   /* (no stream from this member: its answer is read to its end) */
    }
    mcp_stream_start_sse(st, -1);
    l->sse = 1;
    if (l->pk) {
        /* From now on the parked stream writes what the halves store. */
        mcp_stream_detach(st);
        mcp_park_write_through(l->pk, st);
    }
    return mcp_stream_add(st, l->ack, strlen(l->ack)) || mcp_stream_commit(st);
}

/* One message of a member's stream: what the client asked for, tagged with its listen's id, in
 * its names. */
static int listen_message(void *baton, const char *json, apr_size_t len)
{
    flisten_half_t *h = baton;
    flisten_t *l = h->l;
    mcp_stream_t *st = &l->mf->st;
    apr_pool_t *p;
    json_object *obj;
    const char *method, *out = NULL;
    apr_size_t out_len = 0;

    apr_pool_create(&p, l->pk && mcp_park_scratch(l->pk) ? mcp_park_scratch(l->pk)
                                                          : l->mf->f.q->r->pool);
    if ((obj = mcp_jsonrpc_parse_value(p, json, len))) {
        if (h->bridged) {
            /* (logs, requests, what was not asked for: not for a listen stream) */
            out = mcp_bridge_listen_pass(p, obj, h->acked, l->msg->id);
            obj = out ? mcp_jsonrpc_parse_value(p, out, strlen(out)) : NULL;
        }
        method = obj ? mcp_jsonrpc_get_string(obj, "method") : NULL;
        /* A 2026-07-28 member's own acknowledgement, and its end, are not the client's. */
        if (method && strcmp(method, "notifications/subscriptions/acknowledged") != 0) {
            mcp_fed_outbound(p, &h->m->mc->fed, obj, NULL);
            out = mcp_jsonrpc_to_string(p, obj, &out_len);
            mcp_stream_add(st, out, out_len);
        }
    }
    apr_pool_destroy(p);
    return st->broken;
}

static int listen_chunk(void *baton)
{
    flisten_half_t *h = baton;
    mcp_stream_t *st = &h->l->mf->st;

    /* Comments without end (more than two messages' worth without one): this member floods. */
    if (h->m->x.sse && mcp_sse_parser_idle_bytes(h->m->x.sse)
        > 2 * (apr_uint64_t)h->l->mf->f.q->conf->max_message_size) {
        return 1;
    }
    return mcp_stream_commit(st) || st->client_gone;
}

static int listen_tick(void *baton)
{
    flisten_half_t *h = baton;
    mcp_stream_t *st = &h->l->mf->st;

    return mcp_stream_tick(st) || st->client_gone;
}

/* The park's hooks (baton: the half). */
static int listen_half_news(void *baton, const mcp_loop_news_t *news)
{
    flisten_half_t *h = baton;
    mcp_backend_status_t status;
    const char *err;
    int cut;

    if (!mcp_exchange_feed_news(&h->m->x, news, &cut)) {
        return 0;
    }
    err = news->err;
    status = mcp_exchange_end(&h->m->x, cut ? MCP_BACKEND_ABORTED : news->status, &err);
    listen_half_over(h, cut ? "stopped by the gateway" : status != MCP_BACKEND_OK ? err
                        : h->m->x.sse ? "the member ended it"
                        : apr_psprintf(h->m->q.r->pool, "HTTP %ld, no stream",
                                       h->m->x.response.status));
    return 1;
}

static int listen_half_tick(void *baton)
{
    flisten_half_t *h = baton;

    if (listen_tick(h)) {
        listen_half_over(h, "its lease was taken over, or storing failed");
        return 1;
    }
    return 0;
}

static void listen_half_stop(void *baton, const char *why)
{
    flisten_half_t *h = baton;

    h->l->stopped = 1;
    listen_half_over(h, why);
}

static int listen_acknowledged(void *baton)
{
    return ((flisten_half_t *)baton)->l->sse;
}

/* What listen_parked says when no member's stream began (the caller answers). */
#define LISTEN_NOT_BEGUN 1

/* The halves on the event loop: SUSPENDED once parked; OK when the client went before it could
 * be; DECLINED when it cannot be parked (the caller goes on with its thread); LISTEN_NOT_BEGUN
 * when no member's stream began within MCPBackendTimeout. */
static int listen_parked(flisten_t *l, flisten_half_t *hs, mcp_backend_call_t *calls, int k)
{
    mcp_req_t *q = l->mf->f.q;
    int i;

    if (k > MCP_LOOP_SLOTS || !(l->pk = mcp_park_create(q, l->mf->st.id, 0, 0, 1))) {
        return DECLINED;
    }
    for (i = 0; i < k; i++) {
        flisten_half_t *h = &hs[i];
        const char *err = NULL;

        h->half.on_news = listen_half_news;
        h->half.on_tick = listen_half_tick;
        h->half.on_stop = listen_half_stop;
        h->half.baton = h;
        h->half.lean = 1;   /* a listen mostly waits */
        mcp_exchange_call_defaults(&h->m->x, &calls[i]);
        mcp_exchange_begin(&h->m->x);
        if (mcp_park_backend_slot(l->pk, h->slot, &calls[i], &h->half, &err) != 0) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "federation: member %s's listen "
                          "could not start on the event loop: %s", h->m->mc->fed.name, err);
            h->over = 1;
            continue;
        }
        l->n++;
        l->live++;
    }
    if (l->n == 0) {
        mcp_park_abandon(l->pk);
        l->pk = NULL;
        return DECLINED;
    }
    mcp_park_wait(l->pk, listen_acknowledged, q->conf->backend_timeout);
    if (l->sse && !mcp_park_gone(l->pk)) {
        if (l->live == 0) {
            listen_finish(l);
        }
        return mcp_park_go(l->pk, 0);
    }
    mcp_park_abandon(l->pk);   /* (the members' streams still running are cut) */
    if (l->sse) {
        l->stopped = 1;
        listen_finish(l);
        return OK;
    }
    return LISTEN_NOT_BEGUN;
}

/* subscriptions/listen: each member's part (what of the client's filter concerns it) in its own
 * era, all on one stream; the client is acknowledged what the members' capabilities can honour
 * once a member's stream began. A 2025-era member's pooled session has one GET stream: a second
 * listen of the same principal and capabilities goes without that member (logged). */
static int listen_all(modern_fed_t *mf)
{
    fed_t *f = &mf->f;
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    flisten_t *l = apr_pcalloc(p, sizeof(*l));
    flisten_half_t *hs = apr_pcalloc(p, sizeof(*hs) * (apr_size_t)f->n);
    mcp_backend_call_t *calls = apr_pcalloc(p, sizeof(*calls) * (apr_size_t)f->n);
    mcp_exchange_t **xs = apr_pcalloc(p, sizeof(*xs) * (apr_size_t)f->n);
    mcp_backend_status_t *sts = apr_pcalloc(p, sizeof(*sts) * (apr_size_t)f->n);
    const char **errs = apr_pcalloc(p, sizeof(*errs) * (apr_size_t)f->n);
    json_object *params = NULL, *notifications = NULL, *merged, *request, *ps;
    const char *failures = "", *why, *init;
    int i, k = 0, rc;

    l->mf = mf;
    l->msg = &q->body->msgs[0];
    if (!json_object_object_get_ex(l->msg->obj, "params", &params)
        || !json_object_object_get_ex(params, "notifications", &notifications)
        || !json_object_is_type(notifications, json_type_object)) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: "
                             "subscriptions/listen needs params.notifications, an object");
    }
    if ((rc = open_stream(mf)) != OK) {
        return rc;
    }
    if (!(merged = merged_capabilities(mf, &failures))) {
        return answer(mf, HTTP_BAD_GATEWAY, mcp_jsonrpc_error_body(p, l->msg->id,
            MCP_JSONRPC_BACKEND_ERROR, apr_psprintf(p, "Bad Gateway: no member of this "
            "endpoint could say what it serves: %s", failures), NULL), 0);
    }
    l->ack = apr_psprintf(p, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/"
                          "acknowledged\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/"
                          "subscriptionId\":%s},\"notifications\":%s}}",
                          mcp_jsonrpc_to_string(p, l->msg->id, NULL),
                          mcp_bridge_listen_ack(p, l->msg->obj,
                                                mcp_jsonrpc_to_string(p, merged, NULL)));
    json_object_put(merged);

    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];
        flisten_half_t *h = &hs[k];

        request = mcp_jsonrpc_parse_value(p, q->raw, q->raw_len);
        json_object_object_get_ex(request, "params", &ps);
        json_object_object_add(ps, "notifications", member_filter(f, i, notifications));
        if ((why = prepare(mf, m, request, 0))) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "federation: subscriptions/listen: "
                          "member %s is left out: %s", m->mc->fed.name, why);
            continue;
        }
        h->l = l;
        h->m = m;
        h->slot = k;
        h->bridged = m->session_id != NULL;
        mcp_exchange_init(&m->x, &m->q, h);
        m->x.on_answer = listen_answer;
        m->x.on_message = listen_message;
        m->x.after_chunk = listen_chunk;
        m->x.on_tick = listen_tick;
        calls[k].session_id = m->session_id;
        calls[k].protocol_version = m->version;
        if (h->bridged) {
            /* Its pooled session's GET stream, what it can honour of its part subscribed. */
            init = mcp_bridge_init_result(&m->q, &why);
            h->acked = subscribe_member(h, mcp_bridge_listen_ack(p, request, init));
            calls[k].method = "GET";
        }
        else {
            calls[k].method = "POST";
            calls[k].body = m->body;
            calls[k].body_len = strlen(m->body);
            calls[k].headers = m->headers;
        }
        xs[k] = &m->x;
        k++;
    }
    if (k == 0) {
        return answer(mf, HTTP_BAD_GATEWAY, mcp_jsonrpc_error_body(p, l->msg->id,
            MCP_JSONRPC_BACKEND_ERROR, "Bad Gateway: no member of this endpoint can be asked "
            "for subscriptions/listen", NULL), 0);
    }
    rc = listen_parked(l, hs, calls, k);
    if (rc == SUSPENDED || rc == OK) {
        return rc == OK ? DONE : rc;
    }
    if (rc == DECLINED) {
        /* With this thread: every member's stream until all are over. */
        l->n = l->live = k;
        mcp_exchange_perform_all(xs, calls, k, sts, errs);
        for (i = 0; i < k; i++) {
            listen_half_over(&hs[i], sts[i] != MCP_BACKEND_OK ? errs[i] : "the member ended it");
        }
        if (l->sse) {
            listen_finish(l);
            return DONE;
        }
    }
    return answer(mf, HTTP_BAD_GATEWAY, mcp_jsonrpc_error_body(p, l->msg->id,
        MCP_JSONRPC_BACKEND_ERROR, "Bad Gateway: no member of this endpoint opened a stream for "
        "subscriptions/listen (a 2025-era member's pooled session may be held by another "
        "listen)", NULL), 0);
}

/* ---- entry ----------------------------------------------------------------------------------- */

int mcp_federation_modern(mcp_req_t *handler_q, const char *version)
{
    /* A routed call's parked answer outlives the handler's frame, where its request lives. */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    apr_pool_t *p = q->r->pool;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    modern_fed_t *mf = apr_pcalloc(p, sizeof(*mf));
    json_object *copy;
    const char *why = NULL;
    mcp_store_status_t stored;
    int index = -1;

    members_init(mf, q, version);
    if (msg->kind == MCP_MSG_NOTIFICATION) {
        /* Nothing a 2026-07-28 client notifies means anything to a member (cancellation is the
         * closing of a response): stored, answered. */
        stored = mcp_store_events_append(mcp_req_db(q), p, q->session, 0, 0, "in",
                                         apr_pstrcat(p, "[", q->raw, "]", NULL));
        return stored != MCP_STORE_OK ? mcp_req_store_failed(q, stored)
                                      : mcp_req_empty(q, HTTP_ACCEPTED);
    }
    if (strcmp(msg->method, "server/discover") == 0) {
        return discover(mf);
    }
    if (mcp_bridge_method_is_gone(msg->method)) {
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                             "%s is not a method of protocol version %s", msg->method, version);
    }
    if (strcmp(msg->method, "subscriptions/listen") == 0) {
        return listen_all(mf);
    }
    switch (mcp_fed_method_kind(msg->method)) {
    case MCP_FED_LIST:
        return list_page(mf);
    case MCP_FED_ROUTED:
        copy = mcp_jsonrpc_parse_value(p, q->raw, q->raw_len);
        if ((index = mcp_fed_route(p, mf->f.fed, mf->f.n, copy, &why)) < 0) {
            return mcp_req_error(q, HTTP_OK, MCP_JSONRPC_INVALID_PARAMS, "%s", why);
        }
        return routed(mf, index, copy);
    default:
        break;
    }
    /* Methods the gateway does not know go to the unprefixed member, as they are. */
    if ((index = mcp_federated_unprefixed(&mf->f)) < 0) {
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                             "%s (this endpoint federates its members' tools, prompts and "
                             "resources; no member is unprefixed to take other methods)",
                             mcp_text_quote(p, msg->method, strlen(msg->method), 100));
    }
    return routed(mf, index, mcp_jsonrpc_parse_value(p, q->raw, q->raw_len));
}
