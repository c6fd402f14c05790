/* Unit tests for mcp_backend's targets: MCPBackend's parse, and where a stdio supervisor's
 * session id says its process runs (mcp_backend_session_url). */
#include <check.h>
#include <string.h>

#include <apr_pools.h>

#include "mcp_backend.h"
#include "unit_main.h"
#include "unit_pool.h"

START_TEST(test_session_url_valid)
{
    const char *id = "5f2c0000000000000000000000000e1@http://10.0.0.5:7601/stdio/everything";

    ck_assert_str_eq(mcp_backend_session_url(id), "http://10.0.0.5:7601/stdio/everything");
    /* It points into the id: no copy. */
    ck_assert_ptr_eq(mcp_backend_session_url(id), strchr(id, '@') + 1);
    ck_assert_str_eq(mcp_backend_session_url("a@https://gw.example/stdio/x"),
                     "https://gw.example/stdio/x");
    ck_assert_str_eq(mcp_backend_session_url("a@HTTP://[::1]:80/stdio/x"),
                     "HTTP://[::1]:80/stdio/x");
    /* The first '@' separates: one in the URL's path stays in the URL. */
    ck_assert_str_eq(mcp_backend_session_url("a@http://h/stdio/x@y"), "http://h/stdio/x@y");
    ck_assert_str_eq(mcp_backend_session_url("@http://h:1/s"), "http://h:1/s");
}
END_TEST

START_TEST(test_session_url_invalid)
{
    static const char *const bad[] = {
        "5f2c00000000000000000000000000e1",     /* an ordinary backend's id: no '@' */
        "abc@",
        "abc@ftp://h/stdio/x",
        "abc@unix:/run/x.sock",
        "abc@http://",
        "abc@https://",
        "abc@http:///stdio/x",                  /* no host */
        "abc@http://:7601/stdio/x",
        "abc@http://h/stdio/x y",               /* whitespace */
        "abc@http://h/stdio/x\r\nX-Evil: 1",
        "abc@http:/h/stdio/x",
        "abc@10.0.0.5:7601/stdio/x",
    };
    size_t i;

    ck_assert_ptr_null(mcp_backend_session_url(NULL));
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(mcp_backend_session_url(bad[i]) == NULL, "accepted: %s", bad[i]);
    }
}
END_TEST

START_TEST(test_target_parse)
{
    mcp_backend_target_t t;

    ck_assert_ptr_null(mcp_backend_target_parse(pool, "http://127.0.0.1:8080/mcp", &t));
    ck_assert_str_eq(t.url, "http://127.0.0.1:8080/mcp");
    ck_assert_ptr_null(t.unix_socket);
    ck_assert_int_eq(t.stdio, 0);
    ck_assert_ptr_null(t.headers);
    ck_assert_ptr_null(mcp_backend_target_parse(pool, "unix:/run/b.sock|http://localhost/mcp",
                                                &t));
    ck_assert_str_eq(t.unix_socket, "/run/b.sock");
    ck_assert_str_eq(t.url, "http://localhost/mcp");
    /* stdio:name is the module's (mod_mcp_stdio), not a URL. */
    ck_assert_ptr_nonnull(mcp_backend_target_parse(pool, "stdio:everything", &t));
    ck_assert_ptr_nonnull(mcp_backend_target_parse(pool, "unix:/x.sock", &t));
}
END_TEST

static Suite *backend_target_suite(void)
{
    Suite *s = suite_create("mcp_backend targets");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_session_url_valid);
    tcase_add_test(tc, test_session_url_invalid);
    tcase_add_test(tc, test_target_parse);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(backend_target_suite());
}
