/* libFuzzer harness for mcp_origin: Host and Origin parsing and the DNS-rebinding rules.
 *
 * The input is split at '\n': line 1 is an Origin header value, line 2 a Host header value,
 * the following lines are rules (MCPAllowedOrigins tokens and MCPAllowedHosts entries at
 * once). Checked, besides the absence of crashes:
 *  1. a normalised host is non-empty, lower-case, has no trailing dot, and normalising it again
 *     (bracketed when IPv6) changes nothing; a Host is allowed by "*" exactly when it parses,
 *     and by a list made of its own normalised host;
 *  2. a parsed Origin, serialised again, parses to the same scheme, host and port, and is
 *     allowed by an exact rule made of itself and by "self" when the request came to its host;
 *  3. "*" allows every Origin; no Origin header (NULL) is never "allowed" by the rule;
 *  4. loopback detection does not depend on brackets or on case.
 */

#include "fuzz.h"

#include <apr_strings.h>
#include <apr_tables.h>

#include "mcp_origin.h"

#define MAX_FIELDS 8

static apr_array_header_t *list1(apr_pool_t *p, const char *s)
{
    apr_array_header_t *a = apr_array_make(p, 1, sizeof(const char *));
    APR_ARRAY_PUSH(a, const char *) = s;
    return a;
}

static const char *bracketed(apr_pool_t *p, const char *host)
{
    return strchr(host, ':') ? apr_psprintf(p, "[%s]", host) : host;
}

static void check_host(apr_pool_t *p, const char *in)
{
    const char *h = mcp_origin_host_of(p, in), *again;
    size_t i, n;

    if (!h) {
        FUZZ_CHECK(!mcp_origin_host_allowed(p, in, list1(p, "*")));
        return;
    }
    n = strlen(h);
    FUZZ_CHECK(n > 0 && h[n - 1] != '.');
    for (i = 0; i < n; i++)
        FUZZ_CHECK(!(h[i] >= 'A' && h[i] <= 'Z'));
    again = mcp_origin_host_of(p, bracketed(p, h));
    FUZZ_CHECK(again && !strcmp(again, h));
    FUZZ_CHECK(mcp_origin_host_allowed(p, in, list1(p, "*")));
    FUZZ_CHECK(mcp_origin_host_allowed(p, in, list1(p, h)));
    FUZZ_CHECK(mcp_origin_is_loopback(h) == mcp_origin_is_loopback(bracketed(p, h)));
    FUZZ_CHECK(mcp_origin_host_allowed(p, in, list1(p, "localhost"))
               == mcp_origin_is_loopback(h));
    {
        char *up = apr_pstrdup(p, h);
        for (i = 0; i < n; i++)
            if (up[i] >= 'a' && up[i] <= 'z')
                up[i] = (char)(up[i] - 'a' + 'A');
        FUZZ_CHECK(mcp_origin_is_loopback(up) == mcp_origin_is_loopback(h));
    }
}

static void check_origin(apr_pool_t *p, const char *in)
{
    const char *scheme, *host, *s2, *h2, *ser;
    int port, p2;

    FUZZ_CHECK(mcp_origin_allowed(p, in, NULL, list1(p, "*")));
    if (mcp_origin_parse(p, in, &scheme, &host, &port) != 0) {
        FUZZ_CHECK(!mcp_origin_allowed(p, in, NULL, list1(p, "localhost")));
        FUZZ_CHECK(!mcp_origin_allowed(p, in, "example.com", list1(p, "self")));
        return;
    }
    FUZZ_CHECK(scheme && port >= -1 && port <= 65535);
    if (!host) {
        FUZZ_CHECK(!strcmp(scheme, "null") && port == -1);
        FUZZ_CHECK(!mcp_origin_allowed(p, in, NULL, list1(p, in)));
        return;
    }
    ser = apr_psprintf(p, "%s://%s", scheme, bracketed(p, host));
    if (port >= 0)
        ser = apr_psprintf(p, "%s:%d", ser, port);
    FUZZ_CHECK(mcp_origin_parse(p, ser, &s2, &h2, &p2) == 0);
    FUZZ_CHECK(!strcmp(s2, scheme) && h2 && !strcmp(h2, host) && p2 == port);
    FUZZ_CHECK(mcp_origin_allowed(p, in, NULL, list1(p, ser)));
    FUZZ_CHECK(mcp_origin_allowed(p, in, ser + strlen(scheme) + 3, list1(p, "self")));
    FUZZ_CHECK(mcp_origin_allowed(p, in, NULL, list1(p, "localhost"))
               == mcp_origin_is_loopback(host));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p;
    char *f[MAX_FIELDS];
    apr_array_header_t *rules;
    int n, i, allowed, host_ok;

    apr_pool_create(&p, fuzz_root());
    n = fuzz_fields(p, data, size, f, MAX_FIELDS);

    check_origin(p, f[0]);
    if (n > 1)
        check_host(p, f[1]);
    else
        check_host(p, f[0]);

    rules = apr_array_make(p, MAX_FIELDS, sizeof(const char *));
    for (i = 2; i < n; i++) {
        APR_ARRAY_PUSH(rules, const char *) = f[i];
        mcp_origin_is_loopback(f[i]);
        mcp_origin_host_of(p, f[i]);
    }
    allowed = mcp_origin_allowed(p, f[0], n > 1 ? f[1] : NULL, rules);
    host_ok = mcp_origin_host_allowed(p, n > 1 ? f[1] : f[0], rules);
    FUZZ_CHECK(allowed == 0 || allowed == 1);
    FUZZ_CHECK(host_ok == 0 || host_ok == 1);
    /* more rules never allow less */
    APR_ARRAY_PUSH(rules, const char *) = "localhost";
    FUZZ_CHECK(mcp_origin_allowed(p, f[0], n > 1 ? f[1] : NULL, rules) >= allowed);
    FUZZ_CHECK(mcp_origin_host_allowed(p, n > 1 ? f[1] : f[0], rules) >= host_ok);
    FUZZ_CHECK(!mcp_origin_allowed(p, NULL, f[0], rules));

    apr_pool_destroy(p);
    return 0;
}
