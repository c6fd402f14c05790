/* mod_mcp_exchange — one stateless POST to the backend whose answer is read message by message.
 *
 * What the 2026-07-28 path (mod_mcp_modern) and the era shim (mod_mcp_shim) share: the request
 * goes out with MCP-Protocol-Version and the given headers; an SSE answer (200,
 * text/event-stream) is parsed as it arrives and each event's data handed to on_message; any
 * other answer is buffered, bounded by MCPMaxMessageSize, for the caller (x->body). Once the
 * caller marks the request answered (x->answered), later events are ignored and a backend that
 * keeps the stream open longer than a second is cut (the transfer otherwise runs to the
 * backend's own end, so that its connection can be reused).
 */
#ifndef MOD_MCP_EXCHANGE_H
#define MOD_MCP_EXCHANGE_H

#include "mcp_sse.h"
#include "mod_mcp_request.h"

typedef struct mcp_exchange_t mcp_exchange_t;

/* The caller's part; each returns non-zero to stop the transfer. Any may be NULL. */
typedef struct mcp_exchange_ops_t {
    int (*on_headers)(mcp_exchange_t *x);      /* x->response is in; x->sse set for SSE     */
    int (*on_message)(mcp_exchange_t *x, const char *json, apr_size_t len);
    int (*on_piece)(mcp_exchange_t *x);        /* a piece of SSE was parsed (not answered
                                                * before it)                               */
    int (*on_tick)(mcp_exchange_t *x);         /* about once a second, until answered       */
} mcp_exchange_ops_t;

struct mcp_exchange_t {
    mcp_req_t                *q;
    const mcp_exchange_ops_t *ops;
    void                     *baton;         /* the caller's                                */
    mcp_backend_response_t    response;
    mcp_sse_parser_t         *sse;           /* set when the answer is SSE                  */
    apr_bucket_brigade       *body;          /* any other answer (NULL: none came)          */
    apr_off_t                 body_len;
    int                       too_large;     /* a message exceeded MCPMaxMessageSize        */
    apr_time_t                answered;      /* set by the caller: the response came        */
};

/* Prepares x for a POST of q's; ops and baton are the caller's. */
void mcp_exchange_init(mcp_exchange_t *x, mcp_req_t *q, const mcp_exchange_ops_t *ops,
                       void *baton);

/* POSTs body with MCP-Protocol-Version version and headers ("Name: value" lines), bounded by
 * timeout (0: none). OK once answered whatever the transfer did after; an SSE answer's parser
 * is finished at its end. A too-large message sets *err to say so. */
mcp_backend_status_t mcp_exchange_post(mcp_exchange_t *x, const char *body, apr_size_t len,
                                       const char *version, const apr_array_header_t *headers,
                                       apr_interval_time_t timeout, const char **err);

#endif
