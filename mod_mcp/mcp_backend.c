/* mcp_backend — see mcp_backend.h. */
#include <string.h>
#include <strings.h>

#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <curl/curl.h>

#include "mcp_backend.h"

/* ---- targets --------------------------------------------------------------------------- */

static int is_http_url(const char *s)
{
    return strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0;
}

const char *mcp_backend_target_parse(apr_pool_t *p, const char *spec, mcp_backend_target_t *out)
{
    memset(out, 0, sizeof(*out));
    if (strncasecmp(spec, "unix:", 5) == 0) {
        const char *bar = strchr(spec, '|');
        if (!bar || bar == spec + 5 || spec[5] != '/') {
            return apr_psprintf(p, "'%s': a unix socket backend is written "
                                   "unix:/path/to.sock|http://localhost/path", spec);
        }
        if (!is_http_url(bar + 1)) {
            return apr_psprintf(p, "'%s': the part after '|' must be an http:// URL", spec);
        }
        out->unix_socket = apr_pstrmemdup(p, spec + 5, (apr_size_t)(bar - spec - 5));
        out->url = apr_pstrdup(p, bar + 1);
        return NULL;
    }
    if (!is_http_url(spec) || !strchr(spec, '/') || strlen(spec) <= 8) {
        return apr_psprintf(p, "'%s' is not an http://, https:// or unix: backend URL", spec);
    }
    out->url = apr_pstrdup(p, spec);
    return NULL;
}

const char *mcp_backend_session_url(const char *session_id)
{
    const char *at = session_id ? strchr(session_id, '@') : NULL, *host;

    if (!at || !is_http_url(at + 1)) {
        return NULL;
    }
    host = at + 1 + (at[5] == ':' ? 7 : 8);   /* after "http://" or "https://" */
    if (!*host || *host == '/' || *host == ':' || *host == '?' || *host == '#'
        || strpbrk(at + 1, " \t\r\n")) {
        return NULL;
    }
    return at + 1;
}

int mcp_backend_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_ALL) == CURLE_OK ? 0 : -1;
}

void mcp_backend_global_cleanup(void)
{
    curl_global_cleanup();
}

/* ---- the handle cache ------------------------------------------------------------------ */

struct mcp_backend_pool_t {
    apr_thread_mutex_t *mutex;
    CURL              **idle;
    int                 n_idle;
    int                 max_idle;
};

static apr_status_t pool_cleanup(void *data)
{
    mcp_backend_pool_t *bp = data;

    while (bp->n_idle > 0) {
        curl_easy_cleanup(bp->idle[--bp->n_idle]);
    }
    return APR_SUCCESS;
}

mcp_backend_pool_t *mcp_backend_pool_create(apr_pool_t *p, int max_idle)
{
    mcp_backend_pool_t *bp = apr_pcalloc(p, sizeof(*bp));

    bp->max_idle = max_idle > 0 ? max_idle : 1;
    bp->idle = apr_pcalloc(p, sizeof(CURL *) * bp->max_idle);
    if (apr_thread_mutex_create(&bp->mutex, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS) {
        return NULL;
    }
    apr_pool_cleanup_register(p, bp, pool_cleanup, apr_pool_cleanup_null);
    return bp;
}

static CURL *handle_get(mcp_backend_pool_t *bp)
{
    CURL *h = NULL;

    apr_thread_mutex_lock(bp->mutex);
    if (bp->n_idle > 0) {
        h = bp->idle[--bp->n_idle];
    }
    apr_thread_mutex_unlock(bp->mutex);
    if (h) {
        curl_easy_reset(h);   /* keeps the connection cache: that is the point of reuse */
        return h;
    }
    return curl_easy_init();
}

static void handle_put(mcp_backend_pool_t *bp, CURL *h)
{
    apr_thread_mutex_lock(bp->mutex);
    if (bp->n_idle < bp->max_idle) {
        bp->idle[bp->n_idle++] = h;
        h = NULL;
    }
    apr_thread_mutex_unlock(bp->mutex);
    if (h) {
        curl_easy_cleanup(h);
    }
}

/* ---- one exchange ---------------------------------------------------------------------- */

typedef struct exchange_t {
    apr_pool_t                 *pool;
    CURL                       *curl;
    const mcp_backend_call_t   *call;
    mcp_backend_response_t     *response;
    int                         headers_delivered;
    int                         aborted;
    apr_time_t                  deadline;   /* timeout_ms from the start; 0: none            */
    int                         timed_out;  /* the deadline passed while data kept coming    */
} exchange_t;

/* libcurl looks at CURLOPT_TIMEOUT_MS between rounds of reading, and a round reads what the
 * socket holds (up to a hundred buffers): a backend that floods keeps it reading, and the
 * callbacks' work on each piece (parsing, storing) delays the check by seconds. The deadline is
 * therefore also checked here, once per piece and per progress tick. */
static int past_deadline(exchange_t *x)
{
    if (x->deadline && apr_time_now() > x->deadline) {
        x->timed_out = 1;
    }
    return x->timed_out;
}

static int deliver_headers(exchange_t *x)
{
    mcp_backend_response_t *r = x->response;

    x->headers_delivered = 1;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &r->status);
    r->content_type = apr_table_get(r->headers, "Content-Type");
    r->session_id = apr_table_get(r->headers, "Mcp-Session-Id");
    if (x->call->on_headers && x->call->on_headers(x->call->baton, r) != 0) {
        x->aborted = 1;
        return -1;
    }
    return 0;
}

/* The end of a final response's header block: the caller hears of it now, not with the first
 * body byte, which for an SSE stream may come much later (a backend that sends nothing until its
 * first message or keep-alive). */
static int at_end_of_headers(exchange_t *x, const char *buf, size_t len)
{
    long code = 0;

    if ((len == 2 && buf[0] == '\r' && buf[1] == '\n') || (len == 1 && buf[0] == '\n')) {
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
        return code >= 200;
    }
    return 0;
}

static size_t on_header_line(char *buf, size_t size, size_t n, void *data)
{
    exchange_t *x = data;
    size_t len = size * n;
    const char *colon;
    char *name, *value;

    if (!x->headers_delivered && at_end_of_headers(x, buf, len)) {
        return deliver_headers(x) == 0 ? len : 0;
    }
    if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* A new status line: forget the headers of an interim (1xx) response. */
        apr_table_clear(x->response->headers);
        return len;
    }
    colon = memchr(buf, ':', len);
    if (!colon) {
        return len;
    }
    name = apr_pstrmemdup(x->pool, buf, (apr_size_t)(colon - buf));
    value = apr_pstrmemdup(x->pool, colon + 1, len - (apr_size_t)(colon + 1 - buf));
    apr_collapse_spaces(name, name);
    while (*value == ' ' || *value == '\t') {
        value++;
    }
    value[strcspn(value, "\r\n")] = '\0';
    apr_table_addn(x->response->headers, name, value);
    return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *data)
{
    exchange_t *x = data;
    size_t len = size * n;

    if (!x->headers_delivered && deliver_headers(x) != 0) {
        return 0;
    }
    if (past_deadline(x)) {
        return 0;
    }
    if (len && x->call->on_body) {
        int rv = x->call->on_body(x->call->baton, buf, len);
        if (rv == MCP_BACKEND_BODY_PAUSE) {
            return CURL_WRITEFUNC_PAUSE;   /* the same bytes come again once resumed */
        }
        if (rv != 0) {
            x->aborted = 1;
            return 0;
        }
    }
    return len;
}

static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    exchange_t *x = data;

    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    if (past_deadline(x)) {
        return 1;
    }
    if (x->call->on_tick(x->call->baton) != 0) {
        x->aborted = 1;
        return 1;
    }
    return 0;
}

static mcp_backend_status_t classify(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return MCP_BACKEND_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return MCP_BACKEND_UNREACHABLE;
    case CURLE_OPERATION_TIMEDOUT:
        return MCP_BACKEND_TIMEOUT;
    default:
        return MCP_BACKEND_FAILED;
    }
}

/* Everything one exchange needs beside the caller's call: with perform, on its stack; with a
 * multi handle (mcp_backend_async_t), in the transfer's own pool. */
typedef struct prepared_t {
    exchange_t          x;
    struct curl_slist  *hdrs;
    char                errbuf[CURL_ERROR_SIZE];
} prepared_t;

/* Sets up h for call: its headers, options and callbacks, all pointing into pr. */
/* "Name: value" lines (const char *; NULL: none) appended to a request's headers. */
static struct curl_slist *append_lines(struct curl_slist *hdrs, const apr_array_header_t *lines)
{
    int i;

    for (i = 0; lines && i < lines->nelts; i++) {
        hdrs = curl_slist_append(hdrs, APR_ARRAY_IDX(lines, i, const char *));
    }
    return hdrs;
}

static void prepare(prepared_t *pr, CURL *h, apr_pool_t *p, const mcp_backend_call_t *call,
                    mcp_backend_response_t *response)
{
    struct curl_slist *hdrs = NULL;
    exchange_t *x = &pr->x;
    const char *url;

    memset(response, 0, sizeof(*response));
    response->headers = apr_table_make(p, 16);
    memset(x, 0, sizeof(*x));
    x->pool = p;
    x->curl = h;
    x->call = call;
    x->response = response;
    pr->errbuf[0] = '\0';

    hdrs = curl_slist_append(hdrs, "Accept: application/json, text/event-stream");
    /* No "Expect: 100-continue" round trip for larger bodies. */
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (call->body) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    }
    if (call->session_id) {
        hdrs = curl_slist_append(hdrs, apr_pstrcat(p, "Mcp-Session-Id: ", call->session_id, NULL));
    }
    if (call->protocol_version) {
        hdrs = curl_slist_append(hdrs, apr_pstrcat(p, "MCP-Protocol-Version: ",
                                                   call->protocol_version, NULL));
    }
    if (call->last_event_id) {
        hdrs = curl_slist_append(hdrs, apr_pstrcat(p, "Last-Event-ID: ", call->last_event_id,
                                                   NULL));
    }
    hdrs = append_lines(hdrs, call->headers);
    hdrs = append_lines(hdrs, call->identity);
    hdrs = append_lines(hdrs, call->target->headers);
    if (call->traceparent) {
        hdrs = curl_slist_append(hdrs, apr_pstrcat(p, "traceparent: ", call->traceparent, NULL));
    }
    if (call->tracestate) {
        hdrs = curl_slist_append(hdrs, apr_pstrcat(p, "tracestate: ", call->tracestate, NULL));
    }
    pr->hdrs = hdrs;

    url = call->target->url;
    if (call->target->stdio && call->session_id && mcp_backend_session_url(call->session_id)) {
        url = mcp_backend_session_url(call->session_id);   /* where the session's process runs */
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (call->target->unix_socket) {
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, call->target->unix_socket);
    }
    if (call->tls) {
        if (call->tls->ca_file) {
            curl_easy_setopt(h, CURLOPT_CAINFO, call->tls->ca_file);
        }
        if (call->tls->cert_file) {
            curl_easy_setopt(h, CURLOPT_SSLCERT, call->tls->cert_file);
            curl_easy_setopt(h, CURLOPT_SSLKEY, call->tls->key_file ? call->tls->key_file
                                                                   : call->tls->cert_file);
        }
    }
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, pr->errbuf);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, call->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, call->timeout_ms);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header_line);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (call->on_tick) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    }
    else {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 1L);
    }
    if (call->body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, call->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_len);
    }
    if (strcmp(call->method, "POST") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, call->method);
    }
    x->deadline = call->timeout_ms > 0 ? apr_time_now() + apr_time_from_msec(call->timeout_ms)
                                       : 0;
}

/* The transfer ended with rc: its status and cause; the handle goes back to the cache. */
static mcp_backend_status_t conclude(prepared_t *pr, mcp_backend_pool_t *bp, CURLcode rc,
                                     const char **err)
{
    exchange_t *x = &pr->x;
    CURL *h = x->curl;
    const mcp_backend_call_t *call = x->call;
    mcp_backend_status_t status;

    status = x->aborted ? MCP_BACKEND_ABORTED : x->timed_out ? MCP_BACKEND_TIMEOUT : classify(rc);
    if (status == MCP_BACKEND_TIMEOUT && !x->timed_out && call->target->stdio) {
        long sent = 0;

        /* Nothing sent: the connection was never made (a supervisor's host that is gone). */
        curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &sent);
        status = sent == 0 ? MCP_BACKEND_UNREACHABLE : status;
    }
    if (status == MCP_BACKEND_OK && !x->headers_delivered) {
        /* The blank line that ends a header block was never seen (it is seen even when no body
         * follows, as for 202): the connection closed in the middle of the headers, which
         * libcurl takes for a complete response. */
        deliver_headers(x);
        status = MCP_BACKEND_FAILED;
        *err = "the connection closed in the middle of the response headers";
    }
    else if (status != MCP_BACKEND_OK) {
        *err = x->aborted ? "stopped by the gateway"
             : x->timed_out ? apr_psprintf(x->pool, "the answer did not end within %ld "
                                           "milliseconds", call->timeout_ms)
             : apr_pstrdup(x->pool, pr->errbuf[0] ? pr->errbuf : curl_easy_strerror(rc));
    }
    /* The handle outlives the exchange in the cache: drop every pointer into it. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, NULL);
    curl_slist_free_all(pr->hdrs);
    pr->hdrs = NULL;
    handle_put(bp, h);
    return status;
}

mcp_backend_status_t mcp_backend_perform(mcp_backend_pool_t *bp, apr_pool_t *p,
                                         const mcp_backend_call_t *call,
                                         mcp_backend_response_t *response, const char **err)
{
    prepared_t pr;
    CURL *h = handle_get(bp);

    *err = NULL;
    if (!h) {
        memset(response, 0, sizeof(*response));
        response->headers = apr_table_make(p, 16);
        *err = "cannot create an HTTP client handle";
        return MCP_BACKEND_FAILED;
    }
    prepare(&pr, h, p, call, response);
    return conclude(&pr, bp, curl_easy_perform(h), err);
}

/* ---- an exchange on someone else's multi handle ------------------------------------------ */

struct mcp_backend_async_t {
    prepared_t              pr;
    mcp_backend_pool_t     *bp;
    mcp_backend_call_t      call;
    mcp_backend_response_t  response;
    int                     finished;
};

mcp_backend_async_t *mcp_backend_async_create(mcp_backend_pool_t *bp, apr_pool_t *p,
                                              const mcp_backend_call_t *call, int fresh,
                                              const char **err)
{
    mcp_backend_async_t *a = apr_pcalloc(p, sizeof(*a));
    /* A long transfer gets a new handle, not a cached one: a handle that made blocking
     * exchanges keeps their connection cache (curl_easy_perform's own multi handle, with an
     * idle connection to the backend and a socket pair), which would sit unused, three
     * descriptors and some 9 KiB, for as long as the transfer runs on the other multi handle
     * (a standalone stream: as long as its client stays). It joins the cache when the
     * transfer ends. A request's answer takes a cached one: a new handle is a new connection
     * to the backend per call. */
    CURL *h = fresh ? curl_easy_init() : handle_get(bp);

    *err = NULL;
    if (!h) {
        *err = "cannot create an HTTP client handle";
        return NULL;
    }
    a->bp = bp;
    a->call = *call;
    prepare(&a->pr, h, p, &a->call, &a->response);
    return a;
}

void *mcp_backend_async_curl(mcp_backend_async_t *a)
{
    return a->pr.x.curl;
}

const mcp_backend_response_t *mcp_backend_async_response(const mcp_backend_async_t *a)
{
    return &a->response;
}

mcp_backend_status_t mcp_backend_async_finish(mcp_backend_async_t *a, int rc, const char **err)
{
    *err = NULL;
    if (a->finished) {
        return MCP_BACKEND_FAILED;
    }
    a->finished = 1;
    return conclude(&a->pr, a->bp, (CURLcode)rc, err);
}

mcp_backend_status_t mcp_backend_delete_session(mcp_backend_pool_t *bp, apr_pool_t *p,
                                                const mcp_backend_target_t *target,
                                                const mcp_backend_tls_t *tls,
                                                const char *session_id,
                                                const char *protocol_version,
                                                long connect_timeout_ms, long timeout_ms,
                                                long *http_status, const char **err)
{
    mcp_backend_call_t call;
    mcp_backend_response_t response;
    mcp_backend_status_t st;

    memset(&call, 0, sizeof(call));
    call.target = target;
    call.tls = tls;
    call.method = "DELETE";
    call.session_id = session_id;
    call.protocol_version = protocol_version;
    call.connect_timeout_ms = connect_timeout_ms;
    call.timeout_ms = timeout_ms;
    st = mcp_backend_perform(bp, p, &call, &response, err);
    *http_status = response.status;
    return st;
}
