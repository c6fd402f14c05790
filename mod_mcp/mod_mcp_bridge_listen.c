/* mod_mcp_bridge_listen — the era bridge's subscriptions/listen (see mod_mcp_bridge.h): the
 * pooled session's GET stream, resources/subscribe per URI asked for, acknowledged with what the
 * backend can deliver, filtered and tagged. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mod_mcp_bridge_private.h"

APLOG_USE_MODULE(mcp);

/* ---- subscriptions/listen: the pooled session's GET stream ---------------------------------- */

typedef struct listen_t {
    bridge_t   *b;
    const char *acked;      /* the filter acknowledged (JSON text)              */
    const char *ack;        /* notifications/subscriptions/acknowledged, to send */
} listen_t;

/* The backend took the GET: the client's stream begins with the acknowledgement. */
static int listen_start(void *baton)
{
    listen_t *l = baton;

    mcp_stream_start_sse(&l->b->st, -1);
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
        if (mcp_bridged_post(b->q, b->pooled->backend_session_id, b->pooled->protocol_version,
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

/* The GET on b->pooled, acknowledged with what it can deliver once the backend took it. */
static mcp_backend_status_t listen_on(bridge_t *b, listen_t *l, const char **err)
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
    return mcp_exchange_perform(&b->x, &call, err);
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

static int listen_relay(bridge_t *b, int *own);

int mcp_bridged_listen(bridge_t *b)
{
    int own = 0, rc = listen_relay(b, &own);

    if (own) {
        end_own(b);
    }
    return rc;
}

/* The listen itself; *own when it got a pooled session of its own. */
static int listen_relay(bridge_t *b, int *own)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *why = NULL, *err = NULL, *end;
    mcp_backend_status_t status;
    listen_t l;

    if (!(b->pooled = mcp_bridged_pool(b, 0, &why))) {
        return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the era "
                             "bridge has no backend session: %s", why));
    }
    status = listen_on(b, &l, &err);
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
        *own = 1;
        status = listen_on(b, &l, &err);
    }
    if (b->st.client_gone) {
        mcp_stream_finish(&b->st, "closed");
        r->connection->keepalive = AP_CONN_CLOSE;
        return DONE;
    }
    if (status != MCP_BACKEND_OK || !b->x.sse) {
        return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                             "pooled session's GET stream %s", status != MCP_BACKEND_OK ? err
                             : b->x.response.status == HTTP_CONFLICT
                             ? "is held by another subscriptions/listen of this principal (a "
                               "2025 session has one)"
                             : apr_psprintf(r->pool, "was refused with HTTP %ld",
                                            b->x.response.status)));
    }
    /* The backend ended its stream: the graceful end of the subscription. */
    end = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"resultType\":"
                       "\"complete\",\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":%s}}}",
                       mcp_jsonrpc_to_string(r->pool, b->msg->id, NULL),
                       mcp_jsonrpc_to_string(r->pool, b->msg->id, NULL));
    mcp_stream_add(&b->st, end, strlen(end));
    mcp_stream_finish(&b->st, "complete");
    return DONE;
}

