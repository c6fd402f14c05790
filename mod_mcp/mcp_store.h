/* mcp_store — the gateway's state in PostgreSQL (sql/schema.sql), through apr_dbd.
 *
 * Pure code: no httpd headers. The caller lends a connection (mod_mcp takes one from mod_dbd
 * with ap_dbd_open for each short piece of work); every statement uses bound parameters and is
 * prepared without a label, so no server-side state survives a PostgreSQL restart to break later
 * calls.
 */
#ifndef MCP_STORE_H
#define MCP_STORE_H

#include <apr_pools.h>
#include <apr_dbd.h>

typedef struct mcp_store_t {
    const apr_dbd_driver_t *driver;
    apr_dbd_t              *handle;
} mcp_store_t;

typedef enum {
    MCP_STORE_OK = 0,
    MCP_STORE_NOT_FOUND,   /* no such live row (unknown, terminated, or another principal's) */
    MCP_STORE_ERROR        /* the database failed; *err says how                             */
} mcp_store_status_t;

typedef struct mcp_store_session_t {
    const char *id;
    const char *backend_url;
    const char *backend_session_id;   /* NULL when the backend is stateless            */
    const char *protocol_version;
    const char *principal;            /* NULL for an unauthenticated client            */
    const char *client_info;          /* JSON text or NULL                             */
    const char *client_capabilities;  /* JSON text or NULL                             */
    const char *server_info;          /* JSON text or NULL                             */
} mcp_store_session_t;

/* Stores a new session (one INSERT, so a session row is never half-written). */
mcp_store_status_t mcp_store_session_insert(const mcp_store_t *db, apr_pool_t *p,
                                            const mcp_store_session_t *session, const char **err);

/* Looks up the live session id that belongs to principal (NULL: an unauthenticated session) and
 * records the activity. A terminated session, or one of another principal, is NOT_FOUND: a
 * session id is never a capability on its own. On OK, *out is allocated in p. */
mcp_store_status_t mcp_store_session_touch(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, mcp_store_session_t **out,
                                           const char **err);

/* Marks a live session terminated (by: "client", "expired" or "backend"). NOT_FOUND when it was
 * not live (already terminated, unknown, or another principal's). */
mcp_store_status_t mcp_store_session_terminate(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                               const char *principal, const char *by,
                                               const char **err);

#endif
