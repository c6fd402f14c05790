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
    /* A 2026-07-28 client's request (mod_mcp_federation_modern): the member asked in its own
     * era, not in the gateway's session. */
    int                      modern;
    json_object             *ask_id;     /* ... the id its answer carries                      */
    const char              *session_id; /* ... the bridge's pooled session (NULL: none)       */
    const char              *version;    /* ... MCP-Protocol-Version                           */
    apr_array_header_t      *headers;    /* ... more request headers (Mcp-Method), or NULL     */
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

/* The member called name (NULL: none). */
member_t *mcp_federated_member(fed_t *f, const char *name);

/* POSTs each asked member its body, all at once (in the member's session, unless opening; a
 * modern member as its fields say); the answers' messages, JSON or SSE, in m->messages. */
void mcp_federated_fan_out(fed_t *f, int opening, apr_interval_time_t timeout);

/* Which members a list page asks (want) and with which cursor of theirs (cursors; NULL: the
 * first page), from the request's params (NULL: every member, first pages). 0, or -1 when the
 * cursor is not one this endpoint gave (*why says so). */
int mcp_federated_list_cursor(fed_t *f, json_object *params, int *want, const char **cursors,
                              const char **why);

/* The client's list request (parsed in r->pool) with params.cursor a member's own (NULL: none,
 * the first page). */
json_object *mcp_federated_list_request(mcp_req_t *q, const char *cursor);

/* The index of the unprefixed member, which takes the methods the gateway does not know; -1
 * when every member is prefixed. */
int mcp_federated_unprefixed(const fed_t *f);

/* The page merged from the wanted members' answers to a list request (each answered id
 * m->ask_id, or id): rewritten into the client's names and merged (the caller puts it); NULL
 * and *error, a JSON-RPC error answer with id, when the page cannot be given (a cursor a member
 * refused, no member answered, cursors too long). A wanted member whose session is not open
 * (a modern one: not asked) is unavailable (m->row.error says why). */
json_object *mcp_federated_list_merged(fed_t *f, const int *want, const char **cursors,
                                       json_object *id, const char *method, const char **error);

/* Non-zero when m's session is open. */
int mcp_federated_open(const member_t *m);

/* Opens again, at once, the sessions of the members in want (one flag per member) that are not
 * open, and stores how it went (of several requests at once, the first one's session is kept). */
void mcp_federated_reopen(fed_t *f, const int *want);

#endif
