/* Unit tests for the console's pure parts: mcp_console (the query, the pages), mcp_html (text
 * into a page) and mcp_plot (the SVG plots). The pages are rendered from documents shaped like
 * the ones mcp_store_console's statements make; what matters is that data never becomes markup,
 * whatever it holds, and that bad queries are refused with a reason. */
#include <check.h>
#include <string.h>

#include <apr_pools.h>
#include <apr_strings.h>

#include "mcp_console.h"
#include "mcp_html.h"
#include "mcp_jsonrpc.h"
#include "mcp_plot.h"
#include "unit_main.h"
#include "unit_pool.h"

static int parses(const char *args, mcp_console_query_t *q)
{
    const char *problem;
    int rv = mcp_console_parse(pool, args, q, &problem);

    ck_assert(rv == 0 ? problem == NULL : problem != NULL);
    return rv == 0;
}

static const char *problem_of(const char *args)
{
    mcp_console_query_t q;
    const char *problem;

    ck_assert_int_eq(mcp_console_parse(pool, args, &q, &problem), -1);
    return problem;
}

/* ---- the query ---------------------------------------------------------------------------- */

START_TEST(test_parse_defaults_and_pages)
{
    mcp_console_query_t q;

    ck_assert(parses(NULL, &q));
    ck_assert_int_eq(q.page, MCP_CONSOLE_OVERVIEW);
    ck_assert(!q.json);
    ck_assert(parses("", &q));
    ck_assert(parses("format=json", &q));
    ck_assert(q.json && q.page == MCP_CONSOLE_OVERVIEW);
    ck_assert(parses("page=sessions&q=al%20ice+x&state=live", &q));
    ck_assert_int_eq(q.page, MCP_CONSOLE_SESSIONS);
    ck_assert_str_eq(q.q, "al ice x");
    ck_assert_str_eq(q.state, "live");
    ck_assert_ptr_null(q.before);
    ck_assert(parses("before=2026-12-02T08%3A40%3A45.643732%2B00%3A00&page=sessions", &q));
    ck_assert_str_eq(q.before, "2026-12-02T08:40:45.643732+00:00");
    ck_assert(parses("page=session&s=4df9b92d", &q));
    ck_assert_str_eq(q.session, "4df9b92d");
    ck_assert(q.after == -1);
    ck_assert(parses("page=session&s=4df9b92d79e9ad83&after=328&format=json", &q));
    ck_assert(q.after == 328 && q.json);
    ck_assert(parses("page=stream&id=1796200845000023&after=0", &q));
    ck_assert(q.stream == 1796200845000023LL && q.after == 0);
    ck_assert(parses("page=tools&window=24h", &q));
    ck_assert_int_eq(q.window_secs, 86400);
    ck_assert(parses("page=tools", &q));
    ck_assert_int_eq(q.window_secs, 3600);
    ck_assert(parses("asset=console.css", &q));
    ck_assert_int_eq(q.page, MCP_CONSOLE_STYLESHEET);
}
END_TEST

START_TEST(test_parse_refuses_with_a_reason)
{
    ck_assert_ptr_nonnull(strstr(problem_of("page=nope"), "page:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=session"), "s:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=session&s=XYZXYZXY"), "s:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=session&s=abc"), "s:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=session&s=0123456789abcdef0123456789abcdef0"),
                                 "s:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=stream"), "id:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=stream&id=-1"), "id:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=stream&id=0"), "id:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=stream&id=99999999999999999999"), "id:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=stream&id=1&after=x"), "after:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=tools&window=2h"), "window:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&state=dead"), "state:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&before=now();drop"), "before:"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=overview&q=x"), "no such parameter"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=tools&id=1"), "no such parameter"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&page=tools"), "more than once"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&q=a%00b"), "%-escape"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&q=a%2"), "%-escape"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&q=a%zz"), "%-escape"));
    ck_assert_ptr_nonnull(strstr(problem_of("page=sessions&q=%ff"), "q:"));
    ck_assert_ptr_nonnull(strstr(problem_of("format=xml"), "format:"));
    {
        /* A refusal says whether JSON was asked for, wherever format=json stood. */
        mcp_console_query_t q;
        const char *problem;

        ck_assert_int_eq(mcp_console_parse(pool, "format=json&page=nope", &q, &problem), -1);
        ck_assert(q.json);
        ck_assert_int_eq(mcp_console_parse(pool, "page=nope&format=json", &q, &problem), -1);
        ck_assert(q.json);
        ck_assert_int_eq(mcp_console_parse(pool, "page=nope&xformat=jsonx", &q, &problem), -1);
        ck_assert(!q.json);
    }
    ck_assert_ptr_nonnull(strstr(problem_of("asset=../etc/passwd"), "asset:"));
    ck_assert_ptr_nonnull(strstr(problem_of("asset=console.css&page=tools"), "asset:"));
    /* A parameter's name is quoted in the reason, never repeated raw. */
    ck_assert_ptr_null(strchr(problem_of("page=tools&%0A%3Cb%3E=1"), '\n'));
}
END_TEST

START_TEST(test_links_carry_the_query)
{
    mcp_console_query_t q;

    ck_assert(parses("page=sessions&q=a%26b%3Dc%20%C3%A9&state=ended", &q));
    ck_assert_str_eq(mcp_console_link(pool, &q, 0),
                     "?page=sessions&q=a%26b%3Dc%20%C3%A9&state=ended");
    ck_assert(parses(mcp_console_link(pool, &q, 1) + 1, &q));
    ck_assert_str_eq(q.q, "a&b=c \xc3\xa9");
    ck_assert(q.json);
    ck_assert(parses("page=session&s=4df9b92d&after=7", &q));
    ck_assert_str_eq(mcp_console_link(pool, &q, 1),
                     "?page=session&s=4df9b92d&after=7&format=json");
}
END_TEST

/* ---- text into a page ------------------------------------------------------------------- */

START_TEST(test_html_text_is_never_markup)
{
    mcp_html_t *h = mcp_html_create(pool);
    static const char nasty[] = "<script>alert(1)</script>&\"'\0\x01\x7f\xff\xc3\xa9";

    mcp_html_raw(h, "<p title=\"");
    mcp_html_textn(h, nasty, sizeof(nasty) - 1);
    mcp_html_raw(h, "\">");
    mcp_html_text(h, NULL);
    ck_assert_str_eq(mcp_html_get(h, NULL),
                     "<p title=\"&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#39;"
                     "\\x00\\x01\\x7f\\xff\xc3\xa9\">");
}
END_TEST

START_TEST(test_html_grows)
{
    mcp_html_t *h = mcp_html_create(pool);
    apr_size_t len;
    int i;

    for (i = 0; i < 10000; i++) {
        mcp_html_text(h, "<0123456789>");
    }
    ck_assert_uint_eq(strlen(mcp_html_get(h, &len)), 10000 * 18);
    ck_assert_uint_eq(len, 10000 * 18);
}
END_TEST

/* ---- plots ---------------------------------------------------------------------------------- */

static int count(const char *s, const char *what)
{
    int n = 0;

    for (; (s = strstr(s, what)); s += strlen(what)) {
        n++;
    }
    return n;
}

START_TEST(test_plot_ceiling)
{
    ck_assert(mcp_plot_ceiling(0) == 1);
    ck_assert(mcp_plot_ceiling(-3) == 1);
    ck_assert(mcp_plot_ceiling(1) == 1);
    ck_assert(mcp_plot_ceiling(1.01) == 2);
    ck_assert(mcp_plot_ceiling(3) == 5);
    ck_assert(mcp_plot_ceiling(125) == 200);
    ck_assert(mcp_plot_ceiling(500) == 500);
    ck_assert(mcp_plot_ceiling(0.07) > 0.0999 && mcp_plot_ceiling(0.07) < 0.1001);
}
END_TEST

START_TEST(test_plot_marks_and_labels)
{
    mcp_html_t *h = mcp_html_create(pool);
    double calls[3] = { 1, 0, 4 }, errors[3] = { 1, 0, -2 };
    const char *labels[3] = { "08:00", "<b>", "08:02" };
    mcp_plot_series_t s[2] = { { "calls", "s-calls", calls }, { "errors", "s-errors", errors } };
    const char *svg;

    mcp_plot_columns(h, "calls & errors", 3, labels, s, 2, "calls");
    svg = mcp_html_get(h, NULL);
    /* a mark per positive value: 1+1, none, 4 (a negative value is none) */
    ck_assert_int_eq(count(svg, "<rect "), 3);
    ck_assert_ptr_null(strstr(svg, "<b>"));
    ck_assert_ptr_nonnull(strstr(svg, "calls &amp; errors"));
    ck_assert_ptr_nonnull(strstr(svg, ">5<"));   /* the scale's top: 4+0 rounded up */
    ck_assert_ptr_null(strstr(svg, "style="));   /* the CSP allows no inline style */

    h = mcp_html_create(pool);
    {
        double offsets[4] = { 0, 0, 20.5, 61.3 };
        const char *classes[4] = { "m-in", "m-priming", "m-notification", "m-result" };
        const char *tips[4] = { "a", "b", "<script>", "d" };

        mcp_plot_timeline(h, "t", 4, offsets, classes, tips);
    }
    svg = mcp_html_get(h, NULL);
    ck_assert_int_eq(count(svg, "<circle "), 4);
    ck_assert_ptr_null(strstr(svg, "<script>"));
    ck_assert_ptr_nonnull(strstr(svg, ">61.3 ms<"));

    /* Offsets out of order, one of them huge: every mark on the axis (APR's %f of 1e300 would
     * have dropped the rest of the element: fuzz_console). */
    h = mcp_html_create(pool);
    {
        double offsets[3] = { 0, 1e300, 5 };
        const char *classes[3] = { "m-in", "m-notification", "m-result" };
        const char *tips[3] = { "a", "b", "c" };

        mcp_plot_timeline(h, "t", 3, offsets, classes, tips);
    }
    svg = mcp_html_get(h, NULL);
    ck_assert_int_eq(count(svg, "<circle "), 3);
    ck_assert_int_eq(count(svg, "</circle>"), 3);
    ck_assert_int_eq(count(svg, "cx=\"632.0\""), 2);
    ck_assert_ptr_null(strstr(svg, "0000000000"));

    h = mcp_html_create(pool);
    mcp_plot_bars(h, "none", 0, NULL, s, 0, "ms");     /* no series: nothing drawn, no crash */
    ck_assert_str_eq(mcp_html_get(h, NULL), "");
}
END_TEST

/* ---- pages ---------------------------------------------------------------------------------- */

static json_object *doc_of(const char *text)
{
    json_object *doc = mcp_jsonrpc_parse_value(pool, text, strlen(text));

    ck_assert_ptr_nonnull(doc);
    return doc;
}

/* A transcript whose messages and client info are hostile: every one of them comes out as
 * text. */
START_TEST(test_session_page_renders_hostile_content_as_text)
{
    mcp_console_query_t q;
    const char *html;
    json_object *doc = doc_of(
        "{\"page\":\"session\",\"generated_at\":\"2026-12-02T08:41:32.585913+00:00\","
        "\"matches\":[{\"tag\":\"4df9b92d\",\"ref\":\"4df9b92d79e9ad83\"}],"
        "\"session\":{\"tag\":\"4df9b92d\",\"ref\":\"4df9b92d79e9ad83\","
        "\"user\":\"<img src=x onerror=alert(1)>\",\"client\":\"</dd><script>x()</script>\","
        "\"client_info\":\"{\\\"name\\\":\\\"<svg onload=alert(1)>\\\"}\","
        "\"client_capabilities\":\"{}\",\"server_info\":null,\"streams\":{\"request\":1},"
        "\"events\":3,\"state\":\"live\"},"
        "\"events\":["
        "{\"id\":1,\"time\":\"2026-12-02T08:40:45.959173+00:00\",\"direction\":\"in\","
        "\"kind\":\"message\",\"stream\":17,\"seq\":0,\"bytes\":1,"
        "\"text\":\"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":1,\\\"method\\\":\\\"<b>tools/call\\\","
        "\\\"params\\\":{\\\"<i>\\\":1}}\"},"
        "{\"id\":2,\"time\":\"2026-12-02T08:40:45.96+00:00\",\"direction\":\"out\","
        "\"kind\":\"priming\",\"stream\":17,\"seq\":1,\"event_id\":\"17-1\",\"bytes\":null,"
        "\"text\":null},"
        "{\"id\":3,\"time\":\"2026-12-02T08:40:45.97+00:00\",\"direction\":\"out\","
        "\"kind\":\"message\",\"stream\":17,\"seq\":2,\"event_id\":\"17-2\",\"bytes\":1,"
        "\"text\":\"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":1,\\\"result\\\":{\\\"content\\\":"
        "[{\\\"type\\\":\\\"text\\\",\\\"text\\\":\\\"<script>alert(1)</script>\\\\u0000"
        "</details></li>\\\"}]}}\"}],"
        "\"next\":2}");

    ck_assert(parses("page=session&s=4df9b92d", &q));
    html = mcp_console_html(pool, &q, doc, NULL);
    ck_assert_int_eq(count(html, "<script"), 0);
    ck_assert_int_eq(count(html, "<img"), 0);
    ck_assert_int_eq(count(html, "<svg"), 0);     /* no plot on this page, and none injected */
    ck_assert_int_eq(count(html, "<b>"), 1);       /* the header's own <b>mod_mcp</b> only */
    ck_assert_int_eq(count(html, "<i>"), 0);
    /* The texts are there, as text: the tool result's, its \u0000 as JSON writes it. */
    ck_assert_ptr_nonnull(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt;\\u0000"
                                       "&lt;/details&gt;&lt;/li&gt;"));
    ck_assert_ptr_nonnull(strstr(html, "&lt;img src=x onerror=alert(1)&gt;"));
    ck_assert_ptr_nonnull(strstr(html, "&lt;svg onload=alert(1)&gt;"));
    /* Every <details> and <li> the page opens, it closes: data cannot close one. */
    ck_assert_int_eq(count(html, "<details"), count(html, "</details>"));
    ck_assert_int_eq(count(html, "<li>") + count(html, "<li class"), count(html, "</li>"));
    ck_assert_ptr_nonnull(strstr(html, "priming event"));
    ck_assert_ptr_nonnull(strstr(html, "result #1"));
    ck_assert_ptr_nonnull(strstr(html, "&amp;after=2"));   /* the next page's link */
}
END_TEST

/* A message the store cut (bytes > the text's length) is shown as text, not parsed. */
START_TEST(test_cut_message_is_shown_as_text)
{
    mcp_console_query_t q;
    const char *html;
    json_object *doc = doc_of(
        "{\"page\":\"stream\",\"stream\":{\"id\":17,\"kind\":\"request\"},\"events\":["
        "{\"id\":3,\"direction\":\"out\",\"kind\":\"message\",\"seq\":2,\"offset_ms\":1.5,"
        "\"bytes\":900000,"
        "\"text\":\"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"result\\\":{\\\"a\\\":\\\"<\"}"
        "],\"next\":null}");

    ck_assert(parses("page=stream&id=17", &q));
    html = mcp_console_html(pool, &q, doc, NULL);
    ck_assert_ptr_nonnull(strstr(html, "900000 bytes, shown in part"));
    ck_assert_ptr_nonnull(strstr(html, "&quot;a&quot;:&quot;&lt;"));
    ck_assert_int_eq(count(html, "<circle "), 1);
    ck_assert_ptr_null(strstr(html, "Later messages"));
}
END_TEST

/* Every page renders from an empty document (the database had nothing, or a member is null)
 * without a crash, and says so. */
START_TEST(test_pages_render_from_empty_documents)
{
    static const char *const args[] = {
        "", "page=sessions", "page=session&s=0123abcd", "page=stream&id=1", "page=tools"
    };
    mcp_console_query_t q;
    apr_size_t len;
    int i;

    for (i = 0; i < 5; i++) {
        const char *html;

        ck_assert(parses(args[i], &q));
        html = mcp_console_html(pool, &q, doc_of("{}"), &len);
        ck_assert_uint_eq(strlen(html), len);
        ck_assert_ptr_nonnull(strstr(html, "</html>"));
        html = mcp_console_html(pool, &q, doc_of("{\"sessions\":null,\"events\":null,"
                                                 "\"tools\":null,\"session\":null}"), &len);
        ck_assert_ptr_nonnull(strstr(html, "</html>"));
    }
    /* Minutes whose time is missing or short (found by fuzz_console: a label was read past its
     * end). */
    ck_assert(parses("", &q));
    ck_assert_ptr_nonnull(strstr(mcp_console_html(pool, &q, doc_of(
        "{\"calls_per_minute\":[{\"minute\":\"2\"},{\"calls\":3},"
        "{\"minute\":\"2026-12-02T08:48:00+00:00\",\"calls\":1}]}"), &len), ">08:48:00 UTC<"));
    ck_assert_ptr_nonnull(strstr(mcp_console_error_html(pool, 400, "q: <bad>", &len),
                                 "q: &lt;bad&gt;"));
}
END_TEST

START_TEST(test_stylesheet)
{
    apr_size_t len;
    const char *css = mcp_console_css(&len);

    ck_assert_uint_eq(strlen(css), len);
    ck_assert_ptr_nonnull(strstr(css, ".s-calls"));
    ck_assert_ptr_null(strstr(css, "url("));    /* nothing fetched from anywhere */
    ck_assert_ptr_null(strstr(css, "@import"));
}
END_TEST

static Suite *console_suite(void)
{
    Suite *s = suite_create("mcp_console");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_parse_defaults_and_pages);
    tcase_add_test(tc, test_parse_refuses_with_a_reason);
    tcase_add_test(tc, test_links_carry_the_query);
    tcase_add_test(tc, test_html_text_is_never_markup);
    tcase_add_test(tc, test_html_grows);
    tcase_add_test(tc, test_plot_ceiling);
    tcase_add_test(tc, test_plot_marks_and_labels);
    tcase_add_test(tc, test_session_page_renders_hostile_content_as_text);
    tcase_add_test(tc, test_cut_message_is_shown_as_text);
    tcase_add_test(tc, test_pages_render_from_empty_documents);
    tcase_add_test(tc, test_stylesheet);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(console_suite());
}
