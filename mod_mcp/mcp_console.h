/* mcp_console — the operator's console (SetHandler mcp-console): what a request asks for, and
 * each page as HTML.
 *
 * A page is one JSON document (PostgreSQL builds it, mcp_store_console.h; the handler adds this
 * host's counters): served as it is with format=json, or rendered here as HTML. The HTML is made
 * from nothing but that document, so the two forms cannot disagree. The page is read-only and
 * has no script: links and one GET form, folding with <details>, plots as inline SVG
 * (mcp_plot.h), the stylesheet served by the handler itself (mcp_console_css), so that a
 * Content Security Policy of default-src 'none' holds. Everything from the document is data
 * and goes in through mcp_html_text (mcp_html.h): message content is attacker-controlled.
 *
 * Pure code: APR and json-c, no httpd headers.
 */
#ifndef MCP_CONSOLE_H
#define MCP_CONSOLE_H

#include <apr_pools.h>
#include <json-c/json.h>

typedef enum {
    MCP_CONSOLE_OVERVIEW = 0,
    MCP_CONSOLE_SESSIONS,
    MCP_CONSOLE_SESSION,
    MCP_CONSOLE_STREAM,
    MCP_CONSOLE_TOOLS,
    MCP_CONSOLE_STYLESHEET          /* ?asset=console.css */
} mcp_console_page_t;

/* The name of a page in its query (?page=NAME) and in its document ("page"). */
const char *mcp_console_page_name(mcp_console_page_t page);

/* Rows per page of the sessions list, and events per page of a transcript or a stream. */
#define MCP_CONSOLE_SESSIONS_ROWS 50
#define MCP_CONSOLE_EVENT_ROWS    200
/* A message longer than this many characters shows its first ones only (the JSON form says its
 * full size in bytes). */
#define MCP_CONSOLE_TEXT_MAX      65536
/* The overview's outcomes and backends' health come from the latest calls of the last hour,
 * at most this many; the tools page's figures from the latest calls of its window. */
#define MCP_CONSOLE_OVERVIEW_SAMPLE 2000
#define MCP_CONSOLE_TOOLS_SAMPLE    10000

typedef struct mcp_console_query_t {
    mcp_console_page_t page;
    int                json;        /* format=json                                           */
    const char        *q;           /* sessions: what to look for ("" nothing): a user (prefix),
                                     * a client name (part), a tag (8 to 32 hex digits)        */
    const char        *state;       /* sessions: "all", "live" or "ended"                     */
    const char        *before;      /* sessions: the cursor (a start time), NULL for the newest */
    const char        *session;     /* session: 8 to 32 lower-case hex digits of md5(id)      */
    apr_int64_t        after;       /* session: an event id; stream: a seq (-1: from the start) */
    apr_int64_t        stream;      /* stream: its id                                          */
    const char        *window;      /* tools: "5m", "1h", "24h" or "7d"                        */
    int                window_secs;
} mcp_console_query_t;

/* Reads a query string (NULL or "": the overview). 0 on success; -1 with *problem saying which
 * parameter is wrong and why (a page that does not exist, a value out of its form, a parameter
 * the page does not take, a missing one), for a 400 answer; q->json then says whether a
 * format=json before the fault asked for the answer as JSON. */
int mcp_console_parse(apr_pool_t *p, const char *args, mcp_console_query_t *q,
                      const char **problem);

/* The query string of q, with format=json when json is non-zero (for the page's links). */
const char *mcp_console_link(apr_pool_t *p, const mcp_console_query_t *q, int json);

/* The stylesheet (static text). */
const char *mcp_console_css(apr_size_t *len);

/* The page of q as an HTML document, from its JSON document doc. */
const char *mcp_console_html(apr_pool_t *p, const mcp_console_query_t *q, json_object *doc,
                             apr_size_t *len);

/* An error page (status and what was wrong), as HTML. */
const char *mcp_console_error_html(apr_pool_t *p, int status, const char *message,
                                   apr_size_t *len);

#endif
