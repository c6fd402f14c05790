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
#include "mcp_text.h"
#include "mod_mcp_bridge.h"
#include "mod_mcp_eras.h"
#include "mod_mcp_federation_private.h"
#include "mod_mcp_modern.h"
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

/* server/discover: the members' capabilities and instructions merged (each member's as its own
 * discover gives them, a 2025-era member's from the InitializeResult the bridge recorded). */
static int discover(modern_fed_t *mf)
{
    fed_t *f = &mf->f;
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    json_object **results = apr_pcalloc(p, sizeof(*results) * (apr_size_t)f->n), *merged, *info;
    const char **names = apr_pcalloc(p, sizeof(*names) * (apr_size_t)f->n);
    const char *why, *failures = "", *text, *out;
    int i, rc, known = 0;

    if ((rc = open_stream(mf)) != OK) {
        return rc;
    }
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        names[i] = m->mc->fed.name;
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
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "federation: server/discover: "
                          "member %s is left out: %s", names[i], why);
            failures = apr_psprintf(p, "%s%s%s: %s", failures, *failures ? "; " : "", names[i],
                                    why);
            continue;
        }
        known++;
    }
    if (!known) {
        return answer(mf, HTTP_BAD_GATEWAY, mcp_jsonrpc_error_body(p, q->body->msgs[0].id,
            MCP_JSONRPC_BACKEND_ERROR, apr_psprintf(p, "Bad Gateway: no member of this "
            "endpoint could say what it serves: %s", failures), NULL), 0);
    }
    info = gateway_info(p, f->n);
    merged = mcp_fed_merge_initialize(p, results, names, f->n, mf->version, info);
    json_object_put(info);
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

/* The client's request for member i: its params.cursor the member's own (or none). */
static json_object *request_for(mcp_req_t *q, const char *cursor)
{
    json_object *copy = mcp_jsonrpc_parse_value(q->r->pool, q->raw, q->raw_len), *ps;

    if (!json_object_object_get_ex(copy, "params", &ps) || !ps) {
        ps = json_object_new_object();
        json_object_object_add(copy, "params", ps);
    }
    if (cursor) {
        json_object_object_add(ps, "cursor", json_object_new_string(cursor));
    }
    else {
        json_object_object_del(ps, "cursor");
    }
    return copy;
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
        if (want[i] && (why = prepare(mf, m, request_for(q, cursors[i]), 0))) {
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
            if ((why = prepare(mf, m, request_for(q, cursors[i]), 1))) {
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
    m->q.member = rm;
    m->q.raw = mcp_jsonrpc_to_string(p, rewritten, &m->q.raw_len);
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
    int index = -1, i;

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
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                             "subscriptions/listen is not served on a federated endpoint yet "
                             "(a 2025-era session's GET stream merges its members' "
                             "notifications)");
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
    for (i = 0; i < mf->f.n && index < 0; i++) {
        if (!mf->f.fed[i].prefix || !*mf->f.fed[i].prefix) {
            index = i;
        }
    }
    if (index < 0) {
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                             "%s (this endpoint federates its members' tools, prompts and "
                             "resources; no member is unprefixed to take other methods)",
                             mcp_text_quote(p, msg->method, strlen(msg->method), 100));
    }
    return routed(mf, index, mcp_jsonrpc_parse_value(p, q->raw, q->raw_len));
}
