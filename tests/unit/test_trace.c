/* Unit tests for mcp_trace: reading a client's traceparent, starting a trace, the next hop's. */
#include <check.h>
#include <string.h>

#include <apr_pools.h>

#include "mcp_trace.h"
#include "unit_main.h"
#include "unit_pool.h"

#define GOOD "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

START_TEST(test_parse_valid)
{
    mcp_trace_t t;

    ck_assert_int_eq(mcp_trace_parse(GOOD, &t), 0);
    ck_assert_str_eq(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    ck_assert_str_eq(t.parent_id, "00f067aa0ba902b7");
    ck_assert_str_eq(t.flags, "01");
    /* A later version may carry more fields after the four it shares with 00. */
    ck_assert_int_eq(mcp_trace_parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
                                     "-what-the-future-holds", &t), 0);
    ck_assert_str_eq(t.flags, "00");
}
END_TEST

START_TEST(test_parse_invalid)
{
    static const char *const bad[] = {
        "",
        "00",
        GOOD "-extra",                                                   /* 00 is exact */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       /* version ff */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",       /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",       /* zero parent id */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",       /* upper case */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",        /* short trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",        /* short flags */
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",      /* no '-' after */
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    };
    mcp_trace_t t;
    int i;

    ck_assert_int_eq(mcp_trace_parse(NULL, &t), -1);
    for (i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
        ck_assert_msg(mcp_trace_parse(bad[i], &t) == -1, "accepted: %s", bad[i]);
    }
}
END_TEST

START_TEST(test_start_and_child)
{
    unsigned char random[MCP_TRACE_RANDOM_BYTES], zeros[MCP_TRACE_RANDOM_BYTES];
    mcp_trace_t t, back;
    const char *h;
    int i;

    for (i = 0; i < MCP_TRACE_RANDOM_BYTES; i++) {
        random[i] = (unsigned char)(i * 17 + 3);
    }
    mcp_trace_start(&t, random);
    ck_assert_str_eq(t.trace_id, "031425364758697a8b9cadbecfe0f102");
    ck_assert_str_eq(t.parent_id, "132435465768798a");
    ck_assert_str_eq(t.flags, "01");
    /* The next hop: the same trace and flags, the span given, and it reads back. */
    h = mcp_trace_child(pool, &t, random + 8);
    ck_assert_str_eq(h, "00-031425364758697a8b9cadbecfe0f102-8b9cadbecfe0f102-01");
    ck_assert_int_eq(mcp_trace_parse(h, &back), 0);
    ck_assert_str_eq(back.trace_id, t.trace_id);
    /* All-zero random bytes still make valid ids. */
    memset(zeros, 0, sizeof(zeros));
    mcp_trace_start(&t, zeros);
    ck_assert_int_eq(mcp_trace_parse(mcp_trace_child(pool, &t, zeros), &back), 0);
    ck_assert_str_eq(back.trace_id, "00000000000000000000000000000001");
    ck_assert_str_eq(back.parent_id, "0000000000000001");
}
END_TEST

START_TEST(test_state)
{
    char big[600];

    ck_assert(mcp_trace_state_ok("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
    ck_assert(mcp_trace_state_ok(""));
    ck_assert(!mcp_trace_state_ok(NULL));
    ck_assert(!mcp_trace_state_ok("a=b\r\nX-Injected: 1"));
    ck_assert(!mcp_trace_state_ok("caf\xc3\xa9=1"));
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert(!mcp_trace_state_ok(big));
    big[512] = '\0';
    ck_assert(mcp_trace_state_ok(big));
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("mcp_trace");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_parse_valid);
    tcase_add_test(tc, test_parse_invalid);
    tcase_add_test(tc, test_start_and_child);
    tcase_add_test(tc, test_state);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(trace_suite());
}
