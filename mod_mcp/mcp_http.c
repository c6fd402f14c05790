/* mcp_http — see mcp_http.h. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mcp_http.h"

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    return s;
}

/* Length of s[0..n) without trailing blanks. */
static size_t trim_len(const char *s, size_t n)
{
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) {
        n--;
    }
    return n;
}

/* The media type at s (length n, trimmed) is want. */
static int is_media_type(const char *s, size_t n, const char *want)
{
    return n == strlen(want) && strncasecmp(s, want, n) == 0;
}

/* q value of the parameters in [params, end): 1.0 unless a q parameter says otherwise. */
static double quality(const char *params, const char *end)
{
    const char *p = params;

    while (p < end) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *next = semi ? semi + 1 : end;
        p = skip_ws(p);
        if ((*p == 'q' || *p == 'Q') && p + 1 < next && p[1] == '=') {
            return strtod(p + 2, NULL);
        }
        p = next;
    }
    return 1.0;
}

int mcp_http_accepts(const char *accept, const char *want)
{
    const char *p = accept;

    while (p && *p) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *semi;
        size_t n;

        p = skip_ws(p);
        semi = memchr(p, ';', (size_t)(end - p));
        n = trim_len(p, (size_t)((semi ? semi : end) - p));
        if (is_media_type(p, n, want) && (!semi || quality(semi + 1, end) > 0.0)) {
            return 1;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

int mcp_http_media_type_is(const char *content_type, const char *want)
{
    const char *p, *semi;
    size_t n;

    if (!content_type) {
        return 0;
    }
    p = skip_ws(content_type);
    semi = strchr(p, ';');
    n = trim_len(p, semi ? (size_t)(semi - p) : strlen(p));
    return is_media_type(p, n, want);
}

int mcp_http_session_id_is_valid(const char *s)
{
    size_t n = 0;

    if (!s) {
        return 0;
    }
    for (; s[n]; n++) {
        if ((unsigned char)s[n] < 0x21 || (unsigned char)s[n] > 0x7e || n >= 256) {
            return 0;
        }
    }
    return n > 0;
}
