/* mcp_origin — Origin and Host checks. See mcp_origin.h. */

#include "mcp_origin.h"

#include <apr_strings.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

/* Longest IPv6 text inet_pton can accept ("ffff:...:255.255.255.255") plus NUL. */
#define V6_TEXT_MAX 46

/* ---- helpers ------------------------------------------------------------------------------ */

/* ASCII only: the C library's tolower depends on the locale. */
static char lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || c == '-' || c == '_';
}

/* s[0..n) is a name: labels of name characters separated by single dots, no leading or
 * trailing dot (the caller has removed the one trailing dot allowed). */
static int valid_name(const char *s, apr_size_t n)
{
    apr_size_t i;

    if (n == 0 || s[0] == '.' || s[n - 1] == '.')
        return 0;
    for (i = 0; i < n; i++) {
        if (s[i] == '.') {
            if (s[i - 1] == '.')
                return 0;
        }
        else if (!is_name_char(s[i])) {
            return 0;
        }
    }
    return 1;
}

/* Parses the IPv6 text s[0..n) (no brackets) into addr. Zone ids ("%eth0") are refused by
 * inet_pton, which is what we want: browsers never send them. */
static int parse_v6(const char *s, apr_size_t n, unsigned char addr[16])
{
    char buf[V6_TEXT_MAX];

    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return inet_pton(AF_INET6, buf, addr) == 1;
}

/* Canonical text of the IPv6 address s[0..n), in p; NULL when it is not one. */
static const char *canon_v6(apr_pool_t *p, const char *s, apr_size_t n)
{
    unsigned char addr[16];
    char out[INET6_ADDRSTRLEN];

    if (!parse_v6(s, n, addr) || !inet_ntop(AF_INET6, addr, out, sizeof(out)))
        return NULL;
    return apr_pstrdup(p, out);   /* inet_ntop writes lower-case hex */
}

/* Normalised name from s[0..n) (one trailing dot dropped, lower-cased), in p; NULL when it is
 * not a valid name. */
static const char *canon_name(apr_pool_t *p, const char *s, apr_size_t n)
{
    char *out;
    apr_size_t i;

    if (n > 0 && s[n - 1] == '.')
        n--;
    if (!valid_name(s, n))
        return NULL;
    out = apr_palloc(p, n + 1);
    for (i = 0; i < n; i++)
        out[i] = lower(s[i]);
    out[n] = '\0';
    return out;
}

/* Splits the authority s[0..n) into a normalised host and a port (-1 when absent). Returns 0
 * or -1. */
static int split_authority(apr_pool_t *p, const char *s, apr_size_t n, const char **host,
                           int *port)
{
    const char *h, *rest, *end = s + n;

    if (n == 0)
        return -1;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return -1;
        h = canon_v6(p, s + 1, (apr_size_t)(close - s - 1));
        rest = close + 1;
    }
    else {
        /* A second colon makes the port non-numeric below, which refuses bare IPv6. */
        const char *colon = memchr(s, ':', n);
        rest = colon ? colon : end;
        h = canon_name(p, s, (apr_size_t)(rest - s));
    }
    if (!h)
        return -1;

    *port = -1;
    if (rest < end) {
        long v = 0;
        const char *d;
        if (*rest != ':' || rest + 1 == end || end - (rest + 1) > 5)
            return -1;
        for (d = rest + 1; d < end; d++) {
            if (*d < '0' || *d > '9')
                return -1;
            v = v * 10 + (*d - '0');
        }
        if (v > 65535)
            return -1;
        *port = (int)v;
    }
    *host = h;
    return 0;
}

/* Host of a Host header value, r->hostname or a configured name: like mcp_origin_host_of, but
 * a bare IPv6 address ("::1", which is how some callers hold it) is accepted too. */
static const char *canon_any(apr_pool_t *p, const char *s)
{
    const char *h;

    if (!s)
        return NULL;
    h = mcp_origin_host_of(p, s);
    if (!h && strchr(s, ':'))
        h = canon_v6(p, s, strlen(s));
    return h;
}

/* Port a scheme implies when the origin has none; -1 for schemes without one. */
static int default_port(const char *scheme)
{
    if (!strcmp(scheme, "http") || !strcmp(scheme, "ws"))
        return 80;
    if (!strcmp(scheme, "https") || !strcmp(scheme, "wss"))
        return 443;
    return -1;
}

/* ---- public ------------------------------------------------------------------------------- */

const char *mcp_origin_host_of(apr_pool_t *p, const char *hostport)
{
    const char *host;
    int port;

    if (!hostport || split_authority(p, hostport, strlen(hostport), &host, &port) != 0)
        return NULL;
    return host;
}

int mcp_origin_parse(apr_pool_t *p, const char *origin, const char **scheme, const char **host,
                     int *port)
{
    const char *s, *h;
    char *sch;
    apr_size_t slen, i;
    int pt;

    if (!origin)
        return -1;
    if (!strcmp(origin, "null")) {
        if (scheme)
            *scheme = "null";
        if (host)
            *host = NULL;
        if (port)
            *port = -1;
        return 0;
    }
    /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) (RFC 3986) */
    s = origin;
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        return -1;
    while (is_name_char(*s) || *s == '+' || *s == '.')
        s++;
    if (strncmp(s, "://", 3) != 0)
        return -1;
    slen = (apr_size_t)(s - origin);
    for (i = 0; i < slen; i++) {
        if (origin[i] == '_')      /* is_name_char allows it; schemes do not */
            return -1;
    }
    s += 3;
    if (split_authority(p, s, strlen(s), &h, &pt) != 0)
        return -1;
    sch = apr_pstrmemdup(p, origin, slen);
    for (i = 0; i < slen; i++)
        sch[i] = lower(sch[i]);
    if (scheme)
        *scheme = sch;
    if (host)
        *host = h;
    if (port)
        *port = pt;
    return 0;
}

int mcp_origin_is_loopback(const char *host)
{
    apr_size_t n;

    if (!host)
        return 0;
    n = strlen(host);
    if (memchr(host, ':', n)) {
        unsigned char a[16];
        static const unsigned char v6_loopback[16] = { 0, 0, 0, 0, 0, 0, 0, 0,
                                                       0, 0, 0, 0, 0, 0, 0, 1 };
        static const unsigned char v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
            host++;
            n -= 2;
        }
        if (!parse_v6(host, n, a))
            return 0;
        return !memcmp(a, v6_loopback, 16) || (!memcmp(a, v4_mapped, 12) && a[12] == 127);
    }

    if (n > 0 && host[n - 1] == '.')
        n--;
    if (!valid_name(host, n))
        return 0;
    if (n == 9 && !strncasecmp(host, "localhost", 9))
        return 1;
    if (n > 10 && !strncasecmp(host + n - 10, ".localhost", 10))
        return 1;

    /* A canonical dotted quad: four decimal octets 0-255 without leading zeros (a leading
     * zero is octal to inet_aton, so "0177.0.0.1" is refused rather than guessed at). */
    {
        const char *s = host, *end = host + n;
        int octet, first = -1;
        for (octet = 0; octet < 4; octet++) {
            int v = 0, digits = 0;
            if (octet > 0) {
                if (s == end || *s != '.')
                    return 0;
                s++;
            }
            while (s < end && *s >= '0' && *s <= '9') {
                if (digits == 1 && v == 0)
                    return 0;   /* leading zero */
                v = v * 10 + (*s - '0');
                if (++digits > 3)
                    return 0;
                s++;
            }
            if (digits == 0 || v > 255)
                return 0;
            if (octet == 0)
                first = v;
        }
        return s == end && first == 127;
    }
}

int mcp_origin_allowed(apr_pool_t *p, const char *origin, const char *request_host,
                       const apr_array_header_t *rules)
{
    const char *scheme, *host, *self = NULL;
    int port, i, self_done = 0;

    if (!origin || !rules)
        return 0;
    for (i = 0; i < rules->nelts; i++) {
        const char *rule = APR_ARRAY_IDX(rules, i, const char *);
        if (rule && !strcmp(rule, "*"))
            return 1;
    }
    if (mcp_origin_parse(p, origin, &scheme, &host, &port) != 0 || !host)
        return 0;   /* garbage, or the opaque "null" */
    if (port == -1)
        port = default_port(scheme);

    for (i = 0; i < rules->nelts; i++) {
        const char *rule = APR_ARRAY_IDX(rules, i, const char *);
        const char *rscheme, *rhost;
        int rport;

        if (!rule)
            continue;
        if (!strcasecmp(rule, "self")) {
            if (!self_done) {
                self = canon_any(p, request_host);
                self_done = 1;
            }
            if (self && !strcmp(self, host))
                return 1;
        }
        else if (!strcasecmp(rule, "localhost")) {
            if (mcp_origin_is_loopback(host))
                return 1;
        }
        else if (mcp_origin_parse(p, rule, &rscheme, &rhost, &rport) == 0 && rhost) {
            if (rport == -1)
                rport = default_port(rscheme);
            if (!strcmp(rscheme, scheme) && !strcmp(rhost, host) && rport == port)
                return 1;
        }
    }
    return 0;
}

int mcp_origin_host_allowed(apr_pool_t *p, const char *host_header,
                            const apr_array_header_t *names)
{
    const char *host = mcp_origin_host_of(p, host_header);
    apr_size_t hlen;
    int i;

    if (!host || !names)
        return 0;
    hlen = strlen(host);
    for (i = 0; i < names->nelts; i++) {
        const char *name = APR_ARRAY_IDX(names, i, const char *);
        const char *want;

        if (!name)
            continue;
        if (!strcmp(name, "*"))
            return 1;
        if (!strcasecmp(name, "localhost")) {
            if (mcp_origin_is_loopback(host))
                return 1;
        }
        else if (name[0] == '*' && name[1] == '.') {
            /* strictly below the suffix, on a label boundary: "*.example.com" matches
             * "a.example.com", not "example.com" nor "badexample.com" */
            apr_size_t wlen;
            want = mcp_origin_host_of(p, name + 2);
            if (!want)
                continue;
            wlen = strlen(want);
            if (hlen > wlen + 1 && host[hlen - wlen - 1] == '.'
                && !strcmp(host + hlen - wlen, want))
                return 1;
        }
        else {
            want = canon_any(p, name);
            if (want && !strcmp(want, host))
                return 1;
        }
    }
    return 0;
}
