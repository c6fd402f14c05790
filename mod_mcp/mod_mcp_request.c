/* mod_mcp_request — see mod_mcp_request.h. */
#include <apr_general.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include <string.h>

#include "mcp_federation.h"
#include "mcp_id.h"
#include "mcp_trace.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_federation.h"
#include "mod_mcp_request.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

mcp_child_t mcp_child;

static int answer_error(mcp_req_t *q, int status, int code, const char *message,
                        json_object *data)
{
    request_rec *r = q->r;

    ap_log_rerror(APLOG_MARK, status >= 500 ? APLOG_WARNING : APLOG_INFO, 0, r,
                  "%s %s -> %d: %s", r->method, r->uri, status, message);
    mcp_status_rejected(status);
    /* A body not read yet is discarded so the connection can be kept alive, except after 413,
     * where reading it is what the gateway refuses. */
    if (status == HTTP_REQUEST_ENTITY_TOO_LARGE) {
        r->connection->keepalive = AP_CONN_CLOSE;
    }
    else {
        ap_discard_request_body(r);
    }
    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_rputs(mcp_jsonrpc_error_body(r->pool, q->id, code, message, data), r);
    return DONE;
}

int mcp_req_error(mcp_req_t *q, int status, int code, const char *fmt, ...)
{
    const char *message;
    va_list ap;

    va_start(ap, fmt);
    message = apr_pvsprintf(q->r->pool, fmt, ap);
    va_end(ap);
    return answer_error(q, status, code, message, NULL);
}

const char *mcp_req_holder(const mcp_req_t *q)
{
    request_rec *r = q->r;

    return r->user ? apr_pstrcat(r->pool, "user:", r->user, NULL)
                   : apr_pstrcat(r->pool, "addr:", r->useragent_ip, NULL);
}

void mcp_req_stream_limits(const mcp_req_t *q, mcp_store_limits_t *limits)
{
    limits->holder = mcp_req_holder(q);
    limits->max_session_streams = q->conf->max_session_streams;
    limits->max_holder_streams = q->conf->max_principal_streams;
    limits->max_stream_followers = q->conf->max_stream_followers;
}

int mcp_req_open_stateless(mcp_req_t *q, const char *version, apr_int64_t *stream_id)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_msg_t *msg = &q->body->msgs[0];
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_status_t stored;

    mcp_req_stream_limits(q, &limits);
    stored = mcp_store_stream_open_stateless_admitted(
        mcp_req_db(q), r->pool, version, r->user, mcp_jsonrpc_to_string(r->pool, msg->id, NULL),
        msg->method, q->raw, mcp_req_trace_id(r), mcp_child.owner, mcp_req_lease_secs(q),
        &limits, q->member ? q->member->fed->name : NULL, stream_id, &refused);
    if (stored == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    return stored == MCP_STORE_OK ? OK : mcp_req_store_failed(q, stored);
}

int mcp_req_open_request(mcp_req_t *q, const char *ids, const char *method,
                         apr_int64_t *stream_id)
{
    request_rec *r = q->r;
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_status_t stored;
    const char *primed[8];
    int rc;

    if (!q->session) {
        /* Checked, touched and opened in one statement below. */
        if ((rc = mcp_req_check_session_header(q)) != OK) {
            return rc;
        }
        q->session = apr_pcalloc(r->pool, sizeof(*q->session));
        q->session->id = q->session_header;
        q->session->principal = r->user;
        q->session->backend_url = q->conf->backend_spec;
    }
    mcp_req_stream_limits(q, &limits);
    stored = mcp_store_stream_open_request_admitted(mcp_req_db(q), r->pool, q->session,
                                                    mcp_req_idle_secs(q), ids, method, q->raw,
                                                    mcp_req_trace_id(r), mcp_child.owner,
                                                    mcp_req_lease_secs(q),
                                                    &limits, mcp_protocol_primed(primed, 8),
                                                    primed, q->member ? &q->member->row : NULL,
                                                    q->members, stream_id, &refused);
    if (stored == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    if (stored == MCP_STORE_NOT_FOUND) {
        /* Not live for this user and backend: the ordinary look-up says exactly why (and marks
         * an expired session as such). */
        q->session = NULL;
        return (rc = mcp_req_load_session(q)) != OK ? rc : mcp_req_session_not_found(q);
    }
    if (stored != MCP_STORE_OK) {
        return mcp_req_store_failed(q, stored);
    }
    if (!(q->rev = mcp_protocol_session(q->session->protocol_version))) {
        return mcp_req_session_not_found(q);
    }
    return OK;
}

/* What each refusal is called, where its limit is configured and how the client is told. */
static const struct {
    const char *directive;
    apr_size_t  field;      /* the limit's offset in mcp_dir_conf_t */
    const char *holder;     /* "this session" ...; NULL: the principal */
    const char *what;
} refusals[] = {
    [MCP_STORE_REFUSED_SESSION_STREAMS] = { "MCPMaxStreamsPerSession",
        APR_OFFSETOF(mcp_dir_conf_t, max_session_streams), "this session", "open streams" },
    [MCP_STORE_REFUSED_HOLDER_STREAMS] = { "MCPMaxStreamsPerPrincipal",
        APR_OFFSETOF(mcp_dir_conf_t, max_principal_streams), NULL, "open streams" },
    [MCP_STORE_REFUSED_STREAM_FOLLOWERS] = { "MCPMaxFollowersPerStream",
        APR_OFFSETOF(mcp_dir_conf_t, max_stream_followers), "this stream", "followers" },
    [MCP_STORE_REFUSED_SESSIONS] = { "MCPMaxSessions",
        APR_OFFSETOF(mcp_dir_conf_t, max_sessions), "the gateway", "live sessions" },
    [MCP_STORE_REFUSED_HOLDER_SESSIONS] = { "MCPMaxSessionsPerPrincipal",
        APR_OFFSETOF(mcp_dir_conf_t, max_principal_sessions), NULL, "live sessions" },
};

int mcp_req_refused(mcp_req_t *q, mcp_store_refusal_t why)
{
    request_rec *r = q->r;
    apr_time_t secs = apr_time_sec(q->conf->retry_interval + APR_USEC_PER_SEC - 1);
    const char *holder;
    json_object *data;
    int max, rc;

    if (why <= MCP_STORE_ADMITTED || why >= (int)(sizeof(refusals) / sizeof(refusals[0]))) {
        why = MCP_STORE_REFUSED_SESSIONS;
    }
    max = *(const int *)((const char *)q->conf + refusals[why].field);
    holder = refusals[why].holder ? refusals[why].holder
           : r->user ? apr_pstrcat(r->pool, "user ", r->user, NULL)
           : apr_pstrcat(r->pool, "client address ", r->useragent_ip, NULL);
    apr_table_setn(r->headers_out, "Retry-After",
                   apr_psprintf(r->pool, "%" APR_TIME_T_FMT, secs > 0 ? secs : 1));
    data = json_object_new_object();
    json_object_object_add(data, "limit", json_object_new_string(refusals[why].directive));
    json_object_object_add(data, "max", json_object_new_int(max));
    rc = answer_error(q, HTTP_TOO_MANY_REQUESTS, MCP_JSONRPC_LIMIT_REACHED,
                      apr_psprintf(r->pool, "Too Many Requests: %s holds its maximum of %d %s "
                                   "(%s); try again later", holder, max, refusals[why].what,
                                   refusals[why].directive), data);
    json_object_put(data);
    return rc;
}

int mcp_req_unsupported_version(mcp_req_t *q, const char *requested, const char *supported)
{
    json_object *data = json_object_new_object(), *list = json_object_new_array();
    char *copy = apr_pstrdup(q->r->pool, supported ? supported : ""), *last, *v;
    int rc;

    for (v = apr_strtok(copy, ", ", &last); v; v = apr_strtok(NULL, ", ", &last)) {
        json_object_array_add(list, json_object_new_string(v));
    }
    json_object_object_add(data, "supported", list);
    json_object_object_add(data, "requested", requested ? json_object_new_string(requested)
                                                        : NULL);
    rc = answer_error(q, HTTP_BAD_REQUEST, -32022,
                      apr_psprintf(q->r->pool, "Unsupported protocol version: '%s' (supported: "
                                   "%s)", requested ? requested : "none",
                                   supported && *supported ? supported : "none"), data);
    json_object_put(data);
    return rc;
}

int mcp_req_empty(mcp_req_t *q, int status)
{
    q->r->status = status;
    return DONE;
}

mcp_store_t *mcp_req_db(mcp_req_t *q)
{
    if (!q->db) {
        q->db = mcp_db_request(q->r, mcp_config_database_timeout(q->r->server));
    }
    return q->db;
}

int mcp_req_store_failed(mcp_req_t *q, mcp_store_status_t st)
{
    const char *message;
    int http, code;

    mcp_db_answer(q->r, mcp_req_db(q), st, &http, &code, &message);
    if (http == HTTP_SERVICE_UNAVAILABLE) {
        apr_table_setn(q->r->headers_out, "Retry-After",
                       apr_psprintf(q->r->pool, "%d", mcp_req_retry_secs(q)));
    }
    return mcp_req_error(q, http, code, "%s", message);
}

int mcp_req_session_not_found(mcp_req_t *q)
{
    return mcp_req_error(q, HTTP_NOT_FOUND, MCP_JSONRPC_SESSION_NOT_FOUND,
                         "Session not found: it is unknown, terminated or expired; initialize a "
                         "new session");
}

/* Finds the request's live session, which must belong to the same user and the same backend. */
int mcp_req_check_session_header(mcp_req_t *q)
{
    q->session_header = apr_table_get(q->r->headers_in, "Mcp-Session-Id");
    if (!q->session_header || !*q->session_header) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                             "Bad Request: Mcp-Session-Id header is required");
    }
    if (!mcp_id_session_is_wellformed(q->session_header)) {
        return mcp_req_session_not_found(q);
    }
    mcp_req_set_session_tag(q->r, q->session_header);
    return OK;
}

void mcp_req_end_backend_session(mcp_req_t *q, const char *backend_session_id, const char *why)
{
    const char *err = NULL;
    long status = 0;

    if (!backend_session_id) {
        return;
    }
    if (mcp_backend_delete_session(mcp_child.backends, q->r->pool, q->conf->backend,
                                   q->conf->backend_tls, backend_session_id,
                                   q->session ? q->session->protocol_version : NULL,
                                   (long)apr_time_as_msec(q->conf->backend_connect_timeout),
                                   (long)apr_time_as_msec(q->conf->backend_timeout), &status,
                                   &err) != MCP_BACKEND_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "the backend was not told that its "
                      "session %s ended (%s): %s", mcp_id_tag(q->r->pool, backend_session_id),
                      why, err);
    }
}

/* A session that was not found may have just gone idle for too long: if so it is marked
 * expired here, once, and its backend is told (DELETE). */
static void expire_idle_session(mcp_req_t *q)
{
    const char *backend_session_id = NULL;
    mcp_store_status_t st;

    if (mcp_req_idle_secs(q) <= 0) {
        return;
    }
    st = mcp_store_session_expire(mcp_req_db(q), q->r->pool, q->session_header,
                                  q->conf->backend_spec, mcp_req_idle_secs(q),
                                  &backend_session_id);
    if (st == MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "session %s expired (MCPSessionIdleTimeout)",
                      mcp_id_tag(q->r->pool, q->session_header));
        if (q->conf->members) {
            mcp_store_session_t expired;

            memset(&expired, 0, sizeof(expired));
            expired.id = q->session_header;
            q->session = &expired;
            mcp_federation_end(q, "expired");
            q->session = NULL;
        }
        mcp_req_end_backend_session(q, backend_session_id, "expired");
    }
    else if (st != MCP_STORE_NOT_FOUND) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "expiring session %s failed: %s",
                      mcp_id_tag(q->r->pool, q->session_header), mcp_req_db(q)->error);
    }
}

int mcp_req_load_session(mcp_req_t *q)
{
    request_rec *r = q->r;
    mcp_store_status_t st;
    int rc;

    if ((rc = mcp_req_check_session_header(q)) != OK) {
        return rc;
    }
    st = mcp_store_session_touch(mcp_req_db(q), r->pool, q->session_header, r->user,
                                 mcp_req_idle_secs(q), &q->session);
    if (st != MCP_STORE_OK && st != MCP_STORE_NOT_FOUND) {
        return mcp_req_store_failed(q, st);
    }
    if (st == MCP_STORE_NOT_FOUND) {
        expire_idle_session(q);
        return mcp_req_session_not_found(q);
    }
    if (strcmp(q->session->backend_url, q->conf->backend_spec) != 0) {
        return mcp_req_session_not_found(q);
    }
    q->rev = mcp_protocol_session(q->session->protocol_version);
    mcp_req_note_protocol(r, q->session->protocol_version);
    if (!q->rev) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "session %s has protocol version %s, which is "
                      "not served", mcp_id_tag(r->pool, q->session->id),
                      q->session->protocol_version);
        return mcp_req_session_not_found(q);
    }
    return OK;
}

int mcp_req_load_session_posted(mcp_req_t *q)
{
    int rc;

    if ((rc = mcp_req_load_session(q)) != OK) {
        return rc;
    }
    if (q->body->is_batch && !q->rev->batches) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_INVALID_REQUEST,
                             "Invalid Request: batches are allowed only in sessions of protocol "
                             "version %s; this session uses %s", MCP_PROTOCOL_DEFAULT,
                             q->session->protocol_version);
    }
    return OK;
}

void mcp_req_terminate_session(mcp_req_t *q, const char *by)
{
    mcp_store_t *db = mcp_req_db(q);
    mcp_store_status_t st = mcp_store_session_terminate(db, q->r->pool, q->session->id,
                                                        q->r->user, by);

    if (st != MCP_STORE_OK && st != MCP_STORE_NOT_FOUND) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "terminating session %s failed: %s",
                      mcp_id_tag(q->r->pool, q->session->id), db->error);
    }
}

const char *mcp_req_trace(request_rec *r, const char **tracestate)
{
    const char *parent = apr_table_get(r->notes, "mcp-traceparent");
    const char *state;
    unsigned char random[MCP_TRACE_RANDOM_BYTES];
    mcp_trace_t t;

    if (!parent) {
        apr_generate_random_bytes(random, sizeof(random));
        if (mcp_trace_parse(apr_table_get(r->headers_in, "traceparent"), &t) != 0) {
            mcp_trace_start(&t, random);
        }
        /* The bytes of a new trace's parent id serve as the gateway's span: both are ours. */
        parent = mcp_trace_child(r->pool, &t, random + MCP_TRACE_ID_HEX / 2);
        apr_table_setn(r->notes, "mcp-traceparent", parent);
        apr_table_setn(r->notes, "mcp-trace", apr_pstrdup(r->pool, t.trace_id));
        state = apr_table_get(r->headers_in, "tracestate");
        if (mcp_trace_state_ok(state)) {
            apr_table_setn(r->notes, "mcp-tracestate", state);
        }
    }
    if (tracestate) {
        *tracestate = apr_table_get(r->notes, "mcp-tracestate");
    }
    return parent;
}

const char *mcp_req_trace_id(request_rec *r)
{
    mcp_req_trace(r, NULL);
    return apr_table_get(r->notes, "mcp-trace");
}

void mcp_req_set_session_tag(request_rec *r, const char *session_id)
{
    const char *tag = mcp_id_tag(r->pool, session_id);

    apr_table_setn(r->subprocess_env, "MCP_SESSION_TAG", tag);
    apr_table_setn(r->notes, "mcp-session", tag);
}

void mcp_req_note_body(mcp_req_t *q)
{
    request_rec *r = q->r;
    const mcp_jsonrpc_body_t *body = q->body;
    const char *name = NULL;

    if (!body || body->count < 1) {
        return;
    }
    if (!body->is_batch) {
        const mcp_jsonrpc_msg_t *msg = &body->msgs[0];

        if (msg->method) {
            apr_table_set(r->notes, "mcp-method", msg->method);
        }
        if (msg->id) {
            apr_table_setn(r->notes, "mcp-id", mcp_jsonrpc_to_string(r->pool, msg->id, NULL));
        }
        if (mcp_jsonrpc_target(msg, &name) != MCP_TARGET_NONE) {
            apr_table_set(r->notes, "mcp-name", name);
        }
        return;
    }
    /* Joined once: merging message by message copies the growing list each time (quadratic
     * in the batch's length). */
    apr_table_setn(r->notes, "mcp-method", mcp_jsonrpc_methods_joined(r->pool, body));
}

void mcp_req_note_protocol(request_rec *r, const char *version)
{
    if (version) {
        apr_table_set(r->notes, "mcp-protocol", version);
    }
}

void mcp_req_note_stream(request_rec *r, apr_int64_t stream_id)
{
    apr_table_setn(r->notes, "mcp-stream", apr_psprintf(r->pool, "%" APR_INT64_T_FMT, stream_id));
}

void mcp_req_set_sse_headers(request_rec *r)
{
    r->status = HTTP_OK;
    ap_set_content_type(r, "text/event-stream");
    apr_table_setn(r->headers_out, "Cache-Control", "no-cache, no-transform");
    apr_table_setn(r->headers_out, "X-Accel-Buffering", "no");
    apr_table_setn(r->subprocess_env, "no-gzip", "1");
}

static int whole_secs(apr_interval_time_t t)
{
    apr_time_t secs = apr_time_sec(t + APR_USEC_PER_SEC - 1);

    return secs > 0x7fffffff ? 0x7fffffff : (int)secs;
}

int mcp_req_idle_secs(const mcp_req_t *q)
{
    return whole_secs(q->conf->session_idle_timeout);
}

int mcp_req_lease_secs(const mcp_req_t *q)
{
    return whole_secs(q->conf->stream_lease);
}

int mcp_req_retry_secs(const mcp_req_t *q)
{
    int secs = whole_secs(q->conf->retry_interval);

    return secs > 0 ? secs : 1;
}
