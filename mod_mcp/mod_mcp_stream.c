/* mod_mcp_stream — see mod_mcp_stream.h. */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_core.h>
#include <util_filter.h>

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
    st->batch = apr_array_make(st->batch_pool, q->conf->stream_queue_length, sizeof(const char *));
    st->last_write = st->last_renew = apr_time_now();
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

int mcp_stream_commit(mcp_stream_t *st)
{
    request_rec *r = st->q->r;
    apr_pool_t *p = st->batch_pool;
    const char *err = NULL, *messages;
    mcp_store_t store;
    ap_dbd_t *dbd;
    int i, n = st->batch->nelts;

    if (st->broken || n == 0) {
        return st->broken;
    }
    messages = apr_pstrcat(p, "[", apr_array_pstrcat(p, st->batch, ','), "]", NULL);
    if (!(dbd = mcp_dbd_open(r, &store))
        || mcp_store_events_append(&store, p, st->q->session, st->id, st->next_seq, "out",
                                   messages, &err) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "stream %" APR_INT64_T_FMT ": %d message(s) could not be stored, so they "
                      "are not sent: %s", st->id, n, err ? err : "no database connection");
        mcp_dbd_close(r, dbd);
        st->broken = 1;
        return 1;
    }
    mcp_dbd_close(r, dbd);

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

/* Has the client closed its side? Seen without writing, so an idle stream notices a vanished
 * client at the next tick instead of one keep-alive write late. */
static int client_closed(conn_rec *c)
{
    apr_socket_t *sock = ap_get_conn_socket(c);
    apr_os_sock_t fd;
    struct pollfd pfd;
    char byte;

    if (!sock || apr_os_sock_get(&fd, sock) != APR_SUCCESS) {
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

        st->last_renew = now;
        if (!dbd || mcp_store_stream_renew(&store, st->batch_pool, st->id, st->q->session->id,
                                           mcp_req_lease_secs(st->q), &err) != MCP_STORE_OK) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, st->q->r,
                          "stream %" APR_INT64_T_FMT ": lease not renewed: %s", st->id,
                          err ? err : "no database connection");
        }
        mcp_dbd_close(st->q->r, dbd);
    }
    return st->broken;
}

void mcp_stream_finish(mcp_stream_t *st, const char *status)
{
    mcp_store_t store;
    const char *err = NULL;
    ap_dbd_t *dbd = mcp_dbd_open(st->q->r, &store);

    if (!dbd || mcp_store_stream_finish(&store, st->batch_pool, st->id, status, &err)
                != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, st->q->r,
                      "stream %" APR_INT64_T_FMT ": could not be marked %s: %s", st->id, status,
                      err ? err : "no database connection");
    }
    mcp_dbd_close(st->q->r, dbd);
    mcp_router_notify(mcp_child.router, st->id);
}
