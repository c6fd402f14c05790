/* Unit tests for mcp_id: session id encoding/checking, event id format and strict parse. */

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "mcp_id.h"

#include "unit_main.h"
#include "unit_pool.h"

/* ---- session ids ------------------------------------------------------------------------- */

static const char *enc(const char *s)
{
    return mcp_id_session_encode(pool, (const unsigned char *)s, strlen(s));
}

START_TEST(test_session_encode_rfc4648_vectors)
{
    /* RFC 4648 section 10 vectors, without padding */
    ck_assert_str_eq(enc(""), "");
    ck_assert_str_eq(enc("f"), "Zg");
    ck_assert_str_eq(enc("fo"), "Zm8");
    ck_assert_str_eq(enc("foo"), "Zm9v");
    ck_assert_str_eq(enc("foob"), "Zm9vYg");
    ck_assert_str_eq(enc("fooba"), "Zm9vYmE");
    ck_assert_str_eq(enc("foobar"), "Zm9vYmFy");
}
END_TEST

START_TEST(test_session_encode_url_alphabet)
{
    /* standard base64 would give "+/+/" and "AA==" */
    static const unsigned char b1[] = { 0xfb, 0xff, 0xbf };
    static const unsigned char b2[] = { 0x00 };
    static const unsigned char b3[] = { 0xff, 0xff };
    static const unsigned char b4[] = { 0x00, 0x10, 0x83 };
    ck_assert_str_eq(mcp_id_session_encode(pool, b1, 3), "-_-_");
    ck_assert_str_eq(mcp_id_session_encode(pool, b2, 1), "AA");
    ck_assert_str_eq(mcp_id_session_encode(pool, b3, 2), "__8");
    ck_assert_str_eq(mcp_id_session_encode(pool, b4, 3), "ABCD");
}
END_TEST

/* Reference decoder used to check the encoder on arbitrary bytes. */
static int b64url_val(char c)
{
    const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char *p = c ? strchr(a, c) : NULL;
    return p ? (int)(p - a) : -1;
}

static size_t b64url_decode(const char *s, unsigned char *out)
{
    unsigned long acc = 0;
    int bits = 0;
    size_t n = 0;
    for (; *s; s++) {
        int v = b64url_val(*s);
        ck_assert_int_ge(v, 0);
        acc = (acc << 6) | (unsigned long)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
            acc &= (1UL << bits) - 1;
        }
    }
    ck_assert_uint_eq(acc, 0);        /* unused trailing bits are zero (canonical) */
    return n;
}

START_TEST(test_session_encode_roundtrip_all_lengths)
{
    unsigned char in[64], out[64];
    unsigned int seed = 12345;
    size_t n, i;
    int round;

    for (round = 0; round < 200; round++) {
        for (n = 0; n <= sizeof(in); n++) {
            const char *s;
            for (i = 0; i < n; i++) {
                seed = seed * 1103515245u + 12345u;
                in[i] = (unsigned char)(seed >> 16);
            }
            s = mcp_id_session_encode(pool, in, n);
            ck_assert_uint_eq(strlen(s), (n * 4 + 2) / 3);
            for (i = 0; s[i]; i++)
                ck_assert(s[i] >= 0x21 && s[i] <= 0x7e);
            ck_assert_uint_eq(b64url_decode(s, out), n);
            ck_assert(memcmp(in, out, n) == 0);
        }
    }
}
END_TEST

START_TEST(test_session_id_length_and_wellformed)
{
    unsigned char bytes[MCP_ID_SESSION_RANDOM_BYTES];
    int round;
    size_t i;

    ck_assert_int_eq(MCP_ID_SESSION_LEN, (MCP_ID_SESSION_RANDOM_BYTES * 4 + 2) / 3);
    for (round = 0; round < 256; round++) {
        const char *s;
        for (i = 0; i < sizeof(bytes); i++)
            bytes[i] = (unsigned char)(round * 31 + i * 7);
        s = mcp_id_session_encode(pool, bytes, sizeof(bytes));
        ck_assert_uint_eq(strlen(s), MCP_ID_SESSION_LEN);
        ck_assert(mcp_id_session_is_wellformed(s));
    }
}
END_TEST

START_TEST(test_session_wellformed_rejects)
{
    const char *good = "ABCDEFGHIJKLMNOPQRSTUVWXYZab-_09";
    char buf[64];
    const char bad_chars[] = "+/= .\t\n\"%~!:@";
    size_t i, pos;

    ck_assert_uint_eq(strlen(good), MCP_ID_SESSION_LEN);
    ck_assert(mcp_id_session_is_wellformed(good));
    ck_assert(!mcp_id_session_is_wellformed(NULL));
    ck_assert(!mcp_id_session_is_wellformed(""));
    ck_assert(!mcp_id_session_is_wellformed("ABCDEFGHIJKLMNOPQRSTUVWXYZab-_0"));   /* 31 */
    ck_assert(!mcp_id_session_is_wellformed("ABCDEFGHIJKLMNOPQRSTUVWXYZab-_090")); /* 33 */
    ck_assert(!mcp_id_session_is_wellformed("ABCDEFGHIJKLMNOPQRSTUVWXYZab-_09\n"));
    for (pos = 0; pos < MCP_ID_SESSION_LEN; pos++) {
        for (i = 0; i < sizeof(bad_chars) - 1; i++) {
            strcpy(buf, good);
            buf[pos] = bad_chars[i];
            ck_assert_msg(!mcp_id_session_is_wellformed(buf), "accepted %s", buf);
        }
        strcpy(buf, good);
        buf[pos] = (char)0xc3;            /* non-ASCII byte */
        ck_assert(!mcp_id_session_is_wellformed(buf));
    }
}
END_TEST

/* ---- event ids --------------------------------------------------------------------------- */

START_TEST(test_event_format)
{
    ck_assert_str_eq(mcp_id_event_format(pool, 1, 0), "1-0");
    ck_assert_str_eq(mcp_id_event_format(pool, 42, 7), "42-7");
    ck_assert_str_eq(mcp_id_event_format(pool, 10, 100), "10-100");
    ck_assert_str_eq(mcp_id_event_format(pool, APR_INT64_MAX, APR_INT64_MAX),
                     "9223372036854775807-9223372036854775807");
    ck_assert_ptr_null(mcp_id_event_format(pool, 0, 0));
    ck_assert_ptr_null(mcp_id_event_format(pool, -1, 5));
    ck_assert_ptr_null(mcp_id_event_format(pool, 1, -1));
    ck_assert_ptr_null(mcp_id_event_format(pool, APR_INT64_MIN, 0));
}
END_TEST

START_TEST(test_event_parse_accepts)
{
    static const struct { const char *s; apr_int64_t a, b; } ok[] = {
        { "1-0", 1, 0 },
        { "1-1", 1, 1 },
        { "7-42", 7, 42 },
        { "10-0", 10, 0 },
        { "123456789-987654321", 123456789, 987654321 },
        { "9223372036854775807-0", APR_INT64_MAX, 0 },
        { "1-9223372036854775807", 1, APR_INT64_MAX },
        { "9223372036854775807-9223372036854775807", APR_INT64_MAX, APR_INT64_MAX },
    };
    size_t i;

    for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        apr_int64_t a = -99, b = -99;
        ck_assert_msg(mcp_id_event_parse(ok[i].s, &a, &b) == 0, "rejected %s", ok[i].s);
        ck_assert(a == ok[i].a);
        ck_assert(b == ok[i].b);
    }
    /* NULL outputs are allowed */
    ck_assert_int_eq(mcp_id_event_parse("3-4", NULL, NULL), 0);
}
END_TEST

START_TEST(test_event_parse_rejects)
{
    static const char *const bad[] = {
        "", "-", "1-", "-1", "01-2", "1-02", "+1-2", "1-+2", "1-2x", " 1-2", "1-2 ", "1 -2",
        "1- 2", "0-1", "0-0", "00-1", "1-00", "-1-2", "1--2", "1-2-3", "1", "12", "a-1", "1-a",
        "1_2", "1.0-2", "0x1-2", "1-2\n", "\t1-2", "1-\xd9\xa3",
        /* int64 overflow in either part */
        "9223372036854775808-1", "1-9223372036854775808", "99999999999999999999-1",
        "1-99999999999999999999", "18446744073709551617-1", "1-18446744073709551616",
        "9223372036854775807-92233720368547758070",
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        apr_int64_t a = -99, b = -98;
        ck_assert_msg(mcp_id_event_parse(bad[i], &a, &b) == -1, "accepted \"%s\"", bad[i]);
        ck_assert_msg(a == -99 && b == -98, "outputs touched on \"%s\"", bad[i]);
    }
    ck_assert_int_eq(mcp_id_event_parse(NULL, NULL, NULL), -1);
}
END_TEST

START_TEST(test_event_roundtrip)
{
    static const apr_int64_t streams[] = { 1, 2, 9, 10, 11, 99, 100, 12345,
                                           APR_INT64_MAX / 10, APR_INT64_MAX - 1, APR_INT64_MAX };
    static const apr_int64_t seqs[] = { 0, 1, 9, 10, 100, 1000000007,
                                        APR_INT64_MAX / 10 + 1, APR_INT64_MAX };
    size_t i, j;

    for (i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        for (j = 0; j < sizeof(seqs) / sizeof(seqs[0]); j++) {
            apr_int64_t a = 0, b = 0;
            const char *s = mcp_id_event_format(pool, streams[i], seqs[j]);
            ck_assert_ptr_nonnull(s);
            ck_assert_int_eq(mcp_id_event_parse(s, &a, &b), 0);
            ck_assert(a == streams[i]);
            ck_assert(b == seqs[j]);
        }
    }
}
END_TEST

/* ---- log tags ---------------------------------------------------------------------------- */

START_TEST(test_tag_is_md5_prefix)
{
    /* MD5("abc") = 90015098... (RFC 1321); PostgreSQL: SELECT left(md5(repeat('A', 32)), 8) */
    ck_assert_str_eq(mcp_id_tag(pool, "abc"), "90015098");
    ck_assert_str_eq(mcp_id_tag(pool, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), "5216ddcc");
    ck_assert_str_eq(mcp_id_tag(pool, NULL), "-");
}
END_TEST

START_TEST(test_tag_hides_the_id)
{
    unsigned char random[MCP_ID_SESSION_RANDOM_BYTES];
    const char *id, *tag;
    int i;

    for (i = 0; i < (int)sizeof(random); i++) {
        random[i] = (unsigned char)(i * 37 + 11);
    }
    id = mcp_id_session_encode(pool, random, sizeof(random));
    tag = mcp_id_tag(pool, id);
    ck_assert_uint_eq(strlen(tag), MCP_ID_TAG_LEN);
    ck_assert(strspn(tag, "0123456789abcdef") == MCP_ID_TAG_LEN);
    ck_assert_ptr_null(strstr(id, tag));
    /* deterministic, and different ids get different tags */
    ck_assert_str_eq(tag, mcp_id_tag(pool, id));
    random[0] ^= 1;
    ck_assert_str_ne(tag, mcp_id_tag(pool, mcp_id_session_encode(pool, random, sizeof(random))));
}
END_TEST

static Suite *id_suite(void)
{
    Suite *s = suite_create("mcp_id");
    TCase *tc = tcase_create("session");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_session_encode_rfc4648_vectors);
    tcase_add_test(tc, test_session_encode_url_alphabet);
    tcase_add_test(tc, test_session_encode_roundtrip_all_lengths);
    tcase_add_test(tc, test_session_id_length_and_wellformed);
    tcase_add_test(tc, test_session_wellformed_rejects);
    suite_add_tcase(s, tc);

    tc = tcase_create("event");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_event_format);
    tcase_add_test(tc, test_event_parse_accepts);
    tcase_add_test(tc, test_event_parse_rejects);
    tcase_add_test(tc, test_event_roundtrip);
    suite_add_tcase(s, tc);

    tc = tcase_create("tag");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_tag_is_md5_prefix);
    tcase_add_test(tc, test_tag_hides_the_id);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(id_suite());
}
