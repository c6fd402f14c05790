/* mod_mcp_stdio — the module's glue for stdio MCP servers (docs/stdio.md, issue 23).
 *
 * The directives (MCPStdioListen, MCPStdioSecretFile, MCPStdioSupervisor, MCPStdioMaxProcesses
 * and the <MCPStdioServer name> section), the backend target of `MCPBackend stdio:name`, and the
 * life of the supervisor program (mcp-stdio-supervisor) in the httpd parent: started in
 * post_config when some MCPStdioServer exists, kept across restarts in retained data (a graceful
 * restart sends it the new configuration on its control pipe), started again when it dies.
 *
 * What callers may assume:
 *   - a stdio backend is an HTTP backend whose target has `stdio` set: mcp_backend sends a
 *     session's requests to the URL in its session id and every request with the supervisor's
 *     key (the target's header lines); mcp_stdio_call adds what only this module knows (the
 *     local supervisor's current port, the principal and gateway session tag of initialize);
 *   - the target is filled in post_config, in the parent, before any child is forked; it is
 *     in pconf, so it lives as long as the configuration that names it.
 */
#ifndef MOD_MCP_STDIO_H
#define MOD_MCP_STDIO_H

#include <httpd.h>
#include <http_config.h>

#include "mcp_backend.h"

/* The request note handle_initialize sets to the new gateway session's tag (mcp_id_tag) before
 * it asks the backend: sent to a supervisor as MCP-Gateway-Session-Tag. */
#define MCP_STDIO_SESSION_TAG_NOTE "mcp-new-session-tag"

/* The target of `MCPBackend stdio:name` (spec holds what follows "stdio:"), registered so that
 * post_config can fill it in and check that the server exists. NULL with *err on a bad name. */
const mcp_backend_target_t *mcp_stdio_backend(cmd_parms *cmd, const char *name,
                                              const char **err);

/* The target a stored backend URL (an MCPBackend spec, "stdio:name") names, or NULL when it is
 * no stdio backend of this configuration (the sweep's DELETE of expired sessions). */
const mcp_backend_target_t *mcp_stdio_target_of(const char *spec);

/* Completes a call to a stdio backend for request r (nothing for any other): a call without a
 * session id goes to this host's supervisor at its current port, with MCP-Supervisor-Principal
 * (r->user) and MCP-Gateway-Session-Tag (when the new session's tag is known) among its
 * identity lines. Allocates in r->pool. */
void mcp_stdio_call(request_rec *r, mcp_backend_call_t *call);

/* When a request of an existing session (backend_session_id) of a stdio target ended with
 * status st because the supervisor that holds the process cannot be reached: the words for
 * the client's 404 (the session is over: its process went with its supervisor), allocated in
 * p; else NULL. */
const char *mcp_stdio_lost(apr_pool_t *p, const mcp_backend_target_t *target,
                           const char *backend_session_id, mcp_backend_status_t st,
                           const char *err);

/* The directives, for mcp_config_cmds. */
const char *mcp_stdio_set_listen(cmd_parms *cmd, void *dconf, const char *addr,
                                 const char *advertise);
const char *mcp_stdio_set_secret_file(cmd_parms *cmd, void *dconf, const char *path);
const char *mcp_stdio_set_supervisor(cmd_parms *cmd, void *dconf, const char *path);
const char *mcp_stdio_set_max_processes(cmd_parms *cmd, void *dconf, const char *n);
const char *mcp_stdio_server_section(cmd_parms *cmd, void *dconf, const char *arg);

#define MCP_STDIO_CMDS \
    AP_INIT_TAKE12("MCPStdioListen", mcp_stdio_set_listen, NULL, RSRC_CONF, \
                   "The address the stdio supervisor listens on (host:port, port 0: any; " \
                   "default 127.0.0.1:0) and the base URL other hosts reach it at (default " \
                   "http://127.0.0.1:{port})"), \
    AP_INIT_TAKE1("MCPStdioSecretFile", mcp_stdio_set_secret_file, NULL, RSRC_CONF, \
                  "A file whose first line is the key between the gateway and the stdio " \
                  "supervisors (the same file on every host; default: a random key per start)"), \
    AP_INIT_TAKE1("MCPStdioSupervisor", mcp_stdio_set_supervisor, NULL, RSRC_CONF, \
                  "The mcp-stdio-supervisor program (default: the one installed with the " \
                  "module)"), \
    AP_INIT_TAKE1("MCPStdioMaxProcesses", mcp_stdio_set_max_processes, NULL, RSRC_CONF, \
                  "stdio server processes on this host, all servers (default 0: no limit)"), \
    AP_INIT_RAW_ARGS("<MCPStdioServer", mcp_stdio_server_section, NULL, RSRC_CONF, \
                     "<MCPStdioServer name> ... </MCPStdioServer>: a stdio MCP server, one " \
                     "process per session, reached with MCPBackend stdio:name")

/* Hooks: check_config (MCPBackend stdio:name names a server; the supervisor program), the
 * parent's post_config (the supervisor), child_init (closes the parent's pipe ends). */
void mcp_stdio_register_hooks(void);

#endif
