/* Unit tests for mcp_protocol: which revisions are served and the rules of each. */
#include <string.h>

#include <check.h>

#include "unit_main.h"

#include "mcp_protocol.h"

START_TEST(served_revisions)
{
    ck_assert_ptr_nonnull(mcp_protocol_served("2025-03-26"));
    ck_assert_ptr_nonnull(mcp_protocol_served("2025-06-18"));
    ck_assert_ptr_nonnull(mcp_protocol_served("2025-11-25"));
    ck_assert_ptr_null(mcp_protocol_served("2024-11-05"));
    ck_assert_ptr_null(mcp_protocol_served(""));
    ck_assert_ptr_null(mcp_protocol_served(NULL));
    ck_assert_ptr_null(mcp_protocol_served("2025-11-25 "));
    /* served, statelessly: never with a session */
    ck_assert_ptr_nonnull(mcp_protocol_served("2026-07-28"));
    ck_assert_ptr_null(mcp_protocol_session("2026-07-28"));
    ck_assert_ptr_nonnull(mcp_protocol_session("2025-11-25"));
    ck_assert_str_eq(mcp_protocol_latest(), "2025-11-25");
    ck_assert(mcp_protocol_is_modern("2026-07-28"));
    ck_assert(mcp_protocol_is_modern("2027-03-01"));
    ck_assert(!mcp_protocol_is_modern("2025-11-25"));
    ck_assert(!mcp_protocol_is_modern("2024-11-05"));
    ck_assert(!mcp_protocol_is_modern("garbage"));
    ck_assert(!mcp_protocol_is_modern(NULL));
}
END_TEST

START_TEST(rules_per_revision)
{
    ck_assert(mcp_protocol_find("2025-03-26")->batches);
    ck_assert(!mcp_protocol_find("2025-06-18")->batches);
    ck_assert(!mcp_protocol_find("2025-11-25")->batches);
    ck_assert(!mcp_protocol_find("2025-03-26")->version_header);
    ck_assert(mcp_protocol_find("2025-06-18")->version_header);
    ck_assert(mcp_protocol_find("2025-11-25")->priming);
    ck_assert(!mcp_protocol_find("2025-06-18")->priming);
    ck_assert(!mcp_protocol_find("2025-03-26")->priming);
    ck_assert_int_eq(mcp_protocol_find("2025-06-18")->era, MCP_ERA_2025);
    ck_assert_int_eq(mcp_protocol_find("2026-07-28")->era, MCP_ERA_2026);
    ck_assert_ptr_nonnull(mcp_protocol_served(MCP_PROTOCOL_DEFAULT));
}
END_TEST

START_TEST(served_list_matches_table)
{
    static const char *all[] = { "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26" };
    const char *list = mcp_protocol_served_list(), *every = mcp_protocol_list(MCP_ERA_UNKNOWN);
    size_t i;

    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        int listed = strstr(list, all[i]) != NULL;
        ck_assert_msg(listed == (mcp_protocol_session(all[i]) != NULL), "%s", all[i]);
        ck_assert_msg((strstr(every, all[i]) != NULL) == (mcp_protocol_served(all[i]) != NULL),
                      "%s", all[i]);
    }
    ck_assert_str_eq(mcp_protocol_list(MCP_ERA_2026), "2026-07-28");
}
END_TEST

START_TEST(primed_revisions)
{
    const char *v[4];

    ck_assert_int_eq(mcp_protocol_primed(v, 4), 1);
    ck_assert_str_eq(v[0], "2025-11-25");
    ck_assert_ptr_null(v[1]);
    ck_assert_int_eq(mcp_protocol_primed(v, 0), 0);
}
END_TEST

static Suite *protocol_suite(void)
{
    Suite *s = suite_create("mcp_protocol");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, served_revisions);
    tcase_add_test(tc, rules_per_revision);
    tcase_add_test(tc, served_list_matches_table);
    tcase_add_test(tc, primed_revisions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(protocol_suite());
}
