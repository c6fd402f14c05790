/* mcp_reqhead — an incremental parser of an HTTP/1.1 request head (request line and header
 * fields, RFC 9112), for the stdio supervisor's own small HTTP server.
 *
 * The supervisor's only clients are libcurl (the gateway's) and the tests, so the parser is
 * strict where being lenient would only hide a bug or open a smuggling hole: no obsolete line
 * folding, no whitespace between a field name and its colon, one Content-Length value, no
 * request line but "METHOD SP request-target SP HTTP/1.x". Lines may end with CRLF or a bare LF
 * (RFC 9112 section 2.2 lets a recipient accept LF); empty lines before the request line are
 * skipped (section 2.2 too).
 *
 * Bytes may arrive in any split: the parser keeps what it was fed (at most max_head bytes) and
 * parses once the empty line that ends the head has come; what follows it belongs to the body
 * and is left to the caller (see *consumed). The strings it gives back point into its own
 * buffer, valid until the next reset or destroy.
 *
 * Pure code: libc only (no APR, no httpd headers); one allocation per parser, none per request.
 */
#ifndef MCP_REQHEAD_H
#define MCP_REQHEAD_H

#include <stddef.h>

typedef struct mcp_reqhead_t mcp_reqhead_t;

/* What mcp_reqhead_feed returns. */
#define MCP_REQHEAD_MORE  0      /* the head is not complete: feed more                         */
#define MCP_REQHEAD_DONE  1      /* the head is complete and valid                              */
#define MCP_REQHEAD_ERROR (-1)   /* invalid or too large: see mcp_reqhead_error/_status         */

/* A parser that keeps at most max_head bytes of head (leading empty lines included) and at most
 * max_fields header fields. NULL when out of memory. */
mcp_reqhead_t *mcp_reqhead_create(size_t max_head, size_t max_fields);
void mcp_reqhead_destroy(mcp_reqhead_t *h);

/* Forgets the request: the parser takes the next one (keep-alive). */
void mcp_reqhead_reset(mcp_reqhead_t *h);

/* Feeds len bytes. *consumed gets how many of them belong to the head: all of them while it
 * returns MORE; with DONE, the bytes after the empty line (the body, or the next request) start
 * at buf + *consumed. Once DONE or ERROR, further feeds return the same and consume nothing,
 * until a reset. */
int mcp_reqhead_feed(mcp_reqhead_t *h, const char *buf, size_t len, size_t *consumed);

/* After ERROR: a sentence saying precisely what was wrong (e.g. "the request head is over
 * 16384 bytes", "header field 3 has no colon"), and the HTTP status to answer with: 400, 431
 * (the head or its number of fields over the limit) or 505 (a version other than HTTP/1.x). */
const char *mcp_reqhead_error(const mcp_reqhead_t *h);
int mcp_reqhead_status(const mcp_reqhead_t *h);

/* ---- after DONE ------------------------------------------------------------------------- */

const char *mcp_reqhead_method(const mcp_reqhead_t *h);   /* as sent, e.g. "POST"             */
const char *mcp_reqhead_target(const mcp_reqhead_t *h);   /* the request-target, e.g. "/a?b"  */
int mcp_reqhead_minor(const mcp_reqhead_t *h);            /* 1 for HTTP/1.1, 0 for HTTP/1.0   */

/* The value of the first field named name (case-insensitive), leading and trailing
 * whitespace removed; NULL when there is none. */
const char *mcp_reqhead_field(const mcp_reqhead_t *h, const char *name);

/* The number of fields, and the i-th one's name and value (0-based; NULL when out of range). */
size_t mcp_reqhead_fields(const mcp_reqhead_t *h);
const char *mcp_reqhead_field_name(const mcp_reqhead_t *h, size_t i);
const char *mcp_reqhead_field_value(const mcp_reqhead_t *h, size_t i);

/* The Content-Length (checked while parsing: digits only, at most 18 of them, every
 * Content-Length field the same); -1 when there is none. */
long long mcp_reqhead_content_length(const mcp_reqhead_t *h);

/* Non-zero when a Transfer-Encoding field is present (the supervisor takes no chunked
 * requests; a head with both it and Content-Length is an error here, RFC 9112 section 6.3). */
int mcp_reqhead_has_transfer_encoding(const mcp_reqhead_t *h);

/* Non-zero when the connection is to stay open after the response: HTTP/1.1 without
 * "Connection: close", or HTTP/1.0 with "Connection: keep-alive". */
int mcp_reqhead_keep_alive(const mcp_reqhead_t *h);

/* Non-zero when the client sent "Expect: 100-continue" (it waits for an interim response
 * before the body). */
int mcp_reqhead_expects_continue(const mcp_reqhead_t *h);

#endif
