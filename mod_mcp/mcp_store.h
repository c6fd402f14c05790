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
    MCP_STORE_CONFLICT,    /* a row that must be unique exists (a second standalone stream)  */
    MCP_STORE_LIMIT,       /* a configured limit was reached (which: mcp_store_refusal_t)    */
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

/* Looks up the live session id that belongs to principal (NULL: an unauthenticated session) and
 * records the activity. A terminated session, one idle for more than idle_secs (0: no limit;
 * it is then marked terminated by 'expired'), or one of another principal, is NOT_FOUND: a
 * session id is never a capability on its own. On OK, *out is allocated in p. */
mcp_store_status_t mcp_store_session_touch(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, int idle_secs,
                                           mcp_store_session_t **out, const char **err);

/* Marks a live session terminated (by: "client", "expired" or "backend"). NOT_FOUND when it was
 * not live (already terminated, unknown, or another principal's). */
mcp_store_status_t mcp_store_session_terminate(const mcp_store_t *db, apr_pool_t *p, const char *id,
                                               const char *principal, const char *by,
                                               const char **err);

/* ---- streams and events ------------------------------------------------------------------ */

/* A request stream's fixed positions: the inbound request, then the priming row. */
#define MCP_STORE_SEQ_REQUEST  0
#define MCP_STORE_SEQ_PRIMING  1

/* The owner is still at work: extends the stream's lease and the session's activity. NOT_FOUND
 * when the stream is no longer open (someone finished it after its lease ran out). */
mcp_store_status_t mcp_store_stream_renew(const mcp_store_t *db, apr_pool_t *p,
                                          apr_int64_t stream_id, const char *session_id,
                                          int lease_secs, const char **err);

/* Stores a stream's last messages (a JSON array's text, may be "[]") and ends it with status, in
 * one statement and so one transaction: followers elsewhere get one wake-up for both. */
mcp_store_status_t mcp_store_events_append_finish(const mcp_store_t *db, apr_pool_t *p,
                                                  const mcp_store_session_t *session,
                                                  apr_int64_t stream_id, apr_int64_t first_seq,
                                                  const char *messages, const char *status,
                                                  const char **err);

/* Stores messages (a JSON array's text holding n of them) in one statement. With stream_id > 0
 * they take seq first_seq, first_seq+1, ... on that stream; with stream_id 0 they belong to no
 * stream (inbound notifications and responses). direction: "in" or "out". */
mcp_store_status_t mcp_store_events_append(const mcp_store_t *db, apr_pool_t *p,
                                           const mcp_store_session_t *session,
                                           apr_int64_t stream_id, apr_int64_t first_seq,
                                           const char *direction, const char *messages,
                                           const char **err);

/* Finishes open streams whose lease ran out (their owner died): stream_id, or every such stream
 * when stream_id is 0. Each unanswered request on them gets a stored JSON-RPC error response with
 * message, so every client gets an answer. Exactly once: of several processes or hosts trying
 * at the same time, one finishes each stream. *finished gets how many this call finished. */
mcp_store_status_t mcp_store_streams_expire(const mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t stream_id, const char *message,
                                            long *finished, const char **err);

typedef struct mcp_store_stream_t {
    apr_int64_t id;
    const char *kind;          /* "request" or "standalone"                            */
    const char *status;        /* "open", "complete", "failed", "closed"               */
    int         lease_expired; /* open, but its owner stopped renewing the lease        */
    apr_int64_t last_seq;      /* highest seq stored on it                             */
    const char *owner;         /* host:pid of the process relaying it                  */
} mcp_store_stream_t;

/* The stream's current state (for a follower deciding whether to wait for more). */
mcp_store_status_t mcp_store_stream_get(const mcp_store_t *db, apr_pool_t *p,
                                        apr_int64_t stream_id, mcp_store_stream_t *out,
                                        const char **err);

/* Called for each stored outbound event in order; message is NULL for a priming row. Non-zero
 * stops the iteration. */
typedef int mcp_store_event_fn(void *baton, apr_int64_t seq, const char *message);

/* ---- limits: admission control ---------------------------------------------------------- *
 *
 * Streams (request and standalone) and followers (GETs with Last-Event-ID of an open stream)
 * each hold a worker thread; sessions hold backend state. The functions below admit one more
 * of them only within limits, counted in PostgreSQL across every process and host, atomically:
 * the check and the insert are one statement, serialised per session, holder and stream by
 * advisory locks (sql/schema.sql: mcp.admit_stream, mcp.admit_session), so parallel requests
 * never overshoot. A limit of 0 is no limit. */

/* Which limit refused an admission. */
typedef enum {
    MCP_STORE_ADMITTED = 0,
    MCP_STORE_REFUSED_SESSION_STREAMS,    /* the session's open streams and followers        */
    MCP_STORE_REFUSED_HOLDER_STREAMS,     /* the holder's open streams and followers         */
    MCP_STORE_REFUSED_STREAM_FOLLOWERS,   /* the stream's followers                          */
    MCP_STORE_REFUSED_SESSIONS,           /* live sessions altogether                        */
    MCP_STORE_REFUSED_HOLDER_SESSIONS     /* the holder's live sessions                      */
} mcp_store_refusal_t;

typedef struct mcp_store_limits_t {
    const char *holder;                /* who: "user:<name>", or "addr:<client address>"     */
    int         max_session_streams;   /* streams + followers per session                    */
    int         max_holder_streams;    /* streams + followers per holder                     */
    int         max_stream_followers;  /* followers per stream                               */
} mcp_store_limits_t;

/* Stores a new session together with its initialize exchange (request and response JSON, stored
 * as inbound/outbound events of no stream), in one statement: a session row is never
 * half-written. When max_live live sessions (not terminated, active within idle_secs; 0: no idle
 * limit) exist already, or max_per_holder of them are holder's, nothing is stored and the answer
 * is LIMIT (*refused says which). The session row records holder. */
mcp_store_status_t mcp_store_session_insert_admitted(const mcp_store_t *db, apr_pool_t *p,
                                                     const mcp_store_session_t *session,
                                                     const char *holder, const char *init_request,
                                                     const char *init_response, int max_live,
                                                     int max_per_holder, int idle_secs,
                                                     mcp_store_refusal_t *refused,
                                                     const char **err);

/* The same two counts without storing anything (a cheap early refusal, before the backend is
 * asked for a session; not atomic: the insert decides). OK or LIMIT with *refused. */
mcp_store_status_t mcp_store_session_admissible(const mcp_store_t *db, apr_pool_t *p,
                                                const char *holder, int max_live,
                                                int max_per_holder, int idle_secs,
                                                mcp_store_refusal_t *refused, const char **err);

/* Record, then dispatch: in one statement, checks that session->id is live, belongs to
 * session->principal and session->backend_url and was active within idle_secs (0: no limit), records
 * the activity, admits one more stream (limits), creates the request stream (owned by owner,
 * leased for lease_secs, held by limits->holder), stores the inbound message (seq 0) and the
 * priming row (seq 1). The first outbound message takes seq 2. request_id is JSON (an array for a
 * batch). On OK and LIMIT, session->backend_session_id and ->protocol_version are filled in;
 * NOT_FOUND when the session is not live for that principal and backend; LIMIT (*refused says
 * which) when the session or the holder holds its maximum of streams. Nothing is stored but the
 * activity unless OK. */
mcp_store_status_t mcp_store_stream_open_request_admitted(
    const mcp_store_t *db, apr_pool_t *p, mcp_store_session_t *session, int idle_secs,
    const char *request_id, const char *method, const char *inbound, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused, const char **err);

/* Opens the session's standalone GET stream with its priming row (seq 0), held by
 * limits->holder; CONFLICT when the session has an open one whose lease has not run out (a stale
 * one is closed first); LIMIT (*refused) when the session or the holder holds its maximum. */
mcp_store_status_t mcp_store_stream_open_standalone_admitted(
    const mcp_store_t *db, apr_pool_t *p, const mcp_store_session_t *session, const char *owner,
    int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused, const char **err);

/* The stream that event (stream_id, seq) belongs to, if that event exists and the stream is the
 * session's; NOT_FOUND otherwise (another session's stream is never found). When that stream is
 * open, registers a follower of it (owned by owner, leased for lease_secs; *follower_id, else 0)
 * in the same statement; LIMIT (*refused) when the session, the holder or the stream holds its
 * maximum (nothing registered; *out is filled). */
mcp_store_status_t mcp_store_stream_follow(const mcp_store_t *db, apr_pool_t *p,
                                           const char *session_id, apr_int64_t stream_id,
                                           apr_int64_t seq, const char *owner, int lease_secs,
                                           const mcp_store_limits_t *limits,
                                           mcp_store_stream_t *out, apr_int64_t *follower_id,
                                           mcp_store_refusal_t *refused, const char **err);

/* The follower is still there: extends its lease. */
mcp_store_status_t mcp_store_follower_renew(const mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t follower_id, int lease_secs,
                                            const char **err);

/* The follower ended: it no longer counts. */
mcp_store_status_t mcp_store_follower_release(const mcp_store_t *db, apr_pool_t *p,
                                              apr_int64_t follower_id, const char **err);

/* The stream's outbound events with seq > after_seq, in order, at most max_rows of them, and
 * bounded by bytes as well: a read stops after the row that brings the messages' total to
 * max_bytes (so one row is always read). *n gets how many were delivered; *more is set when
 * the read stopped at a bound (more rows may follow). */
mcp_store_status_t mcp_store_events_after_bounded(const mcp_store_t *db, apr_pool_t *p,
                                                  apr_int64_t stream_id, apr_int64_t after_seq,
                                                  int max_rows, apr_off_t max_bytes,
                                                  mcp_store_event_fn *fn, void *baton, int *n,
                                                  int *more, const char **err);

#endif
