/* mcp_sse — Server-Sent Events encoder and incremental parser. See mcp_sse.h. */

#include "mcp_sse.h"

#include <apr_strings.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- encoder ------------------------------------------------------------------------------ */

/* Length of the line starting at s (up to CR, LF or NUL). */
static apr_size_t line_span(const char *s)
{
    return strcspn(s, "\r\n");
}

/* Advances past one line ending (CRLF, CR or LF) at s, if any. */
static const char *skip_eol(const char *s)
{
    if (*s == '\r')
        return s[1] == '\n' ? s + 2 : s + 1;
    if (*s == '\n')
        return s + 1;
    return s;
}

/* Bytes needed for "name: value\n" (or "name:\n" when the value is empty). */
static apr_size_t field_len(apr_size_t name_len, apr_size_t value_len)
{
    return name_len + 1 + (value_len ? 1 + value_len : 0) + 1;
}

static char *put_field(char *out, const char *name, apr_size_t name_len,
                       const char *value, apr_size_t value_len)
{
    memcpy(out, name, name_len);
    out += name_len;
    *out++ = ':';
    if (value_len) {
        *out++ = ' ';
        memcpy(out, value, value_len);
        out += value_len;
    }
    *out++ = '\n';
    return out;
}

char *mcp_sse_event_format(apr_pool_t *p, const char *id, const char *event,
                           const char *data, long retry_ms, apr_size_t *len_out)
{
    char retry_buf[32];
    apr_size_t id_len = 0, event_len = 0, retry_len = 0, total = 1; /* final blank line */
    char *buf, *out;

    if (id) {
        id_len = strlen(id);
        if (line_span(id) != id_len)
            return NULL;
        total += field_len(2, id_len);
    }
    if (event) {
        event_len = strlen(event);
        if (line_span(event) != event_len)
            return NULL;
        total += field_len(5, event_len);
    }
    if (retry_ms >= 0) {
        retry_len = (apr_size_t)snprintf(retry_buf, sizeof(retry_buf), "%ld", retry_ms);
        total += field_len(5, retry_len);
    }
    if (data) {
        const char *s = data;
        for (;;) {
            apr_size_t n = line_span(s);
            total += field_len(4, n);
            s += n;
            if (!*s)
                break;
            s = skip_eol(s);
        }
    }

    out = buf = apr_palloc(p, total + 1);
    if (id)
        out = put_field(out, "id", 2, id, id_len);
    if (event)
        out = put_field(out, "event", 5, event, event_len);
    if (retry_ms >= 0)
        out = put_field(out, "retry", 5, retry_buf, retry_len);
    if (data) {
        const char *s = data;
        for (;;) {
            apr_size_t n = line_span(s);
            out = put_field(out, "data", 4, s, n);
            s += n;
            if (!*s)
                break;
            s = skip_eol(s);
        }
    }
    *out++ = '\n';
    *out = '\0';
    if (len_out)
        *len_out = total;
    return buf;
}

char *mcp_sse_comment_format(apr_pool_t *p, const char *text, apr_size_t *len_out)
{
    apr_size_t n = text ? strlen(text) : 0, i, total;
    char *buf, *out;

    total = field_len(0, n) + 1;
    out = buf = apr_palloc(p, total + 1);
    out = put_field(out, "", 0, text, n);
    for (i = 0; i < n; i++) {
        if (buf[2 + i] == '\r' || buf[2 + i] == '\n')
            buf[2 + i] = ' ';
    }
    *out++ = '\n';
    *out = '\0';
    if (len_out)
        *len_out = total;
    return buf;
}

/* ---- incremental parser ------------------------------------------------------------------ */

/* A growable heap buffer. Capacity never exceeds limit + 1 (room for a terminating NUL). */
typedef struct sse_buf_t {
    char      *p;
    apr_size_t len;
    apr_size_t cap;
} sse_buf_t;

struct mcp_sse_parser_t {
    apr_size_t        max;          /* max_event_bytes                                      */
    mcp_sse_event_fn *fn;
    void             *baton;
    int               err;          /* sticky non-zero result                               */

    int               bom_done;     /* the BOM check at stream start is over                */
    int               bom_pos;      /* bytes of a BOM matched so far                        */
    int               skip_lf;      /* the last line ended with CR: an LF next is part of it */
    int               discarding;   /* the current (partial) line is a comment              */

    sse_buf_t         line;         /* current partial line (only when split across feeds)  */
    sse_buf_t         data;         /* data buffer: values each followed by '\n'             */
    sse_buf_t         type;         /* event type buffer                                    */
    sse_buf_t         id_pending;   /* id field of the current block                         */
    sse_buf_t         last_id;      /* last event id string (committed at a blank line)      */
    int               have_pending; /* id_pending holds this block's id                      */
    int               have_last_id; /* last_id is set                                        */
    long              block_retry;  /* retry of the current block, -1 when none              */
    long              retry;        /* last valid retry in the stream, -1 when none          */
    apr_uint64_t      consumed;     /* bytes fed so far                                      */
    apr_uint64_t      event_end;    /* consumed at the end of the last dispatched event      */
    int               dispatched;   /* dispatch() delivered an event (consume() clears it)   */
};

static const unsigned char utf8_bom[3] = { 0xEF, 0xBB, 0xBF };

/* A buffer emptied with more than this is given back: a long-lived stream that once carried a
 * large message does not hold its size while it waits for the next one. */
#define SSE_BUF_KEEP 1024

static void buf_shrink(sse_buf_t *b)
{
    if (b->len == 0 && b->cap > SSE_BUF_KEEP) {
        free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
}

/* Makes room for need bytes (need <= parser->max + 1). Returns 0 or MCP_SSE_ERR_NOMEM. */
static int buf_reserve(const mcp_sse_parser_t *ps, sse_buf_t *b, apr_size_t need)
{
    apr_size_t cap;
    char *np;

    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 64;
    while (cap < need && cap <= ((apr_size_t)-1) / 2)
        cap *= 2;
    if (cap > ps->max + 1)
        cap = ps->max + 1;
    if (cap < need)
        cap = need;
    np = realloc(b->p, cap);
    if (!np)
        return MCP_SSE_ERR_NOMEM;
    b->p = np;
    b->cap = cap;
    return 0;
}

/* Sets b to the NUL-terminated copy of s[0..n). */
static int buf_set(const mcp_sse_parser_t *ps, sse_buf_t *b, const char *s, apr_size_t n)
{
    int rc = buf_reserve(ps, b, n + 1);
    if (rc)
        return rc;
    if (n)
        memcpy(b->p, s, n);
    b->p[n] = '\0';
    b->len = n;
    return 0;
}

static apr_status_t parser_cleanup(void *data)
{
    mcp_sse_parser_t *ps = data;
    free(ps->line.p);
    free(ps->data.p);
    free(ps->type.p);
    free(ps->id_pending.p);
    free(ps->last_id.p);
    memset(&ps->line, 0, sizeof(ps->line));
    memset(&ps->data, 0, sizeof(ps->data));
    memset(&ps->type, 0, sizeof(ps->type));
    memset(&ps->id_pending, 0, sizeof(ps->id_pending));
    memset(&ps->last_id, 0, sizeof(ps->last_id));
    return APR_SUCCESS;
}

mcp_sse_parser_t *mcp_sse_parser_create(apr_pool_t *p, apr_size_t max_event_bytes,
                                        mcp_sse_event_fn *fn, void *baton)
{
    mcp_sse_parser_t *ps = apr_pcalloc(p, sizeof(*ps));
    /* max + 1 must not overflow */
    ps->max = max_event_bytes < (apr_size_t)-2 ? max_event_bytes : (apr_size_t)-2;
    ps->fn = fn;
    ps->baton = baton;
    ps->block_retry = -1;
    ps->retry = -1;
    apr_pool_cleanup_register(p, ps, parser_cleanup, apr_pool_cleanup_null);
    return ps;
}

static int fail(mcp_sse_parser_t *ps, int rc)
{
    ps->err = rc;
    return rc;
}

/* Blank line: dispatch the block's event (if it has data) and start a new block. */
static int dispatch(mcp_sse_parser_t *ps)
{
    mcp_sse_event_t ev;
    int rc, id_set = ps->have_pending;

    if (ps->have_pending) {
        /* commit this block's id: swap instead of copying */
        sse_buf_t tmp = ps->last_id;
        ps->last_id = ps->id_pending;
        ps->id_pending = tmp;
        ps->have_last_id = 1;
        ps->have_pending = 0;
    }
    if (ps->data.len == 0) {
        /* no data field: nothing to dispatch */
        ps->type.len = 0;
        ps->block_retry = -1;
        return 0;
    }
    ps->data.p[ps->data.len - 1] = '\0';   /* drop the final '\n' */
    ev.id = ps->have_last_id ? ps->last_id.p : NULL;
    ev.id_set = id_set;
    ev.event = ps->type.len ? ps->type.p : "message";
    ev.data = ps->data.p;
    ev.data_len = ps->data.len - 1;
    ev.retry_ms = ps->block_retry;

    ps->data.len = 0;
    ps->type.len = 0;
    ps->block_retry = -1;
    ps->dispatched = 1;

    rc = ps->fn(ps->baton, &ev);
    buf_shrink(&ps->data);
    return rc ? fail(ps, rc) : 0;
}

/* "retry" value: only ASCII digits, at least one, fitting in a long; else -1. */
static long parse_retry(const char *v, apr_size_t n)
{
    long r = 0;
    apr_size_t i;

    if (n == 0)
        return -1;
    for (i = 0; i < n; i++) {
        int d;
        if (v[i] < '0' || v[i] > '9')
            return -1;
        d = v[i] - '0';
        if (r > (LONG_MAX - d) / 10)
            return -1;
        r = r * 10 + d;
    }
    return r;
}

/* One complete line, without its line ending. */
static int process_line(mcp_sse_parser_t *ps, const char *line, apr_size_t n)
{
    const char *colon, *value;
    apr_size_t name_len, vlen;
    int rc;

    if (n == 0)
        return dispatch(ps);
    if (line[0] == ':')
        return 0;                                   /* comment */
    if (n > ps->max)
        return fail(ps, MCP_SSE_ERR_TOO_LARGE);

    colon = memchr(line, ':', n);
    if (colon) {
        name_len = (apr_size_t)(colon - line);
        value = colon + 1;
        vlen = n - name_len - 1;
        if (vlen && *value == ' ') {
            value++;
            vlen--;
        }
    }
    else {
        name_len = n;
        value = line + n;
        vlen = 0;
    }

    if (name_len == 4 && memcmp(line, "data", 4) == 0) {
        if (vlen + 1 > ps->max - ps->data.len)
            return fail(ps, MCP_SSE_ERR_TOO_LARGE);
        rc = buf_reserve(ps, &ps->data, ps->data.len + vlen + 1);
        if (rc)
            return fail(ps, rc);
        if (vlen)
            memcpy(ps->data.p + ps->data.len, value, vlen);
        ps->data.len += vlen;
        ps->data.p[ps->data.len++] = '\n';
    }
    else if (name_len == 5 && memcmp(line, "event", 5) == 0) {
        rc = buf_set(ps, &ps->type, value, vlen);
        if (rc)
            return fail(ps, rc);
    }
    else if (name_len == 2 && memcmp(line, "id", 2) == 0) {
        if (!memchr(value, '\0', vlen)) {
            rc = buf_set(ps, &ps->id_pending, value, vlen);
            if (rc)
                return fail(ps, rc);
            ps->have_pending = 1;
        }
    }
    else if (name_len == 5 && memcmp(line, "retry", 5) == 0) {
        long r = parse_retry(value, vlen);
        if (r >= 0) {
            ps->block_retry = r;
            ps->retry = r;
        }
    }
    /* any other field is ignored */
    return 0;
}

/* Adds s[0..n) to the current partial line. */
static int line_append(mcp_sse_parser_t *ps, const char *s, apr_size_t n)
{
    int rc;

    if (n == 0 || ps->discarding)
        return 0;
    if (ps->line.len == 0 && s[0] == ':') {
        ps->discarding = 1;                         /* a comment: never buffered */
        return 0;
    }
    if (n > ps->max - ps->line.len)
        return fail(ps, MCP_SSE_ERR_TOO_LARGE);
    rc = buf_reserve(ps, &ps->line, ps->line.len + n);
    if (rc)
        return fail(ps, rc);
    memcpy(ps->line.p + ps->line.len, s, n);
    ps->line.len += n;
    return 0;
}

/* Bytes after the BOM check. */
static int consume(mcp_sse_parser_t *ps, const char *s, apr_size_t n)
{
    apr_uint64_t base = ps->consumed;
    const char *start = s;

    ps->consumed += n;
    while (n > 0) {
        apr_size_t k;
        int rc;

        if (ps->skip_lf) {
            ps->skip_lf = 0;
            if (s[0] == '\n') {
                s++;
                n--;
                continue;
            }
        }
        for (k = 0; k < n && s[k] != '\n' && s[k] != '\r'; k++)
            ;
        if (k == n)
            return line_append(ps, s, n);

        if (ps->discarding) {
            ps->discarding = 0;                     /* end of a comment */
            rc = 0;
        }
        else if (ps->line.len == 0) {
            rc = process_line(ps, s, k);            /* whole line in this feed: no copy */
        }
        else {
            rc = line_append(ps, s, k);
            if (rc == 0) {
                rc = process_line(ps, ps->line.p, ps->line.len);
                ps->line.len = 0;
                buf_shrink(&ps->line);
            }
        }
        if (ps->dispatched) {
            ps->dispatched = 0;
            ps->event_end = base + (apr_uint64_t)(s + k + 1 - start);
        }
        if (rc)
            return rc;
        ps->skip_lf = s[k] == '\r';
        s += k + 1;
        n -= k + 1;
    }
    return 0;
}

int mcp_sse_parser_feed(mcp_sse_parser_t *ps, const char *buf, apr_size_t len)
{
    apr_size_t i = 0;

    if (ps->err)
        return ps->err;
    while (!ps->bom_done && i < len) {
        if ((unsigned char)buf[i] == utf8_bom[ps->bom_pos]) {
            i++;
            ps->consumed++;
            if (++ps->bom_pos == 3)
                ps->bom_done = 1;
        }
        else {
            /* not a BOM after all: the bytes held back are ordinary stream bytes */
            int rc;
            ps->bom_done = 1;
            ps->consumed -= (apr_uint64_t)ps->bom_pos;   /* counted when they were held back */
            rc = consume(ps, (const char *)utf8_bom, (apr_size_t)ps->bom_pos);
            if (rc)
                return rc;
        }
    }
    return consume(ps, buf + i, len - i);
}

int mcp_sse_parser_finish(mcp_sse_parser_t *ps)
{
    ps->line.len = 0;
    ps->discarding = 0;
    ps->skip_lf = 0;
    ps->data.len = 0;
    ps->type.len = 0;
    ps->have_pending = 0;
    ps->block_retry = -1;
    ps->bom_done = 0;
    ps->bom_pos = 0;
    return 0;
}

const char *mcp_sse_parser_last_event_id(const mcp_sse_parser_t *ps)
{
    return ps->have_last_id ? ps->last_id.p : NULL;
}

long mcp_sse_parser_retry_ms(const mcp_sse_parser_t *ps)
{
    return ps->retry;
}

apr_uint64_t mcp_sse_parser_idle_bytes(const mcp_sse_parser_t *ps)
{
    return ps->consumed - ps->event_end;
}

int mcp_sse_parser_in_event(const mcp_sse_parser_t *ps)
{
    return ps->data.len > 0 || (ps->line.len > 0 && !ps->discarding);
}
