/* mod_mcp_config — see mod_mcp_config.h. */
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>

#include "mod_mcp_config.h"

extern module AP_MODULE_DECLARE_DATA mcp_module;

#define UNSET (-1)

void *mcp_config_create_dir(apr_pool_t *p, char *dir)
{
    mcp_dir_conf_t *conf = apr_pcalloc(p, sizeof(*conf));

    (void)dir;
    conf->max_message_size = UNSET;
    conf->backend_connect_timeout = UNSET;
    conf->backend_timeout = UNSET;
    return conf;
}

/* The more specific section wins wherever it set the field. */
#define MERGE(field, unset) merged->field = (add->field != (unset)) ? add->field : base->field

void *mcp_config_merge_dir(apr_pool_t *p, void *basev, void *addv)
{
    const mcp_dir_conf_t *base = basev, *add = addv;
    mcp_dir_conf_t *merged = apr_pcalloc(p, sizeof(*merged));

    MERGE(backend_spec, NULL);
    MERGE(backend, NULL);
    MERGE(max_message_size, UNSET);
    MERGE(backend_connect_timeout, UNSET);
    MERGE(backend_timeout, UNSET);
    return merged;
}

#define DEFAULT(field, value) if (conf->field == UNSET) conf->field = (value)

const mcp_dir_conf_t *mcp_config_get(request_rec *r)
{
    const mcp_dir_conf_t *set = ap_get_module_config(r->per_dir_config, &mcp_module);
    mcp_dir_conf_t *conf = apr_pmemdup(r->pool, set, sizeof(*conf));

    DEFAULT(max_message_size, MCP_DEFAULT_MAX_MESSAGE_SIZE);
    DEFAULT(backend_connect_timeout, MCP_DEFAULT_BACKEND_CONNECT_TIMEOUT);
    DEFAULT(backend_timeout, MCP_DEFAULT_BACKEND_TIMEOUT);
    return conf;
}

/* ---- directive handlers ------------------------------------------------------------------ */

static const char *set_backend(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_dir_conf_t *conf = dconf;
    mcp_backend_target_t *target = apr_pcalloc(cmd->pool, sizeof(*target));
    const char *err = mcp_backend_target_parse(cmd->pool, arg, target);

    if (err) {
        return apr_pstrcat(cmd->pool, cmd->cmd->name, ": ", err, NULL);
    }
    conf->backend_spec = apr_pstrdup(cmd->pool, arg);
    conf->backend = target;
    return NULL;
}

static const char *set_size(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_dir_conf_t *conf = dconf;
    apr_off_t n;
    char *end;

    if (apr_strtoff(&n, arg, &end, 10) != APR_SUCCESS || *end || n < 1) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not a positive number of bytes",
                            cmd->cmd->name, arg);
    }
    conf->max_message_size = n;
    return NULL;
}

/* A duration in seconds by default, or with a unit: "500ms", "30s", "5m", "1h". */
static const char *parse_duration(cmd_parms *cmd, const char *arg, apr_interval_time_t *out)
{
    apr_interval_time_t t;

    if (ap_timeout_parameter_parse(arg, &t, "s") != APR_SUCCESS || t < 0) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not a duration (e.g. 30, 30s, 500ms, 5m)",
                            cmd->cmd->name, arg);
    }
    *out = t;
    return NULL;
}

static const char *set_connect_timeout(cmd_parms *cmd, void *dconf, const char *arg)
{
    return parse_duration(cmd, arg, &((mcp_dir_conf_t *)dconf)->backend_connect_timeout);
}

static const char *set_backend_timeout(cmd_parms *cmd, void *dconf, const char *arg)
{
    return parse_duration(cmd, arg, &((mcp_dir_conf_t *)dconf)->backend_timeout);
}

const command_rec mcp_config_cmds[] = {
    AP_INIT_TAKE1("MCPBackend", set_backend, NULL, RSRC_CONF | ACCESS_CONF,
                  "URL of the backend MCP server: http://host:port/path, https://..., or "
                  "unix:/path/to.sock|http://localhost/path"),
    AP_INIT_TAKE1("MCPMaxMessageSize", set_size, NULL, RSRC_CONF | ACCESS_CONF,
                  "Largest JSON-RPC body accepted from a client or a backend, in bytes "
                  "(default 4194304)"),
    AP_INIT_TAKE1("MCPBackendConnectTimeout", set_connect_timeout, NULL, RSRC_CONF | ACCESS_CONF,
                  "How long to wait for a connection to the backend (default 5s)"),
    AP_INIT_TAKE1("MCPBackendTimeout", set_backend_timeout, NULL, RSRC_CONF | ACCESS_CONF,
                  "Longest a single exchange with the backend may take, 0 for no limit "
                  "(default 300s)"),
    { NULL }
};
