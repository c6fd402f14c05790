/* Unit tests for mcp_era: the per-request era routing and the 2026-07-28 request rules. */
#include <string.h>

#include <apr_strings.h>
#include <apr_tables.h>
#include <check.h>

#include "unit_json.h"
#include "unit_main.h"
#include "unit_pool.h"

#include "mcp_era.h"
#include "mcp_jsonrpc.h"

static mcp_jsonrpc_body_t *body(const char *json)
{
    mcp_jsonrpc_body_t *b = NULL;
    const char *reason;

    ck_assert_int_eq(mcp_jsonrpc_parse(pool, json, strlen(json), &b, &reason), MCP_JSONRPC_OK);
    return b;
}

#define MODERN_META "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
                    "\"io.modelcontextprotocol/clientCapabilities\":{}}"
#define CALL "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":" \
             "\"echo\"," MODERN_META "}}"

START_TEST(routes)
{
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                       "{\"protocolVersion\":\"2026-07-28\"}}";
    const char *list = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";

    ck_assert_int_eq(mcp_era_route(1, "2026-07-28", body(CALL)), MCP_ROUTE_MODERN);
    ck_assert_int_eq(mcp_era_route(1, NULL, body(CALL)), MCP_ROUTE_MODERN);
    ck_assert_int_eq(mcp_era_route(1, "2025-06-18", body(CALL)), MCP_ROUTE_MODERN);
    ck_assert_int_eq(mcp_era_route(1, "2026-07-28", body(init)), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(1, NULL, body(init)), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(1, "2026-07-28", body(list)), MCP_ROUTE_NO_CLAIM);
    ck_assert_int_eq(mcp_era_route(1, "2027-01-01", body(list)), MCP_ROUTE_NO_CLAIM);
    ck_assert_int_eq(mcp_era_route(1, "2025-11-25", body(list)), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(1, "2024-11-05", body(list)), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(1, NULL, body(list)), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(0, "2026-07-28", NULL), MCP_ROUTE_NOT_ALLOWED);
    ck_assert_int_eq(mcp_era_route(0, "2025-11-25", NULL), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(0, NULL, NULL), MCP_ROUTE_LEGACY);
    ck_assert_int_eq(mcp_era_route(1, "2026-07-28", body("[" CALL "]")), MCP_ROUTE_MODERN);
}
END_TEST

START_TEST(header_values)
{
    ck_assert_str_eq(mcp_era_header_value(pool, "  tools/call\t"), "tools/call");
    ck_assert_str_eq(mcp_era_header_value(pool, "=?base64?dG9vbHMvY2FsbA==?="), "tools/call");
    ck_assert_str_eq(mcp_era_header_value(pool, " =?BASE64?dG9vbHMvY2FsbA?= "), "tools/call");
    /* UTF-8 survives */
    ck_assert_str_eq(mcp_era_header_value(pool, "=?base64?w6l0w6k=?="), "\xc3\xa9t\xc3\xa9");
    ck_assert_ptr_null(mcp_era_header_value(pool, "=?base64?not*base64?="));
    ck_assert_ptr_null(mcp_era_header_value(pool, "=?base64?AA==?="));   /* a NUL byte */
    ck_assert_ptr_null(mcp_era_header_value(pool, "=?base64?QUJD=?="));  /* bad padding */
    ck_assert_str_eq(mcp_era_header_value(pool, "=?utf-8?q?x?="), "=?utf-8?q?x?=");
    ck_assert_ptr_null(mcp_era_header_value(pool, NULL));
}
END_TEST

static int check(const char *json, const char *v, const char *m, const char *n,
                 mcp_era_verdict_t *out)
{
    mcp_jsonrpc_body_t *b = body(json);
    mcp_era_headers_t h = { v, m, n };

    return mcp_era_check(pool, &b->msgs[0], &h, "2026-07-28", out);
}

START_TEST(rules)
{
    mcp_era_verdict_t out;

    ck_assert_int_eq(check(CALL, "2026-07-28", "tools/call", "echo", &out), 0);
    ck_assert_int_eq(check(CALL, " 2026-07-28 ", "=?base64?dG9vbHMvY2FsbA==?=", "=?base64?ZWNobw==?=",
                           &out), 0);
    ck_assert_int_eq(check(CALL, NULL, "tools/call", "echo", &out), MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(check(CALL, "2025-11-25", "tools/call", "echo", &out),
                     MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(check(CALL, "2026-07-28", NULL, "echo", &out), MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(check(CALL, "2026-07-28", "tools/list", "echo", &out),
                     MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(check(CALL, "2026-07-28", "Tools/Call", "echo", &out),
                     MCP_ERA_HEADER_MISMATCH);   /* values are case-sensitive */
    ck_assert_int_eq(check(CALL, "2026-07-28", "tools/call", NULL, &out),
                     MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(check(CALL, "2026-07-28", "tools/call", "echo, echo", &out),
                     MCP_ERA_HEADER_MISMATCH);   /* sent twice */
    ck_assert_ptr_nonnull(strstr(out.message, "twice"));
    ck_assert_int_eq(check(CALL, "2026-07-28", "tools/call", "=?base64?@@?=", &out),
                     MCP_ERA_HEADER_MISMATCH);
    /* no capabilities */
    ck_assert_int_eq(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":"
                           "{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                           "\"2026-07-28\"}}}", "2026-07-28", "tools/list", NULL, &out),
                     MCP_JSONRPC_INVALID_PARAMS);
    /* a version the gateway does not serve */
    ck_assert_int_eq(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":"
                           "{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                           "\"2099-01-01\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                           "2099-01-01", "tools/list", NULL, &out),
                     MCP_ERA_UNSUPPORTED_VERSION);
    ck_assert_str_eq(out.requested, "2099-01-01");
    /* a claim that is not a string */
    ck_assert_int_eq(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":"
                           "{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":7}}}",
                           "2026-07-28", "tools/list", NULL, &out), MCP_JSONRPC_INVALID_PARAMS);
    /* resources/read names its uri; notifications need no capabilities */
    ck_assert_int_eq(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\",\"params\":"
                           "{\"uri\":\"test://a, b\"," MODERN_META "}}", "2026-07-28",
                           "resources/read", "test://a, b", &out), 0);
    ck_assert_int_eq(check("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\":"
                           "{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                           "\"2026-07-28\"}}}", "2026-07-28", "notifications/x", NULL, &out), 0);
}
END_TEST

START_TEST(lists)
{
    ck_assert(mcp_era_listed("2026-07-28", "2026-07-28"));
    ck_assert(mcp_era_listed("2025-11-25, 2026-07-28", "2026-07-28"));
    ck_assert(!mcp_era_listed("2026-07-28", "2026-07-2"));
    ck_assert(!mcp_era_listed("", "2026-07-28"));
    ck_assert(!mcp_era_listed("2026-07-28", ""));
}
END_TEST

/* The conformance suite's tool: region (string) mirrored in Mcp-Param-Region; a nested one. */
#define TOOLS "[{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}}," \
              "{\"name\":\"test_custom_header\",\"inputSchema\":{\"type\":\"object\"," \
              "\"properties\":{\"region\":{\"type\":\"string\",\"x-mcp-header\":\"Region\"}," \
              "\"n\":{\"type\":\"integer\",\"x-mcp-header\":\"N\"}," \
              "\"on\":{\"type\":\"boolean\",\"x-mcp-header\":\"On\"}," \
              "\"deep\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"," \
              "\"x-mcp-header\":\"Deep-K\"}}}," \
              "\"list\":{\"type\":\"array\",\"items\":{\"type\":\"string\"," \
              "\"x-mcp-header\":\"Never\"}}," \
              "\"bad\":{\"type\":\"string\",\"x-mcp-header\":\"not a token\"}}}}," \
              "{\"inputSchema\":{}}]"

static int param_check(const char *args, const char *h1, const char *v1, const char *h2,
                       const char *v2, mcp_era_verdict_t *v)
{
    json_object *into = json_object_new_object(), *decls = NULL;
    apr_table_t *headers = apr_table_make(pool, 4);
    int rc;

    ck_assert_int_eq(mcp_era_param_decls(parse(TOOLS), into), 2);
    ck_assert(json_object_object_get_ex(into, "test_custom_header", &decls));
    if (h1) {
        apr_table_set(headers, h1, v1);
    }
    if (h2) {
        apr_table_set(headers, h2, v2);
    }
    rc = mcp_era_param_check(pool, decls, parse(args), headers, v);
    json_object_put(into);
    return rc;
}

START_TEST(param_declarations)
{
    json_object *into = json_object_new_object(), *decls = NULL;

    ck_assert_int_eq(mcp_era_param_decls(parse(TOOLS), into), 2);
    ck_assert(json_object_object_get_ex(into, "echo", &decls));
    ck_assert_int_eq((int)json_object_array_length(decls), 0);
    ck_assert(json_object_object_get_ex(into, "test_custom_header", &decls));
    /* region, n, on, deep.k; not under items, not a name that is no token */
    ck_assert_str_eq(json_object_to_json_string_ext(decls, JSON_C_TO_STRING_PLAIN),
                     "[{\"header\":\"Region\",\"type\":\"string\",\"path\":[\"region\"]},"
                     "{\"header\":\"N\",\"type\":\"integer\",\"path\":[\"n\"]},"
                     "{\"header\":\"On\",\"type\":\"boolean\",\"path\":[\"on\"]},"
                     "{\"header\":\"Deep-K\",\"type\":\"string\",\"path\":[\"deep\",\"k\"]}]");
    ck_assert_int_eq(mcp_era_param_decls(parse("{}"), into), 0);
    json_object_put(into);
}
END_TEST

START_TEST(param_headers)
{
    mcp_era_verdict_t v;

    /* valid base64 of the body's value; a literal; whitespace; case-insensitive names */
    ck_assert_int_eq(param_check("{\"region\":\"Hello\"}", "Mcp-Param-Region",
                                 "=?base64?SGVsbG8=?=", NULL, NULL, &v), 0);
    ck_assert_int_eq(param_check("{\"region\":\"SGVsbG8=\"}", "mcp-param-region", " SGVsbG8= ",
                                 NULL, NULL, &v), 0);
    ck_assert_int_eq(param_check("{\"region\":\"=?base64?SGVsbG8=\"}", "Mcp-Param-Region",
                                 "=?base64?SGVsbG8=", NULL, NULL, &v), 0);
    /* numbers compare numerically, booleans as true/false; nested paths */
    ck_assert_int_eq(param_check("{\"n\":42,\"on\":true}", "Mcp-Param-N", "42.0", "Mcp-Param-On",
                                 "true", &v), 0);
    ck_assert_int_eq(param_check("{\"deep\":{\"k\":\"x\"}}", "Mcp-Param-Deep-K", "x", NULL, NULL,
                                 &v), 0);
    /* absent, null or not primitive: nothing expected */
    ck_assert_int_eq(param_check("{\"region\":null,\"deep\":{}}", NULL, NULL, NULL, NULL, &v), 0);
    ck_assert_int_eq(param_check("{\"region\":{\"a\":1}}", NULL, NULL, NULL, NULL, &v), 0);
    /* missing */
    ck_assert_int_eq(param_check("{\"region\":\"test-value\"}", NULL, NULL, NULL, NULL, &v),
                     MCP_ERA_HEADER_MISMATCH);
    ck_assert_ptr_nonnull(strstr(v.message, "Mcp-Param-Region header is required"));
    /* unpadded, or not of the alphabet: refused */
    ck_assert_int_eq(param_check("{\"region\":\"Hello\"}", "Mcp-Param-Region",
                                 "=?base64?SGVsbG8?=", NULL, NULL, &v), MCP_ERA_HEADER_MISMATCH);
    ck_assert_ptr_nonnull(strstr(v.message, "not canonical base64"));
    ck_assert_int_eq(param_check("{\"region\":\"Hello\"}", "Mcp-Param-Region",
                                 "=?base64?SGVs!!!bG8=?=", NULL, NULL, &v), MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(param_check("{\"region\":\"x\"}", "Mcp-Param-Region", "=?base64?/w==?=",
                                 NULL, NULL, &v), MCP_ERA_HEADER_MISMATCH);   /* not UTF-8 */
    /* different values */
    ck_assert_int_eq(param_check("{\"region\":\"eu\"}", "Mcp-Param-Region", "us", NULL, NULL,
                                 &v), MCP_ERA_HEADER_MISMATCH);
    ck_assert_ptr_nonnull(strstr(v.message, "Mcp-Param-Region is 'us'"));
    ck_assert_int_eq(param_check("{\"n\":42}", "Mcp-Param-N", "43", NULL, NULL, &v),
                     MCP_ERA_HEADER_MISMATCH);
    ck_assert_int_eq(param_check("{\"on\":false}", "Mcp-Param-On", "False", NULL, NULL, &v),
                     MCP_ERA_HEADER_MISMATCH);
}
END_TEST

/* A tool with many x-mcp-header arguments, all sent (in mixed case), the first one twice: every
 * one is found, the first value is the one compared, and one wrong value at the end is found. */
START_TEST(many_param_headers)
{
    enum { N = 20000 };
    json_object *tools = json_object_new_array(), *tool = json_object_new_object();
    json_object *schema = json_object_new_object(), *props = json_object_new_object();
    json_object *args = json_object_new_object(), *into = json_object_new_object(), *decls;
    apr_table_t *headers = apr_table_make(pool, N + 1);
    mcp_era_verdict_t v;
    int i;

    for (i = 0; i < N; i++) {
        json_object *prop = json_object_new_object();
        const char *name = apr_psprintf(pool, "p%d", i);

        json_object_object_add(prop, "type", json_object_new_string("string"));
        json_object_object_add(prop, "x-mcp-header", json_object_new_string(name));
        json_object_object_add(props, name, prop);
        json_object_object_add(args, name, json_object_new_string(apr_psprintf(pool, "v%d", i)));
        apr_table_addn(headers, apr_psprintf(pool, i % 2 ? "MCP-PARAM-P%d" : "mcp-param-p%d", i),
                       apr_psprintf(pool, "v%d", i));
    }
    apr_table_addn(headers, "Mcp-Param-P0", "other");   /* a second one: not the one found */
    json_object_object_add(schema, "properties", props);
    json_object_object_add(tool, "name", json_object_new_string("wide"));
    json_object_object_add(tool, "inputSchema", schema);
    json_object_array_add(tools, tool);
    ck_assert_int_eq(mcp_era_param_decls(tools, into), 1);
    ck_assert(json_object_object_get_ex(into, "wide", &decls));
    ck_assert_int_eq(json_object_array_length(decls), N);
    ck_assert_int_eq(mcp_era_param_check(pool, decls, args, headers, &v), 0);
    apr_table_setn(headers, apr_psprintf(pool, "mcp-param-p%d", N - 1), "wrong");
    ck_assert_int_eq(mcp_era_param_check(pool, decls, args, headers, &v),
                     MCP_ERA_HEADER_MISMATCH);
    ck_assert_ptr_nonnull(strstr(v.message, "'wrong'"));
    json_object_put(tools);
    json_object_put(args);
    json_object_put(into);
}
END_TEST

static const char *learned(int status, const char *result_json, int error)
{
    json_object *result = result_json ? json_tokener_parse(result_json) : NULL;
    const char *out = mcp_era_learn(pool, status, result, error);

    json_object_put(result);
    return out;
}

START_TEST(learning_eras_from_discover)
{
    const char *legacy = "2025-11-25, 2025-06-18, 2025-03-26";

    /* A backend of both eras, a 2026-only one, and what is not served left out. */
    ck_assert_str_eq(learned(200, "{\"supportedVersions\":[\"2025-06-18\",\"2026-07-28\","
                             "\"2025-11-25\"]}", 0), "2026-07-28, 2025-11-25, 2025-06-18");
    ck_assert_str_eq(learned(200, "{\"supportedVersions\":[\"2026-07-28\"],\"ttlMs\":5}", 0),
                     "2026-07-28");
    ck_assert_str_eq(learned(200, "{\"supportedVersions\":[\"2026-07-28\",\"2024-11-05\","
                             "\"2099-01-01\",7]}", 0), "2026-07-28");
    /* A result that does not list 2026-07-28, or is no discover result: the 2025 era. */
    ck_assert_str_eq(learned(200, "{\"supportedVersions\":[\"2025-11-25\"]}", 0), legacy);
    ck_assert_str_eq(learned(200, "{\"supportedVersions\":\"2026-07-28\"}", 0), legacy);
    ck_assert_str_eq(learned(200, "{}", 0), legacy);
    ck_assert_str_eq(learned(200, "[\"2026-07-28\"]", 0), legacy);
    /* A JSON-RPC error (in any status below 500) or a 4xx: a 2025-era backend. */
    ck_assert_str_eq(learned(200, NULL, 1), legacy);
    ck_assert_str_eq(learned(400, NULL, 1), legacy);
    ck_assert_str_eq(learned(404, NULL, 0), legacy);
    ck_assert_str_eq(learned(405, NULL, 0), legacy);
    /* Nothing learned: no answer, a 5xx (even with an error in it), a 2xx without a response. */
    ck_assert_ptr_null(learned(0, NULL, 0));
    ck_assert_ptr_null(learned(500, NULL, 1));
    ck_assert_ptr_null(learned(503, "{\"supportedVersions\":[\"2026-07-28\"]}", 0));
    ck_assert_ptr_null(learned(200, NULL, 0));
    ck_assert_ptr_null(learned(202, NULL, 0));
    /* ... nor from a backend that wants credentials, or is busy. */
    ck_assert_ptr_null(learned(401, NULL, 1));
    ck_assert_ptr_null(learned(403, NULL, 0));
    ck_assert_ptr_null(learned(408, NULL, 0));
    ck_assert_ptr_null(learned(429, NULL, 1));
}
END_TEST

static const char *after_initialize(int status, const char *result_json)
{
    json_object *result = result_json ? json_tokener_parse(result_json) : NULL;
    const char *out = mcp_era_learn_initialize(pool, "2026-07-28", status, result);

    json_object_put(result);
    return out;
}

START_TEST(learning_eras_from_initialize)
{
    /* A backend of both eras whose discover listed 2026-07-28 alone accepts initialize. */
    ck_assert_str_eq(after_initialize(200, "{\"protocolVersion\":\"2025-11-25\"}"),
                     "2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26");
    ck_assert_str_eq(after_initialize(200, "{\"protocolVersion\":\"2025-03-26\"}"),
                     "2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26");
    /* A 2026-only backend: refused (-32022, a 4xx or 5xx), or a version of no 2025 revision. */
    ck_assert_str_eq(after_initialize(400, NULL), "2026-07-28");
    ck_assert_str_eq(after_initialize(200, NULL), "2026-07-28");
    ck_assert_str_eq(after_initialize(500, NULL), "2026-07-28");
    ck_assert_str_eq(after_initialize(200, "{\"protocolVersion\":\"2026-07-28\"}"), "2026-07-28");
    ck_assert_str_eq(after_initialize(200, "{\"protocolVersion\":\"2024-11-05\"}"), "2026-07-28");
    ck_assert_str_eq(after_initialize(200, "{\"protocolVersion\":7}"), "2026-07-28");
    /* No answer: nothing learned. */
    ck_assert_ptr_null(after_initialize(0, NULL));
}
END_TEST

static Suite *era_suite(void)
{
    Suite *s = suite_create("mcp_era");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, routes);
    tcase_add_test(tc, header_values);
    tcase_add_test(tc, rules);
    tcase_add_test(tc, lists);
    tcase_add_test(tc, param_declarations);
    tcase_add_test(tc, param_headers);
    tcase_add_test(tc, many_param_headers);
    tcase_add_test(tc, learning_eras_from_discover);
    tcase_add_test(tc, learning_eras_from_initialize);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(era_suite());
}
