/* mod_mcp_modern — see mod_mcp_modern.h. */
#include <string.h>
#include <strings.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_era.h"
#include "mcp_http.h"
#include "mcp_sse.h"
#include "mod_mcp_bridge.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_modern.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

typedef struct modern_t {
    mcp_req_t              *q;
    const mcp_jsonrpc_msg_t *msg;
    mcp_stream_t            st;
    mcp_exchange_t          x;            /* the POST to the backend; answered: the response
                                           * was stored (and the stream ends)               */
    apr_pool_t             *scratch;      /* cleared per message                            */
    int                     finished;     /* the answered stream was ended                  */
    int                     cancelled;    /* the client closed its response first           */
} modern_t;

int mcp_modern_not_allowed(mcp_req_t *q)
{
    apr_table_setn(q->r->headers_out, "Allow", "POST");
    return mcp_req_error(q, HTTP_METHOD_NOT_ALLOWED, MCP_JSONRPC_SERVER_ERROR,
                         "Method Not Allowed: protocol version %s has no %s (no sessions, no "
                         "standalone stream); every message is a POST",
                         apr_table_get(q->r->headers_in, "MCP-Protocol-Version"), q->r->method);
}

int mcp_modern_no_claim(mcp_req_t *q)
{
    return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS,
                         "Invalid params: MCP-Protocol-Version %s needs params._meta[\""
                         MCP_ERA_META_VERSION "\"] in the message (and a 2025 client starts "
                         "with initialize)",
                         apr_table_get(q->r->headers_in, "MCP-Protocol-Version"));
}

/* ---- the backend's answer ------------------------------------------------------------------ */

/* One message from the backend: stored, then sent. Notes the response to the request. */
static int relay_message(modern_t *m, const char *json, apr_size_t len)
{
    json_object *obj;
    mcp_jsonrpc_msg_t msg;

    apr_pool_clear(m->scratch);
    if (!(obj = mcp_jsonrpc_parse_value(m->scratch, json, len))) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, m->q->r, "stream %" APR_INT64_T_FMT ": the "
                      "backend sent a message that is not JSON; dropped", m->st.id);
        return 0;
    }
    mcp_jsonrpc_classify(obj, &msg);
    if ((msg.kind == MCP_MSG_RESPONSE || msg.kind == MCP_MSG_ERROR)
        && json_object_equal(msg.id, m->msg->id)) {
        m->x.answered = apr_time_now();
    }
    return mcp_stream_add(&m->st, json, len);
}

/* The client closed its response before the answer: that cancels the request. */
static int cancelled_now(modern_t *m)
{
    if (m->st.client_gone && !m->x.answered) {
        m->cancelled = 1;
    }
    return m->cancelled;
}

static int on_message(void *baton, const char *json, apr_size_t len)
{
    return relay_message(baton, json, len);
}

static int on_sse(void *baton)
{
    modern_t *m = baton;

    mcp_stream_start_sse(&m->st, -1);
    return cancelled_now(m);
}

/* The response came: the stream ends (the exchange reads the rest of the answer without
 * handing it on). Once. */
static void finish_answered(modern_t *m)
{
    if (!m->finished) {
        m->finished = 1;
        mcp_stream_finish(&m->st, m->st.broken ? "failed" : "complete");
    }
}

/* After each piece of the SSE answer: what came is stored and sent. */
static int after_chunk(void *baton)
{
    modern_t *m = baton;

    if (m->x.answered) {
        finish_answered(m);
        return 0;
    }
    return mcp_stream_commit(&m->st) || cancelled_now(m);
}

static int on_tick(void *baton)
{
    modern_t *m = baton;

    return mcp_stream_tick(&m->st) || cancelled_now(m);
}

/* The request's MCP headers as the client sent them: Mcp-Method, Mcp-Name, Mcp-Param-*. */
static apr_array_header_t *mcp_headers(request_rec *r)
{
    const apr_array_header_t *in = apr_table_elts(r->headers_in);
    const apr_table_entry_t *e = (const apr_table_entry_t *)in->elts;
    apr_array_header_t *out = apr_array_make(r->pool, 4, sizeof(const char *));
    int i;

    for (i = 0; i < in->nelts; i++) {
        if (e[i].key && (strcasecmp(e[i].key, "Mcp-Method") == 0
                         || strcasecmp(e[i].key, "Mcp-Name") == 0
                         || strncasecmp(e[i].key, "Mcp-Param-", 10) == 0)) {
            APR_ARRAY_PUSH(out, const char *) = apr_pstrcat(r->pool, e[i].key, ": ", e[i].val,
                                                            NULL);
        }
    }
    return out;
}

/* Prepares m for a request (stream_id 0: a notification). */
static void modern_init(modern_t *m, mcp_req_t *q, apr_int64_t stream_id)
{
    memset(m, 0, sizeof(*m));
    m->q = q;
    m->msg = &q->body->msgs[0];
    apr_pool_create(&m->scratch, q->r->pool);
    mcp_stream_init(&m->st, q, stream_id, 1);
    mcp_exchange_init(&m->x, q, m);
    m->x.on_message = on_message;
    m->x.on_sse = on_sse;
    m->x.after_chunk = after_chunk;
    m->x.on_tick = on_tick;
}

static mcp_backend_status_t forward(modern_t *m, const char *version, apr_interval_time_t timeout,
                                    const char **err)
{
    mcp_backend_status_t status;

    status = mcp_exchange_post(&m->x, m->q->raw, m->q->raw_len, version, mcp_headers(m->q->r),
                               timeout, err);
    return m->cancelled ? MCP_BACKEND_OK : status;
}

/* ---- a notification: stored, forwarded, 202 ------------------------------------------------ */

static int post_notification(mcp_req_t *q, const char *version)
{
    modern_t m;
    const char *err = NULL;
    mcp_store_status_t stored;
    mcp_backend_status_t status;

    stored = mcp_store_events_append(mcp_req_db(q), q->r->pool, q->session, 0, 0, "in",
                                     apr_pstrcat(q->r->pool, "[", q->raw, "]", NULL));
    if (stored != MCP_STORE_OK) {
        return mcp_req_store_failed(q, stored);
    }
    modern_init(&m, q, 0);
    status = forward(&m, version, q->conf->backend_timeout, &err);
    if (status != MCP_BACKEND_OK) {
        return mcp_req_error(q, status == MCP_BACKEND_TIMEOUT ? HTTP_GATEWAY_TIME_OUT
                             : HTTP_BAD_GATEWAY, MCP_JSONRPC_INTERNAL_ERROR,
                             "Bad Gateway: the backend did not take the notification: %s", err);
    }
    if (m.x.response.status >= 200 && m.x.response.status < 300) {
        return mcp_req_empty(q, HTTP_ACCEPTED);
    }
    return mcp_req_error(q, m.x.response.status >= 400 && m.x.response.status < 500
                         ? (int)m.x.response.status : HTTP_BAD_GATEWAY, MCP_JSONRPC_INTERNAL_ERROR,
                         "the backend refused the notification with HTTP %ld",
                         m.x.response.status);
}

/* ---- a request: a stream of its own --------------------------------------------------------- */

/* What the client is told when the backend gave no answer to the request. */
static int failure_words(modern_t *m, mcp_backend_status_t status, const char *err,
                         const char **message)
{
    apr_pool_t *p = m->q->r->pool;

    if (status == MCP_BACKEND_TIMEOUT) {
        *message = apr_psprintf(p, "Gateway Timeout: no complete answer from the backend in "
                                "time: %s", err);
        return HTTP_GATEWAY_TIME_OUT;
    }
    if (status != MCP_BACKEND_OK) {
        *message = apr_psprintf(p, "Bad Gateway: the exchange with the backend failed: %s", err);
        return HTTP_BAD_GATEWAY;
    }
    *message = apr_psprintf(p, "Bad Gateway: the backend answered HTTP %ld (%s) without a "
                            "response to the request", m->x.response.status,
                            m->x.response.content_type ? m->x.response.content_type : "no body");
    return HTTP_BAD_GATEWAY;
}

/* A buffered (non-SSE) answer: stored when it is JSON; sent with the backend's status. Returns
 * non-zero when it is to be sent as it is (the response to the request, or a refusal). */
static int relay_buffered(modern_t *m, const char **body, apr_size_t *len)
{
    request_rec *r = m->q->r;
    apr_size_t n;
    const char *buf = mcp_exchange_body(&m->x, &n);

    if (!buf || !mcp_jsonrpc_parse_value(r->pool, buf, n)) {
        return 0;
    }
    relay_message(m, buf, n);
    *body = buf;
    *len = n;
    /* The backend's own refusal (4xx with a JSON-RPC error, e.g. -32601) goes to the client as
     * it is, with its status. */
    return m->x.answered != 0 || m->x.response.status >= 400;
}

static int post_request(mcp_req_t *q, const char *version)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    const char *err = NULL, *json = NULL, *message;
    apr_size_t json_len = 0;
    mcp_backend_status_t status;
    apr_int64_t stream_id = 0;
    int listen = strcmp(msg->method, "subscriptions/listen") == 0, http;
    modern_t m;

    if ((http = mcp_req_open_stateless(q, version, &stream_id)) != OK) {
        return http;
    }
    modern_init(&m, q, stream_id);
    m.st.stateless = 1;
    mcp_stream_own(&m.st);

    status = forward(&m, version, listen ? 0 : q->conf->stream_timeout, &err);
    if (m.cancelled) {
        mcp_stream_finish(&m.st, "cancelled");
        r->connection->keepalive = AP_CONN_CLOSE;
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "stream %" APR_INT64_T_FMT " (%s): cancelled: "
                      "the client closed its response; the backend request was closed",
                      stream_id, msg->method);
        return DONE;
    }
    if (m.x.answered && m.x.sse) {
        finish_answered(&m);   /* when the response was the answer's unterminated last event */
        return DONE;           /* else ended and stored as the response came */
    }
    if (status == MCP_BACKEND_OK && !m.x.sse && relay_buffered(&m, &json, &json_len)) {
        mcp_stream_finish(&m.st, m.st.broken ? "failed" : "complete");
        r->status = (int)m.x.response.status;
        ap_set_content_type(r, "application/json");
        ap_rwrite(json, (int)json_len, r);
        return DONE;
    }
    http = failure_words(&m, status, err ? err : "the answer ended early", &message);
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "stream %" APR_INT64_T_FMT ": %s", stream_id,
                  message);
    json = mcp_jsonrpc_error_body(r->pool, msg->id, MCP_JSONRPC_INTERNAL_ERROR, message, NULL);
    relay_message(&m, json, strlen(json));
    mcp_stream_finish(&m.st, "failed");
    if (m.st.mode == MCP_STREAM_SSE) {
        return DONE;
    }
    return mcp_req_error(q, http, MCP_JSONRPC_INTERNAL_ERROR, "%s", message);
}

/* ---- entry ---------------------------------------------------------------------------------- */

int mcp_modern_post(mcp_req_t *q)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_era_headers_t h;
    mcp_era_verdict_t v;
    const char *version;
    int present, bridged;

    if (q->body->is_batch) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: protocol version 2026-07-28 takes exactly one "
                             "message per POST (no batches)");
    }
    if (msg->kind != MCP_MSG_REQUEST && msg->kind != MCP_MSG_NOTIFICATION) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: protocol version 2026-07-28 takes a request or a "
                             "notification (no responses: the server sends no requests)");
    }
    h.version = apr_table_get(r->headers_in, "MCP-Protocol-Version");
    h.method = apr_table_get(r->headers_in, "Mcp-Method");
    h.name = apr_table_get(r->headers_in, "Mcp-Name");
    if (mcp_era_check(r->pool, msg, &h, mcp_protocol_list(MCP_ERA_2026), &v) != 0) {
        if (v.code == MCP_ERA_UNSUPPORTED_VERSION) {
            /* What server/discover would list: the stateless revisions, when the backend serves
             * them; else what it does serve (the client then falls back to initialize). */
            return mcp_req_unsupported_version(q, v.requested,
                                               q->conf->era_bridge
                                               || mcp_era_listed(q->conf->backend_protocols,
                                                                 mcp_protocol_list(MCP_ERA_2026))
                                               ? mcp_protocol_list(MCP_ERA_2026)
                                               : q->conf->backend_protocols);
        }
        return mcp_req_error(q, HTTP_BAD_REQUEST, v.code, "%s", v.message);
    }
    version = mcp_era_claim(msg->obj, &present);
    bridged = !mcp_era_listed(q->conf->backend_protocols, version);
    if (bridged && !q->conf->era_bridge) {
        /* The backend serves the 2025 era only (MCPBackendProtocols) and MCPEraBridge is Off:
         * the client falls back to initialize, which the gateway serves. */
        return mcp_req_unsupported_version(q, version, q->conf->backend_protocols);
    }
    q->rev = mcp_protocol_served(version);
    mcp_req_note_protocol(r, version);      /* the access log tells the eras apart */
    q->session = apr_pcalloc(r->pool, sizeof(*q->session));   /* none: only the principal */
    q->session->principal = r->user;
    q->session->protocol_version = version;
    q->session->backend_url = q->conf->backend_spec;
    if (bridged) {
        /* ... and the era bridge serves the client through it (mod_mcp_bridge). */
        return mcp_bridge_post(q, version);
    }
    return msg->kind == MCP_MSG_NOTIFICATION ? post_notification(q, version)
                                             : post_request(q, version);
}
