/* mod_mcp_relay — see mod_mcp_relay.h. */
#include <string.h>

#include <apr_hash.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_http.h"
#include "mcp_id.h"
#include "mcp_sse.h"
#include "mcp_text.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_federation.h"
#include "mod_mcp_park.h"
#include "mod_mcp_relay.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stdio.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* How often, at most, a relay that was woken up for its own stream looks whether someone else
 * ended it (the session's DELETE, a lease takeover). */
#define WATCH_INTERVAL apr_time_from_sec(1)


/* How much of a backend's body an error response quotes (error.data.body). */
#define BODY_EXCERPT 512

typedef struct relay_t {
    mcp_req_t              *q;
    mcp_stream_t            st;
    int                     standalone;    /* a GET stream: ends when the client is gone      */
    mcp_exchange_t          x;             /* answered: every response was in, the stream ended */
    apr_pool_t             *scratch;       /* cleared per message                             */
    apr_array_header_t     *outstanding;   /* json_object *: request ids not answered yet     */
    apr_hash_t             *position;      /* id's JSON text -> its index in outstanding (int *) */
    int                     dropped;       /* backend messages that were not JSON             */
    const char             *drop_reason;   /* why the first of them was not                   */
    const char             *bad_json;      /* why a JSON answer (not SSE) was not JSON        */
    int                     flooded;       /* too many bytes without a message (SSE)          */
    mcp_router_sub_t       *watch;         /* wake-ups for this stream (NULL: none to be had) */
    apr_time_t              last_watch;
    apr_pool_t             *watch_pool;    /* cleared at each look                            */
    mcp_store_t            *watch_db;      /* one try per look                                */
    int                     ended_elsewhere;
    apr_time_t              sent;          /* when the request went to the backend            */
    int                     relayed;       /* messages relayed so far                         */
    mcp_park_half_t         half;          /* a parked standalone stream's backend half        */
    mcp_park_t             *pk;            /* ... its parked stream                            */
    int                     answered_headers; /* ... its transfer's headers came               */
    int                     detached;      /* ... its client is served by the parked stream    */
    int                     async_done;    /* ... its transfer ended                           */
    mcp_backend_status_t    async_status;  /* ... how                                          */
    const char             *async_err;
    int                     settled;       /* a request's answer on the loop: settle_answer ran */
    int                     settled_rc;    /* ... what it returned, and its outputs: for the   */
    const char             *settled_json;  /* request thread to answer with (an older session's
                                            * JSON answer, or its failure)                     */
    apr_size_t              settled_len;
    int                     settled_http, settled_code;
    const char             *settled_message;
} relay_t;

/* ---- where the request goes ---------------------------------------------------------------- */

/* The backend session, revision and body of the request: its member's on a federated endpoint
 * (mod_mcp_federation), else the session's and the client's. */
static void fill_call(const mcp_req_t *q, mcp_backend_call_t *call)
{
    call->body = q->member ? q->member->body : q->raw;
    call->body_len = q->member ? q->member->body_len : q->raw_len;
    call->session_id = q->member ? q->member->row.backend_session_id
                                 : q->session->backend_session_id;
    call->protocol_version = q->member ? q->member->row.protocol_version
                                       : q->session->protocol_version;
}

static const char *backend_session_id(const mcp_req_t *q)
{
    return q->member ? q->member->row.backend_session_id : q->session->backend_session_id;
}

/* ---- what the relay learns from each message --------------------------------------------- */

/* An id's key in rl->position: its JSON text, so 1 and "1" differ as json_object_equal has
 * them. NULL for ids no request can carry. */
static const char *id_key(apr_pool_t *p, json_object *id, apr_size_t *len)
{
    if (!json_object_is_type(id, json_type_int) && !json_object_is_type(id, json_type_string)) {
        return NULL;
    }
    return mcp_jsonrpc_to_string(p, id, len);
}

/* Notes a request id as outstanding; non-zero when the body has it twice. */
static int await(relay_t *rl, json_object *id)
{
    apr_pool_t *p = rl->q->r->pool;
    apr_size_t len;
    const char *key = id_key(p, id, &len);
    int *at;

    if (!key || apr_hash_get(rl->position, key, (apr_ssize_t)len)) {
        return 1;
    }
    at = apr_palloc(p, sizeof(*at));
    *at = rl->outstanding->nelts;
    APR_ARRAY_PUSH(rl->outstanding, json_object *) = id;
    apr_hash_set(rl->position, key, (apr_ssize_t)len, at);
    return 0;
}

/* The response to id came: its request is no longer outstanding (constant time, so that a
 * batch of n requests settles in linear time). */
static void settle(relay_t *rl, json_object *id)
{
    apr_size_t len, last_len;
    const char *key = id_key(rl->scratch, id, &len), *last_key;
    int *at, *last_at, last = rl->outstanding->nelts - 1;

    if (!key || !(at = apr_hash_get(rl->position, key, (apr_ssize_t)len))) {
        return;
    }
    /* The last one takes the settled one's place. */
    last_key = id_key(rl->scratch, APR_ARRAY_IDX(rl->outstanding, last, json_object *),
                      &last_len);
    last_at = apr_hash_get(rl->position, last_key, (apr_ssize_t)last_len);
    APR_ARRAY_IDX(rl->outstanding, *at, json_object *) =
        APR_ARRAY_IDX(rl->outstanding, last, json_object *);
    *last_at = *at;
    rl->outstanding->nelts--;
    apr_hash_set(rl->position, key, (apr_ssize_t)len, NULL);
}

/* One message from the backend, already parsed (obj is json's value): noted, queued (stored,
 * then sent). */
static int relay_parsed(relay_t *rl, json_object *obj, const char *json, apr_size_t len)
{
    mcp_jsonrpc_msg_t msg;
    int rewritten, rc;

    mcp_jsonrpc_classify(obj, &msg);
    if (!rl->relayed++ && !rl->standalone) {
        mcp_status_observe(MCP_HIST_FIRST_EVENT, rl->q->r->request_time);
    }
    if (msg.kind == MCP_MSG_RESPONSE || msg.kind == MCP_MSG_ERROR) {
        settle(rl, msg.id);
    }
    rewritten = rl->q->member && mcp_federation_outbound(rl->q, rl->q->r->pool, obj, &json, &len);
    rc = mcp_stream_add(&rl->st, json, len);
    if (rewritten && !rl->st.rewritten) {
        /* A member's message in the client's names: a JSON answer is this text too. */
        rl->st.rewritten = json;
        rl->st.rewritten_len = len;
    }
    return rc;
}

/* One message from the backend: parsed, then as relay_parsed. */
static int relay_message(relay_t *rl, const char *json, apr_size_t len)
{
    json_object *obj;
    const char *reason = NULL;

    apr_pool_clear(rl->scratch);
    obj = mcp_jsonrpc_parse_value_ex(rl->scratch, json, len, &reason);
    if (!obj) {
        /* One line per stream, however many follow: a backend must not be able to fill the
         * log. The count goes into the stream's error response. */
        if (rl->dropped++ == 0) {
            rl->drop_reason = apr_pstrdup(rl->q->r->pool, reason ? reason : "not JSON");
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, rl->q->r,
                          "stream %" APR_INT64_T_FMT ": the backend sent a message that is not "
                          "JSON (%s); dropped, and so are any more such messages on this stream",
                          rl->st.id, rl->drop_reason);
        }
        return 0;
    }
    return relay_parsed(rl, obj, json, len);
}

/* Every request still unanswered gets a stored JSON-RPC error, so no client waits forever. The
 * errors are the gateway's own (valid JSON whatever the message quotes) and are queued as they
 * are: nothing here depends on them parsing back. */
static void answer_outstanding(relay_t *rl, int code, const char *message, json_object *data)
{
    request_rec *r = rl->q->r;
    int i;

    for (i = 0; i < rl->outstanding->nelts; i++) {
        json_object *id = APR_ARRAY_IDX(rl->outstanding, i, json_object *);
        const char *body = mcp_jsonrpc_error_body(r->pool, id, code, message, data);
        mcp_stream_add(&rl->st, body, strlen(body));
    }
    rl->outstanding->nelts = 0;
    apr_hash_clear(rl->position);
}

/* ---- the exchange's hooks ---------------------------------------------------------------- */

/* A message of an SSE answer. After the response nothing more belongs to the request's stream
 * (it has ended: the exchange ignores such messages). An event without data (the backend's own
 * priming) is the backend's business: the gateway frames, stores and primes its own streams. */
static int on_backend_message(void *baton, const char *json, apr_size_t len)
{
    return relay_message(baton, json, len);
}

static int on_backend_answer(void *baton)
{
    relay_t *rl = baton;

    mcp_status_observe(MCP_HIST_BACKEND, rl->sent);
    return 0;
}

static void write_through(relay_t *rl);

static int on_backend_sse(void *baton)
{
    relay_t *rl = baton;

    if (rl->st.mode == MCP_STREAM_UNDECIDED) {
        mcp_stream_start_sse(&rl->st, rl->standalone && rl->q->rev->priming ? 0 : -1);
        if (rl->pk && !rl->standalone) {
            write_through(rl);   /* an older session's answer on the loop: before any store */
        }
    }
    return 0;
}

static int on_backend_chunk(void *baton)
{
    relay_t *rl = baton;

    /* Comments, empty blocks: a slow backend sends a few, one that floods sends them without
     * end. More than two messages' worth without one is the latter. */
    if (mcp_sse_parser_idle_bytes(rl->x.sse) > 2 * (apr_uint64_t)rl->q->conf->max_message_size) {
        rl->flooded = 1;
        return 1;
    }
    /* Every request is answered: the stream ends now, what is queued stored together with its
     * end. The transfer goes on to the backend's own end of the stream, so that the connection
     * can be reused (the exchange cuts a backend that lingers). */
    if (!rl->standalone && rl->outstanding->nelts == 0) {
        rl->x.answered = apr_time_now();
        mcp_stream_finish(&rl->st, rl->st.broken ? "failed" : "complete");
        return 0;
    }
    /* This piece is used up and the next may take a while: send what is queued now. */
    return mcp_stream_commit(&rl->st) || (rl->standalone && rl->st.client_gone);
}

/* Has someone else ended this stream? Its status changes wake this process's subscribers
 * (NOTIFY), so the table is read only after a wake-up, and at most once per WATCH_INTERVAL
 * (the relay's own stores wake it too). Without a subscription, the lease renewal finds out. */
static int ended_elsewhere(relay_t *rl)
{
    request_rec *r = rl->q->r;
    apr_time_t now = apr_time_now();
    mcp_store_stream_t state;

    if (!rl->watch || now - rl->last_watch < WATCH_INTERVAL || !mcp_router_wait(rl->watch, 0)) {
        return rl->ended_elsewhere;
    }
    rl->last_watch = now;
    apr_pool_clear(rl->watch_pool);
    if (mcp_store_stream_get(rl->watch_db, rl->watch_pool, rl->st.id, &state) == MCP_STORE_OK
        && strcmp(state.status, "open") != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "stream %" APR_INT64_T_FMT ": ended elsewhere "
                      "(%s: its session was terminated, or its lease taken over); relaying stops "
                      "and the backend's transfer is released", rl->st.id, state.status);
        rl->ended_elsewhere = 1;
        rl->st.broken = 1;   /* nothing more may be stored on it */
    }
    return rl->ended_elsewhere;
}

static void watch_start(relay_t *rl)
{
    rl->watch = mcp_router_subscribe(mcp_child.router, rl->st.id);
    rl->last_watch = apr_time_now();
    apr_pool_create(&rl->watch_pool, rl->q->r->pool);
    /* One try: a wake-up comes again, and the lease keeper finds a lost stream anyway. */
    rl->watch_db = mcp_db_request(rl->q->r, 0);
}

static void watch_stop(relay_t *rl)
{
    mcp_router_unsubscribe(rl->watch);
    rl->watch = NULL;
}

static int on_backend_tick(void *baton)
{
    relay_t *rl = baton;

    if (ended_elsewhere(rl)) {
        return 1;
    }
    /* A graceful restart, or polling (MCPStreamCloseAfter): the client resumes, on whichever
     * process, and follows this stream through the table while this one finishes relaying it. */
    if (mcp_stream_should_hand_over(&rl->st)) {
        mcp_stream_end_early(&rl->st);
    }
    return mcp_stream_tick(&rl->st) || (rl->standalone && rl->st.client_gone);
}

/* A backend that flooded the stream with comments: why it was cut. */
static void flood_error(relay_t *rl, const char **err)
{
    if (rl->flooded) {
        *err = apr_psprintf(rl->q->r->pool, "the backend sent %" APR_UINT64_T_FMT " bytes "
                            "without a message (comments or empty events only; the bound is "
                            "twice MCPMaxMessageSize)", mcp_sse_parser_idle_bytes(rl->x.sse));
    }
}

static mcp_backend_status_t forward(relay_t *rl, const char *method, apr_interval_time_t timeout,
                                    const char **err)
{
    mcp_req_t *q = rl->q;
    mcp_backend_call_t call;
    mcp_backend_status_t status;

    memset(&call, 0, sizeof(call));
    call.method = method;
    fill_call(q, &call);
    call.timeout_ms = (long)apr_time_as_msec(timeout);
    rl->sent = apr_time_now();
    status = mcp_exchange_perform(&rl->x, &call, err);
    flood_error(rl, err);
    return status;
}

static void relay_init(relay_t *rl, mcp_req_t *q, apr_int64_t stream_id, apr_int64_t next_seq)
{
    memset(rl, 0, sizeof(*rl));
    rl->q = q;
    mcp_stream_init(&rl->st, q, stream_id, next_seq);
    mcp_exchange_init(&rl->x, q, rl);
    rl->x.on_message = on_backend_message;
    rl->x.on_answer = on_backend_answer;
    rl->x.on_sse = on_backend_sse;
    rl->x.after_chunk = on_backend_chunk;
    rl->x.on_tick = on_backend_tick;
    apr_pool_create(&rl->scratch, q->r->pool);
    rl->outstanding = apr_array_make(q->r->pool, 1, sizeof(json_object *));
    rl->position = apr_hash_make(q->r->pool);
}

/* ---- POST with requests ------------------------------------------------------------------- */

/* The ids of the body's requests, as the stream row records them: the id, or an array of ids.
 * NULL when two requests of the body have the same id. */
static const char *request_ids(relay_t *rl, const char **method)
{
    mcp_req_t *q = rl->q;
    json_object *ids = json_object_new_array();
    const char *text;
    int i;

    *method = NULL;
    for (i = 0; i < q->body->count; i++) {
        const mcp_jsonrpc_msg_t *m = &q->body->msgs[i];
        if (m->kind == MCP_MSG_REQUEST) {
            if (await(rl, m->id)) {
                json_object_put(ids);
                return NULL;
            }
            json_object_array_add(ids, json_object_get(m->id));
            *method = *method ? *method : m->method;
        }
    }
    text = mcp_jsonrpc_to_string(q->r->pool, q->body->is_batch ? ids
                                 : json_object_array_get_idx(ids, 0), NULL);
    json_object_put(ids);
    return text;
}

/* What the backend's answer was, for an error's data: its status, content type and the start of
 * its body, quoted (any bytes may be there). */
static json_object *answer_data(relay_t *rl)
{
    request_rec *r = rl->q->r;
    json_object *data = json_object_new_object();
    const char *ctype = rl->x.response.content_type, *buf;
    apr_size_t n;

    json_object_object_add(data, "httpStatus", json_object_new_int((int)rl->x.response.status));
    if (ctype) {
        json_object_object_add(data, "contentType", json_object_new_string(
            mcp_text_quote(r->pool, ctype, strlen(ctype), BODY_EXCERPT)));
    }
    if (!rl->x.sse && (buf = mcp_exchange_body(&rl->x, &n)) != NULL) {
        json_object_object_add(data, "body", json_object_new_string(
            mcp_text_quote(r->pool, buf, n, BODY_EXCERPT)));
    }
    return data;
}

/* A 404 from an MCP server whose session is gone carries a JSON-RPC error; one from a proxy or a
 * web server in the way (a wrong MCPBackend path) carries a page or nothing. Only the first
 * ends the gateway's session. */
static int backend_lost_session(relay_t *rl)
{
    const char *buf;
    apr_size_t n;

    return rl->x.response.status == HTTP_NOT_FOUND
        && (buf = mcp_exchange_body(&rl->x, &n)) != NULL
        && mcp_jsonrpc_is_error_message(rl->q->r->pool, buf, n);
}

static const char *quoted_content_type(relay_t *rl)
{
    const char *ctype = rl->x.response.content_type;

    return ctype ? mcp_text_quote(rl->q->r->pool, ctype, strlen(ctype), 128) : "none";
}

/* Why a 200 answer did not answer: the words for the client. */
static const char *unanswered_200(relay_t *rl)
{
    apr_pool_t *p = rl->q->r->pool;

    if (rl->x.sse && rl->dropped) {
        return apr_psprintf(p, "Bad Gateway: the backend sent %d message(s) that are not JSON "
                            "(the first: %s) and no response to the request", rl->dropped,
                            rl->drop_reason);
    }
    if (rl->x.sse) {
        return rl->x.cut_mid_event
            ? "Bad Gateway: the backend's stream ended before the response to the request, in "
              "the middle of an event"
            : "Bad Gateway: the backend's stream ended before the response to the request";
    }
    if (rl->bad_json) {
        return apr_psprintf(p, "Bad Gateway: the backend's answer is not JSON (%s)", rl->bad_json);
    }
    if (mcp_http_media_type_is(rl->x.response.content_type, "application/json")) {
        return "Bad Gateway: the backend's answer holds no response to the request";
    }
    return apr_psprintf(p, "Bad Gateway: the backend answered HTTP 200 with neither JSON nor an "
                        "event stream (Content-Type: %s)", quoted_content_type(rl));
}

/* What a client that was sent nothing yet is told when the backend did not answer properly;
 * the same words go, stored, to every unanswered request (with *data, when the backend's answer
 * says more: free it with json_object_put). */
static int failure(relay_t *rl, mcp_backend_status_t status, const char *err, int *http,
                   const char **message, json_object **data)
{
    mcp_req_t *q = rl->q;
    long code = rl->x.response.status;

    *data = NULL;
    if ((*message = mcp_stdio_lost(q->r->pool, q->conf->backend, backend_session_id(q),
                                   status, err))) {
        if (q->member) {
            /* A federated member's process: that member is opened again next time. */
            *message = mcp_federation_member_lost(q);
            *http = HTTP_BAD_GATEWAY;
            return MCP_JSONRPC_BACKEND_ERROR;
        }
        /* The session's process went with its supervisor: the client starts anew. */
        *http = HTTP_NOT_FOUND;
        return MCP_JSONRPC_SESSION_NOT_FOUND;
    }
    if (status == MCP_BACKEND_TIMEOUT) {
        *http = HTTP_GATEWAY_TIME_OUT;
        *message = apr_psprintf(q->r->pool, "Gateway Timeout: no complete answer from the backend "
                                "within MCPStreamTimeout: %s", err);
    }
    else if (status == MCP_BACKEND_UNREACHABLE) {
        *http = HTTP_BAD_GATEWAY;
        *message = apr_psprintf(q->r->pool, "Bad Gateway: the backend is unreachable: %s", err);
    }
    else if (status != MCP_BACKEND_OK) {
        *http = HTTP_BAD_GATEWAY;
        *message = apr_psprintf(q->r->pool, "Bad Gateway: the exchange with the backend failed: "
                                "%s", err);
    }
    else if (backend_lost_session(rl) && q->member) {
        /* (A federated member: that member is opened again, the session goes on.) */
        *http = HTTP_BAD_GATEWAY;
        *message = mcp_federation_member_lost(q);
    }
    else if (backend_lost_session(rl)) {
        *http = HTTP_NOT_FOUND;
        *message = "Session not found: the backend no longer knows this session";
        return MCP_JSONRPC_SESSION_NOT_FOUND;
    }
    else if (code == HTTP_NOT_FOUND) {
        *http = HTTP_BAD_GATEWAY;
        *message = apr_psprintf(q->r->pool, "Bad Gateway: the backend answered HTTP 404 with a "
                                "body that is not a JSON-RPC error (Content-Type: %s): not an MCP "
                                "server's answer for a lost session; check MCPBackend's URL and "
                                "any proxy in between. The session stays open",
                                quoted_content_type(rl));
        *data = answer_data(rl);
    }
    else if (code >= 400 && code < 500) {
        *http = (int)code;
        *message = apr_psprintf(q->r->pool, "the backend refused the request with HTTP %ld", code);
        *data = answer_data(rl);
    }
    else if (code == HTTP_OK) {
        *http = HTTP_BAD_GATEWAY;
        *message = unanswered_200(rl);
        *data = rl->x.sse ? NULL : answer_data(rl);
    }
    else {
        *http = HTTP_BAD_GATEWAY;
        *message = apr_psprintf(q->r->pool, "Bad Gateway: the backend answered HTTP %ld (%s)",
                                code, quoted_content_type(rl));
        *data = answer_data(rl);
    }
    return MCP_JSONRPC_BACKEND_ERROR;
}

/* A JSON answer: one message or (2025-03-26) an array of them, each stored on the stream.
 * The body is parsed once: each message is classified in that tree (not parsed again from its
 * text), and the tree is freed before the answer goes out, so that a large answer (tools/list
 * of a backend with 100,000 tools: a tree twenty times the size of its text) costs one parse
 * and is held by one tree at a time. */
static int relay_json_body(relay_t *rl, const char **body, apr_size_t *len)
{
    request_rec *r = rl->q->r;
    apr_pool_t *tree;
    json_object *value;
    apr_size_t n, i;
    const char *buf = mcp_exchange_body(&rl->x, &n);
    apr_array_header_t *sent = NULL;   /* an array's elements as stored, once one was not as
                                        * it came (a filtered list) */

    apr_pool_create(&tree, r->pool);
    if (!(value = mcp_jsonrpc_parse_value_ex(tree, buf ? buf : "", n, &rl->bad_json))) {
        apr_pool_destroy(tree);
        return -1;
    }
    if (json_object_is_type(value, json_type_array)) {
        for (i = 0; i < json_object_array_length(value); i++) {
            json_object *elem = json_object_array_get_idx(value, i);
            apr_size_t elen;
            const char *text = mcp_jsonrpc_to_string(r->pool, elem, &elen);

            apr_pool_clear(rl->scratch);
            if (!elem) {
                relay_message(rl, text, elen);   /* a null: dropped, as relay_message says */
                continue;
            }
            relay_parsed(rl, elem, text, elen);
            if (rl->st.rewritten && !sent) {
                sent = apr_array_make(r->pool, (int)json_object_array_length(value),
                                      sizeof(const char *));
                for (apr_size_t k = 0; k < i; k++) {
                    APR_ARRAY_PUSH(sent, const char *) = mcp_jsonrpc_to_string(
                        r->pool, json_object_array_get_idx(value, k), NULL);
                }
            }
            if (sent) {
                APR_ARRAY_PUSH(sent, const char *) = rl->st.rewritten ? rl->st.rewritten : text;
            }
        }
    }
    else {
        apr_pool_clear(rl->scratch);
        relay_parsed(rl, value, buf, n);
        if (rl->st.rewritten) {
            buf = rl->st.rewritten;
            n = rl->st.rewritten_len;
        }
    }
    apr_pool_destroy(tree);
    if (sent) {
        buf = apr_pstrcat(r->pool, "[", apr_array_pstrcat(r->pool, sent, ','), "]", NULL);
        n = strlen(buf);
    }
    *body = buf;
    *len = n;
    return 0;
}

/* What the backend's answer left to do once its transfer ended (status, err): a JSON answer's
 * messages stored, every request left unanswered answered with a stored error, the stream
 * finished. Returns 1 when the backend answered every request; 0 when the gateway did, with
 * *http, *code and *message saying how (for a client that was sent nothing yet); -1 when there
 * was nothing left to do (answered and stored as the answer came, or ended by someone else). */
static int settle_answer(relay_t *rl, mcp_backend_status_t status, const char *err,
                         const char **json, apr_size_t *json_len, int *http, int *code,
                         const char **message)
{
    int answered_by_backend;

    if (rl->x.answered || rl->ended_elsewhere) {
        return -1;
    }
    if (status == MCP_BACKEND_OK && !rl->x.sse && rl->x.response.status == HTTP_OK
        && mcp_http_media_type_is(rl->x.response.content_type, "application/json")) {
        relay_json_body(rl, json, json_len);   /* not JSON: rl->bad_json says why */
    }
    answered_by_backend = rl->outstanding->nelts == 0;
    if (!answered_by_backend) {
        json_object *data;

        *code = failure(rl, status, err ? err : "the answer ended early", http, message, &data);
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, rl->q->r, "stream %" APR_INT64_T_FMT ": %s",
                      rl->st.id, *message);
        if (*code == MCP_JSONRPC_SESSION_NOT_FOUND) {
            mcp_req_terminate_session(rl->q, "backend");
        }
        answer_outstanding(rl, *code, *message, data);
        json_object_put(data);
    }
    mcp_stream_finish(&rl->st, answered_by_backend && !rl->st.broken ? "complete" : "failed");
    return answered_by_backend;
}

/* ---- a request's answer, parked: its POST on the event loop ------------------------------- */

/* The response is SSE from now on: the parked stream writes what the stream stores. */
static void write_through(relay_t *rl)
{
    mcp_stream_detach(&rl->st);
    mcp_park_write_through(rl->pk, &rl->st);
    rl->detached = 1;
}

/* settle_answer for a request's answer on the loop, its outputs kept for the request thread (an
 * older session's answer that is not SSE is the handler's to send). */
static void settle_on_loop(relay_t *rl, mcp_backend_status_t status, const char *err)
{
    if (rl->settled) {
        return;
    }
    rl->settled = 1;
    rl->settled_rc = settle_answer(rl, status, err, &rl->settled_json, &rl->settled_len,
                                   &rl->settled_http, &rl->settled_code, &rl->settled_message);
}

static int request_news(void *baton, const mcp_loop_news_t *news)
{
    relay_t *rl = baton;
    const char *err;
    mcp_backend_status_t status;
    int cut;

    if (!mcp_exchange_feed_news(&rl->x, news, &cut)) {
        return 0;
    }
    err = news->err ? news->err : cut ? "stopped by the gateway" : NULL;
    status = mcp_exchange_end(&rl->x, cut && !rl->x.answered ? MCP_BACKEND_ABORTED
                                                             : news->status, &err);
    flood_error(rl, &err);
    settle_on_loop(rl, status, err);
    watch_stop(rl);
    return 1;
}

static int request_tick(void *baton)
{
    relay_t *rl = baton;

    if (rl->x.answered) {
        /* Every response is in and stored: the rest of the transfer is the backend's own end
         * of the stream, waited for a while so that its connection can be reused. */
        if (apr_time_now() - rl->x.answered > apr_time_from_sec(1)) {
            watch_stop(rl);
            return 1;
        }
        return 0;
    }
    if (ended_elsewhere(rl) || mcp_stream_tick(&rl->st)) {
        settle_on_loop(rl, MCP_BACKEND_ABORTED, "stopped by the gateway");
        watch_stop(rl);
        return 1;
    }
    return 0;
}

static void request_stop(void *baton, const char *why)
{
    relay_t *rl = baton;

    /* This process exits: the stream's lease runs out, and whoever follows it finishes it with
     * an error (as for a process that was killed). */
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, rl->q->r, "stream %" APR_INT64_T_FMT ": relaying "
                  "stops unfinished: %s", rl->st.id, why);
    mcp_stream_disown(&rl->st);
    watch_stop(rl);
}

static int request_half_done(void *baton)
{
    (void)baton;
    return 0;   /* mcp_park_wait returns when the half is done, or at its timeout */
}

static int answer(relay_t *rl, int answered_by_backend, const char *json, apr_size_t json_len,
                  int http, int code, const char *message);

/* The request's answer on the event loop, parked once it takes MCP_PARK_AFTER (a 2025-11-25
 * session's answer is SSE from its start, the priming event out; an older session's is
 * whatever the backend chooses, SSE from the moment it is parked): DECLINED when it cannot be
 * (the caller forwards with its thread), else DONE or SUSPENDED. */
static int requests_parked(relay_t *rl)
{
    mcp_req_t *q = rl->q;
    mcp_backend_call_t call;
    const char *err = NULL;
    apr_interval_time_t wait;
    int done;
    mcp_park_t *pk = mcp_park_create(q, rl->st.id, MCP_STORE_SEQ_PRIMING, 0, 1);

    if (!pk) {
        return DECLINED;
    }
    rl->pk = pk;
    memset(&call, 0, sizeof(call));
    call.method = "POST";
    fill_call(q, &call);
    call.timeout_ms = (long)apr_time_as_msec(q->conf->stream_timeout);
    mcp_exchange_call_defaults(&rl->x, &call);
    rl->half.on_news = request_news;
    rl->half.on_tick = request_tick;
    rl->half.on_stop = request_stop;
    rl->half.baton = rl;
    rl->half.tick = apr_time_from_sec(1);
    rl->half.outlives_client = 1;
    mcp_exchange_begin(&rl->x);
    if (rl->st.mode == MCP_STREAM_SSE) {
        write_through(rl);
    }
    rl->sent = apr_time_now();
    if (mcp_park_backend(pk, &call, &rl->half, &err) != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "stream %" APR_INT64_T_FMT ": not "
                      "parked (%s); relayed with this thread", rl->st.id, err);
        mcp_park_abandon(pk);
        if (rl->detached) {
            rl->st.mode = MCP_STREAM_SSE;
            rl->st.on_stored = NULL;
            rl->detached = 0;
        }
        rl->pk = NULL;
        return DECLINED;
    }
    /* Most answers come within a moment: those are sent by this thread, and the connection
     * stays open for the client's next request. Only an answer that takes longer is parked
     * (its connection then ends with the response: httpd 2.4 cannot take a suspended
     * connection back for keep-alive). */
    /* MCPStreamCloseAfter may end the client's response before that: the parked stream does. */
    wait = MCP_PARK_AFTER;
    if (q->conf->stream_close_after > 0 && q->rev->priming && q->conf->stream_close_after < wait) {
        wait = q->conf->stream_close_after;
    }
    done = mcp_park_wait(pk, request_half_done, wait);
    if (!done && mcp_park_gone(pk)) {
        /* The client went meanwhile: disconnect is not cancellation, and an aborted
         * connection cannot be parked: this thread relays to the end, as it always did. */
        done = mcp_park_wait(pk, request_half_done,
                             q->conf->stream_timeout + apr_time_from_sec(5));
    }
    if (done || mcp_park_gone(pk)) {
        rl->st.client_gone = rl->st.client_gone || mcp_park_gone(pk);
        mcp_park_abandon(pk);
        if (rl->detached || !rl->settled) {
            return DONE;   /* sent as it came (SSE), or the client went */
        }
        return answer(rl, rl->settled_rc, rl->settled_json, rl->settled_len, rl->settled_http,
                      rl->settled_code, rl->settled_message);
    }
    if (rl->st.mode == MCP_STREAM_UNDECIDED) {
        /* An older session's answer: SSE from now on (a JSON answer that comes later is
         * relayed as its events). */
        mcp_stream_start_sse(&rl->st, -1);
        write_through(rl);
    }
    return mcp_park_go(pk, MCP_STORE_SEQ_PRIMING);
}

/* The handler's answer once settle_answer said answered_by_backend (see there). */
static int answer(relay_t *rl, int answered_by_backend, const char *json, apr_size_t json_len,
                  int http, int code, const char *message)
{
    mcp_req_t *q = rl->q;
    request_rec *r = q->r;

    if (rl->ended_elsewhere && rl->st.mode != MCP_STREAM_SSE && !rl->detached) {
        return mcp_req_session_not_found(q);
    }
    if (answered_by_backend < 0 || rl->st.mode == MCP_STREAM_SSE || rl->detached) {
        return DONE;
    }
    if (!answered_by_backend) {
        return mcp_req_error(q, http, code, "%s", message);
    }
    /* A JSON answer to an older client: exactly the body that was stored. */
    r->status = HTTP_OK;
    ap_set_content_type(r, "application/json");
    ap_rwrite(json, (int)json_len, r);
    return DONE;
}

int mcp_relay_requests(mcp_req_t *handler_q)
{
    /* A parked answer outlives the handler's frame, where its request lives. */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    request_rec *r = q->r;
    const char *method, *ids, *err = NULL, *json = NULL, *message = NULL;
    apr_size_t json_len = 0;
    mcp_backend_status_t status;
    apr_int64_t stream_id = 0;
    relay_t *rl = apr_palloc(r->pool, sizeof(*rl));
    int http = 0, code = 0, answered_by_backend, rc;

    relay_init(rl, q, 0, MCP_STORE_SEQ_PRIMING + 1);
    if (!(ids = request_ids(rl, &method))) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: two requests of the batch have the same id");
    }

    /* Record, then dispatch. */
    if ((rc = mcp_req_open_request(q, ids, method, &stream_id)) != OK) {
        return rc;
    }
    rl->st.id = stream_id;
    mcp_req_note_stream(r, stream_id);
    mcp_status_count(MCP_STAT_CALLS, (apr_uint64_t)q->body->n_requests);
    mcp_stream_own(&rl->st);
    if (q->rev->priming) {
        mcp_stream_start_sse(&rl->st, MCP_STORE_SEQ_PRIMING);
    }

    watch_start(rl);
    if (q->member && (err = mcp_federation_member_ready(q))) {
        /* A federated request whose member could not be opened: its stored error. */
        watch_stop(rl);
        answered_by_backend = settle_answer(rl, MCP_BACKEND_UNREACHABLE, err, &json, &json_len,
                                            &http, &code, &message);
        return answer(rl, answered_by_backend, json, json_len, http, code, message);
    }
    /* What the answer is can wait without a thread. */
    if (!rl->st.client_gone && (rc = requests_parked(rl)) != DECLINED) {
        return rc;
    }
    status = forward(rl, "POST", q->conf->stream_timeout, &err);
    watch_stop(rl);
    /* (Ended elsewhere: settle_answer does nothing, and answer says 404.) */
    answered_by_backend = settle_answer(rl, status, err, &json, &json_len, &http, &code,
                                        &message);
    return answer(rl, answered_by_backend, json, json_len, http, code, message);
}

/* ---- GET: the standalone stream ----------------------------------------------------------- */

/* Why a resumed standalone stream could not go on live: logged, and the client's response ends
 * (its SSE headers and the replay are out); it resumes again after its retry interval. */
static int resume_ends(mcp_req_t *q, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "session %s: the resumed standalone stream "
                  "ends: %s", mcp_id_tag(q->r->pool, q->session->id), why);
    return DONE;
}

/* ---- the standalone stream, parked: its backend GET on the event loop ---------------------- */

/* The end of a parked standalone stream (the client side sees it at its next read). */
static void parked_standalone_ends(relay_t *rl, const char *why)
{
    watch_stop(rl);
    mcp_stream_finish(&rl->st, "closed");
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, rl->q->r, "standalone stream %" APR_INT64_T_FMT
                  " (parked) ended: %s", rl->st.id, why);
}

/* The relay's scratch pools (rl->scratch, rl->watch_pool) in parent: a parked stream's hooks
 * make them in the park's scratch pool (mcp_park_scratch) each time they run, so that an idle
 * stream holds none; a relay that goes on with its thread makes them in the request's pool. */
static void relay_pools(relay_t *rl, apr_pool_t *parent)
{
    apr_pool_create(&rl->scratch, parent);
    apr_pool_create(&rl->watch_pool, parent);
}

static int standalone_news(void *baton, const mcp_loop_news_t *news)
{
    relay_t *rl = baton;
    int cut = 0;

    relay_pools(rl, mcp_park_scratch(rl->pk));
    if (news->headers) {
        rl->answered_headers = 1;
        cut = mcp_exchange_feed_headers(&rl->x, &news->response);
        /* The SSE headers (and the priming event) are out: from now on the parked stream
         * writes what this one stores. */
        if (rl->st.mode == MCP_STREAM_SSE) {
            mcp_stream_detach(&rl->st);
            mcp_park_write_through(rl->pk, &rl->st);
            rl->detached = 1;
        }
    }
    if (!cut && news->len) {
        cut = mcp_exchange_feed_body(&rl->x, news->data, news->len);
    }
    if (!cut && !news->done) {
        return 0;
    }
    rl->async_done = 1;
    rl->async_err = news->err;
    rl->async_status = mcp_exchange_end(&rl->x, cut ? MCP_BACKEND_ABORTED : news->status,
                                        &rl->async_err);
    if (rl->detached) {
        parked_standalone_ends(rl, cut ? (rl->flooded ? "the backend flooded it"
                                                      : "storing failed")
                                       : rl->async_status == MCP_BACKEND_OK
                                       ? "the backend ended it" : rl->async_err);
    }
    return 1;
}

static int standalone_tick(void *baton)
{
    relay_t *rl = baton;

    relay_pools(rl, mcp_park_scratch(rl->pk));
    if (ended_elsewhere(rl) || mcp_stream_tick(&rl->st)) {
        parked_standalone_ends(rl, rl->ended_elsewhere ? "its session ended"
                                                       : "its lease was taken over");
        return 1;
    }
    return 0;
}

static void standalone_stop(void *baton, const char *why)
{
    relay_t *rl = baton;

    relay_pools(rl, mcp_park_scratch(rl->pk));
    if (rl->detached) {
        parked_standalone_ends(rl, why);
    }
}

static int standalone_detached(void *baton)
{
    return ((relay_t *)baton)->detached;
}

/* The standalone stream parked from its start. SUSPENDED once parked; DECLINED when it cannot
 * be (the caller relays with its thread); DONE when the backend's answer was no stream
 * (*status, *err, and rl->x as after forward); OK when the stream began and ended here (its
 * client went before it could be parked). */
static int standalone_parked(relay_t *rl, mcp_backend_status_t *status, const char **err)
{
    mcp_req_t *q = rl->q;
    mcp_backend_call_t call;
    mcp_park_t *pk = mcp_park_create(q, rl->st.id, 0, 0, 1);

    if (!pk) {
        return DECLINED;
    }
    rl->pk = pk;
    /* From now on the hooks make the relay's scratch pools (relay_pools). */
    apr_pool_destroy(rl->scratch);
    apr_pool_destroy(rl->watch_pool);
    rl->scratch = rl->watch_pool = NULL;
    memset(&call, 0, sizeof(call));
    call.method = "GET";
    call.session_id = q->session->backend_session_id;
    call.protocol_version = q->session->protocol_version;
    mcp_exchange_call_defaults(&rl->x, &call);
    rl->half.on_news = standalone_news;
    rl->half.on_tick = standalone_tick;
    rl->half.on_stop = standalone_stop;
    rl->half.baton = rl;
    rl->half.lean = 1;   /* a standalone stream mostly waits */
    mcp_exchange_begin(&rl->x);
    rl->sent = apr_time_now();
    if (mcp_park_backend(pk, &call, &rl->half, err) != 0) {
        mcp_park_abandon(pk);
        relay_pools(rl, q->r->pool);
        return DECLINED;
    }
    /* The answer decides what the client is told: a stream is parked once its SSE headers are
     * out (events stored meanwhile are read by the parked stream from seq 0, the priming
     * row); anything else is read to its end here, as forward would. */
    mcp_park_wait(pk, standalone_detached, q->conf->backend_timeout);
    if (rl->detached && !mcp_park_gone(pk)) {
        return mcp_park_go(pk, 0);
    }
    relay_pools(rl, q->r->pool);   /* not parked: this thread goes on */
    if (rl->detached) {
        /* The client went already (an aborted connection cannot be parked). */
        parked_standalone_ends(rl, "the client went away");
        rl->st.client_gone = 1;
        mcp_park_abandon(pk);
        return OK;
    }
    mcp_park_abandon(pk);
    if (!rl->async_done) {
        *status = MCP_BACKEND_TIMEOUT;
        *err = apr_psprintf(q->r->pool, "no complete answer within MCPBackendTimeout (%"
                            APR_TIME_T_FMT " s)", apr_time_sec(q->conf->backend_timeout));
        return DONE;
    }
    *status = rl->async_status;
    *err = rl->async_err;
    return DONE;
}

/* resumed: the client resumed a standalone stream that had ended (a graceful restart or
 * MCPStreamCloseAfter cut its response, or its relay stopped when the client went): its SSE
 * response has begun with the replay, and a new standalone stream goes on from there; failures
 * end the response instead of answering with an error. */
static int relay_standalone(mcp_req_t *handler_q, int resumed)
{
    /* A parked stream outlives the handler's frame, where its request lives. */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    request_rec *r = q->r;
    const char *err = NULL, *lost;
    mcp_backend_status_t status = MCP_BACKEND_FAILED;
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_status_t stored;
    apr_int64_t stream_id = 0;
    int parked;
    relay_t *rl = apr_palloc(r->pool, sizeof(*rl));   /* a parked stream outlives this frame */

    if (resumed) {
        /* Still live? (A DELETE ends the session's streams: a resume must not revive it.) */
        mcp_store_session_t *live = NULL;
        stored = mcp_store_session_touch(mcp_req_db(q), r->pool, q->session->id, r->user,
                                         mcp_req_idle_secs(q), &live);
        if (stored != MCP_STORE_OK) {
            return resume_ends(q, stored == MCP_STORE_NOT_FOUND ? "the session is no longer live"
                                                                : mcp_req_db(q)->error);
        }
    }
    mcp_req_stream_limits(q, &limits);
    stored = mcp_store_stream_open_standalone_admitted(mcp_req_db(q), r->pool, q->session,
                                                       mcp_req_trace_id(r), mcp_child.owner,
                                                       mcp_req_lease_secs(q),
                                                       &limits, &stream_id, &refused);
    if (stored == MCP_STORE_LIMIT) {
        return resumed ? resume_ends(q, "a limit on streams was reached")
                       : mcp_req_refused(q, refused);
    }
    if (stored == MCP_STORE_CONFLICT) {
        return resumed ? resume_ends(q, "the session has another open standalone stream")
            : mcp_req_error(q, HTTP_CONFLICT, MCP_JSONRPC_SERVER_ERROR,
                            "Conflict: this session already has an open standalone stream");
    }
    if (stored != MCP_STORE_OK) {
        return resumed ? resume_ends(q, mcp_req_db(q)->error) : mcp_req_store_failed(q, stored);
    }

    relay_init(rl, q, stream_id, 1);
    mcp_req_note_stream(r, stream_id);
    mcp_stream_own(&rl->st);
    rl->standalone = 1;
    q->raw = NULL;
    q->raw_len = 0;
    watch_start(rl);
    parked = standalone_parked(rl, &status, &err);
    if (parked == SUSPENDED || parked == OK) {
        return parked == OK ? DONE : SUSPENDED;
    }
    if (parked == DECLINED) {
        status = forward(rl, "GET", 0, &err);
    }
    watch_stop(rl);
    mcp_stream_finish(&rl->st, "closed");
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "standalone stream %" APR_INT64_T_FMT " ended: %s", stream_id,
                  rl->st.client_gone ? "the client went away"
                  : rl->ended_elsewhere ? "its session ended"
                  : status == MCP_BACKEND_OK ? "the backend ended it" : err);
    if (rl->st.mode == MCP_STREAM_SSE) {
        return DONE;
    }
    if (resumed) {
        return resume_ends(q, apr_psprintf(r->pool, "the backend's stream could not be opened "
                                           "(HTTP %ld): %s", rl->x.response.status,
                                           err ? err : "no stream"));
    }
    if ((lost = mcp_stdio_lost(r->pool, q->conf->backend, q->session->backend_session_id,
                               status, err))) {
        mcp_req_terminate_session(q, "backend");
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_SESSION_NOT_FOUND, "%s", lost);
    }
    if (status != MCP_BACKEND_OK) {
        return mcp_req_error(q, status == MCP_BACKEND_TIMEOUT ? HTTP_GATEWAY_TIME_OUT
                             : HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: the backend's stream could not be opened: %s", err);
    }
    if (rl->x.response.status == HTTP_METHOD_NOT_ALLOWED) {
        apr_table_setn(r->headers_out, "Allow", "POST, DELETE");
        return mcp_req_error(q, HTTP_METHOD_NOT_ALLOWED, MCP_JSONRPC_SERVER_ERROR,
                             "Method Not Allowed: the backend offers no standalone stream (GET); "
                             "resuming a stream with Last-Event-ID works all the same");
    }
    if (backend_lost_session(rl)) {
        mcp_req_terminate_session(q, "backend");
        return mcp_req_session_not_found(q);
    }
    if (rl->x.response.status == HTTP_CONFLICT) {
        /* The backend still holds the session's previous GET stream (it has not noticed yet
         * that it ended). */
        return mcp_req_error(q, HTTP_CONFLICT, MCP_JSONRPC_SERVER_ERROR,
                             "Conflict: the backend still has a standalone stream open for this "
                             "session; try again shortly");
    }
    return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                         "Bad Gateway: the backend answered the stream request with HTTP %ld",
                         rl->x.response.status);
}

int mcp_relay_standalone(mcp_req_t *q)
{
    return relay_standalone(q, 0);
}

int mcp_relay_standalone_resumed(mcp_req_t *q)
{
    return relay_standalone(q, 1);
}
