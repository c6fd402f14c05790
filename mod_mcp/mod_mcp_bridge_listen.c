/* mod_mcp_bridge_listen — the era bridge's subscriptions/listen (see mod_mcp_bridge.h): the
 * pooled session's GET stream, resources/subscribe per URI asked for, acknowledged with what the
 * backend can deliver, filtered and tagged. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mod_mcp_bridge_private.h"
#include "mod_mcp_park.h"

APLOG_USE_MODULE(mcp);

/* ---- subscriptions/listen: the pooled session's GET stream ---------------------------------- */

typedef struct listen_t {
    bridge_t       *b;
    const char     *acked;      /* the filter acknowledged (JSON text)              */
    const char     *ack;        /* notifications/subscriptions/acknowledged, to send */
    int             own;        /* b->pooled is the listen's own pooled session      */
    mcp_park_t     *pk;         /* the GET on the event loop, the listen parked once
                                 * acknowledged                                     */
    mcp_park_half_t half;
    int             sse;        /* the client's response is SSE (the ack is out)     */
    mcp_backend_status_t status; /* the GET's end (on the loop)                      */
    const char     *err;
} listen_t;

/* The backend took the GET: the client's stream begins with the acknowledgement. */
static int listen_start(void *baton)
{
    listen_t *l = baton;

    mcp_stream_start_sse(&l->b->st, -1);
    l->sse = 1;
    if (l->pk) {
        /* From now on the parked stream writes what the stream stores (the ack included). */
        mcp_stream_detach(&l->b->st);
        mcp_park_write_through(l->pk, &l->b->st);
    }
    return mcp_stream_add(&l->b->st, l->ack, strlen(l->ack)) || mcp_stream_commit(&l->b->st);
}

static int listen_message(void *baton, const char *json, apr_size_t len)
{
    listen_t *l = baton;
    bridge_t *b = l->b;
    json_object *obj;
    const char *out;

    apr_pool_clear(b->scratch);
    if (!(obj = mcp_jsonrpc_parse_value(b->scratch, json, len))
        || !(out = mcp_bridge_listen_pass(b->scratch, obj, l->acked, b->msg->id))) {
        return 0;   /* logs, requests, what was not asked for: not for a listen stream */
    }
    return mcp_stream_add(&b->st, out, strlen(out));
}

static int listen_chunk(void *baton)
{
    listen_t *l = baton;

    return mcp_stream_commit(&l->b->st) || l->b->st.client_gone;
}

static int listen_tick(void *baton)
{
    listen_t *l = baton;

    return mcp_stream_tick(&l->b->st) || l->b->st.client_gone;
}

/* resources/subscribe for each URI of the acknowledgement, on the pooled session; the URIs the
 * backend refused are taken out of it. */
static const char *subscribe_all(bridge_t *b, const char *acked)
{
    request_rec *r = b->q->r;
    json_object *ack = mcp_jsonrpc_parse_value(r->pool, acked, strlen(acked)), *uris, *kept;
    apr_array_header_t *messages;
    mcp_exchange_t x;
    const char *err = NULL, *text;
    size_t i;

    if (!json_object_object_get_ex(ack, "resourceSubscriptions", &uris)) {
        return acked;
    }
    kept = json_object_new_array();
    for (i = 0; i < json_object_array_length(uris); i++) {
        json_object *uri = json_object_array_get_idx(uris, i);
        const char *req = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"id\":\"listen-%"
                                       APR_INT64_T_FMT "-%d\",\"method\":\"resources/subscribe\","
                                       "\"params\":{\"uri\":%s}}", b->st.id, (int)i,
                                       mcp_jsonrpc_to_string(r->pool, uri, NULL));
        if (mcp_exchange_collect(b->q, b->pooled->backend_session_id, b->pooled->protocol_version,
                                 req, &x, &messages, &err) == MCP_BACKEND_OK
            && x.response.status == HTTP_OK
            && messages->nelts > 0 && !strstr(APR_ARRAY_IDX(messages, 0, const char *),
                                              "\"error\"")) {
            json_object_array_add(kept, json_object_get(uri));
        }
        else {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: the backend refused "
                          "resources/subscribe of %s", mcp_jsonrpc_to_string(r->pool, uri, NULL));
        }
    }
    json_object_object_add(ack, "resourceSubscriptions", kept);
    text = mcp_jsonrpc_to_string(r->pool, ack, NULL);
    return text;
}

static void end_own(bridge_t *b);
static int listen_end(bridge_t *b, listen_t *l, mcp_backend_status_t status, const char *err);

/* ---- the GET on the event loop: the listen parked once acknowledged -------------------------- */

static int parked_news(void *baton, const mcp_loop_news_t *news)
{
    listen_t *l = baton;
    int cut;

    if (!mcp_exchange_feed_news(&l->b->x, news, &cut)) {
        return 0;
    }
    l->err = news->err ? news->err : cut ? "stopped by the gateway" : NULL;
    l->status = mcp_exchange_end(&l->b->x, cut ? MCP_BACKEND_ABORTED : news->status, &l->err);
    if (l->sse) {
        listen_end(l->b, l, l->status, l->err);   /* acknowledged: it ends here */
    }
    return 1;
}

static int parked_tick(void *baton)
{
    listen_t *l = baton;

    if (!mcp_exchange_feed_tick(&l->b->x)) {
        return 0;
    }
    l->err = "stopped by the gateway";
    l->status = mcp_exchange_end(&l->b->x, MCP_BACKEND_ABORTED, &l->err);
    if (l->sse) {
        listen_end(l->b, l, l->status, l->err);
    }
    return 1;
}

/* The client went, a graceful restart or a stop: the listen ends (the GET is cut when this
 * returns); a client that is still there listens again. */
static void parked_stop(void *baton, const char *why)
{
    listen_t *l = baton;

    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, l->b->q->r, "era bridge: listen stream %"
                  APR_INT64_T_FMT " (parked) ends: %s", l->b->st.id, why);
    l->b->st.client_gone = 1;
    listen_end(l->b, l, MCP_BACKEND_ABORTED, why);
}

static int acknowledged(void *baton)
{
    listen_t *l = baton;

    return l->sse;
}

/* The GET on the loop, the request thread waiting until the backend took it (or refused it).
 * 1 when the listen is parked (the handler returns SUSPENDED); 0 when it ended meanwhile
 * (*status, *err: as mcp_exchange_perform would say); -1 when it cannot be parked (the caller
 * performs the GET itself). */
static int listen_parked(bridge_t *b, listen_t *l, mcp_backend_call_t *call,
                         mcp_backend_status_t *status, const char **err)
{
    mcp_req_t *q = b->q;
    const char *why = NULL;
    int done, gone;

    if (!(l->pk = mcp_park_create(q, b->st.id, 0, 0, 1))) {
        return -1;
    }
    mcp_exchange_call_defaults(&b->x, call);
    l->half.on_news = parked_news;
    l->half.on_tick = parked_tick;
    l->half.on_stop = parked_stop;
    l->half.baton = l;
    l->half.tick = apr_time_from_sec(1);
    l->half.lean = 1;   /* it mostly waits */
    mcp_exchange_begin(&b->x);
    if (mcp_park_backend(l->pk, call, &l->half, &why) != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "era bridge: listen stream %"
                      APR_INT64_T_FMT ": not parked (%s); relayed with this thread", b->st.id,
                      why);
        mcp_park_abandon(l->pk);
        l->pk = NULL;
        return -1;
    }
    done = mcp_park_wait(l->pk, acknowledged, q->conf->backend_timeout);
    gone = mcp_park_gone(l->pk);
    if (!done && l->sse && !gone) {
        return 1;
    }
    mcp_park_abandon(l->pk);   /* (a GET still running is cut) */
    l->pk = NULL;
    if (done) {   /* refused (a 409: the caller tries a pooled session of its own), failed, or
                   * acknowledged and ended at once (then ended already) */
        *status = l->status;
        *err = l->err;
    }
    else if (gone) {   /* an aborted connection cannot be parked: the listen ends */
        b->st.client_gone = 1;
        *status = MCP_BACKEND_ABORTED;
        *err = "the client went away";
    }
    else {
        *status = MCP_BACKEND_TIMEOUT;
        *err = "the backend did not take it within MCPBackendTimeout";
    }
    return 0;
}

/* The GET on b->pooled, acknowledged with what it can deliver once the backend took it. 1 when
 * the listen was parked (see listen_parked). */
static int listen_on(bridge_t *b, listen_t *l, mcp_backend_status_t *status, const char **err)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *init = NULL;
    mcp_backend_call_t call;

    mcp_store_bridge_init_result(mcp_req_db(q), r->pool, q->conf->backend_spec, &init);
    l->b = b;
    l->acked = subscribe_all(b, mcp_bridge_listen_ack(r->pool, b->msg->obj, init));
    l->ack = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                          "subscriptions/acknowledged\",\"params\":{\"_meta\":{\"io."
                          "modelcontextprotocol/subscriptionId\":%s},\"notifications\":%s}}",
                          mcp_jsonrpc_to_string(r->pool, b->msg->id, NULL), l->acked);
    mcp_exchange_init(&b->x, q, l);
    b->x.on_sse = listen_start;
    b->x.on_message = listen_message;
    b->x.after_chunk = listen_chunk;
    b->x.on_tick = listen_tick;
    memset(&call, 0, sizeof(call));
    call.method = "GET";
    call.session_id = b->pooled->backend_session_id;
    call.protocol_version = b->pooled->protocol_version;
    switch (listen_parked(b, l, &call, status, err)) {
    case 1:
        return 1;
    case 0:
        return 0;
    default:
        *status = mcp_exchange_perform(&b->x, &call, err);
        return 0;
    }
}

/* A pooled session of the listen's own (a second listen's) ends with the listen: terminated
 * here and DELETEd upstream (no call is given it; the idle sweep would only do it later). */
static void end_own(bridge_t *b)
{
    request_rec *r = b->q->r;

    if (mcp_store_session_terminate(mcp_req_db(b->q), r->pool, b->pooled->id, r->user, "client")
        != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "era bridge: stream %" APR_INT64_T_FMT
                      ": the listen's own pooled session %s was not ended (the idle sweep will): "
                      "%s", b->st.id, b->pooled->id, mcp_req_db(b->q)->error);
        return;
    }
    mcp_bridged_end_session(b, b->pooled, "bridge: its listen ended");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": the "
                  "listen ended, and with it its own pooled session %s", b->st.id,
                  b->pooled->id);
}

/* The listen's end (on its thread, or on the loop once parked): the backend ended its stream
 * (the subscription's graceful end), the client went, or the GET failed — stored as an event
 * once acknowledged, else answered with a JSON error (only on the request's thread: a listen is
 * parked only once acknowledged); a pooled session of its own ends with it. Once: a parked
 * listen may be ended by its hang-up and by its GET's end. Returns what the handler returns. */
static int listen_end(bridge_t *b, listen_t *l, mcp_backend_status_t status, const char *err)
{
    request_rec *r = b->q->r;
    int rc = DONE;

    if (b->finished) {
        return DONE;
    }
    b->finished = 1;
    if (b->st.client_gone) {
        mcp_stream_finish(&b->st, "closed");
        r->connection->keepalive = AP_CONN_CLOSE;
    }
    else if (status != MCP_BACKEND_OK || !b->x.sse) {
        const char *message = apr_psprintf(r->pool, "Bad Gateway: the pooled session's GET "
                                           "stream %s", status != MCP_BACKEND_OK ? err
                                           : b->x.response.status == HTTP_CONFLICT
                                           ? "is held by another subscriptions/listen of this "
                                             "principal (a 2025 session has one)"
                                           : apr_psprintf(r->pool, "was refused with HTTP %ld",
                                                          b->x.response.status));
        if (l->sse) {
            const char *json = mcp_jsonrpc_error_body(r->pool, b->msg->id,
                                                      MCP_JSONRPC_INTERNAL_ERROR, message, NULL);
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "era bridge: stream %" APR_INT64_T_FMT
                          ": %s", b->st.id, message);
            mcp_stream_add(&b->st, json, strlen(json));
            mcp_stream_finish(&b->st, "failed");
        }
        else {
            rc = mcp_bridged_fail(b, HTTP_BAD_GATEWAY, message);   /* nothing was sent yet */
        }
    }
    else {
        const char *end = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{"
                                       "\"resultType\":\"complete\",\"_meta\":{\"io."
                                       "modelcontextprotocol/subscriptionId\":%s}}}",
                                       mcp_jsonrpc_to_string(r->pool, b->msg->id, NULL),
                                       mcp_jsonrpc_to_string(r->pool, b->msg->id, NULL));
        mcp_stream_add(&b->st, end, strlen(end));
        mcp_stream_finish(&b->st, "complete");
    }
    if (l->own) {
        end_own(b);
    }
    return rc;
}

int mcp_bridged_listen(bridge_t *b)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *why = NULL, *err = NULL;
    mcp_backend_status_t status = MCP_BACKEND_OK;
    listen_t *l = apr_pcalloc(r->pool, sizeof(*l));   /* a parked listen outlives this frame */

    if (!(b->pooled = mcp_bridged_pool(b, 0, &why))) {
        return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the era "
                             "bridge has no backend session: %s", why));
    }
    if (listen_on(b, l, &status, &err)) {
        return mcp_park_go(l->pk, 0);
    }
    if (status == MCP_BACKEND_OK && !b->x.sse && b->x.response.status == HTTP_CONFLICT
        && !b->st.client_gone) {
        /* A 2025 session has one GET stream and another listen holds it: this listen gets a
         * pooled session of its own (same principal and capabilities; not given to calls, so it
         * sees the backend's notifications for every session, not those of one call's). */
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": the "
                      "pooled session's GET is held by another listen; this one gets a pooled "
                      "session of its own", b->st.id);
        if (!(b->pooled = mcp_bridged_pool_own(b, apr_psprintf(r->pool, "listen-%"
                                                              APR_INT64_T_FMT, b->st.id), &why))) {
            return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "era bridge has no backend session for a second listen: %s",
                                 why));
        }
        l->own = 1;
        l->status = 0;
        l->err = NULL;
        if (listen_on(b, l, &status, &err)) {
            return mcp_park_go(l->pk, 0);
        }
    }
    return listen_end(b, l, status, err);
}

