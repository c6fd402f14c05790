/* mod_mcp_exchange — see mod_mcp_exchange.h. */
#include <string.h>

#include <apr_strings.h>
#include <apr_thread_proc.h>
#include <curl/curl.h>
#include <httpd.h>
#include <http_protocol.h>

#include "mcp_http.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_stdio.h"

/* How long a backend may keep the stream open after the answer before the gateway cuts it. */
#define ANSWERED_GRACE apr_time_from_sec(1)

static int on_event(void *baton, const mcp_sse_event_t *ev)
{
    mcp_exchange_t *x = baton;

    return !x->answered && ev->data_len > 0 ? x->on_message(x->baton, ev->data, ev->data_len)
                                            : 0;
}

static int on_headers(void *baton, const mcp_backend_response_t *resp)
{
    mcp_exchange_t *x = baton;
    int sse = resp->status == HTTP_OK
              && mcp_http_media_type_is(resp->content_type, "text/event-stream");

    if (sse) {
        x->sse = mcp_sse_parser_create(x->q->r->pool, (apr_size_t)x->q->conf->max_message_size,
                                       on_event, x);
    }
    if (x->on_answer && x->on_answer(x->baton)) {
        return 1;
    }
    return sse && x->on_sse ? x->on_sse(x->baton) : 0;
}

static int on_body(void *baton, const char *buf, apr_size_t len)
{
    mcp_exchange_t *x = baton;

    if (x->sse) {
        int answered_before = x->answered != 0, rv = mcp_sse_parser_feed(x->sse, buf, len);

        if (rv == MCP_SSE_ERR_TOO_LARGE) {
            x->too_large = 1;
        }
        if (rv != 0 || answered_before) {
            return rv;
        }
        return x->after_chunk ? x->after_chunk(x->baton) : 0;
    }
    x->body_len += (apr_off_t)len;
    if (x->body_len > x->q->conf->max_message_size) {
        x->too_large = 1;
        return 1;
    }
    return apr_brigade_write(x->body, NULL, NULL, buf, len) == APR_SUCCESS ? 0 : 1;
}

static int on_tick(void *baton)
{
    mcp_exchange_t *x = baton;

    if (x->answered) {
        return apr_time_now() - x->answered > ANSWERED_GRACE;
    }
    return x->on_tick ? x->on_tick(x->baton) : 0;
}

void mcp_exchange_init(mcp_exchange_t *x, mcp_req_t *q, void *baton)
{
    memset(x, 0, sizeof(*x));
    x->q = q;
    x->baton = baton;
    x->body = apr_brigade_create(q->r->pool, q->r->connection->bucket_alloc);
}

void mcp_exchange_begin(mcp_exchange_t *x)
{
    x->sse = NULL;
    apr_brigade_cleanup(x->body);
    x->body_len = 0;
    x->too_large = 0;
    x->cut_mid_event = 0;
    x->answered = 0;
}

mcp_backend_status_t mcp_exchange_end(mcp_exchange_t *x, mcp_backend_status_t status,
                                      const char **err)
{
    mcp_req_t *q = x->q;

    if (x->answered) {
        return MCP_BACKEND_OK;
    }
    if (x->sse) {
        x->cut_mid_event = mcp_sse_parser_in_event(x->sse);
        if (status == MCP_BACKEND_OK) {
            mcp_sse_parser_finish(x->sse);
        }
    }
    if (x->too_large) {
        *err = apr_psprintf(q->r->pool, "a message from the backend exceeds MCPMaxMessageSize (%"
                            APR_OFF_T_FMT " bytes)", q->conf->max_message_size);
    }
    return status;
}

int mcp_exchange_feed_headers(mcp_exchange_t *x, const mcp_backend_response_t *response)
{
    x->response = *response;
    return on_headers(x, &x->response);
}

int mcp_exchange_feed_body(mcp_exchange_t *x, const char *buf, apr_size_t len)
{
    return on_body(x, buf, len);
}

int mcp_exchange_feed_news(mcp_exchange_t *x, const mcp_loop_news_t *news, int *cut)
{
    *cut = 0;
    if (news->headers) {
        *cut = mcp_exchange_feed_headers(x, &news->response);
    }
    if (!*cut && news->len) {
        *cut = mcp_exchange_feed_body(x, news->data, news->len);
    }
    return *cut || news->done;
}

int mcp_exchange_feed_tick(mcp_exchange_t *x)
{
    return on_tick(x);
}

void mcp_exchange_call_defaults(mcp_exchange_t *x, mcp_backend_call_t *call)
{
    call->target = x->q->conf->backend;
    call->connect_timeout_ms = (long)apr_time_as_msec(x->q->conf->backend_connect_timeout);
    call->traceparent = mcp_req_trace(x->q->r, &call->tracestate);
    call->identity = mcp_config_backend_headers(x->q->r, x->q->conf);
    call->tls = x->q->conf->backend_tls;
    mcp_stdio_call(x->q->r, call);   /* a stdio server's supervisor: where, and who asks */
}

mcp_backend_status_t mcp_exchange_perform(mcp_exchange_t *x, mcp_backend_call_t *call,
                                          const char **err)
{
    mcp_req_t *q = x->q;
    mcp_backend_status_t status;

    mcp_exchange_call_defaults(x, call);
    call->on_headers = on_headers;
    call->on_body = on_body;
    call->on_tick = on_tick;
    call->baton = x;
    mcp_exchange_begin(x);
    status = mcp_backend_perform(mcp_child.backends, q->r->pool, call, &x->response, err);
    return mcp_exchange_end(x, status, err);
}

/* Each thread's multi handle for mcp_exchange_perform_all, kept for the thread's life: the
 * connections to the members live in a multi handle's cache, so a new one per fan-out would be
 * a new connection to every member every time. */
static apr_threadkey_t *multi_key;

static void multi_free(void *multi)
{
    curl_multi_cleanup(multi);
}

void mcp_exchange_child_init(apr_pool_t *pchild)
{
    if (apr_threadkey_private_create(&multi_key, multi_free, pchild) != APR_SUCCESS) {
        multi_key = NULL;   /* a multi handle per fan-out, then */
    }
}

/* This thread's multi handle (*own: the caller's to clean up, when there is no key). */
static CURLM *thread_multi(int *own)
{
    void *multi = NULL;

    *own = 0;
    if (multi_key && apr_threadkey_private_get(&multi, multi_key) == APR_SUCCESS && multi) {
        return multi;
    }
    if (!(multi = curl_multi_init())) {
        return NULL;
    }
    if (!multi_key || apr_threadkey_private_set(multi, multi_key) != APR_SUCCESS) {
        *own = 1;
    }
    return multi;
}

/* The multi handle's callbacks: each exchange's own hooks, the response copied. */
static int on_headers_copied(void *baton, const mcp_backend_response_t *resp)
{
    return mcp_exchange_feed_headers(baton, resp);
}

void mcp_exchange_perform_all(mcp_exchange_t *const *xs, mcp_backend_call_t *calls, int n,
                              mcp_backend_status_t *status, const char **err)
{
    mcp_backend_async_t **as;
    CURLM *multi;
    int i, running = 0, own;

    if (n <= 0) {
        return;
    }
    as = apr_pcalloc(xs[0]->q->r->pool, sizeof(*as) * (apr_size_t)n);
    multi = thread_multi(&own);

    for (i = 0; i < n; i++) {
        mcp_exchange_t *x = xs[i];

        status[i] = MCP_BACKEND_FAILED;
        err[i] = NULL;
        mcp_exchange_call_defaults(x, &calls[i]);
        calls[i].on_headers = on_headers_copied;
        calls[i].on_body = on_body;
        calls[i].on_tick = on_tick;
        calls[i].baton = x;
        mcp_exchange_begin(x);
        if (!multi) {
            err[i] = "cannot create an HTTP client multi handle";
            continue;
        }
        if (!(as[i] = mcp_backend_async_create(mcp_child.backends, x->q->r->pool, &calls[i], 0,
                                               &err[i]))) {
            continue;
        }
        if (curl_multi_add_handle(multi, mcp_backend_async_curl(as[i])) != CURLM_OK) {
            err[i] = "cannot start the exchange";
            status[i] = mcp_backend_async_finish(as[i], CURLE_FAILED_INIT, &err[i]);
            as[i] = NULL;
            continue;
        }
        running++;
    }
    while (running > 0) {
        CURLMsg *msg;
        int left, still;

        if (curl_multi_perform(multi, &still) != CURLM_OK) {
            break;
        }
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE) {
                continue;
            }
            for (i = 0; i < n; i++) {
                if (as[i] && mcp_backend_async_curl(as[i]) == (void *)msg->easy_handle) {
                    CURLcode rc = msg->data.result;
                    curl_multi_remove_handle(multi, msg->easy_handle);
                    status[i] = mcp_backend_async_finish(as[i], (int)rc, &err[i]);
                    status[i] = mcp_exchange_end(xs[i], status[i], &err[i]);
                    as[i] = NULL;
                    running--;
                    break;
                }
            }
        }
        /* Waits only while one is left (a poll with nothing to wait for takes its whole 200 ms). */
        if (running > 0 && curl_multi_poll(multi, NULL, 0, 200, NULL) != CURLM_OK) {
            break;
        }
    }
    for (i = 0; i < n; i++) {
        if (as[i]) {   /* the multi handle failed under it */
            curl_multi_remove_handle(multi, mcp_backend_async_curl(as[i]));
            status[i] = mcp_backend_async_finish(as[i], CURLE_ABORTED_BY_CALLBACK, &err[i]);
            status[i] = mcp_exchange_end(xs[i], status[i], &err[i]);
        }
    }
    if (multi && own) {
        curl_multi_cleanup(multi);
    }
}

mcp_backend_status_t mcp_exchange_post(mcp_exchange_t *x, const char *body, apr_size_t len,
                                       const char *version, const apr_array_header_t *headers,
                                       apr_interval_time_t timeout, const char **err)
{
    mcp_backend_call_t call;

    memset(&call, 0, sizeof(call));
    call.method = "POST";
    call.body = body;
    call.body_len = len;
    call.protocol_version = version;
    call.headers = headers;
    call.timeout_ms = (long)apr_time_as_msec(timeout);
    return mcp_exchange_perform(x, &call, err);
}

typedef struct collected_t {
    apr_pool_t         *pool;
    apr_array_header_t *messages;   /* const char * */
} collected_t;

static int collect(void *baton, const char *json, apr_size_t len)
{
    collected_t *c = baton;

    APR_ARRAY_PUSH(c->messages, const char *) = apr_pstrmemdup(c->pool, json, len);
    return 0;
}

mcp_backend_status_t mcp_exchange_collect(mcp_req_t *q, const char *session_id,
                                          const char *version, const char *body,
                                          mcp_exchange_t *x, apr_array_header_t **messages,
                                          const char **err)
{
    collected_t *c = apr_pcalloc(q->r->pool, sizeof(*c));
    mcp_backend_call_t call;
    mcp_backend_status_t status;
    apr_size_t len;
    const char *json;

    c->pool = q->r->pool;
    c->messages = apr_array_make(q->r->pool, 2, sizeof(const char *));
    mcp_exchange_init(x, q, c);
    x->on_message = collect;
    memset(&call, 0, sizeof(call));
    call.method = "POST";
    call.body = body;
    call.body_len = strlen(body);
    call.session_id = session_id;
    call.protocol_version = version;
    call.timeout_ms = (long)apr_time_as_msec(q->conf->backend_timeout);
    status = mcp_exchange_perform(x, &call, err);
    if (status == MCP_BACKEND_OK && !x->sse && (json = mcp_exchange_body(x, &len)) != NULL) {
        APR_ARRAY_PUSH(c->messages, const char *) = json;
    }
    *messages = c->messages;
    return status;
}

json_object *mcp_exchange_response_to(apr_pool_t *p, const apr_array_header_t *messages,
                                      json_object *id, const char **text)
{
    int i;

    for (i = 0; messages && i < messages->nelts; i++) {
        const char *t = APR_ARRAY_IDX(messages, i, const char *);
        json_object *obj = mcp_jsonrpc_parse_value(p, t, strlen(t));
        mcp_jsonrpc_msg_t msg;

        if (!obj) {
            continue;
        }
        mcp_jsonrpc_classify(obj, &msg);
        if ((msg.kind == MCP_MSG_RESPONSE || msg.kind == MCP_MSG_ERROR)
            && json_object_equal(msg.id, id)) {
            *text = t;
            return obj;
        }
    }
    return NULL;
}

const char *mcp_exchange_body(mcp_exchange_t *x, apr_size_t *len)
{
    char *buf;

    *len = 0;
    if (apr_brigade_pflatten(x->body, &buf, len, x->q->r->pool) != APR_SUCCESS || *len == 0) {
        return NULL;
    }
    return apr_pstrmemdup(x->q->r->pool, buf, *len);
}
