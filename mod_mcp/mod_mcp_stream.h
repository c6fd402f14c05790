/* mod_mcp_stream — a stored SSE stream towards the client.
 *
 * Every message goes through a bounded queue: at most MCPStreamQueueLength messages or
 * MCPStreamQueueBytes bytes are held; then, or whenever the source has nothing more ready
 * (mcp_stream_commit), the queued messages are stored in PostgreSQL in one statement, and only
 * then written to the client with their event ids and flushed. So nothing is ever written that is
 * not stored, storage order is wire order, and a slow client blocks only its own request (the
 * flush blocks; memory does not grow).
 *
 * A vanished client does not stop the stream: messages are still stored (the client can resume
 * with Last-Event-ID); writing simply stops. Under HTTP/2 (mod_http2) "the client" is one stream
 * of a connection: a reset stream is a vanished client, and its connection's socket, which the
 * request never sees, is never probed nor closed.
 */
#ifndef MOD_MCP_STREAM_H
#define MOD_MCP_STREAM_H

#include "mod_mcp_request.h"

typedef enum {
    MCP_STREAM_UNDECIDED = 0,  /* nothing sent yet: the answer may still be JSON or SSE      */
    MCP_STREAM_SSE,            /* SSE headers are out; messages are written as events        */
    MCP_STREAM_JSON            /* messages are stored only; the caller answers with JSON      */
} mcp_stream_mode_t;

/* Messages were stored on the stream: n of them (JSON texts in batch) from seq first, before
 * they are written. */
typedef void mcp_stream_stored_fn(void *baton, apr_int64_t first, const apr_array_header_t *batch,
                                  int n);

typedef struct mcp_stream_t {
    mcp_req_t          *q;
    apr_int64_t         id;           /* mcp.streams row                                   */
    apr_int64_t         next_seq;     /* seq the next stored message takes                 */
    mcp_stream_mode_t   mode;
    apr_bucket_brigade *out;
    apr_pool_t         *batch_pool;   /* the queue's memory, made when something is queued or
                                       * written and destroyed after every commit (NULL: none,
                                       * so that an idle stream holds no pool)               */
    apr_array_header_t *batch;        /* const char *: queued messages (JSON texts); `none`
                                       * while there is no batch_pool                         */
    apr_array_header_t *none;         /* an empty queue, in the request's pool               */
    apr_size_t          batch_bytes;
    apr_time_t          last_write;   /* for keep-alives                                    */
    int                 client_gone;
    int                 broken;       /* storing failed: nothing more may be written        */
    int                 written;      /* events written to the client                       */
    apr_time_t          started;      /* when the client's response began                   */
    apr_time_t          client_checked; /* the last look at the client's socket (ticks)     */
    mcp_store_t        *db;           /* storing: waits out an outage for half a lease       */
    mcp_lease_t        *lease;        /* while this process owns the stream (mcp_stream_own) */
    int                 stateless;    /* 2026-07-28: events carry no ids (no resumption), the
                                       * client's close is watched for from the start (it
                                       * cancels), and the stream is never handed over       */
    int                 lists;        /* the request holds a list request: its answer may lose
                                       * items its user may not use (mcp_authz_filter_answer) */
    const char         *rewritten;    /* the last message added, when it was not stored as it
                                       * came (a filtered list; r->pool), else NULL          */
    apr_size_t          rewritten_len;
    mcp_stream_stored_fn *on_stored;  /* NULL, or told of every store (a parked stream that
                                       * writes what its backend half stored, mod_mcp_park)  */
    void               *on_stored_baton;
} mcp_stream_t;

/* Prepares a stream whose row exists; the next message stored takes next_seq. */
void mcp_stream_init(mcp_stream_t *st, mcp_req_t *q, apr_int64_t id, apr_int64_t next_seq);

/* Sends the SSE response headers; with priming_seq >= 0 also the priming event (its id, a
 * retry: hint from MCPRetryInterval, empty data) for the row stored at that seq. */
void mcp_stream_start_sse(mcp_stream_t *st, apr_int64_t priming_seq);

/* Queues one message (valid JSON); commits when the queue is full. Returns non-zero once the
 * stream is broken (storing failed). The answer to a list request is queued without the items
 * its user may not use (mod_mcp_authz.h); st->rewritten then holds what was queued, for a
 * caller that sends a JSON answer itself. */
int mcp_stream_add(mcp_stream_t *st, const char *json, apr_size_t len);

/* Stores what is queued, then writes and flushes it (SSE mode), then wakes this process's
 * followers of the stream. Returns non-zero once the stream is broken. */
int mcp_stream_commit(mcp_stream_t *st);

/* Sends what was written so far and releases the memory of the events sent (call it after each
 * batch of mcp_stream_write_stored). */
void mcp_stream_flush(mcp_stream_t *st);

/* Puts one already-stored message with its event id (replay) on the way out, unflushed. */
void mcp_stream_write_stored(mcp_stream_t *st, apr_int64_t seq, const char *json);

/* This process relays the stream (its row names it the owner): the child's lease keeper renews
 * its lease from now until mcp_stream_finish (or the end of the request), whatever the client
 * does. */
void mcp_stream_own(mcp_stream_t *st);

/* This process lets go of a stream it owned without ending it (someone else ended it: a
 * cancellation, a DELETE): the lease goes. A stream that mcp_stream_own took and that is not
 * finished must be let go of before st goes out of scope (the request pool's cleanup holds st
 * until then). */
void mcp_stream_disown(mcp_stream_t *st);

/* The stream's client is served by a parked stream (mod_mcp_park) from now on, which writes what
 * it reads from the table: this one stores only (its SSE headers and priming event are out). */
void mcp_stream_detach(mcp_stream_t *st);

/* Periodic duties while waiting: a keep-alive comment after MCPKeepAliveInterval of silence
 * (SSE mode); for an owned stream, noticing that another process finished it (its lease ran
 * out), which breaks the stream at once. Returns non-zero when the stream is broken. */
int mcp_stream_tick(mcp_stream_t *st);

/* Writes raw bytes and flushes (SSE mode); notices a vanished client. */
void mcp_stream_write(mcp_stream_t *st, const char *data, apr_size_t len);

/* Non-zero while httpd stops this process (graceful restart or stop): streams should hand their
 * clients over to the new processes. */
int mcp_stream_server_stopping(void);

/* Ends the client's response now, with a retry: hint (MCPRetryInterval) so that it resumes with
 * Last-Event-ID; the caller may go on storing (the stream row stays open). Used at graceful
 * restarts and by MCPStreamCloseAfter. HTTP/1.1 (with or without TLS): the connection is closed
 * too, since this thread stays busy. HTTP/2: only this stream ends; the connection and its
 * other streams go on. */
void mcp_stream_end_early(mcp_stream_t *st);

/* Non-zero when the client's response should end now so that it resumes later: the server is
 * stopping, or MCPStreamCloseAfter passed (2025-11-25 sessions, which can poll). */
int mcp_stream_should_hand_over(const mcp_stream_t *st);

/* Stores what is still queued and marks the stream finished ("complete", "failed" or "closed"),
 * in one transaction; then writes the queued messages and wakes this process's followers. */
void mcp_stream_finish(mcp_stream_t *st, const char *status);

/* mcp_stream_finish of a and b, with one statement when it can (both stored or neither; when
 * that statement fails, each is finished on its own). */
void mcp_stream_finish_pair(mcp_stream_t *a, mcp_stream_t *b, const char *status);

#endif
