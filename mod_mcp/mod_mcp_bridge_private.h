/* mod_mcp_bridge_private — what the era bridge's files share (mod_mcp_bridge.c: the entry,
 * the pool and a call relayed by the process that made it; mod_mcp_bridge_round.c: the
 * input-required rounds and their retries; mod_mcp_bridge_listen.c: subscriptions/listen;
 * mod_mcp_bridge_tools.c: Mcp-Param-* checked against the backend's tool list).
 * Not for other files: mod_mcp_bridge.h is the bridge's face.
 */
#ifndef MOD_MCP_BRIDGE_PRIVATE_H
#define MOD_MCP_BRIDGE_PRIVATE_H

#include "mcp_bridge.h"
#include "mcp_store_bridge.h"
#include "mod_mcp_detach.h"
#include "mod_mcp_exchange.h"
#include "mod_mcp_request.h"
#include "mod_mcp_stream.h"

/* What a call knows of the pool before its backend stream is opened (open_backend_stream). */
typedef enum {
    BRIDGE_POOL_UNREAD = 0,   /* nothing: the pool is read when the backend stream is opened  */
    BRIDGE_POOL_EMPTY,        /* the client's opening found no session for the call           */
    BRIDGE_POOL_READ,         /* ... found b->pooled and b->tools; the Mcp-Param-* headers are
                               * to be checked before the backend stream is opened            */
    BRIDGE_POOL_OPENED        /* ... and opened the backend stream on it (b->bs)               */
} bridge_pool_t;

typedef struct bridge_t {
    mcp_req_t               *q;          /* the client's request (detached: bq)              */
    mcp_req_t                bq;         /* the same, on the pooled session (backend stream);
                                          * with d, the detached stand-in's                 */
    mcp_detach_t            *d;          /* NULL, or where the call's backend half lives (this
                                          * struct included): its exchange runs on the event
                                          * loop and may go on after a round ends the request */
    mcp_detach_hooks_t       hooks;
    int                      detached;   /* ... it does: the request is over                  */
    mcp_backend_status_t     end_status; /* how the transfer ended (its end as perform says)   */
    const char              *end_err;
    const mcp_jsonrpc_msg_t *msg;
    mcp_store_session_t     *pooled;
    bridge_pool_t            pool;       /* what the client's opening read of the pool        */
    apr_time_t               pool_read_at; /* when the pool was last asked for the call's
                                          * session (0: not yet)                             */
    json_object             *server_info;
    mcp_stream_t             st;         /* the client's stream                              */
    mcp_stream_t             bs;         /* the backend's stream                             */
    mcp_exchange_t           x;
    apr_pool_t              *scratch;    /* cleared per message                              */
    apr_int64_t              backend_id; /* the call's id upstream                           */
    int                      log_min;    /* the request's logLevel rank, or -1 */
    const char              *final_out;  /* the response as the client gets it            */
    apr_time_t               answered;   /* the backend's response came                      */
    int                      finished;
    int                      parked;     /* the client got an InputRequiredResult            */
    int                      cancelled;  /* the client closed its response first             */
    int                      abandoned;  /* a round was not claimed in time                  */
    int                      ended_elsewhere; /* parked: the retry's client cancelled the call */
    mcp_router_sub_t        *watch;      /* parked: wake-ups for the backend stream           */
    apr_time_t               watched;    /* parked: its status was last read then             */
    apr_int64_t              pending_seq;   /* the last input request's seq (parked)          */
    apr_time_t               pending_since;
    apr_array_header_t      *round;      /* json_object *: the backend's requests not yet cut */
    apr_int64_t              round_pos;  /* seq of the last of them                           */
    const char              *refused_cap; /* a request needs a capability the client lacks  */
    int                      final_code; /* the backend's error code on the response, or 0    */
    mcp_store_bridge_tools_t tools;      /* the pooled session's cached list, of the called tool */
    const char              *tools_seen; /* a client's whole tools/list: declarations to cache   */
    apr_array_header_t      *url_round;  /* json_object *: the URL elicitations of a -32042     */
} bridge_t;

/* Tells the backend (best effort; logged) that the call backend_id is cancelled, and stores the
 * notification as an inbound event of the pooled session s. */
void mcp_bridged_cancel(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_id,
                        const char *reason);

/* DELETEs pooled session s upstream (best effort; logged), at the session's protocol version. */
void mcp_bridged_end_session(bridge_t *b, mcp_store_session_t *s, const char *why);

/* Answers the backend's ping request (parsed) on pooled session s on the client's behalf (stored
 * as an inbound event of s; best effort, logged). */
void mcp_bridged_pong(bridge_t *b, const mcp_store_session_t *s, json_object *ping);

/* The pooled session for the request: found, or (fresh: always) initialized. NULL with *why. */
mcp_store_session_t *mcp_bridged_pool(bridge_t *b, int fresh, const char **why);

/* A pooled session of the request's principal and capabilities that no other request is given:
 * its pooling key is theirs plus "#" tag (initialized now; reaped when idle like any other). */
mcp_store_session_t *mcp_bridged_pool_own(bridge_t *b, const char *tag, const char **why);

/* The backend's serverInfo (JSON text, may be NULL), stamped on results. */
void mcp_bridged_server_info(bridge_t *b, const char *text);

/* A JSON answer with this status. Returns DONE. */
int mcp_bridged_json(bridge_t *b, int status, const char *json);

/* A failure before or instead of the response: stored on the client's stream, then sent (an
 * SSE event when the stream is SSE already). Returns DONE. */
int mcp_bridged_fail(bridge_t *b, int http, const char *message);

/* A round for requests (json_object *, the backend's input requests; the last at position on
 * backend stream backend_stream of pooled session s): stored, then the client's response ends
 * with the InputRequiredResult. Returns DONE. */
int mcp_bridged_round_start(bridge_t *b, const mcp_store_session_t *s, apr_int64_t backend_stream,
                            apr_int64_t position, apr_array_header_t *requests);

/* The backend asked for capability cap, which the client's request did not declare: the call
 * on pooled session s is cancelled upstream and the client gets -32021 with
 * data.requiredCapabilities (HTTP 400 unless its response is SSE already). Returns DONE. */
int mcp_bridged_refuse(bridge_t *b, const mcp_store_session_t *s, const char *cap);

/* The position of a round that holds a backend's -32042 URL elicitations: the call ended
 * upstream, so its retry sends the request again (the URL flows complete out of band). */
#define MCP_BRIDGE_ROUND_URL (-1)

/* The call relayed on a pooled session (found or initialized; sent again once on a backend
 * 404). Returns DONE. */
int mcp_bridged_relay(bridge_t *b);

/* A retry carrying requestState state: claimed, answered upstream, followed (a URL round's:
 * the request sent again). Returns DONE. */
int mcp_bridged_round_retry(bridge_t *b, const char *state);

/* A tools/call's Mcp-Param-* headers checked against the called tool's x-mcp-header
 * arguments (b->pooled and b->tools found): 0 when the call may go on, else DONE (answered 400,
 * -32020, stored on the client's stream). */
int mcp_bridged_check_params(bridge_t *b);

/* The backend's response (parsed) to a client's tools/list: when it is the whole list (no
 * cursor asked, none given), its declarations are kept for mcp_bridged_tools_cache. */
void mcp_bridged_tools_seen(bridge_t *b, json_object *response);

/* Caches what mcp_bridged_tools_seen kept as the pooled session's tool list (after the
 * answer: it costs the client nothing). */
void mcp_bridged_tools_cache(bridge_t *b);

/* subscriptions/listen on the pooled session's GET stream. Returns DONE. */
int mcp_bridged_listen(bridge_t *b);

#endif
