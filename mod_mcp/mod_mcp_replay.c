/* mod_mcp_replay — see mod_mcp_replay.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_id.h"
#include "mcp_listener.h"
#include "mcp_router.h"
#include "mod_mcp_eras.h"
#include "mod_mcp_park.h"
#include "mod_mcp_relay.h"
#include "mod_mcp_federation.h"
#include "mod_mcp_replay.h"
#include "mod_mcp_shim.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* Rows read per query at most; and bytes: about MCPStreamQueueBytes and one message. */
#define REPLAY_BATCH 256

/* How often a follower looks at the table when nothing woke it while this process has no
 * working LISTEN connection (wake-ups from other processes and hosts come through it). */
#define POLL_WITHOUT_LISTENER apr_time_from_msec(250)

typedef struct follower_t {
    mcp_req_t    *q;
    mcp_stream_t  st;
    apr_int64_t   cursor;      /* seq of the last event the client was sent */
    apr_pool_t   *pool;        /* cleared per read                          */
    int           more;        /* the last read stopped at a bound          */
    int           rows;        /* rows the next read asks for               */
    apr_int64_t   follower_id; /* its mcp.followers row (0: none)           */
    apr_time_t    last_renew;  /* of the follower row's lease               */
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

/* Sends the next stored events after the cursor. Returns how many rows were read, or -1;
 * f->more tells whether more may be there already. */
static int read_more(follower_t *f)
{
    mcp_store_t *db = mcp_req_db(f->q);
    int n = 0;

    apr_pool_clear(f->pool);
    f->more = 0;
    if (mcp_store_events_after_bounded(db, f->pool, f->st.id, f->cursor, f->rows,
                                       f->q->conf->stream_queue_bytes, send_stored, f, &n,
                                       &f->more) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, f->q->r, "replaying stream %" APR_INT64_T_FMT
                      ": %s", f->st.id, db->error);
        n = -1;
    }
    /* PostgreSQL converts every row it is asked for, even those the byte bound then holds
     * back: after a read that the bound cut short, ask for about as many rows as came. */
    if (n >= 0) {
        f->rows = f->more && n < f->rows ? (n < 1 ? 2 : 2 * n) : 2 * f->rows;
        f->rows = f->rows > REPLAY_BATCH ? REPLAY_BATCH : f->rows;
    }
    mcp_stream_flush(&f->st);
    return n;
}

static int stream_state(follower_t *f, mcp_store_stream_t *state)
{
    return mcp_store_stream_get(mcp_req_db(f->q), f->pool, f->st.id, state);
}

void mcp_follower_owner_gone(mcp_req_t *q, apr_pool_t *p, apr_int64_t stream_id,
                             const mcp_store_stream_t *state)
{
    mcp_store_t *db = mcp_req_db(q);
    long finished = 0;

    if (mcp_store_streams_expire(db, p, stream_id, MCP_OWNER_GONE_MESSAGE, &finished)
        != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "stream %" APR_INT64_T_FMT ": finishing "
                      "it failed: %s", stream_id, db->error);
    }
    mcp_status_count(MCP_STAT_TAKEOVERS, (apr_uint64_t)finished);
    ap_log_rerror(APLOG_MARK, finished ? APLOG_NOTICE : APLOG_DEBUG, 0, q->r,
                  "stream %" APR_INT64_T_FMT ": its owner %s stopped renewing its lease; %s",
                  stream_id, state->owner ? state->owner : "-",
                  finished ? "finished it with an error response" : "already finished");
}

void mcp_follower_renew(mcp_req_t *q, apr_pool_t *p, apr_int64_t stream_id,
                        apr_int64_t follower_id)
{
    mcp_store_t *db = mcp_req_db(q);
    mcp_store_status_t st;

    if (!follower_id) {
        return;
    }
    st = mcp_store_follower_renew(db, p, follower_id, mcp_req_lease_secs(q));
    if (st != MCP_STORE_OK) {
        /* An outage is logged by the gate. */
        ap_log_rerror(APLOG_MARK, st == MCP_STORE_UNAVAILABLE ? APLOG_DEBUG : APLOG_WARNING, 0,
                      q->r, "stream %" APR_INT64_T_FMT ": follower's lease not renewed: %s",
                      stream_id, db->error);
    }
}

void mcp_follower_release(mcp_req_t *q, apr_pool_t *p, apr_int64_t stream_id,
                          apr_int64_t follower_id)
{
    mcp_store_t *db = mcp_req_db(q);

    if (!follower_id) {
        return;
    }
    if (mcp_store_follower_release(db, p, follower_id) != MCP_STORE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, q->r, "stream %" APR_INT64_T_FMT
                      ": follower not released (its lease runs out instead): %s", stream_id,
                      db->error);
    }
}

/* Keeps the follower counted (MCPMaxFollowersPerStream and the stream limits): its lease is
 * renewed every third of MCPStreamLease, like a stream's. */
static void renew_follower(follower_t *f)
{
    apr_time_t now = apr_time_now();

    if (!f->follower_id || now - f->last_renew < f->q->conf->stream_lease / 3) {
        return;
    }
    f->last_renew = now;
    apr_pool_clear(f->pool);
    mcp_follower_renew(f->q, f->pool, f->st.id, f->follower_id);
}

/* The follower is done: it no longer counts against the limits. */
static void release_follower(follower_t *f)
{
    apr_pool_clear(f->pool);
    mcp_follower_release(f->q, f->pool, f->st.id, f->follower_id);
}

static apr_interval_time_t wake_up_timeout(follower_t *f)
{
    apr_interval_time_t t = f->q->conf->keepalive_interval;

    /* The follower's lease is renewed after a wake-up: one comes at least every third of it. */
    if (f->follower_id && t > f->q->conf->stream_lease / 3) {
        t = f->q->conf->stream_lease / 3;
    }
    return mcp_child.listener && mcp_listener_connected(mcp_child.listener) ? t
                                                                            : POLL_WITHOUT_LISTENER;
}

/* Replays, then follows the stream until it ends, the client goes, or the server stops. Database
 * failures (a restart) are waited out for as long as a lease lasts. Returns 1 when the stream
 * ended and everything it stored was sent, else 0. */
static int follow(follower_t *f, mcp_router_sub_t *sub)
{
    apr_time_t failing_since = 0;
    mcp_store_stream_t state;
    int n;

    for (;;) {
        n = read_more(f);
        if (f->st.client_gone) {
            return 0;
        }
        if (n > 0 && f->more) {
            continue;
        }
        if (n < 0 || stream_state(f, &state) != MCP_STORE_OK) {
            apr_time_t now = apr_time_now();
            failing_since = failing_since ? failing_since : now;
            if (now - failing_since > f->q->conf->stream_lease) {
                return 0;
            }
        }
        else {
            failing_since = 0;
            if (strcmp(state.status, "open") != 0) {
                /* It ended after the read above: what it stored before ending is read now. */
                while (read_more(f) > 0 && f->more && !f->st.client_gone) {
                }
                return !f->st.client_gone;
            }
            if (state.lease_expired) {
                mcp_follower_owner_gone(f->q, f->pool, f->st.id, &state);
                continue;
            }
        }
        /* Handed over only once what is stored was sent: a stopping child (a graceful restart,
         * MaxConnectionsPerChild) that cut a resumed stream before its replay would send the
         * client round in circles, each resumption cut again before the answer it looks for. */
        if (mcp_stream_should_hand_over(&f->st)) {
            mcp_stream_end_early(&f->st);
            return 0;
        }
        if (sub) {
            mcp_router_wait(sub, failing_since ? POLL_WITHOUT_LISTENER : wake_up_timeout(f));
        }
        else {
            apr_sleep(POLL_WITHOUT_LISTENER);
        }
        mcp_stream_tick(&f->st);
        renew_follower(f);
    }
}

/* Replays what is stored; non-zero when everything was sent and the stream is still open with
 * a live owner, so that the client may wait parked for more. */
static int caught_up(follower_t *f)
{
    mcp_store_stream_t state;
    int n;

    do {
        n = read_more(f);
    } while (n > 0 && f->more && !f->st.client_gone);
    return n >= 0 && !f->st.client_gone && stream_state(f, &state) == MCP_STORE_OK
        && strcmp(state.status, "open") == 0 && !state.lease_expired;
}

int mcp_replay(mcp_req_t *handler_q, const char *last_event_id)
{
    /* A parked follower outlives the handler's frame, where its request lives. */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    request_rec *r = q->r;
    apr_int64_t stream_id, seq;
    mcp_store_stream_t stream;
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_status_t found;
    mcp_router_sub_t *sub;
    apr_int64_t follower_id = 0;
    mcp_park_t *pk;
    follower_t f;
    int ended;

    if (mcp_id_event_parse(last_event_id, &stream_id, &seq) != 0) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                             "Bad Request: Last-Event-ID '%s' is not an event id this gateway "
                             "issued", last_event_id);
    }
    mcp_req_stream_limits(q, &limits);
    found = mcp_store_stream_follow(mcp_req_db(q), r->pool, q->session->id, stream_id, seq,
                                    mcp_child.owner, mcp_req_lease_secs(q), &limits, &stream,
                                    &follower_id, &refused);
    if (found == MCP_STORE_LIMIT) {
        return mcp_req_refused(q, refused);
    }
    if (found != MCP_STORE_OK && found != MCP_STORE_NOT_FOUND) {
        return mcp_req_store_failed(q, found);
    }
    if (found == MCP_STORE_NOT_FOUND) {
        return mcp_req_error(q, HTTP_BAD_REQUEST, MCP_JSONRPC_SERVER_ERROR,
                             "Bad Request: Last-Event-ID '%s' names no event of this session",
                             last_event_id);
    }

    memset(&f, 0, sizeof(f));
    f.q = q;
    f.cursor = seq;
    f.follower_id = follower_id;
    f.rows = REPLAY_BATCH;
    f.last_renew = apr_time_now();
    apr_pool_create(&f.pool, r->pool);
    mcp_stream_init(&f.st, q, stream_id, 0);
    mcp_req_note_stream(r, stream_id);
    mcp_status_count(MCP_STAT_RESUMPTIONS, 1);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "resuming stream %" APR_INT64_T_FMT " after %s "
                  "(%s, %s)", stream_id, last_event_id, stream.kind, stream.status);
    /* Parked (no thread while it waits) once it has caught up, if it can be; the park
     * subscribes before the first read, as the thread's follower does. */
    pk = strcmp(stream.status, "open") == 0 ? mcp_park_create(q, stream_id, seq, follower_id, 0)
                                            : NULL;
    if (pk) {
        mcp_stream_start_sse(&f.st, -1);
        if (caught_up(&f)) {
            return mcp_park_go(pk, f.cursor);
        }
        mcp_park_abandon(pk);
    }
    /* Subscribe before the (next) read: whatever is stored from now on wakes us. */
    sub = mcp_router_subscribe(mcp_child.router, stream_id);
    if (!sub) {
        int in_use = 0;

        mcp_router_stats(mcp_child.router, &in_use, NULL);
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "stream %" APR_INT64_T_FMT ": no wake-up "
                      "slot for this follower (%d in use%s); it looks at the table every %d ms "
                      "instead", stream_id, in_use, mcp_child.router ? "" : ", no router",
                      (int)apr_time_as_msec(POLL_WITHOUT_LISTENER));
    }
    if (!pk) {
        mcp_stream_start_sse(&f.st, -1);
    }
    ended = follow(&f, sub);
    if (sub) {
        mcp_router_unsubscribe(sub);
    }
    release_follower(&f);
    /* A standalone stream is the session's channel for whatever the server sends, not one
     * answer: resuming one that ended (its response was cut by a graceful restart or
     * MCPStreamCloseAfter, or its client went) goes on with a new one, live. */
    if (ended && strcmp(stream.kind, "standalone") == 0 && !mcp_stream_server_stopping()) {
        if (q->conf->members) {
            return mcp_federation_listen(q, 1);
        }
        return mcp_eras_shimmed(q) ? mcp_shim_listen_resumed(q)
                                         : mcp_relay_standalone_resumed(q);
    }
    return DONE;
}
