/* Unit tests for mcp_federation: exposed names and URIs and their resolution, tagged ids, cursors
 * across members, list rewriting and merging, routing, outbound rewriting, initialize merging. */
#include <check.h>
#include <stdarg.h>
#include <string.h>

#include <apr_strings.h>
#include <json-c/json.h>

#include "mcp_federation.h"
#include "unit_json.h"
#include "unit_main.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static const char *text(json_object *o)
{
    return apr_pstrdup(pool, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN
                                                               | JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* A NULL-terminated list of globs as an array. */
static apr_array_header_t *globs(const char *first, ...)
{
    apr_array_header_t *a = apr_array_make(pool, 2, sizeof(const char *));
    const char *g;
    va_list ap;

    va_start(ap, first);
    for (g = first; g; g = va_arg(ap, const char *)) {
        APR_ARRAY_PUSH(a, const char *) = g;
    }
    va_end(ap);
    return a;
}

static mcp_fed_member_t member(const char *name, const char *prefix)
{
    mcp_fed_member_t m;

    memset(&m, 0, sizeof(m));
    m.name = name;
    m.prefix = prefix;
    return m;
}

/* alpha: unprefixed; gh: "gh_"; ghi: "gh_issues_" (a longer prefix of the same start). */
static mcp_fed_member_t three[3];

static void three_members(void)
{
    three[0] = member("alpha", "");
    three[1] = member("gh", "gh_");
    three[2] = member("ghi", "gh_issues_");
}

/* ---- names -------------------------------------------------------------------------------- */

START_TEST(test_name_valid)
{
    ck_assert(mcp_fed_name_valid("a"));
    ck_assert(mcp_fed_name_valid("Beta-2.x"));
    ck_assert(!mcp_fed_name_valid(NULL));
    ck_assert(!mcp_fed_name_valid(""));
    ck_assert(!mcp_fed_name_valid("2beta"));
    ck_assert(!mcp_fed_name_valid("-a"));
    ck_assert(!mcp_fed_name_valid("a_b"));
    ck_assert(!mcp_fed_name_valid("a+b"));
    ck_assert(!mcp_fed_name_valid("a:b"));
}
END_TEST

START_TEST(test_expose_prefix)
{
    mcp_fed_member_t un = member("alpha", ""), nul = member("alpha", NULL), gh = member("gh", "gh_");
    const char *own = "search";

    ck_assert_ptr_eq(mcp_fed_expose_name(pool, &un, own), own);
    ck_assert_ptr_eq(mcp_fed_expose_name(pool, &nul, own), own);
    ck_assert_str_eq(mcp_fed_expose_name(pool, &gh, own), "gh_search");
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &gh, NULL));
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &un, ""));
}
END_TEST

START_TEST(test_resolve_longest_prefix)
{
    const char *own = NULL;

    three_members();
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "gh_issues_list", &own), 2);
    ck_assert_str_eq(own, "list");
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "gh_search", &own), 1);
    ck_assert_str_eq(own, "search");
    /* The order of the members does not matter: the longest prefix wins. */
    {
        mcp_fed_member_t rev[3] = { three[2], three[1], three[0] };

        ck_assert_int_eq(mcp_fed_resolve_name(rev, 3, "gh_issues_list", &own), 0);
        ck_assert_int_eq(mcp_fed_resolve_name(rev, 3, "gh_x", &own), 1);
    }
}
END_TEST

START_TEST(test_resolve_unprefixed_fallback)
{
    const char *own = NULL;

    three_members();
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "search", &own), 0);
    ck_assert_str_eq(own, "search");
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "gh", &own), 0);
    /* Exactly a prefix: no name is left, so the prefix does not claim it. */
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "gh_", &own), 0);
    ck_assert_str_eq(own, "gh_");
    /* Without an unprefixed member nothing claims them. */
    ck_assert_int_eq(mcp_fed_resolve_name(three + 1, 2, "search", &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_name(three + 1, 2, "gh_", &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "", &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, NULL, &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_name(three, 0, "search", &own), -1);
}
END_TEST

START_TEST(test_resolve_prefix_does_not_fall_back)
{
    const char *own = "untouched";

    three_members();
    three[1].deny = globs("secret*", NULL);
    /* gh_ claims gh_secret; its rules hide it; the unprefixed member is not asked. */
    ck_assert_int_eq(mcp_fed_resolve_name(three, 3, "gh_secret", &own), -1);
    ck_assert_str_eq(own, "untouched");
}
END_TEST

START_TEST(test_deny_wins_over_allow)
{
    mcp_fed_member_t m = member("gh", "gh_");
    const char *own;

    m.allow = globs("issue_*", "pr_*", NULL);
    m.deny = globs("*_delete", NULL);
    ck_assert(mcp_fed_name_allowed(&m, "issue_get"));
    ck_assert(!mcp_fed_name_allowed(&m, "issue_delete"));
    ck_assert(!mcp_fed_name_allowed(&m, "repo_get"));
    ck_assert_str_eq(mcp_fed_expose_name(pool, &m, "pr_list"), "gh_pr_list");
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &m, "pr_delete"));
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &m, "repo_get"));
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "gh_pr_list", &own), 0);
    ck_assert_str_eq(own, "pr_list");
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "gh_pr_delete", &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "gh_repo_get", &own), -1);
    /* An empty allow list allows everything the deny list does not name. */
    m.allow = globs(NULL);
    ck_assert(mcp_fed_name_allowed(&m, "repo_get"));
    ck_assert(!mcp_fed_name_allowed(&m, "repo_delete"));
}
END_TEST

START_TEST(test_rename_inversion)
{
    mcp_fed_member_t m = member("gh", "gh_");
    const char *own = NULL;

    m.renames = apr_table_make(pool, 2);
    apr_table_set(m.renames, "search_code", "find");
    ck_assert_str_eq(mcp_fed_expose_name(pool, &m, "search_code"), "gh_find");
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "gh_find", &own), 0);
    ck_assert_str_eq(own, "search_code");
    /* The old name is not callable any more. */
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "gh_search_code", &own), -1);
    /* The rules judge the own name, not the new one. */
    m.deny = globs("search_*", NULL);
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &m, "search_code"));
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "gh_find", &own), -1);
}
END_TEST

START_TEST(test_rename_shadow_and_swap)
{
    mcp_fed_member_t m = member("alpha", "");
    const char *own = NULL;

    m.renames = apr_table_make(pool, 2);
    apr_table_set(m.renames, "old", "new");
    /* The member's own "new" is shadowed: "new" calls "old". */
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &m, "new"));
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "new", &own), 0);
    ck_assert_str_eq(own, "old");
    /* A swap: each name calls the other. */
    apr_table_set(m.renames, "new", "old");
    ck_assert_str_eq(mcp_fed_expose_name(pool, &m, "new"), "old");
    ck_assert_str_eq(mcp_fed_expose_name(pool, &m, "old"), "new");
    ck_assert_int_eq(mcp_fed_resolve_name(&m, 1, "old", &own), 0);
    ck_assert_str_eq(own, "new");
    /* Renames match exactly, unlike apr_table_get. */
    ck_assert_str_eq(mcp_fed_expose_name(pool, &m, "OLD"), "OLD");
    /* Renamed to nothing: not shown. */
    apr_table_set(m.renames, "blank", "");
    ck_assert_ptr_null(mcp_fed_expose_name(pool, &m, "blank"));
}
END_TEST

/* ---- URIs --------------------------------------------------------------------------------- */

START_TEST(test_uri_round_trip)
{
    const char *uri = "file:///etc/hosts", *own = NULL, *e;

    three_members();
    ck_assert_ptr_eq(mcp_fed_expose_uri(pool, &three[0], uri), uri);
    e = mcp_fed_expose_uri(pool, &three[1], uri);
    ck_assert_str_eq(e, "gh+file:///etc/hosts");
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, e, &own), 1);
    ck_assert_str_eq(own, uri);
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, uri, &own), 0);
    ck_assert_ptr_eq(own, uri);
    e = mcp_fed_expose_uri(pool, &three[2], "git+ssh://h/r");
    ck_assert_str_eq(e, "ghi+git+ssh://h/r");
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, e, &own), 2);
    ck_assert_str_eq(own, "git+ssh://h/r");
    /* Schemes are case-insensitive. */
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, "GH+file:///x", &own), 1);
    ck_assert_str_eq(own, "file:///x");
    ck_assert_ptr_null(mcp_fed_expose_uri(pool, &three[1], NULL));
}
END_TEST

START_TEST(test_uri_template)
{
    const char *own = NULL, *e;

    three_members();
    e = mcp_fed_expose_uri(pool, &three[1], "repo://{owner}/{id}");
    ck_assert_str_eq(e, "gh+repo://{owner}/{id}");   /* still an RFC 6570 template */
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, e, &own), 1);
    ck_assert_str_eq(own, "repo://{owner}/{id}");
    /* What a client makes of the template resolves too. */
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, "gh+repo://me/42", &own), 1);
    ck_assert_str_eq(own, "repo://me/42");
}
END_TEST

START_TEST(test_uri_unknown_scheme_goes_unprefixed)
{
    const char *own = NULL;

    three_members();
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, "git+ssh://h/r", &own), 0);
    ck_assert_str_eq(own, "git+ssh://h/r");
    /* The unprefixed member's own name is no scheme prefix. */
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, "alpha+x:y", &own), 0);
    ck_assert_str_eq(own, "alpha+x:y");
    ck_assert_int_eq(mcp_fed_resolve_uri(three, 3, "+gh:x", &own), 0);
    /* Without an unprefixed member: nothing serves them. */
    ck_assert_int_eq(mcp_fed_resolve_uri(three + 1, 2, "git+ssh://h/r", &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_uri(three + 1, 2, "file:///x", &own), -1);
    ck_assert_int_eq(mcp_fed_resolve_uri(three + 1, 2, NULL, &own), -1);
}
END_TEST

/* ---- ids ---------------------------------------------------------------------------------- */

START_TEST(test_tag_number_vs_string)
{
    json_object *n5 = parse("5"), *s5 = parse("\"5\""), *t1, *t2;

    t1 = mcp_fed_tag_id("beta", n5);
    t2 = mcp_fed_tag_id("beta", s5);
    ck_assert_str_eq(json_object_get_string(t1), "mcpfed:beta:5");
    ck_assert_str_eq(json_object_get_string(t2), "mcpfed:beta:\"5\"");
    json_object_put(t1);
    json_object_put(t2);
}
END_TEST

START_TEST(test_tag_round_trip)
{
    static const char *const ids[] = {
        "5", "\"5\"", "-17", "0", "9007199254740993", "1.5", "\"\"", "\"a:b\\\"c\"",
        "\"mcpfed:x:1\"", "\"caf\xc3\xa9/\\n\"",
    };
    size_t i;

    for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        json_object *id = parse(ids[i]), *tagged = mcp_fed_tag_id("m.1-x", id), *back = NULL;
        const char *name = NULL;

        ck_assert_ptr_nonnull(tagged);
        ck_assert_int_eq(mcp_fed_untag_id(pool, tagged, &name, &back), 0);
        ck_assert_str_eq(name, "m.1-x");
        ck_assert_int_eq(json_object_get_type(back), json_object_get_type(id));
        ck_assert_str_eq(text(back), text(id));
        json_object_put(back);
        json_object_put(tagged);
    }
}
END_TEST

START_TEST(test_tag_refuses)
{
    ck_assert_ptr_null(mcp_fed_tag_id("beta", NULL));
    ck_assert_ptr_null(mcp_fed_tag_id("beta", parse("{\"a\":1}")));
    ck_assert_ptr_null(mcp_fed_tag_id("beta", parse("[1]")));
    ck_assert_ptr_null(mcp_fed_tag_id("beta", parse("true")));
    ck_assert_ptr_null(mcp_fed_tag_id("be:ta", parse("1")));
    ck_assert_ptr_null(mcp_fed_tag_id(NULL, parse("1")));
}
END_TEST

START_TEST(test_untag_refuses)
{
    static const char *const bad[] = {
        "5", "\"5\"", "1.5", "{\"a\":1}", "\"mcpfed\"", "\"mcpfed:\"", "\"mcpfed:beta\"",
        "\"mcpfed:beta:\"", "\"mcpfed::5\"", "\"mcpfed:2beta:5\"", "\"mcpfed:be_ta:5\"",
        "\"MCPFED:beta:5\"", "\"xmcpfed:beta:5\"", "\"mcpfed:beta:{\\\"a\\\":1}\"",
        "\"mcpfed:beta:[1]\"", "\"mcpfed:beta:null\"", "\"mcpfed:beta:true\"",
        "\"mcpfed:beta:5 \"", "\"mcpfed:beta: 5\"", "\"mcpfed:beta:05\"", "\"mcpfed:beta:5x\"",
        "\"mcpfed:beta:\\\"a\"", "\"mcpfed:beta:\\\"\\\\u0041\\\"\"", "\"mcpfed:beta:NaN\"",
        "\"mcpfed:beta:5\\u0000\"", "\"mcpfed:beta\\u0000:5\"",
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *name = "untouched";
        json_object *id = NULL;

        ck_assert_msg(mcp_fed_untag_id(pool, parse(bad[i]), &name, &id) != 0, "%s", bad[i]);
        ck_assert_str_eq(name, "untouched");
        ck_assert_ptr_null(id);
    }
    ck_assert(mcp_fed_untag_id(pool, NULL, NULL, NULL) != 0);
}
END_TEST

/* ---- cursors ------------------------------------------------------------------------------ */

START_TEST(test_cursor_round_trip)
{
    const char *names[] = { "beta", "gamma" }, *cursors[] = { "c1", "p=2&q=\"x\"/\xc3\xa9" };
    apr_array_header_t *pairs = NULL;
    mcp_fed_cursor_pair_t *pr;
    const char *c = mcp_fed_cursor_encode(pool, names, cursors, 2);

    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq((int)strspn(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                    "0123456789-_"), (int)strlen(c));
    ck_assert_int_eq(mcp_fed_cursor_decode(pool, c, &pairs), 0);
    ck_assert_int_eq(pairs->nelts, 2);
    pr = (mcp_fed_cursor_pair_t *)pairs->elts;
    ck_assert_str_eq(pr[0].member, "beta");
    ck_assert_str_eq(pr[0].cursor, "c1");
    ck_assert_str_eq(pr[1].member, "gamma");
    ck_assert_str_eq(pr[1].cursor, cursors[1]);
    /* The documented form: base64url of [["beta","c1"]] without padding. */
    ck_assert_str_eq(mcp_fed_cursor_encode(pool, names, cursors, 1), "W1siYmV0YSIsImMxIl1d");
}
END_TEST

START_TEST(test_cursor_encode_refuses)
{
    const char *names[MCP_FED_CURSOR_MAX_PAIRS + 1], *cursors[MCP_FED_CURSOR_MAX_PAIRS + 1];
    const char *dup[] = { "a", "a" }, *bad[] = { "a_b" }, *nul[] = { NULL };
    char *big = apr_palloc(pool, MCP_FED_CURSOR_MAX_LEN);
    int i;

    for (i = 0; i <= MCP_FED_CURSOR_MAX_PAIRS; i++) {
        names[i] = apr_psprintf(pool, "m%d", i);
        cursors[i] = "c";
    }
    ck_assert_ptr_null(mcp_fed_cursor_encode(pool, names, cursors, 0));
    ck_assert_ptr_nonnull(mcp_fed_cursor_encode(pool, names, cursors, MCP_FED_CURSOR_MAX_PAIRS));
    ck_assert_ptr_null(mcp_fed_cursor_encode(pool, names, cursors, MCP_FED_CURSOR_MAX_PAIRS + 1));
    ck_assert_ptr_null(mcp_fed_cursor_encode(pool, dup, cursors, 2));
    ck_assert_ptr_null(mcp_fed_cursor_encode(pool, bad, cursors, 1));
    ck_assert_ptr_null(mcp_fed_cursor_encode(pool, names, nul, 1));
    memset(big, 'x', MCP_FED_CURSOR_MAX_LEN - 1);
    big[MCP_FED_CURSOR_MAX_LEN - 1] = '\0';
    cursors[0] = big;
    ck_assert_ptr_null(mcp_fed_cursor_encode(pool, names, cursors, 1));
}
END_TEST

/* base64url without padding of a JSON text, for the malformed-cursor cases. */
static const char *b64(const char *json)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    apr_size_t n = strlen(json), i;
    const unsigned char *s = (const unsigned char *)json;
    char *out = apr_palloc(pool, n / 3 * 4 + 8), *o = out;

    for (i = 0; i < n; i += 3) {
        apr_uint32_t v = (apr_uint32_t)s[i] << 16;

        v |= i + 1 < n ? (apr_uint32_t)s[i + 1] << 8 : 0;
        v |= i + 2 < n ? s[i + 2] : 0;
        *o++ = a[v >> 18];
        *o++ = a[(v >> 12) & 63];
        if (i + 1 < n) {
            *o++ = a[(v >> 6) & 63];
        }
        if (i + 2 < n) {
            *o++ = a[v & 63];
        }
    }
    *o = '\0';
    return out;
}

START_TEST(test_cursor_decode_bad_base64)
{
    static const char *const bad[] = {
        "", "W1siYmV0YSIsImMxIl1d=", "W1siYmV0YSIsImMxIl1", "W1siYmV0YSIsImMxIl1d!",
        "W1siYmV0YSIsImMxIl1d+", "W1siYmV0YSIsImMxIl1d/", "W1siYmV0YSIsImMxIl1d W",
        "W1siYmV0YSIsImMxIl1e",   /* unused bits set: not the canonical encoding */
    };
    apr_array_header_t *pairs = NULL;
    size_t i;

    ck_assert_int_eq(mcp_fed_cursor_decode(pool, "W1siYmV0YSIsImMxIl1d", &pairs), 0);
    pairs = NULL;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(mcp_fed_cursor_decode(pool, bad[i], &pairs) != 0, "%s", bad[i]);
        ck_assert_ptr_null(pairs);
    }
    ck_assert(mcp_fed_cursor_decode(pool, NULL, &pairs) != 0);
}
END_TEST

START_TEST(test_cursor_decode_bad_json)
{
    static const char *const bad[] = {
        "[]", "{}", "\"beta\"", "[\"beta\",\"c1\"]", "[[\"beta\"]]", "[[\"beta\",\"c1\",\"x\"]]",
        "[[\"beta\",1]]", "[[1,\"c1\"]]", "[[\"beta\",null]]", "[[\"beta\",\"c1\"],\"x\"]",
        "[[\"beta\",\"c1\"],[\"beta\",\"c2\"]]", "[[\"be_ta\",\"c1\"]]", "[[\"\",\"c1\"]]",
        "[[\"beta\",\"c\\u0000\"]]", "[[\"beta\",\"c1\"]] x", "[[\"beta\",\"c1\"]",
        "[[\"beta\",\"c1\"]]\n[]", "[['beta','c1']]",
    };
    apr_array_header_t *pairs = NULL;
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(mcp_fed_cursor_decode(pool, b64(bad[i]), &pairs) != 0, "%s", bad[i]);
        ck_assert_ptr_null(pairs);
    }
    /* Not UTF-8 inside. */
    ck_assert(mcp_fed_cursor_decode(pool, b64("[[\"beta\",\"\xff\"]]"), &pairs) != 0);
}
END_TEST

START_TEST(test_cursor_decode_limits)
{
    apr_array_header_t *pairs = NULL;
    const char *json = "[", *ok;
    char *big;
    int i;

    for (i = 0; i < MCP_FED_CURSOR_MAX_PAIRS; i++) {
        json = apr_psprintf(pool, "%s%s[\"m%d\",\"c\"]", json, i ? "," : "", i);
    }
    ok = apr_pstrcat(pool, json, "]", NULL);
    ck_assert_int_eq(mcp_fed_cursor_decode(pool, b64(ok), &pairs), 0);
    ck_assert_int_eq(pairs->nelts, MCP_FED_CURSOR_MAX_PAIRS);
    pairs = NULL;
    json = apr_pstrcat(pool, json, ",[\"extra\",\"c\"]]", NULL);
    ck_assert(mcp_fed_cursor_decode(pool, b64(json), &pairs) != 0);
    /* Longer than 16 KiB, even though it would be valid. */
    big = apr_palloc(pool, MCP_FED_CURSOR_MAX_LEN);
    memset(big, 'x', MCP_FED_CURSOR_MAX_LEN - 100);
    big[MCP_FED_CURSOR_MAX_LEN - 100] = '\0';
    json = apr_psprintf(pool, "[[\"beta\",\"%s\"]]", big);
    ck_assert_int_gt((int)strlen(b64(json)), MCP_FED_CURSOR_MAX_LEN);
    ck_assert(mcp_fed_cursor_decode(pool, b64(json), &pairs) != 0);
    ck_assert_ptr_null(pairs);
}
END_TEST

/* ---- list results ------------------------------------------------------------------------- */

START_TEST(test_list_rewrite_tools)
{
    mcp_fed_member_t m = member("gh", "gh_");
    json_object *r = parse("{\"tools\":[{\"name\":\"search\",\"description\":\"theirs\","
                           "\"inputSchema\":{}},{\"name\":\"delete_repo\"},{\"name\":\"issue\","
                           "\"description\":\"theirs\"}],\"nextCursor\":\"n1\",\"_meta\":{\"k\":1}}");

    m.deny = globs("delete_*", NULL);
    m.renames = apr_table_make(pool, 1);
    apr_table_set(m.renames, "issue", "ticket");
    m.descriptions = apr_table_make(pool, 1);
    apr_table_set(m.descriptions, "issue", "ours");
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "tools/list", r), 1);
    ck_assert_str_eq(text(r), "{\"tools\":[{\"name\":\"gh_search\",\"description\":\"theirs\","
                              "\"inputSchema\":{}},{\"name\":\"gh_ticket\",\"description\":"
                              "\"ours\"}],\"nextCursor\":\"n1\",\"_meta\":{\"k\":1}}");
}
END_TEST

START_TEST(test_list_rewrite_prompts_unprefixed)
{
    mcp_fed_member_t m = member("alpha", "");
    json_object *r = parse("{\"prompts\":[{\"name\":\"greet\"},{\"name\":\"review\"}]}");

    m.allow = globs("greet", NULL);
    m.descriptions = apr_table_make(pool, 1);
    apr_table_set(m.descriptions, "greet", "Says hello");
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "prompts/list", r), 1);
    ck_assert_str_eq(text(r), "{\"prompts\":[{\"name\":\"greet\",\"description\":\"Says hello\"}]}");
}
END_TEST

START_TEST(test_list_rewrite_resources_and_templates)
{
    mcp_fed_member_t m = member("gh", "gh_");
    json_object *r = parse("{\"resources\":[{\"uri\":\"repo://a\",\"name\":\"secret_a\"}]}");
    json_object *t = parse("{\"resourceTemplates\":[{\"uriTemplate\":\"repo://{id}\","
                           "\"name\":\"repo\"}]}");

    m.deny = globs("secret*", NULL);   /* tools and prompts only: resources keep their names */
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "resources/list", r), 0);
    ck_assert_str_eq(text(r), "{\"resources\":[{\"uri\":\"gh+repo://a\",\"name\":\"secret_a\"}]}");
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "resources/templates/list", t), 0);
    ck_assert_str_eq(text(t), "{\"resourceTemplates\":[{\"uriTemplate\":\"gh+repo://{id}\","
                              "\"name\":\"repo\"}]}");
}
END_TEST

START_TEST(test_list_rewrite_malformed)
{
    mcp_fed_member_t m = member("gh", "gh_");
    json_object *r = parse("{\"tools\":[{\"name\":1},{},\"x\",null,{\"name\":\"a\\u0000b\"},"
                           "{\"name\":\"ok\"}]}");
    json_object *same = parse("{\"tools\":{\"name\":\"x\"}}");

    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "tools/list", r), 5);
    ck_assert_str_eq(text(r), "{\"tools\":[{\"name\":\"gh_ok\"}]}");
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "tools/list", same), 0);
    ck_assert_str_eq(text(same), "{\"tools\":{\"name\":\"x\"}}");
    r = parse("{\"tools\":[{\"name\":\"x\"}]}");
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "tools/call", r), 0);
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, NULL, r), 0);
    ck_assert_int_eq(mcp_fed_list_rewrite(pool, &m, "prompts/list", r), 0);
    ck_assert_str_eq(text(r), "{\"tools\":[{\"name\":\"x\"}]}");
}
END_TEST

START_TEST(test_list_merge_next_cursor)
{
    json_object *res[3] = {
        parse("{\"tools\":[{\"name\":\"a1\"},{\"name\":\"a2\"}],\"nextCursor\":\"ca\"}"),
        parse("{\"tools\":[{\"name\":\"b1\"}]}"),
        parse("{\"tools\":[],\"nextCursor\":\"cc\"}"),
    };
    const char *names[3] = { "alpha", "beta", "gamma" }, *next = NULL;
    apr_array_header_t *pairs = NULL;
    mcp_fed_cursor_pair_t *pr;
    json_object *out;
    int dropped = -1;

    out = mcp_fed_list_merge(pool, "tools/list", res, names, 3, &next, &dropped);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(dropped, 0);
    ck_assert_ptr_nonnull(next);
    ck_assert_str_eq(text(out), apr_psprintf(pool, "{\"tools\":[{\"name\":\"a1\"},{\"name\":"
                                             "\"a2\"},{\"name\":\"b1\"}],\"nextCursor\":\"%s\"}",
                                             next));
    ck_assert_int_eq(mcp_fed_cursor_decode(pool, next, &pairs), 0);
    ck_assert_int_eq(pairs->nelts, 2);
    pr = (mcp_fed_cursor_pair_t *)pairs->elts;
    ck_assert_str_eq(pr[0].member, "alpha");
    ck_assert_str_eq(pr[0].cursor, "ca");
    ck_assert_str_eq(pr[1].member, "gamma");
    ck_assert_str_eq(pr[1].cursor, "cc");
    json_object_put(out);
}
END_TEST

START_TEST(test_list_merge_collisions)
{
    json_object *res[3] = {
        parse("{\"resources\":[{\"uri\":\"x:1\",\"n\":1},{\"uri\":\"x:2\"}],\"nextCursor\":\"\"}"),
        NULL,
        parse("{\"resources\":[{\"uri\":\"x:1\",\"n\":2},{\"name\":\"no uri\"},{\"uri\":\"x:3\"}]}"),
    };
    const char *names[3] = { "alpha", "beta", "gamma" }, *next = "untouched";
    json_object *out;
    int dropped = -1;

    out = mcp_fed_list_merge(pool, "resources/list", res, names, 3, &next, &dropped);
    ck_assert_int_eq(dropped, 2);
    ck_assert_ptr_null(next);   /* an empty nextCursor is the end */
    ck_assert_str_eq(text(out), "{\"resources\":[{\"uri\":\"x:1\",\"n\":1},{\"uri\":\"x:2\"},"
                                "{\"uri\":\"x:3\"}]}");
    json_object_put(out);
    out = mcp_fed_list_merge(pool, "resources/templates/list", res, names, 0, &next, NULL);
    ck_assert_str_eq(text(out), "{\"resourceTemplates\":[]}");
    json_object_put(out);
}
END_TEST

START_TEST(test_list_merge_refuses)
{
    char *big = apr_palloc(pool, MCP_FED_CURSOR_MAX_LEN);
    json_object *res[1], *o;
    const char *names[1] = { "alpha" }, *next = "untouched";

    res[0] = parse("{\"prompts\":[{\"name\":\"p\"}],\"nextCursor\":\"c\"}");
    ck_assert_ptr_null(mcp_fed_list_merge(pool, "prompts/get", res, names, 1, &next, NULL));
    ck_assert_ptr_null(next);
    memset(big, 'x', MCP_FED_CURSOR_MAX_LEN - 1);
    big[MCP_FED_CURSOR_MAX_LEN - 1] = '\0';
    o = json_object_new_string(big);
    json_object_object_add(res[0], "nextCursor", o);
    next = "untouched";
    ck_assert_ptr_null(mcp_fed_list_merge(pool, "prompts/list", res, names, 1, &next, NULL));
    ck_assert_ptr_null(next);
}
END_TEST

/* ---- routing ------------------------------------------------------------------------------ */

START_TEST(test_method_kind)
{
    ck_assert_int_eq(mcp_fed_method_kind("tools/call"), MCP_FED_ROUTED);
    ck_assert_int_eq(mcp_fed_method_kind("prompts/get"), MCP_FED_ROUTED);
    ck_assert_int_eq(mcp_fed_method_kind("resources/read"), MCP_FED_ROUTED);
    ck_assert_int_eq(mcp_fed_method_kind("resources/subscribe"), MCP_FED_ROUTED);
    ck_assert_int_eq(mcp_fed_method_kind("resources/unsubscribe"), MCP_FED_ROUTED);
    ck_assert_int_eq(mcp_fed_method_kind("completion/complete"), MCP_FED_ROUTED);
    ck_assert_int_eq(mcp_fed_method_kind("tools/list"), MCP_FED_LIST);
    ck_assert_int_eq(mcp_fed_method_kind("prompts/list"), MCP_FED_LIST);
    ck_assert_int_eq(mcp_fed_method_kind("resources/list"), MCP_FED_LIST);
    ck_assert_int_eq(mcp_fed_method_kind("resources/templates/list"), MCP_FED_LIST);
    ck_assert_int_eq(mcp_fed_method_kind("ping"), MCP_FED_ALL);
    ck_assert_int_eq(mcp_fed_method_kind("logging/setLevel"), MCP_FED_ALL);
    ck_assert_int_eq(mcp_fed_method_kind("notifications/initialized"), MCP_FED_NOTIFY_ALL);
    ck_assert_int_eq(mcp_fed_method_kind("notifications/roots/list_changed"), MCP_FED_NOTIFY_ALL);
    ck_assert_int_eq(mcp_fed_method_kind("notifications/cancelled"), MCP_FED_NOTIFY_ALL);
    ck_assert_int_eq(mcp_fed_method_kind("initialize"), MCP_FED_LOCAL);
    ck_assert_int_eq(mcp_fed_method_kind("tasks/get"), MCP_FED_LOCAL);
    ck_assert_int_eq(mcp_fed_method_kind("tools/call/"), MCP_FED_LOCAL);
    ck_assert_int_eq(mcp_fed_method_kind(NULL), MCP_FED_LOCAL);
}
END_TEST

static int route(const char *json, const char **out, const char **why)
{
    json_object *req = parse(json);
    int i;

    *why = NULL;
    i = mcp_fed_route(pool, three, 3, req, why);
    *out = text(req);
    return i;
}

START_TEST(test_route_tools_and_prompts)
{
    const char *out, *why;

    three_members();
    three[1].renames = apr_table_make(pool, 1);
    apr_table_set(three[1].renames, "search_code", "find");
    ck_assert_int_eq(route("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                           "{\"name\":\"gh_find\",\"arguments\":{\"q\":\"x\"}}}", &out, &why), 1);
    ck_assert_str_eq(out, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                          "{\"name\":\"search_code\",\"arguments\":{\"q\":\"x\"}}}");
    ck_assert_int_eq(route("{\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}",
                           &out, &why), 0);
    ck_assert_str_eq(out, "{\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}");
    ck_assert_int_eq(route("{\"id\":3,\"method\":\"prompts/get\",\"params\":{\"name\":"
                           "\"gh_issues_triage\"}}", &out, &why), 2);
    ck_assert_str_eq(out, "{\"id\":3,\"method\":\"prompts/get\",\"params\":{\"name\":\"triage\"}}");
}
END_TEST

START_TEST(test_route_resources)
{
    static const char *const methods[] = {
        "resources/read", "resources/subscribe", "resources/unsubscribe",
    };
    const char *out, *why;
    size_t i;

    three_members();
    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        ck_assert_int_eq(route(apr_psprintf(pool, "{\"id\":1,\"method\":\"%s\",\"params\":"
                                            "{\"uri\":\"ghi+repo://a/1\"}}", methods[i]),
                               &out, &why), 2);
        ck_assert_str_eq(out, apr_psprintf(pool, "{\"id\":1,\"method\":\"%s\",\"params\":"
                                                 "{\"uri\":\"repo://a/1\"}}", methods[i]));
    }
    ck_assert_int_eq(route("{\"id\":1,\"method\":\"resources/read\",\"params\":{\"uri\":"
                           "\"file:///x\"}}", &out, &why), 0);
    ck_assert_str_eq(out, "{\"id\":1,\"method\":\"resources/read\",\"params\":{\"uri\":"
                          "\"file:///x\"}}");
}
END_TEST

START_TEST(test_route_completion)
{
    const char *out, *why;

    three_members();
    ck_assert_int_eq(route("{\"id\":1,\"method\":\"completion/complete\",\"params\":{\"ref\":"
                           "{\"type\":\"ref/prompt\",\"name\":\"gh_review\"},\"argument\":"
                           "{\"name\":\"a\",\"value\":\"b\"}}}", &out, &why), 1);
    ck_assert_str_eq(out, "{\"id\":1,\"method\":\"completion/complete\",\"params\":{\"ref\":"
                          "{\"type\":\"ref/prompt\",\"name\":\"review\"},\"argument\":"
                          "{\"name\":\"a\",\"value\":\"b\"}}}");
    ck_assert_int_eq(route("{\"id\":1,\"method\":\"completion/complete\",\"params\":{\"ref\":"
                           "{\"type\":\"ref/resource\",\"uri\":\"gh+repo://{id}\"}}}", &out, &why),
                     1);
    ck_assert_str_eq(out, "{\"id\":1,\"method\":\"completion/complete\",\"params\":{\"ref\":"
                          "{\"type\":\"ref/resource\",\"uri\":\"repo://{id}\"}}}");
}
END_TEST

START_TEST(test_route_unknown)
{
    const char *in, *out, *why;

    three_members();
    three[1].deny = globs("secret*", NULL);
    in = "{\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"gh_secret\"}}";
    ck_assert_int_eq(route(in, &out, &why), -1);
    ck_assert_str_eq(why, "Unknown tool: gh_secret");
    ck_assert_str_eq(out, in);   /* untouched */
    ck_assert_int_eq(mcp_fed_route(pool, three + 1, 2, parse("{\"id\":1,\"method\":\"prompts/get\","
                                                             "\"params\":{\"name\":\"xyz\"}}"),
                                   &why), -1);
    ck_assert_str_eq(why, "Unknown prompt: xyz");
    ck_assert_int_eq(mcp_fed_route(pool, three + 1, 2, parse("{\"id\":1,\"method\":"
                                                             "\"resources/read\",\"params\":"
                                                             "{\"uri\":\"x+y:z\"}}"), &why), -1);
    ck_assert_str_eq(why, "No member serves the resource uri: x+y:z");
    ck_assert_int_eq(mcp_fed_route(pool, three + 1, 2, parse("{\"id\":1,\"method\":"
                                                             "\"completion/complete\",\"params\":"
                                                             "{\"ref\":{\"type\":\"ref/prompt\","
                                                             "\"name\":\"nope\"}}}"), &why), -1);
    ck_assert_str_eq(why, "Unknown prompt: nope");
    /* A client's name is quoted and cut. */
    ck_assert_int_eq(route("{\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"gh_secret"
                           "\\n\"}}", &out, &why), -1);
    ck_assert_str_eq(why, "Unknown tool: gh_secret\\x0a");
    {
        char *name = apr_palloc(pool, 301);

        memset(name, 'a', 300);
        name[300] = '\0';
        ck_assert_int_eq(mcp_fed_route(pool, three + 1, 2,
                                       parse(apr_psprintf(pool, "{\"id\":1,\"method\":"
                                                          "\"tools/call\",\"params\":{\"name\":"
                                                          "\"%s\"}}", name)), &why), -1);
        name[200] = '\0';
        ck_assert_str_eq(why, apr_pstrcat(pool, "Unknown tool: ", name, "...", NULL));
    }
}
END_TEST

START_TEST(test_route_malformed)
{
    static const struct {
        const char *json;
        const char *why;
    } cases[] = {
        { "{\"id\":1}", "not a request (no method)" },
        { "[]", "not a request (no method)" },
        { "{\"id\":1,\"method\":\"tools/list\"}", "tools/list is not routed to one member" },
        { "{\"id\":1,\"method\":\"tools/call\"}", "tools/call needs params, an object" },
        { "{\"id\":1,\"method\":\"tools/call\",\"params\":[]}", "tools/call needs params, an object" },
        { "{\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":5}}",
          "tools/call needs params.name, a string" },
        { "{\"id\":1,\"method\":\"prompts/get\",\"params\":{}}",
          "prompts/get needs params.name, a string" },
        { "{\"id\":1,\"method\":\"resources/subscribe\",\"params\":{\"name\":\"x\"}}",
          "resources/subscribe needs params.uri, a string" },
        { "{\"id\":1,\"method\":\"completion/complete\",\"params\":{}}",
          "completion/complete needs params.ref, an object" },
        { "{\"id\":1,\"method\":\"completion/complete\",\"params\":{\"ref\":{\"type\":\"ref/x\"}}}",
          "completion/complete needs params.ref.type, \"ref/prompt\" or \"ref/resource\"" },
        { "{\"id\":1,\"method\":\"completion/complete\",\"params\":{\"ref\":{\"type\":"
          "\"ref/resource\",\"name\":\"x\"}}}", "completion/complete needs params.ref.uri, a string" },
    };
    const char *out, *why;
    size_t i;

    three_members();
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_msg(route(cases[i].json, &out, &why) == -1, "%s", cases[i].json);
        ck_assert_str_eq(why, cases[i].why);
        ck_assert_str_eq(out, cases[i].json);
    }
}
END_TEST

/* ---- outbound ----------------------------------------------------------------------------- */

static const char *outbound(const mcp_fed_member_t *m, const char *json, const char *answered)
{
    json_object *msg = parse(json);

    mcp_fed_outbound(pool, m, msg, answered);
    return text(msg);
}

START_TEST(test_outbound_request_tagged)
{
    mcp_fed_member_t m = member("beta", "b_");
    json_object *msg = parse("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"sampling/createMessage\","
                             "\"params\":{}}"), *id, *orig = NULL;
    const char *name = NULL;

    mcp_fed_outbound(pool, &m, msg, NULL);
    ck_assert_str_eq(text(msg), "{\"jsonrpc\":\"2.0\",\"id\":\"mcpfed:beta:5\",\"method\":"
                                "\"sampling/createMessage\",\"params\":{}}");
    /* The client's answer finds its way back. */
    ck_assert(json_object_object_get_ex(msg, "id", &id));
    ck_assert_int_eq(mcp_fed_untag_id(pool, id, &name, &orig), 0);
    ck_assert_str_eq(name, "beta");
    ck_assert_str_eq(text(orig), "5");
    json_object_put(orig);
    /* The unprefixed member's requests are tagged too: ids collide whatever the prefix. */
    m = member("alpha", "");
    ck_assert_str_eq(outbound(&m, "{\"id\":\"r1\",\"method\":\"roots/list\"}", NULL),
                     "{\"id\":\"mcpfed:alpha:\\\"r1\\\"\",\"method\":\"roots/list\"}");
}
END_TEST

START_TEST(test_outbound_resources_updated)
{
    mcp_fed_member_t m = member("beta", "b_"), un = member("alpha", "");
    const char *in = "{\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":"
                     "\"file:///a\"}}";

    ck_assert_str_eq(outbound(&m, in, NULL), "{\"method\":\"notifications/resources/updated\","
                                             "\"params\":{\"uri\":\"beta+file:///a\"}}");
    ck_assert_str_eq(outbound(&un, in, NULL), in);
}
END_TEST

START_TEST(test_outbound_cancelled)
{
    mcp_fed_member_t m = member("beta", "b_");

    ck_assert_str_eq(outbound(&m, "{\"method\":\"notifications/cancelled\",\"params\":"
                                  "{\"requestId\":\"7\",\"reason\":\"timeout\"}}", NULL),
                     "{\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":"
                     "\"mcpfed:beta:\\\"7\\\"\",\"reason\":\"timeout\"}}");
}
END_TEST

START_TEST(test_outbound_resources_read_response)
{
    mcp_fed_member_t m = member("beta", "b_");
    const char *in = "{\"id\":3,\"result\":{\"contents\":[{\"uri\":\"file:///a\",\"text\":\"x\"},"
                     "{\"uri\":\"file:///b\",\"blob\":\"eA\"},{\"text\":\"no uri\"}]}}";

    ck_assert_str_eq(outbound(&m, in, "resources/read"),
                     "{\"id\":3,\"result\":{\"contents\":[{\"uri\":\"beta+file:///a\",\"text\":"
                     "\"x\"},{\"uri\":\"beta+file:///b\",\"blob\":\"eA\"},{\"text\":\"no uri\"}]}}");
    /* Not known to answer resources/read: untouched. */
    ck_assert_str_eq(outbound(&m, in, NULL), in);
    ck_assert_str_eq(outbound(&m, in, "tools/call"), in);
}
END_TEST

START_TEST(test_outbound_content_uris)
{
    mcp_fed_member_t m = member("beta", "b_"), un = member("alpha", "");
    const char *call = "{\"id\":1,\"result\":{\"content\":[{\"type\":\"resource_link\",\"uri\":"
                       "\"file:///a\"},{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///b\","
                       "\"text\":\"x\"}},{\"type\":\"text\",\"text\":\"file:///c\"}]}}";
    const char *prompt = "{\"id\":2,\"result\":{\"messages\":[{\"role\":\"user\",\"content\":"
                         "{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///d\"}}}]}}";

    /* A tool's or a prompt's resources can be read through the gateway: their URIs exposed. */
    ck_assert_str_eq(outbound(&m, call, "tools/call"),
                     "{\"id\":1,\"result\":{\"content\":[{\"type\":\"resource_link\",\"uri\":"
                     "\"beta+file:///a\"},{\"type\":\"resource\",\"resource\":{\"uri\":"
                     "\"beta+file:///b\",\"text\":\"x\"}},{\"type\":\"text\",\"text\":"
                     "\"file:///c\"}]}}");
    ck_assert_str_eq(outbound(&m, prompt, "prompts/get"),
                     "{\"id\":2,\"result\":{\"messages\":[{\"role\":\"user\",\"content\":"
                     "{\"type\":\"resource\",\"resource\":{\"uri\":\"beta+file:///d\"}}}]}}");
    ck_assert_str_eq(outbound(&un, call, "tools/call"), call);
    ck_assert_str_eq(outbound(&m, call, NULL), call);
}
END_TEST

START_TEST(test_outbound_untouched)
{
    static const char *const same[] = {
        "{\"method\":\"notifications/progress\",\"params\":{\"progressToken\":5,\"progress\":1}}",
        "{\"method\":\"notifications/tools/list_changed\"}",
        "{\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}",
        "{\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"file:///a\"}]}}",
        "{\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no\"}}",
        "{\"id\":{\"a\":1},\"method\":\"roots/list\"}",
        "{\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":null}}",
        "[{\"id\":1,\"method\":\"roots/list\"}]",
    };
    mcp_fed_member_t m = member("beta", "b_");
    size_t i;

    for (i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        ck_assert_str_eq(outbound(&m, same[i], i == 3 ? "tools/call" : NULL), same[i]);
    }
}
END_TEST

/* ---- initialize --------------------------------------------------------------------------- */

START_TEST(test_merge_initialize)
{
    json_object *res[4] = {
        parse("{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":{\"listChanged\":"
              "false},\"logging\":{},\"experimental\":{\"x\":{\"v\":1}},\"tasks\":{\"list\":{}}},"
              "\"serverInfo\":{\"name\":\"a\"},\"instructions\":\"Use a.\"}"),
        NULL,
        parse("{\"capabilities\":{\"tools\":{\"listChanged\":true},\"resources\":{\"subscribe\":"
              "true},\"prompts\":{},\"completions\":{},\"experimental\":{\"x\":{\"v\":2},\"y\":1},"
              "\"sampling\":{}},\"instructions\":\"\"}"),
        parse("{\"capabilities\":{\"resources\":{\"listChanged\":true}},\"instructions\":"
              "\"Use c.\\nCarefully.\"}"),
    };
    const char *names[4] = { "alpha", "beta", "gamma", "delta" };
    json_object *info = parse("{\"name\":\"gateway\",\"version\":\"1\"}"), *out;

    out = mcp_fed_merge_initialize(pool, res, names, 4, "2025-11-25", info);
    ck_assert_str_eq(text(out), "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{"
                                "\"experimental\":{\"x\":{\"v\":1},\"y\":1},\"logging\":{},"
                                "\"completions\":{},\"prompts\":{},\"resources\":{\"subscribe\":"
                                "true,\"listChanged\":true},\"tools\":{\"listChanged\":true}},"
                                "\"serverInfo\":{\"name\":\"gateway\",\"version\":\"1\"},"
                                "\"instructions\":\"alpha: Use a.\\n\\ndelta: Use c.\\n"
                                "Carefully.\"}");
    json_object_put(out);
}
END_TEST

START_TEST(test_merge_initialize_nothing)
{
    json_object *res[2] = { NULL, parse("{\"capabilities\":{\"tools\":true}}") };
    const char *names[2] = { "alpha", "beta" };
    json_object *out;

    out = mcp_fed_merge_initialize(pool, res, names, 2, "2025-06-18", NULL);
    ck_assert_str_eq(text(out), "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}");
    json_object_put(out);
}
END_TEST

static Suite *federation_suite(void)
{
    Suite *s = suite_create("mcp_federation");
    TCase *names = tcase_create("names"), *uris = tcase_create("uris"), *ids = tcase_create("ids");
    TCase *cursors = tcase_create("cursors"), *lists = tcase_create("lists");
    TCase *routes = tcase_create("route"), *out = tcase_create("outbound");
    TCase *init = tcase_create("initialize");
    TCase *all[] = { names, uris, ids, cursors, lists, routes, out, init };
    size_t i;

    tcase_add_test(names, test_name_valid);
    tcase_add_test(names, test_expose_prefix);
    tcase_add_test(names, test_resolve_longest_prefix);
    tcase_add_test(names, test_resolve_unprefixed_fallback);
    tcase_add_test(names, test_resolve_prefix_does_not_fall_back);
    tcase_add_test(names, test_deny_wins_over_allow);
    tcase_add_test(names, test_rename_inversion);
    tcase_add_test(names, test_rename_shadow_and_swap);
    tcase_add_test(uris, test_uri_round_trip);
    tcase_add_test(uris, test_uri_template);
    tcase_add_test(uris, test_uri_unknown_scheme_goes_unprefixed);
    tcase_add_test(ids, test_tag_number_vs_string);
    tcase_add_test(ids, test_tag_round_trip);
    tcase_add_test(ids, test_tag_refuses);
    tcase_add_test(ids, test_untag_refuses);
    tcase_add_test(cursors, test_cursor_round_trip);
    tcase_add_test(cursors, test_cursor_encode_refuses);
    tcase_add_test(cursors, test_cursor_decode_bad_base64);
    tcase_add_test(cursors, test_cursor_decode_bad_json);
    tcase_add_test(cursors, test_cursor_decode_limits);
    tcase_add_test(lists, test_list_rewrite_tools);
    tcase_add_test(lists, test_list_rewrite_prompts_unprefixed);
    tcase_add_test(lists, test_list_rewrite_resources_and_templates);
    tcase_add_test(lists, test_list_rewrite_malformed);
    tcase_add_test(lists, test_list_merge_next_cursor);
    tcase_add_test(lists, test_list_merge_collisions);
    tcase_add_test(lists, test_list_merge_refuses);
    tcase_add_test(routes, test_method_kind);
    tcase_add_test(routes, test_route_tools_and_prompts);
    tcase_add_test(routes, test_route_resources);
    tcase_add_test(routes, test_route_completion);
    tcase_add_test(routes, test_route_unknown);
    tcase_add_test(routes, test_route_malformed);
    tcase_add_test(out, test_outbound_request_tagged);
    tcase_add_test(out, test_outbound_resources_updated);
    tcase_add_test(out, test_outbound_cancelled);
    tcase_add_test(out, test_outbound_resources_read_response);
    tcase_add_test(out, test_outbound_content_uris);
    tcase_add_test(out, test_outbound_untouched);
    tcase_add_test(init, test_merge_initialize);
    tcase_add_test(init, test_merge_initialize_nothing);
    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        tcase_add_checked_fixture(all[i], setup, teardown);
        suite_add_tcase(s, all[i]);
    }
    return s;
}

int main(void)
{
    return mcp_unit_run(federation_suite());
}
