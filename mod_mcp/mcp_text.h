/* mcp_text — bytes from outside (a backend's headers and bodies) made fit to quote in a log line
 * or a JSON string.
 *
 * A backend may send any bytes: invalid UTF-8, control characters, megabytes of them. Whatever
 * the gateway repeats of them in an error message or a log line goes through mcp_text_quote
 * first, so that the message is valid UTF-8 (json-c would otherwise write invalid JSON, which
 * no client can parse), holds no line breaks, and stays short.
 *
 * Pure code: APR only, no httpd headers.
 */
#ifndef MCP_TEXT_H
#define MCP_TEXT_H

#include <apr_pools.h>

/* Non-zero when s[0..len) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF). NUL bytes count as well-formed. */
int mcp_text_is_utf8(const char *s, apr_size_t len);

/* A copy of s[0..len), allocated in p and NUL-terminated, in which every well-formed UTF-8
 * character other than a control character is kept, and every other byte (a byte that is not
 * part of a well-formed character, a C0 control including CR, LF, TAB and NUL, and DEL) is
 * written as the four characters \xNN (lower-case hex). The result is cut at a character
 * boundary so that it holds at most max bytes of quoted text, followed by "..." when something
 * was cut (max 0: no limit). NULL s gives "". */
const char *mcp_text_quote(apr_pool_t *p, const char *s, apr_size_t len, apr_size_t max);

/* Non-zero when the valid JSON text s[0..len) (RFC 8259, as a parser or PostgreSQL's json type
 * accepted it) certainly casts to PostgreSQL's jsonb as it is: it holds no \u escape (jsonb
 * refuses \u0000 and lone surrogates), no digit followed by 'e' or 'E' (a number's exponent
 * may exceed numeric's range), no run of more than 100 digits, and is under 64 MiB. Texts it
 * refuses may cast too: mcp.audit_jsonb decides for them (a call, and a subtransaction). */
int mcp_text_jsonb_plain(const char *s, apr_size_t len);

#endif
