/* mcp_reqhead — incremental HTTP/1.1 request head parser. See mcp_reqhead.h. */

#include "mcp_reqhead.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct field_t {
    const char *name;
    const char *value;
} field_t;

struct mcp_reqhead_t {
    size_t      max_head;
    size_t      max_fields;
    int         state;          /* MCP_REQHEAD_MORE, _DONE or _ERROR */
    size_t      len;            /* bytes kept in buf */
    size_t      scan;           /* where the search for the end of the head resumes */
    const char *method;
    const char *target;
    int         minor;
    long long   content_length;
    int         transfer_encoding;
    size_t      nfields;
    field_t    *fields;         /* max_fields entries */
    int         status;
    char        error[160];
    char       *buf;            /* max_head + 1 bytes (room for a NUL at the end) */
};

mcp_reqhead_t *mcp_reqhead_create(size_t max_head, size_t max_fields)
{
    mcp_reqhead_t *h = calloc(1, sizeof(*h));

    if (!h)
        return NULL;
    h->max_head = max_head;
    h->max_fields = max_fields;
    h->buf = malloc(max_head + 1);
    h->fields = calloc(max_fields ? max_fields : 1, sizeof(field_t));
    if (!h->buf || !h->fields) {
        mcp_reqhead_destroy(h);
        return NULL;
    }
    mcp_reqhead_reset(h);
    return h;
}

void mcp_reqhead_destroy(mcp_reqhead_t *h)
{
    if (!h)
        return;
    free(h->buf);
    free(h->fields);
    free(h);
}

void mcp_reqhead_reset(mcp_reqhead_t *h)
{
    h->state = MCP_REQHEAD_MORE;
    h->len = h->scan = 0;
    h->method = h->target = NULL;
    h->minor = 0;
    h->content_length = -1;
    h->transfer_encoding = 0;
    h->nfields = 0;
    h->status = 0;
    h->error[0] = '\0';
}

static int fail(mcp_reqhead_t *h, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(h->error, sizeof(h->error), fmt, ap);
    va_end(ap);
    h->status = status;
    h->state = MCP_REQHEAD_ERROR;
    return MCP_REQHEAD_ERROR;
}

/* RFC 9110 section 5.6.2: tchar. */
static int is_tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Visible ASCII, space, tab and obs-text: what a field value may hold. */
static int is_value_char(unsigned char c)
{
    return c == '\t' || c >= 0x20 ? c != 0x7f : 0;
}

/* Cuts the line starting at *p (ending in LF, maybe CRLF) and advances *p past it. Returns the
 * line, NUL-terminated in place, or NULL when a CR stands anywhere but before the LF. */
static char *take_line(char **p)
{
    char *line = *p, *nl = strchr(line, '\n');
    char *cr;

    *p = nl + 1;
    if (nl > line && nl[-1] == '\r')
        nl[-1] = '\0';
    *nl = '\0';
    cr = strchr(line, '\r');
    return cr ? NULL : line;
}

static int parse_request_line(mcp_reqhead_t *h, char *line)
{
    char *sp1 = strchr(line, ' '), *sp2, *v;
    char *s;

    if (!sp1 || sp1 == line)
        return fail(h, 400, "the request line has no method followed by one space");
    *sp1 = '\0';
    for (s = line; *s; s++) {
        if (!is_tchar((unsigned char)*s))
            return fail(h, 400, "the method has a character that a token cannot hold");
    }
    sp2 = strchr(sp1 + 1, ' ');
    if (!sp2 || sp2 == sp1 + 1)
        return fail(h, 400, "the request line has no request-target followed by one space");
    *sp2 = '\0';
    for (s = sp1 + 1; *s; s++) {
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s == 0x7f)
            return fail(h, 400, "the request-target has a control character or a space");
    }
    v = sp2 + 1;
    if (strncmp(v, "HTTP/", 5) != 0 || !isdigit((unsigned char)v[5]) || v[6] != '.'
        || !isdigit((unsigned char)v[7]) || v[8] != '\0')
        return fail(h, 400, "the request line does not end with a version HTTP/<digit>.<digit>");
    if (v[5] != '1')
        return fail(h, 505, "HTTP/%c.%c is not served: only HTTP/1.x", v[5], v[7]);
    h->method = line;
    h->target = sp1 + 1;
    h->minor = v[7] - '0';
    return 0;
}

/* Content-Length: digits only; repeated fields must agree (RFC 9112 section 6.3 item 5 lets a
 * recipient take a list of identical values, but one field per value is all libcurl sends). */
static int take_content_length(mcp_reqhead_t *h, const char *value)
{
    long long n = 0;
    const char *s;

    if (!*value)
        return fail(h, 400, "Content-Length is empty");
    for (s = value; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return fail(h, 400, "Content-Length \"%.40s\" is not a number of bytes", value);
        if (s - value >= 18)
            return fail(h, 400, "Content-Length has more than 18 digits");
        n = n * 10 + (*s - '0');
    }
    if (h->content_length >= 0 && h->content_length != n)
        return fail(h, 400, "two Content-Length fields disagree (%lld and %lld)",
                    h->content_length, n);
    h->content_length = n;
    return 0;
}

static int parse_field(mcp_reqhead_t *h, char *line, size_t index)
{
    char *colon = strchr(line, ':'), *value, *end, *s;

    if (line[0] == ' ' || line[0] == '\t')
        return fail(h, 400, "header field %zu is folded onto the line before (obsolete "
                            "line folding is refused)", index);
    if (!colon)
        return fail(h, 400, "header field %zu has no colon", index);
    if (colon == line)
        return fail(h, 400, "header field %zu has an empty name", index);
    *colon = '\0';
    for (s = line; *s; s++) {
        if (!is_tchar((unsigned char)*s))
            return fail(h, 400, "header field %zu's name has a character a token cannot hold "
                                "(whitespace before the colon?)", index);
    }
    value = colon + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    end = value + strlen(value);
    while (end > value && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *end = '\0';
    for (s = value; *s; s++) {
        if (!is_value_char((unsigned char)*s))
            return fail(h, 400, "header field %s has a control character in its value", line);
    }
    if (h->nfields == h->max_fields)
        return fail(h, 431, "the request has more than %zu header fields", h->max_fields);
    h->fields[h->nfields].name = line;
    h->fields[h->nfields].value = value;
    h->nfields++;
    if (!strcasecmp(line, "Content-Length"))
        return take_content_length(h, value);
    if (!strcasecmp(line, "Transfer-Encoding"))
        h->transfer_encoding = 1;
    return 0;
}

/* The whole head is in buf[0..end) (end just after the empty line): parse it in place. */
static int parse_head(mcp_reqhead_t *h, size_t end)
{
    char *p = h->buf, *line;
    size_t index = 0;

    h->buf[end] = '\0';
    for (;;) {                             /* empty lines before the request line */
        if (p[0] == '\n')
            p++;
        else if (p[0] == '\r' && p[1] == '\n')
            p += 2;
        else
            break;
    }
    if (memchr(h->buf, '\0', end))
        return fail(h, 400, "the request head has a NUL byte");
    line = take_line(&p);
    if (!line)
        return fail(h, 400, "the request line has a CR that does not end it");
    if (parse_request_line(h, line) < 0)
        return MCP_REQHEAD_ERROR;
    for (;;) {
        line = take_line(&p);
        if (!line)
            return fail(h, 400, "header field %zu has a CR that does not end it", index + 1);
        if (!*line)
            break;
        if (parse_field(h, line, ++index) < 0)
            return MCP_REQHEAD_ERROR;
    }
    if (h->transfer_encoding && h->content_length >= 0)
        return fail(h, 400, "the request has both Transfer-Encoding and Content-Length");
    h->state = MCP_REQHEAD_DONE;
    return MCP_REQHEAD_DONE;
}

/* The offset just after the head's end (an empty line: LF LF or LF CR LF, since a line may end
 * with a bare LF) in buf[0..len), searching from *scan; 0 when not there yet. Leading empty lines
 * (before the request line) do not end the head. */
static size_t find_end(mcp_reqhead_t *h)
{
    size_t i, start = 0;

    /* Skip leading empty lines: they are not the head's end. */
    while (start < h->len) {
        if (h->buf[start] == '\n')
            start++;
        else if (h->buf[start] == '\r' && start + 1 < h->len && h->buf[start + 1] == '\n')
            start += 2;
        else
            break;
    }
    i = h->scan > start ? h->scan : start;
    for (; i < h->len; i++) {
        if (h->buf[i] != '\n')
            continue;
        if (i + 1 < h->len && h->buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < h->len && h->buf[i + 1] == '\r' && h->buf[i + 2] == '\n')
            return i + 3;
        if (i + 2 >= h->len)
            break;                         /* decided when more bytes come */
    }
    h->scan = i;
    return 0;
}

int mcp_reqhead_feed(mcp_reqhead_t *h, const char *buf, size_t len, size_t *consumed)
{
    size_t old = h->len, take, end;

    *consumed = 0;
    if (h->state != MCP_REQHEAD_MORE)
        return h->state;
    take = h->max_head - h->len < len ? h->max_head - h->len : len;
    memcpy(h->buf + h->len, buf, take);
    h->len += take;
    end = find_end(h);
    if (!end) {
        if (take < len || h->len == h->max_head)
            return fail(h, 431, "the request head is over %zu bytes", h->max_head);
        *consumed = take;
        return MCP_REQHEAD_MORE;
    }
    *consumed = end - old;
    return parse_head(h, end);
}

const char *mcp_reqhead_error(const mcp_reqhead_t *h)
{
    return h->error;
}

int mcp_reqhead_status(const mcp_reqhead_t *h)
{
    return h->status;
}

const char *mcp_reqhead_method(const mcp_reqhead_t *h)
{
    return h->method;
}

const char *mcp_reqhead_target(const mcp_reqhead_t *h)
{
    return h->target;
}

int mcp_reqhead_minor(const mcp_reqhead_t *h)
{
    return h->minor;
}

const char *mcp_reqhead_field(const mcp_reqhead_t *h, const char *name)
{
    size_t i;

    for (i = 0; i < h->nfields; i++) {
        if (!strcasecmp(h->fields[i].name, name))
            return h->fields[i].value;
    }
    return NULL;
}

size_t mcp_reqhead_fields(const mcp_reqhead_t *h)
{
    return h->nfields;
}

const char *mcp_reqhead_field_name(const mcp_reqhead_t *h, size_t i)
{
    return i < h->nfields ? h->fields[i].name : NULL;
}

const char *mcp_reqhead_field_value(const mcp_reqhead_t *h, size_t i)
{
    return i < h->nfields ? h->fields[i].value : NULL;
}

long long mcp_reqhead_content_length(const mcp_reqhead_t *h)
{
    return h->content_length;
}

int mcp_reqhead_has_transfer_encoding(const mcp_reqhead_t *h)
{
    return h->transfer_encoding;
}

/* Whether the comma-separated list value holds token (case-insensitive). */
static int list_has(const char *value, const char *token)
{
    size_t n = strlen(token);
    const char *s = value;

    while (s && *s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (!strncasecmp(s, token, n)) {
            const char *e = s + n;
            while (*e == ' ' || *e == '\t')
                e++;
            if (*e == '\0' || *e == ',')
                return 1;
        }
        s = strchr(s, ',');
    }
    return 0;
}

int mcp_reqhead_keep_alive(const mcp_reqhead_t *h)
{
    const char *c = mcp_reqhead_field(h, "Connection");

    if (h->minor >= 1)
        return !(c && list_has(c, "close"));
    return c && list_has(c, "keep-alive");
}

int mcp_reqhead_expects_continue(const mcp_reqhead_t *h)
{
    const char *e = mcp_reqhead_field(h, "Expect");

    return e && !strcasecmp(e, "100-continue");
}
