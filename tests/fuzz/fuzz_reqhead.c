/* libFuzzer harness for mcp_reqhead (the supervisor's request head parser) and mcp_lines.
 *
 * Checked:
 *  1. the head parsed in one feed and in pseudo-random pieces gives the same result: return
 *     code, bytes consumed, status and error, method, target, version, every field, the
 *     Content-Length;
 *  2. a parsed head respects the interface: method and target non-empty without spaces, field
 *     names non-empty without ':', values without CR, LF or NUL and not starting or ending with
 *     a space or tab, consumed <= size, an error has a status of 400, 431 or 505 and a message;
 *  3. mcp_lines over the input, whole and in pieces, REFUSE and CUT, gives the same lines, none
 *     longer than the bound and none with a LF.
 */

#include "fuzz.h"

#include "mcp_lines.h"
#include "mcp_reqhead.h"

#define MAX_HEAD 512

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    h ^= 0xff;
    return h * 0x100000001b3ULL + n;
}

static uint64_t mix_str(uint64_t h, const char *s)
{
    return s ? mix(h, s, strlen(s)) : mix(h, "~", 1);
}

static uint32_t rng_next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Parses data (seed 0: in one feed) and digests the outcome. */
static uint64_t head_run(const uint8_t *data, size_t size, uint32_t seed)
{
    mcp_reqhead_t *h = mcp_reqhead_create(MAX_HEAD, 16);
    size_t off = 0, total = 0, used, i;
    uint64_t d = 0xcbf29ce484222325ULL;
    long long cl;
    int rc = MCP_REQHEAD_MORE;

    FUZZ_CHECK(h != NULL);
    while (off < size && rc == MCP_REQHEAD_MORE) {
        size_t n = size - off;
        if (seed) {
            size_t piece = 1 + (rng_next(&seed) >> 8) % 16;
            if (piece < n)
                n = piece;
        }
        rc = mcp_reqhead_feed(h, (const char *)data + off, n, &used);
        FUZZ_CHECK(used <= n);
        if (rc == MCP_REQHEAD_MORE)
            FUZZ_CHECK(used == n);
        total += used;
        off += n;
    }
    d = mix(d, &rc, sizeof(rc));
    if (rc == MCP_REQHEAD_DONE)
        d = mix(d, &total, sizeof(total));
    if (rc == MCP_REQHEAD_ERROR) {
        int st = mcp_reqhead_status(h);
        FUZZ_CHECK(st == 400 || st == 431 || st == 505);
        FUZZ_CHECK(*mcp_reqhead_error(h));
        d = mix(d, &st, sizeof(st));
        d = mix_str(d, mcp_reqhead_error(h));
    }
    if (rc == MCP_REQHEAD_DONE) {
        const char *m = mcp_reqhead_method(h), *t = mcp_reqhead_target(h);
        int minor = mcp_reqhead_minor(h);
        FUZZ_CHECK(*m && !strchr(m, ' ') && *t && !strchr(t, ' '));
        FUZZ_CHECK(minor >= 0 && minor <= 9);
        d = mix_str(mix_str(mix(d, &minor, sizeof(minor)), m), t);
        for (i = 0; i < mcp_reqhead_fields(h); i++) {
            const char *name = mcp_reqhead_field_name(h, i), *v = mcp_reqhead_field_value(h, i);
            size_t vl = strlen(v);
            FUZZ_CHECK(*name && !strchr(name, ':'));
            FUZZ_CHECK(!strpbrk(v, "\r\n"));
            FUZZ_CHECK(!vl || (v[0] != ' ' && v[0] != '\t' && v[vl - 1] != ' '
                               && v[vl - 1] != '\t'));
            d = mix_str(mix_str(d, name), v);
        }
        cl = mcp_reqhead_content_length(h);
        FUZZ_CHECK(cl >= -1);
        d = mix(d, &cl, sizeof(cl));
        FUZZ_CHECK(!(mcp_reqhead_has_transfer_encoding(h) && cl >= 0));
    }
    mcp_reqhead_destroy(h);
    return d;
}

typedef struct lines_digest_t {
    uint64_t h;
    size_t   max;
} lines_digest_t;

static int line_cb(void *baton, const char *line, size_t len, int cut)
{
    lines_digest_t *d = baton;

    FUZZ_CHECK(len <= d->max);
    FUZZ_CHECK(!memchr(line, '\n', len));
    FUZZ_CHECK(!cut || len == d->max);
    d->h = mix(d->h, line, len);
    d->h = mix(d->h, &cut, sizeof(cut));
    return 0;
}

static uint64_t lines_run(const uint8_t *data, size_t size, size_t max, int mode, uint32_t seed)
{
    mcp_lines_t *l = mcp_lines_create(max, mode);
    lines_digest_t d = {0xcbf29ce484222325ULL, max};
    size_t off = 0;
    int rc = 0;

    FUZZ_CHECK(l != NULL);
    while (off < size && rc == 0) {
        size_t n = size - off;
        if (seed) {
            size_t piece = 1 + (rng_next(&seed) >> 8) % 24;
            if (piece < n)
                n = piece;
        }
        rc = mcp_lines_feed(l, (const char *)data + off, n, line_cb, &d);
        off += n;
    }
    if (rc == 0)
        rc = mcp_lines_finish(l, line_cb, &d);
    FUZZ_CHECK(rc == 0 || rc == MCP_LINES_TOO_LONG);
    FUZZ_CHECK(mcp_lines_pending(l) <= max + 1);
    mcp_lines_destroy(l);
    return mix(d.h, &rc, sizeof(rc));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t seed = 0x9e3779b9u ^ (size ? (uint32_t)data[0] << 8 : 0);
    size_t max = 1 + (size > 1 ? data[1] % 40 : 7);

    FUZZ_CHECK(head_run(data, size, 0) == head_run(data, size, seed));
    FUZZ_CHECK(head_run(data, size, 0) == head_run(data, size, seed ^ 0x5555));
    FUZZ_CHECK(lines_run(data, size, max, MCP_LINES_REFUSE, 0)
               == lines_run(data, size, max, MCP_LINES_REFUSE, seed));
    FUZZ_CHECK(lines_run(data, size, max, MCP_LINES_CUT, 0)
               == lines_run(data, size, max, MCP_LINES_CUT, seed));
    return 0;
}
