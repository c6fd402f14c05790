/* mod_mcp_stdio_private.h — what the two halves of stdio servers' glue share, and nothing else
 * includes: mod_mcp_stdio.c (the directives, MCPBackend stdio:name, check_config, what a request
 * adds) and mod_mcp_stdio_parent.c (the supervisor's life in httpd's parent: retained data,
 * fork and exec, the configuration document, replacement, post_config, child_init).
 */
#ifndef MOD_MCP_STDIO_PRIVATE_H
#define MOD_MCP_STDIO_PRIVATE_H

#include <apr_tables.h>
#include <httpd.h>

#include "mcp_backend.h"

#define MCP_STDIO_DEFAULT_LISTEN    "127.0.0.1:0"
#define MCP_STDIO_DEFAULT_ADVERTISE "http://127.0.0.1:{port}"

/* One <MCPStdioServer name> section; -1: not set (the supervisor's member is then left out or
 * gets its default here). */
typedef struct stdio_server_t {
    const char         *name;
    const char         *file;
    int                 line;
    apr_array_header_t *command;       /* const char *: argv                                */
    apr_array_header_t *env;           /* const char *: name, value, name, value ...        */
    apr_array_header_t *pass_env;      /* const char *: names read at post_config           */
    const char         *directory, *user, *group;
    apr_int64_t         limit_as, limit_cpu, limit_nofile, limit_nproc;
    apr_int64_t         start_timeout, idle_timeout, stop_grace, max_line;
    apr_int64_t         max_sessions, max_per_user;
} stdio_server_t;

/* `MCPBackend stdio:name`: the location's conf->backend points at target, the first member. */
typedef struct stdio_backend_t {
    mcp_backend_target_t target;
    const char          *name;
    const char          *file;
    int                  line;
    int                  port;         /* the supervisor's port the target's url was made for */
} stdio_backend_t;

/* Everything the directives said, in pconf; NULL before the first directive of a pass. */
typedef struct stdio_conf_t {
    const char         *listen, *advertise, *secret_file, *secret, *supervisor;
    apr_int64_t         max_processes;
    apr_array_header_t *servers;       /* stdio_server_t *, in order                        */
    apr_array_header_t *backends;      /* stdio_backend_t *                                 */
    const char         *local_host;    /* how this host reaches its supervisor (check_config) */
    apr_array_header_t *key_lines;     /* const char *: "MCP-Supervisor-Key: ..."           */
} stdio_conf_t;

/* The directives of this pass (in pconf; NULL before the first one: no stdio server). */
extern stdio_conf_t *mcp_stdio_conf;

/* MCPStdioSupervisor, or the built-in default, or NULL. */
const char *mcp_stdio_supervisor_path(const stdio_conf_t *c);

/* http://<local host>:<port>/stdio/<name>: where this host's supervisor serves b's server. */
const char *mcp_stdio_local_url(apr_pool_t *p, const stdio_backend_t *b, int port);

/* The supervisor's port as the parent last heard it (a page shared with the children), or 0.
 * While the parent starts a replacement for a dead supervisor, waits (polling, at most a few
 * seconds, logged on s) until it says its port. */
int mcp_stdio_port(server_rec *s);

/* The parent's hooks (mod_mcp_stdio_parent.c). */
int mcp_stdio_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                          server_rec *s);
void mcp_stdio_child_init(apr_pool_t *pchild, server_rec *s);

#endif
