/* Unit tests for mcp_memo: the per-process cache of texts by key with an expiry. */
#include <string.h>

#include <check.h>

#include "unit_main.h"
#include "unit_pool.h"

#include "mcp_memo.h"

START_TEST(fresh_stale_and_unknown)
{
    static mcp_memo_slot_t slots[4];
    static mcp_memo_t memo = MCP_MEMO_INIT(slots);
    const char *v;

    ck_assert_int_eq(memo.n, 4);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 100, &v), 0);
    ck_assert_ptr_null(v);
    mcp_memo_put(&memo, "a", "one", 200);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 100, &v), 1);
    ck_assert_str_eq(v, "one");
    /* Expired: still readable, as stale. */
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 200, &v), 0);
    ck_assert_str_eq(v, "one");
    /* Replaced; and kept as NULL ("nothing known"), fresh. */
    mcp_memo_put(&memo, "a", "two", 300);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 250, &v), 1);
    ck_assert_str_eq(v, "two");
    mcp_memo_put(&memo, "a", NULL, 400);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 350, &v), 1);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "b", 0, &v), 0);
}
END_TEST

START_TEST(a_full_cache_gives_up_what_expires_first)
{
    static mcp_memo_slot_t slots[3];
    static mcp_memo_t memo = MCP_MEMO_INIT(slots);
    const char *v;

    mcp_memo_put(&memo, "a", "A", 300);
    mcp_memo_put(&memo, "b", "B", 100);
    mcp_memo_put(&memo, "c", "C", 200);
    mcp_memo_put(&memo, "d", "D", 400);     /* takes b's slot */
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "b", 0, &v), 0);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 0, &v), 1);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "c", 0, &v), 1);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "d", 0, &v), 1);
    ck_assert_str_eq(v, "D");
    mcp_memo_put(&memo, "c", "C2", 500);    /* its own slot again */
    mcp_memo_put(&memo, "e", "E", 600);     /* takes a's (300, the first to expire) */
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "a", 0, &v), 0);
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "c", 0, &v), 1);
    ck_assert_str_eq(v, "C2");
    ck_assert_int_eq(mcp_memo_get(&memo, pool, "e", 0, &v), 1);
}
END_TEST

static Suite *memo_suite(void)
{
    Suite *s = suite_create("mcp_memo");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, fresh_stale_and_unknown);
    tcase_add_test(tc, a_full_cache_gives_up_what_expires_first);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(memo_suite());
}
