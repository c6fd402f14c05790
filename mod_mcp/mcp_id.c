/* mcp_id — session ids and SSE event ids. See mcp_id.h. */

#include "mcp_id.h"

#include <apr_md5.h>
#include <apr_strings.h>

#include <string.h>

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

char *mcp_id_session_encode(apr_pool_t *p, const unsigned char *bytes, apr_size_t n)
{
    apr_size_t i, full = n / 3 * 3, rem = n - full;
    char *out = apr_palloc(p, n / 3 * 4 + (rem ? rem + 1 : 0) + 1), *o = out;

    for (i = 0; i < full; i += 3) {
        unsigned long v = ((unsigned long)bytes[i] << 16) | ((unsigned long)bytes[i + 1] << 8)
                          | bytes[i + 2];
        *o++ = b64url[(v >> 18) & 63];
        *o++ = b64url[(v >> 12) & 63];
        *o++ = b64url[(v >> 6) & 63];
        *o++ = b64url[v & 63];
    }
    if (rem) {
        unsigned long v = (unsigned long)bytes[i] << 16;
        if (rem == 2)
            v |= (unsigned long)bytes[i + 1] << 8;
        *o++ = b64url[(v >> 18) & 63];
        *o++ = b64url[(v >> 12) & 63];
        if (rem == 2)
            *o++ = b64url[(v >> 6) & 63];
    }
    *o = '\0';
    return out;
}

static int is_b64url(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
           || c == '-' || c == '_';
}

int mcp_id_session_is_wellformed(const char *s)
{
    apr_size_t i;

    if (!s)
        return 0;
    for (i = 0; i < MCP_ID_SESSION_LEN; i++) {
        if (!is_b64url((unsigned char)s[i]))
            return 0;                   /* also stops at a NUL before the expected length */
    }
    return s[MCP_ID_SESSION_LEN] == '\0';
}

const char *mcp_id_tag(apr_pool_t *p, const char *id)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char digest[APR_MD5_DIGESTSIZE];
    char *tag;
    int i;

    if (!id)
        return "-";
    apr_md5(digest, id, strlen(id));
    tag = apr_palloc(p, MCP_ID_TAG_LEN + 1);
    for (i = 0; i < MCP_ID_TAG_LEN / 2; i++) {
        tag[2 * i] = hex[digest[i] >> 4];
        tag[2 * i + 1] = hex[digest[i] & 15];
    }
    tag[MCP_ID_TAG_LEN] = '\0';
    return tag;
}

char *mcp_id_event_format(apr_pool_t *p, apr_int64_t stream_id, apr_int64_t seq)
{
    if (stream_id < 1 || seq < 0)
        return NULL;
    return apr_psprintf(p, "%" APR_INT64_T_FMT "-%" APR_INT64_T_FMT, stream_id, seq);
}

/* Parses a canonical non-negative decimal at *sp (no sign, no leading zero unless the number is
 * "0", no overflow) and advances *sp past it. Returns 0 or -1. */
static int parse_dec(const char **sp, apr_int64_t *out)
{
    const char *s = *sp;
    apr_int64_t v = 0;

    if (*s < '0' || *s > '9')
        return -1;
    if (*s == '0' && s[1] >= '0' && s[1] <= '9')
        return -1;                      /* leading zero */
    for (; *s >= '0' && *s <= '9'; s++) {
        int d = *s - '0';
        if (v > (APR_INT64_MAX - d) / 10)
            return -1;                  /* overflow */
        v = v * 10 + d;
    }
    *sp = s;
    *out = v;
    return 0;
}

int mcp_id_event_parse(const char *s, apr_int64_t *stream_id, apr_int64_t *seq)
{
    apr_int64_t a, b;

    if (!s)
        return -1;
    if (parse_dec(&s, &a) || *s++ != '-' || parse_dec(&s, &b) || *s != '\0')
        return -1;
    if (a < 1)
        return -1;
    if (stream_id)
        *stream_id = a;
    if (seq)
        *seq = b;
    return 0;
}
