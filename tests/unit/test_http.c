/* Unit tests for mcp_http: Accept and Content-Type matching. */
#include <check.h>
#include <string.h>

#include "unit_main.h"

#include "mcp_http.h"

#define JSON "application/json"
#define SSE  "text/event-stream"

START_TEST(accept_lists)
{
    ck_assert(mcp_http_accepts("application/json, text/event-stream", JSON));
    ck_assert(mcp_http_accepts("application/json, text/event-stream", SSE));
    ck_assert(mcp_http_accepts("text/event-stream,application/json", JSON));
    ck_assert(mcp_http_accepts("Application/JSON ; charset=utf-8 , Text/Event-Stream", SSE));
    ck_assert(mcp_http_accepts("application/json;q=0.9,text/event-stream;q=0.5", SSE));
    ck_assert(!mcp_http_accepts("application/json", SSE));
    ck_assert(!mcp_http_accepts("text/html", JSON));
    ck_assert(!mcp_http_accepts("application/jsonx", JSON));
    ck_assert(!mcp_http_accepts("application/json-seq", JSON));
    ck_assert(!mcp_http_accepts("", JSON));
    ck_assert(!mcp_http_accepts(NULL, JSON));
    ck_assert(!mcp_http_accepts(",,,", JSON));
}
END_TEST

START_TEST(accept_wildcards_do_not_count_and_q0_refuses)
{
    ck_assert(!mcp_http_accepts("*/*", JSON));
    ck_assert(!mcp_http_accepts("*/*", SSE));
    ck_assert(!mcp_http_accepts("application/*", JSON));
    ck_assert(!mcp_http_accepts("text/*", SSE));
    ck_assert(mcp_http_accepts("*/*, text/event-stream", SSE));
    ck_assert(!mcp_http_accepts("application/json;q=0, text/event-stream", JSON));
    ck_assert(!mcp_http_accepts("application/json; q=0.0", JSON));
    ck_assert(mcp_http_accepts("application/json; q=0.001", JSON));
}
END_TEST

START_TEST(content_type)
{
    ck_assert(mcp_http_media_type_is("application/json", JSON));
    ck_assert(mcp_http_media_type_is("application/json; charset=utf-8", JSON));
    ck_assert(mcp_http_media_type_is("  Application/Json;charset=UTF-8", JSON));
    ck_assert(mcp_http_media_type_is("text/event-stream", SSE));
    ck_assert(!mcp_http_media_type_is("application/json-patch+json", JSON));
    ck_assert(!mcp_http_media_type_is("text/plain", JSON));
    ck_assert(!mcp_http_media_type_is("", JSON));
    ck_assert(!mcp_http_media_type_is(NULL, JSON));
}
END_TEST

START_TEST(session_id_form)
{
    char longid[258];

    ck_assert(mcp_http_session_id_is_valid("fault-1-42"));
    ck_assert(mcp_http_session_id_is_valid("!~"));
    ck_assert(!mcp_http_session_id_is_valid(NULL));
    ck_assert(!mcp_http_session_id_is_valid(""));
    ck_assert(!mcp_http_session_id_is_valid("a b"));
    ck_assert(!mcp_http_session_id_is_valid("abc\xff"));
    ck_assert(!mcp_http_session_id_is_valid("caf\xc3\xa9"));
    ck_assert(!mcp_http_session_id_is_valid("a\tb"));
    memset(longid, 'x', 256);
    longid[256] = '\0';
    ck_assert(mcp_http_session_id_is_valid(longid));
    longid[256] = 'x';
    longid[257] = '\0';
    ck_assert(!mcp_http_session_id_is_valid(longid));
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("mcp_http");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, accept_lists);
    tcase_add_test(tc, accept_wildcards_do_not_count_and_q0_refuses);
    tcase_add_test(tc, content_type);
    tcase_add_test(tc, session_id_form);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(http_suite());
}
