/* mod_mcp_authz — see mod_mcp_authz.h. */
#include <string.h>

#include <apr_fnmatch.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <mod_auth.h>
#include <util_filter.h>

#include "mcp_era.h"
#include "mcp_http.h"
#include "mcp_jsonrpc.h"
#include "mcp_store.h"
#include "mod_mcp_authz.h"
#include "mod_mcp_body.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_request.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

#define DENIAL_KEY "mcp-authz-denial"
#define DENIED_FILTER "MCP_AUTHZ_DENIED"

typedef struct patterns_t {
    mcp_target_kind_t   kind;
    apr_array_header_t *list;   /* const char * */
} patterns_t;

/* What a provider refused; kept with the request until the 403 goes out. */
typedef struct denial_t {
    const char  *what;       /* "tool", "prompt", "resource" */
    const char  *name;
    const char  *directive;  /* "Require mcp-tool" ... */
    json_object *id;
    const char  *message;    /* the refused JSON-RPC message (its text) */
} denial_t;

static const char *const kind_names[] = { "", "tool", "prompt", "resource" };

static const char *parse(cmd_parms *cmd, const char *require_line, const void **parsed,
                         mcp_target_kind_t kind)
{
    patterns_t *p = apr_palloc(cmd->pool, sizeof(*p));
    const char *word;

    p->kind = kind;
    p->list = apr_array_make(cmd->pool, 4, sizeof(const char *));
    while (*(word = ap_getword_conf(cmd->pool, &require_line))) {
        APR_ARRAY_PUSH(p->list, const char *) = word;
    }
    if (p->list->nelts == 0) {
        return apr_psprintf(cmd->pool, "Require mcp-%s needs at least one name or pattern",
                            kind_names[kind]);
    }
    *parsed = p;
    return NULL;
}

static const char *parse_tool(cmd_parms *c, const char *l, const void **p)
{
    return parse(c, l, p, MCP_TARGET_TOOL);
}

static const char *parse_prompt(cmd_parms *c, const char *l, const void **p)
{
    return parse(c, l, p, MCP_TARGET_PROMPT);
}

static const char *parse_resource(cmd_parms *c, const char *l, const void **p)
{
    return parse(c, l, p, MCP_TARGET_RESOURCE);
}

static int matches(const patterns_t *p, const char *name)
{
    int i;

    for (i = 0; i < p->list->nelts; i++) {
        if (apr_fnmatch(APR_ARRAY_IDX(p->list, i, const char *), name, 0) == APR_SUCCESS) {
            return 1;
        }
    }
    return 0;
}

static authz_status check(request_rec *r, const char *require_line, const void *parsed)
{
    const patterns_t *p = parsed;
    const mcp_dir_conf_t *conf = mcp_config_get(r);
    const mcp_body_t *body;
    mcp_jsonrpc_body_t *rpc = NULL;
    const char *reason, *name;
    int i;

    (void)require_line;
    /* Only MCP POSTs name anything; the handler refuses what is not JSON. */
    if (!p || !conf->backend || r->method_number != M_POST
        || !mcp_http_media_type_is(apr_table_get(r->headers_in, "Content-Type"),
                                   "application/json")) {
        return AUTHZ_GRANTED;
    }
    body = mcp_body_read(r, conf->max_message_size);
    if (body->status != MCP_BODY_OK
        || mcp_jsonrpc_parse_limited(r->pool, body->raw, body->len, conf->max_batch_size, &rpc,
                                     &reason) != MCP_JSONRPC_OK) {
        return AUTHZ_GRANTED;
    }
    for (i = 0; i < rpc->count; i++) {
        if (mcp_jsonrpc_target(&rpc->msgs[i], &name) == p->kind && !matches(p, name)) {
            denial_t *d = NULL;

            /* Several Require lines may refuse; the answer names what the first one found. */
            if (apr_pool_userdata_get((void **)&d, DENIAL_KEY, r->pool) == APR_SUCCESS && d) {
                return AUTHZ_DENIED;
            }
            d = apr_pcalloc(r->pool, sizeof(*d));

            d->what = kind_names[p->kind];
            d->name = name;
            d->directive = apr_pstrcat(r->pool, "Require mcp-", d->what, NULL);
            d->id = rpc->is_batch ? NULL : mcp_jsonrpc_reply_id(&rpc->msgs[i]);
            d->message = mcp_jsonrpc_to_string(r->pool, rpc->msgs[i].obj, NULL);
            apr_pool_userdata_setn(d, DENIAL_KEY, NULL, r->pool);
            ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "%s: %s '%s' does not match",
                          d->directive, d->what, name);
            return AUTHZ_DENIED;
        }
    }
    return AUTHZ_GRANTED;
}

static const authz_provider tool_provider = { check, parse_tool };
static const authz_provider prompt_provider = { check, parse_prompt };
static const authz_provider resource_provider = { check, parse_resource };

/* ---- the 403 ------------------------------------------------------------------------------- */

/* The refused message and its error, in the session's audit (best effort: logged); a stateless
 * request's with no session. */
static void audit(request_rec *r, const denial_t *d, const char *error_body)
{
    const mcp_dir_conf_t *conf = mcp_config_get(r);
    const char *sid = apr_table_get(r->headers_in, "Mcp-Session-Id");
    mcp_store_session_t *session = NULL;
    mcp_store_t *db;
    mcp_store_status_t st;
    mcp_req_t q;

    memset(&q, 0, sizeof(q));
    q.r = r;
    q.conf = conf;
    if (!sid) {
        /* A 2026-07-28 (stateless) request has no session: its refusal is stored with none,
         * under the principal (as mod_mcp_modern stores what it serves). */
        json_object *obj = mcp_jsonrpc_parse_value(r->pool, d->message, strlen(d->message));
        int present = 0;

        if (!obj || (mcp_era_claim(obj, &present), !present)) {
            return;
        }
        session = apr_pcalloc(r->pool, sizeof(*session));
        session->principal = r->user;
    }
    db = mcp_db_request(r, 0);
    st = session ? MCP_STORE_OK
                 : mcp_store_session_touch(db, r->pool, sid, r->user, mcp_req_idle_secs(&q),
                                           &session);
    if (st == MCP_STORE_OK) {
        st = mcp_store_events_append(db, r->pool, session, 0, 0, "in",
                                     apr_pstrcat(r->pool, "[", d->message, "]", NULL));
    }
    if (st == MCP_STORE_OK) {
        st = mcp_store_events_append(db, r->pool, session, 0, 0, "out",
                                     apr_pstrcat(r->pool, "[", error_body, "]", NULL));
        if (sid) {
            mcp_req_set_session_tag(r, sid);
        }
    }
    if (st != MCP_STORE_OK && st != MCP_STORE_NOT_FOUND) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "the refused call was not stored in the "
                      "audit: %s", db->error ? db->error : "?");
    }
}

/* Replaces httpd's HTML error page with the JSON-RPC error (ctx). */
static apr_status_t denied_filter(ap_filter_t *f, apr_bucket_brigade *bb)
{
    const char *body = f->ctx;
    apr_bucket_brigade *out;

    ap_set_content_type(f->r, "application/json");
    if (APR_BRIGADE_EMPTY(bb) || !APR_BUCKET_IS_EOS(APR_BRIGADE_LAST(bb))) {
        apr_brigade_cleanup(bb);
        return APR_SUCCESS;
    }
    apr_brigade_cleanup(bb);
    out = apr_brigade_create(f->r->pool, f->c->bucket_alloc);
    apr_brigade_write(out, NULL, NULL, body, strlen(body));
    APR_BRIGADE_INSERT_TAIL(out, apr_bucket_eos_create(f->c->bucket_alloc));
    ap_remove_output_filter(f);
    return ap_pass_brigade(f->next, out);
}

static void insert_error_filter(request_rec *r)
{
    denial_t *d = NULL;
    const char *message, *body;

    /* 403, or 401 for an authenticated user unless AuthzSendForbiddenOnFailure is On. */
    if ((r->status != HTTP_FORBIDDEN && (r->status != HTTP_UNAUTHORIZED || !r->user))
        || apr_pool_userdata_get((void **)&d, DENIAL_KEY, r->pool) != APR_SUCCESS || !d) {
        return;
    }
    apr_pool_userdata_setn(NULL, DENIAL_KEY, NULL, r->pool);   /* once */
    message = apr_psprintf(r->pool, "Forbidden: calling %s '%s' is not allowed here (%s)",
                           d->what, d->name, d->directive);
    body = mcp_jsonrpc_error_body(r->pool, d->id, MCP_JSONRPC_SERVER_ERROR, message, NULL);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "%s %s -> %d: %s (user %s)", r->method, r->uri,
                  r->status, message, r->user ? r->user : "-");
    mcp_status_count(MCP_STAT_DENIED, 1);
    mcp_status_rejected(r->status);
    audit(r, d, body);
    ap_add_output_filter(DENIED_FILTER, (void *)body, r, r->connection);
}

void mcp_authz_register_hooks(apr_pool_t *p)
{
    ap_register_auth_provider(p, AUTHZ_PROVIDER_GROUP, "mcp-tool", AUTHZ_PROVIDER_VERSION,
                              &tool_provider, AP_AUTH_INTERNAL_PER_CONF);
    ap_register_auth_provider(p, AUTHZ_PROVIDER_GROUP, "mcp-prompt", AUTHZ_PROVIDER_VERSION,
                              &prompt_provider, AP_AUTH_INTERNAL_PER_CONF);
    ap_register_auth_provider(p, AUTHZ_PROVIDER_GROUP, "mcp-resource", AUTHZ_PROVIDER_VERSION,
                              &resource_provider, AP_AUTH_INTERNAL_PER_CONF);
    ap_register_output_filter(DENIED_FILTER, denied_filter, NULL, AP_FTYPE_CONTENT_SET);
    ap_hook_insert_error_filter(insert_error_filter, NULL, NULL, APR_HOOK_MIDDLE);
}
