/* mcp_console — see mcp_console.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>
#include <apr_tables.h>

#include "mcp_console.h"
#include "mcp_html.h"
#include "mcp_jsonrpc.h"
#include "mcp_plot.h"
#include "mcp_text.h"

/* ---- the query ------------------------------------------------------------------------------ */

static const char *const page_names[] = {
    [MCP_CONSOLE_OVERVIEW] = "overview", [MCP_CONSOLE_SESSIONS] = "sessions",
    [MCP_CONSOLE_SESSION] = "session",   [MCP_CONSOLE_STREAM] = "stream",
    [MCP_CONSOLE_TOOLS] = "tools",       [MCP_CONSOLE_STYLESHEET] = "stylesheet",
};

static const struct {
    const char *name;
    int         secs;
} windows[] = { { "5m", 300 }, { "1h", 3600 }, { "24h", 86400 }, { "7d", 604800 } };

const char *mcp_console_page_name(mcp_console_page_t page)
{
    return page <= MCP_CONSOLE_STYLESHEET ? page_names[page] : "?";
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* s[0..n) with %XX and '+' decoded, in p; NULL when an escape is broken or decodes to NUL. */
static char *decode(apr_pool_t *p, const char *s, apr_size_t n)
{
    char *out = apr_palloc(p, n + 1), *o = out;
    apr_size_t i;

    for (i = 0; i < n; i++) {
        if (s[i] == '+') {
            *o++ = ' ';
        }
        else if (s[i] == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;

            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                return NULL;
            }
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        }
        else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

static int all_of(const char *s, const char *set)
{
    return *s && strspn(s, set) == strlen(s);
}

/* A decimal integer >= min without sign, spaces or excess digits. */
static int parse_int64(const char *s, apr_int64_t min, apr_int64_t *out)
{
    char *end;

    if (!all_of(s, "0123456789") || strlen(s) > 18) {
        return -1;
    }
    *out = apr_strtoi64(s, &end, 10);
    return *end || *out < min ? -1 : 0;
}

/* Which parameters each page takes (besides page and format). */
static int takes(mcp_console_page_t page, const char *key)
{
    switch (page) {
    case MCP_CONSOLE_SESSIONS:
        return !strcmp(key, "q") || !strcmp(key, "state") || !strcmp(key, "before");
    case MCP_CONSOLE_SESSION:
        return !strcmp(key, "s") || !strcmp(key, "after");
    case MCP_CONSOLE_STREAM:
        return !strcmp(key, "id") || !strcmp(key, "after");
    case MCP_CONSOLE_TOOLS:
        return !strcmp(key, "window");
    default:
        return 0;
    }
}

static const char *set_page(mcp_console_query_t *q, const char *v)
{
    int i;

    for (i = MCP_CONSOLE_OVERVIEW; i < MCP_CONSOLE_STYLESHEET; i++) {
        if (!strcmp(v, page_names[i])) {
            q->page = (mcp_console_page_t)i;
            return NULL;
        }
    }
    return "page: not one of overview, sessions, session, stream, tools";
}

/* One parameter of the page's own (page and format are read before). NULL, or the problem. */
static const char *set_param(apr_pool_t *p, mcp_console_query_t *q, const char *key,
                             const char *v)
{
    apr_size_t n = strlen(v);
    int i;

    if (!takes(q->page, key)) {
        return apr_psprintf(p, "%s: the %s page takes no such parameter",
                            mcp_text_quote(p, key, strlen(key), 40),
                            page_names[q->page]);
    }
    if (!strcmp(key, "q")) {
        if (n > 200 || !mcp_text_is_utf8(v, n)) {
            return "q: at most 200 bytes of UTF-8";
        }
        q->q = v;
    }
    else if (!strcmp(key, "state")) {
        if (strcmp(v, "all") && strcmp(v, "live") && strcmp(v, "ended")) {
            return "state: not one of all, live, ended";
        }
        q->state = v;
    }
    else if (!strcmp(key, "before")) {
        /* A time as the sessions list's "next" gives it; PostgreSQL reads it. */
        if (n > 40 || !all_of(v, "0123456789-:.+T ")) {
            return "before: not a time as a page's \"next\" gives it";
        }
        q->before = v;
    }
    else if (!strcmp(key, "s")) {
        if (n < 8 || n > 32 || !all_of(v, "0123456789abcdef")) {
            return "s: not a session's tag (8 to 32 lower-case hex digits)";
        }
        q->session = v;
    }
    else if (!strcmp(key, "after")) {
        if (parse_int64(v, 0, &q->after)) {
            return "after: not a non-negative integer";
        }
    }
    else if (!strcmp(key, "id")) {
        if (parse_int64(v, 1, &q->stream)) {
            return "id: not a stream id (a positive integer)";
        }
    }
    else if (!strcmp(key, "window")) {
        for (i = 0; i < (int)(sizeof(windows) / sizeof(windows[0])); i++) {
            if (!strcmp(v, windows[i].name)) {
                q->window = windows[i].name;
                q->window_secs = windows[i].secs;
                return NULL;
            }
        }
        return "window: not one of 5m, 1h, 24h, 7d";
    }
    return NULL;
}

typedef struct param_t {
    const char *key, *value;
} param_t;

int mcp_console_parse(apr_pool_t *p, const char *args, mcp_console_query_t *q,
                      const char **problem)
{
    apr_array_header_t *params = apr_array_make(p, 8, sizeof(param_t));
    const char *s = args ? args : "";
    int i, j;

    memset(q, 0, sizeof(*q));
    q->q = "";
    q->state = "all";
    q->after = -1;
    q->window = "1h";
    q->window_secs = 3600;
    *problem = NULL;
    /* Known before anything can be refused: a refusal comes in the form asked for. */
    for (; *s; s += strcspn(s, "&"), s += *s == '&') {
        q->json |= strncmp(s, "format=json", 11) == 0 && (s[11] == '&' || !s[11]);
    }
    s = args ? args : "";
    while (*s) {
        apr_size_t len = strcspn(s, "&"), klen = strcspn(s, "=");
        param_t *pm;

        if (len > 0) {
            pm = apr_array_push(params);
            klen = klen < len ? klen : len;
            pm->key = decode(p, s, klen);
            pm->value = klen < len ? decode(p, s + klen + 1, len - klen - 1) : "";
            if (!pm->key || !pm->value) {
                *problem = "the query string has a broken %-escape (or %00)";
                return -1;
            }
            for (j = 0; j < params->nelts - 1; j++) {
                if (!strcmp(APR_ARRAY_IDX(params, j, param_t).key, pm->key)) {
                    *problem = apr_psprintf(p, "%s: given more than once",
                                            mcp_text_quote(p, pm->key, strlen(pm->key), 40));
                    return -1;
                }
            }
        }
        s += len + (s[len] == '&');
    }
    /* page, asset and format first: what the others mean depends on the page. */
    for (i = 0; i < params->nelts; i++) {
        param_t *pm = &APR_ARRAY_IDX(params, i, param_t);

        if (!strcmp(pm->key, "page")) {
            *problem = set_page(q, pm->value);
        }
        else if (!strcmp(pm->key, "asset")) {
            if (strcmp(pm->value, "console.css") || params->nelts > 1) {
                *problem = "asset: only console.css, and nothing else with it";
            }
            q->page = MCP_CONSOLE_STYLESHEET;
        }
        else if (!strcmp(pm->key, "format")) {
            if (strcmp(pm->value, "json") && strcmp(pm->value, "html")) {
                *problem = "format: not one of html, json";
            }
            q->json = !strcmp(pm->value, "json");
        }
        if (*problem) {
            return -1;
        }
    }
    for (i = 0; i < params->nelts; i++) {
        param_t *pm = &APR_ARRAY_IDX(params, i, param_t);

        if (strcmp(pm->key, "page") && strcmp(pm->key, "asset") && strcmp(pm->key, "format")
            && (*problem = set_param(p, q, pm->key, pm->value))) {
            return -1;
        }
    }
    if (q->page == MCP_CONSOLE_SESSION && !q->session) {
        *problem = "s: the session page needs a session's tag";
    }
    else if (q->page == MCP_CONSOLE_STREAM && !q->stream) {
        *problem = "id: the stream page needs a stream id";
    }
    return *problem ? -1 : 0;
}

/* A query string value, percent-encoded (everything but unreserved characters). */
static const char *encode(apr_pool_t *p, const char *v)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = apr_palloc(p, strlen(v) * 3 + 1), *o = out;

    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
            || strchr("-._~", c)) {
            *o++ = (char)c;
        }
        else {
            *o++ = '%', *o++ = hex[c >> 4], *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

const char *mcp_console_link(apr_pool_t *p, const mcp_console_query_t *q, int json)
{
    const char *s = apr_pstrcat(p, "?page=", page_names[q->page], NULL);

    switch (q->page) {
    case MCP_CONSOLE_SESSIONS:
        if (*q->q) {
            s = apr_pstrcat(p, s, "&q=", encode(p, q->q), NULL);
        }
        if (strcmp(q->state, "all")) {
            s = apr_pstrcat(p, s, "&state=", q->state, NULL);
        }
        if (q->before) {
            s = apr_pstrcat(p, s, "&before=", encode(p, q->before), NULL);
        }
        break;
    case MCP_CONSOLE_SESSION:
        s = apr_pstrcat(p, s, "&s=", q->session, NULL);
        break;
    case MCP_CONSOLE_STREAM:
        s = apr_psprintf(p, "%s&id=%" APR_INT64_T_FMT, s, q->stream);
        break;
    case MCP_CONSOLE_TOOLS:
        s = apr_pstrcat(p, s, "&window=", q->window, NULL);
        break;
    default:
        break;
    }
    if (q->after >= 0 && (q->page == MCP_CONSOLE_SESSION || q->page == MCP_CONSOLE_STREAM)) {
        s = apr_psprintf(p, "%s&after=%" APR_INT64_T_FMT, s, q->after);
    }
    return json ? apr_pstrcat(p, s, "&format=json", NULL) : s;
}

/* ---- the stylesheet ------------------------------------------------------------------------- */

static const char css[] =
    ":root{--fg:#1d232b;--muted:#5b6675;--line:#d5dbe3;--bg:#f6f8fa;--card:#fff;"
    "--accent:#2458b3;--ok:#2e8540;--warn:#b7791f;--bad:#c53030}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);"
    "background:var(--bg)}\n"
    "header{background:#1d2b44;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;"
    "align-items:baseline;flex-wrap:wrap}\n"
    "header b{font-size:1.1em}header a{color:#cfe0ff;text-decoration:none}"
    "header a.here{color:#fff;border-bottom:2px solid #fff}\n"
    "header .gen{margin-left:auto;color:#9fb0cc;font-size:.85em}header .gen a{color:#cfe0ff}\n"
    "main{padding:1em 1.2em;max-width:1400px}\n"
    "h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.4em 0 .5em}\n"
    "a{color:var(--accent)}\n"
    ".cards{display:flex;gap:.8em;flex-wrap:wrap}\n"
    ".card{background:var(--card);border:1px solid var(--line);border-radius:6px;"
    "padding:.6em 1em;min-width:10em}\n"
    ".card .v{font-size:1.7em;font-weight:600}.card .k{color:var(--muted);font-size:.85em}\n"
    "table{border-collapse:collapse;background:var(--card);border:1px solid var(--line);"
    "margin:.3em 0}\n"
    "th,td{padding:.3em .7em;border-bottom:1px solid var(--line);text-align:left;"
    "vertical-align:top}\n"
    "th{background:#eef2f7;font-weight:600}td.n,th.n{text-align:right;"
    "font-variant-numeric:tabular-nums}\n"
    ".tag{font-family:ui-monospace,monospace}\n"
    ".ok{color:var(--ok)}.failing,.bad{color:var(--bad)}.idle{color:var(--muted)}\n"
    "dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em;"
    "background:var(--card);border:1px solid var(--line);padding:.6em 1em;border-radius:6px}\n"
    "dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}\n"
    "form.search{display:flex;gap:.5em;margin:.5em 0}\n"
    "form.search input[type=search]{width:24em;padding:.3em}\n"
    ".pager{margin:.6em 0}.muted{color:var(--muted)}\n"
    "figure.plot{background:var(--card);border:1px solid var(--line);border-radius:6px;"
    "margin:.5em 0;padding:.5em;max-width:900px}\n"
    "figure.plot svg{width:100%;height:auto;display:block}\n"
    "figcaption{color:var(--muted);font-size:.85em}\n"
    ".key{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 .8em;"
    "vertical-align:middle}\n"
    "svg .axis{stroke:#8895a7;stroke-width:1}svg text{font-size:11px;fill:#5b6675}\n"
    ".s-calls{fill:#4a7bd0;background:#4a7bd0}.s-errors{fill:#d9534f;background:#d9534f}\n"
    ".s-p50{fill:#7fb3f0;background:#7fb3f0}.s-p90{fill:#4a7bd0;background:#4a7bd0}"
    ".s-p99{fill:#1d3f7a;background:#1d3f7a}\n"
    ".m-in{fill:#6c757d}.m-priming{fill:#adb5bd}.m-notification{fill:#4a7bd0}"
    ".m-request{fill:#b7791f}.m-result{fill:#2e8540}.m-error{fill:#c53030}\n"
    ".events{list-style:none;padding:0;margin:0}\n"
    ".events>li{background:var(--card);border:1px solid var(--line);border-left:4px solid #adb5bd;"
    "margin:.25em 0;border-radius:4px}\n"
    ".events>li.in{border-left-color:#6c757d}.events>li.out{border-left-color:#4a7bd0}\n"
    ".events>li.err{border-left-color:#c53030}\n"
    ".events summary{padding:.3em .6em;cursor:pointer;display:flex;gap:1em;flex-wrap:wrap}\n"
    ".events summary .m{font-weight:600}.events summary .t{color:var(--muted);"
    "font-variant-numeric:tabular-nums}\n"
    ".json{font-family:ui-monospace,monospace;font-size:12.5px;white-space:pre-wrap;"
    "word-break:break-all;padding:.4em .8em .6em;border-top:1px solid var(--line)}\n"
    ".json details{display:inline}.json details>summary{display:inline;cursor:pointer;"
    "list-style:none}\n"
    ".json details:not([open])>summary::after{content:' \\2026 ' attr(data-n);"
    "color:var(--muted)}\n"
    ".json .m{display:block;padding-left:1.6em}\n"
    ".jk{color:#8a3ffc}.js{color:#0f7b3d}.jn{color:#b35900}.jl{color:#2458b3}\n"
    ".raw{white-space:pre-wrap;word-break:break-all}\n";

const char *mcp_console_css(apr_size_t *len)
{
    *len = sizeof(css) - 1;
    return css;
}

/* ---- reading the document ------------------------------------------------------------------- */

static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;

    return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v)
        ? v : NULL;
}

/* A member as text: strings as they are, numbers and booleans as JSON writes them, NULL for
 * null or absent (and for a string holding NUL: never the case in a document PostgreSQL made). */
static const char *text_of(apr_pool_t *p, json_object *o, const char *key)
{
    json_object *v = member(o, key);

    if (!v) {
        return NULL;
    }
    if (json_object_is_type(v, json_type_string)) {
        return mcp_jsonrpc_get_string(o, key);
    }
    return mcp_jsonrpc_to_string(p, v, NULL);
}

static apr_int64_t int_of(json_object *o, const char *key)
{
    json_object *v = member(o, key);

    return v ? json_object_get_int64(v) : 0;
}

/* A number of the document within what the page's formatter prints: APR's %f writes 80 digits
 * at most and, from about 1e79 on, drops the rest of its format string (a page's closing quotes
 * and tags with it: fuzz_console). Beyond +-1e15 it is +-1e15, NaN is 0; no duration, count or
 * rate the store gives comes near. */
static double bounded(double v)
{
    return v != v ? 0 : v > 1e15 ? 1e15 : v < -1e15 ? -1e15 : v;
}

static double double_of(json_object *o, const char *key)
{
    json_object *v = member(o, key);

    return v ? bounded(json_object_get_double(v)) : 0;
}

static int array_length(json_object *a)
{
    return a && json_object_is_type(a, json_type_array) ? (int)json_object_array_length(a) : 0;
}

static json_object *item(json_object *a, int i)
{
    return json_object_array_get_idx(a, (size_t)i);
}

/* PostgreSQL's timestamps ("2026-12-02T08:40:45.954649+00:00", UTC) cut to `digits`
 * characters: 19 for the second, 23 for the millisecond. */
static const char *cut_time(apr_pool_t *p, const char *t, apr_size_t digits)
{
    char *s;

    if (!t) {
        return "-";
    }
    s = apr_pstrndup(p, t, strcspn(t, "+") < digits ? strcspn(t, "+") : digits);
    if (strlen(s) >= 19 && s[10] == 'T') {
        s[10] = ' ';
    }
    return s;
}

static const char *when(apr_pool_t *p, const char *t)
{
    return cut_time(p, t, 19);
}

/* ---- building blocks -------------------------------------------------------------------- */

static void td_text(mcp_html_t *h, const char *v)
{
    mcp_html_raw(h, "<td>");
    mcp_html_text(h, v ? v : "-");
    mcp_html_raw(h, "</td>");
}

static void td_int(mcp_html_t *h, apr_int64_t v)
{
    mcp_html_rawf(h, "<td class=\"n\">%" APR_INT64_T_FMT "</td>", v);
}

static void td_ms(mcp_html_t *h, json_object *o, const char *key)
{
    json_object *v = member(o, key);

    if (v) {
        mcp_html_rawf(h, "<td class=\"n\">%.1f</td>", bounded(json_object_get_double(v)));
    }
    else {
        mcp_html_raw(h, "<td class=\"n\">-</td>");
    }
}

static void card(mcp_html_t *h, const char *label, apr_int64_t value)
{
    mcp_html_rawf(h, "<div class=\"card\"><div class=\"v\">%" APR_INT64_T_FMT "</div>"
                  "<div class=\"k\">", value);
    mcp_html_text(h, label);
    mcp_html_raw(h, "</div></div>\n");
}

static void fact(mcp_html_t *h, const char *label, const char *value)
{
    mcp_html_raw(h, "<dt>");
    mcp_html_text(h, label);
    mcp_html_raw(h, "</dt><dd>");
    mcp_html_text(h, value ? value : "-");
    mcp_html_raw(h, "</dd>\n");
}

/* A link to a session by its handle, showing its tag. */
static void session_link(mcp_html_t *h, const char *ref, const char *tag)
{
    if (!ref) {
        mcp_html_raw(h, "-");
        return;
    }
    mcp_html_raw(h, "<a class=\"tag\" href=\"?page=session&amp;s=");
    mcp_html_text(h, ref);
    mcp_html_raw(h, "\">");
    mcp_html_text(h, tag ? tag : ref);
    mcp_html_raw(h, "</a>");
}

static void stream_link(mcp_html_t *h, const char *id)
{
    if (!id) {
        mcp_html_raw(h, "-");
        return;
    }
    mcp_html_raw(h, "<a class=\"tag\" href=\"?page=stream&amp;id=");
    mcp_html_text(h, id);
    mcp_html_raw(h, "\">");
    mcp_html_text(h, id);
    mcp_html_raw(h, "</a>");
}

/* ---- JSON, pretty-printed and folded ------------------------------------------------------- */

#define FOLD_DEPTH 4        /* containers deeper than this start folded ...                  */
#define FOLD_MEMBERS 12     /* ... and so do bigger ones, at any depth below the top         */

static void json_html(mcp_html_t *h, json_object *v, int depth);

static void json_scalar(mcp_html_t *h, json_object *v)
{
    apr_pool_t *p = mcp_html_pool(h);
    const char *cls = !v ? "jl" : json_object_is_type(v, json_type_string) ? "js"
                    : json_object_is_type(v, json_type_boolean) ? "jl" : "jn";

    mcp_html_rawf(h, "<span class=\"%s\">", cls);
    mcp_html_text(h, v ? mcp_jsonrpc_to_string(p, v, NULL) : "null");
    mcp_html_raw(h, "</span>");
}

static void open_container(mcp_html_t *h, int n, int depth, char bracket)
{
    mcp_html_rawf(h, "<details%s><summary data-n=\"%d\">%c</summary><span class=\"m\">",
                  depth < FOLD_DEPTH && (depth == 0 || n <= FOLD_MEMBERS) ? " open" : "", n,
                  bracket);
}

static void json_html(mcp_html_t *h, json_object *v, int depth)
{
    apr_pool_t *p = mcp_html_pool(h);
    int n, i = 0;

    if (v && json_object_is_type(v, json_type_object)
        && (n = json_object_object_length(v)) > 0) {
        open_container(h, n, depth, '{');
        json_object_object_foreach(v, key, value) {
            json_object *k = json_object_new_string(key);

            mcp_html_raw(h, "<span class=\"jk\">");
            mcp_html_text(h, mcp_jsonrpc_to_string(p, k, NULL));
            mcp_html_raw(h, "</span>: ");
            json_object_put(k);
            json_html(h, value, depth + 1);
            mcp_html_raw(h, ++i < n ? ",\n" : "\n");
        }
        mcp_html_raw(h, "</span></details>}");
    }
    else if (v && json_object_is_type(v, json_type_array)
             && (n = (int)json_object_array_length(v)) > 0) {
        open_container(h, n, depth, '[');
        for (i = 0; i < n; i++) {
            json_html(h, item(v, i), depth + 1);
            mcp_html_raw(h, i + 1 < n ? ",\n" : "\n");
        }
        mcp_html_raw(h, "</span></details>]");
    }
    else if (v && json_object_is_type(v, json_type_object)) {
        mcp_html_raw(h, "{}");
    }
    else if (v && json_object_is_type(v, json_type_array)) {
        mcp_html_raw(h, "[]");
    }
    else {
        json_scalar(h, v);
    }
}

/* A message's text: folded JSON, or the text itself when it is not JSON (or was cut). */
static void message_html(mcp_html_t *h, const char *text, json_object *parsed, int cut)
{
    mcp_html_raw(h, "<div class=\"json\">");
    if (parsed && !cut) {
        json_html(h, parsed, 0);
    }
    else if (text) {
        mcp_html_raw(h, "<span class=\"raw\">");
        mcp_html_text(h, text);
        mcp_html_raw(h, "</span>");
    }
    else {
        mcp_html_raw(h, "<span class=\"muted\">no content (a priming event: the stream's "
                     "first id, for a client to resume from)</span>");
    }
    mcp_html_raw(h, "</div>");
}

/* What a message is, in a few words ("tools/call #3", "result #3", "error -32602 #3"). */
static const char *message_summary(apr_pool_t *p, json_object *m, const char **cls)
{
    const char *method = mcp_jsonrpc_get_string(m, "method");
    json_object *id = member(m, "id"), *error = member(m, "error"), *result = member(m, "result");
    const char *idtext = id ? apr_pstrcat(p, " #", mcp_jsonrpc_to_string(p, id, NULL), NULL)
                            : "";

    *cls = "";
    if (!m || !json_object_is_type(m, json_type_object)) {
        return json_object_is_type(m, json_type_array) ? "batch" : "not a JSON-RPC message";
    }
    if (method) {
        return apr_pstrcat(p, method, idtext, NULL);
    }
    if (error) {
        *cls = "err";
        return apr_pstrcat(p, "error ", text_of(p, error, "code") ? text_of(p, error, "code")
                           : "?", idtext, NULL);
    }
    if (result) {
        json_object *is_error = member(result, "isError");

        if (is_error && json_object_get_boolean(is_error)) {
            *cls = "err";
            return apr_pstrcat(p, "result (tool error)", idtext, NULL);
        }
        return apr_pstrcat(p, "result", idtext, NULL);
    }
    return "message";
}

/* The store cut the event's text (its size says more than the text holds). */
static int event_cut(apr_pool_t *p, json_object *e)
{
    const char *text = text_of(p, e, "text");

    return text && int_of(e, "bytes") > (apr_int64_t)strlen(text);
}

/* An event's message, parsed (once per page: the caller keeps it); NULL for a priming row, a
 * text the store cut, or one that is not JSON. */
static json_object *event_message(apr_pool_t *p, json_object *e)
{
    const char *text = text_of(p, e, "text");

    return text && !event_cut(p, e) ? mcp_jsonrpc_parse_value(p, text, strlen(text)) : NULL;
}

/* What an event is, in a few words, from its parsed message m (and its class: "err" or ""). */
static const char *event_summary(apr_pool_t *p, json_object *e, json_object *m,
                                 const char **cls)
{
    const char *kind = text_of(p, e, "kind");

    *cls = "";
    return kind && !strcmp(kind, "priming") ? "priming event"
         : m ? message_summary(p, m, cls) : "message";
}

/* One event of a transcript or a stream (m: its message, event_message): its summary line,
 * then the message, folded. */
static void event_html(mcp_html_t *h, json_object *e, json_object *m, int with_stream)
{
    apr_pool_t *p = mcp_html_pool(h);
    const char *text = text_of(p, e, "text"), *dir = text_of(p, e, "direction"), *cls;
    const char *summary = event_summary(p, e, m, &cls);
    apr_int64_t bytes = int_of(e, "bytes");
    int cut = event_cut(p, e);

    mcp_html_raw(h, "<li class=\"");
    mcp_html_text(h, dir);
    mcp_html_raw(h, *cls ? " " : "");
    mcp_html_text(h, cls);
    mcp_html_raw(h, "\"><details><summary><span class=\"t\">");
    mcp_html_text(h, cut_time(p, text_of(p, e, "time"), 23));
    mcp_html_raw(h, "</span><span>");
    mcp_html_raw(h, dir && !strcmp(dir, "in") ? "&#8594; from the client"
                                              : "&#8592; to the client");
    mcp_html_raw(h, "</span><span class=\"m\">");
    mcp_html_text(h, summary);
    mcp_html_raw(h, "</span>");
    if (with_stream && member(e, "stream") && text_of(p, e, "stream")) {
        mcp_html_raw(h, "<span>stream ");
        stream_link(h, text_of(p, e, "stream"));
        mcp_html_raw(h, "</span>");
    }
    if (text_of(p, e, "event_id")) {
        mcp_html_raw(h, "<span class=\"muted\">event ");
        mcp_html_text(h, text_of(p, e, "event_id"));
        mcp_html_raw(h, "</span>");
    }
    if (member(e, "offset_ms")) {
        mcp_html_rawf(h, "<span class=\"muted\">+%.1f ms</span>", double_of(e, "offset_ms"));
    }
    if (text) {
        mcp_html_rawf(h, "<span class=\"muted\">%" APR_INT64_T_FMT " bytes%s</span>", bytes,
                      cut ? ", shown in part" : "");
    }
    mcp_html_raw(h, "</summary>");
    message_html(h, text, m, cut);
    mcp_html_raw(h, "</details></li>\n");
}

/* ---- the frame ------------------------------------------------------------------------------ */

static void frame_open(mcp_html_t *h, const mcp_console_query_t *q, const char *title,
                       json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    static const struct {
        mcp_console_page_t page;
        const char *label;
    } nav[] = { { MCP_CONSOLE_OVERVIEW, "Overview" }, { MCP_CONSOLE_SESSIONS, "Sessions" },
                { MCP_CONSOLE_TOOLS, "Tools" } };
    int i;

    mcp_html_raw(h, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width\">"
                 "<meta name=\"referrer\" content=\"no-referrer\"><title>");
    mcp_html_text(h, title);
    mcp_html_raw(h, " · mod_mcp console</title>"
                 "<link rel=\"stylesheet\" href=\"?asset=console.css\"></head>\n<body><header>"
                 "<b>mod_mcp</b>");
    for (i = 0; i < 3; i++) {
        mcp_html_rawf(h, "<a href=\"?page=%s\"%s>%s</a>", page_names[nav[i].page],
                      q->page == nav[i].page ? " class=\"here\"" : "", nav[i].label);
    }
    mcp_html_raw(h, "<span class=\"gen\">");
    if (doc) {
        mcp_html_raw(h, "as of ");
        mcp_html_text(h, when(p, text_of(p, doc, "generated_at")));
        mcp_html_raw(h, " UTC · <a href=\"");
        mcp_html_text(h, mcp_console_link(p, q, 1));
        mcp_html_raw(h, "\">JSON</a>");
    }
    mcp_html_raw(h, "</span></header>\n<main>\n<h1>");
    mcp_html_text(h, title);
    mcp_html_raw(h, "</h1>\n");
}

static const char *frame_close(mcp_html_t *h, apr_size_t *len)
{
    mcp_html_raw(h, "</main></body></html>\n");
    return mcp_html_get(h, len);
}

/* ---- overview ------------------------------------------------------------------------------- */

static void overview_processes(mcp_html_t *h, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *owners = member(doc, "owners"), *host = member(doc, "host");
    json_object *children = member(host, "children");
    int i, n;

    mcp_html_raw(h, "<h2>Processes</h2>\n<p class=\"muted\">Every host's processes that own "
                 "open streams or serve followers (from PostgreSQL):</p>\n");
    if ((n = array_length(owners)) == 0) {
        mcp_html_raw(h, "<p class=\"muted\">No open stream anywhere.</p>\n");
    }
    else {
        mcp_html_raw(h, "<table><tr><th>Process (host:pid)</th><th class=\"n\">Open streams</th>"
                     "<th class=\"n\">Followers</th></tr>\n");
        for (i = 0; i < n; i++) {
            json_object *o = item(owners, i);

            mcp_html_raw(h, "<tr>");
            td_text(h, text_of(p, o, "owner"));
            td_int(h, int_of(o, "streams"));
            td_int(h, int_of(o, "followers"));
            mcp_html_raw(h, "</tr>\n");
        }
        mcp_html_raw(h, "</table>\n");
    }
    mcp_html_raw(h, "<p class=\"muted\">This host's httpd children (shared memory):</p>\n"
                 "<table><tr><th>PID</th><th>Listener</th><th class=\"n\">DB connections in "
                 "use</th><th class=\"n\">Parked streams</th><th class=\"n\">Detached exchanges"
                 "</th><th class=\"n\">Wake-ups</th><th class=\"n\">Last wake-up (s ago)</th>"
                 "</tr>\n");
    for (i = 0, n = array_length(children); i < n; i++) {
        json_object *c = item(children, i);

        mcp_html_raw(h, "<tr>");
        td_text(h, text_of(p, c, "pid"));
        td_text(h, text_of(p, c, "listener"));
        td_int(h, int_of(c, "db_in_use"));
        td_int(h, int_of(c, "parked"));
        td_int(h, int_of(c, "detached"));
        td_int(h, int_of(c, "wakeups"));
        mcp_html_raw(h, "<td class=\"n\">");
        mcp_html_text(h, text_of(p, c, "last_wakeup_ago_s") ? text_of(p, c, "last_wakeup_ago_s")
                                                            : "-");
        mcp_html_raw(h, "</td></tr>\n");
    }
    mcp_html_raw(h, "</table>\n");
}

static void overview_counters(mcp_html_t *h, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *host = member(doc, "host"), *counters = member(host, "counters");
    json_object *rejected = member(host, "rejected");

    mcp_html_raw(h, "<h2>This host since ");
    mcp_html_text(h, when(p, text_of(p, host, "since")));
    mcp_html_raw(h, " UTC</h2>\n<table><tr><th>Counter</th><th class=\"n\">Value</th></tr>\n");
    if (counters && json_object_is_type(counters, json_type_object)) {
        json_object_object_foreach(counters, key, value) {
            mcp_html_raw(h, "<tr>");
            td_text(h, key);
            td_int(h, json_object_get_int64(value));
            mcp_html_raw(h, "</tr>\n");
        }
    }
    if (rejected && json_object_is_type(rejected, json_type_object)) {
        json_object_object_foreach(rejected, status, count) {
            mcp_html_raw(h, "<tr><td>Answered HTTP ");
            mcp_html_text(h, status);
            mcp_html_raw(h, "</td>");
            td_int(h, json_object_get_int64(count));
            mcp_html_raw(h, "</tr>\n");
        }
    }
    mcp_html_raw(h, "</table>\n");
}

static void overview_html(mcp_html_t *h, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *sessions = member(doc, "sessions"), *streams = member(doc, "streams");
    json_object *minutes = member(doc, "calls_per_minute"), *outcomes = member(doc, "outcomes");
    json_object *backends = member(doc, "backends"), *sample = member(doc, "sample");
    json_object *host = member(doc, "host");
    int i, n = array_length(minutes);
    const char **labels = apr_pcalloc(p, sizeof(char *) * (n + 1));
    double *calls = apr_pcalloc(p, sizeof(double) * (n + 1));
    mcp_plot_series_t series = { "calls", "s-calls", calls };

    mcp_html_raw(h, "<div class=\"cards\">\n");
    card(h, "live sessions (every host)", int_of(sessions, "live"));
    card(h, "sessions started in the last hour", int_of(sessions, "started_last_hour"));
    card(h, "open request streams", int_of(streams, "request"));
    card(h, "open standalone streams", int_of(streams, "standalone"));
    card(h, "followers (resumptions)", int_of(streams, "followers"));
    if (host) {
        card(h, "parked streams (this host)", int_of(host, "parked"));
    }
    mcp_html_raw(h, "</div>\n<h2>Calls per minute</h2>\n");
    for (i = 0; i < n; i++) {
        const char *minute = when(p, text_of(p, item(minutes, i), "minute"));

        /* The time of day of "YYYY-MM-DD HH:MM:SS", whatever the document held. */
        labels[i] = apr_pstrcat(p, strlen(minute) == 19 ? minute + 11 : minute, " UTC", NULL);
        calls[i] = (double)int_of(item(minutes, i), "calls");
    }
    mcp_plot_columns(h, "Requests started per minute, the last 15 minutes (every host)", n,
                     labels, &series, 1, "calls");
    mcp_html_rawf(h, "<h2>Outcomes of the latest calls</h2>\n<p class=\"muted\">The latest %"
                  APR_INT64_T_FMT " requests of the last hour (at most %" APR_INT64_T_FMT
                  "), by how they ended.</p>\n", int_of(sample, "calls"),
                  int_of(sample, "limit"));
    mcp_html_raw(h, "<table><tr><th>Outcome</th><th class=\"n\">Calls</th>"
                 "<th>Latest error message</th></tr>\n");
    for (i = 0; i < array_length(outcomes); i++) {
        json_object *o = item(outcomes, i);
        const char *outcome = text_of(p, o, "outcome");

        mcp_html_rawf(h, "<tr class=\"%s\">", outcome && !strcmp(outcome, "ok") ? "ok" : "bad");
        td_text(h, outcome);
        td_int(h, int_of(o, "calls"));
        td_text(h, text_of(p, o, "last_message"));
        mcp_html_raw(h, "</tr>\n");
    }
    mcp_html_raw(h, "</table>\n<h2>Backends</h2>\n<table><tr><th>Backend</th><th>Health</th>"
                 "<th class=\"n\">Live sessions</th><th class=\"n\">Calls (sample)</th>"
                 "<th class=\"n\">Failed</th><th>Last call</th><th>Its outcome</th></tr>\n");
    for (i = 0; i < array_length(backends); i++) {
        json_object *b = item(backends, i);
        const char *health = text_of(p, b, "health");

        mcp_html_raw(h, "<tr>");
        td_text(h, text_of(p, b, "backend"));
        mcp_html_raw(h, "<td class=\"");
        mcp_html_text(h, health);
        mcp_html_raw(h, "\">");
        mcp_html_text(h, health);
        mcp_html_raw(h, "</td>");
        td_int(h, int_of(b, "live_sessions"));
        td_int(h, int_of(b, "calls"));
        td_int(h, int_of(b, "failed"));
        td_text(h, when(p, text_of(p, b, "last_call")));
        td_text(h, text_of(p, b, "last_outcome"));
        mcp_html_raw(h, "</tr>\n");
    }
    mcp_html_raw(h, "</table>\n");
    overview_processes(h, doc);
    if (host) {
        overview_counters(h, doc);
    }
}

/* ---- sessions ------------------------------------------------------------------------------- */

static void sessions_html(mcp_html_t *h, const mcp_console_query_t *q, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *rows = member(doc, "sessions");
    const char *next = text_of(p, doc, "next");
    static const char *const states[] = { "all", "live", "ended" };
    int i, n = array_length(rows);

    mcp_html_raw(h, "<form class=\"search\" method=\"get\" action=\"\">"
                 "<input type=\"hidden\" name=\"page\" value=\"sessions\">"
                 "<input type=\"search\" name=\"q\" placeholder=\"user, client name or tag\" "
                 "value=\"");
    mcp_html_text(h, q->q);
    mcp_html_raw(h, "\"><select name=\"state\">");
    for (i = 0; i < 3; i++) {
        mcp_html_rawf(h, "<option%s>%s</option>", strcmp(q->state, states[i]) ? ""
                      : " selected", states[i]);
    }
    mcp_html_raw(h, "</select><button type=\"submit\">Search</button></form>\n");
    if (n == 0) {
        mcp_html_raw(h, "<p class=\"muted\">No session matches.</p>\n");
    }
    else {
        mcp_html_raw(h, "<table><tr><th>Session</th><th>User</th><th>Client</th>"
                     "<th>Protocol</th><th>Backend</th><th>Started (UTC)</th><th>Last seen</th>"
                     "<th class=\"n\">Calls</th><th>State</th></tr>\n");
    }
    for (i = 0; i < n; i++) {
        json_object *s = item(rows, i);
        const char *version = text_of(p, s, "client_version");
        const char *state = text_of(p, s, "state"), *ended_by = text_of(p, s, "ended_by");

        mcp_html_raw(h, "<tr><td>");
        session_link(h, text_of(p, s, "ref"), text_of(p, s, "tag"));
        mcp_html_raw(h, "</td>");
        td_text(h, text_of(p, s, "user"));
        td_text(h, version ? apr_pstrcat(p, text_of(p, s, "client") ? text_of(p, s, "client")
                                         : "?", " ", version, NULL) : text_of(p, s, "client"));
        td_text(h, text_of(p, s, "protocol"));
        td_text(h, text_of(p, s, "backend"));
        td_text(h, when(p, text_of(p, s, "started")));
        td_text(h, when(p, text_of(p, s, "last_seen")));
        td_int(h, int_of(s, "calls"));
        td_text(h, ended_by ? apr_pstrcat(p, state, " (by ", ended_by, ")", NULL) : state);
        mcp_html_raw(h, "</tr>\n");
    }
    if (n > 0) {
        mcp_html_raw(h, "</table>\n");
    }
    if (next) {
        mcp_console_query_t older = *q;

        older.before = next;
        mcp_html_raw(h, "<p class=\"pager\"><a href=\"");
        mcp_html_text(h, mcp_console_link(p, &older, 0));
        mcp_html_raw(h, "\">Older sessions &#8594;</a></p>\n");
    }
}

/* ---- a session ------------------------------------------------------------------------------ */

/* A JSON text the document holds as a string (so that its depth is not the document's). */
static void folded_json(mcp_html_t *h, const char *label, const char *text)
{
    json_object *v = text ? mcp_jsonrpc_parse_value(mcp_html_pool(h), text, strlen(text)) : NULL;

    mcp_html_raw(h, "<li><details><summary><span class=\"m\">");
    mcp_html_text(h, label);
    mcp_html_raw(h, "</span></summary>");
    message_html(h, text ? text : "null", v, 0);
    mcp_html_raw(h, "</details></li>\n");
}

static void pager(mcp_html_t *h, const mcp_console_query_t *q, json_object *doc,
                  const char *what)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *next = member(doc, "next");

    if (next) {
        mcp_console_query_t on = *q;

        on.after = json_object_get_int64(next);
        mcp_html_raw(h, "<p class=\"pager\"><a href=\"");
        mcp_html_text(h, mcp_console_link(p, &on, 0));
        mcp_html_raw(h, "\">");
        mcp_html_text(h, what);
        mcp_html_raw(h, " &#8594;</a></p>\n");
    }
}

static void session_html(mcp_html_t *h, const mcp_console_query_t *q, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *s = member(doc, "session"), *events = member(doc, "events");
    json_object *matches = member(doc, "matches"), *streams = member(s, "streams");
    int i;

    if (!s && array_length(matches) > 1) {
        mcp_html_raw(h, "<p>More than one session has this tag; which one?</p><ul>\n");
        for (i = 0; i < array_length(matches); i++) {
            mcp_html_raw(h, "<li>");
            session_link(h, text_of(p, item(matches, i), "ref"), text_of(p, item(matches, i),
                                                                         "ref"));
            mcp_html_raw(h, ", started ");
            mcp_html_text(h, when(p, text_of(p, item(matches, i), "started")));
            mcp_html_raw(h, " UTC</li>\n");
        }
        mcp_html_raw(h, "</ul>\n");
        return;
    }
    if (!s) {
        mcp_html_raw(h, "<p>No session has this tag (it may have been removed by retention)."
                     "</p>\n");
        return;
    }
    mcp_html_raw(h, "<dl class=\"facts\">\n");
    fact(h, "Tag", text_of(p, s, "tag"));
    fact(h, "User", text_of(p, s, "user"));
    fact(h, "Client", apr_pstrcat(p, text_of(p, s, "client") ? text_of(p, s, "client") : "?",
                                  " ", text_of(p, s, "client_version")
                                  ? text_of(p, s, "client_version") : "", NULL));
    fact(h, "Protocol", text_of(p, s, "protocol"));
    fact(h, "Backend", text_of(p, s, "backend"));
    fact(h, "Backend's session (tag)", text_of(p, s, "backend_session_tag"));
    fact(h, "Started (UTC)", when(p, text_of(p, s, "started")));
    fact(h, "Last seen (UTC)", when(p, text_of(p, s, "last_seen")));
    fact(h, "State", text_of(p, s, "ended_by")
         ? apr_pstrcat(p, "ended ", when(p, text_of(p, s, "ended")), " by ",
                       text_of(p, s, "ended_by"), NULL) : text_of(p, s, "state"));
    fact(h, "Streams", apr_psprintf(p, "%" APR_INT64_T_FMT " request, %" APR_INT64_T_FMT
                                    " standalone; %" APR_INT64_T_FMT " open, %" APR_INT64_T_FMT
                                    " failed, %" APR_INT64_T_FMT " cancelled",
                                    int_of(streams, "request"), int_of(streams, "standalone"),
                                    int_of(streams, "open"), int_of(streams, "failed"),
                                    int_of(streams, "cancelled")));
    fact(h, "Messages stored", apr_psprintf(p, "%" APR_INT64_T_FMT, int_of(s, "events")));
    mcp_html_raw(h, "</dl>\n<h2>What the client and the server said at initialize</h2>\n"
                 "<ul class=\"events\">\n");
    folded_json(h, "clientInfo", text_of(p, s, "client_info"));
    folded_json(h, "client capabilities", text_of(p, s, "client_capabilities"));
    folded_json(h, "serverInfo", text_of(p, s, "server_info"));
    mcp_html_raw(h, "</ul>\n<h2>Transcript</h2>\n");
    if (q->after >= 0) {
        mcp_console_query_t first = *q;

        first.after = -1;
        mcp_html_raw(h, "<p class=\"pager\"><a href=\"");
        mcp_html_text(h, mcp_console_link(p, &first, 0));
        mcp_html_raw(h, "\">&#8592; from the start</a></p>\n");
    }
    mcp_html_raw(h, "<ul class=\"events\">\n");
    for (i = 0; i < array_length(events); i++) {
        event_html(h, item(events, i), event_message(p, item(events, i)), 1);
    }
    mcp_html_raw(h, "</ul>\n");
    if (array_length(events) == 0) {
        mcp_html_raw(h, "<p class=\"muted\">No more messages.</p>\n");
    }
    pager(h, q, doc, "Later messages");
}

/* ---- a stream ------------------------------------------------------------------------------- */

/* A timeline mark's class, from the event and its parsed message m. */
static const char *mark_class(apr_pool_t *p, json_object *e, json_object *m)
{
    const char *kind = text_of(p, e, "kind"), *dir = text_of(p, e, "direction");

    if (kind && !strcmp(kind, "priming")) {
        return "m-priming";
    }
    if (dir && !strcmp(dir, "in")) {
        return "m-in";
    }
    if (member(m, "error")) {
        return "m-error";
    }
    if (member(m, "result")) {
        return "m-result";
    }
    return member(m, "id") ? "m-request" : "m-notification";
}

static void stream_html(mcp_html_t *h, const mcp_console_query_t *q, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *s = member(doc, "stream"), *events = member(doc, "events");
    int i, n = array_length(events);
    double *offsets = apr_pcalloc(p, sizeof(double) * (n + 1));
    const char **classes = apr_pcalloc(p, sizeof(char *) * (n + 1));
    const char **tips = apr_pcalloc(p, sizeof(char *) * (n + 1));
    json_object **messages = apr_pcalloc(p, sizeof(json_object *) * (n + 1));

    if (!s) {
        mcp_html_raw(h, "<p>No such stream (it may have been removed by retention).</p>\n");
        return;
    }
    mcp_html_raw(h, "<dl class=\"facts\">\n");
    fact(h, "Stream", text_of(p, s, "id"));
    fact(h, "Kind", text_of(p, s, "kind"));
    fact(h, "Method", text_of(p, s, "method"));
    fact(h, "Request id", text_of(p, s, "request_id"));
    fact(h, "Status", text_of(p, s, "status"));
    fact(h, "Owner (host:pid)", text_of(p, s, "owner"));
    fact(h, "User", text_of(p, s, "user"));
    fact(h, "Protocol", text_of(p, s, "protocol"));
    fact(h, "Started (UTC)", when(p, text_of(p, s, "started")));
    fact(h, "Completed (UTC)", when(p, text_of(p, s, "completed")));
    fact(h, "Duration (ms)", text_of(p, s, "duration_ms"));
    fact(h, "Followers now", text_of(p, s, "followers"));
    fact(h, "Messages stored", text_of(p, s, "events"));
    mcp_html_raw(h, "<dt>Session</dt><dd>");
    session_link(h, text_of(p, s, "session_ref"), text_of(p, s, "session_tag"));
    mcp_html_raw(h, "</dd>\n");
    if (text_of(p, s, "bridged_to")) {
        mcp_html_raw(h, "<dt>Its backend stream (era bridge)</dt><dd>");
        stream_link(h, text_of(p, s, "bridged_to"));
        mcp_html_raw(h, "</dd>\n");
    }
    mcp_html_raw(h, "</dl>\n<h2>Timeline</h2>\n");
    for (i = 0; i < n; i++) {
        json_object *e = item(events, i);
        const char *cls;

        messages[i] = event_message(p, e);
        offsets[i] = double_of(e, "offset_ms");
        classes[i] = mark_class(p, e, messages[i]);
        tips[i] = apr_psprintf(p, "seq %" APR_INT64_T_FMT " at +%.1f ms: %s",
                               int_of(e, "seq"), offsets[i],
                               event_summary(p, e, messages[i], &cls));
    }
    mcp_plot_timeline(h, "The stream's messages in time: request (grey), priming (light), "
                      "notifications (blue), server requests (amber), the result (green) or "
                      "an error (red)", n, offsets, classes, tips);
    mcp_html_raw(h, "<ul class=\"events\">\n");
    for (i = 0; i < n; i++) {
        event_html(h, item(events, i), messages[i], 0);
    }
    mcp_html_raw(h, "</ul>\n");
    pager(h, q, doc, "Later messages");
}

/* ---- tools ---------------------------------------------------------------------------------- */

static void tools_html(mcp_html_t *h, const mcp_console_query_t *q, json_object *doc)
{
    apr_pool_t *p = mcp_html_pool(h);
    json_object *tools = member(doc, "tools"), *timeline = member(doc, "timeline");
    json_object *sample = member(doc, "sample");
    int i, n = array_length(tools), m = array_length(timeline);
    const char **labels = apr_pcalloc(p, sizeof(char *) * (n + m + 1));
    double *p50 = apr_pcalloc(p, sizeof(double) * (n + 1));
    double *p90 = apr_pcalloc(p, sizeof(double) * (n + 1));
    double *p99 = apr_pcalloc(p, sizeof(double) * (n + 1));
    double *ok = apr_pcalloc(p, sizeof(double) * (m + 1));
    double *errors = apr_pcalloc(p, sizeof(double) * (m + 1));
    mcp_plot_series_t latency[3] = { { "p50", "s-p50", p50 }, { "p90", "s-p90", p90 },
                                     { "p99", "s-p99", p99 } };
    mcp_plot_series_t volume[2] = { { "answered", "s-calls", ok },
                                    { "errors", "s-errors", errors } };

    mcp_html_raw(h, "<p>Window:");
    for (i = 0; i < (int)(sizeof(windows) / sizeof(windows[0])); i++) {
        mcp_html_rawf(h, " <a href=\"?page=tools&amp;window=%s\"%s>%s</a>", windows[i].name,
                      strcmp(q->window, windows[i].name) ? "" : " class=\"here\"",
                      windows[i].name);
    }
    mcp_html_rawf(h, "</p>\n<p class=\"muted\">From the latest %" APR_INT64_T_FMT " tools/call "
                  "requests of the window (at most %" APR_INT64_T_FMT "), every host.</p>\n",
                  int_of(sample, "calls"), int_of(sample, "limit"));
    for (i = 0; i < m; i++) {
        json_object *b = item(timeline, i);

        labels[i] = apr_pstrcat(p, when(p, text_of(p, b, "from")), " UTC", NULL);
        errors[i] = (double)int_of(b, "errors");
        ok[i] = (double)int_of(b, "calls") - errors[i];
    }
    mcp_plot_columns(h, "Calls over the window, answered and errors", m, labels, volume, 2,
                     "calls");
    for (i = 0; i < n; i++) {
        json_object *t = item(tools, i);

        labels[i] = text_of(p, t, "tool");
        p50[i] = double_of(t, "p50_ms");
        p90[i] = double_of(t, "p90_ms");
        p99[i] = double_of(t, "p99_ms");
    }
    if (n > 0) {
        mcp_plot_bars(h, "Latency per tool (ms, from the request to its answer)", n, labels,
                      latency, 3, "ms");
    }
    mcp_html_raw(h, "<table><tr><th>Tool</th><th>Backend</th><th class=\"n\">Calls</th>"
                 "<th class=\"n\">Errors</th><th class=\"n\">Error rate</th>"
                 "<th class=\"n\">p50 ms</th><th class=\"n\">p90 ms</th><th class=\"n\">p99 ms"
                 "</th><th class=\"n\">max ms</th></tr>\n");
    for (i = 0; i < n; i++) {
        json_object *t = item(tools, i);

        mcp_html_rawf(h, "<tr%s>", int_of(t, "errors") ? " class=\"bad\"" : "");
        td_text(h, text_of(p, t, "tool"));
        td_text(h, text_of(p, t, "backend"));
        td_int(h, int_of(t, "calls"));
        td_int(h, int_of(t, "errors"));
        mcp_html_rawf(h, "<td class=\"n\">%.1f %%</td>", double_of(t, "error_rate") * 100);
        td_ms(h, t, "p50_ms");
        td_ms(h, t, "p90_ms");
        td_ms(h, t, "p99_ms");
        td_ms(h, t, "max_ms");
        mcp_html_raw(h, "</tr>\n");
    }
    mcp_html_raw(h, "</table>\n");
    if (n == 0) {
        mcp_html_raw(h, "<p class=\"muted\">No tool was called in this window.</p>\n");
    }
}

/* ---- pages ---------------------------------------------------------------------------------- */

const char *mcp_console_html(apr_pool_t *p, const mcp_console_query_t *q, json_object *doc,
                             apr_size_t *len)
{
    mcp_html_t *h = mcp_html_create(p);

    switch (q->page) {
    case MCP_CONSOLE_SESSIONS:
        frame_open(h, q, "Sessions", doc);
        sessions_html(h, q, doc);
        break;
    case MCP_CONSOLE_SESSION:
        frame_open(h, q, apr_pstrcat(p, "Session ", q->session, NULL), doc);
        session_html(h, q, doc);
        break;
    case MCP_CONSOLE_STREAM:
        frame_open(h, q, apr_psprintf(p, "Stream %" APR_INT64_T_FMT, q->stream), doc);
        stream_html(h, q, doc);
        break;
    case MCP_CONSOLE_TOOLS:
        frame_open(h, q, "Tools", doc);
        tools_html(h, q, doc);
        break;
    default:
        frame_open(h, q, "Overview", doc);
        overview_html(h, doc);
        break;
    }
    return frame_close(h, len);
}

const char *mcp_console_error_html(apr_pool_t *p, int status, const char *message,
                                   apr_size_t *len)
{
    mcp_html_t *h = mcp_html_create(p);
    mcp_console_query_t q;

    memset(&q, 0, sizeof(q));
    q.state = "all";
    q.window = "1h";
    frame_open(h, &q, apr_psprintf(p, "Error %d", status), NULL);
    mcp_html_raw(h, "<p>");
    mcp_html_text(h, message);
    mcp_html_raw(h, "</p>\n");
    return frame_close(h, len);
}
