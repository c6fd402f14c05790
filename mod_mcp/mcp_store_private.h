/* mcp_store_private — what the store's files share and its callers do not see: the helpers
 * that mcp_store.c defines for the statement files (mcp_store_<noun>.c) and for the group
 * commit (mcp_store_group.c), the grouped exec of the hot path's writes, and the SQL fragments
 * more than one file's statements use. Every name here has the internal prefix mcp_store__;
 * mcp_store.h stays the public face. */
#ifndef MCP_STORE_PRIVATE_H
#define MCP_STORE_PRIVATE_H

#include <apr_tables.h>

#include "mcp_store.h"

#define NARGS(a) MCP_STORE_NARGS(a)

/* The jsonb copies of messages known to be valid JSON: a statement comes in two texts, one with
 * a plain cast for texts that certainly cast (mcp_text_jsonb_plain), one with mcp.audit_jsonb,
 * which never fails a statement but costs a plpgsql call and a subtransaction per message (~20
 * us each: bench/results.md, issue 12, fourth pass). Two texts, not a CASE on a parameter: with
 * one, PostgreSQL re-plans the prepared statement on every call (a custom plan folds the CASE,
 * so it always looks cheaper than the generic one). */
#define JSONB_PLAIN(param)   param "::text::jsonb"
#define JSONB_AUDITED(param) "mcp.audit_jsonb(" param "::text)"

/* mcp_store_exec, in the child's group (see mcp_store.h) when key >= 0 and the handle has one:
 * for the hot path's writes only (statements whose locks are their own stream's row, and
 * shared locks that conflict with none a group or a lease renewal takes: FOR KEY SHARE). */
mcp_store_status_t mcp_store__exec_as(mcp_store_t *db, apr_pool_t *p, const char *what,
                                      const char *sql, int n, const char *const *params,
                                      PGresult **out, apr_int64_t key);

/* A statement of the group whose instances, from concurrent callers, can run as one statement
 * (one executor start, one round trip for all of them): many has the instances' parameters as
 * arrays (its $x the text[] of the k instances' $x, in the group's order) and does what the k
 * would do one after the other. One text for any k: it is prepared once per connection, as the
 * others. When the database refuses a merged statement for good, its instances run again one by
 * one, so that only the refused one fails.
 *
 * by_part 0: a statement whose result nobody reads (each caller gets an empty success of its
 * own); its instances touch different streams, in the group's order (their stream ids').
 * by_part 1: many's last column is the number (1..k) of the instance a row belongs to, and each
 * caller gets the rows of its own (all columns but that one are the single statement's).
 *
 * order (-1: none): the parameter whose text orders the instances among themselves before they
 * are merged, after the group's key (the rows many locks, in that order across the parts of
 * the transaction: a session's id for a stream's opening).
 *
 * arrays 1: each instance's parameters are already arrays (non-empty PostgreSQL array
 * literals, mcp_store__text_array's) of many's own, whose concatenation is the merged one's:
 * the statement is many itself, for a few rows (a bridged call's two streams' ends). */
typedef struct mcp_store__mergeable_t {
    const char *many;
    int         by_part;
    int         order;
    int         arrays;
} mcp_store__mergeable_t;

/* ---- between the core (mcp_store.c) and the group commit (mcp_store_group.c) ----------- */

/* Runs the statement in the child's group (db->group): returns when it is committed (its
 * result), or failed (its error result, or NULL with *err, *state, *broken; *fatal when the
 * lender said no connection will do). until: the statement's bound (the statement timeout, no
 * later than the caller's patience; 0: none), which starts when it is handed to the group, not
 * when a committer takes it: a statement that waited for a stuck commit fails in the time it
 * would have alone, and a batch is bounded by the earliest bound among its statements. */
PGresult *mcp_store__group_run(mcp_store_t *db, apr_pool_t *p, const char *sql, int n,
                               const char *const *params, apr_int64_t key,
                               const mcp_store__mergeable_t *merge, apr_time_t until,
                               const char **err, const char **state, int *broken, int *fatal);

/* Waits until the connection's socket is ready for events; non-zero at the deadline (0: none). */
int mcp_store__wait_socket(PGconn *conn, short events, apr_time_t deadline);

/* Sends what was queued on a non-blocking connection, reading meanwhile so that neither side
 * blocks: 0, -1 when the connection failed, -2 at the deadline. */
int mcp_store__flush_sent(PGconn *conn, apr_time_t deadline);

/* libpq's message, without the newline it ends with ("unknown database error" for none). */
const char *mcp_store__trimmed(apr_pool_t *p, const char *msg);

/* A statement's text's 64-bit FNV-1a hash: its prepared statement's name, and its key in the
 * set of what a connection has prepared (mcp_store_prepared.h). */
apr_uint64_t mcp_store__statement_hash(const char *sql);

/* The name of the server-side prepared statement of the text whose hash is h: "mcp_" and the
 * hash in hex (the store's statements are a fixed set of constants). */
void mcp_store__statement_name(apr_uint64_t h, char name[24]);

/* Whether a result says that the named prepared statement does not exist on this connection. */
int mcp_store__not_prepared(PGresult *res);

/* Whether a prepare's result leaves the statement prepared on the connection: done, or there
 * already (42P05: prepared by an earlier try whose answer was lost to this memory). */
int mcp_store__prepare_done(PGresult *res);

/* Gives a connection that failed mid-pipeline up for good: its socket shut down, so that libpq
 * sees it broken and the lender's next borrow reconnects. */
void mcp_store__give_up(PGconn *conn);

/* A connection whose server refused a write as read-only is given up, so that the next borrow
 * connects anew: with a multi-host DBDParams (target_session_attrs=read-write) that finds the
 * server that takes writes now (a failover's new primary), where the old connection would go on
 * asking a demoted one. Non-zero when it was. */
int mcp_store__give_up_if_read_only(PGconn *conn, const char *sqlstate);

/* The group key of a request stream's opening (it locks its session's row, if it has one):
 * after every statement keyed by a stream, so that a group's transaction locks stream rows
 * before session rows, as lease renewal does. */
#define MCP_STORE__KEY_SESSIONS APR_INT64_MAX

/* The body of a merged statement's CTE that admits its k stateless streams (one row each of
 * CTE x: ord, holder, max_holder) in order, under their holders' limits only, each counting
 * the slots of those before it (mcp.admit_streams): rows (ord, id, refused). */
#define MCP_STORE__ADMIT_STATELESS_X \
        "  SELECT f.* FROM (" \
        "    SELECT array_agg(x.ord ORDER BY x.ord) AS ords," \
        "           array_agg(x.holder ORDER BY x.ord) AS holders," \
        "           array_agg(x.max_holder ORDER BY x.ord) AS max_holder FROM x) g," \
        "   mcp.admit_streams(g.ords, array_fill(NULL::text, ARRAY[cardinality(g.ords)])," \
        "                     g.holders, array_fill(0, ARRAY[cardinality(g.ords)])," \
        "                     g.max_holder) f"

/* mcp_store__exec_as for a statement that merge says how to run with others. */
mcp_store_status_t mcp_store__exec_mergeable(mcp_store_t *db, apr_pool_t *p, const char *what,
                                             const char *sql, int n,
                                             const char *const *params, PGresult **out,
                                             apr_int64_t key,
                                             const mcp_store__mergeable_t *merge);

/* The refusal a statement names in a column (mcp.admit_stream's, mcp.admit_session's text;
 * NULL or empty: admitted). */
mcp_store_refusal_t mcp_store__refusal(const char *text);

/* A result read to the end by its caller (what is kept of it was copied into p) goes now
 * instead of with p. */
void mcp_store__result_done(apr_pool_t *p, PGresult *res);

/* Statement arguments: a bigint's and an int's text, a PostgreSQL array literal of n strings
 * (NULL ones: NULL),
 * and whether a valid JSON text certainly casts to jsonb (JSONB_PLAIN, not JSONB_AUDITED). */
const char *mcp_store__i64(apr_pool_t *p, apr_int64_t v);
const char *mcp_store__int_text(apr_pool_t *p, int v);
const char *mcp_store__text_array(apr_pool_t *p, int n, const char *const *v);
int mcp_store__plain_jsonb(const char *json);

/* The first row's kind, status, lease_expired, last_seq and owner (columns 0-4), as
 * mcp_store_stream.c's STREAM_COLUMNS select them. */
void mcp_store__read_stream(PGresult *res, apr_int64_t stream_id, mcp_store_stream_t *out);

/* Where a statement's result has the columns of a member row (mcp_store_member_t): member,
 * backend_url, backend_session_id, protocol_version, state, error, initialize_result; -1 for
 * one it does not read. */
typedef struct mcp_store__member_cols_t {
    int member, backend_url, backend_session_id, protocol_version, state, error,
        initialize_result;
} mcp_store__member_cols_t;

/* Pushes row i of res onto members (mcp_store_member_t) when it names a member (a LEFT JOIN
 * gives a row of NULLs for a session without members). */
void mcp_store__member_push(apr_array_header_t *members, PGresult *res, int i,
                            const mcp_store__member_cols_t *cols);

#endif
