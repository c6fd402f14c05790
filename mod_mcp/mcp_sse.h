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
 * Fields are written in this order, each line ending with a single LF:
 *   id:       "id: <id>\n" when non-NULL (must not contain CR or LF)
 *   event:    "event: <event>\n" when non-NULL (must not contain CR or LF)
 *   retry_ms: "retry: <decimal>\n" when >= 0
 *   data:     NULL writes no data field; otherwise the data is split into lines at every CRLF,
 *             lone CR and lone LF, and each line is written as "data: <line>\n"
 *             ("" therefore writes exactly one "data:\n" line: a priming event)
 * then the terminating "\n". A field whose value is empty is written without the space after
 * the colon ("data:\n", "id:\n"); both forms parse identically. Examples:
 *   (id "7", NULL, "", 3000)        -> "id: 7\nretry: 3000\ndata:\n\n"      (MCP priming event)
 *   (id "1-2", "message", "a\r\nb", -1) -> "id: 1-2\nevent: message\ndata: a\ndata: b\n\n"
 * Because line breaks are normalised, a parser gives back the data with every CRLF and lone CR
 * turned into LF. A C string cannot contain NUL, so the value of each field is NUL-free.
 * Returns NULL when id or event contains CR or LF. *len_out (may be NULL) gets the length. */
char *mcp_sse_event_format(apr_pool_t *p, const char *id, const char *event,
                           const char *data, long retry_ms, apr_size_t *len_out);

/* A comment line (": text\n\n" — a keep-alive that every client ignores). CR and LF in text
 * become spaces. NULL or "" text gives ":\n\n". */
char *mcp_sse_comment_format(apr_pool_t *p, const char *text, apr_size_t *len_out);

/* ---- incremental parser ------------------------------------------------------------------ */

typedef struct mcp_sse_event_t {
    const char *id;         /* last event id as of this event (NULL when none was ever set;
                               "" after an "id" field with an empty value, which WHATWG
                               treats as clearing the last event id)                          */
    int         id_set;     /* non-zero when this event's own block carried an accepted id
                               field (one whose value has no NUL byte)                         */
    const char *event;      /* event type; "message" when the block had no (or an empty) event
                               field                                                           */
    const char *data;       /* data lines joined by '\n', NUL-terminated (may contain NUL
                               bytes when the stream did: use data_len)                        */
    apr_size_t  data_len;
    long        retry_ms;   /* -1 unless this block carried a valid retry field               */
} mcp_sse_event_t;

/* Called once per dispatched event. The strings are valid only during the call (they point
 * into the parser's buffers). The callback must not feed the same parser.
 * Return 0 to go on; any other value stops parsing and is returned by mcp_sse_parser_feed. */
typedef int mcp_sse_event_fn(void *baton, const mcp_sse_event_t *event);

typedef struct mcp_sse_parser_t mcp_sse_parser_t;

/* Errors returned by mcp_sse_parser_feed (callback return values are passed through as-is,
 * so callbacks should use positive values). */
#define MCP_SSE_ERR_TOO_LARGE (-1)   /* one line or one event's data exceeded max_event_bytes */
#define MCP_SSE_ERR_NOMEM     (-2)   /* malloc/realloc of a working buffer failed             */

/* Creates a parser whose working memory is heap-allocated, reused across events, bounded by
 * max_event_bytes, and freed when pool p is cleared or destroyed. Nothing is allocated in p
 * after creation, so a stream of any length uses constant memory. A leading UTF-8 BOM is
 * skipped. Blocks with no data field dispatch nothing (per the WHATWG rules; an "id" in such a
 * block still becomes the last event id), but a block with only an "id:" and an empty "data:"
 * line dispatches an event with data "" (the MCP priming event).
 * Limits: a line longer than max_event_bytes (not counting its line ending) other than a
 * comment, or an event whose data (each data line's value plus one '\n') would exceed
 * max_event_bytes, fails with MCP_SSE_ERR_TOO_LARGE. Comment lines (":...") of any length are
 * discarded without being buffered. Working memory is at most about 5 * max_event_bytes
 * (line, data, event type, pending and last event id). */
mcp_sse_parser_t *mcp_sse_parser_create(apr_pool_t *p, apr_size_t max_event_bytes,
                                        mcp_sse_event_fn *fn, void *baton);

/* Feeds len bytes (any split: mid-line, mid-CRLF, byte by byte); the result does not depend on
 * how the stream is split. Returns 0, MCP_SSE_ERR_*, or the callback's non-zero return.
 * Errors are sticky: after a non-zero return every later feed returns the same value and does
 * nothing, so the parser should not be fed again. */
int mcp_sse_parser_feed(mcp_sse_parser_t *parser, const char *buf, apr_size_t len);

/* End of stream: an incomplete trailing line and event are discarded (WHATWG). Returns 0.
 * The last event id and retry value are kept, and the parser may then be fed the next response
 * of the same logical stream (after a reconnect); its leading BOM is skipped again. */
int mcp_sse_parser_finish(mcp_sse_parser_t *parser);

/* The last event id string as WHATWG defines it: the id in effect after the last completed
 * block (blank line), including blocks that dispatched nothing, e.g. "id: 5\n\n". NULL when no
 * id was ever set. Valid until the next feed or finish. This is the value to send as
 * Last-Event-ID when reconnecting (if non-NULL and non-empty). */
const char *mcp_sse_parser_last_event_id(const mcp_sse_parser_t *parser);

/* The reconnection time from the last valid retry field seen anywhere in the stream (it takes
 * effect at once, even in a block that dispatches nothing); -1 when none. */
long mcp_sse_parser_retry_ms(const mcp_sse_parser_t *parser);

/* Bytes fed since the end of the last dispatched event (since the start when none was): what a
 * stream of comments, empty blocks or one event that never ends has cost without giving
 * anything. A relay bounds it to tell a backend that floods from one that is slow. Not reset by
 * mcp_sse_parser_finish. */
apr_uint64_t mcp_sse_parser_idle_bytes(const mcp_sse_parser_t *parser);

/* Non-zero when an event has begun but not ended: a data line was taken, or a field line has
 * started (comments do not count). Call it before mcp_sse_parser_finish, which discards such
 * an event: a stream that ends then was cut in the middle of an event. */
int mcp_sse_parser_in_event(const mcp_sse_parser_t *parser);

#endif
