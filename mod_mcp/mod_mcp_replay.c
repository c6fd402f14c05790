/* mod_mcp_replay — see mod_mcp_replay.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_id.h"
#include "mcp_router.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_replay.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* Rows read per query. */
#define REPLAY_BATCH 256

/* How often a follower of a stream relayed by another process looks at the table when nothing
 * woke it (wake-ups across processes come with the LISTEN/NOTIFY listener). */
#define REMOTE_POLL apr_time_from_msec(250)

typedef struct follower_t {
    mcp_req_t    *q;
    mcp_stream_t  st;
    apr_int64_t   cursor;      /* seq of the last event the client was sent */
    apr_pool_t   *pool;        /* cleared per read                          */
} follower_t;

static int send_stored(void *baton, apr_int64_t seq, const char *message)
{
    follower_t *f = baton;

    /* Priming rows carry no message: their only use was to give the client a cursor. */
    if (message) {
        mcp_stream_write_stored(&f->st, seq, message);
    }
    f->cursor = seq;
    return f->st.client_gone;
}

/* Sends the next stored events after the cursor. Returns how many rows were read, or -1. */
static int read_more(follower_t *f)
{
    const char *err = NULL;
    mcp_store_t store;
    ap_dbd_t *dbd;
    int n = 0;

    apr_pool_clear(f->pool);
    if (!(dbd = mcp_dbd_open(f->q->r, &store))) {
        return -1;
    }
    if (mcp_store_events_after(&store, f->pool, f->st.id, f->cursor, REPLAY_BATCH, send_stored, f,
                               &n, &err) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, f->q->r, "replaying stream %" APR_INT64_T_FMT
                      ": %s", f->st.id, err);
        n = -1;
    }
    mcp_dbd_close(f->q->r, dbd);
    mcp_stream_flush(&f->st);
    return n;
}

static int stream_state(follower_t *f, mcp_store_stream_t *state)
{
    const char *err = NULL;
    mcp_store_t store;
    ap_dbd_t *dbd = mcp_dbd_open(f->q->r, &store);
    int rv = dbd ? mcp_store_stream_get(&store, f->pool, f->st.id, state, &err) : MCP_STORE_ERROR;

    mcp_dbd_close(f->q->r, dbd);
    return rv;
}

static void follow(follower_t *f, mcp_router_sub_t *sub)
{
    mcp_store_stream_t state;
    int n;

    for (;;) {
        if ((n = read_more(f)) < 0 || f->st.client_gone) {
            return;
        }
        if (n == REPLAY_BATCH) {
            continue;
        }
        if (stream_state(f, &state) != MCP_STORE_OK) {
            return;
        }
        if (strcmp(state.status, "open") != 0) {
            /* It ended after the read above: what it stored before ending is read now. */
            while (read_more(f) == REPLAY_BATCH && !f->st.client_gone) {
            }
            return;
        }
        if (state.lease_expired) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, f->q->r, "stream %" APR_INT64_T_FMT
                          ": its owner %s stopped renewing its lease; not following it",
                          f->st.id, state.owner ? state.owner : "-");
            return;
        }
        if (sub) {
            int local = state.owner && strcmp(state.owner, mcp_child.owner) == 0;
            mcp_router_wait(sub, local ? f->q->conf->keepalive_interval : REMOTE_POLL);
        }
        else {
            apr_sleep(REMOTE_POLL);
        }
        mcp_stream_tick(&f->st, 0);
    }
}

int mcp_replay(mcp_req_t *q, const char *last_event_id)
{
    request_rec *r = q->r;
    apr_int64_t stream_id, seq;
    mcp_store_stream_t stream;
    mcp_store_status_t found;
    mcp_router_sub_t *sub;
    const char *err = NULL;
    mcp_store_t store;
    ap_dbd_t *dbd;
    follower_t f;

    if (mcp_id_event_parse(last_event_id, &stream_id, &seq) != 0) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                             "Bad Request: Last-Event-ID '%s' is not an event id this gateway "
                             "issued", last_event_id);
    }
    if (!(dbd = mcp_dbd_open(r, &store))) {
        return mcp_req_store_unavailable(q);
    }
    found = mcp_store_stream_for_event(&store, r->pool, q->session->id, stream_id, seq, &stream,
                                       &err);
    mcp_dbd_close(r, dbd);
    if (found == MCP_STORE_ERROR) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "looking up Last-Event-ID failed: %s", err);
        return mcp_req_store_unavailable(q);
    }
    if (found == MCP_STORE_NOT_FOUND) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                             "Bad Request: Last-Event-ID '%s' names no event of this session",
                             last_event_id);
    }

    memset(&f, 0, sizeof(f));
    f.q = q;
    f.cursor = seq;
    apr_pool_create(&f.pool, r->pool);
    mcp_stream_init(&f.st, q, stream_id, 0);
    /* Subscribe before the first read: whatever is stored from now on wakes us. */
    sub = mcp_router_subscribe(mcp_child.router, stream_id);
    mcp_stream_start_sse(&f.st, -1);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "resuming stream %" APR_INT64_T_FMT " after %s "
                  "(%s, %s)", stream_id, last_event_id, stream.kind, stream.status);
    follow(&f, sub);
    if (sub) {
        mcp_router_unsubscribe(sub);
    }
    return DONE;
}
