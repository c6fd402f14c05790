/* mod_mcp — an MCP Streamable HTTP gateway for Apache httpd 2.4.
 *
 * This file is the module record and its hooks; the handler, the configuration and the database
 * glue live in mod_mcp_*.c, the protocol logic in the pure mcp_*.c files.
 */
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_core.h>
#include <ap_mpm.h>
#include <apr_strings.h>
#include <unistd.h>

#include "mcp_backend.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_handler.h"
#include "mod_mcp_request.h"

/* Idle backend connections kept per child for reuse. */
#define MCP_BACKEND_IDLE_HANDLES 64

static apr_status_t backend_global_cleanup(void *data)
{
    (void)data;
    mcp_backend_global_cleanup();
    return APR_SUCCESS;
}

static int mcp_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp, server_rec *s)
{
    (void)plog;
    (void)ptemp;
    /* The first pass only checks the configuration. */
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        return OK;
    }
    /* libcurl's global set-up is not thread-safe: once, in the parent, before any child. */
    if (mcp_backend_global_init() != 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "libcurl could not be initialised");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    apr_pool_cleanup_register(pconf, NULL, backend_global_cleanup, apr_pool_cleanup_null);
    if (!mcp_dbd_init()) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s,
                     "mod_dbd is not loaded: every MCP request will fail until it is "
                     "(LoadModule dbd_module, DBDriver pgsql, DBDParams ...)");
    }
    return OK;
}

static void mcp_child_init(apr_pool_t *pchild, server_rec *s)
{
    char host[APRMAXHOSTLEN + 1];
    int threads = 0;

    mcp_child.backends = mcp_backend_pool_create(pchild, MCP_BACKEND_IDLE_HANDLES);
    /* Each follower of a stream holds a worker thread, so a slot per thread is enough. */
    ap_mpm_query(AP_MPMQ_MAX_THREADS, &threads);
    mcp_child.router = mcp_router_create(pchild, threads > 0 ? threads : 1);
    if (apr_gethostname(host, sizeof(host), pchild) != APR_SUCCESS) {
        apr_cpystrn(host, "localhost", sizeof(host));
    }
    mcp_child.owner = apr_psprintf(pchild, "%s:%" APR_PID_T_FMT, host, getpid());
    if (!mcp_child.backends || !mcp_child.router) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                     "cannot set up mod_mcp's per-process state; MCP requests will fail");
    }
}

static void mcp_register_hooks(apr_pool_t *p)
{
    (void)p;
    ap_hook_post_config(mcp_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(mcp_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_handler(mcp_handler, NULL, NULL, APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(mcp) = {
    STANDARD20_MODULE_STUFF,
    mcp_config_create_dir,
    mcp_config_merge_dir,
    NULL,
    NULL,
    mcp_config_cmds,
    mcp_register_hooks,
    AP_MODULE_FLAG_NONE
};
