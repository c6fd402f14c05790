/* Unit tests for mcp_shim: the era shim's translations (2025-era client, 2026-only backend). */
#include <string.h>

#include <check.h>

#include "unit_main.h"
#include "unit_json.h"

#include "mcp_jsonrpc.h"
#include "mcp_shim.h"

static const char *text(json_object *v)
{
    return mcp_jsonrpc_to_string(pool, v, NULL);
}

#define DISCOVER "{\"supportedVersions\":[\"2026-07-28\"],\"capabilities\":{\"tools\":" \
    "{\"listChanged\":true},\"logging\":{},\"resources\":{\"subscribe\":true}},\"instructions\":\"Be nice.\",\"resultType\":\"complete\"," \
    "\"ttlMs\":5000,\"cacheScope\":\"private\",\"_meta\":{\"io.modelcontextprotocol/" \
    "serverInfo\":{\"name\":\"b\",\"version\":\"1\"}}}"

START_TEST(initialize_from_discover)
{
    json_object *d = parse(DISCOVER), *r;
    const char *v;

    r = mcp_shim_initialize_result(d, "2025-06-18", &v);
    ck_assert_str_eq(v, "2025-06-18");
    ck_assert_str_eq(text(r), "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":"
                     "{\"listChanged\":true},\"logging\":{},\"resources\":{}},\"serverInfo\":{\"name\":\"b\",\"version\":\"1\"},"
                     "\"instructions\":\"Be nice.\"}");
    json_object_put(r);
    /* A version the gateway does not serve with sessions: the newest it does. */
    r = mcp_shim_initialize_result(d, "2024-11-05", &v);
    ck_assert_str_eq(v, "2025-11-25");
    json_object_put(r);
    r = mcp_shim_initialize_result(d, "2026-07-28", &v);
    ck_assert_str_eq(v, "2025-11-25");
    json_object_put(r);
    /* No serverInfo, no capabilities: the required members are made up. */
    r = mcp_shim_initialize_result(parse("{}"), NULL, &v);
    ck_assert_str_eq(text(r), "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
                     "\"serverInfo\":{\"name\":\"mcp-backend\",\"version\":\"unknown\"}}");
    json_object_put(r);
    ck_assert_ptr_null(mcp_shim_discover_problem(d));
    ck_assert_str_eq(mcp_shim_discover_problem(parse("\"x\"")), "the result is not an object");
    ck_assert_str_eq(mcp_shim_discover_problem(parse("{}")),
                     "its supportedVersions is missing or not an array");
    ck_assert_str_eq(mcp_shim_discover_problem(parse("{\"supportedVersions\":\"2026-07-28\"}")),
                     "its supportedVersions is missing or not an array");
    ck_assert_str_eq(mcp_shim_discover_problem(parse("{\"supportedVersions\":[7]}")),
                     "its supportedVersions holds something other than strings");
    ck_assert_str_eq(mcp_shim_discover_problem(parse("{\"supportedVersions\":[\"2025-11-25\"]}")),
                     "its supportedVersions does not list 2026-07-28");
    ck_assert_str_eq(mcp_shim_discover_problem(parse("{\"supportedVersions\":[\"2026-07-28\"],"
                                                     "\"capabilities\":[]}")),
                     "its capabilities is not an object");
    ck_assert_int_eq(mcp_shim_discover_ttl(d, 60000), 5000);
    ck_assert_int_eq(mcp_shim_discover_ttl(parse("{\"ttlMs\":0}"), 60000), 60000);
    ck_assert_int_eq(mcp_shim_discover_ttl(parse("{\"ttlMs\":99999999999}"), 1), 3600000);
}
END_TEST

START_TEST(stamping)
{
    json_object *req = parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
                             "{\"name\":\"echo\",\"_meta\":{\"progressToken\":3}}}");
    json_object *id = json_object_new_string("r1"), *resp = parse("{\"k\":{\"action\":\"accept\"}}");
    apr_array_header_t *h;
    const char *s;

    mcp_shim_client_t client = { "{\"elicitation\":{}}", "{\"name\":\"c\",\"version\":\"1\"}", NULL };
    mcp_shim_client_t odd = { "[1]", NULL, "info" };

    s = mcp_shim_stamp(pool, req, &client, NULL, NULL, NULL, NULL);
    ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
                     "{\"name\":\"echo\",\"_meta\":{\"progressToken\":3,"
                     "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                     "\"io.modelcontextprotocol/clientCapabilities\":{\"elicitation\":{}},"
                     "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}}");
    /* The original is untouched; a retry carries its id, answers and state; bad caps: {}. */
    ck_assert_ptr_null(strstr(text(req), "protocolVersion"));
    s = mcp_shim_stamp(pool, req, &odd, id, resp, "st", NULL);
    ck_assert_ptr_nonnull(strstr(s, "\"logLevel\":\"info\""));
    ck_assert_ptr_nonnull(strstr(s, "\"id\":\"r1\""));
    ck_assert_ptr_nonnull(strstr(s, "clientCapabilities\":{}"));
    ck_assert_ptr_null(strstr(s, "clientInfo"));
    ck_assert_ptr_nonnull(strstr(s, "\"inputResponses\":{\"k\":{\"action\":\"accept\"}},"
                                    "\"requestState\":\"st\""));
    json_object_put(id);
    /* No params at all: made. */
    s = mcp_shim_stamp(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}"),
                       NULL, NULL, NULL, NULL, NULL);
    ck_assert_ptr_nonnull(strstr(s, "\"params\":{\"_meta\":{\"io.modelcontextprotocol/"
                                    "protocolVersion\""));

    h = mcp_shim_headers(pool, req);
    ck_assert_int_eq(h->nelts, 2);
    ck_assert_str_eq(APR_ARRAY_IDX(h, 0, const char *), "Mcp-Method: tools/call");
    ck_assert_str_eq(APR_ARRAY_IDX(h, 1, const char *), "Mcp-Name: echo");
    h = mcp_shim_headers(pool, parse("{\"method\":\"resources/read\",\"params\":{\"uri\":"
                                     "\"file:///caf\\u00e9\"}}"));
    ck_assert_str_eq(APR_ARRAY_IDX(h, 1, const char *), "Mcp-Name: =?base64?ZmlsZTovLy9jYWbDqQ==?=");
    h = mcp_shim_headers(pool, parse("{\"method\":\"tools/list\"}"));
    ck_assert_int_eq(h->nelts, 1);
}
END_TEST

START_TEST(cleaning)
{
    json_object *m = parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[],\"resultType\":"
                           "\"complete\",\"ttlMs\":1,\"cacheScope\":\"public\",\"_meta\":{"
                           "\"io.modelcontextprotocol/serverInfo\":{}}}}");

    mcp_shim_clean(m);
    ck_assert_str_eq(text(m), "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}");
    m = parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\",\"params\":{"
              "\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":\"x\",\"keep\":1}}}");
    mcp_shim_clean(m);
    ck_assert_str_eq(text(m), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\","
                     "\"params\":{\"_meta\":{\"keep\":1}}}");
    ck_assert(mcp_shim_is_input_required(parse("{\"resultType\":\"input_required\"}")));
    ck_assert(!mcp_shim_is_input_required(parse("{\"resultType\":\"complete\"}")));
    ck_assert(!mcp_shim_is_input_required(parse("{}")));
}
END_TEST

START_TEST(rounds)
{
    json_object *ir = parse("{\"resultType\":\"input_required\",\"inputRequests\":{\"a\":{"
                            "\"method\":\"elicitation/create\",\"params\":{\"message\":\"?\"}},"
                            "\"b\":{\"method\":\"roots/list\"}},\"requestState\":\"S\"}");
    mcp_shim_round_t rd;

    ck_assert_ptr_null(mcp_shim_round_begin(pool, &rd, ir, 42, 1));
    ck_assert_int_eq(rd.n, 2);
    ck_assert_str_eq(rd.request_state, "S");
    ck_assert_str_eq(rd.requests[0], "{\"jsonrpc\":\"2.0\",\"id\":\"mcp-shim-42-1-1\",\"method\":"
                     "\"elicitation/create\",\"params\":{\"message\":\"?\"}}");
    ck_assert_str_eq(rd.requests[1], "{\"jsonrpc\":\"2.0\",\"id\":\"mcp-shim-42-1-2\",\"method\":"
                     "\"roots/list\"}");
    ck_assert_str_eq(mcp_shim_round_ids_json(pool, &rd), "[\"mcp-shim-42-1-1\",\"mcp-shim-42-1-2\"]");
    ck_assert_int_eq(mcp_shim_minted_stream(rd.ids[1]), 42);
    ck_assert_int_eq(mcp_shim_minted_stream("mcp-shim-x"), 0);
    ck_assert_int_eq(mcp_shim_minted_stream("mcp-shim-0-1-1"), 0);
    ck_assert_int_eq(mcp_shim_minted_stream("7"), 0);
    ck_assert_int_eq(mcp_shim_minted_stream(NULL), 0);

    ck_assert_int_eq(mcp_shim_round_take(pool, &rd, parse("{\"id\":\"nope\",\"result\":{}}")),
                     MCP_SHIM_ANSWER_UNKNOWN);
    ck_assert_int_eq(mcp_shim_round_take(pool, &rd, parse("{\"id\":\"mcp-shim-42-1-2\","
                                                          "\"result\":{\"roots\":[]}}")),
                     MCP_SHIM_ANSWER_TAKEN);
    ck_assert(!mcp_shim_round_done(&rd));
    ck_assert_int_eq(mcp_shim_round_take(pool, &rd, parse("{\"id\":\"mcp-shim-42-1-2\","
                                                          "\"result\":{}}")),
                     MCP_SHIM_ANSWER_DUPLICATE);
    ck_assert_int_eq(mcp_shim_round_take(pool, &rd, parse("{\"id\":\"mcp-shim-42-1-1\","
                                                          "\"result\":{\"action\":\"accept\"}}")),
                     MCP_SHIM_ANSWER_TAKEN);
    ck_assert(mcp_shim_round_done(&rd));
    /* inputResponses keyed as the backend keyed its inputRequests. */
    ck_assert_str_eq(text(rd.responses), "{\"b\":{\"roots\":[]},\"a\":{\"action\":\"accept\"}}");
    mcp_shim_round_clear(&rd);

    /* An error answer refuses the round. */
    ck_assert_ptr_null(mcp_shim_round_begin(pool, &rd, ir, 42, 2));
    ck_assert_int_eq(mcp_shim_round_take(pool, &rd, parse("{\"id\":\"mcp-shim-42-2-1\","
                                                          "\"error\":{\"code\":-1}}")),
                     MCP_SHIM_ANSWER_REFUSED);
    ck_assert_ptr_nonnull(strstr(rd.refusal, "-1"));
    mcp_shim_round_clear(&rd);

    /* State only: a round without requests (retried at once). Malformed: refused. */
    ck_assert_ptr_null(mcp_shim_round_begin(pool, &rd, parse("{\"requestState\":\"x\"}"), 1, 1));
    ck_assert(mcp_shim_round_done(&rd));
    mcp_shim_round_clear(&rd);
    ck_assert_ptr_nonnull(mcp_shim_round_begin(pool, &rd, parse("{}"), 1, 1));
    ck_assert_ptr_nonnull(mcp_shim_round_begin(pool, &rd, parse("{\"inputRequests\":{\"a\":1}}"),
                                               1, 1));
    mcp_shim_round_clear(&rd);

    {
        json_object *id = json_object_new_int(5), *r = mcp_shim_retry_id(id, 2);
        ck_assert_str_eq(json_object_get_string(r), "mcp-shim-retry-2-5");
        json_object_put(r);
        json_object_put(id);
    }
}
END_TEST

static Suite *shim_suite(void)
{
    Suite *s = suite_create("mcp_shim");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, initialize_from_discover);
    tcase_add_test(tc, stamping);
    tcase_add_test(tc, cleaning);
    tcase_add_test(tc, rounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(shim_suite());
}
