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
#include "mod_mcp_dbd.h"
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
    apr_pool_create(&st->batch_pool, r->pool);
    apr_pool_create(&st->tick_pool, r->pool);
    st->batch = apr_array_make(st->batch_pool, q->conf->stream_queue_length, sizeof(const char *));
    st->started = st->last_write = st->last_renew = apr_time_now();
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
    text = mcp_sse_event_format(p, mcp_id_event_format(p, st->id, seq), NULL, json, retry_ms, &len);
    apr_brigade_write(st->out, NULL, NULL, text, len);
    st->written++;
}

void mcp_stream_start_sse(mcp_stream_t *st, apr_int64_t priming_seq)
{
    mcp_req_set_sse_headers(st->q->r);
    st->mode = MCP_STREAM_SSE;
    if (priming_seq >= 0) {
        put_event(st, st->batch_pool, priming_seq, "",
                  (long)apr_time_as_msec(st->q->conf->retry_interval));
    }
    /* Flushing now sends the headers (and the priming event) before the backend is asked. */
    mcp_stream_write(st, "", 0);
}

/* One piece of work on the store for a stream. */
typedef mcp_store_status_t store_op_fn(mcp_stream_t *st, const mcp_store_t *store, void *arg,
                                       const char **err);

/* Runs op, retrying while the database is away (a restart): the caller waits, and with it the
 * backend (back-pressure), for at most half a lease. Returns the last status. */
static mcp_store_status_t with_store(mcp_stream_t *st, store_op_fn *op, void *arg, const char *what)
{
    request_rec *r = st->q->r;
    apr_interval_time_t backoff = apr_time_from_msec(50);
    apr_time_t deadline = apr_time_now() + st->q->conf->stream_lease / 2;
    mcp_store_status_t rv;
    const char *err;
    mcp_store_t store;
    ap_dbd_t *dbd;

    for (;;) {
        rv = MCP_STORE_ERROR;
        err = NULL;
        if ((dbd = mcp_dbd_open(r, &store))) {
            rv = op(st, &store, arg, &err);
            mcp_dbd_close(r, dbd);
        }
        if (rv != MCP_STORE_ERROR) {
            return rv;
        }
        if (apr_time_now() + backoff > deadline) {
            ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "stream %" APR_INT64_T_FMT ": %s failed: %s",
                          st->id, what, err ? err : "no database connection");
            return rv;
        }
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "stream %" APR_INT64_T_FMT ": %s failed, "
                      "retrying: %s", st->id, what, err ? err : "no database connection");
        apr_sleep(backoff);
        backoff = backoff * 2 > apr_time_from_sec(2) ? apr_time_from_sec(2) : backoff * 2;
    }
}

static mcp_store_status_t append_op(mcp_stream_t *st, const mcp_store_t *store, void *messages,
                                    const char **err)
{
    return mcp_store_events_append(store, st->batch_pool, st->q->session, st->id, st->next_seq,
                                   "out", messages, err);
}

typedef struct finish_t {
    const char *messages;   /* what was still queued, "[]" for nothing */
    const char *status;
} finish_t;

static mcp_store_status_t finish_op(mcp_stream_t *st, const mcp_store_t *store, void *arg,
                                    const char **err)
{
    finish_t *f = arg;

    return mcp_store_events_append_finish(store, st->batch_pool, st->q->session, st->id,
                                          st->next_seq, f->messages, f->status, err);
}

int mcp_stream_commit(mcp_stream_t *st)
{
    apr_pool_t *p = st->batch_pool;
    int i, n = st->batch->nelts;

    if (st->broken || n == 0) {
        return st->broken;
    }
    if (with_store(st, append_op, (void *)queued_messages(st), "storing messages")
        != MCP_STORE_OK) {
        /* Never written unless stored: the client gets nothing more from this stream. */
        st->broken = 1;
        return 1;
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
        apr_pool_clear(st->batch_pool);
        st->batch = apr_array_make(st->batch_pool, st->q->conf->stream_queue_length,
                                   sizeof(const char *));
        st->batch_bytes = 0;
    }
}

int mcp_stream_add(mcp_stream_t *st, const char *json, apr_size_t len)
{
    if (st->broken) {
        return 1;
    }
    APR_ARRAY_PUSH(st->batch, const char *) = apr_pstrmemdup(st->batch_pool, json, len);
    st->batch_bytes += len;
    if (st->batch->nelts >= st->q->conf->stream_queue_length
        || (apr_off_t)st->batch_bytes >= st->q->conf->stream_queue_bytes) {
        return mcp_stream_commit(st);
    }
    return 0;
}

void mcp_stream_write_stored(mcp_stream_t *st, apr_int64_t seq, const char *json)
{
    put_event(st, st->batch_pool, seq, json, -1);
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

int mcp_stream_tick(mcp_stream_t *st, int renew_lease)
{
    const mcp_dir_conf_t *conf = st->q->conf;
    apr_time_t now = apr_time_now();

    if (st->mode == MCP_STREAM_SSE && !st->client_gone && client_closed(st->q->r->connection)) {
        st->client_gone = 1;
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, st->q->r,
                      "stream %" APR_INT64_T_FMT ": the client closed the connection", st->id);
    }

    if (st->mode == MCP_STREAM_SSE && !st->client_gone
        && now - st->last_write >= conf->keepalive_interval) {
        static const char keepalive[] = ": keepalive\n\n";
        mcp_stream_write(st, keepalive, sizeof(keepalive) - 1);
    }
    if (renew_lease && !st->broken && now - st->last_renew >= conf->stream_lease / 3) {
        mcp_store_t store;
        const char *err = NULL;
        ap_dbd_t *dbd = mcp_dbd_open(st->q->r, &store);
        mcp_store_status_t rv = MCP_STORE_ERROR;

        /* An idle stream renews for hours: each renewal's memory goes with the next. */
        apr_pool_clear(st->tick_pool);
        if (dbd) {
            rv = mcp_store_stream_renew(&store, st->tick_pool, st->id, st->q->session->id,
                                        mcp_req_lease_secs(st->q), &err);
        }

        mcp_dbd_close(st->q->r, dbd);
        st->last_renew = now;
        if (rv == MCP_STORE_NOT_FOUND) {
            /* Finished by someone else: our lease ran out (we were stalled) and a follower or
             * the sweep gave the client its terminal answer. Nothing more may be added. */
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, st->q->r,
                          "stream %" APR_INT64_T_FMT ": was finished by another process after "
                          "its lease ran out; relaying stops", st->id);
            st->broken = 1;
        }
        else if (rv != MCP_STORE_OK) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, st->q->r,
                          "stream %" APR_INT64_T_FMT ": lease not renewed: %s", st->id,
                          err ? err : "no database connection");
        }
    }
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

    if (st->mode != MCP_STREAM_SSE || st->client_gone) {
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
    hint = apr_psprintf(st->batch_pool, "retry: %" APR_TIME_T_FMT "\n\n",
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

void mcp_stream_finish(mcp_stream_t *st, const char *status)
{
    finish_t f;
    int i, n = st->broken ? 0 : st->batch->nelts;

    f.messages = n ? queued_messages(st) : "[]";
    f.status = status;
    if (with_store(st, finish_op, &f, apr_pstrcat(st->batch_pool, "storing its end (", status,
                                                   ")", NULL)) == MCP_STORE_OK) {
        for (i = 0; i < n; i++) {
            put_event(st, st->batch_pool, st->next_seq + i,
                      APR_ARRAY_IDX(st->batch, i, const char *), -1);
        }
        st->next_seq += n;
    }
    st->batch->nelts = 0;
    mcp_stream_flush(st);
    mcp_router_notify(mcp_child.router, st->id);
}
