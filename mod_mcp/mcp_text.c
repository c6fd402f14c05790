/* mcp_text — see mcp_text.h. */
#include <string.h>

#include <apr_strings.h>

#include "mcp_text.h"

/* The length of the well-formed UTF-8 character at s (at most n bytes available), or 0. */
static apr_size_t char_len(const unsigned char *s, apr_size_t n)
{
    unsigned char c = s[0];
    apr_size_t len, i;
    unsigned char lo = 0x80, hi = 0xBF;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    }
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;   /* no overlong forms        */
        hi = c == 0xED ? 0x9F : 0xBF;   /* no surrogates (U+D800..) */
    }
    else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;   /* no overlong forms        */
        hi = c == 0xF4 ? 0x8F : 0xBF;   /* nothing above U+10FFFF   */
    }
    else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) {
        return 0;
    }
    for (i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF) {
            return 0;
        }
    }
    return len;
}

int mcp_text_jsonb_plain(const char *s, apr_size_t len)
{
    apr_size_t i, digits = 0;

    if (!s || len >= ((apr_size_t)64 << 20)) {
        return 0;
    }
    for (i = 0; i < len; i++) {
        char c = s[i];

        if (c >= '0' && c <= '9') {
            if (++digits > 100) {
                return 0;
            }
            continue;
        }
        if ((c == 'e' || c == 'E') && digits > 0) {
            return 0;
        }
        if (c == '\\' && i + 1 < len && s[i + 1] == 'u') {
            return 0;
        }
        if (c == '\\') {
            i++;   /* an escaped character: never the start of another escape */
        }
        digits = 0;
    }
    return 1;
}

int mcp_text_is_utf8(const char *s, apr_size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    apr_size_t i = 0, k;

    while (i < len) {
        if (!(k = char_len(u + i, len - i))) {
            return 0;
        }
        i += k;
    }
    return 1;
}

const char *mcp_text_quote(apr_pool_t *p, const char *s, apr_size_t len, apr_size_t max)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    apr_size_t i = 0, o = 0, cap;
    char *out;

    if (!s) {
        return "";
    }
    cap = (max && max < len * 4 ? max : len * 4) + 4;
    out = apr_palloc(p, cap);
    while (i < len) {
        apr_size_t k = char_len(u + i, len - i);
        int escape = k == 0 || u[i] < 0x20 || u[i] == 0x7f;
        apr_size_t need = escape ? 4 : k;

        if (max && o + need > max) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (escape) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[u[i] >> 4];
            out[o++] = hex[u[i] & 0xf];
            i++;
        }
        else {
            memcpy(out + o, u + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = '\0';
    return out;
}
