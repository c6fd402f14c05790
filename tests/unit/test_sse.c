/* Unit tests for mcp_sse: exact encoder bytes, and the incremental parser against the WHATWG
 * event-stream interpretation rules under every way of splitting the input. */

#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "mcp_sse.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_HAVE_ASAN 1
#endif
#endif
#ifdef TEST_HAVE_ASAN
/* from <sanitizer/allocator_interface.h>, which not every compiler installs */
size_t __sanitizer_get_current_allocated_bytes(void);
#else
#include <malloc.h>
#endif

#include "unit_main.h"
#include "unit_pool.h"

/* Bytes of heap currently allocated (pools get their blocks from malloc, so this covers them). */
static size_t heap_in_use(void)
{
#ifdef TEST_HAVE_ASAN
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#endif
}

/* Bytes of address space mapped by the process (0 when /proc is unavailable). APR pools may get
 * their blocks from mmap rather than malloc (Debian's APR does), so heap_in_use alone would not
 * see a pool growing. */
static size_t mapped_bytes(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%lu", &pages) != 1)
        pages = 0;
    fclose(f);
    return (size_t)pages * 4096;
}

/* ---- a growable string for describing what the parser dispatched ------------------------- */

typedef struct strbuf {
    char  *p;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    ck_assert(n >= 0 && (size_t)n < sizeof(tmp));
    sb_add(b, tmp, (size_t)n);
}

/* Escapes \n \r \0 and backslash so a description is one readable line. */
static void sb_escaped(strbuf *b, const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        switch (s[i]) {
        case '\n': sb_str(b, "\\n"); break;
        case '\r': sb_str(b, "\\r"); break;
        case '\0': sb_str(b, "\\0"); break;
        case '\\': sb_str(b, "\\\\"); break;
        default:   sb_add(b, s + i, 1); break;
        }
    }
}

/* Appends one event as "id/id_set/type/retry/data;" with a NULL id written as "~". */
static void describe_event(strbuf *b, const char *id, int id_set, const char *type, long retry,
                           const char *data, size_t data_len)
{
    if (id)
        sb_escaped(b, id, strlen(id));
    else
        sb_str(b, "~");
    sb_printf(b, "/%d/", id_set ? 1 : 0);
    sb_escaped(b, type, strlen(type));
    sb_printf(b, "/%ld/", retry);
    sb_escaped(b, data, data_len);
    sb_str(b, ";");
}

/* ---- recording callback -------------------------------------------------------------------- */

typedef struct recorder {
    strbuf desc;
    int    count;
    int    abort_at;      /* return abort_rc from the abort_at-th event (1-based); 0 = never */
    int    abort_rc;
} recorder;

static int record_cb(void *baton, const mcp_sse_event_t *ev)
{
    recorder *r = baton;
    ck_assert_ptr_nonnull(ev->event);
    ck_assert_ptr_nonnull(ev->data);
    ck_assert_int_eq(ev->data[ev->data_len], '\0');
    ck_assert(ev->id != NULL || !ev->id_set);
    describe_event(&r->desc, ev->id, ev->id_set, ev->event, ev->retry_ms, ev->data, ev->data_len);
    r->count++;
    if (r->abort_at && r->count == r->abort_at)
        return r->abort_rc;
    return 0;
}

/* Parses s[0..n) fed in pieces cut at the ascending offsets cuts[0..ncuts), then finishes.
 * Returns a malloc'd description of the events followed by "rc=N" (the first non-zero feed
 * result, or 0). chunk > 0 instead feeds fixed-size pieces. */
static char *parse_desc(const char *s, size_t n, const size_t *cuts, size_t ncuts, size_t chunk,
                        apr_size_t max, int abort_at, int abort_rc)
{
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;
    size_t pos = 0, k = 0;
    int rc = 0;

    memset(&r, 0, sizeof(r));
    r.abort_at = abort_at;
    r.abort_rc = abort_rc;
    sb_str(&r.desc, "");
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, max, record_cb, &r);
    while (pos < n && rc == 0) {
        size_t end;
        if (chunk)
            end = pos + chunk < n ? pos + chunk : n;
        else
            end = k < ncuts ? cuts[k++] : n;
        ck_assert(end >= pos && end <= n);
        rc = mcp_sse_parser_feed(ps, s + pos, end - pos);
        pos = end;
    }
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    apr_pool_destroy(sub);
    sb_printf(&r.desc, "rc=%d", rc);
    return r.desc.p;
}

/* Whole input in one feed, default limit. */
static char *parse1(const char *s, size_t n)
{
    return parse_desc(s, n, NULL, 0, 0, 1 << 20, 0, 0);
}

#define CHECK_PARSE(input, expected)                                                           \
    do {                                                                                       \
        char *got_ = parse1((input), sizeof(input) - 1);                                       \
        ck_assert_str_eq(got_, (expected));                                                    \
        free(got_);                                                                            \
    } while (0)

/* Checks that s parses to expected whole, byte by byte, and in every 2-way split. */
static void check_all_splits2(const char *s, size_t n, apr_size_t max, int abort_at,
                              int abort_rc, const char *expected)
{
    char *got;
    size_t i;

    got = parse_desc(s, n, NULL, 0, 0, max, abort_at, abort_rc);
    ck_assert_str_eq(got, expected);
    free(got);
    got = parse_desc(s, n, NULL, 0, 1, max, abort_at, abort_rc);
    ck_assert_str_eq(got, expected);
    free(got);
    for (i = 0; i <= n; i++) {
        got = parse_desc(s, n, &i, 1, 0, max, abort_at, abort_rc);
        ck_assert_msg(strcmp(got, expected) == 0, "split at %zu: got %s, expected %s", i, got,
                      expected);
        free(got);
    }
}

/* ---- encoder ------------------------------------------------------------------------------ */

static void check_format(const char *id, const char *event, const char *data, long retry,
                         const char *expected)
{
    apr_size_t len = 12345;
    char *s = mcp_sse_event_format(pool, id, event, data, retry, &len);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, expected);
    ck_assert_uint_eq(len, strlen(expected));
    /* len_out may be NULL */
    s = mcp_sse_event_format(pool, id, event, data, retry, NULL);
    ck_assert_str_eq(s, expected);
}

START_TEST(test_format_field_order)
{
    check_format("1-2", "message", "hello", 5000,
                 "id: 1-2\nevent: message\nretry: 5000\ndata: hello\n\n");
    check_format("1-2", "message", "{\"a\":1}", -1,
                 "id: 1-2\nevent: message\ndata: {\"a\":1}\n\n");
    check_format(NULL, NULL, "x", -1, "data: x\n\n");
    check_format(NULL, "ping", NULL, -1, "event: ping\n\n");
    check_format(NULL, NULL, NULL, 0, "retry: 0\n\n");
    check_format(NULL, NULL, NULL, -1, "\n");
    check_format(NULL, NULL, NULL, LONG_MAX, "retry: 9223372036854775807\n\n");
}
END_TEST

START_TEST(test_format_priming)
{
    check_format("7", NULL, "", 3000, "id: 7\nretry: 3000\ndata:\n\n");
    check_format("7", NULL, "", -1, "id: 7\ndata:\n\n");
    check_format("1-0", NULL, "", -1, "id: 1-0\ndata:\n\n");
}
END_TEST

START_TEST(test_format_multiline_data)
{
    check_format(NULL, NULL, "a\nb", -1, "data: a\ndata: b\n\n");
    check_format(NULL, NULL, "a\r\nb", -1, "data: a\ndata: b\n\n");
    check_format(NULL, NULL, "a\rb", -1, "data: a\ndata: b\n\n");
    check_format(NULL, NULL, "a\r\nb\rc\nd", -1, "data: a\ndata: b\ndata: c\ndata: d\n\n");
    check_format(NULL, NULL, "a\n", -1, "data: a\ndata:\n\n");
    check_format(NULL, NULL, "\n", -1, "data:\ndata:\n\n");
    check_format(NULL, NULL, "\r\n", -1, "data:\ndata:\n\n");
    check_format(NULL, NULL, "\n\r", -1, "data:\ndata:\ndata:\n\n");
    check_format(NULL, NULL, "\r\r\n\n", -1, "data:\ndata:\ndata:\ndata:\n\n");
    check_format(NULL, NULL, "a\n\nb", -1, "data: a\ndata:\ndata: b\n\n");
    check_format(NULL, NULL, " lead", -1, "data:  lead\n\n");
    check_format(NULL, NULL, "k: v", -1, "data: k: v\n\n");
}
END_TEST

START_TEST(test_format_empty_values)
{
    check_format("", NULL, "x", -1, "id:\ndata: x\n\n");
    check_format(NULL, "", "x", -1, "event:\ndata: x\n\n");
    check_format(" s", " t", NULL, -1, "id:  s\nevent:  t\n\n");
}
END_TEST

START_TEST(test_format_rejects_line_breaks)
{
    static const char *const bad[] = { "a\nb", "a\rb", "\n", "\r", "x\r\n", "\r\nx" };
    size_t i;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        apr_size_t len = 99;
        ck_assert_ptr_null(mcp_sse_event_format(pool, bad[i], NULL, "d", -1, &len));
        ck_assert_ptr_null(mcp_sse_event_format(pool, NULL, bad[i], "d", -1, NULL));
        ck_assert_ptr_null(mcp_sse_event_format(pool, "1", bad[i], NULL, 5, NULL));
        ck_assert_ptr_null(mcp_sse_event_format(pool, bad[i], "ok", NULL, -1, NULL));
    }
}
END_TEST

START_TEST(test_format_comment)
{
    apr_size_t len = 0;
    char *s = mcp_sse_comment_format(pool, "keep-alive", &len);
    ck_assert_str_eq(s, ": keep-alive\n\n");
    ck_assert_uint_eq(len, 14);
    ck_assert_str_eq(mcp_sse_comment_format(pool, NULL, &len), ":\n\n");
    ck_assert_uint_eq(len, 3);
    ck_assert_str_eq(mcp_sse_comment_format(pool, "", NULL), ":\n\n");
    ck_assert_str_eq(mcp_sse_comment_format(pool, "a\r\nb\nc\rd", &len), ": a  b c d\n\n");
    ck_assert_uint_eq(len, strlen(": a  b c d\n\n"));
    ck_assert_str_eq(mcp_sse_comment_format(pool, "\n", NULL), ":  \n\n");
}
END_TEST

START_TEST(test_format_output_parses_back)
{
    /* a comment dispatches nothing; an event follows it intact */
    const char *c = mcp_sse_comment_format(pool, "x\ny", NULL);
    const char *e = mcp_sse_event_format(pool, "7", NULL, "", 3000, NULL);
    const char *f = mcp_sse_event_format(pool, NULL, "upd", "a\r\nb\rc", -1, NULL);
    char *all = apr_pstrcat(pool, c, e, c, f, NULL);
    char *got = parse1(all, strlen(all));
    ck_assert_str_eq(got, "7/1/message/3000/;7/0/upd/-1/a\\nb\\nc;rc=0");
    free(got);
}
END_TEST

/* ---- parser: individual rules ------------------------------------------------------------- */

START_TEST(test_parse_basic)
{
    CHECK_PARSE("data: hello\n\n", "~/0/message/-1/hello;rc=0");
    CHECK_PARSE("id: 1\nevent: upd\ndata: a\ndata: b\n\n", "1/1/upd/-1/a\\nb;rc=0");
    CHECK_PARSE("data: a\n\ndata: b\n\n", "~/0/message/-1/a;~/0/message/-1/b;rc=0");
    CHECK_PARSE("", "rc=0");
    CHECK_PARSE("\n\n\n", "rc=0");
}
END_TEST

START_TEST(test_parse_line_endings)
{
    /* the same stream with LF, CRLF, CR and mixed line endings */
    static const char tmpl[] = "id: 1|event: e|data: a|data:|data: b||data: c|||: x|data: d||";
    static const char *const eols[] = { "\n", "\r\n", "\r" };
    const char *expected = "1/1/e/-1/a\\n\\nb;1/0/message/-1/c;1/0/message/-1/d;rc=0";
    unsigned int seed = 1;
    size_t e, i;
    int round;

    for (e = 0; e < 4; e++) {
        for (round = 0; round < (e < 3 ? 1 : 50); round++) {
            strbuf b = { 0 };
            char *got;
            sb_str(&b, "");
            for (i = 0; tmpl[i]; i++) {
                if (tmpl[i] != '|') {
                    sb_add(&b, tmpl + i, 1);
                    continue;
                }
                if (e < 3) {
                    sb_str(&b, eols[e]);
                }
                else {
                    /* a lone CR followed by a lone LF would be one CRLF: avoid that pair */
                    const char *eol;
                    do {
                        seed = seed * 1103515245u + 12345u;
                        eol = eols[(seed >> 16) % 3];
                    } while (b.p[b.len - 1] == '\r' && eol[0] == '\n');
                    sb_str(&b, eol);
                }
            }
            check_all_splits2(b.p, b.len, 1 << 20, 0, 0, expected);
            got = parse1(b.p, b.len);
            ck_assert_str_eq(got, expected);
            free(got);
            free(b.p);
        }
    }
}
END_TEST

START_TEST(test_parse_crlf_split_across_feeds)
{
    static const char s1[] = "data: a\r\ndata: b\r\n\r\n";
    static const char s2[] = "data: a\rdata: b\r\r";
    size_t cut;
    char *got;

    /* "\r" | "\n": one line end, so both data lines are in one event */
    cut = 8;
    ck_assert_int_eq(s1[cut - 1], '\r');
    got = parse_desc(s1, sizeof(s1) - 1, &cut, 1, 0, 1 << 20, 0, 0);
    ck_assert_str_eq(got, "~/0/message/-1/a\\nb;rc=0");
    free(got);
    /* every cut, including between the final "\r\n\r" | "\n" */
    check_all_splits2(s1, sizeof(s1) - 1, 1 << 20, 0, 0, "~/0/message/-1/a\\nb;rc=0");
    /* a CR at the end of a feed followed by something other than LF */
    check_all_splits2(s2, sizeof(s2) - 1, 1 << 20, 0, 0, "~/0/message/-1/a\\nb;rc=0");
    /* CR | LF | LF: the second LF is the blank line */
    {
        size_t cuts[2] = { 8, 9 };
        got = parse_desc("data: a\r\n\n", 10, cuts, 2, 0, 1 << 20, 0, 0);
        ck_assert_str_eq(got, "~/0/message/-1/a;rc=0");
        free(got);
    }
    /* LF CR is two line ends */
    CHECK_PARSE("data: a\n\rdata: b\n\n", "~/0/message/-1/a;~/0/message/-1/b;rc=0");
}
END_TEST

START_TEST(test_parse_field_syntax)
{
    CHECK_PARSE("data:a\n\n", "~/0/message/-1/a;rc=0");               /* no space */
    CHECK_PARSE("data:  a\n\n", "~/0/message/-1/ a;rc=0");            /* one space stripped */
    CHECK_PARSE("data:\ta\n\n", "~/0/message/-1/\ta;rc=0");           /* only a space */
    CHECK_PARSE("data: a: b:c\n\n", "~/0/message/-1/a: b:c;rc=0");    /* first colon splits */
    CHECK_PARSE("data\n\n", "~/0/message/-1/;rc=0");                  /* no colon: "" */
    CHECK_PARSE("data\ndata\n\n", "~/0/message/-1/\\n;rc=0");
    CHECK_PARSE("data :x\n\n", "rc=0");                              /* field "data " */
    CHECK_PARSE("Data: x\n\n", "rc=0");                              /* case-sensitive */
    CHECK_PARSE("foo: bar\ndata: x\nbar\n\n", "~/0/message/-1/x;rc=0"); /* unknown ignored */
    CHECK_PARSE("dat: x\ndatas: y\n\n", "rc=0");
    CHECK_PARSE("event: a\nevent: b\ndata: x\n\n", "~/0/b/-1/x;rc=0");  /* last one wins */
    CHECK_PARSE("event:\ndata: x\n\n", "~/0/message/-1/x;rc=0");       /* empty type */
    CHECK_PARSE("event\ndata: x\n\n", "~/0/message/-1/x;rc=0");
    CHECK_PARSE("event:  sp\ndata: x\n\n", "~/0/ sp/-1/x;rc=0");
}
END_TEST

START_TEST(test_parse_nul_bytes)
{
    static const char s1[] = "data: a\0b\n\n";
    static const char s2[] = "id: 1\n\ndata: x\nid: a\0b\n\ndata: y\n\n";
    static const char s3[] = "da\0ta: x\n\n";
    char *got = parse1(s1, sizeof(s1) - 1);
    ck_assert_str_eq(got, "~/0/message/-1/a\\0b;rc=0");
    free(got);
    /* an id containing NUL is ignored: the previous id stays and id_set is 0 */
    got = parse1(s2, sizeof(s2) - 1);
    ck_assert_str_eq(got, "1/0/message/-1/x;1/0/message/-1/y;rc=0");
    free(got);
    got = parse1(s3, sizeof(s3) - 1);
    ck_assert_str_eq(got, "rc=0");
    free(got);
}
END_TEST

START_TEST(test_parse_comments)
{
    CHECK_PARSE(": hello\n\n", "rc=0");
    CHECK_PARSE(":\n", "rc=0");
    CHECK_PARSE(":data: x\n\n", "rc=0");
    CHECK_PARSE("data: a\n: in the middle\ndata: b\n\n", "~/0/message/-1/a\\nb;rc=0");
    /* a comment line does not end the block (it is not blank) */
    CHECK_PARSE("data: a\n:\n\n", "~/0/message/-1/a;rc=0");
    /* " :x" is a field named " " (ignored), not a comment; still not blank */
    CHECK_PARSE("data: a\n :x\ndata: b\n\n", "~/0/message/-1/a\\nb;rc=0");
}
END_TEST

static int tally_cb(void *baton, const mcp_sse_event_t *ev)
{
    (void)ev;
    (*(int *)baton)++;
    return 0;
}

/* Feeds s byte by byte and whole; the idle count must not depend on the split. */
static void check_idle(const char *s, apr_uint64_t idle, int in_event)
{
    apr_size_t n = strlen(s), i;
    int split, count = 0;

    for (split = 0; split < 2; split++) {
        mcp_sse_parser_t *ps = mcp_sse_parser_create(pool, 1024, tally_cb, &count);
        if (split) {
            for (i = 0; i < n; i++) {
                ck_assert_int_eq(mcp_sse_parser_feed(ps, s + i, 1), 0);
            }
        }
        else {
            ck_assert_int_eq(mcp_sse_parser_feed(ps, s, n), 0);
        }
        ck_assert_msg(mcp_sse_parser_idle_bytes(ps) == idle, "%s (split %d): idle %lu, not %lu",
                      s, split, (unsigned long)mcp_sse_parser_idle_bytes(ps),
                      (unsigned long)idle);
        ck_assert_int_eq(mcp_sse_parser_in_event(ps) != 0, in_event);
    }
}

START_TEST(test_parse_idle_bytes_and_partial_event)
{
    check_idle("", 0, 0);
    check_idle(": ping\n", 7, 0);
    check_idle(": ping\n: ping\n\n\n", 16, 0);
    check_idle("data: a\n\n", 0, 0);
    check_idle("data: a\n\n: x\n", 4, 0);
    check_idle("data: a\n\ndata: b", 7, 1);
    check_idle("data: a\n\ndata: b\n", 8, 1);
    check_idle("data: a\n\nid: 3\n\n", 7, 0);      /* an id-only block dispatches nothing */
    check_idle("\xef\xbb\xbf: x\n", 7, 0);          /* the BOM counts too */
    check_idle("\xef\xbb\xbf" "data: a\n\n", 0, 0);
    check_idle(": a very long comment without its end", 37, 0);
    check_idle("event: x", 8, 1);
}
END_TEST

START_TEST(test_parse_priming_event)
{
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;
    static const char s[] = "id: 7\ndata:\n\n";

    /* one empty data field: data buffer "\n" -> dispatched with data "" */
    CHECK_PARSE("id: 7\ndata:\n\n", "7/1/message/-1/;rc=0");
    CHECK_PARSE("id: 7\r\ndata:\r\n\r\n", "7/1/message/-1/;rc=0");
    CHECK_PARSE("id: 7\ndata\n\n", "7/1/message/-1/;rc=0");
    CHECK_PARSE("id: 7\nretry: 3000\ndata:\n\n", "7/1/message/3000/;rc=0");
    /* ...as opposed to no data field at all */
    CHECK_PARSE("id: 7\n\n", "rc=0");
    check_all_splits2(s, sizeof(s) - 1, 1 << 20, 0, 0, "7/1/message/-1/;rc=0");

    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 1024, record_cb, &r);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, s, sizeof(s) - 1), 0);
    ck_assert_int_eq(r.count, 1);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "7");
    apr_pool_destroy(sub);
    free(r.desc.p);
}
END_TEST

START_TEST(test_parse_retry)
{
    static const char *const invalid[] = {
        "retry: 10a", "retry: -1", "retry: +5", "retry:", "retry: ", "retry", "retry: 1 ",
        "retry:  5", "retry: 1.5", "retry: 0x10", "retry: 1e3", "retry: \xd9\xa3",
        "retry: 99999999999999999999999999",
    };
    size_t i;

    CHECK_PARSE("retry: 1000\ndata: a\n\n", "~/0/message/1000/a;rc=0");
    CHECK_PARSE("retry:5\ndata: a\n\n", "~/0/message/5/a;rc=0");
    CHECK_PARSE("retry: 0\ndata: a\n\n", "~/0/message/0/a;rc=0");
    CHECK_PARSE("retry: 007\ndata: a\n\n", "~/0/message/7/a;rc=0");    /* digits only */
    CHECK_PARSE("retry: 9223372036854775807\ndata: a\n\n",
                "~/0/message/9223372036854775807/a;rc=0");
    /* per block: the next event has none */
    CHECK_PARSE("retry: 10\ndata: a\n\ndata: b\n\n", "~/0/message/10/a;~/0/message/-1/b;rc=0");
    /* an invalid retry does not undo a valid one in the same block */
    CHECK_PARSE("retry: 10\nretry: x\ndata: a\n\n", "~/0/message/10/a;rc=0");
    for (i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        char *in = apr_pstrcat(pool, invalid[i], "\ndata: a\n\n", NULL);
        char *got = parse1(in, strlen(in));
        ck_assert_msg(strcmp(got, "~/0/message/-1/a;rc=0") == 0, "%s -> %s", invalid[i], got);
        free(got);
    }
}
END_TEST

START_TEST(test_parse_retry_accessor)
{
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;

    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 1024, record_cb, &r);
    ck_assert_int_eq(mcp_sse_parser_retry_ms(ps), -1);
    /* takes effect at once, even without a blank line or a data field */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "retry: 500\n", 11), 0);
    ck_assert_int_eq(mcp_sse_parser_retry_ms(ps), 500);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\nretry: bad\n\n", 13), 0);
    ck_assert_int_eq(mcp_sse_parser_retry_ms(ps), 500);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "retry: 42\ndata: x\n\n", 19), 0);
    ck_assert_int_eq(mcp_sse_parser_retry_ms(ps), 42);
    ck_assert_int_eq(r.count, 1);
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    ck_assert_int_eq(mcp_sse_parser_retry_ms(ps), 42);
    apr_pool_destroy(sub);
    free(r.desc.p);
}
END_TEST

START_TEST(test_parse_id_persistence)
{
    CHECK_PARSE("id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\ndata: d\n\n",
                "1/1/message/-1/a;1/0/message/-1/b;2/1/message/-1/c;2/0/message/-1/d;rc=0");
    /* an empty id clears it to "" (still "set") */
    CHECK_PARSE("id: 1\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\ndata: d\n\n",
                "1/1/message/-1/a;/1/message/-1/b;/1/message/-1/c;/0/message/-1/d;rc=0");
    /* the last id field of a block wins; the id may contain spaces and colons */
    CHECK_PARSE("id: 1\nid:  x:y \ndata: a\n\n", " x:y /1/message/-1/a;rc=0");
    /* id from a block that dispatched nothing still becomes the last event id */
    CHECK_PARSE("id: 5\n\ndata: a\n\n", "5/0/message/-1/a;rc=0");
    CHECK_PARSE("data: a\n\nid: 5\nevent: x\n\ndata: b\n\n",
                "~/0/message/-1/a;5/0/message/-1/b;rc=0");
}
END_TEST

START_TEST(test_parse_last_event_id_accessor)
{
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;

    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 1024, record_cb, &r);
    ck_assert_ptr_null(mcp_sse_parser_last_event_id(ps));
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "id: 5\n", 6), 0);
    ck_assert_ptr_null(mcp_sse_parser_last_event_id(ps));      /* not until the blank line */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\n", 1), 0);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "5");
    ck_assert_int_eq(r.count, 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "id: 6\ndata: x\n", 14), 0);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "5");
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\nid: 9\n", 7), 0);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "6");
    /* the end of the stream discards the incomplete block and its id */
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "6");
    /* the next response of the same stream (reconnect): id persists, BOM skipped again */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\xEF\xBB\xBF" "data: y\n\n", 12), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "id\n\n", 4), 0);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "");
    ck_assert_int_eq(r.count, 2);
    ck_assert_str_eq(r.desc.p, "6/1/message/-1/x;6/0/message/-1/y;");
    apr_pool_destroy(sub);
    free(r.desc.p);
}
END_TEST

START_TEST(test_parse_no_data_blocks)
{
    CHECK_PARSE("event: x\n\n", "rc=0");
    CHECK_PARSE("retry: 10\n\n", "rc=0");
    CHECK_PARSE("id: 3\nevent: x\nretry: 10\nfoo\n\n", "rc=0");
    /* type and retry of the discarded block do not leak into the next event */
    CHECK_PARSE("event: x\nretry: 10\nid: 3\n\ndata: y\n\n", "3/0/message/-1/y;rc=0");
    /* id_set refers to the dispatched event's own block */
    CHECK_PARSE("id: 3\n\nid: 4\ndata: y\n\n", "4/1/message/-1/y;rc=0");
}
END_TEST

START_TEST(test_parse_incomplete_event_discarded)
{
    CHECK_PARSE("data: a\n", "rc=0");
    CHECK_PARSE("data: a", "rc=0");
    CHECK_PARSE("data: a\n\ndata: b\n", "~/0/message/-1/a;rc=0");
    CHECK_PARSE("data: a\n\ndata: b\r", "~/0/message/-1/a;rc=0");
    /* a trailing unterminated line is not processed, even an id */
    CHECK_PARSE("data: a\n\rid: 9", "~/0/message/-1/a;rc=0");
}
END_TEST

START_TEST(test_parse_finish_then_reuse)
{
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;

    memset(&r, 0, sizeof(r));
    sb_str(&r.desc, "");
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 1024, record_cb, &r);
    /* finish drops the pending data line... */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "event: t\ndata: a\n", 17), 0);
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: b\n\n", 9), 0);
    /* ...and an unterminated line... */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: c", 7), 0);
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\n\ndata: d\n\n", 11), 0);
    /* ...and a pending CR: a following LF is a line of its own (a blank line here) */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: e\r", 8), 0);
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\ndata: f\n\n", 10), 0);
    /* ...and a comment in progress */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, ": comm", 6), 0);
    ck_assert_int_eq(mcp_sse_parser_finish(ps), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: g\n\n", 9), 0);
    ck_assert_str_eq(r.desc.p, "~/0/message/-1/b;~/0/message/-1/d;~/0/message/-1/f;"
                               "~/0/message/-1/g;");
    apr_pool_destroy(sub);
    free(r.desc.p);
}
END_TEST

START_TEST(test_parse_bom)
{
    static const char s1[] = "\xEF\xBB\xBF" "data: a\n\n";
    static const char s2[] = "\xEF\xBB\xBF" "data: a\n\n" "\xEF\xBB\xBF" "data: b\n\n";
    static const char s3[] = "\xEF\xBB" "data: a\n\n";
    static const char s4[] = "\xEF\xBB\xBF\xEF\xBB\xBF" "data: a\n\n";
    static const char s5[] = "\xEF" "data: a\n\ndata: b\n\n";
    static const char s6[] = "\xEF\xBB\xBF";
    static const char s7[] = "\xEF\xBB\xBF\n" "data: a\n\n";
    static const char s8[] = "\xEF\xBB\xBF:c\ndata: a\n\n";

    check_all_splits2(s1, sizeof(s1) - 1, 1 << 20, 0, 0, "~/0/message/-1/a;rc=0");
    /* skipped once only: a second BOM is part of a field name (ignored field) */
    check_all_splits2(s2, sizeof(s2) - 1, 1 << 20, 0, 0, "~/0/message/-1/a;rc=0");
    /* an incomplete BOM is ordinary bytes: here part of the field name */
    check_all_splits2(s3, sizeof(s3) - 1, 1 << 20, 0, 0, "rc=0");
    check_all_splits2(s4, sizeof(s4) - 1, 1 << 20, 0, 0, "rc=0");
    check_all_splits2(s5, sizeof(s5) - 1, 1 << 20, 0, 0, "~/0/message/-1/b;rc=0");
    check_all_splits2(s6, sizeof(s6) - 1, 1 << 20, 0, 0, "rc=0");
    check_all_splits2(s7, sizeof(s7) - 1, 1 << 20, 0, 0, "~/0/message/-1/a;rc=0");
    check_all_splits2(s8, sizeof(s8) - 1, 1 << 20, 0, 0, "~/0/message/-1/a;rc=0");
}
END_TEST

/* ---- limits --------------------------------------------------------------------------------- */

static char *repeat(char c, size_t n)
{
    char *s = apr_palloc(pool, n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

START_TEST(test_parse_line_too_large)
{
    /* max 64: a 64-byte line is fine, a 65-byte one is not, however it is split */
    char *ok = apr_pstrcat(pool, "data: ", repeat('x', 58), "\n\n", NULL);
    char *bad = apr_pstrcat(pool, "data: a\n\n", "data: ", repeat('x', 59), "\n\ndata: b\n\n",
                            NULL);
    char *unknown = apr_pstrcat(pool, "data: a\n\n", "zzzzz: ", repeat('x', 58), "\n\n", NULL);
    char *expect_ok = apr_pstrcat(pool, "~/0/message/-1/", repeat('x', 58), ";rc=0", NULL);

    check_all_splits2(ok, strlen(ok), 64, 0, 0, expect_ok);
    check_all_splits2(bad, strlen(bad), 64, 0, 0, "~/0/message/-1/a;rc=-1");
    check_all_splits2(unknown, strlen(unknown), 64, 0, 0, "~/0/message/-1/a;rc=-1");
    /* also with CR and CRLF endings */
    bad = apr_pstrcat(pool, "data: ", repeat('x', 59), "\r\n\r\n", NULL);
    check_all_splits2(bad, strlen(bad), 64, 0, 0, "rc=-1");
    bad = apr_pstrcat(pool, "data: ", repeat('x', 59), "\r\r", NULL);
    check_all_splits2(bad, strlen(bad), 64, 0, 0, "rc=-1");
}
END_TEST

START_TEST(test_parse_unterminated_line_bounded)
{
    /* a line that never ends fails as soon as it passes the limit */
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;
    char *x = repeat('x', 1000);
    int i;

    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 4096, record_cb, &r);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: ", 6), 0);
    for (i = 0; i < 4; i++)
        ck_assert_int_eq(mcp_sse_parser_feed(ps, x, 1000), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, x, 90), 0);            /* 4096 */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, x, 1), MCP_SSE_ERR_TOO_LARGE);
    /* sticky */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "\n\ndata: b\n\n", 11), MCP_SSE_ERR_TOO_LARGE);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "", 0), MCP_SSE_ERR_TOO_LARGE);
    ck_assert_int_eq(r.count, 0);
    apr_pool_destroy(sub);
}
END_TEST

START_TEST(test_parse_event_too_large)
{
    /* max 64: data buffer = values each plus '\n' */
    const char *v15 = "data: 0123456789abcde\n";          /* 16 bytes of data buffer */
    char *ok = apr_pstrcat(pool, v15, v15, v15, v15, "\n", NULL);
    char *bad = apr_pstrcat(pool, v15, v15, v15, v15, "data:\n\n", NULL);
    char *bad2 = apr_pstrcat(pool, "data: a\n\n", v15, v15, v15, v15, v15, "\n", NULL);
    char *expect_ok = "~/0/message/-1/0123456789abcde\\n0123456789abcde\\n0123456789abcde"
                      "\\n0123456789abcde;rc=0";

    check_all_splits2(ok, strlen(ok), 64, 0, 0, expect_ok);
    check_all_splits2(bad, strlen(bad), 64, 0, 0, "rc=-1");
    check_all_splits2(bad2, strlen(bad2), 64, 0, 0, "~/0/message/-1/a;rc=-1");
    /* the limit is per event: many events of 64 bytes are fine */
    {
        char *many = apr_pstrcat(pool, ok, ok, ok, ok, ok, ok, ok, ok, NULL);
        char *got = parse_desc(many, strlen(many), NULL, 0, 3, 64, 0, 0);
        char *exp = apr_pstrcat(pool, "", NULL);
        int i;
        for (i = 0; i < 8; i++)
            exp = apr_pstrcat(pool, exp, apr_pstrndup(pool, expect_ok, strlen(expect_ok) - 4),
                              NULL);
        exp = apr_pstrcat(pool, exp, "rc=0", NULL);
        ck_assert_str_eq(got, exp);
        free(got);
    }
}
END_TEST

START_TEST(test_parse_long_comment_not_limited)
{
    char *s = apr_pstrcat(pool, ":", repeat('c', 10000), "\ndata: a\n\n:", repeat('d', 5000),
                          "\r\n", NULL);
    char *got = parse_desc(s, strlen(s), NULL, 0, 0, 64, 0, 0);
    ck_assert_str_eq(got, "~/0/message/-1/a;rc=0");
    free(got);
    got = parse_desc(s, strlen(s), NULL, 0, 7, 64, 0, 0);
    ck_assert_str_eq(got, "~/0/message/-1/a;rc=0");
    free(got);
    got = parse_desc(s, strlen(s), NULL, 0, 1, 64, 0, 0);
    ck_assert_str_eq(got, "~/0/message/-1/a;rc=0");
    free(got);
}
END_TEST

START_TEST(test_parse_zero_limit)
{
    /* max 0: only blank lines and comments fit */
    check_all_splits2(": x\n\n", 5, 0, 0, 0, "rc=0");
    check_all_splits2("data\n\n", 6, 0, 0, 0, "rc=-1");
}
END_TEST

/* ---- callback abort ------------------------------------------------------------------------ */

START_TEST(test_parse_callback_abort)
{
    static const char s[] = "data: a\n\ndata: b\n\ndata: c\n\n";
    apr_pool_t *sub;
    recorder r;
    mcp_sse_parser_t *ps;

    check_all_splits2(s, sizeof(s) - 1, 1024, 2, 5, "~/0/message/-1/a;~/0/message/-1/b;rc=5");
    check_all_splits2(s, sizeof(s) - 1, 1024, 1, 77, "~/0/message/-1/a;rc=77");
    check_all_splits2(s, sizeof(s) - 1, 1024, 3, -9,
                      "~/0/message/-1/a;~/0/message/-1/b;~/0/message/-1/c;rc=-9");

    /* sticky: later feeds return the same value and dispatch nothing */
    memset(&r, 0, sizeof(r));
    r.abort_at = 1;
    r.abort_rc = 3;
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 1024, record_cb, &r);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, s, sizeof(s) - 1), 3);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: d\n\n", 9), 3);
    ck_assert_int_eq(r.count, 1);
    apr_pool_destroy(sub);
    free(r.desc.p);
}
END_TEST

/* ---- every split of a stream that uses every feature -------------------------------------- */

static const char full_stream[] =
    "\xEF\xBB\xBF"
    ": comment\r\n"
    "id: 1\r\n"
    "event: update\r\n"
    "data: first\r\n"
    "data:  second\r\n"
    "retry: 2500\r\n"
    "\r\n"
    "data\n"
    "data:\n"
    "\n"
    "id: 7\rdata:\r\r"
    "id: 8\n\n"
    "event: x\n\n"
    "data: after\n\n"
    "retry: 12x\ndata: r\r\n\r"
    "foo: bar\ndata:x:y\n\n"
    "id\ndata: cleared\n\n"
    "id: a\0b\ndata: nul\0byte\n\n"
    "data: tail";

static const char full_expected[] =
    "1/1/update/2500/first\\n second;"
    "1/0/message/-1/\\n;"
    "7/1/message/-1/;"
    "8/0/message/-1/after;"
    "8/0/message/-1/r;"
    "8/0/message/-1/x:y;"
    "/1/message/-1/cleared;"
    "/0/message/-1/nul\\0byte;"
    "rc=0";

START_TEST(test_parse_all_splits)
{
    const size_t n = sizeof(full_stream) - 1;
    size_t chunk;

    check_all_splits2(full_stream, n, 1 << 20, 0, 0, full_expected);
    for (chunk = 2; chunk < 20; chunk++) {
        char *got = parse_desc(full_stream, n, NULL, 0, chunk, 1 << 20, 0, 0);
        ck_assert_str_eq(got, full_expected);
        free(got);
    }
}
END_TEST

START_TEST(test_parse_all_3way_splits)
{
    const size_t n = sizeof(full_stream) - 1;
    size_t cuts[2];

    for (cuts[0] = 0; cuts[0] <= n; cuts[0]++) {
        for (cuts[1] = cuts[0]; cuts[1] <= n; cuts[1]++) {
            char *got = parse_desc(full_stream, n, cuts, 2, 0, 1 << 20, 0, 0);
            ck_assert_msg(strcmp(got, full_expected) == 0, "cuts %zu,%zu: %s", cuts[0],
                          cuts[1], got);
            free(got);
        }
    }
}
END_TEST

/* ---- long stream, constant memory ------------------------------------------------------- */

typedef struct counter {
    long   count;
    size_t data_bytes;
} counter;

static int count_cb(void *baton, const mcp_sse_event_t *ev)
{
    counter *c = baton;
    c->count++;
    c->data_bytes += ev->data_len;
    if (strcmp(ev->event, "message") != 0 || ev->id == NULL)
        return 1;
    return 0;
}

START_TEST(test_parse_long_stream_constant_memory)
{
    static const char chunk[] =
        ": keep-alive\r\n"
        "id: 12-345\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n"
        "data: line one\ndata: line two\n\n"
        "data: x\rretry: 100\r\r";
    const size_t n = sizeof(chunk) - 1;
    apr_pool_t *sub;
    counter c = { 0, 0 };
    mcp_sse_parser_t *ps;
    size_t before = 0, after, map_before = 0, map_after, pos;
    long round;
    const long rounds = 40000;             /* 3 events each: 120k events */

    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 4096, count_cb, &c);
    for (round = 0; round < rounds; round++) {
        /* vary the split points so partial lines are buffered at every offset */
        size_t step = 1 + (size_t)(round % 37);
        for (pos = 0; pos < n; pos += step) {
            size_t len = pos + step < n ? step : n - pos;
            ck_assert_int_eq(mcp_sse_parser_feed(ps, chunk + pos, len), 0);
        }
        if (round == 1000) {
            /* mapped_bytes first: its stdio allocations are then cached by malloc in both
             * measurements */
            map_before = mapped_bytes();
            before = heap_in_use();
        }
    }
    map_after = mapped_bytes();
    after = heap_in_use();
    ck_assert_int_eq(c.count, rounds * 3);
    ck_assert_uint_eq(c.data_bytes, (size_t)rounds * (51 + 17 + 1));
    ck_assert_int_eq(mcp_sse_parser_retry_ms(ps), 100);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "12-345");
    /* no growth at all once warmed up (allow a little slack for the C library) */
    ck_assert_msg(after <= before + 1024, "heap grew from %zu to %zu", before, after);
    /* 117k more events: even 8 bytes per event would be ~1 MB */
    ck_assert_msg(map_after <= map_before + 256 * 1024, "mappings grew from %zu to %zu",
                  map_before, map_after);
    apr_pool_destroy(sub);
}
END_TEST

START_TEST(test_parse_buffers_freed_with_pool)
{
    /* a 1 MB event makes the parser allocate a few MB; destroying the pool frees them (here
     * in the middle of the event) */
    const size_t big = 1 << 20;
    char *line = apr_palloc(pool, big + 16);
    apr_pool_t *sub;
    counter c = { 0, 0 };
    mcp_sse_parser_t *ps;
    size_t before, during, after;

    memcpy(line, "data: ", 6);
    memset(line + 6, 'z', big);
    memcpy(line + 6 + big, "\n\n", 2);

    before = heap_in_use();
    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 2 * big, count_cb, &c);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "id: 1\n", 6), 0);
    /* split so the line is buffered; the event is not over (its buffers are given back once
     * it is: test_parse_buffers_given_back_after_large_event) */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, line, 1000), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, line + 1000, big + 7 - 1000), 0);
    ck_assert_int_eq(c.count, 0);
    during = heap_in_use();
    ck_assert_uint_ge(during, before + big);
    apr_pool_destroy(sub);
    after = heap_in_use();
    ck_assert_msg(after < before + 64 * 1024, "heap before %zu after %zu", before, after);
}
END_TEST

START_TEST(test_parse_buffers_given_back_after_large_event)
{
    /* a long-lived stream that carried one 1 MB event holds no MB while it waits for the next,
     * and still parses what comes after it */
    const size_t big = 1 << 20;
    char *line = apr_palloc(pool, big + 16);
    apr_pool_t *sub;
    counter c = { 0, 0 };
    mcp_sse_parser_t *ps;
    size_t before, after;

    memcpy(line, "data: ", 6);
    memset(line + 6, 'z', big);
    memcpy(line + 6 + big, "\n\n", 2);

    ck_assert_int_eq(apr_pool_create(&sub, pool), APR_SUCCESS);
    ps = mcp_sse_parser_create(sub, 2 * big, count_cb, &c);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "id: 7\n", 6), 0);
    before = heap_in_use();
    /* split so the line is buffered too */
    ck_assert_int_eq(mcp_sse_parser_feed(ps, line, 1000), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, line + 1000, big + 8 - 1000), 0);
    ck_assert_int_eq(c.count, 1);
    ck_assert_uint_eq(c.data_bytes, big);
    after = heap_in_use();
    ck_assert_msg(after < before + 64 * 1024, "heap before %zu after the event %zu", before,
                  after);
    ck_assert_str_eq(mcp_sse_parser_last_event_id(ps), "7");
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "data: a\nda", 10), 0);
    ck_assert_int_eq(mcp_sse_parser_feed(ps, "ta: b\n\n", 7), 0);
    ck_assert_int_eq(c.count, 2);
    ck_assert_uint_eq(c.data_bytes, big + 3);
    apr_pool_destroy(sub);
}
END_TEST

/* ---- round trip: encoder output parsed back ------------------------------------------------ */

static unsigned int rng_state;

static unsigned int rng(void)
{
    /* xorshift32, fixed seed per test */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static char *random_text(const char *alphabet, size_t max_len)
{
    size_t n = rng() % (max_len + 1), i, alen = strlen(alphabet);
    char *s = apr_palloc(pool, n + 1);
    for (i = 0; i < n; i++)
        s[i] = alphabet[rng() % alen];
    s[n] = '\0';
    return s;
}

/* Data as a parser gives it back: CRLF and lone CR become LF. */
static char *normalise_eol(const char *s)
{
    char *out = apr_palloc(pool, strlen(s) + 1), *o = out;
    for (; *s; s++) {
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
    return out;
}

START_TEST(test_roundtrip_random)
{
    const char *data_alpha = "ab :\r\n\t{}\"\\\xc3\xa9\xef\xbb\xbf";
    const char *field_alpha = "ab: -_\t\xc3\xa9";
    int round;

    rng_state = 0x2545F491u;
    for (round = 0; round < 20; round++) {
        strbuf stream = { 0 }, expected = { 0 };
        const char *last_id = NULL;
        char *got;
        int i;

        sb_str(&stream, "");
        sb_str(&expected, "");
        for (i = 0; i < 300; i++) {
            unsigned int r = rng();
            const char *id = (r & 3) == 0 ? NULL : random_text(field_alpha, 8);
            const char *event = (r & 12) == 0 ? NULL : random_text(field_alpha, 8);
            const char *data = (r & 48) == 0 ? NULL : random_text(data_alpha, 40);
            long retry = (r & 192) == 0 ? (long)(rng() % 100000) : -1;
            apr_size_t len;
            char *ev;

            if ((r & 0x700) == 0) {
                /* interleave keep-alive comments */
                ev = mcp_sse_comment_format(pool, random_text(data_alpha, 20), &len);
                sb_add(&stream, ev, len);
            }
            ev = mcp_sse_event_format(pool, id, event, data, retry, &len);
            ck_assert_ptr_nonnull(ev);
            ck_assert_uint_eq(len, strlen(ev));
            sb_add(&stream, ev, len);
            if (id)
                last_id = id;
            if (data) {
                const char *nd = normalise_eol(data);
                describe_event(&expected, last_id, id != NULL,
                               event && *event ? event : "message", retry, nd, strlen(nd));
            }
        }
        sb_str(&expected, "rc=0");

        got = parse_desc(stream.p, stream.len, NULL, 0, 0, 1 << 20, 0, 0);
        ck_assert_str_eq(got, expected.p);
        free(got);
        got = parse_desc(stream.p, stream.len, NULL, 0, 1, 1 << 20, 0, 0);
        ck_assert_str_eq(got, expected.p);
        free(got);
        {
            /* random cut points */
            size_t cuts[64], k;
            for (k = 0; k < 64; k++)
                cuts[k] = rng() % (stream.len + 1);
            for (k = 1; k < 64; k++) {             /* insertion sort */
                size_t v = cuts[k], j = k;
                while (j > 0 && cuts[j - 1] > v) {
                    cuts[j] = cuts[j - 1];
                    j--;
                }
                cuts[j] = v;
            }
            got = parse_desc(stream.p, stream.len, cuts, 64, 0, 1 << 20, 0, 0);
            ck_assert_str_eq(got, expected.p);
            free(got);
        }
        free(stream.p);
        free(expected.p);
    }
}
END_TEST

static Suite *sse_suite(void)
{
    Suite *s = suite_create("mcp_sse");
    TCase *tc;

    tc = tcase_create("encoder");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_format_field_order);
    tcase_add_test(tc, test_format_priming);
    tcase_add_test(tc, test_format_multiline_data);
    tcase_add_test(tc, test_format_empty_values);
    tcase_add_test(tc, test_format_rejects_line_breaks);
    tcase_add_test(tc, test_format_comment);
    tcase_add_test(tc, test_format_output_parses_back);
    suite_add_tcase(s, tc);

    tc = tcase_create("parser");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_parse_basic);
    tcase_add_test(tc, test_parse_line_endings);
    tcase_add_test(tc, test_parse_crlf_split_across_feeds);
    tcase_add_test(tc, test_parse_field_syntax);
    tcase_add_test(tc, test_parse_nul_bytes);
    tcase_add_test(tc, test_parse_comments);
    tcase_add_test(tc, test_parse_idle_bytes_and_partial_event);
    tcase_add_test(tc, test_parse_priming_event);
    tcase_add_test(tc, test_parse_retry);
    tcase_add_test(tc, test_parse_retry_accessor);
    tcase_add_test(tc, test_parse_id_persistence);
    tcase_add_test(tc, test_parse_last_event_id_accessor);
    tcase_add_test(tc, test_parse_no_data_blocks);
    tcase_add_test(tc, test_parse_incomplete_event_discarded);
    tcase_add_test(tc, test_parse_finish_then_reuse);
    tcase_add_test(tc, test_parse_bom);
    tcase_add_test(tc, test_parse_callback_abort);
    suite_add_tcase(s, tc);

    tc = tcase_create("limits");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_parse_line_too_large);
    tcase_add_test(tc, test_parse_unterminated_line_bounded);
    tcase_add_test(tc, test_parse_event_too_large);
    tcase_add_test(tc, test_parse_long_comment_not_limited);
    tcase_add_test(tc, test_parse_zero_limit);
    suite_add_tcase(s, tc);

    tc = tcase_create("stress");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_parse_all_splits);
    tcase_add_test(tc, test_parse_all_3way_splits);
    tcase_add_test(tc, test_parse_long_stream_constant_memory);
    tcase_add_test(tc, test_parse_buffers_freed_with_pool);
    tcase_add_test(tc, test_parse_buffers_given_back_after_large_event);
    tcase_add_test(tc, test_roundtrip_random);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(sse_suite());
}
