/* Unit tests for mcp_origin: host normalisation, Origin parsing, loopback detection, and the
 * Origin and Host rules against DNS-rebinding look-alikes. */

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_tables.h>

#include "mcp_origin.h"

#include "unit_main.h"
#include "unit_pool.h"

/* An array of const char * from an argument list ending with END (a bare NULL may be an int
 * where a variadic function expects a pointer). */
#define END ((const char *)NULL)

static apr_array_header_t *list(const char *first, ...)
{
    apr_array_header_t *a = apr_array_make(pool, 4, sizeof(const char *));
    const char *s;
    va_list ap;

    va_start(ap, first);
    for (s = first; s; s = va_arg(ap, const char *))
        APR_ARRAY_PUSH(a, const char *) = s;
    va_end(ap);
    return a;
}

/* ---- mcp_origin_host_of ------------------------------------------------------------------ */

static void host_is(const char *in, const char *want)
{
    const char *got = mcp_origin_host_of(pool, in);
    if (want) {
        ck_assert_msg(got != NULL, "host_of(\"%s\") = NULL, want \"%s\"", in, want);
        ck_assert_msg(!strcmp(got, want), "host_of(\"%s\") = \"%s\", want \"%s\"", in, got, want);
    }
    else {
        ck_assert_msg(got == NULL, "host_of(\"%s\") = \"%s\", want NULL", in ? in : "(null)",
                      got);
    }
}

START_TEST(test_host_of_valid)
{
    host_is("example.com", "example.com");
    host_is("Example.COM:8080", "example.com");
    host_is("example.com:80", "example.com");
    host_is("example.com:0", "example.com");
    host_is("example.com:65535", "example.com");
    host_is("example.com:00080", "example.com");
    host_is("a_b-c.example", "a_b-c.example");
    host_is("localhost", "localhost");
    host_is("LOCALHOST:3000", "localhost");
    host_is("127.0.0.1", "127.0.0.1");
    host_is("127.0.0.1:8080", "127.0.0.1");
    host_is("x", "x");
    /* the trailing dot of a fully qualified name is dropped: same DNS name, same server */
    host_is("example.com.", "example.com");
    host_is("Example.Com.:443", "example.com");
    host_is("127.0.0.1.", "127.0.0.1");
    /* IPv6: brackets removed, canonical text */
    host_is("[::1]", "::1");
    host_is("[::1]:80", "::1");
    host_is("[0:0:0:0:0:0:0:1]:8080", "::1");
    host_is("[2001:DB8::1]:443", "2001:db8::1");
    host_is("[2001:0db8:0000:0000:0000:0000:0000:0001]", "2001:db8::1");
    host_is("[::ffff:127.0.0.1]", "::ffff:127.0.0.1");
    host_is("[::FFFF:7F00:1]", "::ffff:127.0.0.1");
}
END_TEST

START_TEST(test_host_of_malformed)
{
    static const char *const bad[] = {
        "", ":80", ":", ".", "..", "example.com:", "example.com:65536", "example.com:99999",
        "example.com:123456", "example.com:8o", "example.com:+80", "example.com:-1",
        "example.com: 80", "example.com:80:80", "example.com:80 ", "example.com::80",
        "::1", "::1:80", "2001:db8::1", "[::1", "::1]", "[::1]x", "[::1]:", "[::1]:x",
        "[::1]80", "[]", "[]:80", "[::1%eth0]", "[fe80::1%25eth0]", "[v1.abc]",
        "[127.0.0.1]", "[::1]]", "[[::1]]", "[:::1]", "[::1] ", "[ ::1]", "[::g]",
        "exa mple.com", " example.com", "example.com ", "example.com\t", "exa\x01mple.com",
        "example.com\r\n", "example.com\n", "exa\x7fmple.com", "user@example.com",
        "user:pw@example.com", "example.com/", "example.com/path", "example.com?q",
        "example.com#f", "example..com", ".example.com", "example.com..", "..example.com",
        "ex\xc3\xa4mple.com", "ex%41mple.com", "*.example.com", "*", "exa*mple.com",
        "example.com\\", "exam,ple.com", "example.com;x", "\"example.com\"",
    };
    size_t i;

    host_is(NULL, NULL);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        host_is(bad[i], NULL);
}
END_TEST

/* ---- mcp_origin_parse --------------------------------------------------------------------- */

static void origin_is(const char *in, const char *scheme, const char *host, int port)
{
    const char *s = "unset", *h = "unset";
    int pt = -99;
    int rc = mcp_origin_parse(pool, in, &s, &h, &pt);

    ck_assert_msg(rc == 0, "parse(\"%s\") failed", in);
    ck_assert_msg(!strcmp(s, scheme), "parse(\"%s\") scheme \"%s\"", in, s);
    if (host)
        ck_assert_msg(h && !strcmp(h, host), "parse(\"%s\") host \"%s\"", in, h ? h : "(null)");
    else
        ck_assert_msg(h == NULL, "parse(\"%s\") host \"%s\", want NULL", in, h);
    ck_assert_msg(pt == port, "parse(\"%s\") port %d, want %d", in, pt, port);
}

START_TEST(test_parse_valid)
{
    origin_is("https://app.example.com", "https", "app.example.com", -1);
    origin_is("HTTPS://App.Example.COM:8443", "https", "app.example.com", 8443);
    origin_is("https://app.example.com:443", "https", "app.example.com", 443);
    origin_is("http://localhost:6274", "http", "localhost", 6274);
    origin_is("http://127.0.0.1:3000", "http", "127.0.0.1", 3000);
    origin_is("http://[::1]:3000", "http", "::1", 3000);
    origin_is("http://[::1]", "http", "::1", -1);
    origin_is("https://[2001:DB8::7]:8443", "https", "2001:db8::7", 8443);
    origin_is("http://example.com.", "http", "example.com", -1);
    origin_is("chrome-extension://abcdefghijklmnop", "chrome-extension", "abcdefghijklmnop", -1);
    origin_is("moz-extension://0a1b2c3d-4e5f", "moz-extension", "0a1b2c3d-4e5f", -1);
    origin_is("a+b.c-d://x", "a+b.c-d", "x", -1);
    /* the opaque origin */
    origin_is("null", "null", NULL, -1);
}
END_TEST

START_TEST(test_parse_outputs_optional)
{
    const char *h = NULL;

    ck_assert_int_eq(mcp_origin_parse(pool, "https://a.example", NULL, NULL, NULL), 0);
    ck_assert_int_eq(mcp_origin_parse(pool, "null", NULL, NULL, NULL), 0);
    ck_assert_int_eq(mcp_origin_parse(pool, "https://a.example:1", NULL, &h, NULL), 0);
    ck_assert_str_eq(h, "a.example");
}
END_TEST

START_TEST(test_parse_malformed)
{
    static const char *const bad[] = {
        "", "Null", "NULL", "null ", " null", "nul", "https://", "https://:443",
        "https://app.example.com/", "https://app.example.com/path", "https://app.example.com:443/",
        "https://user@app.example.com", "https://user:pw@app.example.com",
        "https://app.example.com?x", "https://app.example.com#f", "https://app.example.com:",
        "https://app.example.com:99999", "https://app.example.com:x", "app.example.com",
        "//app.example.com", "://app.example.com", "https:app.example.com",
        "https:/app.example.com", "https:///app.example.com", "1http://x", "-http://x",
        ".http://x", "ht_tp://x", "ht tp://x", "http://::1", "http://::1:80", "http://[::1",
        "http://[::1]x", " https://a.example", "https://a.example ", "https://a b.example",
        "https://evil.example\r\n", "https://a.example\n", "https://exa..mple", "https://*.example",
        "https://ex\xc3\xa4mple.com", "https://%65vil.example", "http://[fe80::1%25eth0]",
        "https://a.example, https://b.example", "https://a.example https://b.example",
    };
    size_t i;

    ck_assert_int_eq(mcp_origin_parse(pool, NULL, NULL, NULL, NULL), -1);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *s = "unset", *h = "unset";
        int pt = -99;
        ck_assert_msg(mcp_origin_parse(pool, bad[i], &s, &h, &pt) == -1, "parse(\"%s\") ok",
                      bad[i]);
        /* nothing is set on failure */
        ck_assert_str_eq(s, "unset");
        ck_assert_str_eq(h, "unset");
        ck_assert_int_eq(pt, -99);
    }
}
END_TEST

/* ---- mcp_origin_is_loopback --------------------------------------------------------------- */

START_TEST(test_loopback)
{
    static const char *const yes[] = {
        "localhost", "LOCALHOST", "LocalHost", "localhost.", "foo.localhost", "a.b.localhost",
        "FOO.LOCALHOST.", "127.0.0.1", "127.0.0.1.", "127.1.2.3", "127.255.255.255",
        "127.0.0.0", "::1", "[::1]", "0:0:0:0:0:0:0:1", "0000::0001", "::ffff:127.0.0.1",
        "::FFFF:7f00:1", "::ffff:127.9.9.9",
    };
    static const char *const no[] = {
        "", "localhost.evil.com", "localhost.evil.com.", "localhostx", "xlocalhost",
        "evil-localhost", "evillocalhost", ".localhost", "localhost..", "..localhost",
        "foo..localhost", "evil.com/.localhost", "evil.com@localhost", "local host",
        "localhost ", " localhost", "127.0.0.1.evil.com", "127.0.0.1evil", "127.0.0.1:80",
        "128.0.0.1", "126.255.255.255", "0.0.0.0", "10.0.0.1", "169.254.1.1", "127.1",
        "127.0.0", "127.0.0.1.1", "127..0.1", "0177.0.0.1", "127.0.0.01", "127.00.0.1",
        "127.0.0.256", "1270.0.0.1", "127.0.0.-1", "2130706433", "0x7f.0.0.1", "0x7f000001",
        "::2", "::", "::ffff:10.0.0.1", "::ffff:128.0.0.1", "::127.0.0.1", "[::1", "::1]",
        "::1%lo", "fe80::1", "[[::1]]", "[::1]:80",
    };
    size_t i;

    ck_assert(!mcp_origin_is_loopback(NULL));
    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        ck_assert_msg(mcp_origin_is_loopback(yes[i]), "\"%s\" should be loopback", yes[i]);
    for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        ck_assert_msg(!mcp_origin_is_loopback(no[i]), "\"%s\" should not be loopback", no[i]);
}
END_TEST

/* ---- mcp_origin_allowed ------------------------------------------------------------------- */

static void origin_ok(const char *origin, const char *rhost, const apr_array_header_t *rules,
                      int want)
{
    ck_assert_msg(mcp_origin_allowed(pool, origin, rhost, rules) == want,
                  "allowed(\"%s\", host \"%s\") != %d", origin ? origin : "(null)",
                  rhost ? rhost : "(null)", want);
}

START_TEST(test_allowed_self)
{
    apr_array_header_t *r = list("self", END);

    origin_ok("https://example.com", "example.com", r, 1);
    origin_ok("https://example.com", "example.com:443", r, 1);
    origin_ok("http://example.com:8080", "EXAMPLE.com", r, 1);   /* any scheme and port */
    origin_ok("https://Example.COM", "example.com:80", r, 1);
    origin_ok("https://example.com.", "example.com", r, 1);      /* trailing dots dropped */
    origin_ok("https://example.com", "example.com.:443", r, 1);
    origin_ok("https://evil.example.com", "example.com", r, 0);
    origin_ok("https://example.com.evil.com", "example.com", r, 0);
    origin_ok("https://example.co", "example.com", r, 0);
    origin_ok("https://xexample.com", "example.com", r, 0);
    origin_ok("https://example.com", "evil.example.com", r, 0);
    /* IPv6: the Host header form, r->hostname's bare form, non-canonical text */
    origin_ok("http://[::1]:8080", "[::1]:8080", r, 1);
    origin_ok("http://[::1]:8080", "::1", r, 1);
    origin_ok("http://[0:0::1]:8080", "[::1]", r, 1);
    origin_ok("http://[::1]:8080", "[0000::1]:9", r, 1);
    origin_ok("http://[::2]:8080", "[::1]:8080", r, 0);
    /* no usable request host: self matches nothing */
    origin_ok("https://example.com", NULL, r, 0);
    origin_ok("https://example.com", "", r, 0);
    origin_ok("https://example.com", "example.com:bad", r, 0);
    origin_ok("https://example.com", "example.com evil", r, 0);
    /* keyword case does not matter */
    origin_ok("https://example.com", "example.com", list("SELF", END), 1);
}
END_TEST

START_TEST(test_allowed_localhost)
{
    apr_array_header_t *r = list("localhost", END);

    origin_ok("http://localhost:6274", "mcp.example.com", r, 1);
    origin_ok("http://localhost", NULL, r, 1);
    origin_ok("http://LOCALHOST.:3000", NULL, r, 1);
    origin_ok("http://127.0.0.1:3000", NULL, r, 1);
    origin_ok("http://127.8.9.10", NULL, r, 1);
    origin_ok("http://[::1]:3000", NULL, r, 1);
    origin_ok("https://[::ffff:7f00:1]", NULL, r, 1);
    origin_ok("http://app.localhost:5173", NULL, r, 1);
    origin_ok("http://localhost.evil.com", NULL, r, 0);
    origin_ok("http://127.0.0.1.evil.com", NULL, r, 0);
    origin_ok("http://evil.example.com", NULL, r, 0);
    origin_ok("http://0.0.0.0:3000", NULL, r, 0);
    origin_ok("http://[::2]", NULL, r, 0);
    origin_ok("http://localhost:3000", NULL, list("LocalHost", END), 1);
}
END_TEST

START_TEST(test_allowed_exact)
{
    apr_array_header_t *r = list("https://app.example.com", "http://dev.example.com:80",
                                 "HTTPS://Admin.Example.com:8443", "http://[::1]:3000",
                                 "http://example.org.", END);

    origin_ok("https://app.example.com", NULL, r, 1);
    origin_ok("https://APP.Example.com", NULL, r, 1);
    origin_ok("HTTPS://app.example.com", NULL, r, 1);
    origin_ok("https://app.example.com:443", NULL, r, 1);      /* default port == absent */
    origin_ok("https://app.example.com.", NULL, r, 1);
    origin_ok("http://app.example.com", NULL, r, 0);           /* scheme differs */
    origin_ok("https://app.example.com:80", NULL, r, 0);
    origin_ok("https://app.example.com:8443", NULL, r, 0);
    origin_ok("wss://app.example.com", NULL, r, 0);
    origin_ok("https://evil.example.com", NULL, r, 0);
    origin_ok("https://app.example.com.evil.com", NULL, r, 0);
    origin_ok("https://xapp.example.com", NULL, r, 0);
    origin_ok("https://sub.app.example.com", NULL, r, 0);
    origin_ok("https://app.example.co", NULL, r, 0);

    origin_ok("http://dev.example.com", NULL, r, 1);           /* rule's :80 == absent */
    origin_ok("http://dev.example.com:80", NULL, r, 1);
    origin_ok("http://dev.example.com:8080", NULL, r, 0);
    origin_ok("https://dev.example.com", NULL, r, 0);

    origin_ok("https://admin.example.com:8443", NULL, r, 1);
    origin_ok("https://admin.example.com", NULL, r, 0);

    origin_ok("http://[::1]:3000", NULL, r, 1);
    origin_ok("http://[0:0:0:0:0:0:0:1]:3000", NULL, r, 1);
    origin_ok("http://[::1]:3001", NULL, r, 0);
    origin_ok("http://[::1]", NULL, r, 0);

    origin_ok("http://example.org", NULL, r, 1);
    origin_ok("http://example.org:80", NULL, r, 1);

    /* schemes without a known default port: absent equals only absent */
    r = list("chrome-extension://abcdef", END);
    origin_ok("chrome-extension://abcdef", NULL, r, 1);
    origin_ok("chrome-extension://abcdef:80", NULL, r, 0);
    origin_ok("chrome-extension://abcdeg", NULL, r, 0);

    /* ws/wss have http/https defaults */
    origin_ok("wss://x.example:443", NULL, list("wss://x.example", END), 1);
    origin_ok("ws://x.example", NULL, list("ws://x.example:80", END), 1);
}
END_TEST

START_TEST(test_allowed_bad_rules_never_match)
{
    /* a path, "null", garbage and a bare host are not origins */
    apr_array_header_t *r = list("https://app.example.com/", "null", "garbage", "app.example.com",
                                 "https://", "", "self ", END);

    origin_ok("https://app.example.com", "other.example", r, 0);
    origin_ok("null", "other.example", r, 0);
    origin_ok("https://garbage", "other.example", r, 0);
    /* NULL entries are skipped */
    r = list("self", END);
    APR_ARRAY_PUSH(r, const char *) = NULL;
    APR_ARRAY_PUSH(r, const char *) = "localhost";
    origin_ok("http://localhost:1", "example.com", r, 1);
}
END_TEST

START_TEST(test_allowed_null_and_garbage)
{
    apr_array_header_t *r = list("self", "localhost", "https://app.example.com", END);
    apr_array_header_t *star = list("self", "*", END);
    static const char *const bad[] = {
        "null", "", "garbage", "https://", "https://app.example.com/", "https://app.example.com ",
        "https://user@app.example.com", "http://localhost:3000/x", "https://app.example.com\r\n",
        "https://app.example.com, https://evil.example",
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        origin_ok(bad[i], "app.example.com", r, 0);
        origin_ok(bad[i], "app.example.com", star, 1);   /* "*" allows any present value */
    }
    origin_ok("https://evil.example.com", "example.com", star, 1);
}
END_TEST

START_TEST(test_allowed_absent_and_empty)
{
    apr_array_header_t *empty = apr_array_make(pool, 1, sizeof(const char *));

    /* absent Origin is the caller's decision: the function never says yes to it */
    origin_ok(NULL, "example.com", list("*", END), 0);
    origin_ok(NULL, "example.com", list("self", END), 0);
    /* no rules: nothing is allowed */
    origin_ok("https://example.com", "example.com", empty, 0);
    ck_assert_int_eq(mcp_origin_allowed(pool, "https://example.com", "example.com", NULL), 0);
}
END_TEST

START_TEST(test_allowed_combined)
{
    /* a typical configuration: the server's own pages, local tools, one external app */
    apr_array_header_t *r = list("self", "localhost", "https://inspector.example.net", END);
    const char *rh = "mcp.example.com:443";

    origin_ok("https://mcp.example.com", rh, r, 1);
    origin_ok("http://localhost:6274", rh, r, 1);
    origin_ok("https://inspector.example.net", rh, r, 1);
    origin_ok("https://evil.example.com", rh, r, 0);
    origin_ok("https://mcp.example.com.evil.com", rh, r, 0);
    origin_ok("https://localhost.evil.com", rh, r, 0);
    origin_ok("http://127.0.0.1.evil.com", rh, r, 0);
    origin_ok("https://inspector.example.net.evil.com", rh, r, 0);
    origin_ok("null", rh, r, 0);
}
END_TEST

/* ---- mcp_origin_host_allowed -------------------------------------------------------------- */

static void host_ok(const char *host, const apr_array_header_t *names, int want)
{
    ck_assert_msg(mcp_origin_host_allowed(pool, host, names) == want, "host_allowed(\"%s\") != %d",
                  host ? host : "(null)", want);
}

START_TEST(test_host_allowed_names)
{
    apr_array_header_t *n = list("example.com", "localhost", END);

    host_ok("example.com", n, 1);
    host_ok("EXAMPLE.COM:8080", n, 1);                 /* port ignored, case-insensitive */
    host_ok("example.com.", n, 1);
    host_ok("example.com.:443", n, 1);
    host_ok("localhost:3000", n, 1);
    host_ok("127.0.0.1:3000", n, 1);
    host_ok("[::1]:3000", n, 1);
    host_ok("app.localhost", n, 1);
    host_ok("evil.example.com", n, 0);                 /* no implicit subdomains */
    host_ok("example.com.evil.com", n, 0);
    host_ok("xexample.com", n, 0);
    host_ok("localhost.evil.com", n, 0);
    host_ok("127.0.0.1.evil.com", n, 0);
    host_ok("evil.com", n, 0);
    host_ok("192.0.2.1", n, 0);
    /* malformed Host: never */
    host_ok(NULL, n, 0);
    host_ok("", n, 0);
    host_ok("example.com:bad", n, 0);
    host_ok("example.com:", n, 0);
    host_ok("exa mple.com", n, 0);
    host_ok("example.com ", n, 0);
    host_ok("user@example.com", n, 0);
    host_ok("example.com/x", n, 0);
    host_ok("[::1", n, 0);
    host_ok("::1", n, 0);
}
END_TEST

START_TEST(test_host_allowed_entry_forms)
{
    /* entries are normalised like the Host; ports in them are ignored */
    apr_array_header_t *n = list("Example.COM.", "api.example.net:8443", "192.0.2.1", "::1",
                                 "[2001:db8::5]:443", END);

    host_ok("example.com", n, 1);
    host_ok("api.example.net", n, 1);
    host_ok("api.example.net:80", n, 1);
    host_ok("192.0.2.1:8080", n, 1);
    host_ok("[::1]", n, 1);
    host_ok("[0:0::1]:9", n, 1);
    host_ok("[2001:DB8::5]", n, 1);
    host_ok("[2001:db8::6]", n, 0);
    host_ok("localhost", n, 0);                        /* "::1" is an address, not the token */
    host_ok("127.0.0.1", n, 0);

    /* malformed entries never match, whatever the Host */
    n = list("bad name", "*example.com", "exa*mple.com", "", "[::1", "*.", END);
    host_ok("bad name", n, 0);
    host_ok("example.com", n, 0);
    host_ok("a.example.com", n, 0);
    host_ok("localhost", n, 0);

    /* NULL entries are skipped */
    n = list("a.example", END);
    APR_ARRAY_PUSH(n, const char *) = NULL;
    APR_ARRAY_PUSH(n, const char *) = "b.example";
    host_ok("b.example", n, 1);
}
END_TEST

START_TEST(test_host_allowed_wildcard)
{
    apr_array_header_t *n = list("*.example.com", END);

    host_ok("a.example.com", n, 1);
    host_ok("a.b.example.com:8443", n, 1);
    host_ok("A.EXAMPLE.COM.", n, 1);
    host_ok("example.com", n, 0);                      /* the apex is not a subdomain */
    host_ok("badexample.com", n, 0);
    host_ok("a.badexample.com", n, 0);
    host_ok("a.example.com.evil.com", n, 0);
    host_ok("example.com.evil.com", n, 0);
    host_ok(".example.com", n, 0);
    host_ok("a..example.com", n, 0);

    n = list("*.Example.Com.", "example.com", END);
    host_ok("x.example.com", n, 1);
    host_ok("example.com", n, 1);

    n = list("*.localhost", END);
    host_ok("app.localhost", n, 1);
    host_ok("localhost", n, 0);
}
END_TEST

START_TEST(test_host_allowed_tokens)
{
    apr_array_header_t *any = list("*", END);
    apr_array_header_t *lo = list("LOCALHOST", END);
    apr_array_header_t *empty = apr_array_make(pool, 1, sizeof(const char *));

    host_ok("anything.example", any, 1);
    host_ok("[2001:db8::1]:80", any, 1);
    host_ok("bad host", any, 0);                       /* "*" does not excuse malformed */
    host_ok("", any, 0);
    host_ok(NULL, any, 0);

    host_ok("localhost", lo, 1);
    host_ok("127.0.0.1", lo, 1);
    host_ok("[::1]", lo, 1);
    host_ok("0.0.0.0", lo, 0);
    host_ok("example.com", lo, 0);

    host_ok("example.com", empty, 0);
    ck_assert_int_eq(mcp_origin_host_allowed(pool, "example.com", NULL), 0);
}
END_TEST

/* ---- properties over random input --------------------------------------------------------- */

static unsigned long rng_state = 12345;

static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 6364136223846793005UL + 1442695040888963407UL;
    return (unsigned)((rng_state >> 33) % n);
}

START_TEST(test_random_properties)
{
    /* Inputs built from the characters that matter, so that valid values come up often. */
    static const char alphabet[] = "aZ09-._:[]@/ %\t.:1f";
    static const char *const pieces[] = {
        "http://", "https://", "[::1]", "[", "]", ":", "80", "65535", "65536", "localhost",
        "127.0.0.1", "example.com", ".", "..", "null", "::", "ffff", "X", "",
    };
    int iter;

    for (iter = 0; iter < 20000; iter++) {
        char buf[64];
        size_t len = 0;
        int k, parts = 1 + (int)rnd(4);
        const char *h, *scheme, *host;
        int port;

        for (k = 0; k < parts; k++) {
            const char *piece;
            char one[2];
            if (rnd(2)) {
                piece = pieces[rnd(sizeof(pieces) / sizeof(pieces[0]))];
            }
            else {
                one[0] = alphabet[rnd(sizeof(alphabet) - 1)];
                one[1] = '\0';
                piece = one;
            }
            if (len + strlen(piece) >= sizeof(buf))
                break;
            memcpy(buf + len, piece, strlen(piece));
            len += strlen(piece);
        }
        buf[len] = '\0';

        /* a normalised host is lower-case, and normalising it again changes nothing */
        h = mcp_origin_host_of(pool, buf);
        if (h) {
            const char *again;
            size_t i;
            ck_assert(*h);
            for (i = 0; h[i]; i++)
                ck_assert_msg(!(h[i] >= 'A' && h[i] <= 'Z'), "\"%s\" -> \"%s\"", buf, h);
            again = mcp_origin_host_of(pool, strchr(h, ':') ? apr_psprintf(pool, "[%s]", h) : h);
            ck_assert_msg(again && !strcmp(again, h), "\"%s\" -> \"%s\" not stable", buf, h);
            ck_assert(mcp_origin_host_allowed(pool, buf, list(h, END)));
            ck_assert(mcp_origin_host_allowed(pool, buf, list("*", END)));
        }
        else {
            ck_assert(!mcp_origin_host_allowed(pool, buf, list("*", END)));
        }

        /* a parsed origin, serialised again, parses to the same thing and is allowed by an
         * exact rule made of itself */
        if (mcp_origin_parse(pool, buf, &scheme, &host, &port) == 0 && host) {
            const char *ser = apr_psprintf(pool, "%s://%s%s%s", scheme,
                                           strchr(host, ':') ? "[" : "", host,
                                           strchr(host, ':') ? "]" : "");
            const char *s2, *h2;
            int p2;
            if (port >= 0)
                ser = apr_psprintf(pool, "%s:%d", ser, port);
            ck_assert_int_eq(mcp_origin_parse(pool, ser, &s2, &h2, &p2), 0);
            ck_assert_str_eq(s2, scheme);
            ck_assert_str_eq(h2, host);
            ck_assert_int_eq(p2, port);
            ck_assert_msg(mcp_origin_allowed(pool, buf, NULL, list(ser, END)), "\"%s\"", buf);
            /* and by "self" when the request came to the same authority */
            ck_assert(mcp_origin_allowed(pool, buf, ser + strlen(scheme) + 3, list("self", END)));
        }
    }
}
END_TEST

static Suite *origin_suite(void)
{
    Suite *s = suite_create("mcp_origin");
    TCase *tc;

    tc = tcase_create("host_of");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_host_of_valid);
    tcase_add_test(tc, test_host_of_malformed);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_parse_valid);
    tcase_add_test(tc, test_parse_outputs_optional);
    tcase_add_test(tc, test_parse_malformed);
    tcase_add_test(tc, test_loopback);
    suite_add_tcase(s, tc);

    tc = tcase_create("origin_rule");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_allowed_self);
    tcase_add_test(tc, test_allowed_localhost);
    tcase_add_test(tc, test_allowed_exact);
    tcase_add_test(tc, test_allowed_bad_rules_never_match);
    tcase_add_test(tc, test_allowed_null_and_garbage);
    tcase_add_test(tc, test_allowed_absent_and_empty);
    tcase_add_test(tc, test_allowed_combined);
    suite_add_tcase(s, tc);

    tc = tcase_create("host_rule");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_host_allowed_names);
    tcase_add_test(tc, test_host_allowed_entry_forms);
    tcase_add_test(tc, test_host_allowed_wildcard);
    tcase_add_test(tc, test_host_allowed_tokens);
    suite_add_tcase(s, tc);

    tc = tcase_create("random");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_random_properties);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(origin_suite());
}
