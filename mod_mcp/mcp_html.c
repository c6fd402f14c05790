/* mcp_html — see mcp_html.h. */
#include <stdarg.h>
#include <string.h>

#include <apr_strings.h>

#include "mcp_html.h"
#include "mcp_text.h"

struct mcp_html_t {
    apr_pool_t *pool;
    char       *buf;
    apr_size_t  len, cap;
};

mcp_html_t *mcp_html_create(apr_pool_t *p)
{
    mcp_html_t *h = apr_pcalloc(p, sizeof(*h));

    h->pool = p;
    h->cap = 16384;
    h->buf = apr_palloc(p, h->cap);
    h->buf[0] = '\0';
    return h;
}

apr_pool_t *mcp_html_pool(const mcp_html_t *h)
{
    return h->pool;
}

static void append(mcp_html_t *h, const char *s, apr_size_t n)
{
    if (h->len + n + 1 > h->cap) {
        apr_size_t cap = h->cap * 2;
        char *buf;

        while (h->len + n + 1 > cap) {
            cap *= 2;
        }
        /* The old buffer stays in the pool until the request ends: doubling keeps the waste
         * at most the size of the final document. */
        buf = apr_palloc(h->pool, cap);
        memcpy(buf, h->buf, h->len);
        h->buf = buf;
        h->cap = cap;
    }
    memcpy(h->buf + h->len, s, n);
    h->len += n;
    h->buf[h->len] = '\0';
}

void mcp_html_raw(mcp_html_t *h, const char *markup)
{
    append(h, markup, strlen(markup));
}

void mcp_html_rawf(mcp_html_t *h, const char *fmt, ...)
{
    va_list ap;
    const char *s;

    va_start(ap, fmt);
    s = apr_pvsprintf(h->pool, fmt, ap);
    va_end(ap);
    append(h, s, strlen(s));
}

void mcp_html_textn(mcp_html_t *h, const char *text, apr_size_t n)
{
    const char *safe, *s;
    apr_size_t start = 0, i;

    if (!text) {
        return;
    }
    /* Valid UTF-8 without control characters first (\xNN for what is not), then the entities. */
    safe = mcp_text_quote(h->pool, text, n, 0);
    for (s = safe, i = 0; s[i]; i++) {
        const char *entity;

        switch (s[i]) {
        case '&': entity = "&amp;"; break;
        case '<': entity = "&lt;"; break;
        case '>': entity = "&gt;"; break;
        case '"': entity = "&quot;"; break;
        case '\'': entity = "&#39;"; break;
        default: continue;
        }
        append(h, s + start, i - start);
        append(h, entity, strlen(entity));
        start = i + 1;
    }
    append(h, s + start, i - start);
}

void mcp_html_text(mcp_html_t *h, const char *text)
{
    if (text) {
        mcp_html_textn(h, text, strlen(text));
    }
}

const char *mcp_html_get(mcp_html_t *h, apr_size_t *len)
{
    if (len) {
        *len = h->len;
    }
    return h->buf;
}
