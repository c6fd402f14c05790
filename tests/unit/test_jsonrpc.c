/* Unit tests for mcp_jsonrpc: parsing untrusted bodies, classification, error bodies. */
#include <string.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_strings.h>
#include <check.h>

#include "unit_main.h"
#include "unit_pool.h"

#include "mcp_jsonrpc.h"

static mcp_jsonrpc_status_t parse(const char *text, mcp_jsonrpc_body_t **body, const char **reason)
{
    return mcp_jsonrpc_parse(pool, text, strlen(text), body, reason);
}

static mcp_msg_kind_t kind_of(const char *text)
{
    mcp_jsonrpc_body_t *body;
    const char *reason;

    if (parse(text, &body, &reason) == MCP_JSONRPC_ERR_PARSE) {
        return (mcp_msg_kind_t)-1;
    }
    return body->msgs[0].kind;
}

START_TEST(request_notification_response_error)
{
    ck_assert_int_eq(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"), MCP_MSG_REQUEST);
    ck_assert_int_eq(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"x\",\"params\":{}}"),
                     MCP_MSG_REQUEST);
    ck_assert_int_eq(kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"),
                     MCP_MSG_NOTIFICATION);
    ck_assert_int_eq(kind_of("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}"), MCP_MSG_RESPONSE);
    ck_assert_int_eq(kind_of("{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-1,\"message\":\"m\"}}"),
                     MCP_MSG_ERROR);
    ck_assert_int_eq(kind_of("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-1,\"message\":\"m\"}}"),
                     MCP_MSG_ERROR);
}
END_TEST

START_TEST(not_jsonrpc_is_invalid_with_reason)
{
    static const char *bad[] = {
        "[]", "42", "\"s\"", "null", "{}",
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"x\"}",
        "{\"id\":1,\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}",
        /* a NUL would cut the C string: "\u0000x" must not read as "" nor "a\u0000b" as "a"
         * (found by tests/fuzz/fuzz_jsonrpc) */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\\u0000x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\\u0000x\"}",
        "{\"jsonrpc\":\"2.0\\u0000\",\"id\":1,\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":3}",
        "{\"jsonrpc\":\"2.0\",\"id\":1}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{\"code\":1,\"message\":\"m\"}}",
        "{\"jsonrpc\":\"2.0\",\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"x\",\"message\":\"m\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}",
        "[{\"jsonrpc\":\"2.0\",\"method\":\"a\"},{\"jsonrpc\":\"2.0\"}]",
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mcp_jsonrpc_body_t *body;
        const char *reason = NULL;
        ck_assert_msg(parse(bad[i], &body, &reason) == MCP_JSONRPC_ERR_INVALID, "%s", bad[i]);
        ck_assert_ptr_nonnull(reason);
        ck_assert_int_gt(strlen(reason), 5);
    }
}
END_TEST

START_TEST(malformed_json_is_parse_error)
{
    static const char *bad[] = {
        "", "   ", "{", "{\"jsonrpc\":\"2.0\",}", "{'a':1}", "{\"a\":1} x", "nul", "[1,]",
        "{\"a\":\"\xff\"}",  /* invalid UTF-8 */
        /* json-c takes these even in strict mode; found by tests/fuzz/fuzz_jsonrpc */
        "[NaN]", "[Infinity]", "[-Infinity]",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"x\":NaN}}",
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mcp_jsonrpc_body_t *body;
        const char *reason = NULL;
        ck_assert_msg(parse(bad[i], &body, &reason) == MCP_JSONRPC_ERR_PARSE, "%s", bad[i]);
        ck_assert_ptr_nonnull(reason);
    }
    /* ... but N and I inside strings are text like any other */
    {
        mcp_jsonrpc_body_t *body;
        const char *reason;
        ck_assert_int_eq(parse("{\"jsonrpc\":\"2.0\",\"method\":\"NaN/Infinity\","
                               "\"params\":{\"I\":\"N\\\"I\"}}", &body, &reason),
                         MCP_JSONRPC_OK);
    }
}
END_TEST

START_TEST(depth_limit)
{
    char deep[4 * MCP_JSONRPC_MAX_DEPTH + 64];
    mcp_jsonrpc_body_t *body;
    const char *reason;
    int i, n = 0;

    for (i = 0; i < MCP_JSONRPC_MAX_DEPTH + 5; i++) {
        deep[n++] = '[';
    }
    for (i = 0; i < MCP_JSONRPC_MAX_DEPTH + 5; i++) {
        deep[n++] = ']';
    }
    deep[n] = '\0';
    ck_assert_int_eq(parse(deep, &body, &reason), MCP_JSONRPC_ERR_PARSE);
}
END_TEST

START_TEST(trailing_whitespace_allowed)
{
    mcp_jsonrpc_body_t *body;
    const char *reason;

    ck_assert_int_eq(parse("{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\r\n \t", &body, &reason),
                     MCP_JSONRPC_OK);
}
END_TEST

START_TEST(trailing_nul_refused)
{
    static const char text[] = "{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\0\0";
    static const char mid[] = "{\"jsonrpc\":\"2.0\",\"method\":\"n\"} \0 ";
    mcp_jsonrpc_body_t *body = NULL;
    const char *reason = NULL;

    /* Only JSON whitespace may follow the value: a NUL would make the C string that is stored
     * differ from the bytes the backend gets. */
    ck_assert_int_eq(mcp_jsonrpc_parse(pool, text, sizeof(text) - 1, &body, &reason),
                     MCP_JSONRPC_ERR_PARSE);
    ck_assert_str_eq(reason, "trailing data after the JSON value");
    ck_assert_int_eq(mcp_jsonrpc_parse(pool, mid, sizeof(mid) - 1, &body, &reason),
                     MCP_JSONRPC_ERR_PARSE);
}
END_TEST

START_TEST(batch_counts)
{
    mcp_jsonrpc_body_t *body;
    const char *reason;

    ck_assert_int_eq(parse("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"},"
                           "{\"jsonrpc\":\"2.0\",\"method\":\"n\"},"
                           "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\"},"
                           "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}]", &body, &reason),
                     MCP_JSONRPC_OK);
    ck_assert(body->is_batch);
    ck_assert_int_eq(body->count, 4);
    ck_assert_int_eq(body->n_requests, 2);
    ck_assert_int_eq(body->n_notifications, 1);
    ck_assert_int_eq(body->n_responses, 1);
    ck_assert_int_eq(mcp_jsonrpc_find_method(body, "initialize"), 2);
    ck_assert_int_eq(mcp_jsonrpc_find_method(body, "n"), -1); /* notifications are not requests */
    ck_assert(!mcp_jsonrpc_is_single_request(body, "a"));
}
END_TEST

START_TEST(single_request_helpers)
{
    mcp_jsonrpc_body_t *body;
    const char *reason;

    ck_assert_int_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                           "\"params\":{\"protocolVersion\":\"2025-11-25\"}}", &body, &reason),
                     MCP_JSONRPC_OK);
    ck_assert(mcp_jsonrpc_is_single_request(body, "initialize"));
    ck_assert(!mcp_jsonrpc_is_single_request(body, "ping"));
    ck_assert_str_eq(body->msgs[0].method, "initialize");
    ck_assert_int_eq(json_object_get_int(body->msgs[0].id), 1);
}
END_TEST

START_TEST(error_body_shape)
{
    json_object *id = json_object_new_string("r/1");
    const char *s = mcp_jsonrpc_error_body(pool, id, MCP_JSONRPC_PARSE_ERROR, "Parse error: x", NULL);

    ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"id\":\"r/1\",\"error\":{\"code\":-32700,"
                        "\"message\":\"Parse error: x\"}}");
    s = mcp_jsonrpc_error_body(pool, NULL, -32001, "Session not found", NULL);
    ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,"
                        "\"message\":\"Session not found\"}}");
    /* the caller's reference is untouched */
    ck_assert_str_eq(json_object_get_string(id), "r/1");
    json_object_put(id);
}
END_TEST

/* A message quoting a backend's bytes still makes a body that parses (issue 9: the relay used
 * to loop forever re-parsing its own error message). */
START_TEST(error_body_with_invalid_utf8_is_valid_json)
{
    const char *s = mcp_jsonrpc_error_body(pool, NULL, -32002, "HTTP 500 (text/html\xff)", NULL);

    ck_assert_ptr_nonnull(mcp_jsonrpc_parse_value(pool, s, strlen(s)));
    ck_assert_ptr_nonnull(strstr(s, "text/html\\\\xff"));
    s = mcp_jsonrpc_error_body(pool, NULL, -32002, "caf\xc3\xa9", NULL);
    ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32002,"
                        "\"message\":\"caf\xc3\xa9\"}}");
}
END_TEST

START_TEST(parse_value_reasons)
{
    const char *reason = NULL;

    ck_assert_ptr_null(mcp_jsonrpc_parse_value_ex(pool, "{\"a\":\"\xff\"}", 8, &reason));
    ck_assert_ptr_nonnull(reason);
    reason = NULL;
    ck_assert_ptr_null(mcp_jsonrpc_parse_value_ex(pool, "null", 4, &reason));
    ck_assert_ptr_nonnull(reason);
    ck_assert_ptr_nonnull(mcp_jsonrpc_parse_value_ex(pool, "{}", 2, &reason));
    ck_assert_ptr_null(reason);
    ck_assert_ptr_null(mcp_jsonrpc_parse_value_ex(pool, "x", 1, NULL));
}
END_TEST

START_TEST(is_error_message)
{
    static const char err[] = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,"
                              "\"message\":\"Session not found\"}}";

    ck_assert(mcp_jsonrpc_is_error_message(pool, err, sizeof(err) - 1));
    ck_assert(!mcp_jsonrpc_is_error_message(pool, "<h1>Not Found</h1>", 18));
    ck_assert(!mcp_jsonrpc_is_error_message(pool, "", 0));
    ck_assert(!mcp_jsonrpc_is_error_message(pool, "{\"error\":\"x\"}", 13));
}
END_TEST

START_TEST(reply_id)
{
    mcp_jsonrpc_body_t *body;
    const char *reason;

    parse("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"x\",\"params\":7}", &body, &reason);
    ck_assert_int_eq(body->msgs[0].kind, MCP_MSG_INVALID);
    ck_assert_str_eq(json_object_get_string(mcp_jsonrpc_reply_id(&body->msgs[0])), "abc");
    parse("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}", &body, &reason);
    ck_assert_ptr_null(mcp_jsonrpc_reply_id(&body->msgs[0]));
    parse("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", &body, &reason);
    ck_assert_int_eq(json_object_get_int(mcp_jsonrpc_reply_id(&body->msgs[0])), 3);
    parse("{\"jsonrpc\":\"2.0\",\"method\":\"n\"}", &body, &reason);
    ck_assert_ptr_null(mcp_jsonrpc_reply_id(&body->msgs[0]));
}
END_TEST

/* The span of key's value in text, as a string ("" when not found). */
static const char *span_of(const char *text, const char *key)
{
    apr_size_t off, n;

    if (!mcp_jsonrpc_member_span(text, strlen(text), key, &off, &n)) {
        return "";
    }
    return apr_pstrmemdup(pool, text + off, n);
}

START_TEST(member_span_finds_the_last_top_level_member)
{
    ck_assert_str_eq(span_of("{\"id\":1}", "id"), "1");
    ck_assert_str_eq(span_of(" { \"a\" : {\"id\":2,\"x\":[\"}\",\"id\"]} , \"id\" : \"x\\\"}\" } ",
                             "id"), "\"x\\\"}\"");
    ck_assert_str_eq(span_of("{\"id\":1,\"id\":[1,{\"id\":3}]}", "id"), "[1,{\"id\":3}]");
    ck_assert_str_eq(span_of("{\"idx\":1,\"i\":2}", "id"), "");
    ck_assert_str_eq(span_of("{\"params\":{\"id\":1}}", "id"), "");
    ck_assert_str_eq(span_of("{\"id\":-1.5e3,\"method\":\"m\"}", "id"), "-1.5e3");
    ck_assert_str_eq(span_of("{\"id\":null}", "id"), "null");
    ck_assert_str_eq(span_of("{}", "id"), "");
    ck_assert_str_eq(span_of("[{\"id\":1}]", "id"), "");
    /* A name written with an escape might be "id": not known, so not found. */
    ck_assert_str_eq(span_of("{\"\\u0069d\":1,\"id\":2}", "id"), "");
    /* A cut text is not walked past its end. */
    ck_assert_str_eq(span_of("{\"id\":\"abc", "id"), "");
    ck_assert_str_eq(span_of("{\"id\":{\"a\":1", "id"), "");
}
END_TEST

static const char *id_written(const char *text)
{
    mcp_jsonrpc_body_t *body;
    const char *reason;
    json_object *out = json_object_new_object(), *copy = NULL;
    const char *written;

    ck_assert_int_eq(parse(text, &body, &reason), MCP_JSONRPC_OK);
    mcp_jsonrpc_keep_id_as_sent(body->msgs[0].id, text, strlen(text));
    /* As the bridge writes it: a deep copy of the id in an answer of its own. */
    ck_assert_int_eq(json_object_deep_copy(body->msgs[0].id, &copy, NULL), 0);
    json_object_object_add(out, "id", copy);
    written = apr_pstrdup(pool, mcp_jsonrpc_to_string(pool, out, NULL));
    json_object_put(out);
    return written;
}

START_TEST(an_id_with_a_surrogate_escape_is_written_as_sent)
{
    ck_assert_str_eq(id_written("{\"jsonrpc\":\"2.0\",\"id\":\"nul\\ud800-1\",\"method\":\"m\"}"),
                     "{\"id\":\"nul\\ud800-1\"}");
    ck_assert_str_eq(id_written("{\"jsonrpc\":\"2.0\",\"id\":\"\\uDFFF\\u0000\",\"method\":\"m\"}"),
                     "{\"id\":\"\\uDFFF\\u0000\"}");
    /* The value compared is still json-c's. */
    {
        mcp_jsonrpc_body_t *a, *b;
        const char *reason, *t = "{\"jsonrpc\":\"2.0\",\"id\":\"\\ud800\",\"method\":\"m\"}";

        parse(t, &a, &reason);
        parse("{\"jsonrpc\":\"2.0\",\"id\":\"\xEF\xBF\xBD\",\"method\":\"m\"}", &b, &reason);
        ck_assert_int_ne(mcp_jsonrpc_keep_id_as_sent(a->msgs[0].id, t, strlen(t)), 0);
        ck_assert(json_object_equal(a->msgs[0].id, b->msgs[0].id));
    }
    /* Everything json-c writes back as sent, or as the same value, is left alone. */
    ck_assert_str_eq(id_written("{\"jsonrpc\":\"2.0\",\"id\":\"\\ud83d\\ude00\",\"method\":\"m\"}"),
                     "{\"id\":\"\xF0\x9F\x98\x80\"}");
    ck_assert_str_eq(id_written("{\"jsonrpc\":\"2.0\",\"id\":\"\\u0041\\\\ud800\",\"method\":\"m\"}"),
                     "{\"id\":\"A\\\\ud800\"}");
    ck_assert_str_eq(id_written("{\"jsonrpc\":\"2.0\",\"id\":\"\xEF\xBF\xBD\",\"method\":\"m\"}"),
                     "{\"id\":\"\xEF\xBF\xBD\"}");
    ck_assert_str_eq(id_written("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\"}"), "{\"id\":7}");
    ck_assert_int_eq(mcp_jsonrpc_keep_id_as_sent(NULL, "{}", 2), 0);
}
END_TEST

START_TEST(an_id_as_sent_is_a_copy_only_when_it_must_be)
{
    mcp_jsonrpc_body_t *body;
    const char *reason, *t = "{\"jsonrpc\":\"2.0\",\"id\":\"e\\ud800\",\"method\":\"m\"}";
    const char *plain = "{\"jsonrpc\":\"2.0\",\"id\":\"e\",\"method\":\"m\"}";
    json_object *id, *kept;

    parse(plain, &body, &reason);
    id = body->msgs[0].id;
    ck_assert_ptr_eq(mcp_jsonrpc_id_as_sent(pool, id, plain, strlen(plain)), id);
    parse(t, &body, &reason);
    id = body->msgs[0].id;
    kept = mcp_jsonrpc_id_as_sent(pool, id, t, strlen(t));
    ck_assert_ptr_ne(kept, id);
    ck_assert_str_eq(mcp_jsonrpc_to_string(pool, kept, NULL), "\"e\\ud800\"");
    /* The message's own id is still json-c's text (what the 2025 relay keys answers by). */
    ck_assert_str_eq(mcp_jsonrpc_to_string(pool, id, NULL), "\"e\xEF\xBF\xBD\"");
    ck_assert(json_object_equal(kept, id));
    ck_assert_ptr_null(mcp_jsonrpc_id_as_sent(pool, NULL, t, strlen(t)));
}
END_TEST

START_TEST(get_string)
{
    json_object *o = mcp_jsonrpc_parse_value(pool, "{\"a\":\"x\",\"b\":1}", 15);

    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(mcp_jsonrpc_get_string(o, "a"), "x");
    ck_assert_ptr_null(mcp_jsonrpc_get_string(o, "b"));
    ck_assert_ptr_null(mcp_jsonrpc_get_string(o, "c"));
    ck_assert_ptr_null(mcp_jsonrpc_get_string(NULL, "a"));
    ck_assert_ptr_null(mcp_jsonrpc_parse_value(pool, "{x", 2));
}
END_TEST

static mcp_target_kind_t target_of(const char *json, const char **name)
{
    mcp_jsonrpc_msg_t msg;

    mcp_jsonrpc_classify(mcp_jsonrpc_parse_value(pool, json, strlen(json)), &msg);
    return mcp_jsonrpc_target(&msg, name);
}

START_TEST(target_names)
{
    const char *name;

    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
                               "\"params\":{\"name\":\"deploy-web\"}}", &name), MCP_TARGET_TOOL);
    ck_assert_str_eq(name, "deploy-web");
    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"prompts/get\","
                               "\"params\":{\"name\":\"p\"}}", &name), MCP_TARGET_PROMPT);
    ck_assert_str_eq(name, "p");
    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\","
                               "\"params\":{\"uri\":\"file:///a\"}}", &name),
                     MCP_TARGET_RESOURCE);
    ck_assert_str_eq(name, "file:///a");
    /* No name, a name that is not a string, a notification, another method. */
    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}",
                               &name), MCP_TARGET_NONE);
    ck_assert_ptr_null(name);
    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
                               "\"params\":{\"name\":7}}", &name), MCP_TARGET_NONE);
    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\","
                               "\"params\":{\"name\":\"x\"}}", &name), MCP_TARGET_NONE);
    ck_assert_int_eq(target_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}",
                               &name), MCP_TARGET_NONE);
    ck_assert_int_eq(mcp_jsonrpc_target(NULL, &name), MCP_TARGET_NONE);
}
END_TEST

static int array_length(const char *text, apr_size_t *n)
{
    return mcp_jsonrpc_array_length(text, strlen(text), n);
}

START_TEST(array_length_counts_top_level_elements)
{
    apr_size_t n = 99;

    ck_assert(array_length("[]", &n) && n == 0);
    ck_assert(array_length(" \n[ \t] \r\n", &n) && n == 0);
    ck_assert(array_length("[1]", &n) && n == 1);
    ck_assert(array_length("[[]]", &n) && n == 1);
    ck_assert(array_length("[{}]", &n) && n == 1);
    ck_assert(array_length("[1, [2, 3], {\"a\": [4, 5], \"b\": 6}, \"x,y]\"]", &n) && n == 4);
    ck_assert(array_length("[\"\\\"],[\", 2]", &n) && n == 2);   /* an escaped quote */
    ck_assert(array_length("[\"\\\\\", 2]", &n) && n == 2);      /* an escaped backslash */
    ck_assert(array_length("[1,,2]", &n) && n == 3);              /* counted, not checked */
    /* Not one balanced array: the parser says why. */
    ck_assert(!array_length("", &n) && n == 0);
    ck_assert(!array_length("{\"a\":[1,2]}", &n));
    ck_assert(!array_length("[1,2", &n));
    ck_assert(!array_length("[1,2}", &n));
    ck_assert(!array_length("[{]}", &n));
    ck_assert(!array_length("[\"]", &n));
    ck_assert(!array_length("[\"\\", &n));
    ck_assert(!array_length("[1] x", &n));
    ck_assert(!array_length("[1][2]", &n));
    ck_assert(!array_length("1", &n));
}
END_TEST

START_TEST(array_length_depth_limit)
{
    char deep[2 * MCP_JSONRPC_MAX_DEPTH + 3];
    apr_size_t n;
    int i;

    for (i = 0; i < MCP_JSONRPC_MAX_DEPTH; i++) {
        deep[i] = '[';
        deep[2 * MCP_JSONRPC_MAX_DEPTH - 1 - i] = ']';
    }
    deep[2 * MCP_JSONRPC_MAX_DEPTH] = '\0';
    ck_assert(array_length(deep, &n) && n == 1);
    memmove(deep + 1, deep, 2 * MCP_JSONRPC_MAX_DEPTH + 1);
    deep[0] = '[';
    strcat(deep, "]");
    ck_assert(!array_length(deep, &n));
}
END_TEST

static const char *pings(int n)
{
    apr_array_header_t *parts = apr_array_make(pool, n, sizeof(const char *));
    int i;

    for (i = 0; i < n; i++) {
        APR_ARRAY_PUSH(parts, const char *) =
            apr_psprintf(pool, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}", i);
    }
    return apr_pstrcat(pool, "[", apr_array_pstrcat(pool, parts, ','), "]", NULL);
}

START_TEST(over_long_batch_refused_before_parsing)
{
    mcp_jsonrpc_body_t *body;
    const char *reason, *text = pings(101);

    ck_assert_int_eq(mcp_jsonrpc_parse_limited(pool, text, strlen(text), 100, &body, &reason),
                     MCP_JSONRPC_ERR_TOO_LONG);
    ck_assert(body && body->is_batch && body->count == 101);
    ck_assert_ptr_null(body->root);   /* no tree was built */
    ck_assert_ptr_null(body->msgs);
    ck_assert_str_eq(reason, "the batch holds 101 messages, more than 100");
    /* At the limit, and without one, it is parsed as before. */
    ck_assert_int_eq(mcp_jsonrpc_parse_limited(pool, text, strlen(text), 101, &body, &reason),
                     MCP_JSONRPC_OK);
    ck_assert_int_eq(body->count, 101);
    ck_assert_int_eq(body->n_requests, 101);
    ck_assert_int_eq(mcp_jsonrpc_parse_limited(pool, text, strlen(text), 0, &body, &reason),
                     MCP_JSONRPC_OK);
    /* A balanced array of more elements than allowed is refused by its length, whatever they
     * are; one that is not balanced is not JSON. */
    ck_assert_int_eq(mcp_jsonrpc_parse_limited(pool, "[1,2,3]", 7, 2, &body, &reason),
                     MCP_JSONRPC_ERR_TOO_LONG);
    ck_assert_int_eq(mcp_jsonrpc_parse_limited(pool, "[1,2,3", 6, 2, &body, &reason),
                     MCP_JSONRPC_ERR_PARSE);
    /* Not a batch: the limit does not apply. */
    text = "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"a\":[1,2,3]}}";
    ck_assert_int_eq(mcp_jsonrpc_parse_limited(pool, text, strlen(text), 1, &body, &reason),
                     MCP_JSONRPC_OK);
}
END_TEST

START_TEST(methods_joined)
{
    mcp_jsonrpc_body_t *body;
    const char *reason, *text;

    text = "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
           "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"},"
           "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}},{\"jsonrpc\":\"1.0\"}]";
    ck_assert_int_eq(parse(text, &body, &reason), MCP_JSONRPC_ERR_INVALID);
    ck_assert_str_eq(mcp_jsonrpc_methods_joined(pool, body),
                     "ping, notifications/x, response, -");
    ck_assert_int_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", &body, &reason),
                     MCP_JSONRPC_OK);
    ck_assert_str_eq(mcp_jsonrpc_methods_joined(pool, body), "ping");
    text = pings(50000);
    ck_assert_int_eq(parse(text, &body, &reason), MCP_JSONRPC_OK);
    ck_assert_int_eq(strlen(mcp_jsonrpc_methods_joined(pool, body)), 50000 * 6 - 2);
    ck_assert_str_eq(mcp_jsonrpc_methods_joined(pool, NULL), "");
}
END_TEST

static Suite *jsonrpc_suite(void)
{
    Suite *s = suite_create("mcp_jsonrpc");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, request_notification_response_error);
    tcase_add_test(tc, not_jsonrpc_is_invalid_with_reason);
    tcase_add_test(tc, malformed_json_is_parse_error);
    tcase_add_test(tc, depth_limit);
    tcase_add_test(tc, trailing_whitespace_allowed);
    tcase_add_test(tc, trailing_nul_refused);
    tcase_add_test(tc, batch_counts);
    tcase_add_test(tc, single_request_helpers);
    tcase_add_test(tc, error_body_shape);
    tcase_add_test(tc, error_body_with_invalid_utf8_is_valid_json);
    tcase_add_test(tc, parse_value_reasons);
    tcase_add_test(tc, is_error_message);
    tcase_add_test(tc, reply_id);
    tcase_add_test(tc, member_span_finds_the_last_top_level_member);
    tcase_add_test(tc, an_id_with_a_surrogate_escape_is_written_as_sent);
    tcase_add_test(tc, an_id_as_sent_is_a_copy_only_when_it_must_be);
    tcase_add_test(tc, get_string);
    tcase_add_test(tc, target_names);
    tcase_add_test(tc, array_length_counts_top_level_elements);
    tcase_add_test(tc, array_length_depth_limit);
    tcase_add_test(tc, over_long_batch_refused_before_parsing);
    tcase_add_test(tc, methods_joined);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(jsonrpc_suite());
}
