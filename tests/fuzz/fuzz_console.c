/* libFuzzer harness for the console's pages (mcp_console, mcp_html, mcp_plot): what an
 * attacker controls there is message content, client info, user and tool names — any text
 * inside the page's JSON document.
 *
 * Each input is a query string (first line) and a JSON document (the rest). Checked:
 *  1. mcp_console_parse keeps its contract: a reason exactly when it refuses; a query it takes
 *     makes a link (mcp_console_link) that it takes again, to the same page and format;
 *  2. whatever the document holds, every page renders it as a whole document whose markup is
 *     the page's own: every tag is one of the elements the console writes, with only the
 *     attributes it writes (so no <script>, no on...= handler, no inline style), every
 *     <details>, <li> and <svg> it opens closed, and no NUL byte in the output.
 * The document is rendered as each of the five pages (a document meant for one page read as
 * another is as hostile as it gets).
 */

#include "fuzz.h"

#include <json-c/json.h>

#include "mcp_console.h"
#include "mcp_jsonrpc.h"

static int count(const char *s, const char *what)
{
    int n = 0;

    for (; (s = strstr(s, what)); s += strlen(what)) {
        n++;
    }
    return n;
}

static int one_of(const char *s, apr_size_t n, const char *const *set)
{
    for (; *set; set++) {
        if (strlen(*set) == n && strncmp(s, *set, n) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Every '<' in a page starts a tag of the page's own (text has its '<' escaped): each is an
 * element the console writes, with attributes it writes, their values quoted. */
static void check_tags(const char *html)
{
    static const char *const elements[] = {
        "!DOCTYPE", "html", "head", "meta", "title", "link", "body", "header", "b", "a", "span",
        "main", "h1", "h2", "div", "p", "table", "tr", "th", "td", "dl", "dt", "dd", "form",
        "input", "select", "option", "button", "ul", "li", "details", "summary", "figure",
        "figcaption", "svg", "line", "text", "rect", "circle", NULL
    };
    static const char *const attributes[] = {
        "html", "class", "href", "rel", "charset", "name", "content", "lang", "type", "value",
        "placeholder", "method", "action", "selected", "open", "data-n", "viewBox", "role",
        "aria-label", "x", "y", "x1", "y1", "x2", "y2", "width", "height", "cx", "cy", "r",
        "text-anchor", NULL
    };
    const char *s = html;

    while ((s = strchr(s, '<'))) {
        apr_size_t n;

        s += 1 + (s[1] == '/');
        n = strspn(s, "!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
        FUZZ_CHECK(one_of(s, n, elements));
        s += n;
        for (;;) {
            s += strspn(s, " \n/");
            if (*s == '>') {
                break;
            }
            n = strcspn(s, "= >");
            FUZZ_CHECK(n > 0 && one_of(s, n, attributes));
            s += n;
            if (*s == '=') {
                FUZZ_CHECK(s[1] == '"');
                s = strchr(s + 2, '"');
                FUZZ_CHECK(s != NULL);
                s++;
            }
        }
    }
}

static void check_page(const char *html, apr_size_t len)
{
    FUZZ_CHECK(strlen(html) == len);
    FUZZ_CHECK(strstr(html, "</html>") != NULL);
    check_tags(html);
    FUZZ_CHECK(count(html, "<details") == count(html, "</details>"));
    FUZZ_CHECK(count(html, "<li>") + count(html, "<li class") == count(html, "</li>"));
    FUZZ_CHECK(count(html, "<svg") == count(html, "</svg>"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const pages[] = {
        "page=overview", "page=sessions&q=a", "page=session&s=0123abcd&after=3",
        "page=stream&id=17", "page=tools&window=5m"
    };
    apr_pool_t *p;
    char *fields[2];
    int n, i;
    mcp_console_query_t q, again;
    const char *problem, *link;
    json_object *doc;
    apr_size_t len;

    apr_pool_create(&p, fuzz_root());
    n = fuzz_fields(p, data, size, fields, 2);
    if (mcp_console_parse(p, fields[0], &q, &problem) == 0) {
        FUZZ_CHECK(problem == NULL);
        if (q.page != MCP_CONSOLE_STYLESHEET) {
            link = mcp_console_link(p, &q, q.json);
            FUZZ_CHECK(link[0] == '?');
            FUZZ_CHECK(mcp_console_parse(p, link + 1, &again, &problem) == 0);
            FUZZ_CHECK(again.page == q.page && again.json == q.json);
            FUZZ_CHECK(strcmp(again.q, q.q) == 0 && strcmp(again.state, q.state) == 0);
            FUZZ_CHECK(again.after == q.after && again.stream == q.stream);
        }
    }
    else {
        FUZZ_CHECK(problem != NULL && *problem);
    }
    doc = n > 1 ? mcp_jsonrpc_parse_value(p, fields[1], strlen(fields[1])) : NULL;
    if (doc) {
        for (i = 0; i < 5; i++) {
            FUZZ_CHECK(mcp_console_parse(p, pages[i], &q, &problem) == 0);
            check_page(mcp_console_html(p, &q, doc, &len), len);
        }
    }
    check_page(mcp_console_error_html(p, 400, fields[n - 1], &len), len);
    apr_pool_destroy(p);
    return 0;
}
