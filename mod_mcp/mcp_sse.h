/* mcp_sse — Server-Sent Events: an encoder for what the gateway writes and an incremental
 * parser for what a backend sends (WHATWG "event stream interpretation" rules).
 *
 * Pure code: no httpd headers, so it can be unit tested and fuzzed on its own.
 */
#ifndef MCP_SSE_H
#define MCP_SSE_H

#include <apr_pools.h>

/* ---- encoder ------------------------------------------------------------------------------ */

/* One SSE event as text, allocated in p, ending with the blank line that dispatches it.
 *   id:       written as "id: ..." when non-NULL (must not contain CR, LF or NUL)
 *   event:    written as "event: ..." when non-NULL
 *   data:     NULL writes no data field; "" writes one empty "data:" line (a priming event);
 *             otherwise one "data: " line per line of data (CR, LF and CRLF all split lines)
 *   retry_ms: written as "retry: N" when >= 0
 * Returns NULL when id or event contains CR, LF or NUL. *len_out (may be NULL) gets the length. */
char *mcp_sse_event_format(apr_pool_t *p, const char *id, const char *event,
                           const char *data, long retry_ms, apr_size_t *len_out);

/* A comment line (": text\n\n" — a keep-alive that every client ignores). Newlines in text
 * become spaces. */
char *mcp_sse_comment_format(apr_pool_t *p, const char *text, apr_size_t *len_out);

/* ---- incremental parser ------------------------------------------------------------------ */

typedef struct mcp_sse_event_t {
    const char *id;         /* last event id as of this event (NULL when none was ever set) */
    int         id_set;     /* non-zero when this event's own block carried an id field      */
    const char *event;      /* event type; "message" when the block had no event field       */
    const char *data;       /* data lines joined by '\n', NUL-terminated                       */
    apr_size_t  data_len;
    long        retry_ms;   /* -1 unless this block carried a valid retry field               */
} mcp_sse_event_t;

/* Called once per dispatched event. The strings are valid only during the call.
 * Return 0 to go on; any other value stops parsing and is returned by mcp_sse_parser_feed. */
typedef int mcp_sse_event_fn(void *baton, const mcp_sse_event_t *event);

typedef struct mcp_sse_parser_t mcp_sse_parser_t;

/* Errors returned by mcp_sse_parser_feed (callback return values are passed through as-is,
 * so callbacks should use positive values). */
#define MCP_SSE_ERR_TOO_LARGE (-1)   /* one line or one event's data exceeded max_event_bytes */

/* Creates a parser whose working memory is heap-allocated, reused across events, bounded by
 * max_event_bytes, and freed when pool p is cleared or destroyed. Nothing is allocated in p
 * per event, so a stream of any length uses constant memory. A leading UTF-8 BOM is skipped.
 * Blocks with no data field dispatch nothing (per the WHATWG rules), but a block with only an
 * "id:" and an empty "data:" line dispatches an event with data "" (the MCP priming event). */
mcp_sse_parser_t *mcp_sse_parser_create(apr_pool_t *p, apr_size_t max_event_bytes,
                                        mcp_sse_event_fn *fn, void *baton);

/* Feeds len bytes (any split: mid-line, mid-CRLF, byte by byte). Returns 0, MCP_SSE_ERR_*,
 * or the callback's non-zero return. After a non-zero return the parser must not be fed again. */
int mcp_sse_parser_feed(mcp_sse_parser_t *parser, const char *buf, apr_size_t len);

/* End of stream: an incomplete trailing event is discarded (WHATWG). Returns 0. */
int mcp_sse_parser_finish(mcp_sse_parser_t *parser);

#endif
