/* mod_mcp_bridge — see mod_mcp_bridge.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_era.h"
#include "mcp_federation.h"
#include "mcp_id.h"
#include "mod_mcp_bridge.h"
#include "mod_mcp_bridge_private.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stdio.h"

APLOG_USE_MODULE(mcp);

/* How long a backend may keep the stream open after the response before the gateway cuts it. */
#define ANSWERED_GRACE apr_time_from_sec(1)
/* A round's expiry is looked at this long after it passed (its retry may just be starting). */
#define WATCH_INTERVAL apr_time_from_sec(5)
/* How often a call relayed on the event loop looks around (the client's close, a lost lease;
 * once its round ended the request: the round's expiry, its end elsewhere). */
#define LOOP_TICK apr_time_from_msec(250)
#define ROUND_GRACE apr_time_from_sec(1)
/* The JSON-RPC id of the initialize request sent on the client's behalf. */
#define INITIALIZE_ID 0

/* ---- small exchanges: initialize, notifications, responses --------------------------------- */

/* Answers a backend's ping on the client's behalf: a 2026-07-28 client has no ping to give. */
void mcp_bridged_pong(bridge_t *b, const mcp_store_session_t *s, json_object *ping)
{
    apr_array_header_t *ignored;
    mcp_exchange_t x;
    const char *err = NULL, *pong = mcp_bridge_pong(b->q->r->pool, ping);

    mcp_store_events_append(mcp_req_db(b->q), b->q->r->pool, s, 0, 0, "in",
                            apr_pstrcat(b->q->r->pool, "[", pong, "]", NULL));
    if (mcp_exchange_collect(b->q, s->backend_session_id, s->protocol_version, pong, &x, &ignored,
                             &err) != MCP_BACKEND_OK || x.response.status >= 300) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, b->q->r, "era bridge: the backend's ping "
                      "was not answered: %s", err ? err : apr_psprintf(b->q->r->pool, "HTTP %ld",
                                                                       x.response.status));
    }
}

/* DELETEs pooled session s upstream, at its own protocol version (not the client's 2026-07-28,
 * which a 2025 backend refuses with 400). */
void mcp_bridged_end_session(bridge_t *b, mcp_store_session_t *s, const char *why)
{
    mcp_req_t q = *b->q;

    q.session = s;
    mcp_req_end_backend_session(&q, s->backend_session_id, why);
}

/* Tells the backend (best effort) that the call is cancelled. */
void mcp_bridged_cancel(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_id,
                        const char *reason)
{
    apr_array_header_t *ignored;
    mcp_exchange_t x;
    const char *err = NULL, *n = mcp_bridge_cancelled(b->q->r->pool, backend_id, reason);

    if (mcp_exchange_collect(b->q, s->backend_session_id, s->protocol_version, n, &x, &ignored,
                             &err) != MCP_BACKEND_OK) {
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

    if (mcp_exchange_collect(q, NULL, NULL, init, &x, &messages, &err) != MCP_BACKEND_OK) {
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
    s->trace_id = mcp_req_trace_id(q->r);
    s->backend_session_id = x.response.session_id;
    s->protocol_version = apr_pstrdup(r->pool, version);
    s->principal = r->user;
    request = mcp_jsonrpc_parse_value(r->pool, init, strlen(init));
    json_object_object_get_ex(request, "params", &params);
    s->client_info = member_text(r->pool, params, "clientInfo");
    s->client_capabilities = member_text(r->pool, params, "capabilities");
    s->server_info = member_text(r->pool, result, "serverInfo");

    initialized = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
    if (mcp_exchange_collect(q, s->backend_session_id, s->protocol_version, initialized, &x,
                             &messages, &err) != MCP_BACKEND_OK || x.response.status >= 300) {
        mcp_bridged_end_session(b, s, "bridge initialize failed");
        *why = apr_psprintf(r->pool, "notifications/initialized failed: %s",
                            err ? err : apr_psprintf(r->pool, "HTTP %ld", x.response.status));
        return NULL;
    }
    if (json_object_object_get_ex(result, "capabilities", &params)
        && json_object_object_get_ex(params, "logging", NULL)) {
        /* Everything the backend logs comes; each request gets what its logLevel asks for. */
        mcp_exchange_collect(q, s->backend_session_id, s->protocol_version,
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
        mcp_bridged_end_session(b, s, "bridge: not stored");
        *why = apr_psprintf(r->pool, "the pooled session was not stored: %s",
                            mcp_req_db(q)->error);
        return NULL;
    }
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: pooled session %s started for %s "
                  "(backend session %s, protocol %s)", mcp_id_tag(r->pool, s->id),
                  r->user ? r->user : "-", mcp_id_tag(r->pool, s->backend_session_id), version);
    return s;
}

/* The pool's session for key: OK with *s, NOT_FOUND, or an error with *why. */
static mcp_store_status_t pool_find(bridge_t *b, const char *key, mcp_store_session_t **s,
                                    const char **why)
{
    mcp_req_t *q = b->q;
    mcp_store_status_t st = mcp_store_bridge_pooled(mcp_req_db(q), q->r->pool, q->r->user,
                                                    q->conf->backend_spec, key, s);

    if (st != MCP_STORE_OK && st != MCP_STORE_NOT_FOUND) {
        *why = apr_psprintf(q->r->pool, "the pool could not be read: %s", mcp_req_db(q)->error);
    }
    return st;
}

/* The pool had no session for key when asked at found_at: one request of the process
 * initializes it, the others arriving meanwhile await that and take the session it stored (an
 * empty pool under load would otherwise start a session per call in flight, each an initialize
 * upstream and a row of its own). A waiter whose wait outlasts the backend's timeout (without
 * one: the table's stuck_after), or finds the pool still empty (that start failed), starts one
 * itself, as every call did before. */
static mcp_store_session_t *pool_start(bridge_t *b, const char *key, apr_time_t found_at,
                                       const char **why)
{
    mcp_req_t *q = b->q;
    const char *tag = mcp_bridge_pool_tag(q->r->pool, q->r->user, q->conf->backend_spec, key);
    apr_interval_time_t limit = q->conf->backend_timeout;   /* 0: none but the table's */
    mcp_store_session_t *s = NULL;
    mcp_store_status_t st;

    if (mcp_refresh_await(mcp_child.pool_starts, tag, found_at,
                          limit > 0 ? apr_time_now() + limit : APR_INT64_MAX)) {
        s = pool_new(b, key, why);
        mcp_refresh_done(mcp_child.pool_starts, tag, apr_time_now());
        return s;
    }
    if ((st = pool_find(b, key, &s, why)) == MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, q->r, "era bridge: pooled session %s, started "
                      "by another request meanwhile, taken", mcp_id_tag(q->r->pool, s->id));
        return s;
    }
    return st == MCP_STORE_NOT_FOUND ? pool_new(b, key, why) : NULL;
}

/* The pooled session for this request: found, or initialized. */
mcp_store_session_t *mcp_bridged_pool(bridge_t *b, int fresh, const char **why)
{
    mcp_req_t *q = b->q;
    const char *key = mcp_bridge_caps_key(q->r->pool, b->msg->obj);
    /* fresh: the pool was found wanting when the call last read it; else it is read now */
    apr_time_t found_at = fresh && b->pool_read_at ? b->pool_read_at : apr_time_now();
    mcp_store_session_t *s = NULL;
    mcp_store_status_t st;

    memset(&b->tools, 0, sizeof(b->tools));   /* a new session: no tool list read yet */
    if (!fresh && (st = pool_find(b, key, &s, why)) != MCP_STORE_NOT_FOUND) {
        return st == MCP_STORE_OK ? s : NULL;
    }
    return pool_start(b, key, found_at, why);
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
    if (!b->d) {
        client_sse(b);   /* the relay reads on after the client's response ended: SSE can end
                          * early */
    }
    b->parked = 1;
    b->watch = mcp_router_subscribe(mcp_child.router, b->bs.id);
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

    if (b->answered || b->abandoned || b->ended_elsewhere) {
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
    if (kind == MCP_BRIDGE_FINAL
        && (b->url_round = mcp_bridge_url_elicitations(b->q->r->pool, obj)) != NULL) {
        b->parked = 1;   /* the client's answer is the round's (url_round) */
        return 0;
    }
    if (kind == MCP_BRIDGE_FINAL) {
        const char *out;

        if (b->q->member) {   /* a federated endpoint's member: in the client's names */
            mcp_fed_outbound(b->q->r->pool, b->q->member->fed, obj, b->msg->method);
        }
        out = mcp_bridge_response_out(b->q->r->pool, obj, b->msg->id,
                                                  b->msg->method, b->server_info);
        int rc;

        b->final_code = error_code_of(obj);
        mcp_bridged_tools_seen(b, obj);   /* the cache keeps the whole list: it is everyone's */
        rc = mcp_stream_add(&b->st, out, strlen(out));
        b->final_out = b->st.rewritten ? b->st.rewritten : out;   /* as stored */
        return rc;
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
    if (b->parked) {
        mcp_stream_finish(&b->bs, status);
    }
    else {
        mcp_stream_finish_pair(&b->bs, &b->st, status);   /* one statement for both ends */
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

/* Parked: was the backend stream ended by another process (a retry whose client cancelled the
 * call)? Read from the table when woken for it, or every WATCH_INTERVAL. */
static int backend_ended_elsewhere(bridge_t *b)
{
    apr_time_t now = apr_time_now();
    mcp_store_stream_t state;

    if (!mcp_router_wait(b->watch, 0) && now - b->watched < WATCH_INTERVAL) {
        return 0;
    }
    b->watched = now;
    if (mcp_store_stream_get(mcp_req_db(b->q), b->scratch, b->bs.id, &state) == MCP_STORE_OK
        && strcmp(state.status, "open") != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, b->q->r, "era bridge: backend stream %"
                      APR_INT64_T_FMT " ended elsewhere (%s); its answer is let go of",
                      b->bs.id, state.status);
        b->ended_elsewhere = 1;
    }
    return b->ended_elsewhere;
}

static int on_tick(void *baton)
{
    bridge_t *b = baton;

    if (b->answered) {
        return apr_time_now() - b->answered > ANSWERED_GRACE;
    }
    if (b->parked && backend_ended_elsewhere(b)) {
        return 1;
    }
    if (mcp_stream_tick(&b->bs)) {
        return 1;
    }
    if (b->parked) {
        return round_abandoned(b);
    }
    return mcp_stream_tick(&b->st) || cancelled_now(b);
}

/* d: where the call's backend half lives (NULL: the request's pool, its thread). */
static void bridge_init(bridge_t *b, mcp_req_t *q, mcp_detach_t *d)
{
    memset(b, 0, sizeof(*b));
    b->q = q;
    b->d = d;
    b->msg = &q->body->msgs[0];
    apr_pool_create(&b->scratch, d ? mcp_detach_req(d)->r->pool : q->r->pool);
    b->log_min = mcp_bridge_request_log_level(b->msg->obj);
}

static mcp_store_session_t *session_clone(apr_pool_t *p, const mcp_store_session_t *s)
{
    mcp_store_session_t *c = apr_pcalloc(p, sizeof(*c));

#define CLONE(field) c->field = s->field ? apr_pstrdup(p, s->field) : NULL
    CLONE(id);
    CLONE(backend_url);
    CLONE(backend_session_id);
    CLONE(protocol_version);
    CLONE(principal);
    CLONE(client_info);
    CLONE(client_capabilities);
    CLONE(server_info);
#undef CLONE
    return c;
}

/* The backend stream id (stored) is the call's: b->bs set up to relay the backend's answer
 * (with b->d, in the detached pool: the pooled session and the request sent copied there). */
static void backend_stream_start(bridge_t *b, const char *sent, apr_int64_t id)
{
    if (b->d) {
        mcp_req_t *dq = mcp_detach_req(b->d);

        b->bq = *dq;
        b->pooled = session_clone(dq->r->pool, b->pooled);
        sent = apr_pstrdup(dq->r->pool, sent);
    }
    else {
        b->bq = *b->q;
    }
    b->bq.session = b->pooled;
    b->bq.raw = sent;
    b->bq.raw_len = strlen(sent);
    mcp_stream_init(&b->bs, &b->bq, id, MCP_STORE_SEQ_PRIMING + 1);
    b->bs.mode = MCP_STREAM_JSON;
    mcp_stream_own(&b->bs);
}

/* The pooled session of the call's key (the newest live one), touched, and — unless check is
 * set and the call's Mcp-Param-* headers must be checked first — its backend stream opened on
 * it (the request and the priming row stored) and linked to the client's stream, all in one
 * statement (mcp_store_bridge_open_call). *opened: the stream is. NOT_FOUND when the pool has
 * no session for the key; -1 with *why on a failure. */
/* What the store is told of request msg's backend stream (tool only when check is set); the
 * caller fills in the client stream, the request id and the request sent. */
static void call_init(mcp_req_t *q, const mcp_jsonrpc_msg_t *msg, int check,
                      mcp_store_bridge_open_t *call)
{
    request_rec *r = q->r;

    memset(call, 0, sizeof(*call));
    call->principal = r->user;
    call->backend_url = q->conf->backend_spec;
    call->caps_key = mcp_bridge_caps_key(r->pool, msg->obj);
    if (!check || mcp_jsonrpc_target(msg, &call->tool) != MCP_TARGET_TOOL) {
        call->tool = NULL;
    }
    call->tools_ttl = (double)apr_time_as_msec(q->conf->bridge_tools_ttl) / 1000.0;
    call->method = msg->method;
    call->owner = mcp_child.owner;
    call->lease_secs = mcp_req_lease_secs(q);
    call->holder = mcp_req_holder(q);
    call->marks = mcp_child.pooled_marks;
}

static int open_call(bridge_t *b, int check, int *opened, const char **why)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *sent = mcp_bridge_request_in(r->pool, b->msg->obj, b->backend_id);
    mcp_store_bridge_open_t call;
    mcp_store_status_t st;
    apr_int64_t id = 0;

    call_init(q, b->msg, check, &call);
    call.client_stream = b->st.id;
    call.request_id = apr_psprintf(r->pool, "%" APR_INT64_T_FMT, b->backend_id);
    call.sent = sent;
    *opened = 0;
    b->pool_read_at = apr_time_now();
    st = mcp_store_bridge_open_call(mcp_req_db(q), r->pool, &call, &b->pooled, &b->tools, &id);
    if (st == MCP_STORE_NOT_FOUND) {
        return MCP_STORE_NOT_FOUND;
    }
    if (st != MCP_STORE_OK) {
        *why = apr_psprintf(r->pool, "the pool could not be read: %s", mcp_req_db(q)->error);
        return -1;
    }
    if (id) {
        backend_stream_start(b, sent, id);
        *opened = 1;
    }
    return 0;
}

/* The call's backend stream on the pool's session for it, opened (a session initialized when
 * the pool has none, or when fresh: the backend lost the last one); on the first attempt the
 * call's Mcp-Param-* headers are checked before it is opened. A session the call found that
 * ended before its stream was opened on it (another call's 404 ended it) is started again, once.
 * 0; DONE when the call was refused (answered); -1 with *why. */
static int open_backend_stream(bridge_t *b, int attempt, const char **why)
{
    int opened = 0, rc = MCP_STORE_NOT_FOUND, started = 0, checked = attempt > 0;

    if (attempt == 0) {
        switch (b->pool) {
        case BRIDGE_POOL_OPENED:
            return 0;
        case BRIDGE_POOL_EMPTY:
            break;
        case BRIDGE_POOL_READ:
            rc = 0;
            break;
        case BRIDGE_POOL_UNREAD:
            rc = open_call(b, 1, &opened, why);
            break;
        }
    }
    if (rc != MCP_STORE_NOT_FOUND && (rc != 0 || opened)) {
        return rc;
    }
    for (;;) {
        if (rc == MCP_STORE_NOT_FOUND) {
            if (!(b->pooled = mcp_bridged_pool(b, 1, why))) {
                return -1;
            }
            started = 1;
        }
        if (!checked) {
            checked = 1;
            if (mcp_bridged_check_params(b) != 0) {
                return DONE;   /* refused: -32020 */
            }
        }
        rc = open_call(b, 0, &opened, why);
        if (rc != MCP_STORE_NOT_FOUND || started) {
            break;
        }
    }
    if (rc == 0 && !opened) {
        rc = -1;
    }
    if (rc != 0) {
        *why = rc == MCP_STORE_NOT_FOUND ? "the pooled session ended meanwhile" : *why;
        return -1;
    }
    return 0;
}

/* ---- the call's exchange on the event loop (b->d) ------------------------------------------ */

static void parked_end(bridge_t *b);

/* The transfer ended (or the gateway ends it: cut): its end as mcp_exchange_perform says it;
 * once the request is over, what is left of the call is done here. */
static int loop_end(bridge_t *b, mcp_backend_status_t status, const char *err, int cut)
{
    b->end_err = err ? err : cut ? "stopped by the gateway" : NULL;
    b->end_status = mcp_exchange_end(&b->x, cut && !b->x.answered ? MCP_BACKEND_ABORTED : status,
                                     &b->end_err);
    if (b->detached) {
        parked_end(b);
    }
    return 1;
}

static int loop_news(void *baton, const mcp_loop_news_t *news)
{
    bridge_t *b = baton;
    int cut;

    return mcp_exchange_feed_news(&b->x, news, &cut) ? loop_end(b, news->status, news->err, cut)
                                                     : 0;
}

static int loop_tick(void *baton)
{
    bridge_t *b = baton;

    return mcp_exchange_feed_tick(&b->x) ? loop_end(b, MCP_BACKEND_ABORTED, NULL, 1) : 0;
}

/* The process stops while the call waits for its round's retry: the backend stream's lease
 * runs out, and whoever follows it then finishes it with an error (as for a killed process). */
static void loop_stop(void *baton, const char *why)
{
    bridge_t *b = baton;

    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, b->q->r, "era bridge: backend stream %"
                  APR_INT64_T_FMT ": relaying stops unfinished: %s", b->bs.id, why);
    mcp_router_unsubscribe(b->watch);
    b->watch = NULL;
    mcp_stream_disown(&b->bs);
}

/* The client has its InputRequiredResult: the rest of the call needs no request. */
static int round_cut(void *baton)
{
    bridge_t *b = baton;

    return b->parked && !b->url_round && !b->answered;
}

/* The request ends; the call's backend half goes on in the loop. Nothing of the client's
 * request may be reached from it from now on. */
static void detach(bridge_t *b)
{
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, b->q->r, "era bridge: stream %" APR_INT64_T_FMT
                  ": its backend call waits for the round's retry in the event loop (backend "
                  "stream %" APR_INT64_T_FMT ")", b->st.id, b->bs.id);
    b->q = &b->bq;
    b->msg = NULL;
    b->server_info = NULL;
    b->round = NULL;
    b->detached = 1;
    b->hooks.tick = apr_time_from_sec(1);
    mcp_detach_go(b->d);
}

/* The exchange on the loop: this thread handles it until the answer came or a round ended the
 * request (*detached). Falls back to mcp_exchange_perform when the transfer cannot start. */
static mcp_backend_status_t forward_on_loop(bridge_t *b, mcp_backend_call_t *call,
                                            const char **err, int *detached)
{
    const char *why = NULL;
    int rc;

    mcp_exchange_call_defaults(&b->x, call);
    mcp_exchange_begin(&b->x);
    b->hooks.on_news = loop_news;
    b->hooks.on_tick = loop_tick;
    b->hooks.on_stop = loop_stop;
    b->hooks.baton = b;
    b->hooks.tick = LOOP_TICK;
    if (mcp_detach_start(b->d, call, &b->hooks, &why) != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, b->q->r, "era bridge: stream %"
                      APR_INT64_T_FMT ": not relayed on the event loop (%s); relayed with this "
                      "thread", b->st.id, why);
        b->d = NULL;   /* what lives in its pool goes with the request */
        return mcp_exchange_perform(&b->x, call, err);
    }
    rc = mcp_detach_wait(b->d, round_cut);
    if (rc == 0) {
        *detached = 1;
        return MCP_BACKEND_OK;
    }
    if (rc < 0) {
        *err = "the server is stopping";
        return mcp_exchange_end(&b->x, MCP_BACKEND_ABORTED, err);
    }
    *err = b->end_err;
    return b->end_status;
}

static mcp_backend_status_t forward(bridge_t *b, const char **err, int *detached)
{
    mcp_req_t *q = b->q;
    mcp_backend_call_t call;

    mcp_exchange_init(&b->x, b->d ? &b->bq : q, b);
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
    return b->d ? forward_on_loop(b, &call, err, detached) : mcp_exchange_perform(&b->x, &call, err);
}

/* The backend forgot the pooled session (404 before anything was relayed), or, for a stdio
 * server, the supervisor that ran its process cannot be reached (the process is gone). */
static int session_lost(bridge_t *b, mcp_backend_status_t status)
{
    if (mcp_stdio_lost(b->q->r->pool, b->q->conf->backend, b->pooled->backend_session_id,
                       status, NULL)) {
        return !b->answered && b->st.written == 0;
    }
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

/* The backend answered -32042 (URL elicitations needed): the call ended upstream, and the
 * client gets a round of elicitation/create requests in URL mode; its retry sends the request
 * again (MCP_BRIDGE_ROUND_URL). */
static int url_round(bridge_t *b)
{
    const char *cap = mcp_bridge_missing_capability(b->msg->obj,
                                                    APR_ARRAY_IDX(b->url_round, 0, json_object *));

    if (!b->finished) {
        b->finished = 1;
        mcp_stream_finish(&b->bs, "complete");
    }
    if (cap) {
        return mcp_bridged_refuse(b, b->pooled, cap);
    }
    return mcp_bridged_round_start(b, b->pooled, b->bs.id, MCP_BRIDGE_ROUND_URL, b->url_round);
}

/* The client closed its response, or did not retry the round in time: the backend is told, and
 * the backend stream ends. */
static void cancel_upstream(bridge_t *b)
{
    mcp_bridged_cancel(b, b->pooled, b->backend_id, b->cancelled
                       ? "the client closed its response (2026-07-28: cancellation)"
                       : "the client did not retry the input-required round in time");
    mcp_stream_finish(&b->bs, "cancelled");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, b->q->r, "era bridge: stream %" APR_INT64_T_FMT
                  ": cancelled (%s); the backend was told", b->st.id,
                  b->cancelled ? "the client closed its response" : "round abandoned");
}

/* The end of a call whose round ended its request (detached): only the backend stream is left,
 * as in the parked cases of relay's end. */
static void parked_end(bridge_t *b)
{
    mcp_router_unsubscribe(b->watch);
    b->watch = NULL;
    if (b->ended_elsewhere) {
        mcp_stream_disown(&b->bs);   /* cancelled by the retry, which told the backend */
    }
    else if (b->abandoned) {
        cancel_upstream(b);
    }
    else if (!b->finished) {
        b->finished = 1;
        mcp_stream_finish(&b->bs, b->answered ? "complete" : "failed");
    }
}

static int relay(bridge_t *b, int *detached)
{
    mcp_req_t *q = b->q;
    request_rec *r = q->r;
    const char *err = NULL, *why = NULL, *json;
    mcp_backend_status_t status;
    apr_size_t len;
    int attempt, rc;

    for (attempt = 0;; attempt++) {
        if ((rc = open_backend_stream(b, attempt, &why)) != 0) {
            return rc == DONE ? DONE
                   : mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: "
                                      "the era bridge has no backend session: %s", why));
        }
        mcp_bridged_server_info(b, b->pooled->server_info);
        status = forward(b, &err, detached);
        if (*detached) {
            detach(b);   /* b is the loop's now */
            return DONE;
        }
        if (attempt == 0 && session_lost(b, status)) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: the backend lost pooled "
                          "session %s (%s); a new one is initialized and the request sent "
                          "again", mcp_id_tag(r->pool, b->pooled->id),
                          status == MCP_BACKEND_OK ? "404"
                          : "its stdio server's supervisor cannot be reached");
            mcp_stream_finish(&b->bs, "failed");
            mcp_store_session_terminate(mcp_req_db(q), r->pool, b->pooled->id, r->user,
                                        "backend");
            continue;
        }
        break;
    }
    cut_round(b);   /* requests in a last piece that no after_chunk saw */
    mcp_router_unsubscribe(b->watch);
    b->watch = NULL;
    if (b->ended_elsewhere) {
        mcp_stream_disown(&b->bs);   /* cancelled by the retry, which told the backend */
        return DONE;
    }
    if (b->refused_cap && !b->answered) {   /* (answered anyway: the response wins) */
        return mcp_bridged_refuse(b, b->pooled, b->refused_cap);
    }
    if (b->cancelled || b->abandoned) {
        cancel_upstream(b);
        if (b->cancelled) {
            mcp_stream_finish(&b->st, "cancelled");
            r->connection->keepalive = AP_CONN_CLOSE;
        }
        return DONE;
    }
    if (b->url_round) {
        return url_round(b);
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
        if (b->url_round) {
            return url_round(b);
        }
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

int mcp_bridged_relay(bridge_t *b)
{
    int detached = 0, rc = relay(b, &detached);

    if (!detached) {
        mcp_bridged_tools_cache(b);   /* (after the answer: it costs the client nothing) */
    }
    return rc;
}

/* ---- entry ----------------------------------------------------------------------------------- */

/* A client's notifications/cancelled for a call still running upstream (its client request id,
 * this principal's): forwarded to the pooled session with the call's backend-side id (the relay
 * then ends when the backend ends the call's stream). 2026-07-28 cancels by closing the
 * response, but a client may also say it; nothing else a 2026-07-28 client notifies has a
 * meaning upstream (no roots/list_changed, no initialized; its progress would be for server
 * requests, which the bridge turns into rounds): stored, answered 202, not forwarded. */
static void forward_cancelled(bridge_t *b)
{
    request_rec *r = b->q->r;
    json_object *params = NULL, *id = NULL;
    mcp_store_bridge_call_t call;
    mcp_store_session_t s;
    const char *reason;
    int max_age = (int)apr_time_sec(b->q->conf->stream_timeout
                                    + b->q->conf->bridge_input_timeout) + 1;

    if (strcmp(b->msg->method, "notifications/cancelled") != 0
        || !json_object_object_get_ex(b->msg->obj, "params", &params)
        || !json_object_object_get_ex(params, "requestId", &id)
        || !(json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int))
        || mcp_store_bridge_call_of(mcp_req_db(b->q), r->pool, r->user,
                                    mcp_jsonrpc_to_string(r->pool, id, NULL), max_age, &call)
           != MCP_STORE_OK) {
        return;
    }
    memset(&s, 0, sizeof(s));
    s.id = call.session_id;
    s.backend_session_id = call.backend_session_id;
    s.protocol_version = call.protocol_version;
    s.principal = r->user;
    s.backend_url = b->q->conf->backend_spec;
    reason = mcp_jsonrpc_get_string(params, "reason");
    mcp_bridged_cancel(b, &s, call.backend_request_id, reason ? reason
                       : "the client sent notifications/cancelled");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: the client cancelled request %s: "
                  "notifications/cancelled sent upstream for backend stream %" APR_INT64_T_FMT,
                  mcp_jsonrpc_to_string(r->pool, id, NULL), call.stream_id);
}

static const char *init_result(bridge_t *b, const char **why)
{
    mcp_req_t *q = b->q;
    const char *init = NULL;

    *why = NULL;
    if (mcp_store_bridge_init_result(mcp_req_db(q), q->r->pool, q->conf->backend_spec, &init)
        != MCP_STORE_OK) {
        if (!mcp_bridged_pool(b, 0, why)
            || mcp_store_bridge_init_result(mcp_req_db(q), q->r->pool, q->conf->backend_spec,
                                            &init) != MCP_STORE_OK) {
            *why = *why ? *why : "not stored";
            return NULL;
        }
    }
    return init;
}

static int discover(bridge_t *b)
{
    request_rec *r = b->q->r;
    const char *init, *why = NULL, *out;

    if (!(init = init_result(b, &why))) {
        return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                "era bridge could not learn the backend's capabilities: %s",
                                why));
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

/* What the client's opening read of the pool for a call (open_client_and_call). */
typedef struct {
    bridge_pool_t            pool;
    mcp_store_session_t     *pooled;
    mcp_store_bridge_tools_t tools;
    apr_int64_t              backend_stream;
    const char              *tail;      /* the request sent, after its id                 */
    apr_time_t               asked_at;  /* when the pool was asked                        */
} pool_read_t;

/* The client's stream of a call relayed upstream and, in the same statement, the pool's
 * session for it and the call's backend stream on it when its Mcp-Param-* headers need no
 * check (mcp_store_bridge_open_stateless): the bridged call's two openings with one commit.
 * As mcp_req_open_stateless otherwise. */
static int open_client_and_call(mcp_req_t *q, const char *version, apr_int64_t *stream_id,
                                pool_read_t *read)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_stateless_t client;
    mcp_store_bridge_open_t call;
    mcp_store_status_t stored;

    memset(read, 0, sizeof(*read));
    if (!(read->tail = mcp_bridge_request_tail(r->pool, msg->obj))) {
        return mcp_req_open_stateless(q, version, stream_id);
    }
    mcp_req_stream_limits(q, &limits);
    client.protocol_version = version;
    client.request_id = mcp_jsonrpc_to_string(r->pool, msg->id, NULL);
    client.method = msg->method;
    client.inbound = q->raw;
    client.trace_id = mcp_req_trace_id(r);
    client.owner = mcp_child.owner;
    client.lease_secs = mcp_req_lease_secs(q);
    client.limits = &limits;
    client.member = q->member ? q->member->fed->name : NULL;
    call_init(q, msg, 1, &call);
    call.sent = read->tail;
    read->asked_at = apr_time_now();
    stored = mcp_store_bridge_open_stateless(mcp_req_db(q), r->pool, &client, &call, stream_id,
                                             &refused, &read->pooled, &read->tools,
                                             &read->backend_stream);
    if (stored == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    if (stored == MCP_STORE_NOT_FOUND) {
        read->pool = BRIDGE_POOL_EMPTY;
        return OK;
    }
    if (stored != MCP_STORE_OK) {
        return mcp_req_store_failed(q, stored);
    }
    read->pool = read->backend_stream ? BRIDGE_POOL_OPENED : BRIDGE_POOL_READ;
    return OK;
}

int mcp_bridge_post(mcp_req_t *handler_q, const char *version)
{
    /* A parked listen (and its stream, its park) outlives the handler's frame, where its
     * request lives: under load a later request of that thread overwrote it and the loop's
     * tick read a NULL request_rec (a child's SIGSEGV, the conformance bridge run's flake). */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_store_status_t stored;
    apr_int64_t stream_id = 0;
    const char *state;
    int has_responses = 0, relayed, rc;
    mcp_detach_t *d = NULL;
    pool_read_t read;
    bridge_t *b;

    if (msg->kind == MCP_MSG_NOTIFICATION) {
        stored = mcp_store_events_append(mcp_req_db(q), r->pool, q->session, 0, 0, "in",
                                         apr_pstrcat(r->pool, "[", q->raw, "]", NULL));
        if (stored != MCP_STORE_OK) {
            return mcp_req_store_failed(q, stored);
        }
        b = apr_palloc(r->pool, sizeof(*b));
        bridge_init(b, q, NULL);
        forward_cancelled(b);
        return mcp_req_empty(q, HTTP_ACCEPTED);
    }
    if (mcp_bridge_method_is_gone(msg->method)) {
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_METHOD_NOT_FOUND, "Method not found: "
                             "%s is not a method of protocol version %s", msg->method, version);
    }
    state = mcp_bridge_request_state(msg->obj, &has_responses);
    relayed = !state && !has_responses && strcmp(msg->method, "server/discover") != 0
              && strcmp(msg->method, "subscriptions/listen") != 0;
    memset(&read, 0, sizeof(read));
    if ((rc = relayed ? open_client_and_call(q, version, &stream_id, &read)
                      : mcp_req_open_stateless(q, version, &stream_id)) != OK) {
        return rc;
    }
    mcp_req_note_stream(r, stream_id);
    /* A call relayed upstream may end its request at its first round and go on without it. */
    if (relayed) {
        d = mcp_detach_create(q);
    }
    b = apr_palloc(d ? mcp_detach_req(d)->r->pool : r->pool, sizeof(*b));
    bridge_init(b, q, d);
    mcp_stream_init(&b->st, q, stream_id, 1);
    b->st.stateless = 1;
    mcp_stream_own(&b->st);
    b->backend_id = stream_id;   /* unique: calls sharing a pooled session never collide */
    b->pool_read_at = read.asked_at;
    if ((b->pool = read.pool) != BRIDGE_POOL_UNREAD && read.pooled) {
        b->pooled = read.pooled;
        b->tools = read.tools;
    }
    if (b->pool == BRIDGE_POOL_OPENED) {
        backend_stream_start(b, mcp_bridge_request_join(r->pool, stream_id, read.tail),
                             read.backend_stream);
    }
    if (strcmp(msg->method, "server/discover") == 0) {
        return discover(b);
    }
    if (strcmp(msg->method, "subscriptions/listen") == 0) {
        return mcp_bridged_listen(b);
    }
    if (state) {
        return mcp_bridged_round_retry(b, state);
    }
    if (has_responses) {
        mcp_stream_finish(&b->st, "failed");
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: "
                             "inputResponses without a requestState (the era bridge always "
                             "issues one)");
    }
    return mcp_bridged_relay(b);   /* b may be the event loop's after this */
}

/* ---- for callers of their own ------------------------------------------------------------ */

mcp_store_session_t *mcp_bridge_pooled(mcp_req_t *q, int fresh, const char **why)
{
    bridge_t b;

    bridge_init(&b, q, NULL);
    return mcp_bridged_pool(&b, fresh, why);
}

void mcp_bridge_pooled_lost(mcp_req_t *q, const mcp_store_session_t *s)
{
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "era bridge: the backend lost pooled session "
                  "%s (404); a new one is initialized", mcp_id_tag(q->r->pool, s->id));
    mcp_store_session_terminate(mcp_req_db(q), q->r->pool, s->id, q->r->user, "backend");
}

const char *mcp_bridge_init_result(mcp_req_t *q, const char **why)
{
    bridge_t b;

    bridge_init(&b, q, NULL);
    return init_result(&b, why);
}
