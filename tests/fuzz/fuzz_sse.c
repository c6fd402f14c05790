/* libFuzzer harness for mcp_sse.
 *
 * Built by `make fuzz`, run by tests/fuzz/run (see fuzz.h for the standalone replay build).
 *
 * Each input is checked three ways:
 *  1. parsed in one feed and again in pseudo-random pieces (sizes drawn from the first input
 *     bytes): the dispatched events, the return code, the last event id and the retry value
 *     must be identical — the parser's result must not depend on how the stream is split;
 *  2. every dispatched event must respect the interface (NUL-terminated data, non-NULL type,
 *     sizes within max_event_bytes, id_set implies an id);
 *  3. the input (up to its first NUL) is used as event data, encoded, and parsed back: the data
 *     must come back with CRLF and lone CR turned into LF.
 */

#include "fuzz.h"

#include "mcp_sse.h"

#define FUZZ_MAX_EVENT 256

typedef struct digest_t {
    uint64_t h;
    long     count;
    long     abort_at;          /* return 9 from this event (1-based); 0 = never */
    size_t   max;
} digest_t;

static void mix(digest_t *d, const void *p, size_t n)
{
    const unsigned char *s = p;
    size_t i;
    for (i = 0; i < n; i++) {
        d->h ^= s[i];
        d->h *= 0x100000001b3ULL;
    }
    /* a separator so ("ab","c") and ("a","bc") differ */
    d->h ^= 0xff;
    d->h *= 0x100000001b3ULL;
    d->h += n;
}

static int digest_cb(void *baton, const mcp_sse_event_t *ev)
{
    digest_t *d = baton;
    long r = ev->retry_ms;
    int set = ev->id_set ? 1 : 0;

    if (!ev->event || !ev->data || ev->data[ev->data_len] != '\0')
        abort();
    if (ev->data_len >= d->max || strlen(ev->event) > d->max)
        abort();
    if (ev->id_set && !ev->id)
        abort();
    if (ev->id && strlen(ev->id) > d->max)
        abort();
    if (ev->retry_ms < -1)
        abort();

    mix(d, ev->id ? ev->id : "~NULL~", ev->id ? strlen(ev->id) : 6);
    mix(d, &set, sizeof(set));
    mix(d, ev->event, strlen(ev->event));
    mix(d, ev->data, ev->data_len);
    mix(d, &r, sizeof(r));
    d->count++;
    return d->abort_at && d->count == d->abort_at ? 9 : 0;
}

typedef struct result_t {
    uint64_t h;
    long     count;
    int      rc;
    long     retry;
    char     last_id[FUZZ_MAX_EVENT + 2];
    int      has_last_id;
} result_t;

static uint32_t rng_next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Feeds data in one piece (seed == 0) or in pseudo-random pieces. */
static void run(const uint8_t *data, size_t size, uint32_t seed, long abort_at, result_t *res)
{
    apr_pool_t *p;
    digest_t d = { 0xcbf29ce484222325ULL, 0, abort_at, FUZZ_MAX_EVENT };
    mcp_sse_parser_t *ps;
    size_t pos = 0;
    int rc = 0;
    const char *id;

    apr_pool_create(&p, fuzz_root());
    ps = mcp_sse_parser_create(p, FUZZ_MAX_EVENT, digest_cb, &d);
    while (pos < size && rc == 0) {
        size_t n = size - pos;
        if (seed == 1) {
            n = 1;                                      /* byte by byte */
        }
        else if (seed) {
            uint32_t r = rng_next(&seed);
            size_t piece = (r & 3) == 0 ? (r >> 8) % 512 : (r >> 8) % 8;
            if (piece < n)
                n = piece;
        }
        rc = mcp_sse_parser_feed(ps, (const char *)data + pos, n);
        pos += n;
    }
    if (rc != 0 && mcp_sse_parser_feed(ps, "\n\n", 2) != rc)
        abort();                                        /* errors are sticky */
    res->h = d.h;
    res->count = d.count;
    res->rc = rc;
    res->retry = mcp_sse_parser_retry_ms(ps);
    id = mcp_sse_parser_last_event_id(ps);
    res->has_last_id = id != NULL;
    res->last_id[0] = '\0';
    if (id) {
        if (strlen(id) > FUZZ_MAX_EVENT)
            abort();
        strcpy(res->last_id, id);
    }
    if (mcp_sse_parser_finish(ps) != 0)
        abort();
    apr_pool_destroy(p);
}

/* ---- encoder round trip ------------------------------------------------------------------- */

typedef struct rt_t {
    const char *expect;
    size_t      expect_len;
    int         count;
} rt_t;

static int rt_cb(void *baton, const mcp_sse_event_t *ev)
{
    rt_t *rt = baton;
    if (ev->data_len != rt->expect_len || memcmp(ev->data, rt->expect, rt->expect_len) != 0)
        abort();
    if (strcmp(ev->event, "message") != 0 || !ev->id || strcmp(ev->id, "1-2") != 0)
        abort();
    rt->count++;
    return 0;
}

static void roundtrip(const uint8_t *data, size_t size)
{
    apr_pool_t *p;
    char *text, *norm, *o, *ev;
    const char *s;
    apr_size_t len;
    rt_t rt;
    mcp_sse_parser_t *ps;

    apr_pool_create(&p, fuzz_root());
    text = apr_palloc(p, size + 1);
    memcpy(text, data, size);
    text[size] = '\0';                                  /* data up to the first NUL */
    norm = o = apr_palloc(p, size + 1);
    for (s = text; *s; s++) {
        if (*s == '\r') {
            *o++ = '\n';
            if (s[1] == '\n')
                s++;
        }
        else {
            *o++ = *s;
        }
    }
    *o = '\0';

    ev = mcp_sse_event_format(p, "1-2", NULL, text, -1, &len);
    if (!ev || len != strlen(ev))
        abort();
    rt.expect = norm;
    rt.expect_len = (size_t)(o - norm);
    rt.count = 0;
    ps = mcp_sse_parser_create(p, size + 16, rt_cb, &rt);
    if (mcp_sse_parser_feed(ps, ev, len) != 0 || rt.count != 1)
        abort();

    /* id and event: NULL exactly when they contain CR or LF */
    {
        size_t n = size < 16 ? size : 16;
        char *field = apr_palloc(p, n + 1);
        int has_eol;
        memcpy(field, data, n);
        field[n] = '\0';
        has_eol = strpbrk(field, "\r\n") != NULL;
        if ((mcp_sse_event_format(p, field, NULL, "x", -1, NULL) == NULL) != has_eol)
            abort();
        if ((mcp_sse_event_format(p, NULL, field, "x", -1, NULL) == NULL) != has_eol)
            abort();
    }
    apr_pool_destroy(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    result_t whole, split;
    uint32_t seed = 0x9e3779b9u;
    long abort_at = 0;

    if (size > 0) {
        seed ^= (uint32_t)data[0] << 8;
        abort_at = data[0] % 8 == 7 ? 1 + data[0] / 64 : 0;  /* sometimes stop early */
    }
    if (size > 1)
        seed ^= (uint32_t)data[1] << 16 | data[1];

    run(data, size, 0, abort_at, &whole);
    run(data, size, seed, abort_at, &split);
    if (whole.h != split.h || whole.count != split.count || whole.rc != split.rc)
        abort();
    /* even after an error: it stops the parser at the same line whatever the split */
    if (whole.retry != split.retry || whole.has_last_id != split.has_last_id
        || strcmp(whole.last_id, split.last_id) != 0)
        abort();
    if (size <= 4096) {
        run(data, size, 1, abort_at, &split);
        if (whole.h != split.h || whole.count != split.count || whole.rc != split.rc
            || whole.retry != split.retry || strcmp(whole.last_id, split.last_id) != 0)
            abort();
    }

    roundtrip(data, size);
    return 0;
}
