/* mod_mcp_federation_private — what the federation's files share (mod_mcp_federation.c: the
 * requests of a federated session and its members' sessions; mod_mcp_federation_listen.c: its
 * standalone GET stream). Not for other files: mod_mcp_federation.h is the federation's face.
 */
#ifndef MOD_MCP_FEDERATION_PRIVATE_H
#define MOD_MCP_FEDERATION_PRIVATE_H

#include "mcp_federation.h"
#include "mcp_store_members.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_federation.h"
#include "mod_mcp_members.h"
#include "mod_mcp_stream.h"

/* One member, as this request sees it. */
typedef struct member_t {
    const mcp_member_conf_t *mc;
    mcp_dir_conf_t           conf;       /* the Location's, with the member's backend         */
    mcp_req_t                q;          /* the request, toward this member                   */
    mcp_store_member_t       row;        /* its state in the session (row.member NULL: none)  */
    int                      asked;      /* in the current fan-out                            */
    const char              *body;       /* ... what it is sent                               */
    mcp_exchange_t           x;
    apr_array_header_t      *messages;   /* ... its answer's messages (const char *)          */
    mcp_backend_status_t     status;
    const char              *err;
    mcp_stream_t            *st;         /* listen: the stream its messages go to             */
    int                      listening;  /* listen: its GET is an event stream                */
} member_t;

typedef struct fed_t {
    mcp_req_t        *q;
    int               n;
    member_t         *m;
    mcp_fed_member_t *fed;               /* the n members' naming rules (mcp_fed_*)           */
    const char       *client_info;       /* the client's initialize, to open a member later   */
    const char       *client_capabilities;
    int               client_read;       /* ... read (mcp_federated_load)                     */
} fed_t;

/* The request's members, as q's configuration names them (their rows not read yet). */
void mcp_federated_init(fed_t *f, mcp_req_t *q);

/* The session's member rows, and the client's initialize, into f (OK, or the store's status:
 * the caller answers). */
mcp_store_status_t mcp_federated_load(fed_t *f, const char *session_id);

/* Non-zero when m's session is open. */
int mcp_federated_open(const member_t *m);

/* Opens again, at once, the sessions of the members in want (one flag per member) that are not
 * open, and stores how it went (of several requests at once, the first one's session is kept). */
void mcp_federated_reopen(fed_t *f, const int *want);

#endif
