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
#include "mcp_listing.h"
#include "mcp_store.h"
#include "mod_mcp_authz.h"
#include "mod_mcp_body.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_request.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

#define DENIAL_KEY "mcp-authz-denial"
#define PROBE_KEY "mcp-authz-probe"
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

/* A question put to the request's Require lines (mcp_authz_allows): may it call this? While it
 * is set, the providers judge it instead of the request's body. */
typedef struct probe_t {
    mcp_target_kind_t kind;
    const char       *name;
    int               consulted;   /* a Require mcp-* line was evaluated */
} probe_t;

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
    probe_t *probe = NULL;
    int i;

    (void)require_line;
    if (apr_pool_userdata_get((void **)&probe, PROBE_KEY, r->pool) == APR_SUCCESS && probe) {
        probe->consulted = 1;
        return probe->kind != p->kind || matches(p, probe->name) ? AUTHZ_GRANTED : AUTHZ_DENIED;
    }
    /* Only MCP POSTs name anything; the handler refuses what is not JSON. */
    if (!p || (!conf->backend && !conf->members) || r->method_number != M_POST
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

/* ---- what a user may see ------------------------------------------------------------------ */

int mcp_authz_allows(request_rec *r, mcp_target_kind_t kind, const char *name, int *consulted)
{
    probe_t probe = { kind, name, 0 };
    struct ap_logconf quiet = { NULL, APLOG_EMERG };
    const struct ap_logconf *log = r->log;
    apr_table_t *err_headers = apr_table_copy(r->pool, r->err_headers_out);
    int rc;

    /* httpd's own authorization, run again for this request with the probe in place of its
     * body: every Require line and container (RequireAny, RequireAll, user, group, ip ...) has
     * its say, as it would for a call of that name. Quietly: a refusal here is no client's
     * denial (no AH01630 in the log, no WWW-Authenticate). */
    apr_pool_userdata_setn(&probe, PROBE_KEY, NULL, r->pool);
    r->log = &quiet;
    rc = ap_run_auth_checker(r);
    r->log = log;
    apr_pool_userdata_setn(NULL, PROBE_KEY, NULL, r->pool);
    r->err_headers_out = err_headers;
    if (consulted) {
        *consulted = probe.consulted;
    }
    return rc == OK || rc == DECLINED;
}

typedef struct list_judge_t {
    request_rec *r;
    int          judged;
    int          uniform;         /* no Require mcp-* line was reached: ... */
    int          uniform_answer;  /* ... every name gets the first one's answer */
} list_judge_t;

static int keep_allowed(void *baton, mcp_target_kind_t kind, const char *name)
{
    list_judge_t *j = baton;
    int consulted = 0, allowed;

    if (j->uniform) {
        return j->uniform_answer;
    }
    allowed = mcp_authz_allows(j->r, kind, name, &consulted);
    /* What the lines decide without a mcp-* line they decide for every name alike. */
    if (!j->judged++ && !consulted) {
        j->uniform = 1;
        j->uniform_answer = allowed;
    }
    return allowed;
}

const char *mcp_authz_filter_answer(request_rec *r, const mcp_jsonrpc_body_t *requests,
                                    const char *json, apr_size_t len, apr_size_t *out_len)
{
    const char *method = NULL, *out;
    mcp_jsonrpc_msg_t msg;
    json_object *obj;
    list_judge_t judge = { r, 0, 0, 0 };
    int i, removed;

    obj = mcp_jsonrpc_parse_value(r->pool, json, len);
    if (!obj) {
        return NULL;
    }
    mcp_jsonrpc_classify(obj, &msg);
    for (i = 0; msg.kind == MCP_MSG_RESPONSE && i < requests->count && !method; i++) {
        if (requests->msgs[i].kind == MCP_MSG_REQUEST
            && json_object_equal(requests->msgs[i].id, msg.id)) {
            method = requests->msgs[i].method;
        }
    }
    removed = mcp_listing_filter(obj, mcp_listing_kind(method), keep_allowed, &judge);
    if (!removed) {
        return NULL;
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "%s: %d item(s) the user may not use are not "
                  "listed (Require mcp-%s)", method, removed,
                  kind_names[mcp_listing_kind(method)]);
    out = mcp_jsonrpc_to_string(r->pool, obj, out_len);
    return out;
}

int mcp_authz_lists_requested(const mcp_jsonrpc_body_t *requests)
{
    int i;

    for (i = 0; requests && i < requests->count; i++) {
        if (requests->msgs[i].kind == MCP_MSG_REQUEST
            && mcp_listing_kind(requests->msgs[i].method) != MCP_TARGET_NONE) {
            return 1;
        }
    }
    return 0;
}

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
