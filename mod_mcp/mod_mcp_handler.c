/* mod_mcp_handler — see mod_mcp_handler.h.
 *
 * Conventions: a step returns OK to let the request go on, or DONE after it has written the
 * answer itself (httpd treats a handler's DONE like OK). Every rejection is a JSON-RPC error body
 * with a precise HTTP status, logged at info.
 */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_core.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>

#include "mcp_backend.h"
#include "mcp_http.h"
#include "mcp_id.h"
#include "mcp_jsonrpc.h"
#include "mcp_protocol.h"
#include "mcp_sse.h"
#include "mcp_store.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_handler.h"

APLOG_USE_MODULE(mcp);

/* Methods of the endpoint; GET (the standalone stream) is not served yet. */
#define MCP_ALLOW "POST, DELETE"

static mcp_backend_pool_t *backend_pool;

void mcp_handler_child_init(apr_pool_t *pchild, mcp_backend_pool_t *pool)
{
    (void)pchild;
    backend_pool = pool;
}

/* ---- one request ------------------------------------------------------------------------- */

typedef struct mcp_req_t {
    request_rec          *r;
    const mcp_dir_conf_t *conf;
    const char           *raw;         /* the POST body as received                      */
    apr_size_t            raw_len;
    mcp_jsonrpc_body_t   *body;        /* ... parsed                                     */
    json_object          *id;          /* the single request's id, echoed in errors      */
    mcp_store_session_t  *session;     /* NULL until looked up (and for initialize)      */
    const char           *session_header;
} mcp_req_t;

static int reply_error(mcp_req_t *q, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Answers with a JSON-RPC error and a precise status. A body not read yet is discarded so the
 * connection can be kept alive (except after 413, where reading it is what we refuse). */
static int reply_error(mcp_req_t *q, int status, int code, const char *fmt, ...)
{
    request_rec *r = q->r;
    const char *message;
    va_list ap;

    va_start(ap, fmt);
    message = apr_pvsprintf(r->pool, fmt, ap);
    va_end(ap);

    ap_log_rerror(APLOG_MARK, status >= 500 ? APLOG_WARNING : APLOG_INFO, 0, r,
                  "%s %s -> %d: %s", r->method, r->uri, status, message);
    if (status == HTTP_REQUEST_ENTITY_TOO_LARGE) {
        r->connection->keepalive = AP_CONN_CLOSE;
    }
    else {
        ap_discard_request_body(r);
    }
    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_rputs(mcp_jsonrpc_error_body(r->pool, q->id, code, message, NULL), r);
    return DONE;
}

static int reply_empty(mcp_req_t *q, int status)
{
    q->r->status = status;
    return DONE;
}

/* ---- validation -------------------------------------------------------------------------- */

static int check_post_headers(mcp_req_t *q)
{
    request_rec *r = q->r;
    const char *accept = apr_table_get(r->headers_in, "Accept");
    const char *ctype = apr_table_get(r->headers_in, "Content-Type");

    if (!mcp_http_accepts(accept, "application/json")
        || !mcp_http_accepts(accept, "text/event-stream")) {
        return reply_error(q, HTTP_NOT_ACCEPTABLE, MCP_JSONRPC_SERVER_ERROR,
                           "Not Acceptable: the client must accept both application/json and "
                           "text/event-stream (Accept: %s)", accept ? accept : "absent");
    }
    if (!mcp_http_media_type_is(ctype, "application/json")) {
        return reply_error(q, HTTP_UNSUPPORTED_MEDIA_TYPE, MCP_JSONRPC_SERVER_ERROR,
                           "Unsupported Media Type: Content-Type must be application/json "
                           "(got %s)", ctype ? ctype : "none");
    }
    return OK;
}

static int reply_too_large(mcp_req_t *q)
{
    return reply_error(q, HTTP_REQUEST_ENTITY_TOO_LARGE, MCP_JSONRPC_INVALID_REQUEST,
                       "Payload Too Large: the message exceeds MCPMaxMessageSize (%" APR_OFF_T_FMT
                       " bytes)", q->conf->max_message_size);
}

/* Reads the whole body, refusing more than MCPMaxMessageSize before buffering it. */
static int read_body(mcp_req_t *q)
{
    request_rec *r = q->r;
    apr_off_t limit = q->conf->max_message_size;
    const char *clen = apr_table_get(r->headers_in, "Content-Length");
    apr_bucket_brigade *bb;
    apr_off_t total = 0;
    char *buf;
    apr_size_t len;
    int seen_eos = 0;

    if (clen) {
        apr_off_t n;
        if (apr_strtoff(&n, clen, NULL, 10) == APR_SUCCESS && n > limit) {
            return reply_too_large(q);
        }
    }
    bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    while (!seen_eos) {
        apr_bucket_brigade *in = apr_brigade_create(r->pool, r->connection->bucket_alloc);
        apr_status_t rv = ap_get_brigade(r->input_filters, in, AP_MODE_READBYTES,
                                         APR_BLOCK_READ, HUGE_STRING_LEN);
        apr_off_t got = 0;

        if (rv != APR_SUCCESS) {
            return reply_error(q, ap_map_http_request_error(rv, HTTP_BAD_REQUEST),
                               MCP_JSONRPC_SERVER_ERROR, "Bad Request: the body could not be read");
        }
        seen_eos = !APR_BRIGADE_EMPTY(in) && APR_BUCKET_IS_EOS(APR_BRIGADE_LAST(in));
        apr_brigade_length(in, 1, &got);
        total += got;
        if (total > limit) {
            return reply_too_large(q);
        }
        APR_BRIGADE_CONCAT(bb, in);
        apr_brigade_destroy(in);
    }
    if (apr_brigade_pflatten(bb, &buf, &len, r->pool) != APR_SUCCESS) {
        return reply_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                           "Internal Error: the body could not be buffered");
    }
    apr_brigade_destroy(bb);
    q->raw = buf;
    q->raw_len = len;
    return OK;
}

static int parse_body(mcp_req_t *q)
{
    const char *reason;
    mcp_jsonrpc_status_t st = mcp_jsonrpc_parse(q->r->pool, q->raw, q->raw_len, &q->body, &reason);

    if (st == MCP_JSONRPC_ERR_PARSE) {
        return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_PARSE_ERROR, "Parse error: %s", reason);
    }
    if (q->body && !q->body->is_batch) {
        q->id = mcp_jsonrpc_reply_id(&q->body->msgs[0]);
    }
    if (st == MCP_JSONRPC_ERR_INVALID) {
        return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST, "Invalid Request: %s",
                           reason);
    }
    return OK;
}

/* An MCP-Protocol-Version header, when present, must name a revision the gateway serves. */
static int check_version_header(mcp_req_t *q)
{
    const char *v = apr_table_get(q->r->headers_in, "MCP-Protocol-Version");

    if (v && !mcp_protocol_served(v)) {
        return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                           "Bad Request: unsupported MCP-Protocol-Version '%s' (supported: %s)", v,
                           mcp_protocol_served_list());
    }
    return OK;
}

static int reply_store_unavailable(mcp_req_t *q)
{
    return reply_error(q, HTTP_SERVICE_UNAVAILABLE, MCP_JSONRPC_UNAVAILABLE,
                       "Service Unavailable: the session store is unavailable");
}

static int reply_session_not_found(mcp_req_t *q)
{
    return reply_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_SESSION_NOT_FOUND,
                       "Session not found: it is unknown, terminated or expired; initialize a "
                       "new session");
}

/* Finds the request's live session, which must belong to the same user and the same backend. */
static int load_session(mcp_req_t *q)
{
    request_rec *r = q->r;
    mcp_store_t store;
    mcp_store_status_t st;
    const char *err = NULL;
    ap_dbd_t *dbd;

    q->session_header = apr_table_get(r->headers_in, "Mcp-Session-Id");
    if (!q->session_header || !*q->session_header) {
        return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                           "Bad Request: Mcp-Session-Id header is required");
    }
    if (!mcp_id_session_is_wellformed(q->session_header)) {
        return reply_session_not_found(q);
    }
    if (!(dbd = mcp_dbd_open(r, &store))) {
        return reply_store_unavailable(q);
    }
    st = mcp_store_session_touch(&store, r->pool, q->session_header, r->user, &q->session, &err);
    mcp_dbd_close(r, dbd);
    if (st == MCP_STORE_ERROR) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "session look-up failed: %s", err);
        return reply_store_unavailable(q);
    }
    if (st == MCP_STORE_NOT_FOUND || strcmp(q->session->backend_url, q->conf->backend_spec) != 0) {
        return reply_session_not_found(q);
    }
    return OK;
}

static void terminate_session(mcp_req_t *q, const char *by)
{
    mcp_store_t store;
    const char *err = NULL;
    ap_dbd_t *dbd = mcp_dbd_open(q->r, &store);

    if (dbd) {
        if (mcp_store_session_terminate(&store, q->r->pool, q->session->id, q->r->user, by, &err)
            == MCP_STORE_ERROR) {
            ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "terminating session %s failed: %s",
                          q->session->id, err);
        }
        mcp_dbd_close(q->r, dbd);
    }
}

/* ---- relaying the backend's answer ------------------------------------------------------- */

typedef struct relay_t {
    mcp_req_t              *q;
    int                     may_stream;     /* an SSE answer may go to the client as it comes */
    int                     streaming;      /* ... and does: the client's headers are sent     */
    mcp_backend_response_t  response;
    apr_bucket_brigade     *buffered;       /* a non-streamed body, bounded by the size limit  */
    apr_off_t               buffered_len;
    int                     too_large;
    mcp_sse_parser_t       *sse;
    apr_bucket_brigade     *out;
    apr_pool_t             *event_pool;     /* cleared per event: a long stream stays flat     */
    int                     client_gone;
    int                     responses_relayed;
} relay_t;

static void set_sse_headers(request_rec *r)
{
    r->status = HTTP_OK;
    ap_set_content_type(r, "text/event-stream");
    apr_table_setn(r->headers_out, "Cache-Control", "no-cache, no-transform");
    apr_table_setn(r->headers_out, "X-Accel-Buffering", "no");
    apr_table_setn(r->subprocess_env, "no-gzip", "1");
}

/* Writes bytes to the client and flushes them. A vanished client is noticed and remembered; the
 * relay goes on reading the backend (a disconnect is not a cancellation). */
static void client_write(relay_t *rl, const char *data, apr_size_t len)
{
    request_rec *r = rl->q->r;
    apr_bucket_brigade *bb = rl->out;

    if (rl->client_gone) {
        return;
    }
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_transient_create(data, len, bb->bucket_alloc));
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(bb->bucket_alloc));
    if (ap_pass_brigade(r->output_filters, bb) != APR_SUCCESS || r->connection->aborted) {
        rl->client_gone = 1;
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                      "client went away; reading the backend's answer to its end");
    }
    apr_brigade_cleanup(bb);
}

/* Sends one JSON-RPC message as an SSE event. */
static void relay_message(relay_t *rl, const char *json, apr_size_t json_len)
{
    apr_size_t len;
    const char *text;
    json_object *obj;
    mcp_jsonrpc_msg_t msg;

    apr_pool_clear(rl->event_pool);
    obj = mcp_jsonrpc_parse_value(rl->event_pool, json, json_len);
    if (obj) {
        mcp_jsonrpc_classify(obj, &msg);
        if (msg.kind == MCP_MSG_RESPONSE || msg.kind == MCP_MSG_ERROR) {
            rl->responses_relayed++;
        }
    }
    text = mcp_sse_event_format(rl->event_pool, NULL, NULL, json, -1, &len);
    client_write(rl, text, len);
}

static int on_backend_event(void *baton, const mcp_sse_event_t *ev)
{
    /* An event without data (the backend's priming event) is the backend's business: the
     * gateway frames its own streams. */
    if (ev->data_len > 0) {
        relay_message(baton, ev->data, ev->data_len);
    }
    return 0;
}

static int on_backend_headers(void *baton, const mcp_backend_response_t *resp)
{
    relay_t *rl = baton;
    request_rec *r = rl->q->r;

    if (rl->may_stream && resp->status == HTTP_OK
        && mcp_http_media_type_is(resp->content_type, "text/event-stream")) {
        rl->streaming = 1;
        rl->out = apr_brigade_create(r->pool, r->connection->bucket_alloc);
        apr_pool_create(&rl->event_pool, r->pool);
        rl->sse = mcp_sse_parser_create(r->pool, (apr_size_t)rl->q->conf->max_message_size,
                                        on_backend_event, rl);
        set_sse_headers(r);
    }
    return 0;
}

static int on_backend_body(void *baton, const char *buf, apr_size_t len)
{
    relay_t *rl = baton;

    if (rl->streaming) {
        int rv = mcp_sse_parser_feed(rl->sse, buf, len);
        if (rv == MCP_SSE_ERR_TOO_LARGE) {
            rl->too_large = 1;
        }
        return rv;
    }
    rl->buffered_len += (apr_off_t)len;
    if (rl->buffered_len > rl->q->conf->max_message_size) {
        rl->too_large = 1;
        return 1;
    }
    return apr_brigade_write(rl->buffered, NULL, NULL, buf, len) == APR_SUCCESS ? 0 : 1;
}

static mcp_backend_status_t forward(mcp_req_t *q, relay_t *rl, const char *method, int may_stream,
                                    const char **err)
{
    request_rec *r = q->r;
    mcp_backend_call_t call;
    mcp_backend_status_t st;

    memset(rl, 0, sizeof(*rl));
    rl->q = q;
    rl->may_stream = may_stream;
    rl->buffered = apr_brigade_create(r->pool, r->connection->bucket_alloc);

    memset(&call, 0, sizeof(call));
    call.target = q->conf->backend;
    call.method = method;
    call.body = q->raw;
    call.body_len = q->raw_len;
    if (q->session) {
        call.session_id = q->session->backend_session_id;
        call.protocol_version = q->session->protocol_version;
    }
    call.connect_timeout_ms = (long)apr_time_as_msec(q->conf->backend_connect_timeout);
    call.timeout_ms = (long)apr_time_as_msec(q->conf->backend_timeout);
    call.on_headers = on_backend_headers;
    call.on_body = on_backend_body;
    call.baton = rl;

    st = mcp_backend_perform(backend_pool, r->pool, &call, &rl->response, err);
    if (rl->sse && st == MCP_BACKEND_OK) {
        mcp_sse_parser_finish(rl->sse);
    }
    if (rl->too_large) {
        *err = apr_psprintf(r->pool, "the backend's message exceeds MCPMaxMessageSize (%"
                            APR_OFF_T_FMT " bytes)", q->conf->max_message_size);
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "backend %s %s: status %ld, %s", method,
                  q->conf->backend->url, rl->response.status,
                  st == MCP_BACKEND_OK ? "complete" : *err);
    return st;
}

/* The answer for a backend that failed before the client was sent anything. */
static int reply_backend_failure(mcp_req_t *q, mcp_backend_status_t st, const char *err)
{
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "backend %s failed: %s", q->conf->backend->url,
                  err);
    if (st == MCP_BACKEND_TIMEOUT) {
        return reply_error(q, HTTP_GATEWAY_TIME_OUT, MCP_JSONRPC_BACKEND_ERROR,
                           "Gateway Timeout: the backend did not answer in time: %s", err);
    }
    if (st == MCP_BACKEND_UNREACHABLE) {
        return reply_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                           "Bad Gateway: the backend is unreachable: %s", err);
    }
    return reply_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                       "Bad Gateway: the exchange with the backend failed: %s", err);
}

/* A stream that already began cannot change its status: the client gets a JSON-RPC error for
 * its request on the stream instead, so it never waits for an answer that will not come. */
static void end_stream_with_error(mcp_req_t *q, relay_t *rl, const char *err)
{
    const char *body;

    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "backend %s failed mid-stream: %s",
                  q->conf->backend->url, err);
    if (q->id && rl->responses_relayed == 0) {
        body = mcp_jsonrpc_error_body(q->r->pool, q->id, MCP_JSONRPC_BACKEND_ERROR,
                                      apr_pstrcat(q->r->pool, "Bad Gateway: the backend's stream "
                                                  "broke before its response: ", err, NULL),
                                      NULL);
        relay_message(rl, body, strlen(body));
    }
}

static int reply_buffered(mcp_req_t *q, relay_t *rl, const char *content_type)
{
    request_rec *r = q->r;
    char *buf;
    apr_size_t len;

    if (apr_brigade_pflatten(rl->buffered, &buf, &len, r->pool) != APR_SUCCESS) {
        return reply_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                           "Internal Error: the backend's answer could not be buffered");
    }
    r->status = HTTP_OK;
    ap_set_content_type(r, content_type);
    ap_rwrite(buf, (int)len, r);
    return DONE;
}

/* What the client gets for a complete backend answer that was not streamed. */
static int reply_backend_answer(mcp_req_t *q, relay_t *rl)
{
    const mcp_backend_response_t *resp = &rl->response;
    int is_json = mcp_http_media_type_is(resp->content_type, "application/json");

    if (resp->status == HTTP_ACCEPTED || resp->status == HTTP_NO_CONTENT) {
        return reply_empty(q, HTTP_ACCEPTED);
    }
    if (resp->status == HTTP_NOT_FOUND && q->session) {
        /* The backend no longer knows the session (it restarted or expired it). */
        terminate_session(q, "backend");
        return reply_session_not_found(q);
    }
    if (resp->status == HTTP_OK && is_json) {
        return reply_buffered(q, rl, "application/json");
    }
    if (resp->status >= 400 && resp->status < 500 && is_json) {
        reply_buffered(q, rl, "application/json");
        q->r->status = (int)resp->status;
        return DONE;
    }
    return reply_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                       "Bad Gateway: the backend answered HTTP %ld (%s)", resp->status,
                       resp->content_type ? resp->content_type : "no content type");
}

/* ---- initialize: a new session ----------------------------------------------------------- */

typedef struct collected_t {
    apr_pool_t         *pool;
    apr_array_header_t *messages;   /* const char * JSON texts */
} collected_t;

static int collect_event(void *baton, const mcp_sse_event_t *ev)
{
    collected_t *c = baton;

    if (ev->data_len > 0) {
        APR_ARRAY_PUSH(c->messages, const char *) = apr_pstrmemdup(c->pool, ev->data, ev->data_len);
    }
    return 0;
}

/* The backend's messages in a buffered answer, JSON or SSE. */
static apr_array_header_t *buffered_messages(mcp_req_t *q, relay_t *rl, int *is_sse)
{
    request_rec *r = q->r;
    collected_t c;
    char *buf;
    apr_size_t len;

    c.pool = r->pool;
    c.messages = apr_array_make(r->pool, 4, sizeof(const char *));
    if (apr_brigade_pflatten(rl->buffered, &buf, &len, r->pool) != APR_SUCCESS) {
        return c.messages;
    }
    *is_sse = mcp_http_media_type_is(rl->response.content_type, "text/event-stream");
    if (*is_sse) {
        mcp_sse_parser_t *parser = mcp_sse_parser_create(r->pool, len + 1, collect_event, &c);
        mcp_sse_parser_feed(parser, buf, len);
        mcp_sse_parser_finish(parser);
    }
    else {
        APR_ARRAY_PUSH(c.messages, const char *) = apr_pstrmemdup(r->pool, buf, len);
    }
    return c.messages;
}

/* The response to the request with id among the messages, or NULL. */
static json_object *find_response(request_rec *r, apr_array_header_t *messages, json_object *id)
{
    int i;

    for (i = 0; i < messages->nelts; i++) {
        const char *text = APR_ARRAY_IDX(messages, i, const char *);
        json_object *obj = mcp_jsonrpc_parse_value(r->pool, text, strlen(text));
        mcp_jsonrpc_msg_t msg;

        if (!obj) {
            continue;
        }
        mcp_jsonrpc_classify(obj, &msg);
        if ((msg.kind == MCP_MSG_RESPONSE || msg.kind == MCP_MSG_ERROR)
            && json_object_equal(msg.id, id)) {
            return obj;
        }
    }
    return NULL;
}

static const char *member_json(request_rec *r, json_object *obj, const char *key)
{
    json_object *v;

    return json_object_object_get_ex(obj, key, &v) ? mcp_jsonrpc_to_string(r->pool, v, NULL) : NULL;
}

/* Ends a backend session that the gateway will not use (best effort: it is only logged). */
static void abandon_backend_session(mcp_req_t *q, const char *backend_session_id)
{
    mcp_store_session_t orphan;
    relay_t rl;
    const char *err;

    if (!backend_session_id) {
        return;
    }
    memset(&orphan, 0, sizeof(orphan));
    orphan.backend_session_id = backend_session_id;
    q->session = &orphan;
    q->raw = NULL;
    q->raw_len = 0;
    if (forward(q, &rl, "DELETE", 0, &err) != MCP_BACKEND_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r,
                      "could not end backend session %s: %s", backend_session_id, err);
    }
    q->session = NULL;
}

/* Answers with the backend's buffered messages, in the form the backend chose. */
static int reply_messages(mcp_req_t *q, relay_t *rl, apr_array_header_t *messages, int is_sse,
                          const char *session_id)
{
    request_rec *r = q->r;
    int i;

    if (session_id) {
        apr_table_setn(r->headers_out, "Mcp-Session-Id", session_id);
    }
    if (!is_sse) {
        return reply_buffered(q, rl, "application/json");
    }
    set_sse_headers(r);
    rl->out = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    apr_pool_create(&rl->event_pool, r->pool);
    for (i = 0; i < messages->nelts; i++) {
        const char *text = APR_ARRAY_IDX(messages, i, const char *);
        relay_message(rl, text, strlen(text));
    }
    return DONE;
}

static int handle_initialize(mcp_req_t *q)
{
    request_rec *r = q->r;
    json_object *request = q->body->msgs[0].obj, *response, *result, *params;
    const mcp_protocol_t *rev;
    mcp_store_session_t session;
    apr_array_header_t *messages;
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];
    mcp_store_t store;
    ap_dbd_t *dbd;
    relay_t rl;
    const char *err = NULL;
    mcp_backend_status_t st;
    int is_sse = 0;

    if (q->session_header) {
        return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                           "Invalid Request: initialize starts a new session and must be sent "
                           "without Mcp-Session-Id");
    }
    st = forward(q, &rl, "POST", 0, &err);
    if (st != MCP_BACKEND_OK) {
        return reply_backend_failure(q, st, err);
    }
    if (rl.response.status != HTTP_OK) {
        return reply_backend_answer(q, &rl);
    }
    messages = buffered_messages(q, &rl, &is_sse);
    response = find_response(r, messages, q->id);
    if (!response) {
        abandon_backend_session(q, rl.response.session_id);
        return reply_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                           "Bad Gateway: the backend's answer to initialize holds no response "
                           "to it");
    }
    if (!json_object_object_get_ex(response, "result", &result)) {
        /* The backend refused (e.g. an unsupported version): the client gets its words. */
        abandon_backend_session(q, rl.response.session_id);
        return reply_messages(q, &rl, messages, is_sse, NULL);
    }
    rev = mcp_protocol_served(mcp_jsonrpc_get_string(result, "protocolVersion"));
    if (!rev) {
        abandon_backend_session(q, rl.response.session_id);
        return reply_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                           "Bad Gateway: the backend negotiated protocol version '%s', which the "
                           "gateway does not serve (it serves %s)",
                           mcp_jsonrpc_get_string(result, "protocolVersion")
                               ? mcp_jsonrpc_get_string(result, "protocolVersion") : "none",
                           mcp_protocol_served_list());
    }

    if (apr_generate_random_bytes(random, sizeof(random)) != APR_SUCCESS) {
        abandon_backend_session(q, rl.response.session_id);
        return reply_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                           "Internal Error: no secure random bytes for a session id");
    }
    memset(&session, 0, sizeof(session));
    session.id = mcp_id_session_encode(r->pool, random, sizeof(random));
    session.backend_url = q->conf->backend_spec;
    session.backend_session_id = rl.response.session_id;
    session.protocol_version = rev->version;
    session.principal = r->user;
    params = NULL;
    json_object_object_get_ex(request, "params", &params);
    session.client_info = params ? member_json(r, params, "clientInfo") : NULL;
    session.client_capabilities = params ? member_json(r, params, "capabilities") : NULL;
    session.server_info = member_json(r, result, "serverInfo");

    if (!(dbd = mcp_dbd_open(r, &store))) {
        abandon_backend_session(q, rl.response.session_id);
        return reply_store_unavailable(q);
    }
    if (mcp_store_session_insert(&store, r->pool, &session, &err) != MCP_STORE_OK) {
        mcp_dbd_close(r, dbd);
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "storing a new session failed: %s", err);
        abandon_backend_session(q, rl.response.session_id);
        return reply_store_unavailable(q);
    }
    mcp_dbd_close(r, dbd);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                  "session %s started (protocol %s, user %s, backend session %s)", session.id,
                  rev->version, r->user ? r->user : "-",
                  session.backend_session_id ? session.backend_session_id : "-");
    return reply_messages(q, &rl, messages, is_sse, session.id);
}

/* ---- POST, DELETE, others ---------------------------------------------------------------- */

static int handle_post(mcp_req_t *q)
{
    mcp_backend_status_t st;
    const mcp_protocol_t *rev;
    const char *err = NULL;
    relay_t rl;
    int rc;

    if ((rc = check_post_headers(q)) != OK || (rc = read_body(q)) != OK
        || (rc = parse_body(q)) != OK || (rc = check_version_header(q)) != OK) {
        return rc;
    }
    q->session_header = apr_table_get(q->r->headers_in, "Mcp-Session-Id");
    if (mcp_jsonrpc_find_method(q->body, "initialize") >= 0) {
        if (q->body->is_batch) {
            return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                               "Invalid Request: initialize must not be part of a batch");
        }
        return handle_initialize(q);
    }
    if ((rc = load_session(q)) != OK) {
        return rc;
    }
    rev = mcp_protocol_served(q->session->protocol_version);
    if (q->body->is_batch && !(rev && rev->batches)) {
        return reply_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                           "Invalid Request: batches are allowed only in sessions of protocol "
                           "version %s; this session uses %s", MCP_PROTOCOL_DEFAULT,
                           q->session->protocol_version);
    }

    st = forward(q, &rl, "POST", 1, &err);
    if (rl.streaming) {
        if (st != MCP_BACKEND_OK) {
            end_stream_with_error(q, &rl, err);
        }
        return DONE;
    }
    if (st != MCP_BACKEND_OK) {
        return reply_backend_failure(q, st, err);
    }
    return reply_backend_answer(q, &rl);
}

static int handle_delete(mcp_req_t *q)
{
    mcp_store_t store;
    const char *err = NULL;
    mcp_store_status_t st;
    ap_dbd_t *dbd;
    relay_t rl;
    int rc;

    if ((rc = check_version_header(q)) != OK || (rc = load_session(q)) != OK) {
        return rc;
    }
    /* Ours first, so no process accepts the session once the backend's is gone. */
    if (!(dbd = mcp_dbd_open(q->r, &store))) {
        return reply_store_unavailable(q);
    }
    st = mcp_store_session_terminate(&store, q->r->pool, q->session->id, q->r->user, "client",
                                     &err);
    mcp_dbd_close(q->r, dbd);
    if (st == MCP_STORE_NOT_FOUND) {
        return reply_session_not_found(q);
    }
    if (st == MCP_STORE_ERROR) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "terminating a session failed: %s", err);
        return reply_store_unavailable(q);
    }
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "session %s terminated by the client",
                  q->session->id);
    if (q->session->backend_session_id
        && forward(q, &rl, "DELETE", 0, &err) != MCP_BACKEND_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r,
                      "the backend was not told that session %s ended: %s", q->session->id, err);
    }
    return reply_empty(q, HTTP_OK);
}

int mcp_handler(request_rec *r)
{
    mcp_req_t q;

    if (!r->handler || strcmp(r->handler, "mcp") != 0) {
        return DECLINED;
    }
    memset(&q, 0, sizeof(q));
    q.r = r;
    q.conf = mcp_config_get(r);
    if (!q.conf->backend) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "SetHandler mcp is used at %s without MCPBackend", r->uri);
        return reply_error(&q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                           "Internal Error: this MCP endpoint has no backend configured");
    }
    switch (r->method_number) {
    case M_POST:
        return handle_post(&q);
    case M_DELETE:
        return handle_delete(&q);
    default:
        apr_table_setn(r->headers_out, "Allow", MCP_ALLOW);
        return reply_error(&q, HTTP_METHOD_NOT_ALLOWED, MCP_JSONRPC_SERVER_ERROR,
                           "Method Not Allowed: %s is not served here (allowed: %s)", r->method,
                           MCP_ALLOW);
    }
}
