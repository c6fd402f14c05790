/* mod_mcp_oauth — see mod_mcp_oauth.h. */
#include <string.h>

#include <apr_hash.h>
#include <apr_strings.h>
#include <apr_uri.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>

#include "mcp_jsonrpc.h"
#include "mod_mcp_config.h"
#include "mod_mcp_oauth.h"

APLOG_USE_MODULE(mcp);

#define WELL_KNOWN "/.well-known/oauth-protected-resource"

/* The metadata's path for a resource URL (RFC 9728 section 3.1: the well-known prefix, then
 * the resource's path, a lone "/" dropped), and its absolute URL. NULL: not a usable URL. */
static const char *metadata_path(apr_pool_t *p, const char *resource, const char **absolute)
{
    apr_uri_t u;
    const char *path;

    if (apr_uri_parse(p, resource, &u) != APR_SUCCESS || !u.scheme || !u.hostinfo
        || (strcasecmp(u.scheme, "https") != 0 && strcasecmp(u.scheme, "http") != 0)
        || u.fragment) {
        return NULL;
    }
    path = (u.path && strcmp(u.path, "/") != 0) ? u.path : "";
    path = apr_pstrcat(p, WELL_KNOWN, path, NULL);
    if (absolute) {
        *absolute = apr_pstrcat(p, u.scheme, "://", u.hostinfo, path, NULL);
    }
    return path;
}

const char *mcp_oauth_set_resource(cmd_parms *cmd, void *dconf, const char *url)
{
    mcp_dir_conf_t *conf = dconf;
    mcp_server_conf_t *sconf = mcp_config_server(cmd->server);
    const char *path = metadata_path(cmd->pool, url, NULL);

    if (!path) {
        return apr_psprintf(cmd->pool, "MCPProtectedResource: '%s' is not an absolute http(s) "
                            "URL without a fragment", url);
    }
    if (!sconf->oauth_resources) {
        sconf->oauth_resources = apr_hash_make(cmd->pool);
    }
    if (apr_hash_get(sconf->oauth_resources, path, APR_HASH_KEY_STRING)) {
        return apr_psprintf(cmd->pool, "MCPProtectedResource: %s is named by two locations",
                            url);
    }
    conf->oauth_resource = apr_pstrdup(cmd->pool, url);
    /* The location's own configuration: its other MCP* directives land in it too. */
    apr_hash_set(sconf->oauth_resources, path, APR_HASH_KEY_STRING, conf);
    return NULL;
}

/* ---- the metadata ------------------------------------------------------------------------- */

static json_object *string_array(const apr_array_header_t *list)
{
    json_object *a = json_object_new_array();
    int i;

    for (i = 0; list && i < list->nelts; i++) {
        json_object_array_add(a, json_object_new_string(APR_ARRAY_IDX(list, i, const char *)));
    }
    return a;
}

static int metadata_handler(request_rec *r, int lookup_uri)
{
    mcp_server_conf_t *sconf = mcp_config_server(r->server);
    const mcp_dir_conf_t *conf;
    json_object *doc;
    const char *text;

    if (lookup_uri || !sconf->oauth_resources || strncmp(r->uri, WELL_KNOWN, sizeof(WELL_KNOWN) - 1)
        || !(conf = apr_hash_get(sconf->oauth_resources, r->uri, APR_HASH_KEY_STRING))) {
        return DECLINED;
    }
    if (r->method_number != M_GET) {
        /* httpd's 405 names what r->allowed_methods holds in its Allow header. */
        ap_allow_standard_methods(r, REPLACE_ALLOW, M_GET, -1);
        return HTTP_METHOD_NOT_ALLOWED;
    }
    doc = json_object_new_object();
    json_object_object_add(doc, "resource", json_object_new_string(conf->oauth_resource));
    json_object_object_add(doc, "authorization_servers", string_array(conf->oauth_servers));
    if (conf->oauth_scopes) {
        json_object_object_add(doc, "scopes_supported", string_array(conf->oauth_scopes));
    }
    json_object_object_add(doc, "bearer_methods_supported", string_array(NULL));
    json_object_array_add(json_object_object_get(doc, "bearer_methods_supported"),
                          json_object_new_string("header"));
    text = mcp_jsonrpc_to_string(r->pool, doc, NULL);
    json_object_put(doc);
    ap_set_content_type(r, "application/json");
    apr_table_setn(r->headers_out, "Access-Control-Allow-Origin", "*");
    apr_table_setn(r->headers_out, "Cache-Control", "max-age=300");
    if (!r->header_only) {
        ap_rputs(text, r);
    }
    return OK;
}

/* ---- the challenge ------------------------------------------------------------------------ */

static const char *challenge_params(request_rec *r, const mcp_dir_conf_t *conf)
{
    const char *absolute = NULL, *params;

    metadata_path(r->pool, conf->oauth_resource, &absolute);
    params = apr_psprintf(r->pool, "resource_metadata=\"%s\"", absolute);
    if (conf->oauth_scopes && conf->oauth_scopes->nelts > 0) {
        params = apr_psprintf(r->pool, "%s, scope=\"%s\"", params,
                              apr_array_pstrcat(r->pool, conf->oauth_scopes, ' '));
    }
    return params;
}

/* Adds our parameters to the Bearer challenge in t, or a Bearer challenge of our own. */
static void add_challenge(request_rec *r, const mcp_dir_conf_t *conf)
{
    const char *params = challenge_params(r, conf), *existing = NULL;
    apr_table_t *tables[2];
    int i;

    tables[0] = r->err_headers_out;
    tables[1] = r->headers_out;
    for (i = 0; i < 2 && !existing; i++) {
        existing = apr_table_get(tables[i], "WWW-Authenticate");
        if (existing && strncasecmp(existing, "Bearer", 6) == 0) {
            if (ap_strstr_c(existing, "resource_metadata=")) {
                return;
            }
            apr_table_unset(tables[i], "WWW-Authenticate");
            apr_table_setn(r->err_headers_out, "WWW-Authenticate",
                           apr_psprintf(r->pool, "%s%s %s", existing,
                                        ap_strchr_c(existing, '=') ? "," : "", params));
            return;
        }
    }
    apr_table_addn(r->err_headers_out, "WWW-Authenticate",
                   apr_pstrcat(r->pool, "Bearer ", params, NULL));
}

int mcp_oauth_require_user(mcp_req_t *q)
{
    if (!q->conf->oauth_resource || q->r->user) {
        return OK;
    }
    add_challenge(q->r, q->conf);
    return mcp_req_error(q, HTTP_UNAUTHORIZED, MCP_JSONRPC_SERVER_ERROR,
                         "Unauthorized: this endpoint needs an OAuth access token (see "
                         "WWW-Authenticate)");
}

static void insert_error_filter(request_rec *r)
{
    const mcp_dir_conf_t *conf;

    if (r->status != HTTP_UNAUTHORIZED) {
        return;
    }
    conf = mcp_config_get(r);
    if (conf->oauth_resource) {
        add_challenge(r, conf);
    }
}

void mcp_oauth_register_hooks(void)
{
    ap_hook_quick_handler(metadata_handler, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_insert_error_filter(insert_error_filter, NULL, NULL, APR_HOOK_MIDDLE);
}
