/* mod_mcp_bridge — see mod_mcp_bridge.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_bridge.h"
#include "mcp_era.h"
#include "mcp_id.h"
#include "mcp_store_bridge.h"
#include "mod_mcp_bridge.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* How long a backend may keep the stream open after the response before the gateway cuts it. */
#define ANSWERED_GRACE apr_time_from_sec(1)
/* A round's expiry is looked at this long after it passed (its retry may just be starting). */
#define ROUND_GRACE apr_time_from_sec(1)
/* Rows a follower reads at once, and how often it looks without a LISTEN connection. */
#define FOLLOW_BATCH 64
#define POLL_WITHOUT_LISTENER apr_time_from_msec(250)
/* The JSON-RPC id of the initialize request sent on the client's behalf. */
#define INITIALIZE_ID 0

typedef struct bridge_t {
    mcp_req_t               *q;          /* the client's request                            */
    mcp_req_t                bq;         /* the same, on the pooled session (backend stream) */
    const mcp_jsonrpc_msg_t *msg;
    mcp_store_session_t     *pooled;
    json_object             *server_info;
    mcp_stream_t             st;         /* the client's stream                              */
    mcp_stream_t             bs;         /* the backend's stream                             */
    mcp_exchange_t           x;
    apr_pool_t              *scratch;    /* cleared per message                              */
    apr_int64_t              backend_id; /* the call's id upstream                           */
    int                      log_min;    /* the request's logLevel rank, or -1 */
    const char              *final_out;  /* the response as the client gets it            */
    apr_time_t               answered;   /* the backend's response came                      */
    int                      finished;
    int                      parked;     /* the client got an InputRequiredResult            */
    int                      cancelled;  /* the client closed its response first             */
    int                      abandoned;  /* a round was not claimed in time                  */
    apr_int64_t              pending_seq;   /* the last input request's seq (parked)          */
    apr_time_t               pending_since;
} bridge_t;

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
static mcp_backend_status_t post_short(mcp_req_t *q, const char *session_id, const char *version,
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

/* Tells the backend (best effort) that the call is cancelled. */
static void cancel_upstream(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_id,
                            const char *reason)
{
    apr_array_header_t *ignored;
    mcp_exchange_t x;
    const char *err = NULL, *n = mcp_bridge_cancelled(b->q->r->pool, backend_id, reason);

    if (post_short(b->q, s->backend_session_id, s->protocol_version, n, &x, &ignored, &err)
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

    if (post_short(q, NULL, NULL, init, &x, &messages, &err) != MCP_BACKEND_OK) {
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
    if (post_short(q, s->backend_session_id, s->protocol_version, initialized, &x, &messages,
                   &err) != MCP_BACKEND_OK || x.response.status >= 300) {
        mcp_req_end_backend_session(q, s->backend_session_id, "bridge initialize failed");
        *why = apr_psprintf(r->pool, "notifications/initialized failed: %s",
                            err ? err : apr_psprintf(r->pool, "HTTP %ld", x.response.status));
        return NULL;
    }
    if (json_object_object_get_ex(result, "capabilities", &params)
        && json_object_object_get_ex(params, "logging", NULL)) {
        /* Everything the backend logs comes; each request gets what its logLevel asks for. */
        post_short(q, s->backend_session_id, s->protocol_version,
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
static mcp_store_session_t *pool_get(bridge_t *b, int fresh, const char **why)
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

/* The backend's serverInfo (JSON text, may be NULL), stamped on results. */
static void set_server_info(bridge_t *b, const char *text)
{
    json_object *v = text ? mcp_jsonrpc_parse_value(b->q->r->pool, text, strlen(text)) : NULL;

    b->server_info = v && json_object_is_type(v, json_type_object) ? v : NULL;
}

/* ---- answering the client ------------------------------------------------------------------ */

static int reply_json(bridge_t *b, int status, const char *json)
{
    request_rec *r = b->q->r;

    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_rwrite(json, (int)strlen(json), r);
    return DONE;
}

/* A failure before or instead of the response: stored on the client's stream, then sent. */
static int reply_failure(bridge_t *b, int http, const char *message)
{
    request_rec *r = b->q->r;
    const char *json = mcp_jsonrpc_error_body(r->pool, b->msg->id, MCP_JSONRPC_INTERNAL_ERROR,
                                              message, NULL);

    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": %s",
                  b->st.id, message);
    mcp_stream_add(&b->st, json, strlen(json));
    mcp_stream_finish(&b->st, "failed");
    return b->st.mode == MCP_STREAM_SSE ? DONE : reply_json(b, http, json);
}

static const char *new_state(apr_pool_t *p)
{
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];

    if (apr_generate_random_bytes(random, sizeof(random)) != APR_SUCCESS) {
        return NULL;
    }
    return mcp_id_session_encode(p, random, sizeof(random));
}

/* A round: stored, then the client's response ends with the InputRequiredResult. */
static int start_round(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_stream,
                       apr_int64_t position, apr_array_header_t *requests)
{
    request_rec *r = b->q->r;
    apr_array_header_t *names = apr_array_make(r->pool, requests->nelts, sizeof(const char *));
    json_object *pending = json_object_new_object();
    mcp_store_bridge_round_t round;
    const char *state = new_state(r->pool), *ir;
    int i, ttl = (int)apr_time_sec(b->q->conf->bridge_input_timeout);
    mcp_store_status_t st;

    for (i = 0; i < requests->nelts; i++) {
        json_object *req = APR_ARRAY_IDX(requests, i, json_object *), *id = NULL;
        const char *name = mcp_bridge_input_name(r->pool, i + 1);
        json_object_object_get_ex(req, "id", &id);
        APR_ARRAY_PUSH(names, const char *) = name;
        json_object_object_add(pending, name, json_object_get(id));
    }
    memset(&round, 0, sizeof(round));
    round.session_id = s->id;
    round.stream_id = backend_stream;
    round.backend_request_id = b->backend_id;
    round.position = position;
    round.pending = mcp_jsonrpc_to_string(r->pool, pending, NULL);
    json_object_put(pending);
    st = state ? mcp_store_bridge_round_add(mcp_req_db(b->q), r->pool, state, r->user,
                                            mcp_bridge_request_digest(r->pool, b->msg->obj),
                                            &round, ttl > 0 ? ttl : 1)
               : MCP_STORE_REFUSED;
    if (st != MCP_STORE_OK) {
        return reply_failure(b, HTTP_INTERNAL_SERVER_ERROR, "the gateway could not store an "
                             "input-required round");
    }
    ir = mcp_bridge_input_required(r->pool, b->msg->id, names, requests, state, b->server_info);
    mcp_stream_add(&b->st, ir, strlen(ir));
    mcp_stream_finish(&b->st, "complete");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": "
                  "input required (%d request(s) of the backend, round at %" APR_INT64_T_FMT
                  "-%" APR_INT64_T_FMT ")", b->st.id, requests->nelts, backend_stream, position);
    if (b->st.mode == MCP_STREAM_SSE) {
        mcp_stream_end_early(&b->st);
        return DONE;
    }
    return reply_json(b, HTTP_OK, ir);
}

/* ---- the call, relayed by the process that made it ----------------------------------------- */

static int cancelled_now(bridge_t *b)
{
    if (!b->parked && !b->answered && b->st.client_gone) {
        b->cancelled = 1;
    }
    return b->cancelled;
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
    if (b->parked) {
        if (kind == MCP_BRIDGE_INPUT_REQUEST) {
            b->pending_seq = seq;
            b->pending_since = apr_time_now();
        }
        return 0;
    }
    if (kind == MCP_BRIDGE_NOTIFICATION) {
        return mcp_stream_add(&b->st, json, len);
    }
    if (kind == MCP_BRIDGE_FINAL) {
        const char *out = mcp_bridge_response_out(b->q->r->pool, obj, b->msg->id,
                                                  b->msg->method, b->server_info);
        b->final_out = out;
        return mcp_stream_add(&b->st, out, strlen(out));
    }
    if (kind == MCP_BRIDGE_INPUT_REQUEST) {
        apr_array_header_t *one = apr_array_make(b->q->r->pool, 1, sizeof(json_object *));
        json_object *copy = mcp_jsonrpc_parse_value(b->q->r->pool, json, len);

        APR_ARRAY_PUSH(one, json_object *) = copy;
        mcp_stream_commit(&b->bs);   /* stored before the round names its position */
        b->parked = 1;
        b->pending_seq = seq;
        b->pending_since = apr_time_now();
        start_round(b, b->pooled, b->bs.id, seq, one);
    }
    return 0;
}

static int on_sse(void *baton)
{
    bridge_t *b = baton;

    if (!b->parked) {
        mcp_stream_start_sse(&b->st, -1);
    }
    return cancelled_now(b);
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
                                               mcp_req_lease_secs(q), &none, &id, &refused)
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

static int relay_call(bridge_t *b)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *err = NULL, *why = NULL, *json;
    mcp_backend_status_t status;
    apr_size_t len;
    int attempt;

    for (attempt = 0;; attempt++) {
        if (!(b->pooled = pool_get(b, attempt > 0, &why)) || open_backend_stream(b, &why) != 0) {
            return reply_failure(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "era bridge has no backend session: %s", why));
        }
        set_server_info(b, b->pooled->server_info);
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
    if (b->cancelled || b->abandoned) {
        cancel_upstream(b, b->pooled, b->backend_id, b->cancelled
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
        return DONE;
    }
    if (status == MCP_BACKEND_OK && !b->x.sse && (json = mcp_exchange_body(&b->x, &len))) {
        on_message(b, json, len);
        if (b->answered && b->final_out) {
            finish_both(b, "complete");
            return reply_json(b, b->x.response.status >= 400 && b->x.response.status < 500
                              ? (int)b->x.response.status : HTTP_OK, b->final_out);
        }
    }
    mcp_stream_finish(&b->bs, "failed");
    if (status == MCP_BACKEND_TIMEOUT) {
        return reply_failure(b, HTTP_GATEWAY_TIME_OUT, apr_psprintf(r->pool, "Gateway Timeout: "
                             "no complete answer from the backend in time: %s", err));
    }
    return reply_failure(b, HTTP_BAD_GATEWAY, status != MCP_BACKEND_OK
                         ? apr_psprintf(r->pool, "Bad Gateway: the exchange with the backend "
                                        "failed: %s", err)
                         : apr_psprintf(r->pool, "Bad Gateway: the backend answered HTTP %ld "
                                        "without a response to the request",
                                        b->x.response.status));
}

/* ---- the retry of a round, on any process or host ------------------------------------------ */

typedef struct follow_t {
    bridge_t           *b;
    apr_int64_t         cursor;
    apr_array_header_t *requests;   /* json_object *: input requests seen          */
    apr_int64_t         position;   /* seq of the last of them                      */
    apr_pool_t         *pool;       /* cleared per read                              */
    int                 done;       /* the response was relayed                     */
} follow_t;

static int on_stored(void *baton, apr_int64_t seq, const char *message)
{
    follow_t *f = baton;
    bridge_t *b = f->b;
    json_object *obj;

    f->cursor = seq;
    if (!message || !(obj = mcp_jsonrpc_parse_value(f->pool, message, strlen(message)))) {
        return 0;
    }
    switch (mcp_bridge_classify(obj, b->backend_id, b->log_min)) {
    case MCP_BRIDGE_NOTIFICATION:
        mcp_stream_add(&b->st, message, strlen(message));
        break;
    case MCP_BRIDGE_INPUT_REQUEST:   /* kept for the round: in the request's pool */
        APR_ARRAY_PUSH(f->requests, json_object *) =
            mcp_jsonrpc_parse_value(b->q->r->pool, message, strlen(message));
        f->position = seq;
        break;
    case MCP_BRIDGE_FINAL: {
        const char *out = mcp_bridge_response_out(f->pool, obj, b->msg->id, b->msg->method,
                                                  b->server_info);
        mcp_stream_add(&b->st, out, strlen(out));
        f->done = 1;
        return 1;
    }
    default:
        break;
    }
    return 0;
}

/* Follows the backend stream after the round's position until the response, another round,
 * the stream's end, or the client's close. */
static int follow(bridge_t *b, const mcp_store_session_t *s, apr_int64_t stream_id,
                  apr_int64_t position)
{
    request_rec *r = b->q->r;
    mcp_store_t *db = mcp_req_db(b->q);
    mcp_router_sub_t *sub = mcp_router_subscribe(mcp_child.router, stream_id);
    mcp_store_stream_t state;
    apr_pool_t *pool;
    follow_t f;
    int n, more, ended = 0;
    long finished;

    memset(&f, 0, sizeof(f));
    f.b = b;
    f.cursor = position;
    f.requests = apr_array_make(r->pool, 2, sizeof(json_object *));
    apr_pool_create(&pool, r->pool);
    f.pool = pool;
    mcp_stream_start_sse(&b->st, -1);
    for (;;) {
        n = 0;
        more = 0;
        apr_pool_clear(pool);
        if (mcp_store_events_after_bounded(db, pool, stream_id, f.cursor, FOLLOW_BATCH,
                                           b->q->conf->stream_queue_bytes, on_stored, &f, &n,
                                           &more) != MCP_STORE_OK) {
            n = 0;
        }
        mcp_stream_commit(&b->st);
        if (f.done) {
            mcp_stream_finish(&b->st, "complete");
            break;
        }
        if (more) {
            continue;
        }
        if (f.requests->nelts > 0) {
            start_round(b, s, stream_id, f.position, f.requests);
            break;
        }
        if (ended) {
            return reply_failure(b, HTTP_BAD_GATEWAY, "Bad Gateway: the backend's stream ended "
                                 "without a response to the request");
        }
        if (mcp_store_stream_get(db, pool, stream_id, &state) == MCP_STORE_OK) {
            if (strcmp(state.status, "open") != 0) {
                ended = 1;   /* what it stored before ending is read once more */
                continue;
            }
            if (state.lease_expired) {
                mcp_store_streams_expire(db, pool, stream_id, MCP_OWNER_GONE_MESSAGE, &finished);
                continue;
            }
        }
        if (b->st.client_gone) {
            cancel_upstream(b, s, b->backend_id, "the client closed its response (2026-07-28: "
                            "cancellation)");
            mcp_stream_finish(&b->st, "cancelled");
            break;
        }
        if (sub) {
            mcp_router_wait(sub, mcp_child.listener && mcp_listener_connected(mcp_child.listener)
                            ? b->q->conf->keepalive_interval : POLL_WITHOUT_LISTENER);
        }
        else {
            apr_sleep(POLL_WITHOUT_LISTENER);
        }
        mcp_stream_tick(&b->st);
    }
    if (sub) {
        mcp_router_unsubscribe(sub);
    }
    return DONE;
}

static const char *refusal_words(mcp_store_bridge_claim_t v)
{
    switch (v) {
    case MCP_STORE_BRIDGE_UNKNOWN:
        return "is not one this gateway issued (unknown or tampered)";
    case MCP_STORE_BRIDGE_OTHER_PRINCIPAL:
        return "was issued to another principal";
    case MCP_STORE_BRIDGE_OTHER_REQUEST:
        return "was issued for another request (method, name and arguments must be the same)";
    case MCP_STORE_BRIDGE_EXPIRED:
        return "has expired (MCPEraBridgeInputTimeout)";
    case MCP_STORE_BRIDGE_USED:
        return "was used already (a requestState is good for one retry)";
    default:
        return "was refused";
    }
}

static int retry(bridge_t *b, const char *state)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    mcp_store_bridge_claim_t verdict = MCP_STORE_BRIDGE_UNKNOWN;
    mcp_store_bridge_round_t round;
    mcp_store_session_t *s;
    apr_array_header_t *answers, *ignored;
    mcp_store_status_t st;
    const char *bad, *err = NULL;
    mcp_exchange_t x;
    int i;

    memset(&round, 0, sizeof(round));
    st = mcp_store_bridge_round_claim(mcp_req_db(q), r->pool, state, r->user,
                                      mcp_bridge_request_digest(r->pool, b->msg->obj), &verdict,
                                      &round);
    if (st != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    if (verdict != MCP_STORE_BRIDGE_CLAIMED) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: a retry's requestState %s",
                      refusal_words(verdict));
        mcp_stream_finish(&b->st, "failed");
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: "
                             "requestState %s", refusal_words(verdict));
    }
    b->backend_id = round.backend_request_id;
    s = apr_pcalloc(r->pool, sizeof(*s));
    s->id = round.session_id;
    s->backend_session_id = round.backend_session_id;
    s->protocol_version = round.protocol_version;
    s->principal = r->user;
    s->backend_url = q->conf->backend_spec;
    mcp_store_bridge_link(mcp_req_db(q), r->pool, b->st.id, round.stream_id);
    set_server_info(b, round.server_info);
    if ((bad = mcp_bridge_input_responses(r->pool, b->msg->obj, round.pending, &answers))) {
        cancel_upstream(b, s, b->backend_id, "the client's retry was refused");
        mcp_stream_finish(&b->st, "failed");
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: %s "
                             "(the round is used up; the backend call was cancelled)", bad);
    }
    for (i = 0; i < answers->nelts; i++) {
        const char *answer = APR_ARRAY_IDX(answers, i, const char *);
        mcp_store_events_append(mcp_req_db(q), r->pool, s, 0, 0, "in",
                                apr_pstrcat(r->pool, "[", answer, "]", NULL));
        if (post_short(q, s->backend_session_id, s->protocol_version, answer, &x, &ignored, &err)
                != MCP_BACKEND_OK || x.response.status >= 300) {
            return reply_failure(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "backend did not take the answer to its request: %s",
                                 err ? err : apr_psprintf(r->pool, "HTTP %ld",
                                                          x.response.status)));
        }
    }
    return follow(b, s, round.stream_id, round.position);
}

/* ---- subscriptions/listen: the pooled session's GET stream ---------------------------------- */

typedef struct listen_t {
    bridge_t   *b;
    const char *acked;      /* the filter acknowledged (JSON text) */
} listen_t;

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
        if (post_short(b->q, b->pooled->backend_session_id, b->pooled->protocol_version, req, &x,
                       &messages, &err) == MCP_BACKEND_OK && x.response.status == HTTP_OK
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

static int listen_on_backend(bridge_t *b)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *init = NULL, *why = NULL, *err = NULL, *ack, *end;
    mcp_backend_call_t call;
    mcp_backend_status_t status;
    listen_t l;

    if (!(b->pooled = pool_get(b, 0, &why))) {
        return reply_failure(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the era "
                             "bridge has no backend session: %s", why));
    }
    mcp_store_bridge_init_result(mcp_req_db(q), r->pool, q->conf->backend_spec, &init);
    l.b = b;
    l.acked = subscribe_all(b, mcp_bridge_listen_ack(r->pool, b->msg->obj, init));
    ack = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/"
                       "acknowledged\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/"
                       "subscriptionId\":%s},\"notifications\":%s}}",
                       mcp_jsonrpc_to_string(r->pool, b->msg->id, NULL), l.acked);
    mcp_stream_start_sse(&b->st, -1);
    mcp_stream_add(&b->st, ack, strlen(ack));
    mcp_stream_commit(&b->st);

    mcp_exchange_init(&b->x, q, &l);
    b->x.on_message = listen_message;
    b->x.after_chunk = listen_chunk;
    b->x.on_tick = listen_tick;
    memset(&call, 0, sizeof(call));
    call.method = "GET";
    call.session_id = b->pooled->backend_session_id;
    call.protocol_version = b->pooled->protocol_version;
    status = mcp_exchange_perform(&b->x, &call, &err);
    if (b->st.client_gone) {
        mcp_stream_finish(&b->st, "closed");
        r->connection->keepalive = AP_CONN_CLOSE;
        return DONE;
    }
    if (status != MCP_BACKEND_OK || b->x.response.status != HTTP_OK) {
        return reply_failure(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the pooled "
                             "session's GET stream %s", status != MCP_BACKEND_OK ? err
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

/* ---- entry ----------------------------------------------------------------------------------- */

static int discover(bridge_t *b)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *init = NULL, *why = NULL, *out;

    if (mcp_store_bridge_init_result(mcp_req_db(q), r->pool, q->conf->backend_spec, &init)
        != MCP_STORE_OK) {
        if (!pool_get(b, 0, &why)
            || mcp_store_bridge_init_result(mcp_req_db(q), r->pool, q->conf->backend_spec, &init)
               != MCP_STORE_OK) {
            return reply_failure(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "era bridge could not learn the backend's capabilities: %s",
                                 why ? why : "not stored"));
        }
    }
    out = mcp_bridge_discover(r->pool, init, b->msg->id, mcp_protocol_list(MCP_ERA_2026));
    if (!out) {
        return reply_failure(b, HTTP_BAD_GATEWAY, "Bad Gateway: the backend's InitializeResult "
                             "is not an object");
    }
    mcp_stream_add(&b->st, out, strlen(out));
    mcp_stream_finish(&b->st, "complete");
    return reply_json(b, HTTP_OK, out);
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
        return listen_on_backend(&b);
    }
    if ((state = mcp_bridge_request_state(msg->obj, &has_responses)) != NULL) {
        return retry(&b, state);
    }
    if (has_responses) {
        mcp_stream_finish(&b.st, "failed");
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: "
                             "inputResponses without a requestState (the era bridge always "
                             "issues one)");
    }
    return relay_call(&b);
}
