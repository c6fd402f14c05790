/* mod_mcp_bridge — see mod_mcp_bridge.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_era.h"
#include "mcp_id.h"
#include "mod_mcp_bridge.h"
#include "mod_mcp_bridge_private.h"

APLOG_USE_MODULE(mcp);

/* How long a backend may keep the stream open after the response before the gateway cuts it. */
#define ANSWERED_GRACE apr_time_from_sec(1)
/* A round's expiry is looked at this long after it passed (its retry may just be starting). */
#define ROUND_GRACE apr_time_from_sec(1)
/* The JSON-RPC id of the initialize request sent on the client's behalf. */
#define INITIALIZE_ID 0

/* ---- small exchanges: initialize, notifications, responses --------------------------------- */

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

/* One POST of body (session: the backend's, or NULL), its answer's messages collected. */
mcp_backend_status_t mcp_bridged_post(mcp_req_t *q, const char *session_id, const char *version,
                                      const char *body, mcp_exchange_t *x,
                                      apr_array_header_t **messages, const char **err)
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

/* Answers a backend's ping on the client's behalf: a 2026-07-28 client has no ping to give. */
void mcp_bridged_pong(bridge_t *b, const mcp_store_session_t *s, json_object *ping)
{
    apr_array_header_t *ignored;
    mcp_exchange_t x;
    const char *err = NULL, *pong = mcp_bridge_pong(b->q->r->pool, ping);

    mcp_store_events_append(mcp_req_db(b->q), b->q->r->pool, s, 0, 0, "in",
                            apr_pstrcat(b->q->r->pool, "[", pong, "]", NULL));
    if (mcp_bridged_post(b->q, s->backend_session_id, s->protocol_version, pong, &x, &ignored,
                         &err) != MCP_BACKEND_OK || x.response.status >= 300) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, b->q->r, "era bridge: the backend's ping "
                      "was not answered: %s", err ? err : apr_psprintf(b->q->r->pool, "HTTP %ld",
                                                                       x.response.status));
    }
}

/* Tells the backend (best effort) that the call is cancelled. */
void mcp_bridged_cancel(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_id,
                        const char *reason)
{
    apr_array_header_t *ignored;
    mcp_exchange_t x;
    const char *err = NULL, *n = mcp_bridge_cancelled(b->q->r->pool, backend_id, reason);

    if (mcp_bridged_post(b->q, s->backend_session_id, s->protocol_version, n, &x, &ignored, &err)
        != MCP_BACKEND_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, b->q->r, "era bridge: the backend was not "
                      "told that request %" APR_INT64_T_FMT " is cancelled: %s", backend_id, err);
        return;
    }
    mcp_store_events_append(mcp_req_db(b->q), b->q->r->pool, s, 0, 0, "in",
                            apr_pstrcat(b->q->r->pool, "[", n, "]", NULL));
}

/* ---- the pool ------------------------------------------------------------------------------ */

static json_object *response_to(apr_pool_t *p, apr_array_header_t *messages, apr_int64_t id,
                                const char **text)
{
    int i;

    for (i = 0; i < messages->nelts; i++) {
        const char *t = APR_ARRAY_IDX(messages, i, const char *);
        json_object *obj = mcp_jsonrpc_parse_value(p, t, strlen(t));
        if (obj && mcp_bridge_classify(obj, id, 0) == MCP_BRIDGE_FINAL) {
            *text = t;
            return obj;
        }
    }
    return NULL;
}

static const char *member_text(apr_pool_t *p, json_object *obj, const char *key)
{
    json_object *v;

    return json_object_object_get_ex(obj, key, &v) ? mcp_jsonrpc_to_string(p, v, NULL) : NULL;
}

/* Initializes a new pooled session on the client's behalf. NULL with *why on failure. */
static mcp_store_session_t *pool_new(bridge_t *b, const char *caps_key, const char **why)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *init = mcp_bridge_initialize(r->pool, b->msg->obj, INITIALIZE_ID,
                                             "mod_mcp");
    const char *text = NULL, *err = NULL, *version, *initialized;
    apr_array_header_t *messages;
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];
    json_object *response, *result, *params = NULL, *request;
    mcp_store_refusal_t refused;
    mcp_store_session_t *s;
    mcp_store_status_t stored;
    mcp_exchange_t x;

    if (mcp_bridged_post(q, NULL, NULL, init, &x, &messages, &err) != MCP_BACKEND_OK) {
        *why = apr_psprintf(r->pool, "initialize failed: %s", err);
        return NULL;
    }
    if (x.response.status != HTTP_OK
        || !(response = response_to(r->pool, messages, INITIALIZE_ID, &text))
        || !json_object_object_get_ex(response, "result", &result)) {
        *why = apr_psprintf(r->pool, "the backend refused initialize (HTTP %ld)",
                            x.response.status);
        return NULL;
    }
    version = mcp_jsonrpc_get_string(result, "protocolVersion");
    if (!mcp_protocol_session(version)) {
        *why = apr_psprintf(r->pool, "the backend negotiated protocol version '%s'",
                            version ? version : "none");
        return NULL;
    }
    s = apr_pcalloc(r->pool, sizeof(*s));
    if (apr_generate_random_bytes(random, sizeof(random)) != APR_SUCCESS) {
        *why = "no secure random bytes for a session id";
        return NULL;
    }
    s->id = mcp_id_session_encode(r->pool, random, sizeof(random));
    s->backend_url = q->conf->backend_spec;
    s->backend_session_id = x.response.session_id;
    s->protocol_version = apr_pstrdup(r->pool, version);
    s->principal = r->user;
    request = mcp_jsonrpc_parse_value(r->pool, init, strlen(init));
    json_object_object_get_ex(request, "params", &params);
    s->client_info = member_text(r->pool, params, "clientInfo");
    s->client_capabilities = member_text(r->pool, params, "capabilities");
    s->server_info = member_text(r->pool, result, "serverInfo");

    initialized = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
    if (mcp_bridged_post(q, s->backend_session_id, s->protocol_version, initialized, &x, &messages,
                         &err) != MCP_BACKEND_OK || x.response.status >= 300) {
        mcp_req_end_backend_session(q, s->backend_session_id, "bridge initialize failed");
        *why = apr_psprintf(r->pool, "notifications/initialized failed: %s",
                            err ? err : apr_psprintf(r->pool, "HTTP %ld", x.response.status));
        return NULL;
    }
    if (json_object_object_get_ex(result, "capabilities", &params)
        && json_object_object_get_ex(params, "logging", NULL)) {
        /* Everything the backend logs comes; each request gets what its logLevel asks for. */
        mcp_bridged_post(q, s->backend_session_id, s->protocol_version,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"logging/setLevel\","
                         "\"params\":{\"level\":\"debug\"}}", &x, &messages, &err);
    }
    stored = mcp_store_session_insert_admitted(mcp_req_db(q), r->pool, s, mcp_req_holder(q), init,
                                               text, 0, 0, mcp_req_idle_secs(q), &refused);
    if (stored == MCP_STORE_OK) {
        stored = mcp_store_bridge_pool_add(mcp_req_db(q), r->pool, s->id, r->user,
                                           q->conf->backend_spec, caps_key,
                                           member_text(r->pool, response, "result"));
    }
    if (stored != MCP_STORE_OK) {
        mcp_req_end_backend_session(q, s->backend_session_id, "bridge: not stored");
        *why = apr_psprintf(r->pool, "the pooled session was not stored: %s",
                            mcp_req_db(q)->error);
        return NULL;
    }
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: pooled session %s started for %s "
                  "(backend session %s, protocol %s)", mcp_id_tag(r->pool, s->id),
                  r->user ? r->user : "-", mcp_id_tag(r->pool, s->backend_session_id), version);
    return s;
}

/* The pooled session for this request: found, or initialized. */
mcp_store_session_t *mcp_bridged_pool(bridge_t *b, int fresh, const char **why)
{
    mcp_req_t *q = b->q;
    const char *key = mcp_bridge_caps_key(q->r->pool, b->msg->obj);
    mcp_store_session_t *s = NULL;
    mcp_store_status_t st;

    if (!fresh) {
        st = mcp_store_bridge_pooled(mcp_req_db(q), q->r->pool, q->r->user,
                                     q->conf->backend_spec, key, &s);
        if (st == MCP_STORE_OK) {
            return s;
        }
        if (st != MCP_STORE_NOT_FOUND) {
            *why = apr_psprintf(q->r->pool, "the pool could not be read: %s",
                                mcp_req_db(q)->error);
            return NULL;
        }
    }
    return pool_new(b, key, why);
}

mcp_store_session_t *mcp_bridged_pool_own(bridge_t *b, const char *tag, const char **why)
{
    return pool_new(b, apr_pstrcat(b->q->r->pool, mcp_bridge_caps_key(b->q->r->pool, b->msg->obj),
                                   "#", tag, NULL), why);
}

/* The backend's serverInfo (JSON text, may be NULL), stamped on results. */
void mcp_bridged_server_info(bridge_t *b, const char *text)
{
    json_object *v = text ? mcp_jsonrpc_parse_value(b->q->r->pool, text, strlen(text)) : NULL;

    b->server_info = v && json_object_is_type(v, json_type_object) ? v : NULL;
}

/* ---- answering the client ------------------------------------------------------------------ */

int mcp_bridged_json(bridge_t *b, int status, const char *json)
{
    request_rec *r = b->q->r;

    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_rwrite(json, (int)strlen(json), r);
    return DONE;
}

/* A failure before or instead of the response: stored on the client's stream, then sent. */
int mcp_bridged_fail(bridge_t *b, int http, const char *message)
{
    request_rec *r = b->q->r;
    const char *json = mcp_jsonrpc_error_body(r->pool, b->msg->id, MCP_JSONRPC_INTERNAL_ERROR,
                                              message, NULL);

    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": %s",
                  b->st.id, message);
    mcp_stream_add(&b->st, json, strlen(json));
    mcp_stream_finish(&b->st, "failed");
    return b->st.mode == MCP_STREAM_SSE ? DONE : mcp_bridged_json(b, http, json);
}

/* ---- the call, relayed by the process that made it ----------------------------------------- */

static int cancelled_now(bridge_t *b)
{
    if (!b->parked && !b->answered && b->st.client_gone) {
        b->cancelled = 1;
    }
    return b->cancelled;
}

/* The client's response becomes SSE with the first message relayed: until then an
 * InputRequiredResult, a -32021 refusal or a lone response can still be plain JSON with its own
 * HTTP status. */
static void client_sse(bridge_t *b)
{
    if (b->st.mode != MCP_STREAM_SSE) {
        mcp_stream_start_sse(&b->st, -1);
    }
}

/* The error code of a response (parsed), or 0. */
static int error_code_of(json_object *obj)
{
    json_object *error = NULL, *code = NULL;

    if (json_object_object_get_ex(obj, "error", &error)
        && json_object_is_type(error, json_type_object)
        && json_object_object_get_ex(error, "code", &code)
        && json_object_is_type(code, json_type_int)) {
        return json_object_get_int(code);
    }
    return 0;
}

/* The round cut: the backend's input requests that came in one piece of its SSE answer (the
 * backend's one write, as the test backend's fixtures send a round) become one
 * InputRequiredResult. A request split over two pieces only costs the client one more round:
 * the retry's follower finds the rest stored after the round's position. */
static void cut_round(bridge_t *b)
{
    if (b->parked || b->answered || b->refused_cap || !b->round || b->round->nelts == 0) {
        return;
    }
    mcp_stream_commit(&b->bs);   /* stored before the round names its position */
    client_sse(b);   /* the relay reads on after the client's response ended: SSE can end early */
    b->parked = 1;
    b->pending_seq = b->round_pos;
    b->pending_since = apr_time_now();
    mcp_bridged_round_start(b, b->pooled, b->bs.id, b->round_pos, b->round);
}

static int on_message(void *baton, const char *json, apr_size_t len)
{
    bridge_t *b = baton;
    apr_int64_t seq = b->bs.next_seq + b->bs.batch->nelts;
    mcp_bridge_kind_t kind;
    json_object *obj;

    if (b->answered || b->abandoned) {
        return 0;
    }
    apr_pool_clear(b->scratch);
    if (!(obj = mcp_jsonrpc_parse_value(b->scratch, json, len))) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, b->q->r, "era bridge: stream %"
                      APR_INT64_T_FMT ": the backend sent a message that is not JSON; dropped",
                      b->bs.id);
        return 0;
    }
    mcp_stream_add(&b->bs, json, len);
    kind = mcp_bridge_classify(obj, b->backend_id, b->log_min);
    if (kind == MCP_BRIDGE_FINAL) {
        b->answered = apr_time_now();
    }
    if (kind == MCP_BRIDGE_PING) {
        mcp_bridged_pong(b, b->pooled, obj);
        return 0;
    }
    if (b->parked) {
        if (kind == MCP_BRIDGE_INPUT_REQUEST) {
            b->pending_seq = seq;
            b->pending_since = apr_time_now();
        }
        return 0;
    }
    if (kind == MCP_BRIDGE_NOTIFICATION) {
        client_sse(b);
        return mcp_stream_add(&b->st, json, len);
    }
    if (kind == MCP_BRIDGE_FINAL) {
        const char *out = mcp_bridge_response_out(b->q->r->pool, obj, b->msg->id,
                                                  b->msg->method, b->server_info);
        b->final_out = out;
        b->final_code = error_code_of(obj);
        return mcp_stream_add(&b->st, out, strlen(out));
    }
    if (kind == MCP_BRIDGE_INPUT_REQUEST) {
        json_object *copy = mcp_jsonrpc_parse_value(b->q->r->pool, json, len);

        if (!b->round) {
            b->round = apr_array_make(b->q->r->pool, 3, sizeof(json_object *));
        }
        if (!b->refused_cap) {
            b->refused_cap = mcp_bridge_missing_capability(b->msg->obj, copy);
        }
        APR_ARRAY_PUSH(b->round, json_object *) = copy;
        b->round_pos = seq;
        /* A client that lacks the capability cannot answer: the call ends (-32021). */
        return b->refused_cap != NULL;
    }
    return 0;
}

static int on_sse(void *baton)
{
    return cancelled_now(baton);
}

static void finish_both(bridge_t *b, const char *status)
{
    if (b->finished) {
        return;
    }
    b->finished = 1;
    mcp_stream_finish(&b->bs, status);
    if (!b->parked) {
        mcp_stream_finish(&b->st, status);
    }
}

static int after_chunk(void *baton)
{
    bridge_t *b = baton;

    if (b->answered) {
        finish_both(b, b->st.broken || b->bs.broken ? "failed" : "complete");
        return 0;
    }
    if (mcp_stream_commit(&b->bs)) {
        return 1;
    }
    cut_round(b);
    return b->parked ? 0 : mcp_stream_commit(&b->st) || cancelled_now(b);
}

/* Parked: a round not claimed in time abandons the call. */
static int round_abandoned(bridge_t *b)
{
    int claimed = 0;

    if (!b->pending_since
        || apr_time_now() - b->pending_since < b->q->conf->bridge_input_timeout + ROUND_GRACE) {
        return 0;
    }
    if (mcp_store_bridge_round_claimed(mcp_req_db(b->q), b->scratch, b->bs.id, b->pending_seq,
                                       &claimed) != MCP_STORE_OK) {
        return 0;   /* looked at again at the next tick */
    }
    b->pending_since = 0;
    if (!claimed) {
        b->abandoned = 1;
    }
    return b->abandoned;
}

static int on_tick(void *baton)
{
    bridge_t *b = baton;

    if (b->answered) {
        return apr_time_now() - b->answered > ANSWERED_GRACE;
    }
    if (mcp_stream_tick(&b->bs)) {
        return 1;
    }
    if (b->parked) {
        return round_abandoned(b);
    }
    return mcp_stream_tick(&b->st) || cancelled_now(b);
}

static void bridge_init(bridge_t *b, mcp_req_t *q)
{
    memset(b, 0, sizeof(*b));
    b->q = q;
    b->msg = &q->body->msgs[0];
    apr_pool_create(&b->scratch, q->r->pool);
    b->log_min = mcp_bridge_request_log_level(b->msg->obj);
}

/* Opens the backend stream on the pooled session, linked to the client's. */
static int open_backend_stream(bridge_t *b, const char **why)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *sent = mcp_bridge_request_in(r->pool, b->msg->obj, b->backend_id);
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t none;
    const char *primed[8];
    apr_int64_t id = 0;

    memset(&none, 0, sizeof(none));
    none.holder = mcp_req_holder(q);
    b->bq = *q;
    b->bq.session = b->pooled;
    b->bq.raw = sent;
    b->bq.raw_len = strlen(sent);
    if (mcp_store_stream_open_request_admitted(mcp_req_db(q), r->pool, b->pooled,
                                               mcp_req_idle_secs(q),
                                               apr_psprintf(r->pool, "%" APR_INT64_T_FMT,
                                                            b->backend_id),
                                               b->msg->method, sent, mcp_child.owner,
                                               mcp_req_lease_secs(q), &none,
                                               mcp_protocol_primed(primed, 8), primed, &id,
                                               &refused)
            != MCP_STORE_OK
        || mcp_store_bridge_link(mcp_req_db(q), r->pool, b->st.id, id) != MCP_STORE_OK) {
        *why = apr_psprintf(r->pool, "the backend stream was not stored: %s",
                            mcp_req_db(q)->error ? mcp_req_db(q)->error : "session gone");
        return -1;
    }
    mcp_stream_init(&b->bs, &b->bq, id, MCP_STORE_SEQ_PRIMING + 1);
    b->bs.mode = MCP_STREAM_JSON;
    mcp_stream_own(&b->bs);
    return 0;
}

static mcp_backend_status_t forward(bridge_t *b, const char **err)
{
    mcp_req_t *q = b->q;
    mcp_backend_call_t call;

    mcp_exchange_init(&b->x, q, b);
    b->x.on_message = on_message;
    b->x.on_sse = on_sse;
    b->x.after_chunk = after_chunk;
    b->x.on_tick = on_tick;
    memset(&call, 0, sizeof(call));
    call.method = "POST";
    call.body = b->bq.raw;
    call.body_len = b->bq.raw_len;
    call.session_id = b->pooled->backend_session_id;
    call.protocol_version = b->pooled->protocol_version;
    call.timeout_ms = (long)apr_time_as_msec(q->conf->stream_timeout);
    return mcp_exchange_perform(&b->x, &call, err);
}

/* The backend forgot the pooled session (404 before anything was relayed). */
static int session_lost(bridge_t *b, mcp_backend_status_t status)
{
    return status == MCP_BACKEND_OK && b->x.response.status == HTTP_NOT_FOUND && !b->x.sse
           && !b->answered && b->st.written == 0;
}

/* The HTTP status of a response answered as JSON: the backend's 4xx, else what 2026-07-28 asks
 * of the error (404 for -32601, 400 for -32021), else 200. */
static int final_status(bridge_t *b)
{
    if (b->x.response.status >= 400 && b->x.response.status < 500) {
        return (int)b->x.response.status;
    }
    if (b->final_code == MCP_JSONRPC_METHOD_NOT_FOUND) {
        return HTTP_NOT_FOUND;
    }
    return b->final_code == MCP_ERA_MISSING_CAPABILITY ? HTTP_BAD_REQUEST : HTTP_OK;
}

/* The backend asked for something the client did not declare it can give: the backend call is
 * cancelled and the client gets -32021 (400 unless its response is SSE already). */
int mcp_bridged_refuse(bridge_t *b, const mcp_store_session_t *s, const char *cap)
{
    request_rec *r = b->q->r;
    json_object *data = json_object_new_object(), *caps = json_object_new_object();
    const char *json;

    json_object_object_add(caps, cap, json_object_new_object());
    json_object_object_add(data, "requiredCapabilities", caps);
    json = mcp_jsonrpc_error_body(r->pool, b->msg->id, MCP_ERA_MISSING_CAPABILITY,
                                  apr_psprintf(r->pool, "Missing required client capability: "
                                               "the backend asks for %s, which the request's "
                                               "clientCapabilities do not declare", cap), data);
    json_object_put(data);
    mcp_bridged_cancel(b, s, b->backend_id, apr_psprintf(r->pool, "the client did not declare "
                       "the %s capability", cap));
    if (b->bs.id) {
        mcp_stream_finish(&b->bs, "cancelled");
    }
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": the "
                  "backend asked for %s, which the client did not declare: -32021", b->st.id, cap);
    mcp_stream_add(&b->st, json, strlen(json));
    mcp_stream_finish(&b->st, "failed");
    return b->st.mode == MCP_STREAM_SSE ? DONE : mcp_bridged_json(b, HTTP_BAD_REQUEST, json);
}

static int relay_call(bridge_t *b)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *err = NULL, *why = NULL, *json;
    mcp_backend_status_t status;
    apr_size_t len;
    int attempt;

    for (attempt = 0;; attempt++) {
        if (!(b->pooled = mcp_bridged_pool(b, attempt > 0, &why))
            || open_backend_stream(b, &why) != 0) {
            return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "era bridge has no backend session: %s", why));
        }
        mcp_bridged_server_info(b, b->pooled->server_info);
        status = forward(b, &err);
        if (attempt == 0 && session_lost(b, status)) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: the backend lost pooled "
                          "session %s (404); a new one is initialized and the request sent "
                          "again", mcp_id_tag(r->pool, b->pooled->id));
            mcp_stream_finish(&b->bs, "failed");
            mcp_store_session_terminate(mcp_req_db(q), r->pool, b->pooled->id, r->user,
                                        "backend");
            continue;
        }
        break;
    }
    cut_round(b);   /* requests in a last piece that no after_chunk saw */
    if (b->refused_cap && !b->answered) {   /* (answered anyway: the response wins) */
        return mcp_bridged_refuse(b, b->pooled, b->refused_cap);
    }
    if (b->cancelled || b->abandoned) {
        mcp_bridged_cancel(b, b->pooled, b->backend_id, b->cancelled
                        ? "the client closed its response (2026-07-28: cancellation)"
                        : "the client did not retry the input-required round in time");
        mcp_stream_finish(&b->bs, "cancelled");
        if (b->cancelled) {
            mcp_stream_finish(&b->st, "cancelled");
            r->connection->keepalive = AP_CONN_CLOSE;
        }
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT
                      ": cancelled (%s); the backend was told", b->st.id,
                      b->cancelled ? "the client closed its response" : "round abandoned");
        return DONE;
    }
    if (b->parked) {
        if (!b->finished) {
            mcp_stream_finish(&b->bs, b->answered ? "complete" : "failed");
        }
        return DONE;
    }
    if (b->answered && b->x.sse) {
        finish_both(b, "complete");
        return b->st.mode == MCP_STREAM_SSE || !b->final_out
               ? DONE : mcp_bridged_json(b, final_status(b), b->final_out);
    }
    if (status == MCP_BACKEND_OK && !b->x.sse && (json = mcp_exchange_body(&b->x, &len))) {
        on_message(b, json, len);
        if (b->answered && b->final_out) {
            finish_both(b, "complete");
            return mcp_bridged_json(b, final_status(b), b->final_out);
        }
    }
    mcp_stream_finish(&b->bs, "failed");
    if (status == MCP_BACKEND_TIMEOUT) {
        return mcp_bridged_fail(b, HTTP_GATEWAY_TIME_OUT, apr_psprintf(r->pool, "Gateway Timeout: "
                             "no complete answer from the backend in time: %s", err));
    }
    return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, status != MCP_BACKEND_OK
                         ? apr_psprintf(r->pool, "Bad Gateway: the exchange with the backend "
                                        "failed: %s", err)
                         : apr_psprintf(r->pool, "Bad Gateway: the backend answered HTTP %ld "
                                        "without a response to the request",
                                        b->x.response.status));
}

/* ---- entry ----------------------------------------------------------------------------------- */

static int discover(bridge_t *b)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *init = NULL, *why = NULL, *out;

    if (mcp_store_bridge_init_result(mcp_req_db(q), r->pool, q->conf->backend_spec, &init)
        != MCP_STORE_OK) {
        if (!mcp_bridged_pool(b, 0, &why)
            || mcp_store_bridge_init_result(mcp_req_db(q), r->pool, q->conf->backend_spec, &init)
               != MCP_STORE_OK) {
            return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "era bridge could not learn the backend's capabilities: %s",
                                 why ? why : "not stored"));
        }
    }
    out = mcp_bridge_discover(r->pool, init, b->msg->id, mcp_protocol_list(MCP_ERA_2026));
    if (!out) {
        return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, "Bad Gateway: the backend's InitializeResult "
                             "is not an object");
    }
    mcp_stream_add(&b->st, out, strlen(out));
    mcp_stream_finish(&b->st, "complete");
    return mcp_bridged_json(b, HTTP_OK, out);
}

int mcp_bridge_post(mcp_req_t *q, const char *version)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_store_status_t stored;
    apr_int64_t stream_id = 0;
    const char *state;
    int has_responses = 0, rc;
    bridge_t b;

    if (msg->kind == MCP_MSG_NOTIFICATION) {
        /* Cancellation is the close of a response in this revision; nothing else is owed. */
        stored = mcp_store_events_append(mcp_req_db(q), r->pool, q->session, 0, 0, "in",
                                         apr_pstrcat(r->pool, "[", q->raw, "]", NULL));
        return stored == MCP_STORE_OK ? mcp_req_empty(q, HTTP_ACCEPTED)
                                      : mcp_req_store_failed(q, stored);
    }
    if (mcp_bridge_method_is_gone(msg->method)) {
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                             "%s is not a method of protocol version %s", msg->method, version);
    }
    if ((rc = mcp_req_open_stateless(q, version, &stream_id)) != OK) {
        return rc;
    }
    mcp_req_note_stream(r, stream_id);
    bridge_init(&b, q);
    mcp_stream_init(&b.st, q, stream_id, 1);
    b.st.stateless = 1;
    mcp_stream_own(&b.st);
    b.backend_id = stream_id;   /* unique: calls sharing a pooled session never collide */
    if (strcmp(msg->method, "server/discover") == 0) {
        return discover(&b);
    }
    if (strcmp(msg->method, "subscriptions/listen") == 0) {
        return mcp_bridged_listen(&b);
    }
    if ((state = mcp_bridge_request_state(msg->obj, &has_responses)) != NULL) {
        return mcp_bridged_round_retry(&b, state);
    }
    if (has_responses) {
        mcp_stream_finish(&b.st, "failed");
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: "
                             "inputResponses without a requestState (the era bridge always "
                             "issues one)");
    }
    return relay_call(&b);
}
