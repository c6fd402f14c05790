/* mcp_html — an HTML document built in a pool, and the one way text gets into it.
 *
 * The console's pages show what clients and backends sent: attacker-controlled text. Every
 * piece of text goes in through mcp_html_text (or mcp_html_textn), which escapes the five
 * characters HTML gives meaning to (& < > " ') after mcp_text_quote has written what a page
 * must not carry (NUL and the other control characters, bytes that are not well-formed UTF-8)
 * as \xNN, so that neither markup nor a broken character can come out of data. mcp_html_raw is
 * for the page's own markup only (string literals of the code that builds the page).
 *
 * Pure code: APR only, no httpd headers.
 */
#ifndef MCP_HTML_H
#define MCP_HTML_H

#include <apr_pools.h>

typedef struct mcp_html_t mcp_html_t;

mcp_html_t *mcp_html_create(apr_pool_t *p);

apr_pool_t *mcp_html_pool(const mcp_html_t *h);

/* The page's own markup, as it is. */
void mcp_html_raw(mcp_html_t *h, const char *markup);

/* The page's own markup, formatted (arguments must be numbers or other markup, never data). */
void mcp_html_rawf(mcp_html_t *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Text (data), escaped; NULL writes nothing. */
void mcp_html_text(mcp_html_t *h, const char *text);
void mcp_html_textn(mcp_html_t *h, const char *text, apr_size_t len);

/* The document so far (NUL-terminated; its length in *len when len is not NULL). */
const char *mcp_html_get(mcp_html_t *h, apr_size_t *len);

#endif
