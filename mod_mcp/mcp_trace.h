/* mcp_trace — W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a
 * client sends, and the one the gateway sends the backend.
 *
 * The gateway is a hop of the trace: it keeps the client's trace id and flags and sends the
 * backend a traceparent with a parent id of its own, and the client's tracestate as it came
 * (when it is well-formed). A client that sent no valid traceparent gets a trace started for it
 * (sampled), so that every call can be followed from the gateway's access log (the request note
 * `mcp-trace`, the trace id) to the backend's.
 *
 * Pure code: APR only, no httpd headers.
 */
#ifndef MCP_TRACE_H
#define MCP_TRACE_H

#include <apr_pools.h>

#define MCP_TRACE_ID_HEX   32     /* 16 bytes */
#define MCP_TRACE_SPAN_HEX 16     /* 8 bytes  */
/* The random bytes a new trace needs: its trace id and its first parent id. */
#define MCP_TRACE_RANDOM_BYTES 24

typedef struct mcp_trace_t {
    char trace_id[MCP_TRACE_ID_HEX + 1];    /* lower-case hex, never all zeros              */
    char parent_id[MCP_TRACE_SPAN_HEX + 1]; /* the caller's span                            */
    char flags[3];                          /* two hex digits: 01 = sampled                 */
} mcp_trace_t;

/* Reads a traceparent header: "00-<32 hex>-<16 hex>-<2 hex>" exactly for version 00; a later
 * version (not ff) may append "-..." after those fields, which is ignored, as the
 * specification asks. Lower-case hex only; ids of all zeros are invalid. 0 on success, -1
 * when the header is invalid (then the caller starts a new trace). */
int mcp_trace_parse(const char *header, mcp_trace_t *out);

/* A new trace from MCP_TRACE_RANDOM_BYTES random bytes, sampled. */
void mcp_trace_start(mcp_trace_t *t, const unsigned char *random);

/* The traceparent for the next hop: version 00, t's trace id and flags, span (8 bytes) as the
 * parent id (a span of all zeros is made non-zero). Allocated in p. */
const char *mcp_trace_child(apr_pool_t *p, const mcp_trace_t *t, const unsigned char *span);

/* Non-zero when a tracestate header may be passed on: at most 512 characters of printable
 * ASCII (list members are not checked one by one; a backend that cannot read one ignores it). */
int mcp_trace_state_ok(const char *state);

#endif
