/* mod_mcp_exchange — one streamed exchange with the backend, as the stateless path
 * (mod_mcp_modern) and the era bridge (mod_mcp_bridge) make it.
 *
 * The call is set up from the request's configuration (target, connect timeout); the answer is
 * read as it comes: an SSE answer (200, text/event-stream) is parsed event by event and each
 * message handed to on_message, bounded by MCPMaxMessageSize per message; any other answer is
 * collected (bounded by MCPMaxMessageSize as a whole) for mcp_exchange_body. The caller's hooks
 * decide what a message means and when to stop (a non-zero return aborts the transfer).
 */
#ifndef MOD_MCP_EXCHANGE_H
#define MOD_MCP_EXCHANGE_H

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
    int                     too_large;
    mcp_exchange_message_fn *on_message;  /* required                                       */
    mcp_exchange_check_fn   *on_sse;      /* the SSE answer begins (may be NULL)             */
    mcp_exchange_check_fn   *after_chunk; /* after each piece of SSE (may be NULL)           */
    mcp_exchange_check_fn   *on_tick;     /* about once a second (may be NULL)               */
    void                    *baton;
} mcp_exchange_t;

/* Prepares x for one exchange of request q; hooks are set by the caller afterwards. */
void mcp_exchange_init(mcp_exchange_t *x, mcp_req_t *q, void *baton);

/* Performs call (method, body, headers, session id, version and timeout_ms set by the caller;
 * target, connect timeout and the callbacks are filled in here). On a complete SSE answer the
 * parser is finished (a last event without its blank line is delivered). *err names the cause
 * of anything but OK (a message over MCPMaxMessageSize included). */
mcp_backend_status_t mcp_exchange_perform(mcp_exchange_t *x, mcp_backend_call_t *call,
                                          const char **err);

/* The collected (non-SSE) answer, NUL-terminated, in the request pool; NULL when empty. */
const char *mcp_exchange_body(mcp_exchange_t *x, apr_size_t *len);

#endif
