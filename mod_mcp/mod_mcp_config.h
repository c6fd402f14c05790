/* mod_mcp_config — mod_mcp's directives and their per-directory configuration.
 *
 * Every field starts unset and merges through one macro: a <Location> inherits what it does not
 * say itself. Readers use mcp_config_get(), which fills in the defaults.
 */
#ifndef MOD_MCP_CONFIG_H
#define MOD_MCP_CONFIG_H

#include <apr_hash.h>
#include <httpd.h>
#include <http_config.h>
#include <ap_expr.h>

#include "mcp_backend.h"

#define MCP_DEFAULT_MAX_MESSAGE_SIZE        (4 * 1024 * 1024)
#define MCP_MAX_MESSAGE_SIZE_LIMIT          (1024 * 1024 * 1024)   /* 1 GiB: far from INT_MAX */
#define MCP_DEFAULT_BACKEND_CONNECT_TIMEOUT apr_time_from_sec(5)
#define MCP_DEFAULT_BACKEND_TIMEOUT         apr_time_from_sec(60)
#define MCP_DEFAULT_STREAM_TIMEOUT          apr_time_from_sec(300)
#define MCP_DEFAULT_STREAM_QUEUE_LENGTH     16
#define MCP_DEFAULT_STREAM_QUEUE_BYTES      (256 * 1024)
#define MCP_DEFAULT_RETRY_INTERVAL          apr_time_from_sec(1)
#define MCP_DEFAULT_KEEPALIVE_INTERVAL      apr_time_from_sec(15)
#define MCP_DEFAULT_STREAM_LEASE            apr_time_from_sec(30)
#define MCP_DEFAULT_SESSION_IDLE_TIMEOUT    apr_time_from_sec(3600)
#define MCP_DEFAULT_MAX_SESSIONS            10000
#define MCP_DEFAULT_MAX_PRINCIPAL_SESSIONS  1000
#define MCP_DEFAULT_MAX_SESSION_STREAMS     16
#define MCP_DEFAULT_MAX_PRINCIPAL_STREAMS   64
#define MCP_DEFAULT_MAX_STREAM_FOLLOWERS    4
#define MCP_DEFAULT_MAX_BATCH_SIZE          100
#define MCP_DEFAULT_BRIDGE_INPUT_TIMEOUT    apr_time_from_sec(300)
#define MCP_DEFAULT_BRIDGE_TOOLS_TTL        apr_time_from_sec(60)
#define MCP_DEFAULT_BACKEND_PROTOCOLS_TTL   apr_time_from_sec(3600)

typedef struct mcp_dir_conf_t {
    const char                 *backend_spec;    /* MCPBackend as written                     */
    const mcp_backend_target_t *backend;         /* ... parsed                                */
    apr_off_t                   max_message_size;
    apr_interval_time_t         backend_connect_timeout;
    apr_interval_time_t         backend_timeout;
    apr_interval_time_t         stream_timeout;
    int                         stream_queue_length;
    apr_off_t                   stream_queue_bytes;
    apr_interval_time_t         retry_interval;
    apr_interval_time_t         keepalive_interval;
    apr_interval_time_t         stream_lease;
    apr_interval_time_t         stream_close_after;    /* 0: streams stay open to the end     */
    apr_interval_time_t         session_idle_timeout;  /* 0: sessions never expire            */
    int                         max_sessions;          /* 0: no limit                         */
    int                         max_principal_sessions; /* 0: no limit (per user or address)  */
    int                         max_session_streams;   /* streams + followers, 0: no limit    */
    int                         max_principal_streams; /* ... per user or address             */
    int                         max_stream_followers;  /* Last-Event-ID followers, 0: no limit */
    int                         max_batch_size;        /* messages in a batch, 0: no limit    */
    apr_array_header_t         *allowed_origins;       /* const char *: self, localhost, *, URL */
    apr_array_header_t         *allowed_hosts;         /* const char *: names, localhost, *     */
    const char                 *backend_protocols;     /* MCPBackendProtocols: revisions the
                                                        * backend serves, ", "-separated, newest
                                                        * first; NULL (unset): learned, read
                                                        * them with mcp_eras_backend           */
    apr_interval_time_t         backend_protocols_ttl; /* MCPBackendProtocolsTTL: how long
                                                        * learned eras are used, unless the
                                                        * discover result's ttlMs says         */
    int                         shim_max_rounds;       /* MCPShimMaxRounds: input-required
                                                        * rounds per request (era shim)      */
    const char                 *oauth_resource;        /* MCPProtectedResource (an https URL)   */
    apr_array_header_t         *oauth_servers;         /* MCPAuthorizationServers: URLs         */
    apr_array_header_t         *oauth_scopes;          /* MCPResourceScopes                     */
    int                         era_bridge;            /* MCPEraBridge: serve 2026-07-28
                                                        * clients through a 2025-era backend   */
    apr_interval_time_t         bridge_input_timeout;  /* MCPEraBridgeInputTimeout: how long an
                                                        * input-required round waits for its
                                                        * retry                                */
    apr_interval_time_t         bridge_tools_ttl;      /* MCPEraBridgeToolsTTL: how long a
                                                        * pooled session's cached tool list
                                                        * (x-mcp-header) is trusted            */
    int                         async_streams;         /* MCPAsyncStreams: park streams that
                                                        * only wait (mod_mcp_park)             */
    apr_array_header_t         *backend_headers;       /* mcp_backend_header_t: MCPBackendHeader
                                                        * and MCPBackendHeaderFile, in order   */
    apr_array_header_t         *members;               /* mcp_member_conf_t *: <MCPMember>
                                                        * sections (mod_mcp_members), a
                                                        * federated endpoint; NULL: none       */
    mcp_backend_tls_t          *backend_tls;           /* MCPBackendCACertificateFile and
                                                        * MCPBackendClientCertificateFile: an
                                                        * https backend's trust and our
                                                        * certificate (NULL: libcurl's defaults,
                                                        * no client certificate)               */
} mcp_dir_conf_t;

/* A header every backend request carries (the user's identity, a static credential). */
typedef struct mcp_backend_header_t {
    const char      *name;
    const ap_expr_info_t *expr;   /* MCPBackendHeader: evaluated per request, or NULL ...  */
    const char      *value;       /* ... MCPBackendHeaderFile: the file's one line          */
} mcp_backend_header_t;

/* The "Name: value" lines of the location's backend headers for request r (const char *),
 * evaluated once per request; NULL when there are none. A value that is empty, or that holds a
 * control character (CR, LF: it could split the header), is left out (logged at debug). */
const apr_array_header_t *mcp_config_backend_headers(request_rec *r,
                                                     const mcp_dir_conf_t *conf);

#define MCP_DEFAULT_SWEEP_INTERVAL          apr_time_from_sec(30)
#define MCP_DEFAULT_DATABASE_TIMEOUT        apr_time_from_sec(10)

/* Per-server settings (the background work of each process). */
typedef struct mcp_server_conf_t {
    apr_interval_time_t sweep_interval;   /* 0: no sweep                                  */
    apr_interval_time_t database_timeout; /* waiting for the database, and one statement   */
    apr_interval_time_t retention;        /* MCPRetention; UNSET (-1): off                */
    int                 group_commit;     /* MCPDatabaseGroupCommit: committers per child,
                                           * 0: off; UNSET (-1): the default (off)          */
    apr_hash_t         *oauth_resources;  /* metadata path -> mcp_dir_conf_t * (mod_mcp_oauth) */
} mcp_server_conf_t;

extern const command_rec mcp_config_cmds[];

/* A line of a section that sets what a backend is sent, as the directive of that name does, in
 * own (a zeroed mcp_dir_conf_t of the section's): Header Name expr (MCPBackendHeader),
 * HeaderFile Name path (MCPBackendHeaderFile), CACertificateFile path, ClientCertificateFile
 * cert [key]. NULL, or what is wrong. */
const char *mcp_config_backend_line(cmd_parms *cmd, mcp_dir_conf_t *own, const char *line,
                                    const apr_array_header_t *words);

/* The words of a directive's arguments as httpd splits them (quotes keep a word together), in
 * p: for the lines of a section (<MCPStdioServer>, <MCPMember>). */
apr_array_header_t *mcp_config_words(apr_pool_t *p, const char *args);

void *mcp_config_create_server(apr_pool_t *p, server_rec *s);
void *mcp_config_merge_server(apr_pool_t *p, void *base, void *add);
apr_interval_time_t mcp_config_sweep_interval(server_rec *s);
apr_interval_time_t mcp_config_database_timeout(server_rec *s);
/* MCPDatabaseGroupCommit: group-commit transactions under way at once per child (0: off). */
int mcp_config_group_commit(server_rec *s);
/* MCPRetention, or -1 when off (rows are kept for ever). */
apr_interval_time_t mcp_config_retention(server_rec *s);

void *mcp_config_create_dir(apr_pool_t *p, char *dir);
void *mcp_config_merge_dir(apr_pool_t *p, void *base, void *add);

/* The request's configuration with every unset field replaced by its default (in r->pool). */
const mcp_dir_conf_t *mcp_config_get(request_rec *r);

/* The server's configuration (unmerged fields hold their unset values). */
mcp_server_conf_t *mcp_config_server(server_rec *s);

#endif
