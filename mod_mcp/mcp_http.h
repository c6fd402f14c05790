/* mcp_http — the HTTP header rules of the Streamable HTTP transport that need no httpd:
 * media-type matching for Accept and Content-Type, the form of a session id.
 *
 * Pure code: no httpd headers.
 */
#ifndef MCP_HTTP_H
#define MCP_HTTP_H

/* Non-zero when the Accept header value lists the media type want ("application/json" or
 * "text/event-stream") by name with q > 0. Wildcards ("* / *", "text/ *") do not count: the
 * transport requires clients to list both types, and the SDKs answer 406 otherwise. Parameters
 * other than q are ignored; matching is case-insensitive. */
int mcp_http_accepts(const char *accept, const char *want);

/* Non-zero when the Content-Type value's media type is want (parameters such as charset are
 * ignored; case-insensitive). */
int mcp_http_media_type_is(const char *content_type, const char *want);

/* Non-zero when s is a session id as the transport allows it: 1 to 256 visible ASCII characters
 * (0x21..0x7E). A backend's Mcp-Session-Id is checked before the gateway stores or sends it. */
int mcp_http_session_id_is_valid(const char *s);

#endif
