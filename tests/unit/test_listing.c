/* Unit tests for mcp_listing: which list results name what, and filtering their items. */
#include <check.h>
#include <string.h>

#include <json-c/json.h>

#include "mcp_listing.h"
#include "unit_main.h"

/* Keeps names that do not start with "secret"; counts the calls and records their kinds. */
typedef struct {
    int calls;
    mcp_target_kind_t kind;
} seen_t;

static int keep_public(void *baton, mcp_target_kind_t kind, const char *name)
{
    seen_t *seen = baton;

    seen->calls++;
    seen->kind = kind;
    return strncmp(name, "secret", 6) != 0;
}

static int filter(const char *in, mcp_target_kind_t kind, const char **out, seen_t *seen)
{
    static char buf[4096];
    json_object *o = json_tokener_parse(in);
    int removed;

    ck_assert_ptr_nonnull(o);
    memset(seen, 0, sizeof(*seen));
    removed = mcp_listing_filter(o, kind, keep_public, seen);
    strncpy(buf, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE), sizeof(buf) - 1);
    json_object_put(o);
    *out = buf;
    return removed;
}

START_TEST(test_kind)
{
    ck_assert_int_eq(mcp_listing_kind("tools/list"), MCP_TARGET_TOOL);
    ck_assert_int_eq(mcp_listing_kind("prompts/list"), MCP_TARGET_PROMPT);
    ck_assert_int_eq(mcp_listing_kind("resources/list"), MCP_TARGET_RESOURCE);
    ck_assert_int_eq(mcp_listing_kind("resources/templates/list"), MCP_TARGET_NONE);
    ck_assert_int_eq(mcp_listing_kind("tools/call"), MCP_TARGET_NONE);
    ck_assert_int_eq(mcp_listing_kind("tools/list/"), MCP_TARGET_NONE);
    ck_assert_int_eq(mcp_listing_kind(NULL), MCP_TARGET_NONE);
}
END_TEST

START_TEST(test_tools_filtered_in_order)
{
    const char *out;
    seen_t seen;

    ck_assert_int_eq(filter("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"tools\":["
                            "{\"name\":\"a\"},{\"name\":\"secret-x\"},{\"name\":\"b\","
                            "\"inputSchema\":{}},{\"name\":\"secret\"}],\"nextCursor\":\"c2\","
                            "\"_meta\":{\"k\":1}}}", MCP_TARGET_TOOL, &out, &seen), 2);
    ck_assert_str_eq(out, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"tools\":[{\"name\":\"a\"},"
                          "{\"name\":\"b\",\"inputSchema\":{}}],\"nextCursor\":\"c2\","
                          "\"_meta\":{\"k\":1}}}");
    ck_assert_int_eq(seen.calls, 4);
    ck_assert_int_eq(seen.kind, MCP_TARGET_TOOL);
}
END_TEST

START_TEST(test_resources_by_uri_and_prompts_by_name)
{
    const char *out;
    seen_t seen;

    ck_assert_int_eq(filter("{\"id\":1,\"result\":{\"resources\":[{\"uri\":\"secret://a\","
                            "\"name\":\"public\"},{\"uri\":\"file:///x\",\"name\":\"secret\"}]}}",
                            MCP_TARGET_RESOURCE, &out, &seen), 1);
    ck_assert_str_eq(out, "{\"id\":1,\"result\":{\"resources\":[{\"uri\":\"file:///x\","
                          "\"name\":\"secret\"}]}}");
    ck_assert_int_eq(filter("{\"id\":1,\"result\":{\"prompts\":[{\"name\":\"secret-p\"}]}}",
                            MCP_TARGET_PROMPT, &out, &seen), 1);
    ck_assert_str_eq(out, "{\"id\":1,\"result\":{\"prompts\":[]}}");
}
END_TEST

START_TEST(test_unjudgeable_items_are_removed)
{
    const char *out;
    seen_t seen;

    ck_assert_int_eq(filter("{\"id\":1,\"result\":{\"tools\":[{\"name\":1},{},\"tool\",null,"
                            "{\"name\":\"ok\"}]}}", MCP_TARGET_TOOL, &out, &seen), 4);
    ck_assert_str_eq(out, "{\"id\":1,\"result\":{\"tools\":[{\"name\":\"ok\"}]}}");
    ck_assert_int_eq(seen.calls, 1);
}
END_TEST

START_TEST(test_nothing_changed_when_not_a_list_result)
{
    static const char *const same[] = {
        "{\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no\"}}",
        "{\"id\":1,\"result\":{\"tools\":{\"name\":\"secret\"}}}",
        "{\"id\":1,\"result\":{\"prompts\":[{\"name\":\"secret\"}]}}",    /* not tools */
        "{\"id\":1,\"result\":[]}",
        "[{\"id\":1,\"result\":{\"tools\":[{\"name\":\"secret\"}]}}]",
        "{\"id\":1,\"result\":{\"tools\":[{\"name\":\"public\"}]}}",
    };
    const char *out;
    seen_t seen;
    size_t i;

    for (i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        json_object *o = json_tokener_parse(same[i]);
        const char *before = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));

        json_object_put(o);
        ck_assert_int_eq(filter(same[i], MCP_TARGET_TOOL, &out, &seen), 0);
        ck_assert_str_eq(out, before);
        free((void *)before);
    }
    ck_assert_int_eq(filter("{\"id\":1,\"result\":{\"tools\":[{\"name\":\"secret\"}]}}",
                            MCP_TARGET_NONE, &out, &seen), 0);
    ck_assert_int_eq(seen.calls, 0);
}
END_TEST

static Suite *listing_suite(void)
{
    Suite *s = suite_create("mcp_listing");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_kind);
    tcase_add_test(tc, test_tools_filtered_in_order);
    tcase_add_test(tc, test_resources_by_uri_and_prompts_by_name);
    tcase_add_test(tc, test_unjudgeable_items_are_removed);
    tcase_add_test(tc, test_nothing_changed_when_not_a_list_result);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(listing_suite());
}
