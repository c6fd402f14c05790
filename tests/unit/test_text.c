/* Unit tests for mcp_text: UTF-8 validation and quoting of untrusted bytes. */
#include <check.h>
#include <string.h>

#include <apr_pools.h>

#include "mcp_text.h"
#include "unit_main.h"
#include "unit_pool.h"

#define UTF8(s) mcp_text_is_utf8(s, sizeof(s) - 1)

START_TEST(test_is_utf8)
{
    ck_assert(UTF8(""));
    ck_assert(UTF8("plain ascii"));
    ck_assert(UTF8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));   /* é € 😀 */
    ck_assert(UTF8("a\0b"));
    ck_assert(UTF8("\xed\x9f\xbf"));            /* U+D7FF */
    ck_assert(UTF8("\xf4\x8f\xbf\xbf"));        /* U+10FFFF */
    ck_assert(!UTF8("\xff"));
    ck_assert(!UTF8("text/html\xff"));
    ck_assert(!UTF8("\xc3"));                   /* truncated */
    ck_assert(!UTF8("\xc0\xaf"));               /* overlong '/' */
    ck_assert(!UTF8("\xe0\x80\xaf"));           /* overlong */
    ck_assert(!UTF8("\xed\xa0\x80"));           /* surrogate U+D800 */
    ck_assert(!UTF8("\xf4\x90\x80\x80"));       /* above U+10FFFF */
    ck_assert(!UTF8("\xe2\x82"));               /* truncated € */
    ck_assert(!UTF8("\x80"));                   /* lone continuation */
}
END_TEST

START_TEST(test_jsonb_plain)
{
#define PLAIN(t) mcp_text_jsonb_plain(t, strlen(t))
    char big[160];

    ck_assert(PLAIN("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":[1.5,-2,true,null]}}"));
    ck_assert(PLAIN("\"a \\\" quote, a \\\\ backslash, \\n\""));
    ck_assert(PLAIN("\"\\\\u0000 is text here\""));   /* an escaped backslash, then u0000 */
    ck_assert(PLAIN("\"caf\xc3\xa9\""));
    ck_assert(!PLAIN("\"\\u0000\""));                  /* jsonb refuses it */
    ck_assert(!PLAIN("\"\\ud800\""));                  /* a lone surrogate */
    ck_assert(!PLAIN("\"\\u00e9\""));                  /* any \u: the cast function decides */
    ck_assert(!PLAIN("1e1000000"));
    ck_assert(!PLAIN("[2.5E+3]"));
    ck_assert(!PLAIN("\"3e\""));                         /* refused, harmlessly */
    ck_assert(PLAIN("\"e1\""));
    memset(big, '9', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert(!PLAIN(big));
    big[100] = '\0';
    ck_assert(PLAIN(big));
    ck_assert(!mcp_text_jsonb_plain(NULL, 0));
#undef PLAIN
}
END_TEST

START_TEST(test_quote)
{
    ck_assert_str_eq(mcp_text_quote(pool, "text/html\xff", 10, 0), "text/html\\xff");
    ck_assert_str_eq(mcp_text_quote(pool, "caf\xc3\xa9", 5, 0), "caf\xc3\xa9");
    ck_assert_str_eq(mcp_text_quote(pool, "a\r\nb\tc\0d\x7f", 9, 0), "a\\x0d\\x0ab\\x09c\\x00d\\x7f");
    ck_assert_str_eq(mcp_text_quote(pool, "\xed\xa0\x80", 3, 0), "\\xed\\xa0\\x80");
    ck_assert_str_eq(mcp_text_quote(pool, "back\\slash \"q\"", 14, 0), "back\\slash \"q\"");
    ck_assert_str_eq(mcp_text_quote(pool, NULL, 0, 0), "");
    ck_assert_str_eq(mcp_text_quote(pool, "", 0, 5), "");
}
END_TEST

START_TEST(test_quote_is_always_utf8_and_bounded)
{
    char buf[256];
    int i;

    for (i = 0; i < 256; i++) {
        buf[i] = (char)(255 - i);
    }
    for (i = 0; i <= 256; i++) {
        const char *q = mcp_text_quote(pool, buf, (apr_size_t)i, 0);
        ck_assert(mcp_text_is_utf8(q, strlen(q)));
        ck_assert(!strchr(q, '\n') && !strchr(q, '\r'));
        q = mcp_text_quote(pool, buf, (apr_size_t)i, 16);
        ck_assert_uint_le(strlen(q), 16 + 3);
        ck_assert(mcp_text_is_utf8(q, strlen(q)));
    }
}
END_TEST

START_TEST(test_quote_cuts_at_character_boundary)
{
    /* "éééé" is 8 bytes; 5 allowed: two characters, then "..." */
    ck_assert_str_eq(mcp_text_quote(pool, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 8, 5),
                     "\xc3\xa9\xc3\xa9...");
    ck_assert_str_eq(mcp_text_quote(pool, "abcdef", 6, 6), "abcdef");
    ck_assert_str_eq(mcp_text_quote(pool, "abcdefg", 7, 6), "abcdef...");
    ck_assert_str_eq(mcp_text_quote(pool, "ab\xff", 3, 5), "ab...");
}
END_TEST

static Suite *text_suite(void)
{
    Suite *s = suite_create("mcp_text");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_is_utf8);
    tcase_add_test(tc, test_quote);
    tcase_add_test(tc, test_jsonb_plain);
    tcase_add_test(tc, test_quote_is_always_utf8_and_bounded);
    tcase_add_test(tc, test_quote_cuts_at_character_boundary);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(text_suite());
}
