/* mcp_backend — the HTTP client that talks to the backend MCP server (libcurl).
 *
 * Responses are streamed: the caller gets the status and headers once, then body bytes as they
 * arrive, so an SSE answer can be relayed event by event. Handles are kept in a small per-process
 * cache so that connections to the backend are reused (keep-alive).
 * Pure code: no httpd headers.
 */
#ifndef MCP_BACKEND_H
#define MCP_BACKEND_H

#include <apr_pools.h>
#include <apr_tables.h>

/* Where the backend is: an http(s) URL, optionally reached over a unix domain socket. */
typedef struct mcp_backend_target_t {
    const char *url;          /* the URL requested (for a unix socket, its host is nominal) */
    const char *unix_socket;  /* NULL, or the socket path                                   */
    /* A stdio server's supervisor (docs/stdio.md): a request with a session id that holds an
     * '@' goes to the URL after it (mcp_backend_session_url) instead of url, and a connect
     * timeout counts as MCP_BACKEND_UNREACHABLE (nothing was sent: the supervisor is gone). */
    int         stdio;
    const apr_array_header_t *headers;  /* const char *: "Name: value" lines every request to
                                         * this target carries (the supervisor's key), or NULL */
} mcp_backend_target_t;

/* Parses "http://host[:port]/path", "https://..." or "unix:/path/to.sock|http://host/path"
 * (mod_proxy's notation). Returns NULL on success, else an error message allocated in p. */
const char *mcp_backend_target_parse(apr_pool_t *p, const char *spec, mcp_backend_target_t *out);

/* The URL a stdio supervisor's session id names: the part after its first '@' when that is an
 * http:// or https:// URL with a host ("<hex>@http://10.0.0.5:7601/stdio/everything"), else
 * NULL. Points into session_id. */
const char *mcp_backend_session_url(const char *session_id);

/* Once per process, before any thread starts (curl_global_init is not thread-safe). */
int mcp_backend_global_init(void);
void mcp_backend_global_cleanup(void);

/* A cache of idle easy handles, safe to share between the threads of one process. Everything is
 * released when p is destroyed. */
typedef struct mcp_backend_pool_t mcp_backend_pool_t;
mcp_backend_pool_t *mcp_backend_pool_create(apr_pool_t *p, int max_idle);

typedef struct mcp_backend_response_t {
    long         status;          /* HTTP status of the final response                  */
    const char  *content_type;    /* NULL when absent                                   */
    const char  *session_id;      /* the backend's Mcp-Session-Id header, or NULL       */
    apr_table_t *headers;         /* every header of the final response                 */
} mcp_backend_response_t;

/* Called once, before the first body byte (or at the end for an empty body). Non-zero aborts. */
typedef int mcp_backend_headers_fn(void *baton, const mcp_backend_response_t *response);
/* Called for each piece of body as it arrives. Non-zero aborts the transfer, except
 * MCP_BACKEND_BODY_PAUSE (on a multi handle only): the transfer pauses, and the same bytes come
 * again once it is resumed (curl_easy_pause). */
typedef int mcp_backend_body_fn(void *baton, const char *buf, apr_size_t len);
#define MCP_BACKEND_BODY_PAUSE 2
/* Called while the exchange is under way, at least about once a second even when nothing
 * arrives (keep-alives, lease renewals, shutdown checks). Non-zero aborts the transfer. */
typedef int mcp_backend_tick_fn(void *baton);

/* TLS toward an https backend, beyond libcurl's defaults (the system's trusted CAs, no client
 * certificate). Each member may be NULL. PEM files, read by libcurl at each new connection;
 * connections are reused only between calls with the same settings. */
typedef struct mcp_backend_tls_t {
    const char *ca_file;      /* the CAs that verify the backend's certificate (instead of the
                               * system's)                                                   */
    const char *cert_file;    /* the gateway's client certificate (and its chain)           */
    const char *key_file;     /* ... its key (NULL: in cert_file)                           */
} mcp_backend_tls_t;

typedef struct mcp_backend_call_t {
    const mcp_backend_target_t *target;
    const char *method;            /* "POST", "GET" or "DELETE"                          */
    const char *body;              /* POST body (NULL for none)                          */
    apr_size_t  body_len;
    const char *session_id;        /* sent as Mcp-Session-Id when non-NULL               */
    const char *protocol_version;  /* sent as MCP-Protocol-Version when non-NULL         */
    const char *last_event_id;     /* sent as Last-Event-ID when non-NULL                */
    const apr_array_header_t *headers; /* const char *: more "Name: value" lines, or NULL */
    const apr_array_header_t *identity; /* const char *: MCPBackendHeader lines, or NULL     */
    const mcp_backend_tls_t *tls;  /* NULL: libcurl's defaults                           */
    const char *traceparent;       /* W3C trace context for the backend, or NULL (mcp_trace) */
    const char *tracestate;
    long        connect_timeout_ms;
    long        timeout_ms;        /* the whole exchange; 0 for no limit                 */
    mcp_backend_headers_fn *on_headers;
    mcp_backend_body_fn    *on_body;
    mcp_backend_tick_fn    *on_tick;   /* may be NULL */
    void       *baton;
} mcp_backend_call_t;

typedef enum {
    MCP_BACKEND_OK = 0,        /* a complete HTTP response (of any status) was read           */
    MCP_BACKEND_UNREACHABLE,   /* no connection (refused, DNS, TLS handshake; for a stdio
                                * target also a connect timeout): nothing was sent            */
    MCP_BACKEND_TIMEOUT,       /* connect or exchange timeout                                 */
    MCP_BACKEND_FAILED,        /* the exchange broke after it started                         */
    MCP_BACKEND_ABORTED        /* a callback asked to stop                                    */
} mcp_backend_status_t;

/* Performs one exchange. response is filled as soon as headers arrive (it stays zeroed when
 * nothing arrived). On anything but OK, *err (allocated in p) names the cause. */
mcp_backend_status_t mcp_backend_perform(mcp_backend_pool_t *bp, apr_pool_t *p,
                                         const mcp_backend_call_t *call,
                                         mcp_backend_response_t *response, const char **err);

/* An exchange driven by a curl multi handle (mcp_loop) instead of a blocking perform. call is
 * copied, not what it points to (which must live as long as p); the transfer's bookkeeping is
 * allocated in p, and call's callbacks run in the thread that drives the multi handle, which
 * alone may use p until mcp_backend_async_finish. fresh: a new easy handle rather than a cached
 * one (a transfer that may last long: a cached handle's own idle connection would wait with
 * it). NULL, with *err, when no handle can be had. */
typedef struct mcp_backend_async_t mcp_backend_async_t;
mcp_backend_async_t *mcp_backend_async_create(mcp_backend_pool_t *bp, apr_pool_t *p,
                                              const mcp_backend_call_t *call, int fresh,
                                              const char **err);

/* The easy handle (a CURL *) to add to the multi handle. */
void *mcp_backend_async_curl(mcp_backend_async_t *a);

/* The response as far as it came (status, headers): read it only once the headers callback ran,
 * and only from a thread that synchronised with the driving thread since. */
const mcp_backend_response_t *mcp_backend_async_response(const mcp_backend_async_t *a);

/* After the multi handle reported the transfer done with rc (a CURLcode), or it was removed from
 * it: the exchange's status, *err naming the cause (in p); the handle goes back to the cache. */
mcp_backend_status_t mcp_backend_async_finish(mcp_backend_async_t *a, int rc, const char **err);

/* DELETE of a backend session (its Mcp-Session-Id), the answer's body ignored: the backend is
 * told that the gateway's session ended. *http_status gets the status (0 when none came). */
mcp_backend_status_t mcp_backend_delete_session(mcp_backend_pool_t *bp, apr_pool_t *p,
                                                const mcp_backend_target_t *target,
                                                const mcp_backend_tls_t *tls,
                                                const char *session_id,
                                                const char *protocol_version,
                                                long connect_timeout_ms, long timeout_ms,
                                                long *http_status, const char **err);

#endif
