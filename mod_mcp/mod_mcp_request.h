/* mod_mcp_request — one MCP request as the handler files share it, the per-process state they
 * use, and the ways a request is answered with an error.
 *
 * Convention: a step returns OK to let the request go on, or DONE after it has written the answer
 * itself (httpd treats a handler's DONE like OK). Every rejection is a JSON-RPC error body with
 * a precise HTTP status, logged at info (5xx at warning).
 */
#ifndef MOD_MCP_REQUEST_H
#define MOD_MCP_REQUEST_H

#include <httpd.h>
#include <json-c/json.h>

#include "mcp_backend.h"
#include "mcp_jsonrpc.h"
#include "mcp_lease.h"
#include "mcp_listener.h"
#include "mcp_protocol.h"
#include "mcp_refresh.h"
#include "mcp_router.h"
#include "mcp_store.h"
#include "mcp_store_members.h"
#include "mod_mcp_config.h"

/* What every request of this process shares; set once in child_init. */
typedef struct mcp_child_t {
    mcp_backend_pool_t *backends;   /* idle libcurl handles (keep-alive to the backend)      */
    mcp_router_t       *router;     /* wake-ups for followers of streams                     */
    mcp_listener_t     *listener;   /* LISTEN connection feeding the router (NULL: none)     */
    const char         *owner;      /* "host:pid", the owner written on streams relayed here */
    mcp_leases_t       *leases;     /* leases of those streams, renewed by the keeper thread */
    mcp_refresh_t      *tool_lists; /* the era bridge's tool lists being read again ...       */
    mcp_refresh_t      *pooled_marks; /* ... and its pooled sessions being marked seen        */
    mcp_refresh_t      *pool_starts; /* ... and its pools' sessions being initialized         */
} mcp_child_t;

extern mcp_child_t mcp_child;

/* The terminal answer a client gets for a request whose relaying process died. */
#define MCP_OWNER_GONE_MESSAGE \
    "Bad Gateway: the gateway process relaying this request stopped before the response " \
    "(its lease ran out); the request's outcome is unknown"

/* A federated request's member (mod_mcp_federation): the relay sends the request there, rewritten
 * for it, instead of to the Location's backend, and rewrites what the member sends the client
 * (mcp_fed_outbound). The request's conf is then a copy whose backend is the member's. */
typedef struct mcp_req_member_t {
    const struct mcp_fed_member_t *fed;   /* its name and naming rules                    */
    const struct mcp_dir_conf_t *endpoint; /* the federated Location's configuration      */
    mcp_store_member_t row;               /* its session (mcp.session_members), read by
                                           * mcp_req_open_request with the stream's open   */
    const char *body;                     /* the request in its own names                 */
    apr_size_t  body_len;
    const char *method;                   /* the request's method                         */
} mcp_req_member_t;

typedef struct mcp_req_t {
    request_rec          *r;
    const mcp_dir_conf_t *conf;
    const char           *raw;            /* the POST body as received                     */
    apr_size_t            raw_len;
    mcp_jsonrpc_body_t   *body;           /* ... parsed                                    */
    json_object          *id;             /* the single request's id, echoed in errors     */
    const char           *session_header; /* Mcp-Session-Id as sent                        */
    mcp_store_session_t  *session;        /* the live session (NULL for initialize)        */
    const mcp_protocol_t *rev;            /* the session's negotiated revision             */
    mcp_store_t          *db;             /* the request's store handle (mcp_req_db)       */
    mcp_req_member_t     *member;         /* a federated request's member, or NULL         */
    apr_array_header_t   *members;        /* NULL, or (a federated request for every member)
                                           * an array that mcp_req_open_request fills with
                                           * each member's row (mcp_store_member_t), read
                                           * by the stream's open                           */
} mcp_req_t;

/* A JSON-RPC error answer with this status; returns DONE. */
int mcp_req_error(mcp_req_t *q, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* 429 Too Many Requests with Retry-After (MCPRetryInterval, whole seconds, at least 1): a limit
 * refused the request. The message names the directive; the error's data is
 * {"limit": directive, "max": its value}. Returns DONE. */
int mcp_req_refused(mcp_req_t *q, mcp_store_refusal_t why);

/* Who the request counts against for per-principal limits: "user:<name>" when authenticated,
 * else "addr:<client address>" (r->useragent_ip, so mod_remoteip is honoured). */
const char *mcp_req_holder(const mcp_req_t *q);

/* The stream limits that apply to this request (MCPMaxStreamsPerSession,
 * MCPMaxStreamsPerPrincipal, MCPMaxFollowersPerStream), for its holder. */
void mcp_req_stream_limits(const mcp_req_t *q, mcp_store_limits_t *limits);

/* Record, then dispatch, for a 2026-07-28 (stateless) request: its stream with the inbound
 * message (mcp_store_stream_open_stateless_admitted, within the request's stream limits).
 * OK with *stream_id, or DONE after answering 429 or the store's failure. */
int mcp_req_open_stateless(mcp_req_t *q, const char *version, apr_int64_t *stream_id);

/* Record, then dispatch, for the requests of a 2025-era POST (ids: their ids as JSON text;
 * method: the first one's): the session checked and touched and the stream opened with the
 * inbound message and its priming row, in one statement (mcp_store_stream_open_request_admitted,
 * within the request's stream limits); the Mcp-Session-Id header is checked first unless
 * q->session is loaded already. OK with *stream_id, q->session and q->rev; or DONE after
 * answering 400, 404, 429 or the store's failure. */
int mcp_req_open_request(mcp_req_t *q, const char *ids, const char *method,
                         apr_int64_t *stream_id);

/* 400 with -32022 (UnsupportedProtocolVersion), data {"supported": [...], "requested": v}:
 * requested (may be NULL) is not served; supported is a ", "-separated list of what is. Both
 * eras answer an unsupported version this way, so a probing client reads the refusal directly.
 * Returns DONE. */
int mcp_req_unsupported_version(mcp_req_t *q, const char *requested, const char *supported);

/* A bodiless answer with this status; returns DONE. */
int mcp_req_empty(mcp_req_t *q, int status);

/* The request's store handle: an outage is waited out for up to MCPDatabaseTimeout. */
mcp_store_t *mcp_req_db(mcp_req_t *q);

/* Answers a store call that ended with st (UNAVAILABLE or REFUSED) as mcp_db_answer says:
 * 503 with Retry-After, 400, or 500. Returns DONE. */
int mcp_req_store_failed(mcp_req_t *q, mcp_store_status_t st);

/* 404: unknown, terminated, expired, or another user's session. */
int mcp_req_session_not_found(mcp_req_t *q);

/* Finds the request's live session (Mcp-Session-Id), which must belong to the same user and the
 * same backend, and records the activity; sets q->session and q->rev. OK, or DONE after
 * answering 400 (no header), 404 or 503. */
int mcp_req_load_session(mcp_req_t *q);

/* mcp_req_load_session for a POST whose body is parsed: also 400 (-32600) for a batch in a
 * session whose revision allows none (batches are 2025-03-26's only). */
int mcp_req_load_session_posted(mcp_req_t *q);

/* Checks the Mcp-Session-Id header only: OK when it could name a session, else DONE after
 * answering 400 (missing) or 404 (not an id this gateway issues). */
int mcp_req_check_session_header(mcp_req_t *q);

/* Tells the backend (DELETE with its Mcp-Session-Id, bounded by MCPBackendTimeout) that its
 * session ended; why ("client", "expired", ...) is for the log line a failure gets. Nothing
 * for a NULL backend_session_id (a stateless backend). */
void mcp_req_end_backend_session(mcp_req_t *q, const char *backend_session_id, const char *why);

/* Marks the request's session terminated (by: "client", "expired", "backend"); failures are
 * logged only. */
void mcp_req_terminate_session(mcp_req_t *q, const char *by);

/* The request's W3C trace context (mcp_trace.h), made on first use and kept in r->notes: the
 * traceparent to send the backend (the client's trace, or one started for it, with a parent id
 * of the gateway's own), and in *tracestate (may be NULL) the client's tracestate when it may be
 * passed on, else NULL. The trace id is the request note `mcp-trace` (for LogFormat
 * %{mcp-trace}n). */
const char *mcp_req_trace(request_rec *r, const char **tracestate);

/* The request's W3C trace id (32 hex; mcp_req_trace makes it when it is not yet), as stored with
 * the streams and sessions the request begins (mcp.streams.trace_id, mcp.sessions.trace_id). */
const char *mcp_req_trace_id(request_rec *r);

/* Session ids are bearer tokens: logs name a session by mcp_id_tag() only. This sets it as the
 * environment variable MCP_SESSION_TAG, for access logs (LogFormat "%{MCP_SESSION_TAG}e"). */
void mcp_req_set_session_tag(request_rec *r, const char *session_id);

/* Request notes for access logs (LogFormat "%{mcp-method}n" ...), see README "Logs":
 * mcp-method, mcp-name (tool, prompt or resource), mcp-id (JSON-RPC id, as JSON) from the parsed
 * body (a batch: its methods joined by ","); mcp-protocol; mcp-stream; mcp-session (the session's
 * tag, as mcp_req_set_session_tag sets it). */
void mcp_req_note_body(mcp_req_t *q);
void mcp_req_note_protocol(request_rec *r, const char *version);
void mcp_req_note_stream(request_rec *r, apr_int64_t stream_id);

/* The response headers of every SSE stream the gateway sends. */
void mcp_req_set_sse_headers(request_rec *r);

/* Session lifetimes in whole seconds, as the store takes them (0: none). */
int mcp_req_idle_secs(const mcp_req_t *q);
int mcp_req_lease_secs(const mcp_req_t *q);

/* MCPRetryInterval in whole seconds, at least 1 (for Retry-After). */
int mcp_req_retry_secs(const mcp_req_t *q);

#endif
