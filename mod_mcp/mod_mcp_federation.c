/* mod_mcp_federation — see mod_mcp_federation.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_federation.h"
#include "mcp_http.h"
#include "mcp_id.h"
#include "mcp_sse.h"
#include "mcp_store_members.h"
#include "mcp_text.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_federation_private.h"
#include "mod_mcp_members.h"
#include "mod_mcp_relay.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* (Not PACKAGE_VERSION: httpd's ap_config_auto.h defines that one, empty.) */
#ifndef MOD_MCP_VERSION
#define MOD_MCP_VERSION "dev"
#endif

/* ---- the members of one request ---------------------------------------------------------- */

void mcp_federated_init(fed_t *f, mcp_req_t *q)
{
    const apr_array_header_t *members = q->conf->members;
    int i;

    memset(f, 0, sizeof(*f));
    f->q = q;
    f->n = members->nelts;
    f->m = apr_pcalloc(q->r->pool, sizeof(*f->m) * (apr_size_t)f->n);
    f->fed = mcp_members_fed(q->r->pool, members);
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        m->mc = APR_ARRAY_IDX(members, i, const mcp_member_conf_t *);
        m->conf = *q->conf;
        m->conf.backend = m->mc->target;
        if (m->mc->headers) {
            m->conf.backend_headers = (apr_array_header_t *)m->mc->headers;
        }
        if (m->mc->tls) {
            m->conf.backend_tls = (mcp_backend_tls_t *)m->mc->tls;
        }
        m->conf.members = NULL;   /* (backend_spec stays the endpoint's: its sessions') */
        m->q = *q;
        m->q.conf = &m->conf;
        m->q.member = NULL;
    }
}

member_t *mcp_federated_member(fed_t *f, const char *name)
{
    int i;

    for (i = 0; name && i < f->n; i++) {
        if (strcmp(f->m[i].mc->fed.name, name) == 0) {
            return &f->m[i];
        }
    }
    return NULL;
}

/* The session's member rows (mcp_store_member_t) into f's members. */
static void take_rows(fed_t *f, const apr_array_header_t *rows)
{
    int i;

    for (i = 0; i < rows->nelts; i++) {
        const mcp_store_member_t *row = &APR_ARRAY_IDX(rows, i, mcp_store_member_t);
        member_t *m = mcp_federated_member(f, row->member);

        if (m) {   /* a member configured no more is left alone */
            m->row = *row;
        }
    }
}

mcp_store_status_t mcp_federated_load(fed_t *f, const char *session_id)
{
    apr_array_header_t *rows;
    mcp_store_status_t st;

    st = mcp_store_members_get(mcp_req_db(f->q), f->q->r->pool, session_id, &rows,
                               &f->client_info, &f->client_capabilities);
    if (st == MCP_STORE_OK) {
        take_rows(f, rows);
        f->client_read = 1;
    }
    return st;
}

int mcp_federated_open(const member_t *m)
{
    return m->row.member && m->row.open;
}

/* ---- asking several members at once -------------------------------------------------------- */

static int collect(void *baton, const char *json, apr_size_t len)
{
    member_t *m = baton;

    APR_ARRAY_PUSH(m->messages, const char *) = apr_pstrmemdup(m->q.r->pool, json, len);
    return 0;
}

void mcp_federated_fan_out(fed_t *f, int opening, apr_interval_time_t timeout)
{
    apr_pool_t *p = f->q->r->pool;
    mcp_exchange_t **xs = apr_pcalloc(p, sizeof(*xs) * (apr_size_t)f->n);
    mcp_backend_call_t *calls = apr_pcalloc(p, sizeof(*calls) * (apr_size_t)f->n);
    mcp_backend_status_t *sts = apr_pcalloc(p, sizeof(*sts) * (apr_size_t)f->n);
    const char **errs = apr_pcalloc(p, sizeof(*errs) * (apr_size_t)f->n);
    member_t **who = apr_pcalloc(p, sizeof(*who) * (apr_size_t)f->n);
    int i, k = 0;

    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        if (!m->asked) {
            continue;
        }
        mcp_exchange_init(&m->x, &m->q, m);
        m->x.on_message = collect;
        m->messages = apr_array_make(p, 2, sizeof(const char *));
        calls[k].method = "POST";
        calls[k].body = m->body;
        calls[k].body_len = strlen(m->body);
        calls[k].session_id = m->modern ? m->session_id
                              : opening ? NULL : m->row.backend_session_id;
        calls[k].protocol_version = m->modern ? m->version
                                    : opening ? NULL : m->row.protocol_version;
        calls[k].headers = m->modern ? m->headers : NULL;
        calls[k].timeout_ms = (long)apr_time_as_msec(timeout);
        xs[k] = &m->x;
        who[k++] = m;
    }
    mcp_exchange_perform_all(xs, calls, k, sts, errs);
    for (i = 0; i < k; i++) {
        member_t *m = who[i];
        apr_size_t len;
        const char *body;

        m->status = sts[i];
        m->err = errs[i];
        if (m->status == MCP_BACKEND_OK && !m->x.sse && (body = mcp_exchange_body(&m->x, &len))) {
            APR_ARRAY_PUSH(m->messages, const char *) = body;
        }
    }
}

/* Why a member's answer is not the result asked for (NULL: it is; *result then set); *code the
 * member's JSON-RPC error code when it answered with one (else 0; may be NULL). */
static const char *answer_problem_code(apr_pool_t *p, const member_t *m, json_object *id,
                                       json_object **result, const char **text, int *code)
{
    json_object *response, *error, *c;
    const char *why;

    *result = NULL;
    if (code) {
        *code = 0;
    }
    if (m->status != MCP_BACKEND_OK) {
        return apr_psprintf(p, "%s", m->err ? m->err : "the exchange failed");
    }
    if (m->x.response.status != HTTP_OK) {
        return apr_psprintf(p, "it answered HTTP %ld", m->x.response.status);
    }
    if (!(response = mcp_exchange_response_to(p, m->messages, id, text))) {
        return "its answer holds no response to the request";
    }
    if (json_object_object_get_ex(response, "error", &error)) {
        why = mcp_jsonrpc_get_string(error, "message");
        if (code && json_object_object_get_ex(error, "code", &c)
            && json_object_is_type(c, json_type_int)) {
            *code = json_object_get_int(c);
        }
        return apr_psprintf(p, "it answered with an error: %s",
                            why ? mcp_text_quote(p, why, strlen(why), 200) : "(no message)");
    }
    if (!json_object_object_get_ex(response, "result", result)
        || !json_object_is_type(*result, json_type_object)) {
        return "its response has no result object";
    }
    return NULL;
}

static const char *answer_problem(apr_pool_t *p, const member_t *m, json_object *id,
                                  json_object **result, const char **text)
{
    return answer_problem_code(p, m, id, result, text, NULL);
}

/* ---- opening members' sessions -------------------------------------------------------------- */

/* What the exchange of initialize with m gave: its row (open, or failed with the reason);
 * *result its InitializeResult when open. */
static void settle_opening(fed_t *f, member_t *m, json_object *id, json_object **result)
{
    apr_pool_t *p = f->q->r->pool;
    const char *why, *text = NULL, *version = NULL;

    memset(&m->row, 0, sizeof(m->row));
    m->row.member = m->mc->fed.name;
    m->row.backend_url = m->mc->spec;
    why = answer_problem(p, m, id, result, &text);
    if (!why && m->x.response.session_id
        && !mcp_http_session_id_is_valid(m->x.response.session_id)) {
        why = "its Mcp-Session-Id is not 1 to 256 visible ASCII characters";
    }
    if (!why) {
        version = mcp_jsonrpc_get_string(*result, "protocolVersion");
        if (!mcp_protocol_session(version)) {
            why = apr_psprintf(p, "it negotiated protocol version '%s', which the gateway does "
                               "not serve with sessions", version ? version : "none");
        }
    }
    if (why) {
        *result = NULL;
        m->row.open = 0;
        m->row.error = why;
        if (m->status == MCP_BACKEND_OK && m->x.response.session_id
            && mcp_http_session_id_is_valid(m->x.response.session_id)) {
            mcp_req_end_backend_session(&m->q, m->x.response.session_id, "initialize failed");
        }
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, f->q->r, "federation: member %s (%s) did not "
                      "start a session: %s", m->mc->fed.name, m->mc->spec, why);
        return;
    }
    m->row.open = 1;
    m->row.backend_session_id = m->x.response.session_id;
    m->row.protocol_version = version;
    m->row.initialize_result = mcp_jsonrpc_to_string(p, *result, NULL);
}

/* The body of an initialize (id "mcp-federation-open") the client would have sent m. */
static const char *initialize_body(fed_t *f)
{
    return apr_psprintf(f->q->r->pool, "{\"jsonrpc\":\"2.0\",\"id\":\"mcp-federation-open\","
                        "\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\","
                        "\"capabilities\":%s,\"clientInfo\":%s}}",
                        f->q->session->protocol_version,
                        f->client_capabilities ? f->client_capabilities : "{}",
                        f->client_info ? f->client_info
                                       : "{\"name\":\"mod_mcp\",\"version\":\"" MOD_MCP_VERSION "\"}");
}

/* Opens again, at once, the sessions of the members in want that are not open (their
 * initialize, then notifications/initialized), and stores how it went. Members that stay shut
 * are logged. */
void mcp_federated_reopen(fed_t *f, const int *want)
{
    apr_pool_t *p = f->q->r->pool;
    json_object *id = json_object_new_string("mcp-federation-open"), *result;
    mcp_store_member_t *rows = apr_pcalloc(p, sizeof(*rows) * (apr_size_t)f->n);
    member_t **who = apr_pcalloc(p, sizeof(*who) * (apr_size_t)f->n);
    int *stored = apr_pcalloc(p, sizeof(int) * (apr_size_t)f->n);
    const char *body;
    int i, k = 0, lost = 0;

    for (i = 0; i < f->n; i++) {
        k += want[i] && !mcp_federated_open(&f->m[i]);
    }
    if (k > 0 && !f->client_read && mcp_federated_load(f, f->q->session->id) != MCP_STORE_OK) {
        /* (The rows came with the stream's open; the client's initialize did not.) */
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, f->q->r, "federation: reading the members of "
                      "session %s failed (they are opened again next time): %s",
                      mcp_id_tag(p, f->q->session->id), mcp_req_db(f->q)->error);
        k = 0;
    }
    if (k == 0) {
        json_object_put(id);
        return;
    }
    body = initialize_body(f);
    k = 0;
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];
        m->asked = want[i] && !mcp_federated_open(m);
        m->body = body;
        k += m->asked;
    }
    if (k == 0) {   /* another request opened them meanwhile */
        json_object_put(id);
        return;
    }
    mcp_federated_fan_out(f, 1, f->q->conf->backend_timeout);
    k = 0;
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        if (!m->asked) {
            continue;
        }
        settle_opening(f, m, id, &result);
        who[k] = m;
        rows[k++] = m->row;
        if (mcp_federated_open(m)) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, f->q->r, "federation: session %s: member %s "
                          "opened again (backend session %s)",
                          mcp_id_tag(p, f->q->session->id), m->mc->fed.name,
                          mcp_id_tag(p, m->row.backend_session_id));
            m->body = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
        }
        else {
            m->asked = 0;
        }
    }
    json_object_put(id);
    for (i = 0; i < f->n; i++) {
        f->m[i].asked = f->m[i].asked && mcp_federated_open(&f->m[i]);
    }
    mcp_federated_fan_out(f, 0, f->q->conf->backend_timeout);
    if (mcp_store_members_reopened(mcp_req_db(f->q), p, f->q->session->id, rows, k, stored)
        != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, f->q->r, "federation: storing the members of "
                      "session %s failed (they are opened again next time): %s",
                      mcp_id_tag(p, f->q->session->id), mcp_req_db(f->q)->error);
        return;
    }
    /* Another request opened some of them meanwhile: its session is the member's, this one's
     * ends. */
    for (i = 0; i < k; i++) {
        if (!stored[i]) {
            if (mcp_federated_open(who[i])) {
                mcp_req_end_backend_session(&who[i]->q, who[i]->row.backend_session_id,
                                            "opened twice at once");
            }
            memset(&who[i]->row, 0, sizeof(who[i]->row));
            lost++;
        }
    }
    if (lost && mcp_federated_load(f, f->q->session->id) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, f->q->r, "federation: reading the members of "
                      "session %s failed: %s", mcp_id_tag(p, f->q->session->id),
                      mcp_req_db(f->q)->error);
    }
}

/* Non-zero when m answered as a member that lost its session does (it restarted): 404 with a
 * JSON-RPC error. */
static int lost_session(apr_pool_t *p, const member_t *m)
{
    const char *body;

    return m->status == MCP_BACKEND_OK && m->x.response.status == HTTP_NOT_FOUND
        && m->messages && m->messages->nelts == 1
        && (body = APR_ARRAY_IDX(m->messages, 0, const char *)) != NULL
        && mcp_jsonrpc_is_error_message(p, body, strlen(body));
}

/* fan_out to the open members asked, and once more to each that lost its session meanwhile:
 * it is marked failed, opened again, and asked again (its answer replaces the 404). */
static void fan_out_open(fed_t *f, apr_interval_time_t timeout)
{
    apr_pool_t *p = f->q->r->pool;
    const char **bodies = apr_pcalloc(p, sizeof(*bodies) * (apr_size_t)f->n);
    int *lost = apr_pcalloc(p, sizeof(int) * (apr_size_t)f->n);
    int i, n = 0;

    mcp_federated_fan_out(f, 0, timeout);
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        if (!m->asked || !lost_session(p, m)) {
            continue;
        }
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, f->q->r, "federation: session %s: member %s "
                      "no longer knows its session; it is opened again",
                      mcp_id_tag(p, f->q->session->id), m->mc->fed.name);
        if (mcp_store_member_lost(mcp_req_db(f->q), p, f->q->session->id, m->mc->fed.name,
                                  m->row.backend_session_id,
                                  "it no longer knew its session (HTTP 404)") != MCP_STORE_OK) {
            continue;
        }
        m->row.open = 0;
        m->row.error = "it no longer knew its session (HTTP 404)";
        bodies[i] = m->body;
        lost[i] = 1;
        n++;
    }
    if (n == 0) {
        return;
    }
    mcp_federated_reopen(f, lost);
    for (i = 0; i < f->n; i++) {
        f->m[i].asked = lost[i] && mcp_federated_open(&f->m[i]);
        f->m[i].body = lost[i] ? bodies[i] : f->m[i].body;
    }
    mcp_federated_fan_out(f, 0, timeout);
}

/* ---- initialize ---------------------------------------------------------------------------- */

/* The client is told which members are missing: a notifications/message before the response
 * (an SSE answer, when it accepts one). */
static const char *missing_members_notice(fed_t *f)
{
    apr_pool_t *p = f->q->r->pool;
    json_object *msg, *params, *data;
    const char *text;
    int i, missing = 0;

    data = json_object_new_object();
    for (i = 0; i < f->n; i++) {
        if (!mcp_federated_open(&f->m[i])) {
            json_object_object_add(data, f->m[i].mc->fed.name,
                                   json_object_new_string(f->m[i].row.error));
            missing++;
        }
    }
    if (!missing) {
        json_object_put(data);
        return NULL;
    }
    msg = json_object_new_object();
    params = json_object_new_object();
    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "method", json_object_new_string("notifications/message"));
    json_object_object_add(params, "level", json_object_new_string("warning"));
    json_object_object_add(params, "logger", json_object_new_string("mod_mcp federation"));
    json_object_object_add(params, "data", json_object_new_string(apr_psprintf(
        p, "%d member(s) of this endpoint are unavailable; their tools, prompts and resources "
        "are missing until they come back: %s", missing,
        json_object_to_json_string_ext(data, JSON_C_TO_STRING_PLAIN))));
    json_object_put(data);
    json_object_object_add(msg, "params", params);
    text = mcp_jsonrpc_to_string(p, msg, NULL);
    json_object_put(msg);
    return text;
}

int mcp_federation_initialize(mcp_req_t *q, mcp_store_session_t *session,
                              const char *request_text)
{
    request_rec *r = q->r;
    json_object *request = q->body->msgs[0].obj, *params = NULL, *v, *merged, *info, *response;
    json_object **results;
    const char **names, *requested = NULL, *response_text, *notice, *why;
    const mcp_protocol_t *rev;
    mcp_store_member_t *rows;
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_status_t stored;
    fed_t f;
    int i, open = 0;

    mcp_federated_init(&f, q);
    results = apr_pcalloc(r->pool, sizeof(*results) * (apr_size_t)f.n);
    names = apr_pcalloc(r->pool, sizeof(*names) * (apr_size_t)f.n);
    rows = apr_pcalloc(r->pool, sizeof(*rows) * (apr_size_t)f.n);
    for (i = 0; i < f.n; i++) {
        f.m[i].asked = 1;
        f.m[i].body = apr_pstrmemdup(r->pool, q->raw, q->raw_len);
    }
    mcp_federated_fan_out(&f, 1, q->conf->backend_timeout);
    why = "";
    for (i = 0; i < f.n; i++) {
        settle_opening(&f, &f.m[i], q->id, &results[i]);
        names[i] = f.m[i].mc->fed.name;
        rows[i] = f.m[i].row;
        open += mcp_federated_open(&f.m[i]);
        if (!mcp_federated_open(&f.m[i])) {
            why = apr_psprintf(r->pool, "%s%s%s: %s", why, *why ? "; " : "", names[i],
                               f.m[i].row.error);
        }
    }
    if (open == 0) {
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR, "Bad Gateway: no "
                             "member of this endpoint could start a session: %s", why);
    }

    /* The client's revision when the gateway serves it, else the newest it does; each member
     * keeps the one it negotiated (its requests carry that one). */
    if (json_object_object_get_ex(request, "params", &params)
        && json_object_object_get_ex(params, "protocolVersion", &v)
        && json_object_is_type(v, json_type_string)) {
        requested = json_object_get_string(v);
    }
    rev = mcp_protocol_session(requested);
    if (!rev) {
        rev = mcp_protocol_session(mcp_protocol_latest());
    }
    info = json_object_new_object();
    json_object_object_add(info, "name", json_object_new_string("mod_mcp"));
    json_object_object_add(info, "title", json_object_new_string(apr_psprintf(
        r->pool, "mod_mcp federation of %d member(s)", f.n)));
    json_object_object_add(info, "version", json_object_new_string(MOD_MCP_VERSION));
    merged = mcp_fed_merge_initialize(r->pool, results, names, f.n, rev->version, info);
    json_object_put(info);
    response = json_object_new_object();
    json_object_object_add(response, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(response, "id", json_object_get(q->id));
    json_object_object_add(response, "result", merged);
    response_text = mcp_jsonrpc_to_string(r->pool, response, NULL);

    session->backend_url = q->conf->backend_spec;
    session->trace_id = mcp_req_trace_id(r);
    session->backend_session_id = NULL;
    session->protocol_version = rev->version;
    session->principal = r->user;
    session->client_info = params && json_object_object_get_ex(params, "clientInfo", &v)
        ? mcp_jsonrpc_to_string(r->pool, v, NULL) : NULL;
    session->client_capabilities = params && json_object_object_get_ex(params, "capabilities", &v)
        ? mcp_jsonrpc_to_string(r->pool, v, NULL) : NULL;
    session->server_info = json_object_object_get_ex(merged, "serverInfo", &v)
        ? mcp_jsonrpc_to_string(r->pool, v, NULL) : NULL;
    json_object_put(response);

    stored = mcp_store_session_insert_admitted(mcp_req_db(q), r->pool, session,
                                               mcp_req_holder(q), request_text, response_text,
                                               q->conf->max_sessions,
                                               q->conf->max_principal_sessions,
                                               mcp_req_idle_secs(q), &refused);
    if (stored == MCP_STORE_OK) {
        stored = mcp_store_members_put(mcp_req_db(q), r->pool, session->id, rows, f.n);
        if (stored != MCP_STORE_OK) {
            q->session = session;
            mcp_req_terminate_session(q, "backend");
            q->session = NULL;
        }
    }
    if (stored != MCP_STORE_OK) {
        for (i = 0; i < f.n; i++) {
            if (mcp_federated_open(&f.m[i])) {
                mcp_req_end_backend_session(&f.m[i].q, f.m[i].row.backend_session_id,
                                            "initialize failed");
            }
        }
        return stored == MCP_STORE_LIMIT ? mcp_req_refused(q, refused)
                                         : mcp_req_store_failed(q, stored);
    }
    mcp_req_set_session_tag(r, session->id);
    mcp_req_note_protocol(r, rev->version);
    mcp_status_count(MCP_STAT_SESSIONS, 1);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "session %s started (protocol %s, user %s, "
                  "federation: %d of %d member(s) open%s%s)", mcp_id_tag(r->pool, session->id),
                  rev->version, r->user ? r->user : "-", open, f.n, *why ? "; missing: " : "",
                  why);

    apr_table_setn(r->headers_out, "Mcp-Session-Id", session->id);
    notice = missing_members_notice(&f);
    r->status = HTTP_OK;
    if (notice && mcp_http_accepts(apr_table_get(r->headers_in, "Accept"),
                                   "text/event-stream")) {
        apr_bucket_brigade *bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
        apr_size_t len;
        const char *ev;

        mcp_req_set_sse_headers(r);
        ev = mcp_sse_event_format(r->pool, NULL, NULL, notice, -1, &len);
        apr_brigade_write(bb, NULL, NULL, ev, len);
        ev = mcp_sse_event_format(r->pool, NULL, NULL, response_text, -1, &len);
        apr_brigade_write(bb, NULL, NULL, ev, len);
        ap_pass_brigade(r->output_filters, bb);
        return DONE;
    }
    ap_set_content_type(r, "application/json");
    ap_rwrite(response_text, (int)strlen(response_text), r);
    return DONE;
}

/* ---- answers the gateway makes on a stored stream ------------------------------------------ */

/* Records the request (its stream and priming row, as for any request), so that what the
 * gateway answers is stored, resumable and audited like a backend's answer. OK with *st. */
/* Opens the stream of the gateway's own answer; the session is checked (and touched) and every
 * member's row read into f by the same statement. */
static int open_answer_stream(fed_t *f, mcp_stream_t *st)
{
    mcp_req_t *q = f->q;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    apr_int64_t stream_id = 0;
    int rc;

    q->members = apr_array_make(q->r->pool, f->n, sizeof(mcp_store_member_t));
    rc = mcp_req_open_request(q, mcp_jsonrpc_to_string(q->r->pool, msg->id, NULL), msg->method,
                              &stream_id);
    take_rows(f, q->members);
    q->members = NULL;
    if (rc != OK) {
        return rc;
    }
    mcp_req_note_stream(q->r, stream_id);
    mcp_status_count(MCP_STAT_CALLS, 1);
    mcp_stream_init(st, q, stream_id, MCP_STORE_SEQ_PRIMING + 1);
    mcp_stream_own(st);
    mcp_stream_start_sse(st, q->rev->priming ? MCP_STORE_SEQ_PRIMING : -1);
    return OK;
}

static int finish_answer(mcp_stream_t *st, const char *body)
{
    mcp_stream_add(st, body, strlen(body));
    mcp_stream_finish(st, st->broken ? "failed" : "complete");
    return DONE;
}

static int finish_result(mcp_stream_t *st, json_object *id, json_object *result)
{
    apr_pool_t *p = st->q->r->pool;
    json_object *response = json_object_new_object();
    const char *body;

    json_object_object_add(response, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(response, "id", json_object_get(id));
    json_object_object_add(response, "result", result);
    body = mcp_jsonrpc_to_string(p, response, NULL);
    json_object_put(response);
    return finish_answer(st, body);
}

/* ---- the lists ------------------------------------------------------------------------------ */

int mcp_federated_list_cursor(fed_t *f, json_object *params, int *want, const char **cursors,
                              const char **why)
{
    apr_pool_t *p = f->q->r->pool;
    json_object *cursor = NULL;
    apr_array_header_t *pairs = NULL;
    int i;

    if (!params || !json_object_object_get_ex(params, "cursor", &cursor) || !cursor) {
        for (i = 0; i < f->n; i++) {
            want[i] = 1;
        }
        return 0;
    }
    if (!json_object_is_type(cursor, json_type_string)
        || mcp_fed_cursor_decode(p, json_object_get_string(cursor), &pairs) != 0) {
        *why = "Invalid params: the cursor is not one this endpoint gave";
        return -1;
    }
    for (i = 0; i < pairs->nelts; i++) {
        const mcp_fed_cursor_pair_t *pair = &APR_ARRAY_IDX(pairs, i, mcp_fed_cursor_pair_t);
        member_t *m = mcp_federated_member(f, pair->member);

        if (!m) {
            *why = "Invalid params: the cursor names a member this endpoint does not have";
            return -1;
        }
        want[m - f->m] = 1;
        cursors[m - f->m] = pair->cursor;
    }
    return 0;
}

json_object *mcp_federated_list_merged(fed_t *f, const int *want, const char **cursors,
                                       json_object *id, const char *method, const char **error)
{
    apr_pool_t *p = f->q->r->pool;
    json_object **results = apr_pcalloc(p, sizeof(*results) * (apr_size_t)f->n), *merged;
    const char **names = apr_pcalloc(p, sizeof(*names) * (apr_size_t)f->n);
    const char *next = NULL, *failures = "";
    const char *refused = NULL;   /* a member refused the cursor the client's carried for it */
    int i, answered = 0;

    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];
        const char *why, *text = NULL;
        json_object *result;
        int code = 0;

        names[i] = m->mc->fed.name;
        if (!want[i]) {
            continue;
        }
        /* (A session's member that lost its session was asked again: it is open now.) */
        why = !(m->modern ? m->asked : mcp_federated_open(m))
                        ? apr_psprintf(p, "unavailable (%s)",
                                       m->row.error ? m->row.error : "not asked")
                        : answer_problem_code(p, m, m->ask_id ? m->ask_id : id, &result, &text,
                                              &code);
        if (!refused && cursors[i] && code == MCP_JSONRPC_INVALID_PARAMS) {
            refused = apr_psprintf(p, "%s: %s", m->mc->fed.name, why);
        }
        if (!why && m->mc->fed.max_answer && strlen(text) > m->mc->fed.max_answer) {
            why = apr_psprintf(p, "its answer (%" APR_SIZE_T_FMT " bytes) exceeds its "
                               "MaxAnswerSize (%" APR_SIZE_T_FMT ")", strlen(text),
                               m->mc->fed.max_answer);
        }
        if (why) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, f->q->r, "federation: %s: member %s is "
                          "left out of the answer: %s", method, m->mc->fed.name, why);
            failures = apr_psprintf(p, "%s%s%s: %s", failures, *failures ? "; " : "",
                                    m->mc->fed.name, why);
            continue;
        }
        mcp_fed_list_rewrite(p, &f->fed[i], method, result);
        results[i] = result;
        answered++;
    }
    if (refused) {
        /* A cursor a member refuses is the client's mistake (a single backend's -32602), and
         * the page is refused whole: a page without that member would end its listing
         * silently. */
        *error = mcp_jsonrpc_error_body(p, id, MCP_JSONRPC_INVALID_PARAMS, apr_psprintf(p,
            "Invalid params: the cursor is not one this endpoint gave (%s)", refused), NULL);
        return NULL;
    }
    if (answered == 0) {
        *error = mcp_jsonrpc_error_body(p, id, MCP_JSONRPC_BACKEND_ERROR, apr_psprintf(p,
            "Bad Gateway: no member answered %s: %s", method, failures), NULL);
        return NULL;
    }
    if (!(merged = mcp_fed_list_merge(p, method, results, names, f->n, &next, NULL))) {
        *error = mcp_jsonrpc_error_body(p, id, MCP_JSONRPC_INTERNAL_ERROR, "Internal Error: the "
                                        "members' cursors do not fit in one cursor of this "
                                        "endpoint", NULL);
    }
    return merged;
}

json_object *mcp_federated_list_request(mcp_req_t *q, const char *cursor)
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

int mcp_federated_unprefixed(const fed_t *f)
{
    int i;

    for (i = 0; i < f->n; i++) {
        if (!f->fed[i].prefix || !*f->fed[i].prefix) {
            return i;
        }
    }
    return -1;
}

/* One page of a list method: the cursor's members (every member for the first page), asked at
 * once, their pages rewritten and merged. */
static int list_page(fed_t *f)
{
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    json_object *params = NULL, *merged;
    const char *why = NULL, *error = NULL;
    int *want = apr_pcalloc(p, sizeof(int) * (apr_size_t)f->n);
    const char **cursors = apr_pcalloc(p, sizeof(char *) * (apr_size_t)f->n);
    mcp_stream_t st;
    int i, rc;

    json_object_object_get_ex(msg->obj, "params", &params);
    if (mcp_federated_list_cursor(f, params, want, cursors, &why) != 0) {
        return mcp_req_error(q, HTTP_OK, MCP_JSONRPC_INVALID_PARAMS, "%s", why);
    }
    if ((rc = open_answer_stream(f, &st)) != OK) {
        return rc;
    }
    mcp_federated_reopen(f, want);

    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];

        m->asked = want[i] && mcp_federated_open(m);
        if (m->asked) {
            m->body = mcp_jsonrpc_to_string(p, mcp_federated_list_request(q, cursors[i]), NULL);
        }
    }
    fan_out_open(f, q->conf->backend_timeout);
    if (!(merged = mcp_federated_list_merged(f, want, cursors, msg->id, msg->method, &error))) {
        return finish_answer(&st, error);
    }
    return finish_result(&st, msg->id, merged);
}

/* ping and logging/setLevel: every open member, one empty result. */
static int ask_all(fed_t *f)
{
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_stream_t st;
    int i, rc;

    if ((rc = open_answer_stream(f, &st)) != OK) {
        return rc;
    }
    for (i = 0; i < f->n; i++) {
        f->m[i].asked = mcp_federated_open(&f->m[i]);
        f->m[i].body = apr_pstrmemdup(p, q->raw, q->raw_len);
    }
    fan_out_open(f, q->conf->backend_timeout);
    for (i = 0; i < f->n; i++) {
        json_object *result;
        const char *text, *why;

        if (f->m[i].asked && (why = answer_problem(p, &f->m[i], msg->id, &result, &text))) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "federation: %s: member %s: %s",
                          msg->method, f->m[i].mc->fed.name, why);
        }
    }
    return finish_result(&st, msg->id, json_object_new_object());
}

/* ---- a request routed to its member --------------------------------------------------------- */

/* A request for one member: the relay checks the session, opens the stream and reads the
 * member's row in one statement, then asks mcp_federation_member_ready. */
static int routed(fed_t *f, int index, json_object *rewritten)
{
    mcp_req_t *q = f->q;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    member_t *m = &f->m[index];
    mcp_req_member_t *rm = apr_pcalloc(q->r->pool, sizeof(*rm));

    rm->fed = &f->fed[index];
    rm->endpoint = q->conf;
    rm->row.member = m->mc->fed.name;
    rm->row.backend_url = m->mc->spec;
    rm->body = mcp_jsonrpc_to_string(q->r->pool, rewritten, &rm->body_len);
    rm->method = msg->method;
    m->q.member = rm;
    return mcp_relay_requests(&m->q);
}

const char *mcp_federation_member_ready(mcp_req_t *q)
{
    mcp_req_t endpoint_q = *q;
    mcp_store_status_t st;
    member_t *m;
    int *want;
    fed_t f;

    if (q->member->row.open) {
        return NULL;
    }
    endpoint_q.conf = q->member->endpoint;
    endpoint_q.member = NULL;
    mcp_federated_init(&f, &endpoint_q);
    if ((st = mcp_federated_load(&f, q->session->id)) != MCP_STORE_OK) {
        return apr_psprintf(q->r->pool, "the session's members could not be read: %s",
                            mcp_req_db(q)->error);
    }
    if (!(m = mcp_federated_member(&f, q->member->fed->name))) {
        return "the member is no longer configured";
    }
    want = apr_pcalloc(q->r->pool, sizeof(int) * (apr_size_t)f.n);
    want[m - f.m] = 1;
    mcp_federated_reopen(&f, want);
    if (!mcp_federated_open(m)) {
        return apr_psprintf(q->r->pool, "the member that serves this request (%s) is "
                            "unavailable: %s", m->mc->fed.name, m->row.error);
    }
    q->member->row = m->row;
    return NULL;
}

static int one_request(fed_t *f)
{
    mcp_req_t *q = f->q;
    apr_pool_t *p = q->r->pool;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    json_object *copy = NULL;
    const char *why = NULL;
    int index = -1, i;

    switch (mcp_fed_method_kind(msg->method)) {
    case MCP_FED_ROUTED:
        copy = mcp_jsonrpc_parse_value(p, q->raw, q->raw_len);
        if ((index = mcp_fed_route(p, f->fed, f->n, copy, &why)) < 0) {
            return mcp_req_error(q, HTTP_OK, MCP_JSONRPC_INVALID_PARAMS, "%s", why);
        }
        break;
    case MCP_FED_LIST:
    case MCP_FED_ALL:
        break;
    default:
        /* Methods the gateway does not know go to the unprefixed member, as they are. */
        if ((index = mcp_federated_unprefixed(f)) < 0) {
            return mcp_req_error(q, HTTP_OK, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                                 "%s (this endpoint federates its members' tools, prompts and "
                                 "resources; no member is unprefixed to take other methods)",
                                 mcp_text_quote(p, msg->method, strlen(msg->method), 100));
        }
        copy = mcp_jsonrpc_parse_value(p, q->raw, q->raw_len);
        break;
    }
    if (index >= 0) {
        return routed(f, index, copy);
    }
    /* The members' rows come with the answer's stream's open, which checks the session. */
    if ((i = mcp_req_check_session_header(q)) != OK) {
        return i;
    }
    return mcp_fed_method_kind(msg->method) == MCP_FED_LIST ? list_page(f) : ask_all(f);
}

/* ---- notifications and the client's answers ------------------------------------------------- */

/* Where one of the client's messages goes: to member index with body (0 or more of them). */
static void deliver(fed_t *f, const mcp_jsonrpc_msg_t *msg)
{
    apr_pool_t *p = f->q->r->pool;
    apr_size_t len;
    const char *text = mcp_jsonrpc_to_string(p, msg->obj, &len);
    json_object *copy = mcp_jsonrpc_parse_value(p, text, len);
    json_object *params, *request_id, *own;
    const char *name = NULL;
    member_t *m;
    int i;

    for (i = 0; i < f->n; i++) {
        f->m[i].asked = 0;
    }
    if (msg->kind == MCP_MSG_RESPONSE || msg->kind == MCP_MSG_ERROR) {
        /* An answer to a member's request: to that member, with its own id. */
        if (mcp_fed_untag_id(p, msg->id, &name, &own) != 0 || !(m = mcp_federated_member(f, name))) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, f->q->r, "federation: the client answered "
                          "id %s, which no member's request had; dropped",
                          mcp_jsonrpc_to_string(p, msg->id, NULL));
            return;
        }
        json_object_object_add(copy, "id", own);
        m->asked = mcp_federated_open(m);
    }
    else if (msg->method && strcmp(msg->method, "notifications/cancelled") == 0
             && json_object_object_get_ex(copy, "params", &params)
             && json_object_object_get_ex(params, "requestId", &request_id)
             && mcp_fed_untag_id(p, request_id, &name, &own) == 0
             && (m = mcp_federated_member(f, name))) {
        json_object_object_add(params, "requestId", own);
        m->asked = mcp_federated_open(m);
    }
    else {
        for (i = 0; i < f->n; i++) {
            f->m[i].asked = mcp_federated_open(&f->m[i]);
        }
    }
    for (i = 0; i < f->n; i++) {
        f->m[i].body = mcp_jsonrpc_to_string(p, copy, NULL);
    }
    mcp_federated_fan_out(f, 0, f->q->conf->backend_timeout);
    for (i = 0; i < f->n; i++) {
        member_t *mm = &f->m[i];
        if (mm->asked && (mm->status != MCP_BACKEND_OK || mm->x.response.status >= 300)) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, f->q->r, "federation: member %s did not "
                          "take the client's %s: %s", mm->mc->fed.name,
                          msg->method ? msg->method : "response",
                          mm->status != MCP_BACKEND_OK ? mm->err
                          : apr_psprintf(p, "HTTP %ld", mm->x.response.status));
        }
    }
}

static int messages_only(fed_t *f)
{
    mcp_req_t *q = f->q;
    const char *messages;
    mcp_store_status_t st;
    int i, rc;

    if ((rc = mcp_req_load_session_posted(q)) != OK) {
        return rc;
    }
    if ((st = mcp_federated_load(f, q->session->id)) != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    messages = q->body->is_batch ? apr_pstrmemdup(q->r->pool, q->raw, q->raw_len)
        : apr_pstrcat(q->r->pool, "[", apr_pstrmemdup(q->r->pool, q->raw, q->raw_len), "]",
                      NULL);
    st = mcp_store_events_append(mcp_req_db(q), q->r->pool, q->session, 0, 0, "in", messages);
    if (st != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    for (i = 0; i < q->body->count; i++) {
        deliver(f, &q->body->msgs[i]);
    }
    return mcp_req_empty(q, HTTP_ACCEPTED);
}

int mcp_federation_post(mcp_req_t *q)
{
    fed_t f;

    mcp_federated_init(&f, q);
    if (q->body->n_requests > 0) {
        if (q->body->is_batch) {
            return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST, "Invalid "
                                 "Request: a federated endpoint takes one request per POST (a "
                                 "batch may hold notifications and responses only)");
        }
        return one_request(&f);
    }
    return messages_only(&f);
}

/* ---- the relay's hooks ---------------------------------------------------------------------- */

int mcp_federation_outbound(mcp_req_t *q, apr_pool_t *p, json_object *obj, const char **json,
                            apr_size_t *len)
{
    mcp_jsonrpc_msg_t msg;
    const char *answered = NULL;

    mcp_jsonrpc_classify(obj, &msg);
    if (msg.kind == MCP_MSG_RESPONSE) {
        if (!q->member->method || (strcmp(q->member->method, "resources/read") != 0
                                   && strcmp(q->member->method, "tools/call") != 0
                                   && strcmp(q->member->method, "prompts/get") != 0)) {
            return 0;
        }
        answered = q->member->method;
    }
    else if (msg.kind == MCP_MSG_NOTIFICATION) {
        if (strcmp(msg.method, "notifications/resources/updated") != 0
            && strcmp(msg.method, "notifications/cancelled") != 0) {
            return 0;
        }
    }
    else if (msg.kind != MCP_MSG_REQUEST) {
        return 0;
    }
    mcp_fed_outbound(p, q->member->fed, obj, answered);
    *json = mcp_jsonrpc_to_string(p, obj, len);
    return 1;
}

const char *mcp_federation_member_lost(mcp_req_t *q)
{
    apr_pool_t *p = q->r->pool;
    const char *name = q->member->fed->name;

    if (mcp_store_member_lost(mcp_req_db(q), p, q->session->id, name,
                              q->member->row.backend_session_id,
                              "it no longer knew its session (HTTP 404)") != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "federation: marking member %s of session "
                      "%s failed: %s", name, mcp_id_tag(p, q->session->id),
                      mcp_req_db(q)->error);
    }
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "federation: session %s: member %s no "
                  "longer knows its session; it is opened again at the next request",
                  mcp_id_tag(p, q->session->id), name);
    return apr_psprintf(p, "Bad Gateway: the member that serves this request (%s) lost its "
                        "session; it is opened again at the next request", name);
}

/* ---- DELETE --------------------------------------------------------------------------------- */

void mcp_federation_end(mcp_req_t *q, const char *why)
{
    fed_t f;
    int i;

    mcp_federated_init(&f, q);
    if (mcp_federated_load(&f, q->session->id) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "federation: the members of session %s "
                      "were not told that it ended (%s): %s", mcp_id_tag(q->r->pool,
                      q->session->id), why, mcp_req_db(q)->error);
        return;
    }
    for (i = 0; i < f.n; i++) {
        if (mcp_federated_open(&f.m[i])) {
            mcp_store_session_t s = *q->session;
            s.protocol_version = f.m[i].row.protocol_version;
            f.m[i].q.session = &s;
            mcp_req_end_backend_session(&f.m[i].q, f.m[i].row.backend_session_id, why);
        }
    }
}

