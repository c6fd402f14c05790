/* mcp_origin — Origin and Host checks: the Streamable HTTP transport's protection against DNS
 * rebinding.
 *
 * A page on an attacker's name (evil.example) can have that name re-resolved to 127.0.0.1 or
 * to an internal address and then talk to a local or internal MCP server as if it were the
 * same site. The browser still sends that page's origin in Origin and the attacker's name in
 * Host, so the server refuses a present Origin it does not trust (403, as the transport
 * requires) and a Host that is not one of its own names (as the SDKs do).
 *
 * Normalised host form, used by every function below: lower-case ASCII; an IPv6 literal without
 * its brackets and in canonical text form (inet_ntop: "[0:0::1]" and "[::1]" both give "::1");
 * a name without one trailing dot. The trailing dot is dropped because "example.com." is the
 * same DNS name as "example.com" and reaches the same server, so it cannot be used to rebind;
 * keeping it would only refuse legitimate clients. A name is made of labels of letters,
 * digits, '-' and '_' separated by single dots; anything else (spaces, control characters,
 * '%', '@', '/', non-ASCII — IDNs arrive as punycode) makes it malformed.
 *
 * Pure code: APR and the C library only, no httpd headers.
 */
#ifndef MCP_ORIGIN_H
#define MCP_ORIGIN_H

#include <apr_pools.h>
#include <apr_tables.h>

/* The normalised host part of a Host header value or URI authority ("host", "host:port",
 * "[v6]" or "[v6]:port"), allocated in p: "Example.COM:8080" -> "example.com",
 * "[::1]:80" -> "::1". NULL when malformed: NULL or empty, a name that breaks the rules above,
 * an IPv6 literal inet_pton does not accept (zone ids and IPvFuture included), a bare IPv6
 * address without brackets, a port that is empty, not all digits, or above 65535, or anything
 * after the port (a path, userinfo, spaces). */
const char *mcp_origin_host_of(apr_pool_t *p, const char *hostport);

/* Parses an Origin header value in its serialised form "scheme://host[:port]" (RFC 6454: no
 * path, not even "/", no userinfo). Sets *scheme (lower-case), *host (normalised as above) and
 * *port (-1 when absent; a default port is kept as written: "https://a:443" gives 443); any of
 * them may be NULL. The opaque origin "null" parses too: scheme "null", host NULL, port -1.
 * Returns 0, or -1 (and sets nothing) when the value is malformed. Strings are allocated in p.
 * Also the way to validate exact-origin tokens of MCPAllowedOrigins at configuration time. */
int mcp_origin_parse(apr_pool_t *p, const char *origin, const char **scheme, const char **host,
                     int *port);

/* Non-zero when host (normalised, or at least unbracketed, case and one trailing dot do not
 * matter) names this machine's loopback interface: "localhost" and any name under
 * ".localhost" (RFC 6761: resolvers and browsers keep them on loopback, so no attacker can
 * point them elsewhere), 127.0.0.0/8 as a canonical dotted quad, ::1, and ::ffff:127.x.y.z.
 * "localhost.evil.example", "127.0.0.1.evil.example", "0.0.0.0" and non-canonical IPv4 forms
 * ("127.1", "0177.0.0.1", "2130706433" — which some resolvers read as other addresses) are not
 * loopback; browsers send only canonical forms, so refusing the others costs nothing. */
int mcp_origin_is_loopback(const char *host);

/* The Origin rule. origin is the header value (NULL — no Origin header — returns 0: whether an
 * absent Origin is acceptable is the caller's decision; the transport allows it). request_host
 * is the request's Host header value or just its host name (r->hostname; a bare IPv6 address
 * is accepted here), or NULL. rules is an array of const char * tokens as configured in
 * MCPAllowedOrigins (NULL or empty allows nothing), compared case-insensitively:
 *   "*"          any origin, even "null" or garbage
 *   "self"       the origin's host equals the request's host, whatever the scheme and port
 *                (so another web server on a different port of the same host is trusted too)
 *   "localhost"  the origin's host is loopback (mcp_origin_is_loopback)
 *   otherwise    an exact origin "https://app.example.com[:port]": same scheme, host and port,
 *                where a default port (80 for http and ws, 443 for https and wss) equals an
 *                absent one. A token that does not parse as an origin, or is "null", never
 *                matches.
 * Returns 1 when allowed. An origin that does not parse, and "null", are allowed only by "*". */
int mcp_origin_allowed(apr_pool_t *p, const char *origin, const char *request_host,
                       const apr_array_header_t *rules);

/* The Host rule. host_header is the Host header value (NULL or malformed: never allowed).
 * names is an array of const char * entries (NULL or empty allows nothing), each one of
 *   "*"                  any well-formed host
 *   "localhost"          a loopback host (mcp_origin_is_loopback)
 *   "*.example.com"      any host strictly under example.com, at any depth; not example.com
 *                        itself (list it too if wanted)
 *   a host name or address ("example.com", "192.0.2.1", "::1" or "[::1]"), normalised like the
 *                        Host before comparing (a port in it is ignored)
 * Only host parts are compared: the port of the Host header is ignored. Entries that are
 * malformed never match. Returns 1 when allowed. */
int mcp_origin_host_allowed(apr_pool_t *p, const char *host_header,
                            const apr_array_header_t *names);

#endif
