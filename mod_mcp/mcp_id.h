/* mcp_id — identifiers the gateway issues: session ids and SSE event ids.
 *
 * Pure code: the caller supplies random bytes (mod_mcp uses apr_generate_random_bytes), so the
 * codecs are deterministic and unit testable.
 */
#ifndef MCP_ID_H
#define MCP_ID_H

#include <apr_pools.h>
#include <apr.h>

/* Number of random bytes in a session id: 192 bits. */
#define MCP_ID_SESSION_RANDOM_BYTES 24
/* Length of the encoded session id (base64url, no padding). */
#define MCP_ID_SESSION_LEN 32

/* Encodes n random bytes as base64url without padding (alphabet A-Z a-z 0-9 - _), allocated in p
 * (RFC 4648 section 5; n bytes give ceil(4n/3) characters, so 24 bytes give 32).
 * Every character is visible ASCII (0x21..0x7E) as the MCP spec requires of session ids. */
char *mcp_id_session_encode(apr_pool_t *p, const unsigned char *bytes, apr_size_t n);

/* Non-zero when s looks like a session id this gateway could have issued: exactly
 * MCP_ID_SESSION_LEN characters from the base64url alphabet. Used to reject garbage before any
 * database look-up. */
int mcp_id_session_is_wellformed(const char *s);

/* Session ids are bearer tokens when no authentication is configured: logs carry this tag
 * instead, the first 8 hex digits of the id's MD5 (32 bits: enough to tell a log's sessions
 * apart and to find one by its id, nothing to recover the id from). MD5 because PostgreSQL
 * computes it without an extension: `left(md5(id), 8)` is the same tag, which the console and
 * an operator's SQL find a session by (mcp.sessions has an index on md5(id)). Allocated in p;
 * "-" for NULL. Also used for the backend's session ids. */
#define MCP_ID_TAG_LEN 8
const char *mcp_id_tag(apr_pool_t *p, const char *id);

/* Event ids identify their stream and their position in it: "<stream>-<seq>", both decimal,
 * stream >= 1, seq >= 0, no sign, no leading zeros (except "0" itself).
 * Returns NULL when stream_id < 1 or seq < 0 (no valid event id exists for them). */
char *mcp_id_event_format(apr_pool_t *p, apr_int64_t stream_id, apr_int64_t seq);

/* Strict parse of an event id made by mcp_id_event_format. Returns 0 and sets *stream_id and *seq
 * on success; -1 on anything else (NULL, empty, junk, signs, whitespace, leading zeros,
 * stream 0, int64 overflow, trailing bytes), leaving *stream_id and *seq untouched.
 * Either output pointer may be NULL. Accepts exactly the strings mcp_id_event_format makes. */
int mcp_id_event_parse(const char *s, apr_int64_t *stream_id, apr_int64_t *seq);

#endif
