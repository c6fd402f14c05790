/* mod_mcp_exchange — one streamed exchange with the backend, as every path makes it: the 2025
 * session's short exchanges (mod_mcp_handler: initialize, notifications), its relay
 * (mod_mcp_relay: a request's stream, the standalone GET stream), the stateless path
 * (mod_mcp_modern), the era bridge (mod_mcp_bridge*, a 2026 client in front of a 2025 backend)
 * and the era shim (mod_mcp_shim, a 2025 client in front of a 2026-only backend).
 *
 * The call is set up from the request's configuration (target, connect timeout); the answer is
 * read as it comes: an SSE answer (200, text/event-stream) is parsed event by event and each
 * message handed to on_message, bounded by MCPMaxMessageSize per message; any other answer is
 * collected (bounded by MCPMaxMessageSize as a whole) for mcp_exchange_body. The caller's hooks
 * decide what a message means and when to stop (a non-zero return aborts the transfer).
 *
 * Once a hook marks the exchange answered (x->answered = apr_time_now(): the response the
 * caller waited for came, or the caller is done), later messages are ignored, after_chunk and
 * on_tick are no longer called, and a backend that keeps the stream open longer than a second
 * after it is cut (until then the transfer runs to the backend's own end, so that its
 * connection can be reused); the exchange then counts as OK whatever the transfer did after.
 * An exchange may be performed again (a retry, the next round): each perform starts afresh.
 */
#ifndef MOD_MCP_EXCHANGE_H
#define MOD_MCP_EXCHANGE_H

#include "mcp_loop.h"
#include "mcp_sse.h"
#include "mod_mcp_request.h"

/* One message of an SSE answer (its data, valid or not). Non-zero aborts. */
typedef int mcp_exchange_message_fn(void *baton, const char *json, apr_size_t len);
/* A moment to look around (the SSE answer began; a piece of it was parsed; a tick). Non-zero
 * aborts. */
typedef int mcp_exchange_check_fn(void *baton);

typedef struct mcp_exchange_t {
    mcp_req_t              *q;
    mcp_backend_response_t  response;
    mcp_sse_parser_t       *sse;        /* set when the backend answers with SSE            */
    apr_bucket_brigade     *body;       /* any other answer, bounded by MCPMaxMessageSize   */
    apr_off_t               body_len;
    int                     too_large;  /* a message exceeded MCPMaxMessageSize             */
    int                     cut_mid_event; /* the unanswered SSE answer ended inside an event */
    apr_time_t              answered;   /* set by the caller's hook: see above (0: not yet) */
    mcp_exchange_message_fn *on_message;  /* required                                       */
    mcp_exchange_check_fn   *on_answer;   /* the answer's status and headers came, whatever
                                           * they are (x->response; x->sse set for SSE), before
                                           * on_sse (may be NULL)                            */
    mcp_exchange_check_fn   *on_sse;      /* the SSE answer begins (may be NULL)             */
    mcp_exchange_check_fn   *after_chunk; /* after each piece of SSE, not once a piece before
                                           * was answered (may be NULL)                     */
    mcp_exchange_check_fn   *on_tick;     /* about once a second, until answered (may be
                                           * NULL)                                          */
    void                    *baton;
} mcp_exchange_t;

/* Prepares x for exchanges of request q; hooks are set by the caller afterwards. */
void mcp_exchange_init(mcp_exchange_t *x, mcp_req_t *q, void *baton);

/* Performs call (method, body, headers, session id, version and timeout_ms set by the caller;
 * target, connect timeout and the callbacks are filled in here). OK once answered, whatever the
 * transfer did after; otherwise, on an SSE answer x->cut_mid_event tells whether it ended inside
 * an event (on a complete one the parser is then finished: such an event is discarded). *err
 * names the cause of anything but OK (a message over MCPMaxMessageSize included:
 * x->too_large). */
mcp_backend_status_t mcp_exchange_perform(mcp_exchange_t *x, mcp_backend_call_t *call,
                                          const char **err);

/* Per process (child_init): each thread keeps its multi handle for mcp_exchange_perform_all
 * (and its connections to the members) until it exits. */
void mcp_exchange_child_init(apr_pool_t *pchild);

/* Several exchanges at once (a federated endpoint's fan-out: initialize, the lists, ping), each
 * as mcp_exchange_perform would make it alone (its own x->q, so its own configuration and
 * target), on a multi handle of this thread's: they take as long as the slowest. status[i] and
 * err[i] are each one's outcome. */
void mcp_exchange_perform_all(mcp_exchange_t *const *xs, mcp_backend_call_t *calls, int n,
                              mcp_backend_status_t *status, const char **err);

/* The same exchange driven from outside, by a transfer on the event loop (mcp_loop): begin,
 * then the headers and body pieces as they come (the caller's hooks run as with perform; a
 * non-zero return asks to cut the transfer), then end with the transfer's status and error. */
void mcp_exchange_begin(mcp_exchange_t *x);
int mcp_exchange_feed_headers(mcp_exchange_t *x, const mcp_backend_response_t *response);
int mcp_exchange_feed_body(mcp_exchange_t *x, const char *buf, apr_size_t len);
mcp_backend_status_t mcp_exchange_end(mcp_exchange_t *x, mcp_backend_status_t status,
                                      const char **err);

/* One take of a loop transfer's news fed in (headers, then body bytes). Returns 0 while the
 * exchange goes on; else it is over: the transfer ended (news->done) or a hook asked to cut it
 * (*cut), and mcp_exchange_end is the caller's next step. */
int mcp_exchange_feed_news(mcp_exchange_t *x, const mcp_loop_news_t *news, int *cut);

/* For the driven exchange: the tick perform gives (a backend that keeps the stream open after
 * the answer is cut a second later; else the caller's on_tick). Non-zero asks to cut. */
int mcp_exchange_feed_tick(mcp_exchange_t *x);

/* One short POST of body (session_id, version: sent as Mcp-Session-Id and MCP-Protocol-Version,
 * or NULL), bounded by MCPBackendTimeout; every message of the answer, JSON or SSE, collected
 * into *messages (const char *, in r->pool); x->response has the status and headers. The era
 * bridge's small exchanges (initialize, ping, answers) and the eras probe (mod_mcp_eras). */
mcp_backend_status_t mcp_exchange_collect(mcp_req_t *q, const char *session_id,
                                          const char *version, const char *body,
                                          mcp_exchange_t *x, apr_array_header_t **messages,
                                          const char **err);

/* Fills in call's target and connect timeout from the request's configuration. */
void mcp_exchange_call_defaults(mcp_exchange_t *x, mcp_backend_call_t *call);

/* A stateless POST of body with MCP-Protocol-Version version and headers ("Name: value" lines,
 * may be NULL), bounded by timeout (0: none): mcp_exchange_perform on such a call. */
mcp_backend_status_t mcp_exchange_post(mcp_exchange_t *x, const char *body, apr_size_t len,
                                       const char *version, const apr_array_header_t *headers,
                                       apr_interval_time_t timeout, const char **err);

/* The response (or error) to the request with id among an answer's messages (const char *, JSON
 * texts, as mcp_exchange_collect gives them), parsed in p; *text its text. NULL when none. */
json_object *mcp_exchange_response_to(apr_pool_t *p, const apr_array_header_t *messages,
                                      json_object *id, const char **text);

/* The collected (non-SSE) answer, NUL-terminated, in the request pool; NULL when empty. */
const char *mcp_exchange_body(mcp_exchange_t *x, apr_size_t *len);

#endif
