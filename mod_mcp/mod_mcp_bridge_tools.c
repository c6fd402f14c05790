/* mod_mcp_bridge_tools — the era bridge's Mcp-Param-* check (see mod_mcp_bridge.h): a 2026-07-28
 * server validates the headers a client mirrors from a tool's x-mcp-header arguments; a 2025
 * backend knows nothing of them, so the bridge does it, from the pooled session's tool list.
 *
 * The list is cached per pooled session in PostgreSQL (mcp.bridge_sessions.tool_headers: only
 * the declarations, per tool), so every process and host shares it, and a backend that lists
 * other tools to other principals is read as each of them sees it. The pool look-up that every
 * call makes anyway returns the called tool's declarations and the list's age: a call costs no
 * statement more. The list is read again (tools/list, every page) when it is missing or older
 * than MCPEraBridgeToolsTTL (by one request of a process at a time: the others meanwhile check
 * against the list cached before), and before a request would be refused on a list older than a
 * second (a tool may have changed its arguments since: a refusal is never made on an old
 * list). A client's own complete tools/list through the bridge refreshes the cache too (the
 * bridge's check is then as new as the list that client follows). A tool the list does not
 * name is not checked (the backend answers the call). A backend that answers tools/list with
 * a JSON-RPC error lists no tools: nothing to check. When the list cannot be read at all (the
 * backend failed), the call is checked against the list cached before, or not at all, and a
 * warning is logged: the call goes to that same backend, which answers it. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_era.h"
#include "mod_mcp_bridge_private.h"

APLOG_USE_MODULE(mcp);

/* A refusal is made on a list read at most this long ago (seconds); an older one is read
 * again first. */
#define REFUSE_ON_LIST_AGE 1.0
/* tools/list pages read at most. */
#define MAX_PAGES 64

/* The declarations of the pooled session's whole tool list (tool -> array), read now and
 * cached; NULL (with a warning logged) when the backend could not be asked. */
static json_object *tools_read(bridge_t *b)
{
    request_rec *r = b->q->r;
    json_object *into = mcp_jsonrpc_parse_value(r->pool, "{}", 2);   /* released with r */
    const char *cursor = NULL, *err = NULL;
    apr_pool_t *tree;
    int page;

    /* Each page's messages are parsed into tree, cleared before the next page is read: only
     * into (the declarations) outlives its page, so that a long list is held once, not once
     * per page plus its declarations, until the request ends. */
    apr_pool_create(&tree, r->pool);
    for (page = 0; page < MAX_PAGES; page++) {
        const char *body = apr_psprintf(r->pool, "{\"jsonrpc\":\"2.0\",\"id\":\"tools-%"
                                        APR_INT64_T_FMT "-%d\",\"method\":\"tools/list\"%s%s%s}",
                                        b->st.id, page, cursor ? ",\"params\":{\"cursor\":" : "",
                                        cursor ? cursor : "", cursor ? "}" : "");
        apr_array_header_t *messages;
        json_object *response = NULL, *result = NULL, *tools = NULL, *next = NULL;
        mcp_exchange_t x;
        int i;

        apr_pool_clear(tree);
        if (mcp_exchange_collect(b->q, b->pooled->backend_session_id, b->pooled->protocol_version,
                                 body, &x, &messages, &err) != MCP_BACKEND_OK
            || x.response.status != HTTP_OK) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "era bridge: the backend's tool list "
                          "was not read (Mcp-Param-* headers are checked against the list read "
                          "before, if any): %s", err ? err : apr_psprintf(r->pool, "HTTP %ld",
                                                                         x.response.status));
            apr_pool_destroy(tree);
            return NULL;
        }
        for (i = 0; i < messages->nelts && !response; i++) {
            const char *t = APR_ARRAY_IDX(messages, i, const char *);
            json_object *m = mcp_jsonrpc_parse_value(tree, t, strlen(t)), *id;
            if (m && json_object_object_get_ex(m, "id", &id)
                && json_object_is_type(id, json_type_string)
                && strncmp(json_object_get_string(id), "tools-", 6) == 0) {
                response = m;
            }
        }
        if (!response || !json_object_object_get_ex(response, "result", &result)) {
            break;   /* an error (no tools/list): no tools, nothing to check */
        }
        if (json_object_object_get_ex(result, "tools", &tools)) {
            mcp_era_param_decls(tools, into);
        }
        if (!json_object_object_get_ex(result, "nextCursor", &next)
            || !json_object_is_type(next, json_type_string)) {
            break;
        }
        cursor = mcp_jsonrpc_to_string(r->pool, next, NULL);
    }
    apr_pool_destroy(tree);
    if (mcp_store_bridge_tools_set(mcp_req_db(b->q), r->pool, b->pooled->id,
                                   mcp_jsonrpc_to_string(r->pool, into, NULL)) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "era bridge: the backend's tool list was "
                      "read but not cached: %s", mcp_req_db(b->q)->error);
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "era bridge: pooled session %s: tool list read "
                  "(%d tools)", b->pooled->id, json_object_object_length(into));
    return into;
}

/* The called tool's declarations in a list (NULL: the list does not name it). */
static json_object *decls_of(json_object *list, const char *tool)
{
    json_object *d = NULL;

    return list && json_object_object_get_ex(list, tool, &d) ? d : NULL;
}

/* The cached list is older than MCPEraBridgeToolsTTL: whether this request reads it again. Of
 * the requests of this process that find it old at once, one does (mcp_refresh); the others,
 * and those that found it old before that read ended, check against the copy they found (at
 * most that read's time older than the TTL says). Else, under load, every call in flight when
 * the TTL passed read the list (a tools/list each, then an update of the pooled session's row,
 * which they took in turn): ~200 ms for each of 8 concurrent calls. Other processes and hosts
 * read it once each at most. */
static int old_list_read_here(bridge_t *b)
{
    return mcp_refresh_begin(mcp_child.tool_lists, b->pooled->id, b->tools.asked_at,
                             apr_time_now());
}

int mcp_bridged_check_params(bridge_t *b)
{
    request_rec *r = b->q->r;
    const mcp_store_bridge_tools_t *t = &b->tools;
    double ttl = (double)apr_time_as_msec(b->q->conf->bridge_tools_ttl) / 1000.0;
    json_object *params = NULL, *arguments = NULL, *decls = NULL, *list = NULL;
    const char *tool, *json;
    mcp_era_verdict_t v;
    int read = 0;

    if (strcmp(b->msg->method, "tools/call") != 0
        || !json_object_object_get_ex(b->msg->obj, "params", &params)
        || !(tool = mcp_jsonrpc_get_string(params, "name"))) {
        return 0;
    }
    json_object_object_get_ex(params, "arguments", &arguments);
    if (t->decls) {
        decls = mcp_jsonrpc_parse_value(r->pool, t->decls, strlen(t->decls));
    }
    if (!t->cached || (t->age > ttl && old_list_read_here(b))) {
        read = 1;
        if ((list = tools_read(b)) != NULL) {
            decls = decls_of(list, tool);
        }
        if (t->cached) {
            mcp_refresh_done(mcp_child.tool_lists, b->pooled->id, apr_time_now());
        }
    }
    if (!decls || mcp_era_param_check(r->pool, decls, arguments, r->headers_in, &v) == 0) {
        return 0;
    }
    if (!read && t->age > REFUSE_ON_LIST_AGE && (list = tools_read(b)) != NULL) {
        if (!(decls = decls_of(list, tool))
            || mcp_era_param_check(r->pool, decls, arguments, r->headers_in, &v) == 0) {
            return 0;
        }
    }
    json = mcp_jsonrpc_error_body(r->pool, b->msg->id, MCP_ERA_HEADER_MISMATCH, v.message, NULL);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "era bridge: stream %" APR_INT64_T_FMT ": %s "
                  "(-32020)", b->st.id, v.message);
    mcp_stream_add(&b->st, json, strlen(json));
    mcp_stream_finish(&b->st, "failed");
    return mcp_bridged_json(b, HTTP_BAD_REQUEST, json);
}

void mcp_bridged_tools_seen(bridge_t *b, json_object *response)
{
    request_rec *r = b->q->r;
    json_object *params = NULL, *result = NULL, *tools = NULL, *into;

    if (strcmp(b->msg->method, "tools/list") != 0
        || (json_object_object_get_ex(b->msg->obj, "params", &params)
            && json_object_object_get_ex(params, "cursor", NULL))
        || !json_object_object_get_ex(response, "result", &result)
        || json_object_object_get_ex(result, "nextCursor", NULL)
        || !json_object_object_get_ex(result, "tools", &tools)) {
        return;   /* not the whole list in one answer */
    }
    into = mcp_jsonrpc_parse_value(r->pool, "{}", 2);
    mcp_era_param_decls(tools, into);
    b->tools_seen = mcp_jsonrpc_to_string(r->pool, into, NULL);
}

void mcp_bridged_tools_cache(bridge_t *b)
{
    if (b->tools_seen && b->pooled
        && mcp_store_bridge_tools_set(mcp_req_db(b->q), b->q->r->pool, b->pooled->id,
                                      b->tools_seen) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, b->q->r, "era bridge: the tool list a client "
                      "was given was not cached: %s", mcp_req_db(b->q)->error);
    }
}
