/* mod_mcp_handler — see mod_mcp_handler.h.
 *
 * Validation happens in the order the README documents; every rejection goes through
 * mcp_req_error. POSTs carrying requests and standalone GETs go on to mod_mcp_relay, resumptions
 * to mod_mcp_replay; initialize, notifications/responses and DELETE are short exchanges done here.
 */
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_core.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>

#include "mcp_backend.h"
#include "mcp_era.h"
#include "mcp_http.h"
#include "mcp_id.h"
#include "mcp_jsonrpc.h"
#include "mcp_origin.h"
#include "mcp_protocol.h"
#include "mcp_sse.h"
#include "mcp_store.h"
#include "mcp_text.h"
#include "mod_mcp_body.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_eras.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_oauth.h"
#include "mod_mcp_federation.h"
#include "mod_mcp_handler.h"
#include "mod_mcp_modern.h"
#include "mod_mcp_relay.h"
#include "mod_mcp_replay.h"
#include "mod_mcp_request.h"
#include "mod_mcp_shim.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stdio.h"

APLOG_USE_MODULE(mcp);

#define MCP_ALLOW "GET, POST, DELETE"

/* ---- validation -------------------------------------------------------------------------- */

static int check_post_headers(mcp_req_t *q)
{
    request_rec *r = q->r;
    const char *accept = apr_table_get(r->headers_in, "Accept");
    const char *ctype = apr_table_get(r->headers_in, "Content-Type");

    if (!mcp_http_accepts(accept, "application/json")
        || !mcp_http_accepts(accept, "text/event-stream")) {
        return mcp_req_error(q, HTTP_NOT_ACCEPTABLE, MCP_JSONRPC_SERVER_ERROR,
                           "Not Acceptable: the client must accept both application/json and "
                           "text/event-stream (Accept: %s)", accept ? accept : "absent");
    }
    if (!mcp_http_media_type_is(ctype, "application/json")) {
        return mcp_req_error(q, HTTP_UNSUPPORTED_MEDIA_TYPE, MCP_JSONRPC_SERVER_ERROR,
                           "Unsupported Media Type: Content-Type must be application/json "
                           "(got %s)", ctype ? ctype : "none");
    }
    return OK;
}

static int reply_too_large(mcp_req_t *q)
{
    return mcp_req_error(q, HTTP_REQUEST_ENTITY_TOO_LARGE, MCP_JSONRPC_INVALID_REQUEST,
                       "Payload Too Large: the message exceeds MCPMaxMessageSize (%" APR_OFF_T_FMT
                       " bytes)", q->conf->max_message_size);
}

/* The body (read here, or already by per-name authorization), refusing more than
 * MCPMaxMessageSize before buffering it. */
static int read_body(mcp_req_t *q)
{
    const mcp_body_t *body = mcp_body_read(q->r, q->conf->max_message_size);

    switch (body->status) {
    case MCP_BODY_OK:
        q->raw = body->raw;
        q->raw_len = body->len;
        return OK;
    case MCP_BODY_TOO_LARGE:
        return reply_too_large(q);
    case MCP_BODY_UNREADABLE:
        return mcp_req_error(q, ap_map_http_request_error(body->rv, HTTP_BAD_REQUEST),
                             MCP_JSONRPC_SERVER_ERROR, "Bad Request: the body could not be read");
    default:
        return mcp_req_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                             "Internal Error: out of memory");
    }
}

static int parse_body(mcp_req_t *q)
{
    const char *reason;
    mcp_jsonrpc_status_t st = mcp_jsonrpc_parse_limited(q->r->pool, q->raw, q->raw_len,
                                                        q->conf->max_batch_size, &q->body,
                                                        &reason);

    if (st == MCP_JSONRPC_ERR_PARSE) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_PARSE_ERROR, "Parse error: %s", reason);
    }
    if (st == MCP_JSONRPC_ERR_TOO_LONG) {
        /* Refused before any of its messages is looked at: refusing costs the parse only. Not
         * a 429: the same batch would never pass. */
        return mcp_req_error(q, HTTP_REQUEST_ENTITY_TOO_LARGE, MCP_JSONRPC_INVALID_REQUEST,
                             "Payload Too Large: the batch holds %d messages, more than "
                             "MCPMaxBatchSize (%d)", q->body->count, q->conf->max_batch_size);
    }
    if (q->body && !q->body->is_batch) {
        /* For the answers the gateway writes (errors, a federation's, the shim's): the id as
         * sent, where json-c cannot write it back (a lone surrogate). */
        q->id = mcp_jsonrpc_id_as_sent(q->r->pool, mcp_jsonrpc_reply_id(&q->body->msgs[0]),
                                       q->raw, q->raw_len);
    }
    if (st == MCP_JSONRPC_OK) {
        mcp_req_note_body(q);
    }
    if (st == MCP_JSONRPC_ERR_INVALID) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST, "Invalid Request: %s",
                           reason);
    }
    return OK;
}

/* An MCP-Protocol-Version header, when present, must name a revision the gateway serves with
 * sessions (400, -32022 with the supported list otherwise). initialize decides the version
 * itself (a 2026-07-28 header there is counter-offered like the body's version). */
static int check_version_header(mcp_req_t *q, int initialize)
{
    const char *v = apr_table_get(q->r->headers_in, "MCP-Protocol-Version");

    mcp_req_note_protocol(q->r, v);
    if (v && !mcp_protocol_session(v) && !(initialize && mcp_protocol_is_modern(v))) {
        return mcp_req_unsupported_version(q, v, mcp_protocol_served_list());
    }
    return OK;
}

/* initialize asking for a revision of the stateless era: the backend is asked for the newest
 * session revision instead (the counter-offer the client then gets). */
static void counter_offer(mcp_req_t *q, json_object *request)
{
    json_object *params = NULL, *v = NULL;

    if (!json_object_object_get_ex(request, "params", &params)
        || !json_object_object_get_ex(params, "protocolVersion", &v)
        || !json_object_is_type(v, json_type_string)
        || !mcp_protocol_is_modern(json_object_get_string(v))) {
        return;
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, q->r, "initialize asked for %s: counter-offering "
                  "%s (the stateless revision has no initialize)", json_object_get_string(v),
                  mcp_protocol_latest());
    json_object_object_add(params, "protocolVersion",
                           json_object_new_string(mcp_protocol_latest()));
    q->raw = mcp_jsonrpc_to_string(q->r->pool, request, &q->raw_len);
}

/* Stores messages that belong to no stream (the audit of notifications and responses). */
static int store_inbound(mcp_req_t *q, const char *messages)
{
    mcp_store_status_t st = mcp_store_events_append(mcp_req_db(q), q->r->pool, q->session, 0, 0,
                                                    "in", messages);

    return st == MCP_STORE_OK ? OK : mcp_req_store_failed(q, st);
}

/* ---- short exchanges with the backend (no stream) ---------------------------------------- */

/* One request/answer with the backend (mod_mcp_exchange), the answer held: a JSON body, or an
 * SSE answer's messages, bounded by MCPMaxMessageSize as a whole. */
typedef struct exchange_t {
    mcp_exchange_t      x;
    apr_array_header_t *messages;   /* const char *: an SSE answer's messages */
    apr_off_t           held;       /* their bytes */
} exchange_t;

static int hold_message(void *baton, const char *json, apr_size_t len)
{
    exchange_t *e = baton;
    mcp_req_t *q = e->x.q;

    e->held += (apr_off_t)len;
    if (e->held > q->conf->max_message_size) {
        e->x.too_large = 1;
        return 1;
    }
    APR_ARRAY_PUSH(e->messages, const char *) = apr_pstrmemdup(q->r->pool, json, len);
    return 0;
}

static mcp_backend_status_t exchange(mcp_req_t *q, exchange_t *e, const char *backend_session_id,
                                     const char **err)
{
    mcp_backend_call_t call;
    mcp_backend_status_t st;
    apr_time_t sent = apr_time_now();

    mcp_exchange_init(&e->x, q, e);
    e->x.on_message = hold_message;
    e->messages = apr_array_make(q->r->pool, 4, sizeof(const char *));
    e->held = 0;
    memset(&call, 0, sizeof(call));
    call.method = "POST";
    call.body = q->raw;
    call.body_len = q->raw_len;
    call.session_id = backend_session_id;
    call.protocol_version = q->session ? q->session->protocol_version : NULL;
    call.timeout_ms = (long)apr_time_as_msec(q->conf->backend_timeout);
    st = mcp_exchange_perform(&e->x, &call, err);
    mcp_status_observe(MCP_HIST_BACKEND, sent);
    return st;
}

/* The answer for a backend that failed before the client was sent anything. */
static int reply_backend_failure(mcp_req_t *q, mcp_backend_status_t st, const char *err)
{
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "backend %s failed: %s", q->conf->backend->url,
                  err);
    if (st == MCP_BACKEND_TIMEOUT) {
        return mcp_req_error(q, HTTP_GATEWAY_TIME_OUT, MCP_JSONRPC_BACKEND_ERROR,
                             "Gateway Timeout: the backend did not answer in time: %s", err);
    }
    if (st == MCP_BACKEND_UNREACHABLE) {
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: the backend is unreachable: %s", err);
    }
    return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                         "Bad Gateway: the exchange with the backend failed: %s", err);
}

/* ---- initialize: a new session ----------------------------------------------------------- */

/* The backend's messages in a held answer, JSON or SSE. */
static apr_array_header_t *answer_messages(exchange_t *e, int *is_sse)
{
    apr_size_t len;
    const char *body;

    *is_sse = e->x.sse != NULL;
    if (!*is_sse) {
        body = mcp_exchange_body(&e->x, &len);
        APR_ARRAY_PUSH(e->messages, const char *) = body ? body : "";
    }
    return e->messages;
}

static const char *member_json(request_rec *r, json_object *obj, const char *key)
{
    json_object *v;

    return json_object_object_get_ex(obj, key, &v) ? mcp_jsonrpc_to_string(r->pool, v, NULL) : NULL;
}

/* Ends a backend session that the gateway will not use (best effort: it is only logged). */
static void abandon_backend_session(mcp_req_t *q, const char *backend_session_id)
{
    mcp_req_end_backend_session(q, backend_session_id, "initialize failed");
}

/* Answers with the backend's buffered messages, in the form the backend chose. */
static int reply_messages(mcp_req_t *q, exchange_t *e, apr_array_header_t *messages, int is_sse,
                          const char *session_id)
{
    request_rec *r = q->r;
    apr_bucket_brigade *bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    apr_size_t len;
    int i;

    if (session_id) {
        apr_table_setn(r->headers_out, "Mcp-Session-Id", session_id);
    }
    if (!is_sse) {
        const char *body = mcp_exchange_body(&e->x, &len);
        r->status = HTTP_OK;
        ap_set_content_type(r, "application/json");
        if (body) {
            ap_rwrite(body, (int)len, r);
        }
        return DONE;
    }
    mcp_req_set_sse_headers(r);
    for (i = 0; i < messages->nelts; i++) {
        const char *text = mcp_sse_event_format(r->pool, NULL, NULL,
                                                APR_ARRAY_IDX(messages, i, const char *), -1, &len);
        apr_brigade_write(bb, NULL, NULL, text, len);
    }
    ap_pass_brigade(r->output_filters, bb);
    return DONE;
}

/* A 429 before the backend is bothered, when MCPMaxSessions live sessions exist already, or
 * MCPMaxSessionsPerPrincipal of this user's (address's). The insert decides atomically. */
static int check_session_limit(mcp_req_t *q)
{
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_status_t st;

    if (q->conf->max_sessions <= 0 && q->conf->max_principal_sessions <= 0) {
        return OK;
    }
    st = mcp_store_session_admissible(mcp_req_db(q), q->r->pool, mcp_req_holder(q),
                                      q->conf->max_sessions, q->conf->max_principal_sessions,
                                      mcp_req_idle_secs(q), &refused);
    if (st == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    if (st != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    return OK;
}

/* The message of the JSON-RPC error a backend answered with (a JSON body), quoted, or NULL. */
static const char *backend_error_message(mcp_req_t *q, exchange_t *e)
{
    request_rec *r = q->r;
    const char *body, *why = NULL;
    json_object *obj, *error;
    apr_size_t len;

    if (!e->x.sse && (body = mcp_exchange_body(&e->x, &len))
        && (obj = mcp_jsonrpc_parse_value(r->pool, body, len))
        && json_object_object_get_ex(obj, "error", &error)) {
        why = mcp_jsonrpc_get_string(error, "message");
    }
    return why ? mcp_text_quote(r->pool, why, strlen(why), 512) : NULL;
}

/* A backend's 429 to initialize (a stdio supervisor's process limits, a backend's own rate
 * limit) is the client's too, with the backend's Retry-After and its words. */
static int backend_refused_session(mcp_req_t *q, exchange_t *e)
{
    request_rec *r = q->r;
    const char *retry = apr_table_get(e->x.response.headers, "Retry-After");
    const char *why = backend_error_message(q, e);

    if (retry && *retry && strspn(retry, "0123456789") == strlen(retry) && strlen(retry) < 10) {
        apr_table_setn(r->headers_out, "Retry-After", apr_pstrdup(r->pool, retry));
    }
    else {
        apr_table_setn(r->headers_out, "Retry-After",
                       apr_psprintf(r->pool, "%d", mcp_req_retry_secs(q)));
    }
    return mcp_req_error(q, HTTP_TOO_MANY_REQUESTS, MCP_JSONRPC_LIMIT_REACHED,
                         "Too Many Requests: the backend refused a new session%s%s",
                         why ? ": " : " (HTTP 429)", why ? why : "");
}

static int handle_initialize(mcp_req_t *q)
{
    request_rec *r = q->r;
    json_object *request = q->body->msgs[0].obj, *response, *result, *params = NULL;
    const char *err = NULL, *request_text, *response_text = NULL, *version;
    const mcp_protocol_t *rev;
    mcp_store_session_t session;
    apr_array_header_t *messages;
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_status_t stored;
    mcp_backend_status_t st;
    exchange_t e;
    int is_sse = 0, rc;

    if (q->session_header) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: initialize starts a new session and must be sent "
                             "without Mcp-Session-Id");
    }
    if ((rc = check_session_limit(q)) != OK) {
        return rc;
    }
    if (apr_generate_random_bytes(random, sizeof(random)) != APR_SUCCESS) {
        return mcp_req_error(q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                             "Internal Error: no secure random bytes for a session id");
    }
    memset(&session, 0, sizeof(session));
    session.id = mcp_id_session_encode(r->pool, random, sizeof(random));
    /* A stdio server's supervisor tags its log lines with it (MCP-Gateway-Session-Tag). */
    apr_table_setn(r->notes, MCP_STDIO_SESSION_TAG_NOTE, mcp_id_tag(r->pool, session.id));
    request_text = apr_pstrmemdup(r->pool, q->raw, q->raw_len);
    counter_offer(q, request);
    if (q->conf->members) {
        return mcp_federation_initialize(q, &session, request_text);
    }
    st = exchange(q, &e, NULL, &err);
    if (st != MCP_BACKEND_OK) {
        return reply_backend_failure(q, st, err);
    }
    if (e.x.response.status == HTTP_TOO_MANY_REQUESTS) {
        return backend_refused_session(q, &e);
    }
    if (e.x.response.status != HTTP_OK) {
        /* The backend's own words when it gave some (a stdio server's supervisor says why the
         * process did not start); its 504 is a timeout behind the gateway: 504 here too. */
        const char *why = backend_error_message(q, &e);
        int timeout = e.x.response.status == HTTP_GATEWAY_TIME_OUT;

        return mcp_req_error(q, timeout ? HTTP_GATEWAY_TIME_OUT : HTTP_BAD_GATEWAY,
                             MCP_JSONRPC_BACKEND_ERROR, "%s: the backend answered initialize "
                             "with HTTP %ld%s%s", timeout ? "Gateway Timeout" : "Bad Gateway",
                             e.x.response.status, why ? ": " : "", why ? why : "");
    }
    if (e.x.response.session_id && !mcp_http_session_id_is_valid(e.x.response.session_id)) {
        /* It would be stored and sent back on every request: refused (and not DELETEd: the
         * same bytes would go out). */
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: the backend's Mcp-Session-Id is not 1 to 256 visible "
                             "ASCII characters: '%s'",
                             mcp_text_quote(r->pool, e.x.response.session_id,
                                            strlen(e.x.response.session_id), 128));
    }
    messages = answer_messages(&e, &is_sse);
    response = mcp_exchange_response_to(r->pool, messages, q->id, &response_text);
    if (!response) {
        abandon_backend_session(q, e.x.response.session_id);
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: the backend's answer to initialize holds no response "
                             "to it");
    }
    if (!json_object_object_get_ex(response, "result", &result)) {
        /* The backend refused (e.g. an unsupported version): the client gets its words. */
        abandon_backend_session(q, e.x.response.session_id);
        return reply_messages(q, &e, messages, is_sse, NULL);
    }
    version = mcp_jsonrpc_get_string(result, "protocolVersion");
    if (!(rev = mcp_protocol_session(version))) {
        abandon_backend_session(q, e.x.response.session_id);
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: the backend negotiated protocol version '%s', which "
                             "the gateway does not serve (it serves %s)",
                             version ? version : "none", mcp_protocol_served_list());
    }

    session.backend_url = q->conf->backend_spec;
    session.trace_id = mcp_req_trace_id(r);
    session.backend_session_id = e.x.response.session_id;
    session.protocol_version = rev->version;
    session.principal = r->user;
    json_object_object_get_ex(request, "params", &params);
    session.client_info = params ? member_json(r, params, "clientInfo") : NULL;
    session.client_capabilities = params ? member_json(r, params, "capabilities") : NULL;
    session.server_info = member_json(r, result, "serverInfo");

    stored = mcp_store_session_insert_admitted(mcp_req_db(q), r->pool, &session,
                                               mcp_req_holder(q), request_text, response_text,
                                               q->conf->max_sessions,
                                               q->conf->max_principal_sessions,
                                               mcp_req_idle_secs(q), &refused);
    if (stored != MCP_STORE_OK) {
        abandon_backend_session(q, e.x.response.session_id);
        if (stored == MCP_STORE_LIMIT) {
            return mcp_req_refused(q, refused);
        }
        return mcp_req_store_failed(q, stored);
    }
    mcp_req_set_session_tag(r, session.id);
    mcp_req_note_protocol(r, rev->version);
    mcp_status_count(MCP_STAT_SESSIONS, 1);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                  "session %s started (protocol %s, user %s, backend session %s)",
                  mcp_id_tag(r->pool, session.id), rev->version, r->user ? r->user : "-",
                  mcp_id_tag(r->pool, session.backend_session_id));
    return reply_messages(q, &e, messages, is_sse, session.id);
}

/* ---- POST, GET, DELETE ------------------------------------------------------------------- */

/* Notifications and responses only: stored, forwarded, 202 once the backend took them. */
static int handle_notifications(mcp_req_t *q)
{
    const char *err = NULL, *messages, *lost;
    mcp_backend_status_t st;
    exchange_t e;
    int rc;

    messages = q->body->is_batch ? apr_pstrmemdup(q->r->pool, q->raw, q->raw_len)
        : apr_pstrcat(q->r->pool, "[", apr_pstrmemdup(q->r->pool, q->raw, q->raw_len), "]", NULL);
    if ((rc = store_inbound(q, messages)) != OK) {
        return rc;
    }
    st = exchange(q, &e, q->session->backend_session_id, &err);
    if ((lost = mcp_stdio_lost(q->r->pool, q->conf->backend, q->session->backend_session_id, st,
                               err))) {
        /* The session's process went with its supervisor: the client starts anew. */
        mcp_req_terminate_session(q, "backend");
        return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_SESSION_NOT_FOUND, "%s", lost);
    }
    if (st != MCP_BACKEND_OK) {
        return reply_backend_failure(q, st, err);
    }
    if (e.x.response.status == HTTP_ACCEPTED || e.x.response.status == HTTP_OK
        || e.x.response.status == HTTP_NO_CONTENT) {
        return mcp_req_empty(q, HTTP_ACCEPTED);
    }
    if (e.x.response.status == HTTP_NOT_FOUND) {
        apr_size_t len;
        const char *body = mcp_exchange_body(&e.x, &len);

        /* An MCP server's answer for a session it lost is a JSON-RPC error; a proxy's page
         * (a wrong MCPBackend path) is not, and ends nothing. */
        if (body && mcp_jsonrpc_is_error_message(q->r->pool, body, len)) {
            mcp_req_terminate_session(q, "backend");
            return mcp_req_session_not_found(q);
        }
        return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                             "Bad Gateway: the backend answered HTTP 404 with a body that is not "
                             "a JSON-RPC error: check MCPBackend's URL; the session stays open");
    }
    return mcp_req_error(q, e.x.response.status >= 400 && e.x.response.status < 500
                         ? (int)e.x.response.status : HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR,
                         "the backend refused the message(s) with HTTP %ld", e.x.response.status);
}

static int handle_post(mcp_req_t *q)
{
    const char *version;
    mcp_era_route_t route;
    int rc;

    if ((rc = check_post_headers(q)) != OK || (rc = read_body(q)) != OK
        || (rc = parse_body(q)) != OK) {
        return rc;
    }
    version = apr_table_get(q->r->headers_in, "MCP-Protocol-Version");
    route = mcp_era_route(1, version, q->body);
    if (route == MCP_ROUTE_MODERN) {
        return mcp_modern_post(q);
    }
    if (route == MCP_ROUTE_NO_CLAIM) {
        return mcp_modern_no_claim(q);
    }
    if ((rc = check_version_header(q, mcp_jsonrpc_find_method(q->body, "initialize") >= 0))
        != OK) {
        return rc;
    }
    q->session_header = apr_table_get(q->r->headers_in, "Mcp-Session-Id");
    if (mcp_jsonrpc_find_method(q->body, "initialize") >= 0) {
        if (q->body->is_batch) {
            return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                                 "Invalid Request: initialize must not be part of a batch");
        }
        return !q->conf->members && mcp_eras_shimmed(q) ? mcp_shim_initialize(q)
                                                        : handle_initialize(q);
    }
    if (q->conf->members) {
        return mcp_federation_post(q);   /* several members behind this endpoint */
    }
    if (mcp_eras_shimmed(q)) {
        return mcp_shim_post(q);   /* a 2026-only backend: the era shim */
    }
    /* A single request: the session is checked, touched and its stream opened in one statement
     * (mod_mcp_relay). */
    if (!q->body->is_batch && q->body->n_requests > 0) {
        return mcp_relay_requests(q);
    }
    if ((rc = mcp_req_load_session_posted(q)) != OK) {
        return rc;
    }
    return q->body->n_requests > 0 ? mcp_relay_requests(q) : handle_notifications(q);
}

static int handle_get(mcp_req_t *q)
{
    const char *accept = apr_table_get(q->r->headers_in, "Accept");
    const char *last_event_id = apr_table_get(q->r->headers_in, "Last-Event-ID");
    int rc;

    if (!mcp_http_accepts(accept, "text/event-stream")) {
        return mcp_req_error(q, HTTP_NOT_ACCEPTABLE, MCP_JSONRPC_SERVER_ERROR,
                             "Not Acceptable: a GET must accept text/event-stream (Accept: %s)",
                             accept ? accept : "absent");
    }
    if ((rc = check_version_header(q, 0)) != OK || (rc = mcp_req_load_session(q)) != OK) {
        return rc;
    }
    if (last_event_id) {
        return mcp_replay(q, last_event_id);
    }
    if (q->conf->members) {
        return mcp_federation_listen(q, 0);
    }
    return mcp_eras_shimmed(q) ? mcp_shim_listen(q) : mcp_relay_standalone(q);
}

static int handle_delete(mcp_req_t *q)
{
    mcp_store_status_t st;
    long ended = 0;
    int rc;

    if ((rc = check_version_header(q, 0)) != OK || (rc = mcp_req_load_session(q)) != OK) {
        return rc;
    }
    /* Ours first, so no process accepts the session once the backend's is gone. */
    st = mcp_store_session_terminate(mcp_req_db(q), q->r->pool, q->session->id, q->r->user,
                                     "client");
    if (st == MCP_STORE_NOT_FOUND) {
        return mcp_req_session_not_found(q);
    }
    if (st != MCP_STORE_OK) {
        return mcp_req_store_failed(q, st);
    }
    /* Its open streams end now: their relays stop (they hear of it through NOTIFY) and
     * release their backend transfers; unanswered requests get a stored error. */
    st = mcp_store_session_streams_end(mcp_req_db(q), q->r->pool, q->session->id,
                                       "Session terminated: the client ended the session "
                                       "(DELETE) before the response", &ended);
    if (st != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "ending the streams of session %s failed "
                      "(their relays stop when their leases run out): %s",
                      mcp_id_tag(q->r->pool, q->session->id), mcp_req_db(q)->error);
    }
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "session %s terminated by the client (%ld open "
                  "stream(s) ended)", mcp_id_tag(q->r->pool, q->session->id), ended);
    if (q->conf->members) {
        mcp_federation_end(q, "client");
    }
    else {
        mcp_req_end_backend_session(q, q->session->backend_session_id, "client");
    }
    return mcp_req_empty(q, HTTP_OK);
}

/* ---- Origin and Host (DNS-rebinding protection) ------------------------------------------ */

/* The names this request may carry in Host: the server's names and aliases, the address it was
 * reached at, loopback, and MCPAllowedHosts. */
static apr_array_header_t *host_names(mcp_req_t *q)
{
    request_rec *r = q->r;
    apr_array_header_t *names = apr_array_make(r->pool, 8, sizeof(const char *));
    apr_array_header_t *lists[2];
    int i, j;

    APR_ARRAY_PUSH(names, const char *) = "localhost";
    if (r->server->server_hostname) {
        APR_ARRAY_PUSH(names, const char *) = r->server->server_hostname;
    }
    if (r->connection->local_ip) {
        APR_ARRAY_PUSH(names, const char *) = r->connection->local_ip;
    }
    lists[0] = r->server->names;
    lists[1] = r->server->wild_names;
    for (i = 0; i < 2; i++) {
        for (j = 0; lists[i] && j < lists[i]->nelts; j++) {
            APR_ARRAY_PUSH(names, const char *) = APR_ARRAY_IDX(lists[i], j, const char *);
        }
    }
    if (q->conf->allowed_hosts) {
        apr_array_cat(names, q->conf->allowed_hosts);
    }
    return names;
}

static int check_origin_and_host(mcp_req_t *q)
{
    request_rec *r = q->r;
    const char *origin = apr_table_get(r->headers_in, "Origin");
    const char *host = apr_table_get(r->headers_in, "Host");
    const char *request_host = host ? mcp_origin_host_of(r->pool, host) : NULL;

    if (origin && !mcp_origin_allowed(r->pool, origin, request_host, q->conf->allowed_origins)) {
        return mcp_req_error(q, HTTP_FORBIDDEN, MCP_JSONRPC_SERVER_ERROR,
                             "Forbidden: Origin '%s' is not allowed (MCPAllowedOrigins)", origin);
    }
    if (host && !mcp_origin_host_allowed(r->pool, host, host_names(q))) {
        return mcp_req_error(q, HTTP_FORBIDDEN, MCP_JSONRPC_SERVER_ERROR,
                             "Forbidden: Host '%s' is not one of this server's names "
                             "(MCPAllowedHosts)", host);
    }
    return OK;
}

int mcp_handler(request_rec *r)
{
    mcp_req_t q;
    int rc;

    if (!r->handler || strcmp(r->handler, "mcp") != 0) {
        return DECLINED;
    }
    memset(&q, 0, sizeof(q));
    q.r = r;
    q.conf = mcp_config_get(r);
    mcp_status_count(MCP_STAT_REQUESTS, 1);
    mcp_req_trace(r, NULL);   /* the access log's mcp-trace, whatever the answer */
    if (!q.conf->backend && !q.conf->members) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "SetHandler mcp is used at %s without MCPBackend", r->uri);
        return mcp_req_error(&q, HTTP_INTERNAL_SERVER_ERROR, MCP_JSONRPC_INTERNAL_ERROR,
                             "Internal Error: this MCP endpoint has no backend configured");
    }
    if ((rc = check_origin_and_host(&q)) != OK || (rc = mcp_oauth_require_user(&q)) != OK) {
        return rc;
    }
    /* httpd hands HEAD over as a GET (header_only): it would open a stream nobody reads. */
    if (r->method_number != M_POST
        && mcp_era_route(0, apr_table_get(r->headers_in, "MCP-Protocol-Version"), NULL)
           == MCP_ROUTE_NOT_ALLOWED) {
        return mcp_modern_not_allowed(&q);
    }
    switch (r->header_only ? M_INVALID : r->method_number) {
    case M_POST:
        return handle_post(&q);
    case M_GET:
        return handle_get(&q);
    case M_DELETE:
        return handle_delete(&q);
    default:
        apr_table_setn(r->headers_out, "Allow", MCP_ALLOW);
        return mcp_req_error(&q, HTTP_METHOD_NOT_ALLOWED, MCP_JSONRPC_SERVER_ERROR,
                             "Method Not Allowed: %s is not served here (allowed: %s)", r->method,
                             MCP_ALLOW);
    }
}
