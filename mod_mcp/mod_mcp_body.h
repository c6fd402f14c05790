/* mod_mcp_body — a POST body read once per request, whoever asks first.
 *
 * The handler needs the body, and so does per-name authorization (Require mcp-tool ...), which
 * runs earlier (check_authz, before the handler; see mod_mcp_authz). Whichever asks first reads
 * it, bounded by MCPMaxMessageSize, into one NUL-terminated buffer kept with the request
 * (r->request_config); later calls get the same result.
 */
#ifndef MOD_MCP_BODY_H
#define MOD_MCP_BODY_H

#include <httpd.h>

typedef enum {
    MCP_BODY_OK = 0,
    MCP_BODY_TOO_LARGE,     /* announced or found larger than the limit (nothing kept)      */
    MCP_BODY_UNREADABLE,    /* the client's body could not be read (rv says why)            */
    MCP_BODY_NO_MEMORY
} mcp_body_status_t;

typedef struct mcp_body_t {
    mcp_body_status_t status;
    apr_status_t      rv;       /* UNREADABLE: what ap_get_brigade said */
    const char       *raw;      /* OK: the body, NUL-terminated         */
    apr_size_t        len;
} mcp_body_t;

/* The request's body, read now or earlier (limit: the most bytes taken). */
const mcp_body_t *mcp_body_read(request_rec *r, apr_off_t limit);

/* The body if it has been read already, else NULL (never reads). */
const mcp_body_t *mcp_body_peek(request_rec *r);

#endif
