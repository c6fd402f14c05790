/* mod_mcp_shim — see mod_mcp_shim.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_era.h"
#include "mcp_http.h"
#include "mcp_id.h"
#include "mcp_memo.h"
#include "mcp_shim.h"
#include "mcp_sse.h"
#include "mcp_store_shim.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_shim.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* How often a relay waiting on the backend looks whether its stream was ended elsewhere (a
 * cancellation, a DELETE) after a wake-up; and how long a round waits between looks at the
 * table when no wake-up comes. */
#define WATCH_INTERVAL apr_time_from_msec(250)
#define ROUND_POLL     apr_time_from_sec(1)
/* A discover result without a positive ttlMs is reused this long. */
#define DISCOVER_TTL_MS 60000L
#define DISCOVER_CACHE  16
#define MCP_SHIM_DEFAULT_LOG_LEVEL "info"

/* ---- one exchange with the backend, the answer relayed message by message ------------------ */

typedef struct shim_call_t shim_call_t;
/* One message of the backend's answer (parsed, in scratch). Non-zero stops the transfer. */
typedef int shim_message_fn(shim_call_t *c, json_object *obj, const mcp_jsonrpc_msg_t *msg,
                            const char *json, apr_size_t len);

struct shim_call_t {
    mcp_req_t              *q;
    mcp_stream_t           *st;            /* NULL: no stream (server/discover)              */
    shim_message_fn        *on_message;
    void                   *baton;
    int                     standalone;
    mcp_exchange_t          x;             /* the POST to the backend                        */
    apr_pool_t             *scratch;
    mcp_router_sub_t       *watch;
    apr_time_t              last_watch;
    int                     ended_elsewhere;
};

static mcp_exchange_message_fn on_message;
static mcp_exchange_check_fn on_piece, on_tick;

static void call_init(shim_call_t *c, mcp_req_t *q, mcp_stream_t *st, shim_message_fn *fn,
                      void *baton)
{
    memset(c, 0, sizeof(*c));
    c->q = q;
    c->st = st;
    c->on_message = fn;
    c->baton = baton;
    mcp_exchange_init(&c->x, q, c);
    c->x.on_message = on_message;
    c->x.after_chunk = on_piece;
    c->x.on_tick = on_tick;
    apr_pool_create(&c->scratch, q->r->pool);
    c->watch = st ? mcp_router_subscribe(mcp_child.router, st->id) : NULL;
}

static void call_done(shim_call_t *c)
{
    mcp_router_unsubscribe(c->watch);
    c->watch = NULL;
}

/* Was the stream ended by someone else (the client's cancellation, a DELETE, a takeover)? Read
 * from the table after a wake-up, at most every WATCH_INTERVAL; force: read now. */
static int ended_elsewhere(shim_call_t *c, int force)
{
    apr_time_t now = apr_time_now();
    mcp_store_stream_t state;
    apr_pool_t *p;

    if (c->ended_elsewhere || !c->st) {
        return c->ended_elsewhere;
    }
    if (!force && (now - c->last_watch < WATCH_INTERVAL || !mcp_router_wait(c->watch, 0))) {
        return 0;
    }
    c->last_watch = now;
    apr_pool_create(&p, c->q->r->pool);
    if (mcp_store_stream_get(mcp_db_request(c->q->r, 0), p, c->st->id, &state) == MCP_STORE_OK
        && strcmp(state.status, "open") != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, c->q->r, "stream %" APR_INT64_T_FMT ": ended "
                      "elsewhere (%s); the backend's request is closed", c->st->id, state.status);
        c->ended_elsewhere = 1;
        c->st->broken = 1;
    }
    apr_pool_destroy(p);
    return c->ended_elsewhere;
}

static int relay_one(shim_call_t *c, const char *json, apr_size_t len)
{
    json_object *obj;
    mcp_jsonrpc_msg_t msg;

    apr_pool_clear(c->scratch);
    if (!(obj = mcp_jsonrpc_parse_value(c->scratch, json, len))) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, c->q->r, "stream %" APR_INT64_T_FMT ": the "
                      "backend sent a message that is not JSON; dropped", c->st ? c->st->id : 0);
        return 0;
    }
    mcp_jsonrpc_classify(obj, &msg);
    return c->on_message(c, obj, &msg, json, len);
}

static int on_message(void *baton, const char *json, apr_size_t len)
{
    return relay_one(baton, json, len);
}

static int on_piece(void *baton)
{
    shim_call_t *c = baton;

    return c->st && !c->x.answered
        && (mcp_stream_commit(c->st) || (c->standalone && c->st->client_gone));
}

static int on_tick(void *baton)
{
    shim_call_t *c = baton;

    if (ended_elsewhere(c, 0)) {
        return 1;
    }
    if (!c->st) {
        return 0;
    }
    /* A graceful restart, or MCPStreamCloseAfter: the client resumes elsewhere and follows the
     * stream through the table while this process goes on relaying it. */
    if (mcp_stream_should_hand_over(c->st)) {
        mcp_stream_end_early(c->st);
    }
    return mcp_stream_tick(c->st) || (c->standalone && c->st->client_gone);
}

/* POSTs body (request, stamped) to the backend with the revision's headers; every message of
 * the answer goes to c->on_message, a buffered (JSON) one too, whatever its status. */
static mcp_backend_status_t call_backend(shim_call_t *c, json_object *request, const char *body,
                                         apr_size_t len, apr_interval_time_t timeout,
                                         const char **err)
{
    mcp_backend_status_t status;
    const char *buf;
    apr_size_t n;

    status = mcp_exchange_post(&c->x, body, len, MCP_SHIM_VERSION,
                               mcp_shim_headers(c->q->r->pool, request), timeout, err);
    if (c->x.answered || c->ended_elsewhere) {
        return MCP_BACKEND_OK;
    }
    if (status == MCP_BACKEND_OK && !c->x.sse && (buf = mcp_exchange_body(&c->x, &n)) != NULL) {
        relay_one(c, buf, n);
    }
    return c->x.too_large ? MCP_BACKEND_FAILED : status;
}

/* Stores a message of the backend side of the translation on the stream ('in', never
 * replayed): what was queued for the client is stored first, so seqs stay in order. */
static void audit_backend_side(mcp_stream_t *st, const char *json)
{
    mcp_req_t *q = st->q;
    mcp_store_status_t rv;

    if (st->broken || mcp_stream_commit(st)) {
        return;
    }
    rv = mcp_store_events_append(st->db, q->r->pool, q->session, st->id, st->next_seq, "in",
                                 apr_pstrcat(q->r->pool, "[", json, "]", NULL));
    if (rv == MCP_STORE_OK) {
        st->next_seq++;
    }
    else {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "stream %" APR_INT64_T_FMT ": storing "
                      "the backend side of the translation failed: %s", st->id,
                      st->db->error ? st->db->error : "?");
    }
}

/* ---- initialize ---------------------------------------------------------------------------- */

/* The server/discover results of this process's backends, for their ttlMs. */
static mcp_memo_slot_t discover_slots[DISCOVER_CACHE];
static mcp_memo_t discover_memo = MCP_MEMO_INIT(discover_slots);

typedef struct discover_t {
    const char *result;      /* the result's JSON text                */
    const char *error;       /* the backend's error message, as text  */
} discover_t;

static int on_discover(shim_call_t *c, json_object *obj, const mcp_jsonrpc_msg_t *msg,
                       const char *json, apr_size_t len)
{
    discover_t *d = c->baton;
    json_object *result;

    (void)json;
    (void)len;
    if (msg->kind != MCP_MSG_RESPONSE && msg->kind != MCP_MSG_ERROR) {
        return 0;
    }
    c->x.answered = apr_time_now();
    if (json_object_object_get_ex(obj, "result", &result)) {
        d->result = mcp_jsonrpc_to_string(c->q->r->pool, result, NULL);
    }
    else {
        d->error = mcp_jsonrpc_to_string(c->q->r->pool, obj, NULL);
    }
    return 0;
}

void mcp_shim_discover(mcp_req_t *q, apr_interval_time_t timeout, mcp_shim_discovered_t *out)
{
    request_rec *r = q->r;
    static const char ask[] = "{\"jsonrpc\":\"2.0\",\"id\":\"" MCP_SHIM_ID_PREFIX "discover\","
                              "\"method\":\"server/discover\"}";
    const char *text = NULL, *err = NULL, *body;
    json_object *request;
    shim_call_t c;
    discover_t d;
    mcp_backend_status_t status;
    apr_size_t len;

    memset(out, 0, sizeof(*out));
    if (mcp_memo_get(&discover_memo, r->pool, q->conf->backend_spec, apr_time_now(), &text)) {
        out->result = mcp_jsonrpc_parse_value(r->pool, text, strlen(text));
        out->http_status = HTTP_OK;
        return;
    }
    request = mcp_jsonrpc_parse_value(r->pool, ask, sizeof(ask) - 1);
    body = mcp_shim_stamp(r->pool, request, NULL, NULL, NULL, NULL, &len);
    memset(&d, 0, sizeof(d));
    call_init(&c, q, NULL, on_discover, &d);
    status = call_backend(&c, request, body, len, timeout, &err);
    call_done(&c);
    if (status != MCP_BACKEND_OK) {
        out->why = apr_psprintf(r->pool, "server/discover failed: %s", err ? err : "no answer");
        return;
    }
    out->http_status = (int)c.x.response.status;
    out->error = d.error;
    if (!d.result) {
        out->why = d.error ? apr_psprintf(r->pool, "the backend answered server/discover with "
                                          "an error: %s", d.error)
            : apr_psprintf(r->pool, "the backend's answer to server/discover (HTTP %ld) holds no "
                           "response", c.x.response.status);
        return;
    }
    if (!(out->result = mcp_jsonrpc_parse_value(r->pool, d.result, strlen(d.result)))) {
        out->why = "the backend's server/discover result does not parse";
        return;
    }
    /* A result the shim can use is kept for initialize (and for whoever asks next). */
    if (!mcp_shim_discover_problem(out->result)) {
        mcp_memo_put(&discover_memo, q->conf->backend_spec, d.result, apr_time_now()
                     + apr_time_from_msec(mcp_shim_discover_ttl(out->result, DISCOVER_TTL_MS)));
    }
}

/* The backend's server/discover result (parsed in r->pool), from the cache or asked now, if the
 * shim can use it. */
static json_object *discover(mcp_req_t *q, const char **why)
{
    mcp_shim_discovered_t d;
    const char *problem;

    mcp_shim_discover(q, q->conf->backend_timeout, &d);
    if (!d.result) {
        *why = d.why;
        return NULL;
    }
    if ((problem = mcp_shim_discover_problem(d.result))) {
        *why = apr_psprintf(q->r->pool, "the backend's server/discover result is malformed: %s",
                            problem);
        return NULL;
    }
    return d.result;
}

static const char *member_json(apr_pool_t *p, json_object *obj, const char *key)
{
    json_object *v;

    return obj && json_object_object_get_ex(obj, key, &v) ? mcp_jsonrpc_to_string(p, v, NULL)
                                                         : NULL;
}

int mcp_shim_initialize(mcp_req_t *q)
{
    request_rec *r = q->r;
    json_object *request = q->body->msgs[0].obj, *params = NULL, *disc, *result, *response;
    const char *why = NULL, *version = NULL, *negotiated, *response_text;
    mcp_store_session_t session;
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_status_t stored;

    if (q->session_header) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: initialize starts a new session and must be sent "
                             "without Mcp-Session-Id");
    }
    if (!(disc = discover(q, &why))) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "era shim: %s", why);
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: initialize is answered from the 2026-07-28 backend's "
                             "server/discover, and %s", why);
    }
    json_object_object_get_ex(request, "params", &params);
    version = params ? mcp_jsonrpc_get_string(params, "protocolVersion") : NULL;
    result = mcp_shim_initialize_result(disc, version, &negotiated);
    response = json_object_new_object();
    json_object_object_add(response, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(response, "id", json_object_get(q->id));
    json_object_object_add(response, "result", result);
    response_text = mcp_jsonrpc_to_string(r->pool, response, NULL);

    if (apr_generate_random_bytes(random, sizeof(random)) != APR_SUCCESS) {
        json_object_put(response);
        return mcp_req_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                             "Internal Error: no secure random bytes for a session id");
    }
    memset(&session, 0, sizeof(session));
    session.id = mcp_id_session_encode(r->pool, random, sizeof(random));
    session.backend_url = q->conf->backend_spec;
    session.trace_id = mcp_req_trace_id(r);
    session.protocol_version = negotiated;
    session.principal = r->user;
    session.client_info = member_json(r->pool, params, "clientInfo");
    session.client_capabilities = member_json(r->pool, params, "capabilities");
    session.server_info = member_json(r->pool, result, "serverInfo");
    json_object_put(response);
    stored = mcp_store_session_insert_admitted(mcp_req_db(q), r->pool, &session,
                                               mcp_req_holder(q),
                                               apr_pstrmemdup(r->pool, q->raw, q->raw_len),
                                               response_text, q->conf->max_sessions,
                                               q->conf->max_principal_sessions,
                                               mcp_req_idle_secs(q), &refused);
    if (stored == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    if (stored != MCP_STORE_OK) {
        return mcp_req_store_failed(q, stored);
    }
    mcp_req_set_session_tag(r, session.id);
    mcp_req_note_protocol(r, negotiated);
    mcp_status_count(MCP_STAT_SESSIONS, 1);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "session %s started through the era shim "
                  "(protocol %s, user %s; the backend speaks " MCP_SHIM_VERSION ")",
                  mcp_id_tag(r->pool, session.id), negotiated, r->user ? r->user : "-");
    apr_table_setn(r->headers_out, "Mcp-Session-Id", session.id);
    r->status = HTTP_OK;
    ap_set_content_type(r, "application/json");
    ap_rwrite(response_text, (int)strlen(response_text), r);
    return DONE;
}

/* What the session's requests are stamped with. A client that never sent logging/setLevel gets
 * the messages of level info and above (a 2025 server sends what it chooses; the revision sends
 * none unless asked). */
static mcp_store_status_t client_of(mcp_req_t *q, mcp_shim_client_t *client)
{
    mcp_store_status_t st = mcp_store_shim_client(mcp_req_db(q), q->r->pool, q->session->id,
                                                  &client->caps_json, &client->info_json,
                                                  &client->log_level);

    if (!client->log_level) {
        client->log_level = MCP_SHIM_DEFAULT_LOG_LEVEL;
    }
    return st;
}

/* ---- a request ------------------------------------------------------------------------------ */

typedef struct shim_req_t {
    const mcp_jsonrpc_msg_t *msg;          /* the client's request                         */
    json_object             *backend_id;   /* the id the backend got this time              */
    const char              *input_required; /* an InputRequiredResult came (its JSON text)  */
    int                      final;        /* the response was relayed                      */
} shim_req_t;

static int on_request_message(shim_call_t *c, json_object *obj, const mcp_jsonrpc_msg_t *msg,
                              const char *json, apr_size_t len)
{
    shim_req_t *s = c->baton;
    json_object *result;
    apr_size_t n;
    const char *text;

    if (msg->kind == MCP_MSG_RESPONSE || msg->kind == MCP_MSG_ERROR) {
        if (!json_object_equal(msg->id, s->backend_id)) {
            return 0;
        }
        c->x.answered = apr_time_now();
        if (json_object_object_get_ex(obj, "result", &result)
            && mcp_shim_is_input_required(result)) {
            s->input_required = apr_pstrmemdup(c->q->r->pool, json, len);
            return 0;
        }
        mcp_shim_clean(obj);
        json_object_object_add(obj, "id", json_object_get(s->msg->id));
        text = mcp_jsonrpc_to_string(c->scratch, obj, &n);
        s->final = 1;
        return mcp_stream_add(c->st, text, n);
    }
    if (msg->kind == MCP_MSG_NOTIFICATION) {
        mcp_shim_clean(obj);
        text = mcp_jsonrpc_to_string(c->scratch, obj, &n);
        return mcp_stream_add(c->st, text, n);
    }
    return 0;   /* the revision has no server->client requests */
}

typedef struct collect_t {
    apr_pool_t        *p;
    mcp_shim_round_t  *rd;
    int                refused;
} collect_t;

static void on_answer(void *baton, const char *message)
{
    collect_t *k = baton;
    json_object *obj = mcp_jsonrpc_parse_value(k->p, message, strlen(message));

    if (obj && mcp_shim_round_take(k->p, k->rd, obj) == MCP_SHIM_ANSWER_REFUSED) {
        k->refused = 1;
    }
}

/* Waits for the client's answers to the round: woken by the process that stores one (any host),
 * or looking every ROUND_POLL. Returns NULL when every request is answered, else why not. */
static const char *await_answers(shim_call_t *c, mcp_shim_round_t *rd, apr_time_t deadline)
{
    mcp_req_t *q = c->q;
    const char *ids = mcp_shim_round_ids_json(q->r->pool, rd);
    collect_t k;
    apr_pool_t *p;

    apr_pool_create(&p, q->r->pool);
    k.p = p;
    k.rd = rd;
    k.refused = 0;
    for (;;) {
        apr_pool_clear(p);
        if (mcp_store_shim_answers(mcp_db_request(q->r, 0), p, q->session->id, ids, on_answer,
                                   &k) != MCP_STORE_OK) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "stream %" APR_INT64_T_FMT ": "
                          "reading the client's answers failed; trying again", c->st->id);
        }
        if (k.refused) {
            return apr_psprintf(q->r->pool, "the client refused the server's request: %s",
                                rd->refusal);
        }
        if (mcp_shim_round_done(rd)) {
            return NULL;
        }
        if (deadline && apr_time_now() >= deadline) {
            return "the client did not answer the server's requests within MCPStreamTimeout";
        }
        if (ended_elsewhere(c, 1)) {
            return "the stream was ended elsewhere";
        }
        if (mcp_stream_should_hand_over(c->st)) {
            mcp_stream_end_early(c->st);
        }
        if (mcp_stream_tick(c->st)) {
            return "the stream broke";
        }
        mcp_router_wait(c->watch, ROUND_POLL);
    }
}

/* The call ends with the gateway's JSON-RPC error (stored, sent). */
static void fail_call(shim_call_t *c, const shim_req_t *s, int code, const char *message)
{
    const char *body = mcp_jsonrpc_error_body(c->q->r->pool, s->msg->id, code, message, NULL);

    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, c->q->r, "stream %" APR_INT64_T_FMT ": %s",
                  c->st->id, message);
    mcp_stream_add(c->st, body, strlen(body));
}

/* Sends the request (and its retries) until the backend gives a final answer. */
static void run_rounds(shim_call_t *c, shim_req_t *s, const mcp_shim_client_t *client)
{
    mcp_req_t *q = c->q;
    request_rec *r = q->r;
    /* MCPStreamTimeout bounds the whole request, rounds included (0: no limit). */
    apr_time_t deadline = q->conf->stream_timeout > 0 ? r->request_time + q->conf->stream_timeout
                                                      : 0;
    json_object *responses = NULL;
    const char *state = NULL, *err = NULL, *body, *why;
    mcp_shim_round_t rd;
    mcp_backend_status_t status;
    apr_size_t len;
    int round;

    memset(&rd, 0, sizeof(rd));
    for (round = 0;; round++) {
        s->backend_id = round ? mcp_shim_retry_id(s->msg->id, round) : json_object_get(s->msg->id);
        body = mcp_shim_stamp(r->pool, s->msg->obj, client, s->backend_id, responses, state, &len);
        audit_backend_side(c->st, body);
        s->input_required = NULL;
        if (deadline && deadline - apr_time_now() < apr_time_from_msec(1)) {
            fail_call(c, s, MCP_JSONRPC_BACKEND_ERROR, "Gateway Timeout: MCPStreamTimeout passed "
                      "before the backend gave a final answer");
            json_object_put(s->backend_id);
            mcp_shim_round_clear(&rd);
            return;
        }
        status = call_backend(c, s->msg->obj, body, len, deadline ? deadline - apr_time_now() : 0,
                              &err);
        json_object_put(s->backend_id);
        mcp_shim_round_clear(&rd);
        responses = NULL;
        if (c->ended_elsewhere || s->final) {
            return;
        }
        if (!s->input_required) {
            fail_call(c, s, MCP_JSONRPC_BACKEND_ERROR, status == MCP_BACKEND_TIMEOUT
                      ? apr_psprintf(r->pool, "Gateway Timeout: no complete answer from the "
                                     "backend within MCPStreamTimeout: %s", err ? err : "?")
                      : status != MCP_BACKEND_OK
                      ? apr_psprintf(r->pool, "Bad Gateway: the exchange with the backend "
                                     "failed: %s", err ? err : "?")
                      : apr_psprintf(r->pool, "Bad Gateway: the backend answered HTTP %ld "
                                     "without a response to the request",
                                     c->x.response.status));
            return;
        }
        audit_backend_side(c->st, s->input_required);
        if (q->conf->shim_max_rounds > 0 && round + 1 > q->conf->shim_max_rounds) {
            fail_call(c, s, MCP_JSONRPC_INTERNAL_ERROR, apr_psprintf(
                r->pool, "the backend asked for input more than MCPShimMaxRounds (%d) times for "
                "this request; the gateway gave up", q->conf->shim_max_rounds));
            return;
        }
        {
            json_object *ir = mcp_jsonrpc_parse_value(r->pool, s->input_required,
                                                      strlen(s->input_required)), *result = NULL;
            int i;

            json_object_object_get_ex(ir, "result", &result);
            if ((why = mcp_shim_round_begin(r->pool, &rd, result, c->st->id, round + 1))) {
                fail_call(c, s, MCP_JSONRPC_BACKEND_ERROR,
                          apr_psprintf(r->pool, "Bad Gateway: %s", why));
                return;
            }
            for (i = 0; i < rd.n; i++) {
                mcp_stream_add(c->st, rd.requests[i], strlen(rd.requests[i]));
            }
        }
        if (mcp_stream_commit(c->st)) {
            return;
        }
        if (rd.n > 0 && (why = await_answers(c, &rd, deadline))) {
            if (!c->ended_elsewhere && !c->st->broken) {
                fail_call(c, s, MCP_JSONRPC_INTERNAL_ERROR, why);
            }
            mcp_shim_round_clear(&rd);
            return;
        }
        responses = rd.responses;
        state = rd.request_state;
    }
}

static int valid_level(json_object *request)
{
    static const char *const levels[] = { "debug", "info", "notice", "warning", "error",
                                          "critical", "alert", "emergency" };
    json_object *params = NULL;
    const char *level;
    int i;

    json_object_object_get_ex(request, "params", &params);
    level = params ? mcp_jsonrpc_get_string(params, "level") : NULL;
    for (i = 0; level && i < (int)(sizeof(levels) / sizeof(levels[0])); i++) {
        if (strcmp(level, levels[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Answers a request the gateway serves itself (ping and the methods the revision dropped),
 * storing both messages (no stream). */
static int answer_locally(mcp_req_t *q, const mcp_jsonrpc_msg_t *msg)
{
    request_rec *r = q->r;
    const char *body;
    mcp_store_status_t st;
    int rc;

    if ((rc = mcp_req_load_session(q)) != OK) {
        return rc;
    }
    if (strcmp(msg->method, "logging/setLevel") == 0 && !valid_level(msg->obj)) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS,
                             "Invalid params: logging/setLevel needs params.level, one of debug, "
                             "info, notice, warning, error, critical, alert, emergency");
    }
    if (strcmp(msg->method, "ping") == 0 || strcmp(msg->method, "logging/setLevel") == 0) {
        /* setLevel: the stored request is the session's level from now on (client_of). */
        body = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}",
                            mcp_jsonrpc_to_string(r->pool, msg->id, NULL));
    }
    else {
        body = mcp_jsonrpc_error_body(r->pool, msg->id, MCP_JSONRPC_METHOD_NOT_FOUND, apr_psprintf(
            r->pool, "Method not found: %s does not exist in protocol version " MCP_SHIM_VERSION
            ", which the backend speaks (the era shim cannot serve it)", msg->method), NULL);
    }
    st = mcp_store_events_append(mcp_req_db(q), r->pool, q->session, 0, 0, "in",
                                 apr_pstrcat(r->pool, "[", apr_pstrmemdup(r->pool, q->raw,
                                                                          q->raw_len), "]", NULL));
    if (st == MCP_STORE_OK) {
        st = mcp_store_events_append(mcp_req_db(q), r->pool, q->session, 0, 0, "out",
                                     apr_pstrcat(r->pool, "[", body, "]", NULL));
    }
    if (st != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    r->status = HTTP_OK;
    ap_set_content_type(r, "application/json");
    ap_rwrite(body, (int)strlen(body), r);
    return DONE;
}

static int is_local(const char *method)
{
    return strcmp(method, "ping") == 0 || strcmp(method, "logging/setLevel") == 0
        || strcmp(method, "resources/subscribe") == 0
        || strcmp(method, "resources/unsubscribe") == 0;
}

static int shim_request(mcp_req_t *q)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_shim_client_t client;
    const char *ids;
    mcp_store_status_t stored;
    apr_int64_t stream_id = 0;
    mcp_stream_t st;
    shim_call_t c;
    shim_req_t s;
    int rc;

    if (is_local(msg->method)) {
        return answer_locally(q, msg);
    }
    ids = mcp_jsonrpc_to_string(r->pool, msg->id, NULL);
    if ((rc = mcp_req_open_request(q, ids, msg->method, &stream_id)) != OK) {
        return rc;
    }
    if ((stored = client_of(q, &client)) != MCP_STORE_OK && stored != MCP_STORE_NOT_FOUND) {
        return mcp_req_store_failed(q, stored);
    }
    mcp_req_note_stream(r, stream_id);
    mcp_status_count(MCP_STAT_CALLS, 1);
    mcp_stream_init(&st, q, stream_id, MCP_STORE_SEQ_PRIMING + 1);
    mcp_stream_own(&st);
    mcp_stream_start_sse(&st, q->rev->priming ? MCP_STORE_SEQ_PRIMING : -1);

    memset(&s, 0, sizeof(s));
    s.msg = msg;
    call_init(&c, q, &st, on_request_message, &s);
    run_rounds(&c, &s, &client);
    call_done(&c);
    if (c.ended_elsewhere) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "stream %" APR_INT64_T_FMT " (%s): ended "
                      "elsewhere (cancelled by the client, or its session ended)", stream_id,
                      msg->method);
        mcp_stream_flush(&st);
        mcp_stream_disown(&st);   /* st is this function's */
        return DONE;
    }
    mcp_stream_finish(&st, s.final && !st.broken ? "complete" : "failed");
    return DONE;
}

/* ---- notifications and the client's answers ------------------------------------------------ */

/* The client's answers must each match a pending server request of this session. */
static int check_answers(mcp_req_t *q, apr_array_header_t *streams)
{
    int i;

    for (i = 0; i < q->body->count; i++) {
        const mcp_jsonrpc_msg_t *m = &q->body->msgs[i];
        const char *id;
        apr_int64_t sid;
        mcp_store_status_t st;

        if (m->kind != MCP_MSG_RESPONSE && m->kind != MCP_MSG_ERROR) {
            continue;
        }
        id = json_object_is_type(m->id, json_type_string) ? json_object_get_string(m->id) : NULL;
        sid = mcp_shim_minted_stream(id);
        st = sid ? mcp_store_shim_pending(mcp_req_db(q), q->r->pool, q->session->id, sid, id)
                 : MCP_STORE_NOT_FOUND;
        if (st == MCP_STORE_NOT_FOUND) {
            return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                                 "Invalid Request: the response with id %s answers no pending "
                                 "request of this session (the gateway's requests have ids "
                                 "'" MCP_SHIM_ID_PREFIX "<stream>-<round>-<n>'; each is answered "
                                 "once, while its request is open)",
                                 mcp_jsonrpc_to_string(q->r->pool, m->id, NULL));
        }
        if (st != MCP_STORE_OK) {
            return mcp_req_store_failed(q, st);
        }
        APR_ARRAY_PUSH(streams, apr_int64_t) = sid;
    }
    return OK;
}

/* notifications/cancelled: the request's stream is marked cancelled; its owner (any process)
 * closes the backend's request when woken. Unknown requests are ignored (the spec's rule). */
static void cancel(mcp_req_t *q, const mcp_jsonrpc_msg_t *m)
{
    json_object *params = NULL, *rid = NULL;
    apr_int64_t sid = 0;

    if (!json_object_object_get_ex(m->obj, "params", &params)
        || !json_object_object_get_ex(params, "requestId", &rid)) {
        return;
    }
    if (mcp_store_shim_cancel(mcp_req_db(q), q->r->pool, q->session->id,
                              mcp_jsonrpc_to_string(q->r->pool, rid, NULL), &sid)
        == MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "stream %" APR_INT64_T_FMT ": cancelled "
                      "by the client (notifications/cancelled)", sid);
    }
}

static int shim_messages(mcp_req_t *q)
{
    request_rec *r = q->r;
    apr_array_header_t *streams = apr_array_make(r->pool, 2, sizeof(apr_int64_t));
    mcp_store_status_t st;
    const char *messages;
    int i, rc;

    if ((rc = mcp_req_load_session_posted(q)) != OK) {
        return rc;
    }
    if ((rc = check_answers(q, streams)) != OK) {
        return rc;
    }
    messages = q->body->is_batch ? apr_pstrmemdup(r->pool, q->raw, q->raw_len)
        : apr_pstrcat(r->pool, "[", apr_pstrmemdup(r->pool, q->raw, q->raw_len), "]", NULL);
    st = mcp_store_events_append(mcp_req_db(q), r->pool, q->session, 0, 0, "in", messages);
    if (st != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    for (i = 0; i < streams->nelts; i++) {
        mcp_store_shim_wake(mcp_req_db(q), r->pool, APR_ARRAY_IDX(streams, i, apr_int64_t));
    }
    for (i = 0; i < q->body->count; i++) {
        const mcp_jsonrpc_msg_t *m = &q->body->msgs[i];
        if (m->kind == MCP_MSG_NOTIFICATION && strcmp(m->method, "notifications/cancelled") == 0) {
            cancel(q, m);
        }
    }
    return mcp_req_empty(q, HTTP_ACCEPTED);
}

int mcp_shim_post(mcp_req_t *q)
{
    if (q->body->n_requests == 0) {
        return shim_messages(q);
    }
    if (q->body->is_batch) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: the backend speaks " MCP_SHIM_VERSION " (one "
                             "message per request); the era shim takes no batches holding "
                             "requests");
    }
    return shim_request(q);
}

/* ---- GET: subscriptions/listen ------------------------------------------------------------- */

static int on_listen_message(shim_call_t *c, json_object *obj, const mcp_jsonrpc_msg_t *msg,
                             const char *json, apr_size_t len)
{
    const char *text;
    apr_size_t n;

    if (msg->kind == MCP_MSG_RESPONSE || msg->kind == MCP_MSG_ERROR) {
        c->x.answered = apr_time_now();   /* the listen ended */
        return 0;
    }
    if (msg->kind != MCP_MSG_NOTIFICATION) {
        return 0;
    }
    if (strcmp(msg->method, "notifications/subscriptions/acknowledged") == 0) {
        /* The backend's side only: a 2025 client has no such notification. */
        audit_backend_side(c->st, apr_pstrmemdup(c->scratch, json, len));
        return 0;
    }
    mcp_shim_clean(obj);
    text = mcp_jsonrpc_to_string(c->scratch, obj, &n);
    return mcp_stream_add(c->st, text, n);
}

static int open_listen(mcp_req_t *q, int resumed)
{
    request_rec *r = q->r;
    const char *err = NULL, *body, *ask;
    mcp_shim_client_t client;
    json_object *request;
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_status_t stored;
    mcp_backend_status_t status;
    apr_int64_t stream_id = 0;
    apr_size_t len;
    mcp_stream_t st;
    shim_call_t c;

    if (resumed) {
        /* Still live? (A DELETE ends the session's streams: a resume must not revive it.) */
        mcp_store_session_t *live = NULL;
        if (mcp_store_session_touch(mcp_req_db(q), r->pool, q->session->id, r->user,
                                    mcp_req_idle_secs(q), &live) != MCP_STORE_OK) {
            return DONE;
        }
    }
    mcp_req_stream_limits(q, &limits);
    stored = mcp_store_stream_open_standalone_admitted(mcp_req_db(q), r->pool, q->session,
                                                       mcp_req_trace_id(r), mcp_child.owner,
                                                       mcp_req_lease_secs(q),
                                                       &limits, &stream_id, &refused);
    if (resumed && stored != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "session %s: the resumed standalone stream "
                      "ends: no new one could be opened", mcp_id_tag(r->pool, q->session->id));
        return DONE;   /* the replay is out; the client resumes again later */
    }
    if (stored == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    if (stored == MCP_STORE_CONFLICT) {
        return mcp_req_error(q, HTTP_CONFLICT, MCP_JSONRPC_SERVER_ERROR,
                             "Conflict: this session already has an open standalone stream");
    }
    if (stored != MCP_STORE_OK
        || (stored = client_of(q, &client)) != MCP_STORE_OK) {
        return resumed ? DONE : mcp_req_store_failed(q, stored);
    }
    ask = apr_psprintf(
        r->pool, "{\"jsonrpc\":\"2.0\",\"id\":\"" MCP_SHIM_ID_PREFIX "listen-%" APR_INT64_T_FMT
        "\",\"method\":\"subscriptions/listen\",\"params\":{\"notifications\":{"
        "\"toolsListChanged\":true,\"promptsListChanged\":true,\"resourcesListChanged\":true}}}",
        stream_id);
    if (!(request = mcp_jsonrpc_parse_value(r->pool, ask, strlen(ask)))) {
        return mcp_req_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                             "Internal Error: the listen request could not be built");
    }
    body = mcp_shim_stamp(r->pool, request, &client, NULL, NULL, NULL, &len);
    mcp_req_note_stream(r, stream_id);
    mcp_stream_init(&st, q, stream_id, 1);
    mcp_stream_own(&st);
    mcp_stream_start_sse(&st, q->rev->priming ? 0 : -1);
    audit_backend_side(&st, body);
    call_init(&c, q, &st, on_listen_message, NULL);
    c.standalone = 1;
    status = call_backend(&c, request, body, len, 0, &err);
    call_done(&c);
    if (!c.ended_elsewhere) {
        mcp_stream_finish(&st, "closed");
    }
    else {
        mcp_stream_disown(&st);   /* st is this function's */
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "standalone stream %" APR_INT64_T_FMT " (era "
                  "shim, subscriptions/listen) ended: %s", stream_id,
                  st.client_gone ? "the client went away"
                  : c.ended_elsewhere ? "its session ended"
                  : status == MCP_BACKEND_OK ? "the backend ended it" : err);
    return DONE;
}

int mcp_shim_listen(mcp_req_t *q)
{
    return open_listen(q, 0);
}

int mcp_shim_listen_resumed(mcp_req_t *q)
{
    return open_listen(q, 1);
}
