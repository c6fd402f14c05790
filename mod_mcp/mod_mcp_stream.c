/* mod_mcp_stream — see mod_mcp_stream.h. */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_core.h>
#include <http_connection.h>
#include <util_filter.h>
#include <ap_mpm.h>

#include "mcp_id.h"
#include "mcp_router.h"
#include "mcp_sse.h"
#include "mod_mcp_authz.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

void mcp_stream_init(mcp_stream_t *st, mcp_req_t *q, apr_int64_t id, apr_int64_t next_seq)
{
    request_rec *r = q->r;

    memset(st, 0, sizeof(*st));
    st->q = q;
    st->id = id;
    st->next_seq = next_seq;
    st->out = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    st->none = st->batch = apr_array_make(r->pool, 1, sizeof(const char *));
    st->started = st->last_write = st->client_checked = apr_time_now();
    /* Storing waits out an outage for up to half a lease (the backend waits meanwhile:
     * back-pressure). The lease itself is the keeper's business (mcp_stream_own). */
    st->db = mcp_db_request(r, q->conf->stream_lease / 2);
    st->lists = mcp_authz_lists_requested(q->body);
}

void mcp_stream_write(mcp_stream_t *st, const char *data, apr_size_t len)
{
    request_rec *r = st->q->r;
    apr_bucket_brigade *bb = st->out;

    if (st->client_gone || st->mode != MCP_STREAM_SSE) {
        return;
    }
    if (len) {
        APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_transient_create(data, len, bb->bucket_alloc));
    }
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(bb->bucket_alloc));
    if (ap_pass_brigade(r->output_filters, bb) != APR_SUCCESS || r->connection->aborted) {
        st->client_gone = 1;
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                      "stream %" APR_INT64_T_FMT ": the client went away; events are still "
                      "stored for it to resume", st->id);
    }
    apr_brigade_cleanup(bb);
    st->last_write = apr_time_now();
}

/* The queue's pool, made when there is none (the queue is empty then). */
static apr_pool_t *batch_pool(mcp_stream_t *st)
{
    if (!st->batch_pool) {
        apr_pool_create(&st->batch_pool, st->q->r->pool);
        st->batch = apr_array_make(st->batch_pool, st->q->conf->stream_queue_length,
                                   sizeof(const char *));
    }
    return st->batch_pool;
}

static const char *queued_messages(mcp_stream_t *st)
{
    return apr_pstrcat(st->batch_pool, "[", apr_array_pstrcat(st->batch_pool, st->batch, ','), "]",
                       NULL);
}

/* Puts one event into the brigade without flushing. */
static void put_event(mcp_stream_t *st, apr_pool_t *p, apr_int64_t seq, const char *json,
                      long retry_ms)
{
    apr_size_t len;
    const char *text;

    if (st->client_gone || st->mode != MCP_STREAM_SSE) {
        return;
    }
    text = mcp_sse_event_format(p, st->stateless ? NULL : mcp_id_event_format(p, st->id, seq),
                                NULL, json, retry_ms, &len);
    apr_brigade_write(st->out, NULL, NULL, text, len);
    st->written++;
}

void mcp_stream_start_sse(mcp_stream_t *st, apr_int64_t priming_seq)
{
    mcp_req_set_sse_headers(st->q->r);
    /* A response that MCPStreamCloseAfter will end early ends with the connection: say so in
     * the headers, or a client may send its next request on it before it sees the close. */
    if (st->q->conf->stream_close_after > 0 && st->q->rev && st->q->rev->priming) {
        st->q->r->connection->keepalive = AP_CONN_CLOSE;
    }
    st->mode = MCP_STREAM_SSE;
    if (priming_seq >= 0) {
        put_event(st, batch_pool(st), priming_seq, "",
                  (long)apr_time_as_msec(st->q->conf->retry_interval));
    }
    /* Flushing now sends the headers (and the priming event) before the backend is asked. */
    mcp_stream_flush(st);
}

void mcp_stream_detach(mcp_stream_t *st)
{
    st->mode = MCP_STREAM_JSON;
}

/* Logs a failed store call of the stream (the gate logs the outage itself). */
static void log_store_failure(mcp_stream_t *st, mcp_store_status_t rv)
{
    ap_log_rerror(APLOG_MARK, rv == MCP_STORE_REFUSED ? APLOG_ERR : APLOG_WARNING, 0, st->q->r,
                  "stream %" APR_INT64_T_FMT ": %s", st->id, st->db->error);
}

static apr_status_t disown(void *data)
{
    mcp_stream_t *st = data;

    mcp_leases_remove(mcp_child.leases, st->lease);
    st->lease = NULL;
    return APR_SUCCESS;
}

void mcp_stream_own(mcp_stream_t *st)
{
    if (!st->lease && mcp_child.leases) {
        st->lease = mcp_leases_add(mcp_child.leases, st->id, st->q->session->id,
                                   st->q->conf->stream_lease, apr_time_now());
        apr_pool_cleanup_register(st->q->r->pool, st, disown, apr_pool_cleanup_null);
    }
}

void mcp_stream_disown(mcp_stream_t *st)
{
    apr_pool_cleanup_run(st->q->r->pool, st, disown);
}

/* Someone else finished the stream: a process after its lease ran out (this one was stalled,
 * or the database was away for longer than a lease), or its session's DELETE. Nothing more may
 * be added. */
static void stop_taken_over(mcp_stream_t *st)
{
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, st->q->r, "stream %" APR_INT64_T_FMT ": was "
                  "finished elsewhere (its lease ran out, or its session was terminated); "
                  "relaying stops", st->id);
    st->broken = 1;
}

static int taken_over(mcp_stream_t *st)
{
    if (!st->broken && st->lease && mcp_lease_lost(mcp_child.leases, st->lease)) {
        stop_taken_over(st);
    }
    return st->broken;
}

/* PostgreSQL refused the queued messages for good (their data: e.g. a byte sequence that is not
 * UTF-8): stores them one at a time instead. A message it refuses is replaced, when it is a
 * response, by a JSON-RPC error response for the same request (the request still gets exactly
 * one answer) and otherwise dropped; either way it is logged. The queue then holds what was
 * stored, in order. Returns OK, or UNAVAILABLE when the database went away meanwhile. */
static mcp_store_status_t store_one_by_one(mcp_stream_t *st)
{
    apr_pool_t *p = st->batch_pool;
    apr_array_header_t *stored = apr_array_make(p, st->batch->nelts, sizeof(const char *));
    int i;

    for (i = 0; i < st->batch->nelts; i++) {
        const char *msg = APR_ARRAY_IDX(st->batch, i, const char *), *why;
        apr_int64_t seq = st->next_seq + stored->nelts;
        mcp_store_status_t rv = mcp_store_events_append(st->db, p, st->q->session, st->id, seq,
                                                        "out", apr_pstrcat(p, "[", msg, "]", NULL));
        json_object *obj;
        mcp_jsonrpc_msg_t m;

        if (rv == MCP_STORE_REFUSED) {
            why = apr_pstrdup(p, st->db->error);
            obj = mcp_jsonrpc_parse_value(p, msg, strlen(msg));
            msg = NULL;
            if (obj && (mcp_jsonrpc_classify(obj, &m), m.kind == MCP_MSG_RESPONSE
                                                        || m.kind == MCP_MSG_ERROR)) {
                msg = mcp_jsonrpc_error_body(p, m.id, MCP_JSONRPC_BACKEND_ERROR,
                                             apr_psprintf(p, "Bad Gateway: the backend's response "
                                                          "could not be stored (SQLSTATE %s)",
                                                          st->db->sqlstate ? st->db->sqlstate
                                                                           : "none"), NULL);
                rv = mcp_store_events_append(st->db, p, st->q->session, st->id, seq, "out",
                                             apr_pstrcat(p, "[", msg, "]", NULL));
            }
            ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, st->q->r, "stream %" APR_INT64_T_FMT ": a "
                          "message from the backend was refused by the database; %s: %s", st->id,
                          rv == MCP_STORE_OK && msg ? "its request gets an error response instead"
                                                    : "dropped", why);
            if (rv == MCP_STORE_REFUSED) {
                continue;
            }
        }
        if (rv != MCP_STORE_OK) {
            return rv;   /* UNAVAILABLE, or NOT_FOUND: no longer open */
        }
        APR_ARRAY_PUSH(stored, const char *) = msg;
    }
    st->batch = stored;
    return MCP_STORE_OK;
}

int mcp_stream_commit(mcp_stream_t *st)
{
    apr_pool_t *p;
    int i, n = st->batch->nelts;
    mcp_store_status_t rv;

    if (taken_over(st) || n == 0) {
        return st->broken;
    }
    p = batch_pool(st);
    rv = mcp_store_events_append(st->db, p, st->q->session, st->id, st->next_seq, "out",
                                 queued_messages(st));
    if (rv == MCP_STORE_REFUSED) {
        rv = store_one_by_one(st);
        n = st->batch->nelts;
    }
    if (rv == MCP_STORE_NOT_FOUND) {
        stop_taken_over(st);
        return 1;
    }
    if (rv != MCP_STORE_OK) {
        /* Never written unless stored: the client gets nothing more from this stream. */
        log_store_failure(st, rv);
        st->broken = 1;
        return 1;
    }
    mcp_status_stored(st->batch, n);
    if (st->on_stored && n > 0) {
        st->on_stored(st->on_stored_baton, st->next_seq, st->batch, n);
    }
    for (i = 0; i < n; i++) {
        put_event(st, p, st->next_seq + i, APR_ARRAY_IDX(st->batch, i, const char *), -1);
    }
    st->next_seq += n;
    st->batch->nelts = 0;
    mcp_stream_flush(st);
    mcp_router_notify(mcp_child.router, st->id);
    return 0;
}

void mcp_stream_flush(mcp_stream_t *st)
{
    mcp_stream_write(st, "", 0);
    if (st->batch->nelts == 0) {
        if (st->batch_pool) {
            apr_pool_destroy(st->batch_pool);
            st->batch_pool = NULL;
        }
        st->batch = st->none;
        st->batch_bytes = 0;
    }
}

int mcp_stream_add(mcp_stream_t *st, const char *json, apr_size_t len)
{
    if (st->broken) {
        return 1;
    }
    st->rewritten = NULL;
    if (st->lists
        && (st->rewritten = mcp_authz_filter_answer(st->q->r, st->q->body, json, len,
                                                    &st->rewritten_len)) != NULL) {
        json = st->rewritten;
        len = st->rewritten_len;
    }
    json = apr_pstrmemdup(batch_pool(st), json, len);   /* first: it makes st->batch */
    APR_ARRAY_PUSH(st->batch, const char *) = json;
    st->batch_bytes += len;
    if (st->batch->nelts >= st->q->conf->stream_queue_length
        || (apr_off_t)st->batch_bytes >= st->q->conf->stream_queue_bytes) {
        return mcp_stream_commit(st);
    }
    return 0;
}

void mcp_stream_write_stored(mcp_stream_t *st, apr_int64_t seq, const char *json)
{
    put_event(st, batch_pool(st), seq, json, -1);
}

/* Is this request served on a secondary connection (an HTTP/2 stream under mod_http2)? Its
 * socket is then a process-wide placeholder, never the client's: it must not be polled (it
 * reports a hang-up at once) nor shut down. */
static int on_secondary(const conn_rec *c)
{
    return c->master != NULL;
}

/* Has the client closed its side? Seen without writing, so an idle stream notices a vanished
 * client at the next tick instead of one keep-alive write late.
 *
 * HTTP/2: mod_http2 marks the stream's secondary connection aborted when the client resets the
 * stream or the whole connection goes; that flag is all there is to look at.
 * HTTP/1.1, with or without TLS: the connection's socket is the client's. A FIN or an error is
 * a close; readable bytes are not (a pipelined request, or TLS records: a close_notify alone
 * is followed by the FIN that the next tick sees). Nothing is consumed. */
/* How often a tick looks whether the client closed its connection. */
#define CLIENT_CHECK_INTERVAL apr_time_from_msec(100)

static int client_closed(conn_rec *c)
{
    apr_socket_t *sock;
    apr_os_sock_t fd;
    struct pollfd pfd;
    char byte;

    if (c->aborted) {
        return 1;
    }
    if (on_secondary(c) || !(sock = ap_get_conn_socket(c))
        || apr_os_sock_get(&fd, sock) != APR_SUCCESS) {
        return 0;
    }
    pfd.fd = fd;
    pfd.events = POLLIN | POLLRDHUP;
    pfd.revents = 0;
    if (poll(&pfd, 1, 0) <= 0) {
        return 0;
    }
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)) {
        return 1;
    }
    return (pfd.revents & POLLIN) && recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int mcp_stream_tick(mcp_stream_t *st)
{
    const mcp_dir_conf_t *conf = st->q->conf;
    apr_time_t now = apr_time_now();

    /* libcurl ticks many times per call while a transfer is busy: the client's socket is looked
     * at (a poll()) once per CLIENT_CHECK_INTERVAL; a write to a gone client notices sooner. A
     * stateless (2026-07-28) request is watched whatever its mode: closing it is cancellation. */
    if ((st->mode == MCP_STREAM_SSE || st->stateless) && !st->client_gone
        && now - st->client_checked >= CLIENT_CHECK_INTERVAL
        && (st->client_checked = now, client_closed(st->q->r->connection))) {
        st->client_gone = 1;
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, st->q->r,
                      "stream %" APR_INT64_T_FMT ": the client closed the connection", st->id);
    }

    if (st->mode == MCP_STREAM_SSE && !st->client_gone
        && now - st->last_write >= conf->keepalive_interval) {
        static const char keepalive[] = ": keepalive\n\n";
        mcp_stream_write(st, keepalive, sizeof(keepalive) - 1);
    }
    taken_over(st);
    return st->broken;
}

int mcp_stream_server_stopping(void)
{
    int state = AP_MPMQ_RUNNING;

    return ap_mpm_query(AP_MPMQ_MPM_STATE, &state) == APR_SUCCESS && state == AP_MPMQ_STOPPING;
}

int mcp_stream_should_hand_over(const mcp_stream_t *st)
{
    apr_interval_time_t close_after = st->q->conf->stream_close_after;

    if (st->mode != MCP_STREAM_SSE || st->client_gone || st->stateless) {
        return 0;
    }
    return mcp_stream_server_stopping()
        || (close_after > 0 && st->q->rev->priming && apr_time_now() - st->started >= close_after);
}

/* HTTP/1.1: the response is complete, but this thread goes on relaying (and storing) what the
 * backend still sends, so the connection cannot serve another request: end it now. The FLUSH
 * sends the last chunk; the EOC makes mod_ssl send its close_notify (TLS clients then see a
 * clean close, not a truncation); closing our side of the socket lets the client see the end
 * at once. The socket is corked meanwhile so that the last bytes and the FIN leave together: a
 * keep-alive client that has read the response already knows the connection is closed, and
 * does not send its next request (often the resumption) into it. */
static void end_connection(request_rec *r, apr_bucket_brigade *bb)
{
    apr_socket_t *sock = ap_get_conn_socket(r->connection);

    if (sock) {
        apr_socket_opt_set(sock, APR_TCP_NOPUSH, 1);
    }
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(bb->bucket_alloc));
    APR_BRIGADE_INSERT_TAIL(bb, ap_bucket_eoc_create(bb->bucket_alloc));
    ap_pass_brigade(r->connection->output_filters, bb);
    apr_brigade_cleanup(bb);
    r->connection->keepalive = AP_CONN_CLOSE;
    if (sock) {
        apr_socket_shutdown(sock, APR_SHUTDOWN_WRITE);
    }
}

void mcp_stream_end_early(mcp_stream_t *st)
{
    request_rec *r = st->q->r;
    apr_bucket_brigade *bb = st->out;
    const char *hint;

    if (st->mode != MCP_STREAM_SSE || st->client_gone) {
        return;
    }
    /* A block with only retry: sets the client's reconnection delay and dispatches nothing. */
    hint = apr_psprintf(batch_pool(st), "retry: %" APR_TIME_T_FMT "\n\n",
                        apr_time_as_msec(st->q->conf->retry_interval));
    mcp_stream_write(st, hint, strlen(hint));
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_eos_create(bb->bucket_alloc));
    ap_pass_brigade(r->output_filters, bb);
    apr_brigade_cleanup(bb);
    /* HTTP/2: EOS ends this stream (END_STREAM) and nothing else; the connection, its other
     * streams and its keep-alive belong to mod_http2. */
    if (!on_secondary(r->connection)) {
        end_connection(r, bb);
    }
    st->client_gone = 1;
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "stream %" APR_INT64_T_FMT ": ended early with "
                  "a retry hint; the client resumes with Last-Event-ID", st->id);
}

/* The end of st is stored with its n queued messages: they are the stream's, sent, woken. */
static void finished(mcp_stream_t *st, int n)
{
    int i;

    mcp_status_stored(st->batch, n);
    if (st->on_stored && n > 0) {
        st->on_stored(st->on_stored_baton, st->next_seq, st->batch, n);
    }
    for (i = 0; i < n; i++) {
        put_event(st, batch_pool(st), st->next_seq + i, APR_ARRAY_IDX(st->batch, i, const char *),
                  -1);
    }
    st->next_seq += n;
    st->batch->nelts = 0;
    mcp_stream_flush(st);
    mcp_router_notify(mcp_child.router, st->id);
}

void mcp_stream_finish(mcp_stream_t *st, const char *status)
{
    int n = taken_over(st) ? 0 : st->batch->nelts;
    mcp_store_status_t rv;

    /* Ending it: the keeper must not take the end for someone else's. */
    mcp_stream_disown(st);
    rv = mcp_store_events_append_finish(st->db, batch_pool(st), st->q->session, st->id,
                                        st->next_seq, n ? queued_messages(st) : "[]", status);
    if (rv == MCP_STORE_REFUSED && n > 0 && store_one_by_one(st) == MCP_STORE_OK) {
        /* What could be stored is; the end comes on its own. */
        finished(st, st->batch->nelts);
        n = 0;
        rv = mcp_store_events_append_finish(st->db, batch_pool(st), st->q->session, st->id,
                                            st->next_seq, "[]", status);
    }
    if (rv != MCP_STORE_OK) {
        log_store_failure(st, rv);
        n = 0;
    }
    finished(st, n);
}

void mcp_stream_finish_pair(mcp_stream_t *a, mcp_stream_t *b, const char *status)
{
    int na, nb;

    if (taken_over(a) || taken_over(b)) {
        mcp_stream_finish(a, status);
        mcp_stream_finish(b, status);
        return;
    }
    na = a->batch->nelts;
    nb = b->batch->nelts;
    mcp_stream_disown(a);
    mcp_stream_disown(b);
    if (mcp_store_events_append_finish2(a->db, batch_pool(a), a->q->session, a->id, a->next_seq,
                                        na ? queued_messages(a) : "[]", b->q->session, b->id,
                                        b->next_seq, nb ? queued_messages(b) : "[]", status)
        != MCP_STORE_OK) {
        /* Nothing was stored: each on its own (a message PostgreSQL refuses, say, is then
         * stored as mcp_stream_finish does it). */
        mcp_stream_finish(a, status);
        mcp_stream_finish(b, status);
        return;
    }
    finished(a, na);
    finished(b, nb);
}
