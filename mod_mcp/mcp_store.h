/* mcp_store — the gateway's state in PostgreSQL (sql/schema.sql).
 *
 * Pure code: no httpd headers. A store handle (mcp_store_t) knows how to borrow a libpq
 * connection (its lender: mod_mcp lends mod_dbd's pooled connections) and carries the caller's
 * retry policy, so every mcp_store_* call is one complete piece of work: borrow, run one
 * statement with bound parameters, give the connection back, read the rows. Statements run as
 * named prepared statements of the connection (parsed and planned once per connection): one
 * that the connection lacks (a new or reset connection, a restarted database) is prepared on
 * first use there, so nothing depends on what a PostgreSQL restart takes away.
 *
 * Failures are classified here and only here (mcp_store_classify):
 *   - connection-class (SQLSTATE 08xxx, 57P01-57P03, 53xxx, 57014, 40001, 40P01, 25006, a
 *     lost connection, no answer within the statement timeout): the statement is tried again
 *     until the policy's patience runs out, the lender's wait() deciding how long to pause (it
 *     may wait for the database to come back); then MCP_STORE_UNAVAILABLE;
 *   - anything else (data 22xxx, constraints 23xxx, ...): permanent, never retried:
 *     MCP_STORE_REFUSED.
 * Either way the handle's error holds the SQLSTATE and PostgreSQL's message.
 */
#ifndef MCP_STORE_H
#define MCP_STORE_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>
#include <libpq-fe.h>

typedef enum {
    MCP_STORE_OK = 0,
    MCP_STORE_NOT_FOUND,   /* no such live row (unknown, terminated, or another principal's) */
    MCP_STORE_CONFLICT,    /* a row that must be unique exists (a second standalone stream)  */
    MCP_STORE_LIMIT,       /* a configured limit was reached (which: mcp_store_refusal_t)    */
    MCP_STORE_UNAVAILABLE, /* the database could not be reached in time (retried first)      */
    MCP_STORE_REFUSED      /* the database refused the statement for good (never retried)    */
} mcp_store_status_t;

/* What a failed statement is. */
typedef enum {
    MCP_STORE_FAULT_RETRY = 0,    /* the database or the way to it failed, or asked for a retry
                                   * (40001, 40P01): the same statement may succeed later      */
    MCP_STORE_FAULT_PERMANENT     /* the statement or its data is refused: never retried       */
} mcp_store_fault_t;

/* read_only_sql_transaction: the server takes no writes — a standby (a failover's demoted
 * primary) or a primary made read-only (default_transaction_read_only). A failover symptom, so
 * retried like the connection faults, on a new connection (the one that got it is given up):
 * with libpq's target_session_attrs=read-write that reaches the server that takes writes now. */
#define MCP_STORE_READ_ONLY "25006"

/* The fault of a failed statement from its SQLSTATE (NULL: none, which libpq gives for a lost
 * connection) and whether the connection is still usable. */
mcp_store_fault_t mcp_store_classify(const char *sqlstate, int connection_ok);

typedef struct mcp_store_t mcp_store_t;

/* Group commit: one per child process, shared by every handle of the child that points to it.
 * The hot path's writes (a request stream's opening, a stream's outbound messages and its end,
 * inbound messages of no stream) of concurrent requests are then run by one thread at a time,
 * the committer, in one
 * transaction on one borrowed connection (one pipeline, one round trip, one WAL flush), while
 * the others wait for that commit: a caller's mcp_store_* call returns only after its own rows
 * are committed (or with its own error), exactly as without grouping. A statement the database
 * refuses for good gets its own REFUSED and the rest of the group is run again without it; a
 * connection fault or a retryable error (40001, 40P01, ...) fails the whole group, each caller
 * retrying under its own policy. Statements are taken in the order of their stream ids, so that
 * two children's groups lock stream rows in the same order, and the openings last, in the order
 * of their sessions' ids (stream rows before session rows, as lease renewal locks them). */
typedef struct mcp_store_group_t mcp_store_group_t;

/* A group for this process, allocated in p (its lock too, and its threads' wakers, kept until p
 * goes); at most max statements per transaction, at most committers transactions under way at
 * once (each on its own connection; a statement that finds one free is committed at once, so
 * statements only wait for each other while all are busy). Non-zero on failure (no group:
 * statements run on their own). */
apr_status_t mcp_store_group_create(mcp_store_group_t **group, apr_pool_t *p, int max,
                                    int committers);

/* Transactions committed by a group and the statements they carried (for bench and status). */
void mcp_store_group_counts(const mcp_store_group_t *group, apr_uint64_t *transactions,
                            apr_uint64_t *statements);

/* Where a handle's connections come from. */
typedef struct mcp_store_lender_t {
    /* A connection, or NULL with *err set when none can be had now (counts as a connection
     * fault). It should not make the caller wait past db->until (when set). */
    PGconn *(*borrow)(mcp_store_t *db, const char **err);
    /* Gives it back; broken: a connection fault happened on it. */
    void (*give_back)(mcp_store_t *db, PGconn *conn, int broken);
    /* A connection fault happened (err says which): pause before the next try, at most until
     * deadline. Non-zero: do not try again. NULL: retry after a short fixed pause. */
    int (*wait)(mcp_store_t *db, apr_time_t deadline, const char *err);
} mcp_store_lender_t;

struct mcp_store_t {
    const mcp_store_lender_t *lender;
    void                     *baton;           /* the lender's                                  */
    apr_interval_time_t       patience;        /* connection faults are retried this long (0:
                                                * one try)                                      */
    apr_interval_time_t       statement_timeout; /* the longest one statement may take before
                                                  * its connection is given up (0: no limit)    */
    /* While mcp_store_exec runs: when the caller's patience ends (0: never), for the lender's
     * own queries on a connection it lends. */
    apr_time_t                deadline;
    /* Set by the lender when no connection will do, whatever the patience (a schema this build
     * does not understand): a statement then fails at once, UNAVAILABLE, with this error. */
    const char               *fatal;
    apr_time_t                until;           /* while a statement runs: the time by which it
                                                * must be done or given up (0: none), for the
                                                * lender's borrow                               */
    /* The last failure (valid after UNAVAILABLE or REFUSED). */
    const char               *sqlstate;        /* NULL when libpq gave none                     */
    const char               *error;           /* what was being done, and what went wrong      */
    /* The child's group commit (NULL: every statement on its own); set by the lender's owner
     * after mcp_store_init. */
    mcp_store_group_t        *group;
};

/* A handle with this lender and policy. */
void mcp_store_init(mcp_store_t *db, const mcp_store_lender_t *lender, void *baton,
                    apr_interval_time_t patience, apr_interval_time_t statement_timeout);

/* A session row whose recorded activity is over a minute old (over a quarter of its idle
 * timeout, when that is shorter): the next statement of the session, or a renewal of one of its
 * streams' leases, marks it seen. last_seen_at is indexed (the count of live sessions), so a
 * mark is a new version of the row with an entry in each of its indexes: marked at most that
 * often, an agent that calls every few seconds does not rewrite its session at every call, and
 * concurrent calls of one session mostly share its row. */
#define MCP_STORE_SESSION_STALE \
    "last_seen_at < now() - make_interval(secs => LEAST(60," \
    "                                     coalesce(NULLIF(idle_timeout_secs, 0) / 4, 60)))"

/* A session row named by key is not terminated: said so that neither partial index of
 * mcp.sessions (sessions_live_idx, sessions_holder_live_idx, both WHERE terminated_at IS NULL)
 * is implied. With "terminated_at IS NULL" beside the key, statistics from a time with few live
 * sessions priced reading one of them whole below the look-up by key, and every call read every
 * live session (a big table that gets 10,000 connected clients has changed too little for
 * autovacuum to analyze it again). PostgreSQL's proof of an index's predicate does not look
 * inside IS TRUE; on a PostgreSQL whose proof does, test_stale_statistics fails. s: "" or
 * "alias.". */
#define MCP_STORE_SESSION_UNENDED(s) "(" s "terminated_at IS NULL) IS TRUE"

/* The SET clause that marks a session seen (when MCP_STORE_SESSION_STALE), for statements that
 * touch one. */
#define MCP_STORE_TOUCH_SESSION \
    "last_seen_at = CASE WHEN " MCP_STORE_SESSION_STALE " THEN now() ELSE last_seen_at END"

/* The schema version this build's statements are written for (sql/schema.sql records it in
 * mcp.schema_version; sql/upgrade.sql brings an older database to it). */
#define MCP_STORE_SCHEMA_VERSION 17

/* The schema version of the database conn (a connection db's lender is lending) is connected to:
 * the highest in mcp.schema_version; 1 when that table does not exist but mcp.sessions does, 0
 * when neither does. -1 with *err when the query failed (*broken: the connection too), bounded
 * by db's statement timeout and the running statement's deadline. */
int mcp_store_schema_version(mcp_store_t *db, apr_pool_t *p, PGconn *conn, const char **err,
                             int *broken);

/* Runs one statement with n text parameters ($1 ... $n) under the handle's policy; *res (may be
 * NULL) gets the result, freed with p. OK, UNAVAILABLE or REFUSED. Exposed for the store's own
 * tests and tools. */
mcp_store_status_t mcp_store_exec(mcp_store_t *db, apr_pool_t *p, const char *what,
                                  const char *sql, int n, const char *const *params,
                                  PGresult **res);

/* mcp_store_exec, then its first row: OK with at least one row in *res, NOT_FOUND when the
 * statement returned none, or the statement's own failure. For the store's statement files
 * (mcp_store_bridge.c, mcp_store_shim.c) as for its own. */
mcp_store_status_t mcp_store_exec_row(mcp_store_t *db, apr_pool_t *p, const char *what,
                                      const char *sql, int n, const char *const *params,
                                      PGresult **res);

/* A column of a row of a result (valid as long as the result, so as p); NULL for SQL NULL. */
const char *mcp_store_cell(PGresult *res, int row, int col);

/* The number of parameters of a statement's argument array. */
#define MCP_STORE_NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct mcp_store_session_t {
    const char *id;
    const char *backend_url;
    const char *backend_session_id;   /* NULL when the backend is stateless            */
    const char *protocol_version;
    const char *principal;            /* NULL for an unauthenticated client            */
    const char *client_info;          /* JSON text or NULL                             */
    const char *client_capabilities;  /* JSON text or NULL                             */
    const char *server_info;          /* JSON text or NULL                             */
    const char *trace_id;             /* initialize's W3C trace id (32 hex) or NULL     */
} mcp_store_session_t;

/* Looks up the live session id that belongs to principal (NULL: an unauthenticated session) and
 * records the activity. A terminated session, one idle for more than idle_secs (0: no limit;
 * mcp_store_session_expire then marks it), or one of another principal, is NOT_FOUND: a
 * session id is never a capability on its own. On OK, *out is allocated in p. */
mcp_store_status_t mcp_store_session_touch(mcp_store_t *db, apr_pool_t *p, const char *id,
                                           const char *principal, int idle_secs,
                                           mcp_store_session_t **out);

/* Marks the session terminated by 'expired' when it is live, of backend_url, and idle for more
 * than idle_secs (> 0): OK, with *backend_session_id (NULL for a stateless backend) for the DELETE the backend
 * is owed; NOT_FOUND when it is not such a session (unknown, terminated, or not idle). Exactly
 * once: of several callers at the same time, one gets OK. */
mcp_store_status_t mcp_store_session_expire(mcp_store_t *db, apr_pool_t *p, const char *id,
                                            const char *backend_url, int idle_secs,
                                            const char **backend_session_id);

/* Called for each session mcp_store_sessions_expire_idle expired (its strings live in p). */
typedef void mcp_store_expired_fn(void *baton, const char *id, const char *backend_url,
                                  const char *backend_session_id, const char *protocol_version);

/* Marks at most limit live sessions idle for longer than their own MCPSessionIdleTimeout (as
 * stored when they began) terminated by 'expired', calling fn for each (the caller tells their
 * backends). Exactly once per session, across processes and hosts. *expired gets how many. */
mcp_store_status_t mcp_store_sessions_expire_idle(mcp_store_t *db, apr_pool_t *p, int limit,
                                                  mcp_store_expired_fn *fn, void *baton,
                                                  long *expired);

/* Ends every open stream of the session (it was terminated): request streams become 'failed'
 * with a stored JSON-RPC error (-32001, message) for each request id that has no stored answer,
 * standalone streams 'closed'. The status change wakes their owners and followers (NOTIFY).
 * *ended gets how many streams this call ended. */
mcp_store_status_t mcp_store_session_streams_end(mcp_store_t *db, apr_pool_t *p,
                                                 const char *session_id, const char *message,
                                                 long *ended);

/* Marks a live session terminated (by: "client", "expired" or "backend"). NOT_FOUND when it was
 * not live (already terminated, unknown, or another principal's). */
mcp_store_status_t mcp_store_session_terminate(mcp_store_t *db, apr_pool_t *p, const char *id,
                                               const char *principal, const char *by);

/* ---- streams and events ------------------------------------------------------------------ */

/* A request stream's fixed positions: the inbound request, then the priming row. */
#define MCP_STORE_SEQ_REQUEST  0
#define MCP_STORE_SEQ_PRIMING  1

/* Renews the leases of n streams at once (the per-process lease keeper): ids[i] for secs[i]
 * seconds, recording the activity of sessions[i]. *alive (apr_int64_t, in p) gets the ids that
 * were still open; the others were finished by someone else. */
mcp_store_status_t mcp_store_streams_renew(mcp_store_t *db, apr_pool_t *p, int n,
                                           const apr_int64_t *ids, const char *const *sessions,
                                           const int *secs, apr_array_header_t **alive);

/* Stores a stream's last messages (a JSON array's text, may be "[]") and ends it with status, in
 * one statement and so one transaction: followers elsewhere get one wake-up for both. */
mcp_store_status_t mcp_store_events_append_finish(mcp_store_t *db, apr_pool_t *p,
                                                  const mcp_store_session_t *session,
                                                  apr_int64_t stream_id, apr_int64_t first_seq,
                                                  const char *messages, const char *status);

/* mcp_store_events_append_finish for two streams at once, in one statement (both or neither):
 * stream_a of session_a from first_a with messages_a, and stream_b likewise, both ended with
 * status. (The era bridge ends a call's backend stream and client stream together.) */
mcp_store_status_t mcp_store_events_append_finish2(mcp_store_t *db, apr_pool_t *p,
                                                   const mcp_store_session_t *session_a,
                                                   apr_int64_t stream_a, apr_int64_t first_a,
                                                   const char *messages_a,
                                                   const mcp_store_session_t *session_b,
                                                   apr_int64_t stream_b, apr_int64_t first_b,
                                                   const char *messages_b, const char *status);

/* Stores messages (a JSON array's text holding n of them) in one statement. With stream_id > 0
 * they take seq first_seq, first_seq+1, ... on that stream (NOT_FOUND, nothing stored, when the
 * stream is no longer open: another process finished it); with stream_id 0 they belong to no
 * stream (inbound notifications and responses). direction: "in" or "out". A retry of a
 * statement whose outcome was unknown stores nothing twice on a stream. */
mcp_store_status_t mcp_store_events_append(mcp_store_t *db, apr_pool_t *p,
                                           const mcp_store_session_t *session,
                                           apr_int64_t stream_id, apr_int64_t first_seq,
                                           const char *direction, const char *messages);

/* Finishes open streams whose lease ran out (their owner died): stream_id, or every such stream
 * when stream_id is 0. Each unanswered request on them gets a stored JSON-RPC error response with
 * message, so every client gets an answer. Exactly once: of several processes or hosts trying
 * at the same time, one finishes each stream. *finished gets how many this call finished. */
mcp_store_status_t mcp_store_streams_expire(mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t stream_id, const char *message,
                                            long *finished);

typedef struct mcp_store_stream_t {
    apr_int64_t id;
    const char *kind;          /* "request" or "standalone"                            */
    const char *status;        /* "open", "complete", "failed", "closed"               */
    int         lease_expired; /* open, but its owner stopped renewing the lease        */
    apr_int64_t last_seq;      /* highest seq stored on it                             */
    const char *owner;         /* host:pid of the process relaying it                  */
} mcp_store_stream_t;

/* The stream's current state (for a follower deciding whether to wait for more). */
mcp_store_status_t mcp_store_stream_get(mcp_store_t *db, apr_pool_t *p,
                                        apr_int64_t stream_id, mcp_store_stream_t *out);

/* Called for each stored outbound event in order; message is NULL for a priming row. Non-zero
 * stops the iteration. */
typedef int mcp_store_event_fn(void *baton, apr_int64_t seq, const char *message);

/* ---- limits: admission control ---------------------------------------------------------- *
 *
 * Streams (request and standalone) and followers (GETs with Last-Event-ID of an open stream)
 * each hold a connection and its memory (a thread only while they work); sessions hold
 * backend state. The functions below admit one more of them only within limits, counted in
 * PostgreSQL across every process and host, atomically: the check and the insert are one
 * statement. Streams and followers of a session or a holder
 * take slots (sql/functions.sql: mcp.admit_stream, mcp.slots_claim), so parallel admissions
 * neither wait for each other's commit nor overshoot; followers of one stream and sessions are
 * serialised by advisory locks (mcp.admit_session). A limit of 0 is no limit. */

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
mcp_store_status_t mcp_store_session_insert_admitted(mcp_store_t *db, apr_pool_t *p,
                                                     const mcp_store_session_t *session,
                                                     const char *holder, const char *init_request,
                                                     const char *init_response, int max_live,
                                                     int max_per_holder, int idle_secs,
                                                     mcp_store_refusal_t *refused);

/* The same two counts without storing anything (a cheap early refusal, before the backend is
 * asked for a session; not atomic: the insert decides). OK or LIMIT with *refused. */
mcp_store_status_t mcp_store_session_admissible(mcp_store_t *db, apr_pool_t *p,
                                                const char *holder, int max_live,
                                                int max_per_holder, int idle_secs,
                                                mcp_store_refusal_t *refused);

/* Record, then dispatch: in one statement, checks that session->id is live, belongs to
 * session->principal and session->backend_url and was active within idle_secs (0: no limit), records
 * the activity, admits one more stream (limits), creates the request stream (owned by owner,
 * leased for lease_secs, held by limits->holder), stores the inbound message (seq 0) and, when
 * the session's protocol version is one of n_primed primed versions (mcp_protocol_primed: the
 * revisions whose streams begin with a priming event), the priming row (seq 1); a stream of any
 * other never sends one. The first outbound message takes seq 2 either way. trace_id (the
 * request's W3C trace id, or NULL) is the stream's, as for every stream. request_id is JSON (an array for a
 * batch). On OK and LIMIT, session->backend_session_id and ->protocol_version are filled in;
 * NOT_FOUND when the session is not live for that principal and backend; LIMIT (*refused says
 * which) when the session or the holder holds its maximum of streams. Nothing is stored but the
 * activity unless OK. member (NULL: none) is a federated request's member (mcp_store_members):
 * its name (member->member) is the stream's (mcp.streams.member), and on OK the rest is filled
 * in from the session's row for it, in the same statement (open 0 and error set: no row).
 * members (NULL: not wanted) gets every member row of the session (mcp_store_member_t, without
 * initialize_result), read by the same statement: a federated request that asks them all. */
struct mcp_store_member_t;
mcp_store_status_t mcp_store_stream_open_request_admitted(
    mcp_store_t *db, apr_pool_t *p, mcp_store_session_t *session, int idle_secs,
    const char *request_id, const char *method, const char *inbound, const char *trace_id,
    const char *owner, int lease_secs, const mcp_store_limits_t *limits, int n_primed,
    const char *const *primed, struct mcp_store_member_t *member,
    apr_array_header_t *members, apr_int64_t *stream_id, mcp_store_refusal_t *refused);

/* Record, then dispatch, for a 2026-07-28 (stateless) request: in one statement, admits one
 * more stream for limits->holder (MCPMaxStreamsPerPrincipal: such a stream has no session),
 * creates the request stream with no session (recording protocol_version and principal, owned
 * by owner, leased for lease_secs) and stores the inbound message at seq 0. No priming row: the
 * first outbound message takes seq 1. member (NULL: none): the federated member the request
 * goes to (mcp.streams.member). LIMIT (*refused) when the holder holds its maximum. */
mcp_store_status_t mcp_store_stream_open_stateless_admitted(
    mcp_store_t *db, apr_pool_t *p, const char *protocol_version, const char *principal,
    const char *request_id, const char *method, const char *inbound, const char *trace_id,
    const char *owner, int lease_secs, const mcp_store_limits_t *limits, const char *member,
    apr_int64_t *stream_id, mcp_store_refusal_t *refused);

/* Opens the session's standalone GET stream with its priming row (seq 0), held by
 * limits->holder; CONFLICT when the session has an open one whose lease has not run out (a stale
 * one is closed first); LIMIT (*refused) when the session or the holder holds its maximum. */
mcp_store_status_t mcp_store_stream_open_standalone_admitted(
    mcp_store_t *db, apr_pool_t *p, const mcp_store_session_t *session, const char *trace_id,
    const char *owner, int lease_secs, const mcp_store_limits_t *limits, apr_int64_t *stream_id,
    mcp_store_refusal_t *refused);

/* The stream that event (stream_id, seq) belongs to, if that event exists and the stream is the
 * session's; NOT_FOUND otherwise (another session's stream is never found). When that stream is
 * open, registers a follower of it (owned by owner, leased for lease_secs; *follower_id, else 0)
 * in the same statement; LIMIT (*refused) when the session, the holder or the stream holds its
 * maximum (nothing registered; *out is filled). */
mcp_store_status_t mcp_store_stream_follow(mcp_store_t *db, apr_pool_t *p,
                                           const char *session_id, apr_int64_t stream_id,
                                           apr_int64_t seq, const char *owner, int lease_secs,
                                           const mcp_store_limits_t *limits,
                                           mcp_store_stream_t *out, apr_int64_t *follower_id,
                                           mcp_store_refusal_t *refused);

/* The follower is still there: extends its lease. */
mcp_store_status_t mcp_store_follower_renew(mcp_store_t *db, apr_pool_t *p,
                                            apr_int64_t follower_id, int lease_secs);

/* The follower ended: it no longer counts. */
mcp_store_status_t mcp_store_follower_release(mcp_store_t *db, apr_pool_t *p,
                                              apr_int64_t follower_id);

/* The stream's outbound events with seq > after_seq, in order, at most max_rows of them, and
 * bounded by bytes as well: a read stops after the row that brings the messages' total to
 * max_bytes (so one row is always read). *n gets how many were delivered; *more is set when
 * the read stopped at a bound (more rows may follow). */
mcp_store_status_t mcp_store_events_after_bounded(mcp_store_t *db, apr_pool_t *p,
                                                  apr_int64_t stream_id, apr_int64_t after_seq,
                                                  int max_rows, apr_off_t max_bytes,
                                                  mcp_store_event_fn *fn, void *baton, int *n,
                                                  int *more);

/* ---- what the whole cluster holds (mod_status, metrics) ---------------------------------- */

typedef struct mcp_store_totals_t {
    apr_int64_t live_sessions;       /* not terminated                                        */
    apr_int64_t open_request_streams;
    apr_int64_t open_standalone_streams;
    apr_int64_t followers;           /* resumptions following a stream, lease not run out     */
} mcp_store_totals_t;

/* One cheap statement over every host's rows. OK, UNAVAILABLE or REFUSED. */
mcp_store_status_t mcp_store_totals(mcp_store_t *db, apr_pool_t *p, mcp_store_totals_t *out);

/* ---- retention ------------------------------------------------------------------------ */

typedef struct mcp_store_maintained_t {
    int         created;   /* day partitions made ahead                                      */
    int         dropped;   /* day partitions dropped whole                                   */
    apr_int64_t deleted;   /* small rows deleted after them (streams, sessions, default's)   */
} mcp_store_maintained_t;

/* One run of the retention job (CALL mcp.maintain, sql/retention.sql): makes the partitions of
 * the next ahead days, and, unless retention_secs < 0 (keep everything), drops the day partitions
 * whose streams and sessions all ended more than retention_secs ago. */
mcp_store_status_t mcp_store_maintain(mcp_store_t *db, apr_pool_t *p, long retention_secs,
                                      int ahead, mcp_store_maintained_t *out);

#endif
