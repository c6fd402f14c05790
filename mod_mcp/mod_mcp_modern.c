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
#include "mod_mcp_eras.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_federation.h"
#include "mod_mcp_modern.h"
#include "mod_mcp_park.h"
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
    mcp_park_t             *pk;           /* the answer is relayed on the event loop        */
    int                     sse;          /* the client's response is SSE (headers out)     */
    int                     listen;       /* subscriptions/listen: a stream with no answer   */
    mcp_park_half_t         half;
    int                     settled;      /* the answer (or its failure) is stored           */
    const char             *json;         /* settled: a JSON answer for the client, as it is  */
    apr_size_t              json_len;
    int                     fail_http;    /* settled: no answer; what the client is told      */
    const char             *fail_message;
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
    int rewritten, rc;

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
    rewritten = m->q->member
                && mcp_federation_outbound(m->q, m->q->r->pool, obj, &json, &len);
    rc = mcp_stream_add(&m->st, json, len);
    if (rewritten && !m->st.rewritten) {
        /* A member's message in the client's names: a JSON answer is this text too. */
        m->st.rewritten = json;
        m->st.rewritten_len = len;
    }
    return rc;
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

static void write_through(modern_t *m);

static int on_sse(void *baton)
{
    modern_t *m = baton;

    /* (A parked answer's response is SSE already when the backend's own SSE begins late.) */
    if (m->st.mode == MCP_STREAM_UNDECIDED) {
        mcp_stream_start_sse(&m->st, -1);
        m->sse = 1;
        if (m->pk) {
            write_through(m);   /* before anything is stored: the park's cursor is 0 */
        }
    }
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

/* What the backend is sent: the request as the client sent it, or a federated member's own
 * (its names; the stored request stays the client's). */
static const char *sent_body(const mcp_req_t *q)
{
    return q->member ? q->member->body : q->raw;
}

static apr_size_t sent_len(const mcp_req_t *q)
{
    return q->member ? q->member->body_len : q->raw_len;
}

static mcp_backend_status_t forward(modern_t *m, const char *version, apr_interval_time_t timeout,
                                    const char **err)
{
    mcp_backend_status_t status;

    status = mcp_exchange_post(&m->x, sent_body(m->q), sent_len(m->q), version,
                               mcp_headers(m->q->r),
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
    *body = m->st.rewritten ? m->st.rewritten : buf;
    *len = m->st.rewritten ? m->st.rewritten_len : n;
    /* The backend's own refusal (4xx with a JSON-RPC error, e.g. -32601) goes to the client as
     * it is, with its status. */
    return m->x.answered != 0 || m->x.response.status >= 400;
}

/* The exchange is over (status, err): the answer stored — a JSON one kept for the client (sent
 * as it is, with the backend's status, unless the response is SSE already: then it went as an
 * event) — or the failure stored on the stream and kept for the client. */
static void settle(modern_t *m, mcp_backend_status_t status, const char *err)
{
    request_rec *r = m->q->r;
    const char *json;

    if (m->settled) {
        return;
    }
    m->settled = 1;
    if (m->cancelled) {
        mcp_stream_finish(&m->st, "cancelled");
        r->connection->keepalive = AP_CONN_CLOSE;
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "stream %" APR_INT64_T_FMT " (%s): cancelled: "
                      "the client closed its response; the backend request was closed",
                      m->st.id, m->msg->method);
        return;
    }
    if (m->x.answered && m->x.sse) {
        finish_answered(m);   /* when the response was the answer's unterminated last event */
        return;               /* else ended and stored as the response came */
    }
    if (status == MCP_BACKEND_OK && !m->x.sse && relay_buffered(m, &m->json, &m->json_len)) {
        mcp_stream_finish(&m->st, m->st.broken ? "failed" : "complete");
        return;
    }
    m->json = NULL;
    m->fail_http = failure_words(m, status, err ? err : "the answer ended early",
                                 &m->fail_message);
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "stream %" APR_INT64_T_FMT ": %s", m->st.id,
                  m->fail_message);
    json = mcp_jsonrpc_error_body(r->pool, m->msg->id, MCP_JSONRPC_INTERNAL_ERROR,
                                  m->fail_message, NULL);
    relay_message(m, json, strlen(json));
    mcp_stream_finish(&m->st, "failed");
}

/* What the handler returns once settled: everything was sent already (SSE), or it is sent now. */
static int reply(modern_t *m)
{
    request_rec *r = m->q->r;

    if (m->cancelled || m->sse) {
        return DONE;
    }
    if (m->json) {
        r->status = (int)m->x.response.status;
        ap_set_content_type(r, "application/json");
        ap_rwrite(m->json, (int)m->json_len, r);
        return DONE;
    }
    return mcp_req_error(m->q, m->fail_http, MCP_JSONRPC_INTERNAL_ERROR, "%s", m->fail_message);
}

/* ---- a request's answer on the event loop (parked once it takes MCP_PARK_AFTER) ------------ */

/* The response went SSE: from now on the parked stream writes what the stream stores. */
static void write_through(modern_t *m)
{
    mcp_stream_detach(&m->st);
    mcp_park_write_through(m->pk, &m->st);
}

static int parked_news(void *baton, const mcp_loop_news_t *news)
{
    modern_t *m = baton;
    const char *err;
    int cut;

    if (!mcp_exchange_feed_news(&m->x, news, &cut)) {
        return 0;
    }
    err = news->err ? news->err : cut ? "stopped by the gateway" : NULL;
    settle(m, mcp_exchange_end(&m->x, cut && !m->x.answered ? MCP_BACKEND_ABORTED
                                                             : news->status, &err), err);
    return 1;
}

static int parked_tick(void *baton)
{
    modern_t *m = baton;
    const char *err = "stopped by the gateway";

    if (!mcp_exchange_feed_tick(&m->x)) {
        return 0;
    }
    settle(m, mcp_exchange_end(&m->x, MCP_BACKEND_ABORTED, &err), err);
    return 1;
}

/* The client went, or the process stops: closing the backend request is the 2026-07-28
 * cancellation (the transfer is cut when this returns). */
static void parked_stop(void *baton, const char *why)
{
    modern_t *m = baton;

    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, m->q->r, "stream %" APR_INT64_T_FMT " (parked): "
                  "%s", m->st.id, why);
    if (m->listen && !m->settled && mcp_stream_server_stopping()) {
        m->settled = 1;   /* the gateway ends it: the client listens again elsewhere */
        mcp_stream_finish(&m->st, "closed");
        return;
    }
    m->cancelled = !m->x.answered;
    settle(m, MCP_BACKEND_ABORTED, why);
}

/* Parked at once: a listen that was acknowledged only waits (a call waits MCP_PARK_AFTER for
 * its answer with its thread; mcp_park_wait also returns when the half is done). */
static int listening(void *baton)
{
    modern_t *m = baton;

    return m->listen && m->sse;
}

/* The call relayed on the event loop: DECLINED when it cannot be (the caller forwards with its
 * thread); else DONE (answered within MCP_PARK_AFTER, or the client went meanwhile) or
 * SUSPENDED (parked: the response is SSE from now on). */
static int answer_parked(modern_t *m, const char *version)
{
    mcp_req_t *q = m->q;
    mcp_backend_call_t call;
    const char *err = NULL;
    int done;

    if (!(m->pk = mcp_park_create(q, m->st.id, 0, 0, 1))) {
        return DECLINED;
    }
    memset(&call, 0, sizeof(call));
    call.method = "POST";
    call.body = sent_body(q);
    call.body_len = sent_len(q);
    call.protocol_version = version;
    call.headers = mcp_headers(q->r);
    call.timeout_ms = m->listen ? 0 : (long)apr_time_as_msec(q->conf->stream_timeout);
    mcp_exchange_call_defaults(&m->x, &call);
    m->half.on_news = parked_news;
    m->half.on_tick = parked_tick;
    m->half.on_stop = parked_stop;
    m->half.baton = m;
    m->half.tick = apr_time_from_sec(1);
    m->half.outlives_client = 0;   /* 2026-07-28: disconnect is cancellation */
    /* A call's answer is waited for across a graceful restart; a listen ends with it (the client
     * listens again, on a new process). */
    m->half.outlives_restart = !m->listen;
    m->half.lean = m->listen;   /* a listen mostly waits */
    mcp_exchange_begin(&m->x);
    if (mcp_park_backend(m->pk, &call, &m->half, &err) != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "stream %" APR_INT64_T_FMT ": not "
                      "parked (%s); relayed with this thread", m->st.id, err);
        mcp_park_abandon(m->pk);
        m->pk = NULL;
        return DECLINED;
    }
    done = mcp_park_wait(m->pk, listening, MCP_PARK_AFTER);
    if (!done && mcp_park_gone(m->pk)) {
        /* An aborted connection cannot be parked; and its going is the call's cancellation. */
        m->cancelled = !m->x.answered;
        settle(m, MCP_BACKEND_ABORTED, "the client went away");
        done = 1;
    }
    if (done) {
        mcp_park_abandon(m->pk);
        return reply(m);
    }
    if (m->st.mode == MCP_STREAM_UNDECIDED) {
        mcp_stream_start_sse(&m->st, -1);   /* a JSON answer that comes later goes as an event */
        m->sse = 1;
        write_through(m);
    }
    return mcp_park_go(m->pk, 0);
}

/* ---- the request ---------------------------------------------------------------------------- */

static int post_request(mcp_req_t *handler_q, const char *version)
{
    /* A parked answer outlives the handler's frame, where its request lives. */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    const char *err = NULL;
    mcp_backend_status_t status;
    apr_int64_t stream_id = 0;
    int listen = strcmp(msg->method, "subscriptions/listen") == 0, rc;
    modern_t *m = apr_palloc(q->r->pool, sizeof(*m));

    if ((rc = mcp_req_open_stateless(q, version, &stream_id)) != OK) {
        return rc;
    }
    modern_init(m, q, stream_id);
    m->listen = listen;
    m->st.stateless = 1;
    mcp_stream_own(&m->st);
    if ((rc = answer_parked(m, version)) != DECLINED) {
        return rc;
    }
    status = forward(m, version, listen ? 0 : q->conf->stream_timeout, &err);
    settle(m, status, err);
    return reply(m);
}

/* ---- entry ---------------------------------------------------------------------------------- */

/* The request's stand-in session: none, only the principal, the revision and the backend. */
static void modern_session(mcp_req_t *q, const char *version, const char *backend)
{
    q->rev = mcp_protocol_served(version);
    mcp_req_note_protocol(q->r, version);      /* the access log tells the eras apart */
    q->session = apr_pcalloc(q->r->pool, sizeof(*q->session));
    q->session->principal = q->r->user;
    q->session->protocol_version = version;
    q->session->backend_url = backend;
}

int mcp_modern_post(mcp_req_t *q)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_era_headers_t h;
    mcp_era_verdict_t v;
    const char *version, *backend = NULL;
    int present, bridged;

    if (q->body->is_batch) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: protocol version 2026-07-28 takes exactly one "
                             "message per POST (no batches)");
    }
    /* The era bridge, a federation and the gateway's errors write the client's id themselves:
     * as it was sent, also where json-c cannot read it back (a lone surrogate). */
    mcp_jsonrpc_keep_id_as_sent(msg->id, q->raw, q->raw_len);
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
            if (!q->conf->era_bridge && !q->conf->members) {
                backend = mcp_eras_backend(q);
            }
            return mcp_req_unsupported_version(q, v.requested,
                                               q->conf->era_bridge || q->conf->members
                                               || mcp_era_listed(backend,
                                                                 mcp_protocol_list(MCP_ERA_2026))
                                               ? mcp_protocol_list(MCP_ERA_2026) : backend);
        }
        return mcp_req_error(q, HTTP_BAD_REQUEST, v.code, "%s", v.message);
    }
    version = mcp_era_claim(msg->obj, &present);
    if (q->conf->members) {
        /* Several members behind this endpoint: each is asked in its own era. */
        modern_session(q, version, q->conf->backend_spec);
        return mcp_federation_modern(q, version);
    }
    backend = mcp_eras_backend(q);
    bridged = !mcp_era_listed(backend, version);
    if (bridged && !q->conf->era_bridge) {
        /* The backend serves the 2025 era only (MCPBackendProtocols, or learned) and
         * MCPEraBridge is Off: the client falls back to initialize, which the gateway serves. */
        return mcp_req_unsupported_version(q, version, backend);
    }
    modern_session(q, version, q->conf->backend_spec);
    if (bridged) {
        /* ... and the era bridge serves the client through it (mod_mcp_bridge). */
        return mcp_bridge_post(q, version);
    }
    return mcp_modern_forward(q, version);
}

int mcp_modern_forward(mcp_req_t *q, const char *version)
{
    return q->body->msgs[0].kind == MCP_MSG_NOTIFICATION ? post_notification(q, version)
                                                         : post_request(q, version);
}
