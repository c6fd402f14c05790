/* mcp_lines — newline framing with a bound on a line's length. See mcp_lines.h. */

#include "mcp_lines.h"

#include <stdlib.h>
#include <string.h>

struct mcp_lines_t {
    size_t max_line;
    int    mode;
    int    error;        /* sticky MCP_LINES_* error, 0 while fine */
    int    skipping;     /* MCP_LINES_CUT: the rest of a cut line is being skipped */
    char  *buf;          /* the beginning of the current line, when a feed ended inside it */
    size_t len;
    size_t cap;
};

mcp_lines_t *mcp_lines_create(size_t max_line, int mode)
{
    mcp_lines_t *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->max_line = max_line ? max_line : 1;
    l->mode = mode;
    return l;
}

void mcp_lines_destroy(mcp_lines_t *l)
{
    if (!l)
        return;
    free(l->buf);
    free(l);
}

/* Appends to the kept beginning; the buffer grows by doubling up to max_line (+1 for a CR that
 * may turn out to precede the LF). */
static int keep(mcp_lines_t *l, const char *p, size_t n)
{
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 256;
        char *b;
        while (cap < l->len + n)
            cap *= 2;
        if (cap > l->max_line + 1)
            cap = l->max_line + 1;
        b = realloc(l->buf, cap);
        if (!b)
            return MCP_LINES_NOMEM;
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, p, n);
    l->len += n;
    return 0;
}

/* A buffer grown for one long line is not kept for the short ones after it: a process that
 * wrote one 16 MiB message would otherwise hold 16 MiB for the rest of its life. */
static void shrink(mcp_lines_t *l)
{
    if (l->cap > 65536 && !l->len) {
        free(l->buf);
        l->buf = NULL;
        l->cap = 0;
    }
}

/* Hands over a line of n bytes at p (its CR, if any, still there). */
static int deliver(mcp_lines_t *l, const char *p, size_t n, mcp_lines_fn *fn, void *baton)
{
    if (n && p[n - 1] == '\r')
        n--;
    if (n > l->max_line) {
        if (l->mode == MCP_LINES_REFUSE)
            return l->error = MCP_LINES_TOO_LONG;
        return fn(baton, p, l->max_line, 1);
    }
    return fn(baton, p, n, 0);
}

int mcp_lines_feed(mcp_lines_t *l, const char *buf, size_t len, mcp_lines_fn *fn, void *baton)
{
    const char *p = buf, *end = buf + len;
    int rc;

    if (l->error)
        return l->error;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *start = p;
        size_t n = (size_t)((nl ? nl : end) - p), kept;

        if (l->skipping) {
            l->skipping = !nl;
            p += n + (nl ? 1 : 0);
            continue;
        }
        p += n + (nl ? 1 : 0);
        if (nl && !l->len) {
            if ((rc = deliver(l, start, n, fn, baton)) != 0)
                return rc;
            continue;
        }
        /* Over the bound even if a CR ends it: refused, or its head handed over now and the
         * rest skipped, so that no more than max_line + 1 bytes are ever kept. */
        if (l->len + n > l->max_line + 1) {
            if (l->mode == MCP_LINES_REFUSE)
                return l->error = MCP_LINES_TOO_LONG;
            if (l->len < l->max_line && (rc = keep(l, start, l->max_line - l->len)) != 0)
                return l->error = rc;
            l->len = 0;
            l->skipping = !nl;
            rc = fn(baton, l->buf, l->max_line, 1);
            shrink(l);
            if (rc != 0)
                return rc;
            continue;
        }
        if ((rc = keep(l, start, n)) != 0)
            return l->error = rc;
        if (!nl)
            break;                         /* the line goes on in the next feed */
        kept = l->len;
        l->len = 0;
        rc = deliver(l, l->buf, kept, fn, baton);
        shrink(l);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int mcp_lines_finish(mcp_lines_t *l, mcp_lines_fn *fn, void *baton)
{
    size_t kept = l->len;
    int rc;

    if (l->error || l->skipping || !kept)
        return l->error;
    l->len = 0;
    rc = deliver(l, l->buf, kept, fn, baton);
    shrink(l);
    return rc;
}

size_t mcp_lines_pending(const mcp_lines_t *l)
{
    return l->len;
}
