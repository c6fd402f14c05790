/* mcp_store_bridge — the era bridge's state in PostgreSQL (sql/migrations/007-era-bridge.sql):
 * pooled backend sessions, each backend's InitializeResult, the link between a bridged call's
 * client stream and its backend stream, and the input-required rounds.
 *
 * Every call is one statement through mcp_store_exec (so the handle's outage policy applies).
 * A round is claimed exactly once: the claim is one UPDATE ... WHERE used_at IS NULL, so of
 * two retries with the same requestState, on any processes or hosts, one wins.
 * Pure code: no httpd headers.
 */
#ifndef MCP_STORE_BRIDGE_H
#define MCP_STORE_BRIDGE_H

#include "mcp_refresh.h"
#include "mcp_store.h"

/* What a pooled session's cached tool list (mcp.bridge_sessions.tool_headers) says of one tool. */
typedef struct mcp_store_bridge_tools_t {
    int          cached;   /* a list was read                                                  */
    double       age;      /* seconds since                                                    */
    const char  *decls;    /* the tool's x-mcp-header declarations (a JSON array's text, as
                            * mcp_era_param_decls makes them), NULL when the list lacks it      */
    apr_time_t   asked_at; /* when the store was asked (this host's clock): a read of the list
                            * that ended after it is newer than this copy                      */
} mcp_store_bridge_tools_t;

/* The live pooled session of principal (NULL: none) for backend_url and capabilities_key: its
 * id, backend session id (NULL for a stateless backend), protocol version and serverInfo, in p.
 * NOT_FOUND when there is none (terminated and idle ones are not). */
mcp_store_status_t mcp_store_bridge_pooled(mcp_store_t *db, apr_pool_t *p, const char *principal,
                                           const char *backend_url, const char *caps_key,
                                           mcp_store_session_t **out);

/* A bridged call's backend stream, as the pooled session gets it. */
typedef struct mcp_store_bridge_open_t {
    const char  *principal;        /* the pool's key: r->user (NULL: none) ...            */
    const char  *backend_url;      /* ... the backend ...                                 */
    const char  *caps_key;         /* ... and the client's canonical capabilities         */
    const char  *tool;             /* tools/call: the tool called, else NULL              */
    double       tools_ttl;        /* seconds a cached tool list is trusted               */
    apr_int64_t  client_stream;    /* the call's client stream (linked to the new one)    */
    const char  *request_id;       /* the backend-side id (JSON text)                     */
    const char  *method;
    const char  *sent;             /* the request as it goes upstream                     */
    const char  *owner;            /* the stream's owner and lease, and its holder        */
    int          lease_secs;
    const char  *holder;
    mcp_refresh_t *marks;          /* the process's marks of pooled sessions seen: of the
                                    * calls that find the row stale at once, one marks it
                                    * (NULL: each does)                                   */
} mcp_store_bridge_open_t;

/* One statement for what a bridged call needs of the store before the backend is asked, in the
 * child's group (see mcp_store.h): the pooled session (as mcp_store_bridge_pooled: *out,
 * *tools; its row FOR KEY SHARE, marked seen afterwards when stale: call->marks), and
 * — unless the call's Mcp-Param-* headers must be checked first (a tool whose cached
 * declarations are not known to be none, or whose list is older than tools_ttl) — its backend
 * stream opened on it (the request and the priming row stored) and linked to the client
 * stream, whose trace id it takes: *stream_id, else 0 (the caller checks, then opens the stream
 * itself). NOT_FOUND when there is no pooled session. */
mcp_store_status_t mcp_store_bridge_open_call(mcp_store_t *db, apr_pool_t *p,
                                              const mcp_store_bridge_open_t *call,
                                              mcp_store_session_t **out,
                                              mcp_store_bridge_tools_t *tools,
                                              apr_int64_t *stream_id);

/* A 2026-07-28 request as its stateless stream stores it (mcp_store_stream_open_stateless_admitted's
 * arguments). */
typedef struct mcp_store_stateless_t {
    const char                *protocol_version;
    const char                *request_id;    /* the client's id (JSON text)                  */
    const char                *method;
    const char                *inbound;       /* the request as it came                       */
    const char                *trace_id;
    const char                *owner;         /* the stream's owner and lease                 */
    int                        lease_secs;
    const mcp_store_limits_t  *limits;        /* limits->holder's limit on streams            */
    const char                *member;        /* the federated member (NULL: none)            */
} mcp_store_stateless_t;

/* A bridged call's two openings in one statement (one commit): the client's stream as
 * mcp_store_stream_open_stateless_admitted opens it (the principal is call->principal), and
 * then, as mcp_store_bridge_open_call with call->tool checked, its backend stream on the pooled
 * session, whose request id is the client stream's id and whose request is
 * mcp_bridge_request_join's text of that id and call->sent, which here is the tail
 * (mcp_bridge_request_tail); call->client_stream and call->request_id are not read. LIMIT
 * (*refused) when the client's stream was refused: nothing stored. Else *client_stream; then
 * NOT_FOUND when the pool has no session for the call, or OK with *out and *tools, and
 * *stream_id the backend stream (0: not opened, the headers are to be checked first). */
mcp_store_status_t mcp_store_bridge_open_stateless(mcp_store_t *db, apr_pool_t *p,
                                                   const mcp_store_stateless_t *client,
                                                   const mcp_store_bridge_open_t *call,
                                                   apr_int64_t *client_stream,
                                                   mcp_store_refusal_t *refused,
                                                   mcp_store_session_t **out,
                                                   mcp_store_bridge_tools_t *tools,
                                                   apr_int64_t *stream_id);

/* Caches the x-mcp-header declarations of every tool (a JSON object's text: tool name ->
 * declarations) as pooled session session_id's tool list, read now. */
mcp_store_status_t mcp_store_bridge_tools_set(mcp_store_t *db, apr_pool_t *p,
                                              const char *session_id, const char *headers);

/* Puts a new session (stored already) in the pool, and records the backend's InitializeResult
 * (JSON text) as its newest, in one statement. */
mcp_store_status_t mcp_store_bridge_pool_add(mcp_store_t *db, apr_pool_t *p,
                                             const char *session_id, const char *principal,
                                             const char *backend_url, const char *caps_key,
                                             const char *init_result);

/* The backend's InitializeResult as last recorded (JSON text, in p); NOT_FOUND when none. */
mcp_store_status_t mcp_store_bridge_init_result(mcp_store_t *db, apr_pool_t *p,
                                                const char *backend_url, const char **out);

/* Records that client_stream is served by backend_stream (the audit's link). */
mcp_store_status_t mcp_store_bridge_link(mcp_store_t *db, apr_pool_t *p,
                                         apr_int64_t client_stream, apr_int64_t backend_stream);

/* A bridged call still running upstream, as a client's notification names it. */
typedef struct mcp_store_bridge_call_t {
    const char  *session_id;          /* the pooled session (mcp.sessions)                  */
    const char  *backend_session_id;  /* ... as the backend knows it                         */
    const char  *protocol_version;    /* ... its revision                                    */
    apr_int64_t  stream_id;           /* the backend stream, open                            */
    apr_int64_t  backend_request_id;  /* the call's id on the backend side                    */
} mcp_store_bridge_call_t;

/* The newest call of principal whose client request id was request_id (JSON text) and whose
 * backend stream is still open, made within the last max_age_secs (the longest a call can
 * run). NOT_FOUND when there is none (never made, answered, another principal's). */
mcp_store_status_t mcp_store_bridge_call_of(mcp_store_t *db, apr_pool_t *p, const char *principal,
                                            const char *request_id, int max_age_secs,
                                            mcp_store_bridge_call_t *out);

/* An input-required round: where it stands. */
typedef struct mcp_store_bridge_round_t {
    const char  *session_id;          /* the pooled session (mcp.sessions)                  */
    const char  *backend_session_id;  /* ... as the backend knows it                         */
    const char  *protocol_version;    /* ... its revision                                    */
    apr_int64_t  stream_id;           /* the backend stream                                  */
    apr_int64_t  backend_request_id;  /* the call's id on the backend side                    */
    apr_int64_t  position;            /* seq of the round's last input request on the stream */
    const char  *pending;             /* JSON object text: name -> the backend's request id   */
    const char  *server_info;         /* the pooled session's serverInfo (JSON text) or NULL  */
} mcp_store_bridge_round_t;

/* Stores a round (state: the requestState handle) that expires ttl_secs from now, and marks the
 * backend stream followed (its events wake followers on every host). */
mcp_store_status_t mcp_store_bridge_round_add(mcp_store_t *db, apr_pool_t *p, const char *state,
                                              const char *principal, const char *digest,
                                              const mcp_store_bridge_round_t *round,
                                              int ttl_secs);

/* Why a claim failed. */
typedef enum {
    MCP_STORE_BRIDGE_CLAIMED = 0,
    MCP_STORE_BRIDGE_UNKNOWN,          /* no such requestState (never issued, or tampered)      */
    MCP_STORE_BRIDGE_OTHER_PRINCIPAL,  /* issued to another principal                            */
    MCP_STORE_BRIDGE_OTHER_REQUEST,    /* issued for another request (method, name, arguments)  */
    MCP_STORE_BRIDGE_EXPIRED,          /* its time ran out                                       */
    MCP_STORE_BRIDGE_USED              /* used already (a replay)                                */
} mcp_store_bridge_claim_t;

/* Claims the round state for principal and the request's digest, exactly once: OK with *verdict
 * CLAIMED and *out filled, or OK with another verdict (nothing changed). */
mcp_store_status_t mcp_store_bridge_round_claim(mcp_store_t *db, apr_pool_t *p, const char *state,
                                                const char *principal, const char *digest,
                                                mcp_store_bridge_claim_t *verdict,
                                                mcp_store_bridge_round_t *out);

/* Whether the round at position on the backend stream was claimed by a retry: *claimed 1, or 0
 * when it was not (or never stored). */
mcp_store_status_t mcp_store_bridge_round_claimed(mcp_store_t *db, apr_pool_t *p,
                                                  apr_int64_t stream_id, apr_int64_t position,
                                                  int *claimed);

/* A retry's client cancelled the call: the backend stream, when still open, is marked cancelled
 * (its relay, parked in another process perhaps, is woken and lets go of the backend's answer). */
mcp_store_status_t mcp_store_bridge_cancel(mcp_store_t *db, apr_pool_t *p, apr_int64_t stream_id);

#endif
