/* mod_mcp_console — see mod_mcp_console.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <json-c/json.h>

#include "mcp_console.h"
#include "mcp_jsonrpc.h"
#include "mcp_store_console.h"
#include "mod_mcp_console.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

/* No script, no frames, nothing from elsewhere: the page is markup, inline SVG and the
 * stylesheet the handler serves itself. */
#define POLICY "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " \
               "frame-ancestors 'none'; base-uri 'none'"

/* In err_headers_out: they must stay on whatever answer httpd itself makes (a 401 of the
 * location's AuthType, a 500). */
static void common_headers(request_rec *r)
{
    apr_table_setn(r->err_headers_out, "Content-Security-Policy", POLICY);
    apr_table_setn(r->err_headers_out, "X-Content-Type-Options", "nosniff");
    apr_table_setn(r->err_headers_out, "Referrer-Policy", "no-referrer");
    apr_table_setn(r->err_headers_out, "X-Frame-Options", "DENY");
}

static int answer(request_rec *r, int status, const char *type, const char *body,
                  apr_size_t len)
{
    r->status = status;
    ap_set_content_type(r, type);
    ap_set_content_length(r, (apr_off_t)len);
    if (!r->header_only) {
        ap_rwrite(body, (int)len, r);
    }
    return OK;
}

/* A refusal in the form the client asked for: {"error": {"status", "message"}} or a page. */
static int refuse(request_rec *r, int json, int status, const char *message)
{
    apr_size_t len;
    const char *body;

    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (json) {
        json_object *o = json_object_new_object(), *e = json_object_new_object();

        json_object_object_add(e, "status", json_object_new_int(status));
        json_object_object_add(e, "message", json_object_new_string(message));
        json_object_object_add(o, "error", e);
        body = apr_pstrcat(r->pool, mcp_jsonrpc_to_string(r->pool, o, NULL), "\n", NULL);
        json_object_put(o);
        return answer(r, status, "application/json", body, strlen(body));
    }
    body = mcp_console_error_html(r->pool, status, message, &len);
    return answer(r, status, "text/html; charset=utf-8", body, len);
}

static mcp_store_status_t read_page(mcp_store_t *db, request_rec *r,
                                    const mcp_console_query_t *q, const char **json)
{
    switch (q->page) {
    case MCP_CONSOLE_SESSIONS:
        return mcp_store_console_sessions(db, r->pool, q->q, q->before, q->state,
                                          MCP_CONSOLE_SESSIONS_ROWS, json);
    case MCP_CONSOLE_SESSION:
        return mcp_store_console_session(db, r->pool, q->session, q->after,
                                         MCP_CONSOLE_EVENT_ROWS, MCP_CONSOLE_TEXT_MAX, json);
    case MCP_CONSOLE_STREAM:
        return mcp_store_console_stream(db, r->pool, q->stream, q->after,
                                        MCP_CONSOLE_EVENT_ROWS, MCP_CONSOLE_TEXT_MAX, json);
    case MCP_CONSOLE_TOOLS:
        return mcp_store_console_tools(db, r->pool, q->window_secs, MCP_CONSOLE_TOOLS_SAMPLE,
                                       json);
    default:
        return mcp_store_console_overview(db, r->pool, MCP_CONSOLE_OVERVIEW_SAMPLE, json);
    }
}

static int console_handler(request_rec *r)
{
    mcp_console_query_t q;
    const char *problem, *json = NULL, *body;
    json_object *doc, *host;
    mcp_store_status_t st;
    mcp_store_t *db;
    apr_size_t len;
    int parsed;

    if (!r->handler || strcmp(r->handler, "mcp-console") != 0) {
        return DECLINED;
    }
    common_headers(r);
    parsed = mcp_console_parse(r->pool, r->args, &q, &problem);
    if (r->method_number != M_GET) {
        apr_table_setn(r->headers_out, "Allow", "GET, HEAD");
        return refuse(r, q.json, HTTP_METHOD_NOT_ALLOWED,
                      apr_pstrcat(r->pool, "Method Not Allowed: the console is read-only (GET "
                                  "and HEAD), not ", r->method, NULL));
    }
    if (parsed != 0) {
        return refuse(r, q.json, HTTP_BAD_REQUEST,
                      apr_pstrcat(r->pool, "Bad Request: ", problem, NULL));
    }
    if (q.page == MCP_CONSOLE_STYLESHEET) {
        body = mcp_console_css(&len);
        apr_table_setn(r->headers_out, "Cache-Control", "max-age=3600");
        return answer(r, HTTP_OK, "text/css; charset=utf-8", body, len);
    }
    db = mcp_db_request(r, 0);
    st = read_page(db, r, &q, &json);
    if (st != MCP_STORE_OK) {
        int http, code;
        const char *message;

        if (st == MCP_STORE_REFUSED && db->sqlstate && !strncmp(db->sqlstate, "22", 2)) {
            return refuse(r, q.json, HTTP_BAD_REQUEST, apr_psprintf(
                              r->pool, "Bad Request: PostgreSQL cannot read a value of the "
                              "query (SQLSTATE %s): a cursor not as a page's \"next\" gave it?",
                              db->sqlstate));
        }
        mcp_db_answer(r, db, st, &http, &code, &message);
        return refuse(r, q.json, http, message);
    }
    doc = mcp_jsonrpc_parse_value(r->pool, json, strlen(json));
    if (!doc) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "the console's %s page: PostgreSQL's "
                      "document is not JSON", mcp_console_page_name(q.page));
        return refuse(r, q.json, HTTP_INTERNAL_SERVER_ERROR, "Internal Server Error: the "
                      "page's document could not be read");
    }
    if (q.page == MCP_CONSOLE_OVERVIEW && (host = mcp_status_json(r->pool))) {
        json_object_object_add(doc, "host", json_object_get(host));
    }
    apr_table_setn(r->headers_out, "Cache-Control", "no-store");
    if (q.json) {
        body = apr_pstrcat(r->pool, mcp_jsonrpc_to_string(r->pool, doc, &len), "\n", NULL);
        return answer(r, HTTP_OK, "application/json", body, len + 1);
    }
    body = mcp_console_html(r->pool, &q, doc, &len);
    return answer(r, HTTP_OK, "text/html; charset=utf-8", body, len);
}

void mcp_console_register_hooks(void)
{
    ap_hook_handler(console_handler, NULL, NULL, APR_HOOK_MIDDLE);
}
