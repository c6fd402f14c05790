/* Unit tests for the stdio supervisor's pure parts: mcp_reqhead (the request head parser),
 * mcp_lines (newline framing), mcp_route (where a session's messages go, ids in flight) and
 * mcp_proc (starting and ending a process, with real children: /bin/sh). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mcp_lines.h"
#include "mcp_proc.h"
#include "mcp_reqhead.h"
#include "mcp_route.h"
#include "unit_main.h"

/* ---- mcp_reqhead ------------------------------------------------------------------------ */

#define POST_HEAD "POST /stdio/everything HTTP/1.1\r\nHost: 127.0.0.1:7601\r\n" \
                  "MCP-Supervisor-Key: secret\r\nContent-Length: 5\r\n" \
                  "Mcp-Session-Id:  abc@http://x/stdio/e \t\r\nExpect:\r\n\r\n"

START_TEST(test_head_whole_and_split)
{
    const char *req = POST_HEAD "hello";
    size_t len = strlen(req), head_len = strlen(POST_HEAD), split;
    mcp_reqhead_t *h = mcp_reqhead_create(4096, 16);
    size_t used;

    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(mcp_reqhead_feed(h, req, len, &used), MCP_REQHEAD_DONE);
    ck_assert_uint_eq(used, head_len);
    ck_assert_str_eq(mcp_reqhead_method(h), "POST");
    ck_assert_str_eq(mcp_reqhead_target(h), "/stdio/everything");
    ck_assert_int_eq(mcp_reqhead_minor(h), 1);
    ck_assert_str_eq(mcp_reqhead_field(h, "mcp-supervisor-key"), "secret");
    ck_assert_str_eq(mcp_reqhead_field(h, "MCP-SESSION-ID"), "abc@http://x/stdio/e");
    ck_assert_str_eq(mcp_reqhead_field(h, "Expect"), "");
    ck_assert_ptr_null(mcp_reqhead_field(h, "Accept"));
    ck_assert_int_eq(mcp_reqhead_content_length(h), 5);
    ck_assert_int_eq(mcp_reqhead_keep_alive(h), 1);
    ck_assert_int_eq(mcp_reqhead_expects_continue(h), 0);
    ck_assert_uint_eq(mcp_reqhead_fields(h), 5);
    ck_assert_str_eq(mcp_reqhead_field_name(h, 0), "Host");
    ck_assert_ptr_null(mcp_reqhead_field_name(h, 5));
    /* Done is sticky until a reset. */
    ck_assert_int_eq(mcp_reqhead_feed(h, "x", 1, &used), MCP_REQHEAD_DONE);
    ck_assert_uint_eq(used, 0);

    /* Every split in two gives the same, and says where the body starts. */
    for (split = 0; split <= len; split++) {
        size_t u1, u2;
        int rc;
        mcp_reqhead_reset(h);
        rc = mcp_reqhead_feed(h, req, split, &u1);
        if (rc == MCP_REQHEAD_DONE) {
            ck_assert_uint_eq(u1, head_len);
            continue;
        }
        ck_assert_int_eq(rc, MCP_REQHEAD_MORE);
        ck_assert_uint_eq(u1, split);
        ck_assert_int_eq(mcp_reqhead_feed(h, req + split, len - split, &u2), MCP_REQHEAD_DONE);
        ck_assert_uint_eq(u1 + u2, head_len);
        ck_assert_str_eq(mcp_reqhead_field(h, "Content-Length"), "5");
    }
    /* Byte by byte, with bare LF line ends and leading empty lines. */
    {
        const char *lf = "\r\n\nGET /stdio/a?x=1 HTTP/1.0\nConnection: keep-alive, Upgrade\n\nrest";
        size_t i, u, total = 0;
        int rc = MCP_REQHEAD_MORE;
        mcp_reqhead_reset(h);
        for (i = 0; rc == MCP_REQHEAD_MORE; i++) {
            rc = mcp_reqhead_feed(h, lf + i, 1, &u);
            total += u;
        }
        ck_assert_int_eq(rc, MCP_REQHEAD_DONE);
        ck_assert_str_eq(lf + total, "rest");
        ck_assert_str_eq(mcp_reqhead_target(h), "/stdio/a?x=1");
        ck_assert_int_eq(mcp_reqhead_minor(h), 0);
        ck_assert_int_eq(mcp_reqhead_keep_alive(h), 1);
        ck_assert_int_eq(mcp_reqhead_content_length(h), -1);
    }
    mcp_reqhead_destroy(h);
}
END_TEST

START_TEST(test_head_errors)
{
    static const struct {
        const char *head;
        int status;
        const char *error;
    } bad[] = {
        {"GET  / HTTP/1.1\r\n\r\n", 400, "no request-target"},
        {"GET / HTTP/2.0\r\n\r\n", 505, "HTTP/2.0 is not served"},
        {"GET / HTTP/1.1 \r\n\r\n", 400, "does not end with a version"},
        {"G(T / HTTP/1.1\r\n\r\n", 400, "method"},
        {"GET /a\x01 HTTP/1.1\r\n\r\n", 400, "control character"},
        {"GET / HTTP/1.1\r\nHost x\r\n\r\n", 400, "header field 1 has no colon"},
        {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400, "folded"},
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "whitespace before the colon"},
        {"GET / HTTP/1.1\r\n: x\r\n\r\n", 400, "empty name"},
        {"GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "is not a number"},
        {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "is not a number"},
        {"GET / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", 400, "18 digits"},
        {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "disagree"},
        {"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
         "both"},
        {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400, "CR"},
        {"GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n", 400, "control character"},
        {"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", 431, "more than 4"},
    };
    mcp_reqhead_t *h = mcp_reqhead_create(256, 4);
    char big[400];
    size_t i, used;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mcp_reqhead_reset(h);
        ck_assert_msg(mcp_reqhead_feed(h, bad[i].head, strlen(bad[i].head), &used)
                      == MCP_REQHEAD_ERROR, "accepted: %s", bad[i].head);
        ck_assert_int_eq(mcp_reqhead_status(h), bad[i].status);
        ck_assert_msg(strstr(mcp_reqhead_error(h), bad[i].error), "%s: \"%s\" lacks \"%s\"",
                      bad[i].head, mcp_reqhead_error(h), bad[i].error);
        /* Sticky. */
        ck_assert_int_eq(mcp_reqhead_feed(h, "\r\n\r\n", 4, &used), MCP_REQHEAD_ERROR);
    }
    /* A NUL byte. */
    mcp_reqhead_reset(h);
    ck_assert_int_eq(mcp_reqhead_feed(h, "GET / HTTP/1.1\r\nA: \0\r\n\r\n", 24, &used),
                     MCP_REQHEAD_ERROR);
    ck_assert_str_eq(mcp_reqhead_error(h), "the request head has a NUL byte");
    /* Over the size, in one feed or in pieces. */
    memset(big, 'a', sizeof(big));
    mcp_reqhead_reset(h);
    ck_assert_int_eq(mcp_reqhead_feed(h, big, sizeof(big), &used), MCP_REQHEAD_ERROR);
    ck_assert_int_eq(mcp_reqhead_status(h), 431);
    ck_assert_str_eq(mcp_reqhead_error(h), "the request head is over 256 bytes");
    mcp_reqhead_reset(h);
    ck_assert_int_eq(mcp_reqhead_feed(h, big, 200, &used), MCP_REQHEAD_MORE);
    ck_assert_int_eq(mcp_reqhead_feed(h, big, 56, &used), MCP_REQHEAD_ERROR);
    /* Exactly at the size is fine. */
    {
        char exact[257];
        const char *start = "GET / HTTP/1.1\r\nA: ";
        size_t n = strlen(start);
        memcpy(exact, start, n);
        memset(exact + n, 'b', 256 - n - 4);
        memcpy(exact + 252, "\r\n\r\n", 4);
        mcp_reqhead_reset(h);
        ck_assert_int_eq(mcp_reqhead_feed(h, exact, 256, &used), MCP_REQHEAD_DONE);
        ck_assert_uint_eq(strlen(mcp_reqhead_field(h, "a")), 256 - n - 4);
    }
    /* Connection: close, Expect: 100-continue, HTTP/1.0 without keep-alive. */
    mcp_reqhead_reset(h);
    {
        const char *req = "POST / HTTP/1.1\r\nConnection: Close\r\nExpect: 100-Continue\r\n\r\n";
        ck_assert_int_eq(mcp_reqhead_feed(h, req, strlen(req), &used), MCP_REQHEAD_DONE);
    }
    ck_assert_int_eq(mcp_reqhead_keep_alive(h), 0);
    ck_assert_int_eq(mcp_reqhead_expects_continue(h), 1);
    mcp_reqhead_reset(h);
    {
        const char *req = "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        ck_assert_int_eq(mcp_reqhead_feed(h, req, strlen(req), &used), MCP_REQHEAD_DONE);
    }
    ck_assert_int_eq(mcp_reqhead_keep_alive(h), 0);
    ck_assert_int_eq(mcp_reqhead_has_transfer_encoding(h), 1);
    mcp_reqhead_destroy(h);
}
END_TEST

/* ---- mcp_lines --------------------------------------------------------------------------- */

typedef struct lines_seen_t {
    char text[4096];
    int  count, stop_at;
} lines_seen_t;

static int seen_line(void *baton, const char *line, size_t len, int cut)
{
    lines_seen_t *s = baton;
    size_t n = strlen(s->text);

    snprintf(s->text + n, sizeof(s->text) - n, "[%.*s%s]", (int)len, line, cut ? "~" : "");
    s->count++;
    return s->stop_at && s->count == s->stop_at ? 7 : 0;
}

/* Feeds text in pieces of size step (0: at once) and finishes; the lines seen. */
static int lines_run(const char *text, size_t max, int mode, size_t step, lines_seen_t *seen)
{
    mcp_lines_t *l = mcp_lines_create(max, mode);
    size_t len = strlen(text), off = 0;
    int rc = 0;

    memset(seen, 0, sizeof(*seen));
    while (off < len && rc == 0) {
        size_t n = step && step < len - off ? step : len - off;
        rc = mcp_lines_feed(l, text + off, n, seen_line, seen);
        off += n;
    }
    if (rc == 0)
        rc = mcp_lines_finish(l, seen_line, seen);
    mcp_lines_destroy(l);
    return rc;
}

START_TEST(test_lines)
{
    lines_seen_t a, b;
    size_t step;

    /* Every split gives the same lines; CRLF and LF; empty lines are lines; the last one
     * without its LF comes at finish. */
    for (step = 0; step < 12; step++) {
        ck_assert_int_eq(lines_run("one\r\ntwo\n\nthree\r\nfour", 5, MCP_LINES_REFUSE, step, &a),
                         0);
        ck_assert_str_eq(a.text, "[one][two][][three][four]");
    }
    /* A CR that is not before the LF stays. */
    ck_assert_int_eq(lines_run("a\rb\n", 5, MCP_LINES_REFUSE, 0, &a), 0);
    ck_assert_str_eq(a.text, "[a\rb]");
    /* Exactly max is fine (its CR not counted); one more is refused, whatever the split. */
    for (step = 0; step < 9; step++) {
        ck_assert_int_eq(lines_run("12345\r\nabcde\n", 5, MCP_LINES_REFUSE, step, &a), 0);
        ck_assert_str_eq(a.text, "[12345][abcde]");
        ck_assert_int_eq(lines_run("ok\n123456\nnext\n", 5, MCP_LINES_REFUSE, step, &a),
                         MCP_LINES_TOO_LONG);
        ck_assert_str_eq(a.text, "[ok]");
        ck_assert_int_eq(lines_run("12345\r6\n", 5, MCP_LINES_REFUSE, step, &a),
                         MCP_LINES_TOO_LONG);
        /* Cut: the head, marked, then the next line as usual. */
        ck_assert_int_eq(lines_run("ok\n123456789\nnext\n", 5, MCP_LINES_CUT, step, &b), 0);
        ck_assert_str_eq(b.text, "[ok][12345~][next]");
    }
    /* A last line over the bound at finish. */
    ck_assert_int_eq(lines_run("123456", 5, MCP_LINES_REFUSE, 0, &a), MCP_LINES_TOO_LONG);
    ck_assert_int_eq(lines_run("123456", 5, MCP_LINES_CUT, 0, &a), 0);
    ck_assert_str_eq(a.text, "[12345~]");
    /* The callback stops a feed. */
    {
        mcp_lines_t *l = mcp_lines_create(100, MCP_LINES_REFUSE);
        memset(&a, 0, sizeof(a));
        a.stop_at = 2;
        ck_assert_int_eq(mcp_lines_feed(l, "a\nb\nc\n", 6, seen_line, &a), 7);
        ck_assert_str_eq(a.text, "[a][b]");
        ck_assert_int_eq(mcp_lines_feed(l, "par", 3, seen_line, &a), 0);
        ck_assert_uint_eq(mcp_lines_pending(l), 3);
        mcp_lines_destroy(l);
    }
    /* A long line cut by feeds, then short ones: the same lines (the buffer is given back). */
    {
        static char big[200001];
        mcp_lines_t *l = mcp_lines_create(300000, MCP_LINES_REFUSE);
        memset(big, 'x', 200000);
        big[199999] = '\n';
        memset(&a, 0, sizeof(a));
        ck_assert_int_eq(mcp_lines_feed(l, big, 100000, seen_line, &a), 0);
        ck_assert_uint_eq(mcp_lines_pending(l), 100000);
        ck_assert_int_eq(mcp_lines_feed(l, big + 100000, 100000, seen_line, &a), 0);
        ck_assert_int_eq(a.count, 1);
        ck_assert_uint_eq(mcp_lines_pending(l), 0);
        memset(&a, 0, sizeof(a));
        ck_assert_int_eq(mcp_lines_feed(l, "sh", 2, seen_line, &a), 0);
        ck_assert_int_eq(mcp_lines_feed(l, "ort\n", 4, seen_line, &a), 0);
        ck_assert_str_eq(a.text, "[short]");
        mcp_lines_destroy(l);
    }
    /* Sticky errors. */
    {
        mcp_lines_t *l = mcp_lines_create(2, MCP_LINES_REFUSE);
        memset(&a, 0, sizeof(a));
        ck_assert_int_eq(mcp_lines_feed(l, "abcd", 4, seen_line, &a), MCP_LINES_TOO_LONG);
        ck_assert_int_eq(mcp_lines_feed(l, "\n", 1, seen_line, &a), MCP_LINES_TOO_LONG);
        ck_assert_int_eq(a.count, 0);
        mcp_lines_destroy(l);
    }
}
END_TEST

/* ---- mcp_route ----------------------------------------------------------------------------- */

typedef struct failed_t {
    char text[512];
} failed_t;

static void fail_cb(void *baton, void *owner, mcp_route_exchange_t *x, const char *id)
{
    failed_t *f = baton;
    size_t n = strlen(f->text);

    (void)x;
    snprintf(f->text + n, sizeof(f->text) - n, "%s:%s ", (const char *)owner, id);
}

#define MSG(r, id, tok, dest) mcp_route_message(r, id, tok, "m", 1, dest)

START_TEST(test_route)
{
    mcp_route_t *r = mcp_route_create(3, 100);
    mcp_route_exchange_t *init, *p1, *p2, *get, *x;
    const char *ids1[] = {"1", "\"a\""}, *toks1[] = {"\"t1\""}, *ids2[] = {"2"}, *dup;
    const char *init_id[] = {"0"};
    mcp_route_dest_t d;
    failed_t f;
    size_t len;
    char *m;

    /* Initialize: only its answer; a notification before it waits in the queue. */
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_INIT, "I", init_id, 1, NULL, 0, &init, &dup),
                     MCP_ROUTE_OK);
    ck_assert_int_eq(MSG(r, NULL, NULL, &d), MCP_ROUTE_OK);
    ck_assert_ptr_null(d.exchange);
    ck_assert_uint_eq(mcp_route_queued(r), 1);
    ck_assert_int_eq(MSG(r, "0", NULL, &d), MCP_ROUTE_OK);
    ck_assert_ptr_eq(d.exchange, init);
    ck_assert(d.answered && d.last);
    mcp_route_close(r, init);
    ck_assert_uint_eq(mcp_route_in_flight(r), 0);

    /* A POST with two ids and a token; the queue goes to it first (the caller drains). */
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P1", ids1, 2, toks1, 1, &p1, &dup),
                     MCP_ROUTE_OK);
    m = mcp_route_queue_pop(r, &len);
    ck_assert_str_eq(m, "m");
    ck_assert_uint_eq(len, 1);
    free(m);
    ck_assert_ptr_null(mcp_route_queue_pop(r, &len));
    /* The same id again, in flight: refused; 1 and "1" differ. */
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P2", ids1 + 1, 1, NULL, 0, &x, &dup),
                     MCP_ROUTE_DUPLICATE);
    ck_assert_str_eq(dup, "\"a\"");
    ck_assert_ptr_null(x);
    {
        const char *twice[] = {"5", "5"};
        ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P2", twice, 2, NULL, 0, &x, &dup),
                         MCP_ROUTE_DUPLICATE);
    }
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P2", ids2, 1, NULL, 0, &p2, &dup),
                     MCP_ROUTE_OK);
    /* Progress by token; others to the oldest POST while no GET is open. */
    MSG(r, NULL, "\"t1\"", &d);
    ck_assert_ptr_eq(d.owner, "P1");
    ck_assert(!d.answered);
    MSG(r, NULL, "\"other\"", &d);
    ck_assert_ptr_eq(d.owner, "P1");
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_GET, "G", NULL, 0, NULL, 0, &get, &dup),
                     MCP_ROUTE_OK);
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_GET, "G2", NULL, 0, NULL, 0, &x, &dup),
                     MCP_ROUTE_GET_OPEN);
    MSG(r, NULL, NULL, &d);
    ck_assert_ptr_eq(d.owner, "G");
    MSG(r, "99", NULL, &d);                 /* an id nobody has: for anyone */
    ck_assert_ptr_eq(d.owner, "G");
    ck_assert(!d.answered);
    /* Answers: the first of two is not the last. */
    MSG(r, "\"a\"", NULL, &d);
    ck_assert_ptr_eq(d.owner, "P1");
    ck_assert(d.answered && !d.last);
    MSG(r, "\"a\"", NULL, &d);              /* answered already: for anyone */
    ck_assert_ptr_eq(d.owner, "G");
    ck_assert_uint_eq(mcp_route_in_flight(r), 2);
    /* P1's client goes: its id 1 is an orphan, still in flight; its answer goes to G. */
    mcp_route_close(r, p1);
    ck_assert_uint_eq(mcp_route_in_flight(r), 2);
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P3", ids1, 1, NULL, 0, &x, &dup),
                     MCP_ROUTE_DUPLICATE);
    MSG(r, NULL, "\"t1\"", &d);              /* its token is forgotten */
    ck_assert_ptr_eq(d.owner, "G");
    MSG(r, "1", NULL, &d);
    ck_assert_ptr_eq(d.owner, "G");
    ck_assert_uint_eq(mcp_route_in_flight(r), 1);
    ck_assert_uint_eq(mcp_route_exchanges(r), 2);
    /* The GET goes: for anyone is the oldest POST, P2. */
    mcp_route_close(r, get);
    MSG(r, NULL, NULL, &d);
    ck_assert_ptr_eq(d.owner, "P2");
    /* The process dies: each unanswered id is named once, with its owner. */
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P4", ids1, 2, NULL, 0, &x, &dup),
                     MCP_ROUTE_OK);
    memset(&f, 0, sizeof(f));
    mcp_route_fail_all(r, fail_cb, &f);
    ck_assert_str_eq(f.text, "P2:2 P4:1 P4:\"a\" ");
    ck_assert_uint_eq(mcp_route_in_flight(r), 0);
    mcp_route_close(r, p2);
    mcp_route_close(r, x);
    ck_assert_uint_eq(mcp_route_exchanges(r), 0);
    mcp_route_destroy(r);
}
END_TEST

START_TEST(test_route_cancel)
{
    mcp_route_t *r = mcp_route_create(10, 100);
    mcp_route_exchange_t *x;
    const char *ids[] = {"1", "2"}, *dup;
    mcp_route_dest_t d;

    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P", ids, 2, NULL, 0, &x, &dup),
                     MCP_ROUTE_OK);
    mcp_route_cancel(r, "1", &d);
    ck_assert_ptr_eq(d.owner, "P");
    ck_assert(d.answered && !d.last);
    mcp_route_cancel(r, "1", &d);              /* not in flight any more */
    ck_assert_ptr_null(d.exchange);
    {
        mcp_route_exchange_t *q;                /* "1" may be used again */
        ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "Q", ids, 1, NULL, 0, &q, &dup),
                         MCP_ROUTE_OK);
        mcp_route_message(r, "1", NULL, "m", 1, &d);
        ck_assert_ptr_eq(d.owner, "Q");
        mcp_route_close(r, q);
    }
    mcp_route_message(r, "2", NULL, "m", 1, &d);
    ck_assert_ptr_eq(d.owner, "P");
    ck_assert(d.last);
    mcp_route_close(r, d.exchange);
    /* An orphan cancelled is forgotten. */
    ck_assert_int_eq(mcp_route_open(r, MCP_ROUTE_POST, "P", ids, 1, NULL, 0, &x, &dup),
                     MCP_ROUTE_OK);
    mcp_route_close(r, x);
    ck_assert_uint_eq(mcp_route_in_flight(r), 1);
    mcp_route_cancel(r, "1", &d);
    ck_assert_ptr_null(d.exchange);
    ck_assert_uint_eq(mcp_route_in_flight(r), 0);
    mcp_route_destroy(r);
}
END_TEST

START_TEST(test_route_queue_bounds)
{
    mcp_route_t *r = mcp_route_create(3, 10);
    mcp_route_dest_t d;
    size_t len;
    char *m;

    mcp_route_message(r, NULL, NULL, "a", 1, &d);
    mcp_route_message(r, NULL, NULL, "b", 1, &d);
    mcp_route_message(r, NULL, NULL, "c", 1, &d);
    mcp_route_message(r, NULL, NULL, "d", 1, &d);  /* over 3 messages: "a" goes */
    ck_assert_uint_eq(mcp_route_dropped(r), 1);
    ck_assert_uint_eq(mcp_route_dropped(r), 0);
    mcp_route_message(r, NULL, NULL, "0123456789", 10, &d);  /* over 10 bytes: all others go */
    ck_assert_uint_eq(mcp_route_dropped(r), 3);
    ck_assert_uint_eq(mcp_route_queued(r), 1);
    mcp_route_message(r, NULL, NULL, "too large alone", 15, &d);  /* kept, the older goes */
    ck_assert_uint_eq(mcp_route_queued(r), 1);
    m = mcp_route_queue_pop(r, &len);
    ck_assert_str_eq(m, "too large alone");
    free(m);
    mcp_route_message(r, NULL, NULL, "x", 1, &d);
    mcp_route_destroy(r);                           /* frees what is queued */
}
END_TEST

/* ---- mcp_proc ------------------------------------------------------------------------------ */

static char *const sh_env[] = {"ONLY=this", NULL};

/* Reads fd until EOF or 5 s; the bytes, NUL-terminated. */
static void read_all(int fd, char *buf, size_t len)
{
    size_t off = 0;
    time_t end = time(NULL) + 5;

    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    while (off < len - 1 && time(NULL) < end) {
        ssize_t n = read(fd, buf + off, len - 1 - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    buf[off] = '\0';
}

static int wait_for_pid(pid_t pid)
{
    int status;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

START_TEST(test_proc_spawn)
{
    /* The environment is exactly what was given; the directory; descriptors 0-2 only (3 is the
     * listing's own); its own group; stdin reaches it. */
    char *const argv[] = {"/bin/sh", "-c",
                          "echo env=$(env | grep -v '^PWD=' | grep -v '^SHLVL=' | grep -v '^_=' "
                          "| tr '\\n' ' '); echo dir=$(pwd); ls /proc/self/fd | tr '\\n' ' '; "
                          "echo; echo pgid=$(ps -o pgid= -p $$ | tr -d ' ') pid=$$; "
                          "read x; echo got=$x; echo err >&2", NULL};
    mcp_proc_limit_t limits[] = {{RLIMIT_NOFILE, 64}};
    mcp_proc_spec_t spec;
    mcp_proc_t p;
    char err[256], out[2048], errout[256], want[64];
    int extra = open("/dev/null", O_RDONLY);  /* not close-on-exec: must not reach it */

    memset(&spec, 0, sizeof(spec));
    spec.argv = argv;
    spec.envp = sh_env;
    spec.directory = "/tmp";
    spec.limits = limits;
    spec.nlimits = 1;
    ck_assert_int_eq(mcp_proc_spawn(&spec, &p, err, sizeof(err)), 0);
    ck_assert_int_gt(p.pid, 0);
    ck_assert_int_ge(p.in_fd, 0);
    ck_assert(fcntl(p.out_fd, F_GETFL) & O_NONBLOCK);
    ck_assert(fcntl(p.in_fd, F_GETFD) & FD_CLOEXEC);
    ck_assert_int_eq(write(p.in_fd, "hello\n", 6), 6);
    read_all(p.out_fd, out, sizeof(out));
    read_all(p.err_fd, errout, sizeof(errout));
    ck_assert_msg(strstr(out, "env=ONLY=this\n"), "%s", out);
    ck_assert_msg(strstr(out, "dir=/tmp\n"), "%s", out);
    ck_assert_msg(strstr(out, "\n0 1 2 3 \n"), "%s", out);
    snprintf(want, sizeof(want), "pgid=%d pid=%d", (int)p.pid, (int)p.pid);
    ck_assert_msg(strstr(out, want), "%s lacks %s", out, want);
    ck_assert_msg(strstr(out, "got=hello"), "%s", out);
    ck_assert_str_eq(errout, "err\n");
    ck_assert(WIFEXITED(wait_for_pid(p.pid)));
    mcp_proc_close(&p);
    close(extra);
}
END_TEST

START_TEST(test_proc_spawn_failures)
{
    char *const missing[] = {"/nonexistent/server", "--flag", NULL};
    char *const sh[] = {"/bin/sh", "-c", "exit 0", NULL};
    mcp_proc_spec_t spec;
    mcp_proc_t p;
    char err[256];

    memset(&spec, 0, sizeof(spec));
    spec.argv = missing;
    spec.envp = sh_env;
    ck_assert_int_eq(mcp_proc_spawn(&spec, &p, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "execve /nonexistent/server: No such file or directory");
    ck_assert_int_eq(p.pid, -1);
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);   /* reaped already */
    spec.argv = sh;
    spec.directory = "/nonexistent-dir";
    ck_assert_int_eq(mcp_proc_spawn(&spec, &p, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "chdir /nonexistent-dir: No such file or directory");
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, "no-such-user-here", NULL, err, sizeof(err)),
                     -1);
    ck_assert_str_eq(err, "no user named no-such-user-here");
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, NULL, "no-such-group-here", err, sizeof(err)),
                     -1);
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, "#12345", "#23456", err, sizeof(err)), 0);
    ck_assert_int_eq(spec.uid, 12345);
    ck_assert_int_eq(spec.gid, 23456);
    ck_assert_uint_eq(spec.ngroups, 1);
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, "#12345", NULL, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "user #12345 has no name, so no group: give a group");
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, "#x", NULL, err, sizeof(err)), -1);
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, "#0", NULL, err, sizeof(err)), 0);
    ck_assert_int_eq(spec.uid, 0);
    ck_assert_int_eq(mcp_proc_resolve_user(&spec, "root", NULL, err, sizeof(err)), 0);
    ck_assert_int_eq(spec.uid, 0);
    ck_assert(spec.set_ids && spec.ngroups >= 1);
}
END_TEST

START_TEST(test_proc_end)
{
    /* One that exits at EOF; one that ignores SIGTERM (and has a child in its group). */
    char *const polite[] = {"/bin/sh", "-c", "read x; exit 4", NULL};
    char *const stubborn[] = {"/bin/sh", "-c", "trap '' TERM; sleep 100 & echo ready; read x; "
                              "wait", NULL};
    mcp_proc_spec_t spec;
    mcp_proc_t p;
    char err[256], what[128];
    int status;

    memset(&spec, 0, sizeof(spec));
    spec.envp = sh_env;
    spec.argv = polite;
    ck_assert_int_eq(mcp_proc_spawn(&spec, &p, err, sizeof(err)), 0);
    ck_assert_int_eq(mcp_proc_end_begin(&p, 1000), 500);
    ck_assert_int_eq(p.in_fd, -1);
    status = wait_for_pid(p.pid);
    mcp_proc_describe_status(status, what, sizeof(what));
    ck_assert_str_eq(what, "exited with status 4");
    ck_assert(!mcp_proc_group_alive(&p));
    mcp_proc_close(&p);

    spec.argv = stubborn;
    ck_assert_int_eq(mcp_proc_spawn(&spec, &p, err, sizeof(err)), 0);
    {
        char line[16] = "";
        FILE *f = fdopen(dup(p.out_fd), "r");
        fcntl(fileno(f), F_SETFL, fcntl(fileno(f), F_GETFL) & ~O_NONBLOCK);
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));   /* its trap is set */
        ck_assert_str_eq(line, "ready\n");
        fclose(f);
    }
    ck_assert_int_eq(mcp_proc_end_next(&p, 1001), 501);   /* SIGTERM (stdin closed too) */
    ck_assert_int_eq(p.ending, 2);
    usleep(100000);
    ck_assert(mcp_proc_group_alive(&p));
    ck_assert_int_eq(mcp_proc_end_next(&p, 1001), -1);    /* SIGKILL to the group */
    status = wait_for_pid(p.pid);
    mcp_proc_describe_status(status, what, sizeof(what));
    ck_assert_str_eq(what, "was killed by signal 9 (Killed)");
    mcp_proc_close(&p);
}
END_TEST

static Suite *stdio_suite(void)
{
    Suite *s = suite_create("stdio");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_head_whole_and_split);
    tcase_add_test(tc, test_head_errors);
    tcase_add_test(tc, test_lines);
    tcase_add_test(tc, test_route);
    tcase_add_test(tc, test_route_cancel);
    tcase_add_test(tc, test_route_queue_bounds);
    tcase_add_test(tc, test_proc_spawn);
    tcase_add_test(tc, test_proc_spawn_failures);
    tcase_add_test(tc, test_proc_end);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(stdio_suite());
}
