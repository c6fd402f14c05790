/* mcp_store_members — the members of a federated session (mcp.session_members).
 *
 * A federated endpoint (<MCPMember> sections) holds one backend session per member for each of
 * its sessions: opened at initialize, or when first needed after the member failed there. The
 * rows say where each member's messages go, so any process and host serves the session. Two
 * statements: one stores (upserts) rows, one reads a session's rows.
 * Pure code: no httpd headers.
 */
#ifndef MCP_STORE_MEMBERS_H
#define MCP_STORE_MEMBERS_H

#include <apr_tables.h>

#include "mcp_store.h"

typedef struct mcp_store_member_t {
    const char *member;              /* <MCPMember name>                                  */
    const char *backend_url;         /* its Backend as written                            */
    const char *backend_session_id;  /* NULL: a stateless member, or none (failed)        */
    const char *protocol_version;    /* what it negotiated (NULL: failed)                 */
    int         open;                /* 1: open; 0: failed (error says why)               */
    const char *error;
    const char *initialize_result;   /* its InitializeResult as JSON text (NULL: failed)  */
} mcp_store_member_t;

/* Stores n members of session_id (a row there is replaced). */
mcp_store_status_t mcp_store_members_put(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const mcp_store_member_t *members, int n);

/* Stores the members of session_id that were opened again (or failed again), each only where its
 * row is not open (or absent): of several processes that open a member at once, the first one's
 * session is stored. *stored (may be NULL) gets, per row, 1 when it was stored, 0 when another
 * was already there (the caller ends its own session with the member and reads the row). */
mcp_store_status_t mcp_store_members_reopened(mcp_store_t *db, apr_pool_t *p,
                                              const char *session_id,
                                              const mcp_store_member_t *members, int n,
                                              int *stored);

/* Marks the member failed (why) when its row still holds backend_session_id, the session the
 * member lost: one opened again meanwhile stays. */
mcp_store_status_t mcp_store_member_lost(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         const char *member, const char *backend_session_id,
                                         const char *why);

/* The session's members (mcp_store_member_t, in p), in no particular order, an empty array when
 * it has none; and what its client said in its initialize (JSON texts, NULL when absent), to
 * open a member's session later the same way. NOT_FOUND: no such session. */
mcp_store_status_t mcp_store_members_get(mcp_store_t *db, apr_pool_t *p, const char *session_id,
                                         apr_array_header_t **members, const char **client_info,
                                         const char **client_capabilities);

#endif
