/* Unit tests for mcp_bridge: the translations of the era bridge (2026-07-28 client, 2025-era
 * backend). */
#include <string.h>

#include <check.h>

#include "unit_main.h"
#include "unit_json.h"

#include "mcp_jsonrpc.h"
#include "mcp_bridge.h"

#define META "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
             "\"io.modelcontextprotocol/clientCapabilities\":{\"sampling\":{},\"elicitation\":" \
             "{\"form\":{}}},\"io.modelcontextprotocol/clientInfo\":{\"name\":\"c\",\"version\":" \
             "\"1\"},\"progressToken\":\"p1\",\"traceparent\":\"00-ab-cd-01\"}"
#define CALL "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"tools/call\",\"params\":{\"name\":" \
             "\"echo\",\"arguments\":{\"b\":1,\"a\":2}," META "}}"

START_TEST(canonical_key)
{
    ck_assert_str_eq(mcp_bridge_canonical(pool, parse("{\"b\":[1,{\"d\":1,\"c\":2}],\"a\":null}")),
                     "{\"a\":null,\"b\":[1,{\"c\":2,\"d\":1}]}");
    ck_assert_str_eq(mcp_bridge_caps_key(pool, parse(CALL)),
                     "{\"elicitation\":{\"form\":{}},\"sampling\":{}}");
    ck_assert_str_eq(mcp_bridge_caps_key(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
                                                     "\"tools/list\"}")), "{}");
}
END_TEST

START_TEST(going_in)
{
    const char *in = mcp_bridge_request_in(pool, parse(CALL), 4711);
    json_object *v = parse(in), *params, *meta, *x;

    ck_assert(json_object_object_get_ex(v, "id", &x));
    ck_assert_int_eq(json_object_get_int64(x), 4711);
    json_object_object_get_ex(v, "params", &params);
    ck_assert(json_object_object_get_ex(params, "_meta", &meta));
    ck_assert(json_object_object_get_ex(meta, "progressToken", &x));
    ck_assert(json_object_object_get_ex(meta, "traceparent", &x));
    ck_assert(!strstr(in, "io.modelcontextprotocol/"));
    /* An emptied _meta goes; the retry members go. */
    in = mcp_bridge_request_in(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/"
                                           "call\",\"params\":{\"name\":\"a\",\"requestState\":"
                                           "\"s\",\"inputResponses\":{},\"_meta\":{\"io."
                                           "modelcontextprotocol/protocolVersion\":\"x\"}}}"), 2);
    ck_assert_str_eq(in, "{\"id\":2,\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":"
                         "{\"name\":\"a\"}}");
    /* The id first, so that the store can write it before the rest (the tail). */
    ck_assert_str_eq(mcp_bridge_request_tail(pool, parse("{\"id\":\"q\",\"jsonrpc\":\"2.0\","
                                                         "\"method\":\"ping\"}")),
                     ",\"jsonrpc\":\"2.0\",\"method\":\"ping\"}");
    ck_assert_str_eq(mcp_bridge_request_tail(pool, parse("{\"id\":1}")), "}");
    ck_assert_str_eq(mcp_bridge_request_join(pool, 7, "}"), "{\"id\":7}");
    ck_assert_ptr_null(mcp_bridge_request_tail(pool, parse("[1]")));
    in = mcp_bridge_request_in(pool, parse(CALL), 9007199254740991);
    ck_assert_str_eq(in, mcp_bridge_request_join(pool, 9007199254740991,
                                                 mcp_bridge_request_tail(pool, parse(CALL))));
    ck_assert(json_object_is_type(parse(in), json_type_object));
}
END_TEST

START_TEST(initialize_on_behalf)
{
    json_object *v = parse(mcp_bridge_initialize(pool, parse(CALL), 9, "0.1")), *params, *x;

    json_object_object_get_ex(v, "params", &params);
    ck_assert_str_eq(mcp_jsonrpc_get_string(params, "protocolVersion"), "2025-11-25");
    ck_assert(json_object_object_get_ex(params, "capabilities", &x));
    ck_assert(json_object_object_get_ex(x, "sampling", &x));
    json_object_object_get_ex(params, "clientInfo", &x);
    ck_assert_str_eq(mcp_jsonrpc_get_string(x, "name"), "c");
    v = parse(mcp_bridge_initialize(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}"),
                                    9, "0.1"));
    json_object_object_get_ex(v, "params", &params);
    json_object_object_get_ex(params, "clientInfo", &x);
    ck_assert_str_eq(mcp_jsonrpc_get_string(x, "name"), "mod_mcp era bridge");
}
END_TEST

START_TEST(digest_binds_the_request)
{
    const char *a = mcp_bridge_request_digest(pool, parse(CALL));
    const char *b = mcp_bridge_request_digest(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"arguments\":{\"a\":"
        "2,\"b\":1},\"name\":\"echo\",\"requestState\":\"zz\"}}"));
    const char *c = mcp_bridge_request_digest(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"arguments\":{\"a\":"
        "3,\"b\":1},\"name\":\"echo\"}}"));

    ck_assert_int_eq(strlen(a), 40);
    ck_assert_str_eq(a, b);
    ck_assert_str_ne(a, c);
}
END_TEST

START_TEST(pool_tag_names_one_key)
{
    const char *a = mcp_bridge_pool_tag(pool, "alice", "http://b/mcp", "{}");

    ck_assert_int_eq(strlen(a), 40);
    ck_assert_str_eq(a, mcp_bridge_pool_tag(pool, "alice", "http://b/mcp", "{}"));
    ck_assert_str_ne(a, mcp_bridge_pool_tag(pool, "bob", "http://b/mcp", "{}"));
    ck_assert_str_ne(a, mcp_bridge_pool_tag(pool, "alice", "http://c/mcp", "{}"));
    ck_assert_str_ne(a, mcp_bridge_pool_tag(pool, "alice", "http://b/mcp", "{\"x\":{}}"));
    /* the parts are kept apart: moving a character across a boundary is another key */
    ck_assert_str_ne(mcp_bridge_pool_tag(pool, "ab", "c", "{}"),
                     mcp_bridge_pool_tag(pool, "a", "bc", "{}"));
    ck_assert_str_eq(mcp_bridge_pool_tag(pool, NULL, "http://b/mcp", "{}"),
                     mcp_bridge_pool_tag(pool, "", "http://b/mcp", "{}"));
}
END_TEST

START_TEST(classify)
{
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}"), 5,
                                         0), MCP_BRIDGE_FINAL);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{}}"), 5,
                                         0), MCP_BRIDGE_OTHER);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":"
                                               "1,\"message\":\"m\"}}"), 5, 0), MCP_BRIDGE_FINAL);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":"
                                               "\"elicitation/create\",\"params\":{}}"), 5, 0),
                     MCP_BRIDGE_INPUT_REQUEST);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}"),
                                         5, 0), MCP_BRIDGE_PING);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":"
                                               "\"tools/list\"}"), 5, 0), MCP_BRIDGE_OTHER);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                                               "progress\",\"params\":{}}"), 5, 0),
                     MCP_BRIDGE_NOTIFICATION);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                                               "message\",\"params\":{}}"), 5, -1),
                     MCP_BRIDGE_OTHER);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                                               "message\",\"params\":{\"level\":\"info\"}}"),
                                         5, 1), MCP_BRIDGE_NOTIFICATION);
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                                               "message\",\"params\":{\"level\":\"debug\"}}"),
                                         5, 1), MCP_BRIDGE_OTHER);
    ck_assert_int_eq(mcp_bridge_log_level("warning"), 3);
    ck_assert_int_eq(mcp_bridge_log_level("loud"), -1);
    ck_assert_int_eq(mcp_bridge_request_log_level(parse(
        "{\"params\":{\"_meta\":{\"io.modelcontextprotocol/logLevel\":\"error\"}}}")), 4);
    ck_assert_int_eq(mcp_bridge_request_log_level(parse("{\"params\":{}}")), -1);
}
END_TEST

START_TEST(coming_out)
{
    json_object *info = parse("{\"name\":\"b\",\"version\":\"2\"}"), *v, *result, *x;

    v = parse(mcp_bridge_response_out(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":"
                                                  "{\"tools\":[]}}"), parse("\"c-1\""),
                                      "tools/list", info));
    ck_assert_str_eq(mcp_jsonrpc_get_string(v, "id"), "c-1");
    json_object_object_get_ex(v, "result", &result);
    ck_assert_str_eq(mcp_jsonrpc_get_string(result, "resultType"), "complete");
    ck_assert_str_eq(mcp_jsonrpc_get_string(result, "cacheScope"), "private");
    ck_assert(json_object_object_get_ex(result, "ttlMs", &x));
    ck_assert_int_eq(json_object_get_int(x), 0);
    json_object_object_get_ex(result, "_meta", &x);
    json_object_object_get_ex(x, MCP_BRIDGE_META_SERVER_INFO, &x);
    ck_assert_str_eq(mcp_jsonrpc_get_string(x, "name"), "b");
    /* tools/call: no cache fields. */
    v = parse(mcp_bridge_response_out(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":"
                                                  "{\"content\":[]}}"), parse("3"), "tools/call",
                                      NULL));
    json_object_object_get_ex(v, "result", &result);
    ck_assert(!json_object_object_get_ex(result, "ttlMs", &x));
    ck_assert(!json_object_object_get_ex(result, "_meta", &x));
    /* Retired codes. */
    ck_assert_int_eq(mcp_bridge_error_code(-32002), -32602);
    ck_assert_int_eq(mcp_bridge_error_code(-32042), -32602);
    ck_assert_int_eq(mcp_bridge_error_code(-32601), -32601);
    ck_assert(mcp_bridge_method_is_gone("ping"));
    ck_assert(mcp_bridge_method_is_gone("resources/subscribe"));
    ck_assert(!mcp_bridge_method_is_gone("tools/call"));
    v = parse(mcp_bridge_response_out(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":"
                                                  "{\"code\":-32002,\"message\":\"nf\"}}"),
                                      parse("3"), "resources/read", NULL));
    json_object_object_get_ex(v, "error", &x);
    json_object_object_get_ex(x, "code", &x);
    ck_assert_int_eq(json_object_get_int(x), -32602);
}
END_TEST

START_TEST(discover)
{
    const char *init = "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{},"
                       "\"tasks\":{}},\"serverInfo\":{\"name\":\"b\",\"version\":\"2\"},"
                       "\"instructions\":\"hi\"}";
    json_object *v = parse(mcp_bridge_discover(pool, init, parse("1"), "2026-07-28")), *r, *x;

    json_object_object_get_ex(v, "result", &r);
    json_object_object_get_ex(r, "supportedVersions", &x);
    ck_assert_int_eq(json_object_array_length(x), 1);
    ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(x, 0)), "2026-07-28");
    json_object_object_get_ex(r, "capabilities", &x);
    ck_assert(json_object_object_get_ex(x, "tools", NULL));
    ck_assert(!json_object_object_get_ex(x, "tasks", NULL));
    ck_assert_str_eq(mcp_jsonrpc_get_string(r, "instructions"), "hi");
    ck_assert_str_eq(mcp_jsonrpc_get_string(r, "cacheScope"), "private");
    ck_assert_ptr_null(mcp_bridge_discover(pool, "[1]", parse("1"), "2026-07-28"));
    ck_assert_str_eq(mcp_jsonrpc_get_string(mcp_bridge_server_info(pool, init), "name"), "b");
}
END_TEST

START_TEST(round_keys)
{
    apr_array_header_t *out;
    json_object *caps_msg = parse("{\"params\":{\"_meta\":{\"io.modelcontextprotocol/"
                                  "clientCapabilities\":{\"elicitation\":{}}}}}");
    const char *err;

    /* The backend's id is the key: a string as it is, an integer in decimal. */
    ck_assert_str_eq(mcp_bridge_input_key(pool, parse("{\"id\":\"user_name\",\"method\":"
                                                      "\"elicitation/create\"}"), 1), "user_name");
    ck_assert_str_eq(mcp_bridge_input_key(pool, parse("{\"id\":7,\"method\":\"roots/list\"}"),
                                          2), "7");
    ck_assert_str_eq(mcp_bridge_input_key(pool, parse("{\"id\":\"\",\"method\":\"roots/list\"}"),
                                          3), "input-3");
    /* ... and the answer to the key "7" goes back with the number 7. */
    err = mcp_bridge_input_responses(pool, parse("{\"params\":{\"inputResponses\":{\"7\":"
                                                 "{\"roots\":[]},\"user_name\":{\"action\":"
                                                 "\"decline\"}}}}"),
                                     "{\"7\":7,\"user_name\":\"user_name\"}", &out);
    ck_assert_ptr_null(err);
    ck_assert_int_eq(out->nelts, 2);
    ck_assert_str_eq(APR_ARRAY_IDX(out, 0, const char *),
                     "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"roots\":[]}}");
    ck_assert_str_eq(APR_ARRAY_IDX(out, 1, const char *),
                     "{\"jsonrpc\":\"2.0\",\"id\":\"user_name\",\"result\":{\"action\":"
                     "\"decline\"}}");
    /* A backend's ping is the gateway's to answer. */
    ck_assert_int_eq(mcp_bridge_classify(parse("{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":"
                                               "\"ping\"}"), 5, -1), MCP_BRIDGE_PING);
    ck_assert_str_eq(mcp_bridge_pong(pool, parse("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":"
                                                 "\"ping\"}")),
                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
    /* What a request needs of the client, against what the client declared. */
    ck_assert_str_eq(mcp_bridge_input_capability(parse("{\"method\":\"roots/list\"}")), "roots");
    ck_assert_ptr_null(mcp_bridge_input_capability(parse("{\"method\":\"ping\"}")));
    ck_assert_ptr_null(mcp_bridge_missing_capability(caps_msg,
                                                     parse("{\"method\":\"elicitation/create\"}")));
    ck_assert_str_eq(mcp_bridge_missing_capability(caps_msg,
                                                   parse("{\"method\":\"sampling/createMessage\"}")),
                     "sampling");
    ck_assert_str_eq(mcp_bridge_missing_capability(parse("{\"params\":{}}"),
                                                   parse("{\"method\":\"roots/list\"}")), "roots");
}
END_TEST

START_TEST(rounds)
{
    apr_array_header_t *names = apr_array_make(pool, 1, sizeof(const char *));
    apr_array_header_t *reqs = apr_array_make(pool, 1, sizeof(json_object *)), *out;
    json_object *v, *r, *x;
    const char *err;

    APR_ARRAY_PUSH(names, const char *) = mcp_bridge_input_name(pool, 1);
    APR_ARRAY_PUSH(reqs, json_object *) = parse("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":"
                                                "\"elicitation/create\",\"params\":{\"message\":"
                                                "\"m\"}}");
    v = parse(mcp_bridge_input_required(pool, parse("9"), names, reqs, "STATE", NULL));
    json_object_object_get_ex(v, "result", &r);
    ck_assert_str_eq(mcp_jsonrpc_get_string(r, "resultType"), "input_required");
    ck_assert_str_eq(mcp_jsonrpc_get_string(r, "requestState"), "STATE");
    json_object_object_get_ex(r, "inputRequests", &x);
    ck_assert(json_object_object_get_ex(x, "input-1", &x));
    ck_assert_str_eq(mcp_jsonrpc_get_string(x, "method"), "elicitation/create");
    ck_assert(!json_object_object_get_ex(x, "id", NULL));

    err = mcp_bridge_input_responses(pool, parse("{\"params\":{\"inputResponses\":{\"input-1\":"
                                                 "{\"action\":\"accept\"}}}}"),
                                     "{\"input-1\":0}", &out);
    ck_assert_ptr_null(err);
    ck_assert_int_eq(out->nelts, 1);
    ck_assert_str_eq(APR_ARRAY_IDX(out, 0, const char *),
                     "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"action\":\"accept\"}}");
    err = mcp_bridge_input_responses(pool, parse("{\"params\":{\"inputResponses\":{}}}"),
                                     "{\"input-1\":0}", &out);
    ck_assert_ptr_nonnull(strstr(err, "input-1"));
    err = mcp_bridge_input_responses(pool, parse("{\"params\":{}}"), "{\"input-1\":0}", &out);
    ck_assert_ptr_nonnull(strstr(err, "inputResponses"));
}
END_TEST

START_TEST(retry_members_and_cancel)
{
    int has = 0;

    ck_assert_str_eq(mcp_bridge_request_state(parse("{\"params\":{\"requestState\":\"s\","
                                                    "\"inputResponses\":{}}}"), &has), "s");
    ck_assert(has);
    ck_assert_ptr_null(mcp_bridge_request_state(parse("{\"params\":{}}"), &has));
    ck_assert(!has);
    ck_assert_str_eq(mcp_bridge_cancelled(pool, 12, "r"),
                     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                     "{\"requestId\":12,\"reason\":\"r\"}}");
}
END_TEST

START_TEST(listen_filter)
{
    const char *init = "{\"capabilities\":{\"tools\":{\"listChanged\":true},\"prompts\":{},"
                       "\"resources\":{\"subscribe\":true}}}";
    const char *ack = mcp_bridge_listen_ack(pool, parse(
        "{\"params\":{\"notifications\":{\"toolsListChanged\":true,\"promptsListChanged\":"
        "true,\"resourceSubscriptions\":[\"a://1\",7]}}}"), init);
    json_object *id = parse("\"L1\"");
    const char *out;

    ck_assert_str_eq(ack, "{\"toolsListChanged\":true,\"resourceSubscriptions\":[\"a://1\"]}");
    ck_assert_str_eq(mcp_bridge_listen_ack(pool, parse("{\"params\":{\"notifications\":"
                                                       "{\"resourceSubscriptions\":[\"x\"]}}}"),
                                           "{\"capabilities\":{}}"), "{}");
    out = mcp_bridge_listen_pass(pool, parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                                             "tools/list_changed\"}"), ack, id);
    ck_assert_str_eq(out, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\","
                          "\"params\":{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":"
                          "\"L1\"}}}");
    ck_assert_ptr_nonnull(mcp_bridge_listen_pass(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":"
        "{\"uri\":\"a://1\"}}"), ack, id));
    ck_assert_ptr_null(mcp_bridge_listen_pass(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":"
        "{\"uri\":\"a://2\"}}"), ack, id));
    ck_assert_ptr_null(mcp_bridge_listen_pass(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/prompts/list_changed\"}"), ack, id));
    ck_assert_ptr_null(mcp_bridge_listen_pass(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}"), ack,
        id));
    ck_assert_ptr_null(mcp_bridge_listen_pass(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"roots/list\"}"), ack, id));
}
END_TEST

START_TEST(url_elicitations)
{
    apr_array_header_t *reqs;
    json_object *r0, *r1;

    reqs = mcp_bridge_url_elicitations(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32042,\"message\":\"auth\","
        "\"data\":{\"elicitations\":[{\"mode\":\"url\",\"elicitationId\":\"e-1\","
        "\"url\":\"https://example.com/a\",\"message\":\"Authorize\"},{\"url\":\"https://x/\"},7]}}}"));
    ck_assert_ptr_nonnull(reqs);
    ck_assert_int_eq(reqs->nelts, 2);
    r0 = APR_ARRAY_IDX(reqs, 0, json_object *);
    r1 = APR_ARRAY_IDX(reqs, 1, json_object *);
    ck_assert_str_eq(mcp_jsonrpc_to_string(pool, r0, NULL),
                     "{\"jsonrpc\":\"2.0\",\"id\":\"e-1\",\"method\":\"elicitation/create\","
                     "\"params\":{\"mode\":\"url\",\"elicitationId\":\"e-1\","
                     "\"url\":\"https://example.com/a\",\"message\":\"Authorize\"}}");
    ck_assert_str_eq(mcp_bridge_input_key(pool, r1, 2), "url-2");
    ck_assert_str_eq(mcp_bridge_input_capability(r1), "elicitation");
    /* not -32042, or nothing to elicit: none (mapped to -32602 on the way out) */
    ck_assert_ptr_null(mcp_bridge_url_elicitations(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32042,\"message\":\"x\"}}")));
    ck_assert_ptr_null(mcp_bridge_url_elicitations(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32602,\"message\":\"x\","
        "\"data\":{\"elicitations\":[{}]}}}")));
    ck_assert_ptr_null(mcp_bridge_url_elicitations(pool, parse(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}")));
}
END_TEST

static Suite *bridge_suite(void)
{
    Suite *s = suite_create("mcp_bridge");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, canonical_key);
    tcase_add_test(tc, going_in);
    tcase_add_test(tc, initialize_on_behalf);
    tcase_add_test(tc, digest_binds_the_request);
    tcase_add_test(tc, pool_tag_names_one_key);
    tcase_add_test(tc, classify);
    tcase_add_test(tc, coming_out);
    tcase_add_test(tc, discover);
    tcase_add_test(tc, rounds);
    tcase_add_test(tc, round_keys);
    tcase_add_test(tc, retry_members_and_cancel);
    tcase_add_test(tc, listen_filter);
    tcase_add_test(tc, url_elicitations);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(bridge_suite());
}
