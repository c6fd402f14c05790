/* mod_mcp_config — mod_mcp's directives and their per-directory configuration.
 *
 * Every field starts unset and merges through one macro: a <Location> inherits what it does not
 * say itself. Readers use mcp_config_get(), which fills in the defaults.
 */
#ifndef MOD_MCP_CONFIG_H
#define MOD_MCP_CONFIG_H

#include <httpd.h>
#include <http_config.h>

#include "mcp_backend.h"

#define MCP_DEFAULT_MAX_MESSAGE_SIZE      (4 * 1024 * 1024)
#define MCP_DEFAULT_BACKEND_CONNECT_TIMEOUT apr_time_from_sec(5)
#define MCP_DEFAULT_BACKEND_TIMEOUT       apr_time_from_sec(300)

typedef struct mcp_dir_conf_t {
    const char                 *backend_spec;    /* MCPBackend as written                     */
    const mcp_backend_target_t *backend;         /* ... parsed                                */
    apr_off_t                   max_message_size;
    apr_interval_time_t         backend_connect_timeout;
    apr_interval_time_t         backend_timeout;
} mcp_dir_conf_t;

extern const command_rec mcp_config_cmds[];

void *mcp_config_create_dir(apr_pool_t *p, char *dir);
void *mcp_config_merge_dir(apr_pool_t *p, void *base, void *add);

/* The request's configuration with every unset field replaced by its default (in r->pool). */
const mcp_dir_conf_t *mcp_config_get(request_rec *r);

#endif
