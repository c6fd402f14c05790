/* mod_mcp_bridge_round — the era bridge's input-required rounds (see mod_mcp_bridge.h): a
 * round is stored and answered with an InputRequiredResult; its retry, on any process or host,
 * is claimed once, answered upstream and followed on the stored backend stream. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_federation.h"
#include "mcp_id.h"
#include "mod_mcp_bridge_private.h"

APLOG_USE_MODULE(mcp);

/* Rows a follower reads at once, and how often it looks without a LISTEN connection. */
#define FOLLOW_BATCH 64
#define POLL_WITHOUT_LISTENER apr_time_from_msec(250)

static const char *new_state(apr_pool_t *p)
{
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];

    if (apr_generate_random_bytes(random, sizeof(random)) != APR_SUCCESS) {
        return NULL;
    }
    return mcp_id_session_encode(p, random, sizeof(random));
}

/* A round: stored, then the client's response ends with the InputRequiredResult. */
int mcp_bridged_round_start(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_stream,
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
        const char *name = mcp_bridge_input_key(r->pool, req, i + 1);
        if (json_object_object_get_ex(pending, name, NULL)) {
            name = mcp_bridge_input_name(r->pool, i + 1);   /* "7" beside 7: keys stay unique */
        }
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
        return mcp_bridged_fail(b, HTTP_INTERNAL_SERVER_ERROR, "the gateway could not store an "
                             "input-required round");
    }
    ir = mcp_bridge_input_required(r->pool, b->msg->id, names, requests, state, b->server_info);
    mcp_stream_add(&b->st, ir, strlen(ir));
    mcp_stream_finish(&b->st, "complete");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": "
                  "input required (%d request(s) of the backend, round at %" APR_INT64_T_FMT
                  "-%" APR_INT64_T_FMT ")", b->st.id, requests->nelts, backend_stream, position);
    if (b->st.mode == MCP_STREAM_SSE) {
        /* A relay that goes on with this thread ends the client's response now; one on the
         * event loop lets the request end (b->d), and the connection serves on. */
        if (!b->d) {
            mcp_stream_end_early(&b->st);
        }
        return DONE;
    }
    return mcp_bridged_json(b, HTTP_OK, ir);
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
    case MCP_BRIDGE_PING:   /* answered by the relay that read it from the backend */
        break;
    case MCP_BRIDGE_NOTIFICATION:
        mcp_stream_add(&b->st, message, strlen(message));
        break;
    case MCP_BRIDGE_INPUT_REQUEST:   /* kept for the round: in the request's pool */
        APR_ARRAY_PUSH(f->requests, json_object *) =
            mcp_jsonrpc_parse_value(b->q->r->pool, message, strlen(message));
        f->position = seq;
        break;
    case MCP_BRIDGE_FINAL: {
        const char *out;

        if (b->q->member) {   /* a federated endpoint's member: in the client's names */
            mcp_fed_outbound(b->q->r->pool, b->q->member->fed, obj, b->msg->method);
        }
        out = mcp_bridge_response_out(f->pool, obj, b->msg->id, b->msg->method,
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
            const char *cap = NULL;
            int i;

            for (i = 0; i < f.requests->nelts && !cap; i++) {
                cap = mcp_bridge_missing_capability(b->msg->obj,
                                                    APR_ARRAY_IDX(f.requests, i, json_object *));
            }
            if (cap) {
                mcp_bridged_refuse(b, s, cap);
            }
            else {
                mcp_bridged_round_start(b, s, stream_id, f.position, f.requests);
            }
            break;
        }
        if (ended) {
            return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, "Bad Gateway: the backend's stream ended "
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
            mcp_bridged_cancel(b, s, b->backend_id, "the client closed its response (2026-07-28: "
                            "cancellation)");
            /* The relay reading the backend's answer (parked, on any process) lets go of it. */
            mcp_store_bridge_cancel(db, pool, stream_id);
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

int mcp_bridged_round_retry(bridge_t *b, const char *state)
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
    if (round.position == MCP_BRIDGE_ROUND_URL) {
        /* The URL flows complete out of band; the answers say the client is done with them. */
        if ((bad = mcp_bridge_input_responses(r->pool, b->msg->obj, round.pending, &answers))) {
            mcp_stream_finish(&b->st, "failed");
            return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid "
                                 "params: %s (the round is used up)", bad);
        }
        return mcp_bridged_relay(b);
    }
    b->backend_id = round.backend_request_id;
    s = apr_pcalloc(r->pool, sizeof(*s));
    s->id = round.session_id;
    s->backend_session_id = round.backend_session_id;
    s->protocol_version = round.protocol_version;
    s->principal = r->user;
    s->backend_url = q->conf->backend_spec;
    s->trace_id = mcp_req_trace_id(q->r);
    mcp_store_bridge_link(mcp_req_db(q), r->pool, b->st.id, round.stream_id);
    mcp_bridged_server_info(b, round.server_info);
    if ((bad = mcp_bridge_input_responses(r->pool, b->msg->obj, round.pending, &answers))) {
        mcp_bridged_cancel(b, s, b->backend_id, "the client's retry was refused");
        mcp_stream_finish(&b->st, "failed");
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: %s "
                             "(the round is used up; the backend call was cancelled)", bad);
    }
    for (i = 0; i < answers->nelts; i++) {
        const char *answer = APR_ARRAY_IDX(answers, i, const char *);
        mcp_store_events_append(mcp_req_db(q), r->pool, s, 0, 0, "in",
                                apr_pstrcat(r->pool, "[", answer, "]", NULL));
        if (mcp_exchange_collect(q, s->backend_session_id, s->protocol_version, answer, &x,
                                 &ignored, &err) != MCP_BACKEND_OK
            || x.response.status >= 300) {
            return mcp_bridged_fail(b, HTTP_BAD_GATEWAY, apr_psprintf(r->pool, "Bad Gateway: the "
                                 "backend did not take the answer to its request: %s",
                                 err ? err : apr_psprintf(r->pool, "HTTP %ld",
                                                          x.response.status)));
        }
    }
    return follow(b, s, round.stream_id, round.position);
}

