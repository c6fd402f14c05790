/* mod_mcp_park — see mod_mcp_park.h. */
#include <string.h>

#include <apr_atomic.h>
#include <apr_buckets.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_connection.h>
#include <http_core.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>
#include <ap_mpm.h>
#include <mpm_common.h>

#include "mcp_id.h"
#include "mcp_listener.h"
#include "mcp_router.h"
#include "mcp_sse.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_park.h"
#include "mod_mcp_replay.h"
#include "mod_mcp_status.h"
#include "mod_mcp_stream.h"

APLOG_USE_MODULE(mcp);

/* The httpd releases this was tested on (2.4.x, x in this range): it relies on how the event MPM
 * counts suspended connections (see end_response). */
#define TESTED_PATCH_MIN 62
#define TESTED_PATCH_MAX 71

/* Worker threads per process for parked streams' runs (reading the table, writing, storing). */
#define PARK_WORKERS 4

/* How often a parked stream looks around when nothing happens (MCPStreamCloseAfter, a
 * follower's lease, the backend half's tick). A graceful restart, a lost lease and a stream's
 * end wake it at once instead; and the table is read only when something was stored. */
#define PARK_TICK apr_time_from_sec(5)

/* How often the half looks around while the request thread waits for it. */
#define PARK_WAIT_TICK apr_time_from_msec(250)

/* When a stream that writes through looks again after a wake-up (above the relay's one look a
 * second at its stream's state). */
#define LOOK_AGAIN apr_time_from_msec(1100)

/* Bytes handed to the filters at once: below the core output filter's flush threshold
 * (FlushMaxThreshold, 64 KiB), above which it would block until the client took them. */
#define WRITE_SLICE (32 * 1024)

/* Reads of the table per run at most (a long replay yields to the other streams between). */
#define READS_PER_RUN 4

/* Rows read per look at the table at most. */
#define READ_ROWS 256

/* How long ending a response may wait for a client that does not read. */
#define END_TIMEOUT apr_time_from_sec(1)

/* How many of the loop's workers may run backend halves' hooks at once. Those store, and a
 * store waits out an outage at the gate (up to half a lease): the other workers stay free for
 * what needs no database (keep-alives, hang-ups, writes from memory, followers' one-try
 * reads), so that an outage does not stop every parked stream of the process. */
#define HALF_WORKERS (PARK_WORKERS / 2)

/* How soon a parked stream tries again what it put off: its half's work while the database is
 * away (a ping is due every 100 ms), a read of the table that failed. */
#define PUT_OFF apr_time_from_msec(250)

/* The halves' turns: runs calling a half's hooks now (at most HALF_WORKERS), and the parked
 * streams waiting for a turn, first come first served, each woken when a turn is free (a
 * broadcast to thousands of streams must not have them all poll for two turns). */
static apr_thread_mutex_t *turns_mutex;
static int halves_running;
static mcp_park_t *turns_head, *turns_tail;

struct mcp_park_t {
    mcp_req_t             *q;
    request_rec           *r;
    conn_rec              *c;
    mcp_loop_src_t        *src;
    mcp_router_sub_t      *sub;
    mcp_store_t           *db;          /* one try per statement: a run never waits out an outage */
    apr_pool_t            *scratch;     /* a run's: its worker's (mcp_loop_src_scratch, set at
                                         * each run's start), or mcp_park_wait's (NULL after it) */
    apr_bucket_brigade    *out;         /* written, not handed to the filters yet              */
    apr_bucket_brigade    *rest;
    apr_int64_t            stream_id;
    apr_int64_t            cursor;      /* seq of the last event written                       */
    apr_int64_t            follower_id;
    int                    owned;
    int                    more;        /* the last read stopped at a bound                    */
    int                    gone;        /* the client went                                     */
    int                    ended;       /* the stream ended and everything was read            */
    const mcp_park_half_t *half[MCP_LOOP_SLOTS];   /* the backend halves, by transfer slot */
    unsigned               halves;      /* slots with a half (bits)                            */
    unsigned               halves_done; /* ... done                                           */
    apr_time_t             started;
    apr_time_t             last_write;
    apr_time_t             next_tick;
    apr_time_t             last_renew;
    int                    fd;
    int                    runs;
    int                    through;     /* the half's stores are written from memory            */
    int                    client_ended; /* its response is over; a half may go on             */
    int                    behind;      /* ... except when the client lagged: read the table    */
    int                    stateless;   /* events carry no ids (a 2026-07-28 call's stream)      */
    mcp_park_t            *turn_next;   /* waiting for a half's turn (turns_mutex)              */
    int                    turn_waiting;
    unsigned               put_off;     /* the half's events a run could not hand it             */
    const char            *stop_half;   /* why the half is to stop, once it may run              */
    int                    retry_read;  /* the last read or look at the table failed             */
    apr_time_t             retry_at;    /* when to try again what was put off (0: nothing)      */
};

static mcp_loop_t *park_loop;            /* NULL: streams are not parked in this process */

/* The backend halves: slot's bit; some half goes on; every half there was is done. */
#define SLOT_BIT(slot) (1u << (unsigned)(slot))

static int halves_on(const mcp_park_t *pk)
{
    return (pk->halves & ~pk->halves_done) != 0;
}

static int halves_over(const mcp_park_t *pk)
{
    return pk->halves && !halves_on(pk);
}

static int half_on(const mcp_park_t *pk, int slot)
{
    return ((pk->halves & ~pk->halves_done) & SLOT_BIT(slot)) != 0;
}

/* ---- a metadata bucket that makes buffering filters pass on what they hold --------------- */

/* mod_ssl's coalescing filter keeps small writes until a metadata bucket comes; FLUSH would make
 * the core output filter block until the client took everything. This one does neither: every
 * filter passes it on, and the core filter drops it. */
static apr_status_t nudge_read(apr_bucket *b, const char **str, apr_size_t *len,
                               apr_read_type_e block)
{
    (void)b;
    (void)block;
    *str = NULL;
    *len = 0;
    return APR_SUCCESS;
}

static const apr_bucket_type_t bucket_type_nudge = {
    "MCP_NUDGE", 5, APR_BUCKET_METADATA,
    apr_bucket_destroy_noop,
    nudge_read,
    apr_bucket_setaside_noop,
    apr_bucket_split_notimpl,
    apr_bucket_simple_copy
};

static apr_bucket *nudge_create(apr_bucket_alloc_t *list)
{
    apr_bucket *b = apr_bucket_alloc(sizeof(*b), list);

    APR_BUCKET_INIT(b);
    b->free = apr_bucket_free;
    b->list = list;
    b->length = 0;
    b->start = 0;
    b->data = NULL;
    b->type = &bucket_type_nudge;
    return b;
}

/* ---- writing without blocking ------------------------------------------------------------- */

/* The core output filter with no new data: it writes what it holds as far as the socket takes
 * it, keeps the rest and says so in c->data_in_output_filters (the event MPM's own write
 * completion does the same). */
static apr_status_t core_push(conn_rec *c)
{
    ap_filter_t *f = c->output_filters;

    while (f->next) {
        f = f->next;
    }
    return f->frec->filter_func.out_func(f, NULL);
}

static void went_away(mcp_park_t *pk, const char *how)
{
    if (!pk->gone) {
        pk->gone = 1;
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, pk->r, "stream %" APR_INT64_T_FMT " (parked): "
                      "the client went away (%s); events are still stored for it to resume",
                      pk->stream_id, how);
    }
}

/* Hands what is written to the filters, a slice at a time, while the core filter holds nothing.
 * Returns non-zero while output is pending (the caller waits for writability). */
static int push(mcp_park_t *pk)
{
    conn_rec *c = pk->c;

    while (!pk->gone) {
        if (c->aborted) {
            went_away(pk, "a write failed");
            break;
        }
        if (!c->data_in_output_filters && !APR_BRIGADE_EMPTY(pk->out)) {
            apr_bucket *cut = NULL;
            apr_status_t rv;

            if (apr_brigade_partition(pk->out, WRITE_SLICE, &cut) == APR_SUCCESS) {
                apr_brigade_split_ex(pk->out, cut, pk->rest);
            }
            APR_BRIGADE_INSERT_TAIL(pk->out, nudge_create(c->bucket_alloc));
            rv = ap_pass_brigade(pk->r->output_filters, pk->out);
            apr_brigade_cleanup(pk->out);
            APR_BRIGADE_CONCAT(pk->out, pk->rest);
            if (rv != APR_SUCCESS || c->aborted) {
                went_away(pk, "a write failed");
                break;
            }
            pk->last_write = apr_time_now();
        }
        if (core_push(c) != APR_SUCCESS || c->aborted) {
            went_away(pk, "a write failed");
            break;
        }
        if (c->data_in_output_filters) {
            return 1;
        }
        if (APR_BRIGADE_EMPTY(pk->out)) {
            return 0;
        }
    }
    apr_brigade_cleanup(pk->out);
    return 0;
}

static void put_text(mcp_park_t *pk, const char *text, apr_size_t len)
{
    apr_brigade_write(pk->out, NULL, NULL, text, len);
}

static int put_stored(void *baton, apr_int64_t seq, const char *message)
{
    mcp_park_t *pk = baton;
    apr_size_t len;
    const char *text;

    /* Priming rows carry no message: their only use was to give the client a cursor. */
    if (message) {
        text = mcp_sse_event_format(pk->scratch, pk->stateless ? NULL
                                    : mcp_id_event_format(pk->scratch, pk->stream_id, seq),
                                    NULL, message, -1, &len);
        put_text(pk, text, len);
    }
    pk->cursor = seq;
    return 0;
}

/* Reads what was stored after the cursor into pk->out (bounded by MCPStreamQueueBytes).
 * Returns the rows read, or -1. */
static int read_more(mcp_park_t *pk)
{
    int n = 0;

    pk->more = 0;
    if (mcp_store_events_after_bounded(pk->db, pk->scratch, pk->stream_id, pk->cursor, READ_ROWS,
                                       pk->q->conf->stream_queue_bytes, put_stored, pk, &n,
                                       &pk->more) != MCP_STORE_OK) {
        /* The wake-up that asked for this read is spent: no other may come (the LISTEN
         * connection is back before the pooled ones, say), so the read is tried again soon. */
        if (!pk->retry_read) {
            ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, pk->r, "stream %" APR_INT64_T_FMT
                          " (parked): reading it failed (tried again shortly): %s",
                          pk->stream_id, pk->db->error);
        }
        pk->retry_read = 1;
        return -1;
    }
    pk->retry_read = 0;
    return n;
}

/* The backend half stored n messages from seq first: written from memory when the client has
 * everything before them and takes what it is given; else read from the table later. */
static void half_stored(void *baton, apr_int64_t first, const apr_array_header_t *batch, int n)
{
    mcp_park_t *pk = baton;
    int i;

    /* No scratch pool: stored after mcp_park_wait, by a request thread that is done with it. */
    if (!pk->scratch || pk->behind || pk->gone || first != pk->cursor + 1
        || pk->c->data_in_output_filters) {
        pk->behind = 1;
        return;
    }
    for (i = 0; i < n; i++) {
        put_stored(pk, first + i, APR_ARRAY_IDX(batch, i, const char *));
    }
}

/* ---- the end of a parked stream ----------------------------------------------------------- */

/* Ends the client's response (with a retry: hint when asked): the last chunk, TLS's
 * close_notify, and our side of the connection shut, so that the client sees the end at once,
 * bounded by END_TIMEOUT for a client that does not read. The connection itself is given back
 * later (give_back): a half that outlives its client goes on storing until then. */
static void end_client(mcp_park_t *pk, const char *why, int retry_hint)
{
    request_rec *r = pk->r;
    conn_rec *c = pk->c;
    apr_socket_t *sock = ap_get_conn_socket(c);
    apr_bucket_brigade *bb;

    if (pk->client_ended) {
        return;
    }
    pk->client_ended = 1;
    ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r, "stream %" APR_INT64_T_FMT " (parked): the "
                  "response ends: %s", pk->stream_id, why);
    mcp_loop_src_fd(pk->src, -1, 0);
    if (retry_hint && !pk->gone) {
        const char *hint = apr_psprintf(pk->scratch, "retry: %" APR_TIME_T_FMT "\n\n",
                                        apr_time_as_msec(pk->q->conf->retry_interval));
        put_text(pk, hint, strlen(hint));
    }
    if (sock) {
        apr_socket_timeout_set(sock, END_TIMEOUT);
    }
    if (!pk->gone) {
        push(pk);
    }
    apr_brigade_cleanup(pk->out);
    ap_finalize_request_protocol(r);
    if (!c->aborted) {
        bb = apr_brigade_create(pk->scratch, c->bucket_alloc);
        APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(bb->bucket_alloc));
        APR_BRIGADE_INSERT_TAIL(bb, ap_bucket_eoc_create(bb->bucket_alloc));
        ap_pass_brigade(c->output_filters, bb);
        apr_brigade_cleanup(bb);
    }
    if (sock) {
        apr_socket_shutdown(sock, APR_SHUTDOWN_WRITE);
    }
}

/* Gives the connection back as the event MPM would have closed it: the request is logged (its
 * EOR bucket; r->pool goes with it), the socket closed, the connection's pool destroyed. The
 * MPM counted the connection as suspended; its pool's cleanup uncounts it by the state it
 * finds, so the state is set back to SUSPENDED before the pool goes. pk is gone after this. */
static void turn_forget(mcp_park_t *pk);

static void give_back(mcp_park_t *pk)
{
    conn_rec *c = pk->c;
    apr_socket_t *sock = ap_get_conn_socket(c);

    turn_forget(pk);
    mcp_router_unsubscribe(pk->sub);
    pk->sub = NULL;
    mcp_follower_release(pk->q, pk->scratch, pk->stream_id, pk->follower_id);
    mcp_loop_src_release(pk->src);
    mcp_status_parked(-1);
    ap_process_request_after_handler(pk->r);
    /* r and pk are gone from here on. */
    if (sock) {
        apr_socket_close(sock);
    }
    if (c->cs) {
        c->cs->state = CONN_STATE_SUSPENDED;
    }
    apr_pool_destroy(c->pool);
}

/* The client's side ends. A half that outlives its client (a request's answer: disconnect is
 * not cancellation) goes on, and the connection is given back when it is done; any other half
 * is stopped now, or (half_ok 0: this run may not call its hooks) by the first run that may.
 * forced: this process exits: nothing goes on. why must be a literal. Returns non-zero when pk
 * is gone. */
static int end_response(mcp_park_t *pk, const char *why, int retry_hint, int forced,
                        int half_ok)
{
    int slot;

    for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
        if (half_on(pk, slot) && (forced || !pk->half[slot]->outlives_client)) {
            if (half_ok || forced) {
                pk->halves_done |= SLOT_BIT(slot);
                pk->half[slot]->on_stop(pk->half[slot]->baton, why);
            }
            else if (!pk->stop_half) {
                pk->stop_half = why;
            }
        }
    }
    end_client(pk, why, retry_hint);
    if (halves_on(pk)) {
        return 0;
    }
    give_back(pk);
    return 1;
}

/* ---- a run -------------------------------------------------------------------------------- */

/* One take of each half's news per run: a backend that floods would otherwise keep one worker
 * for itself (what comes meanwhile queues the source again, behind the others). */
static void half_news(mcp_park_t *pk)
{
    mcp_loop_news_t news;
    int slot;

    for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
        if (half_on(pk, slot)
            && mcp_loop_src_take_slot(pk->src, slot, pk->r->pool, pk->scratch, &news)
            && pk->half[slot]->on_news(pk->half[slot]->baton, &news)) {
            pk->halves_done |= SLOT_BIT(slot);
            mcp_loop_src_cut_slot(pk->src, slot);
        }
    }
}

/* The stream of a follower (not owned): has it ended? A dead owner's stream is finished here. */
static void look_at_stream(mcp_park_t *pk)
{
    mcp_store_stream_t state;

    if (mcp_store_stream_get(pk->db, pk->scratch, pk->stream_id, &state) != MCP_STORE_OK) {
        return;
    }
    if (strcmp(state.status, "open") != 0) {
        pk->ended = 1;
    }
    else if (state.lease_expired) {
        mcp_follower_owner_gone(pk->q, pk->scratch, pk->stream_id, &state);
    }
}

/* How long until a run looks around when nothing happens. */
static apr_interval_time_t tick_of(const mcp_park_t *pk)
{
    const mcp_dir_conf_t *conf = pk->q->conf;
    apr_interval_time_t tick = 0;
    int slot;

    for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
        if (half_on(pk, slot) && pk->half[slot]->tick > 0
            && (!tick || pk->half[slot]->tick < tick)) {
            tick = pk->half[slot]->tick;
        }
    }
    if (tick) {
        return tick;
    }
    /* A stream whose half writes through is woken for whatever it must look at (its stores,
     * its end, a DELETE, a lost lease, a restart): it ticks only to keep MCPStreamCloseAfter. */
    if (pk->through && !(conf->stream_close_after > 0 && pk->q->rev && pk->q->rev->priming)) {
        return apr_time_from_sec(3600);
    }
    return PARK_TICK;
}

static void half_tick(mcp_park_t *pk)
{
    int slot;

    for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
        if (half_on(pk, slot) && pk->half[slot]->on_tick(pk->half[slot]->baton)) {
            pk->halves_done |= SLOT_BIT(slot);
            mcp_loop_src_cut_slot(pk->src, slot);
        }
    }
}

/* When the next run is due: the keep-alive, the tick, what was put off. */
static void arm_timer(mcp_park_t *pk, apr_time_t at)
{
    if (pk->retry_read && (!pk->retry_at || pk->retry_at > apr_time_now() + PUT_OFF)) {
        pk->retry_at = apr_time_now() + PUT_OFF;
    }
    if (pk->retry_at && pk->retry_at < at) {
        at = pk->retry_at;
    }
    mcp_loop_src_timer(pk->src, at);
}

/* A stateless call's response cannot be resumed elsewhere: a graceful restart lets it end on its
 * own (the MPM waits for its connection); only a stop ends it. */
static int outlives_restart(const mcp_park_t *pk)
{
    int slot;

    for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
        if (half_on(pk, slot) && pk->half[slot]->outlives_restart) {
            return 1;
        }
    }
    return 0;
}

/* A run of pk. half_ok: it may call the half's hooks (see half_admit); when not, the events
 * for them were put off, and so is the tick. */
static void run_stream(mcp_park_t *pk, unsigned events, int half_ok)
{
    apr_time_t now = apr_time_now(), at;
    const mcp_dir_conf_t *conf = pk->q->conf;
    int pending = 0, ticked = 0, retried = pk->retry_read, n;

    pk->scratch = mcp_loop_src_scratch(pk->src);
    if ((events & MCP_LOOP_STOPPING) && (!outlives_restart(pk) || mcp_loop_stopping(park_loop))
        && end_response(pk, "the server restarts or stops (the client resumes elsewhere)", 1,
                        mcp_loop_stopping(park_loop), half_ok)) {
        return;
    }
    if ((events & MCP_LOOP_HANGUP) && !pk->client_ended) {
        went_away(pk, "it closed the connection");
        if (end_response(pk, "the client went away", 0, 0, half_ok)) {
            return;
        }
    }
    if ((events & MCP_LOOP_XFER) && halves_on(pk)) {
        half_news(pk);
    }
    if (half_ok && now >= pk->next_tick) {
        ticked = 1;
        pk->next_tick = now + tick_of(pk);
        half_tick(pk);
        if (!pk->client_ended && !outlives_restart(pk) && mcp_stream_server_stopping()) {
            if (end_response(pk, "the server restarts or stops (the client resumes elsewhere)",
                             1, 0, half_ok)) {
                return;
            }
        }
        else if (!pk->client_ended && conf->stream_close_after > 0 && pk->q->rev
                 && pk->q->rev->priming && now - pk->started >= conf->stream_close_after) {
            if (end_response(pk, "MCPStreamCloseAfter passed (the client resumes)", 1, 0,
                             half_ok)) {
                return;
            }
        }
        else if (pk->follower_id && now - pk->last_renew >= conf->stream_lease / 3) {
            pk->last_renew = now;
            mcp_follower_renew(pk->q, pk->scratch, pk->stream_id, pk->follower_id);
        }
    }
    if (pk->through && (events & MCP_LOOP_WOKEN) && halves_on(pk)) {
        half_tick(pk);   /* ended elsewhere: a DELETE, a lost lease */
        /* The half looks at the table at most once a second: a wake-up it did not look at
         * yet (a DELETE right after a store) is looked at by the next tick. */
        if (pk->next_tick > now + LOOK_AGAIN) {
            pk->next_tick = now + LOOK_AGAIN;
        }
    }
    if (pk->client_ended) {
        /* Only the half goes on (disconnect is not cancellation), until it is done; or it
         * stops now, having been told to while it could not run. */
        if (half_ok && pk->stop_half) {
            int slot;
            for (slot = 0; slot < MCP_LOOP_SLOTS; slot++) {
                if (half_on(pk, slot) && !pk->half[slot]->outlives_client) {
                    pk->halves_done |= SLOT_BIT(slot);
                    pk->half[slot]->on_stop(pk->half[slot]->baton, pk->stop_half);
                }
            }
        }
        if (!halves_on(pk)) {
            give_back(pk);
            return;
        }
        arm_timer(pk, pk->next_tick);
        return;
    }
    /* Reads only when something may have been stored that was not written from memory (a
     * wake-up, unless the half writes through; the first run; a read cut short by a bound; a
     * read that failed; without a LISTEN connection, every tick), and only while the client
     * takes what it was given: a slow client leaves its events in the table, not in memory. */
    if (!pk->c->data_in_output_filters
        && (pk->through ? pk->behind
            : (events & (MCP_LOOP_WOKEN | MCP_LOOP_WRITABLE)) || pk->more || !pk->runs
              || retried
              || (ticked && !(mcp_child.listener
                              && mcp_listener_connected(mcp_child.listener))))) {
        int reads = 0;

        do {
            n = read_more(pk);
            pending = push(pk);
        } while (n > 0 && pk->more && !pending && !pk->gone && ++reads < READS_PER_RUN);
        if (n > 0 && pk->more && !pending && !pk->gone) {
            mcp_loop_wake(pk->src);   /* more to read: after the others had their turn */
        }
        if (n >= 0 && !pk->more) {
            pk->behind = 0;   /* caught up: what the half stores next is written from memory */
        }
        if (n >= 0 && !pk->more && !pending) {
            if (pk->owned) {
                pk->ended = halves_over(pk);
            }
            else if ((events & MCP_LOOP_WOKEN) || ticked || retried) {
                look_at_stream(pk);
                /* It ended after the read above: what it stored before ending is read now. */
                while (pk->ended && !pending && !pk->gone && read_more(pk) > 0) {
                    pending = push(pk);
                }
            }
        }
    }
    else {
        pending = push(pk);
        if (pk->through && !pending && !pk->behind) {
            pk->ended = halves_over(pk);
        }
    }
    pk->runs++;
    if (pk->gone) {
        if (!end_response(pk, "the client went away", 0, 0, half_ok)) {
            arm_timer(pk, pk->next_tick);
        }
        return;
    }
    if (pk->ended && !pending && !pk->more) {
        end_response(pk, "the stream ended", 0, 0, half_ok);
        return;
    }
    if (!pending && now - pk->last_write >= conf->keepalive_interval) {
        /* Not copied: a copy is a heap bucket's 8 KB block, which a parked connection's
         * allocator maps and unmaps at once (it keeps no freed memory), a TLB shootdown on
         * every CPU for each keep-alive of each idle stream. */
        static const char keepalive[] = ": keepalive\n\n";
        APR_BRIGADE_INSERT_TAIL(pk->out, apr_bucket_immortal_create(keepalive,
                                                                    sizeof(keepalive) - 1,
                                                                    pk->out->bucket_alloc));
        pending = push(pk);
    }
    mcp_loop_src_fd(pk->src, pk->fd, pending);
    at = pk->last_write + conf->keepalive_interval;
    arm_timer(pk, at < pk->next_tick ? at : pk->next_tick);
}

/* A half's run is over: its turn goes to the first stream waiting for one. The wake is given
 * under the mutex, so that a waiting stream that is given back meanwhile (turn_forget) is
 * either out of the queue first or woken while it still exists. */
static void half_release(void)
{
    mcp_park_t *next;

    apr_thread_mutex_lock(turns_mutex);
    halves_running--;
    if ((next = turns_head) != NULL) {
        turns_head = next->turn_next;
        if (!turns_head) {
            turns_tail = NULL;
        }
        next->turn_waiting = 0;
        mcp_loop_wake(next->src);
    }
    apr_thread_mutex_unlock(turns_mutex);
}

/* pk goes: out of the queue for a turn. */
static void turn_forget(mcp_park_t *pk)
{
    mcp_park_t **at, *prev = NULL;

    if (!turns_mutex) {
        return;
    }
    apr_thread_mutex_lock(turns_mutex);
    for (at = &turns_head; pk->turn_waiting && *at; prev = *at, at = &(*at)->turn_next) {
        if (*at == pk) {
            *at = pk->turn_next;
            if (turns_tail == pk) {
                turns_tail = prev;
            }
            pk->turn_waiting = 0;
            break;
        }
    }
    apr_thread_mutex_unlock(turns_mutex);
}

/* May this run call pk's half's hooks? Not while the database is away (they would wait for it
 * on this worker), nor while HALF_WORKERS runs do. Non-zero: admitted; the caller decrements
 * halves_running after the run. */
static int half_admit(mcp_park_t *pk)
{
    apr_thread_mutex_lock(turns_mutex);
    if (halves_running >= HALF_WORKERS) {
        if (!pk->turn_waiting) {   /* woken by the run that frees a turn (half_release) */
            pk->turn_waiting = 1;
            pk->turn_next = NULL;
            if (turns_tail) {
                turns_tail->turn_next = pk;
            }
            else {
                turns_head = pk;
            }
            turns_tail = pk;
        }
        apr_thread_mutex_unlock(turns_mutex);
        return 0;
    }
    halves_running++;
    apr_thread_mutex_unlock(turns_mutex);
    if (mcp_db_away()) {
        half_release();
        pk->retry_at = apr_time_now() + PUT_OFF;
        return 0;
    }
    return 1;
}

static void run(mcp_loop_src_t *src, unsigned events, void *baton)
{
    mcp_park_t *pk = baton;
    int admitted = 0, half_ok = 1;

    (void)src;
    events |= pk->put_off;
    pk->put_off = 0;
    pk->retry_at = 0;
    /* The process exits: the half stops now whatever the database does. */
    if (halves_on(pk) && !((events & MCP_LOOP_STOPPING) && mcp_loop_stopping(park_loop))) {
        half_ok = admitted = half_admit(pk);
        if (!half_ok) {
            pk->put_off = events & (MCP_LOOP_XFER | MCP_LOOP_WOKEN);
            events &= ~(MCP_LOOP_XFER | MCP_LOOP_WOKEN);
        }
    }
    run_stream(pk, events, half_ok);   /* pk may be gone after this */
    if (admitted) {
        half_release();
    }
}

/* ---- the face ----------------------------------------------------------------------------- */

static void wake(void *baton)
{
    mcp_park_t *pk = baton;

    mcp_loop_wake(pk->src);
}

/* Why this httpd cannot park streams, or NULL when it can. */
static const char *unsupported(apr_pool_t *p)
{
    ap_version_t v;
    int async = 0;

    if (ap_mpm_query(AP_MPMQ_IS_ASYNC, &async) != APR_SUCCESS || !async
        || strcmp(ap_show_mpm(), "event") != 0) {
        return apr_psprintf(p, "the %s MPM cannot suspend connections (the event MPM can)",
                            ap_show_mpm());
    }
    ap_get_server_revision(&v);
    if (v.major != 2 || v.minor != 4 || v.patch < TESTED_PATCH_MIN
        || v.patch > TESTED_PATCH_MAX) {
        return apr_psprintf(p, "httpd %d.%d.%d is not a release this was tested on (2.4.%d to "
                            "2.4.%d)", v.major, v.minor, v.patch, TESTED_PATCH_MIN,
                            TESTED_PATCH_MAX);
    }
    return NULL;
}

void mcp_park_child_init(apr_pool_t *pchild, server_rec *s)
{
    const char *why = unsupported(pchild), *err = NULL;

    park_loop = NULL;
    turns_head = turns_tail = NULL;
    halves_running = 0;
    if (!why && apr_thread_mutex_create(&turns_mutex, APR_THREAD_MUTEX_DEFAULT, pchild)
                != APR_SUCCESS) {
        why = "no mutex for the halves' turns";
    }
    if (!why) {
        park_loop = mcp_loop_create(pchild, PARK_WORKERS, &err);
        if (park_loop) {
            mcp_loop_set_stop_check(park_loop, mcp_stream_server_stopping);
        }
        why = park_loop ? NULL : apr_pstrcat(pchild, "the event loop could not start: ", err,
                                             NULL);
    }
    if (why) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "mod_mcp: waiting streams hold their thread "
                     "in this process: %s", why);
    }
    else {
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, "mod_mcp: waiting streams are parked in "
                     "this process's event loop (%d workers) where MCPAsyncStreams is On",
                     PARK_WORKERS);
    }
}

mcp_loop_t *mcp_park_loop(void)
{
    return park_loop;
}

int mcp_park_possible(const mcp_req_t *q)
{
    const request_rec *r = q->r;

    return park_loop && q->conf->async_streams && !mcp_loop_stopping(park_loop)
        && !r->main && !r->prev && !r->connection->master && r->connection->cs
        && r->proto_num < 2000 && ap_get_conn_socket(r->connection)
        && !mcp_stream_server_stopping();
}

mcp_park_t *mcp_park_create(mcp_req_t *q, apr_int64_t stream_id, apr_int64_t cursor,
                            apr_int64_t follower_id, int owned)
{
    request_rec *r = q->r;
    apr_os_sock_t fd;
    mcp_park_t *pk;

    if (!mcp_park_possible(q)
        || apr_os_sock_get(&fd, ap_get_conn_socket(r->connection)) != APR_SUCCESS) {
        return NULL;
    }
    pk = apr_pcalloc(r->pool, sizeof(*pk));
    pk->q = q;
    pk->r = r;
    pk->c = r->connection;
    pk->fd = fd;
    pk->stream_id = stream_id;
    /* What was written through while the request thread waited is past the caller's cursor. */
    if (cursor > pk->cursor) {
        pk->cursor = cursor;
    }
    pk->follower_id = follower_id;
    pk->owned = owned;
    pk->started = pk->last_write = pk->last_renew = apr_time_now();
    pk->next_tick = pk->started + PARK_TICK;
    pk->db = mcp_db_request(r, 0);
    pk->out = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    pk->rest = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    pk->src = mcp_loop_src_add(park_loop, run, pk);
    if (!pk->src) {
        return NULL;
    }
    /* Before the table is read again: whatever is stored from now on wakes it. */
    pk->sub = mcp_router_subscribe_fn(mcp_child.router, stream_id, wake, pk);
    if (!pk->sub) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "stream %" APR_INT64_T_FMT ": no wake-up "
                      "slot to park it; it holds its thread", stream_id);
        mcp_loop_src_release(pk->src);
        return NULL;
    }
    /* The connection's allocator keeps no freed memory from now on (it goes back to the system,
     * instead of waiting on the allocator's free list, up to MaxMemFree, for the next request of
     * a connection that has none); mcp_park_abandon restores MaxMemFree, mcp_park_backend for
     * a half that does not mostly wait. */
    apr_allocator_max_free_set(apr_pool_allocator_get(r->connection->pool), 1);
    return pk;
}

int mcp_park_backend_slot(mcp_park_t *pk, int slot, const mcp_backend_call_t *call,
                          const mcp_park_half_t *half, const char **err)
{
    if (slot < 0 || slot >= MCP_LOOP_SLOTS || (pk->halves & SLOT_BIT(slot))) {
        *err = "no such backend half slot, or one that is taken";
        return -1;
    }
    if (!half->lean) {
        /* A request's answer mostly comes while this thread waits, and the connection then
         * serves the client's next request: its allocator keeps freed memory, as for any
         * request, until mcp_park_go. (With an allocator that gives every freed block back,
         * each pool and bucket block of the call was an mmap and a munmap: ~10 % of httpd's
         * CPU per call.) */
        apr_allocator_max_free_set(apr_pool_allocator_get(pk->c->pool), ap_max_mem_free);
    }
    if (mcp_loop_src_start_slot(pk->src, slot, mcp_child.backends, call,
                                (apr_size_t)pk->q->conf->stream_queue_bytes, half->lean, err)
        != 0) {
        return -1;
    }
    pk->half[slot] = half;
    pk->halves |= SLOT_BIT(slot);
    return 0;
}

int mcp_park_backend(mcp_park_t *pk, const mcp_backend_call_t *call,
                     const mcp_park_half_t *half, const char **err)
{
    return mcp_park_backend_slot(pk, 0, call, half, err);
}

void mcp_park_write_through(mcp_park_t *pk, mcp_stream_t *st)
{
    pk->through = 1;
    pk->stateless = st->stateless;
    st->on_stored = half_stored;
    st->on_stored_baton = pk;
}

/* On the request thread, before the stream is parked: what the half wrote through goes out now,
 * blocking as any handler's write, while a half is still on (nothing is held while the backend
 * is awaited). Once every half is done the caller ends the response (or parks a stream that
 * ends at its first run): what they wrote last is passed without a flush and goes out with the
 * response's end, in one write (a call's answer event and the last chunk: one wake-up of the
 * client fewer). */
static void pass_here(mcp_park_t *pk)
{
    if (APR_BRIGADE_EMPTY(pk->out) || pk->gone) {
        return;
    }
    if (halves_on(pk)) {
        APR_BRIGADE_INSERT_TAIL(pk->out, apr_bucket_flush_create(pk->c->bucket_alloc));
    }
    if (ap_pass_brigade(pk->r->output_filters, pk->out) != APR_SUCCESS || pk->c->aborted) {
        went_away(pk, "a write failed");
    }
    apr_brigade_cleanup(pk->out);
    pk->last_write = apr_time_now();
}

int mcp_park_wait(mcp_park_t *pk, int (*done)(void *baton), apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout, next_tick = apr_time_now() + PARK_WAIT_TICK;
    void *baton = NULL;
    int slot;

    for (slot = MCP_LOOP_SLOTS - 1; slot >= 0; slot--) {
        if (pk->halves & SLOT_BIT(slot)) {
            baton = pk->half[slot]->baton;   /* the lowest slot's */
        }
    }
    /* This thread's scratch pool while it waits (a parked stream's runs have their worker's). */
    apr_pool_create(&pk->scratch, pk->r->pool);
    while (halves_on(pk) && !done(baton)) {
        apr_time_t now = apr_time_now(), until;
        unsigned events;

        if (now >= deadline) {
            break;
        }
        /* The half looks around meanwhile (its stream ended elsewhere: a DELETE). */
        if (now >= next_tick) {
            next_tick = now + PARK_WAIT_TICK;
            half_tick(pk);
            continue;
        }
        until = deadline < next_tick ? deadline : next_tick;
        events = mcp_loop_src_wait(pk->src, until - now);
        if (events & MCP_LOOP_STOPPING) {
            break;
        }
        apr_pool_clear(pk->scratch);
        half_news(pk);
        pass_here(pk);
    }
    apr_pool_destroy(pk->scratch);
    pk->scratch = NULL;
    return halves_over(pk);
}

apr_pool_t *mcp_park_scratch(const mcp_park_t *pk)
{
    return pk->scratch;
}

int mcp_park_gone(const mcp_park_t *pk)
{
    return pk->gone || pk->c->aborted;
}

int mcp_park_go(mcp_park_t *pk, apr_int64_t cursor)
{
    conn_rec *c = pk->c;
    ap_filter_t *f, *next;

    /* What was written through while the request thread waited is past the caller's cursor. */
    if (cursor > pk->cursor) {
        pk->cursor = cursor;
    }
    /* The connection ends with the stream; and nothing is read from it while parked. */
    c->keepalive = AP_CONN_CLOSE;
    apr_allocator_max_free_set(apr_pool_allocator_get(c->pool), 1);   /* as mcp_park_create */
    for (f = c->input_filters; f; f = next) {
        next = f->next;
        if (strcasecmp(f->frec->name, "reqtimeout") == 0) {
            ap_remove_input_filter(f);
        }
    }
    ap_set_module_config(c->conn_config, &mcp_module, pk);
    mcp_status_parked(1);
    ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, pk->r, "stream %" APR_INT64_T_FMT ": parked after "
                  "seq %" APR_INT64_T_FMT, pk->stream_id, pk->cursor);
    return SUSPENDED;
}

void mcp_park_abandon(mcp_park_t *pk)
{
    turn_forget(pk);
    apr_allocator_max_free_set(apr_pool_allocator_get(pk->c->pool), ap_max_mem_free);
    mcp_router_unsubscribe(pk->sub);
    pk->sub = NULL;
    pk->halves_done = pk->halves;
    mcp_loop_src_release(pk->src);
}

void mcp_park_suspended(conn_rec *c)
{
    mcp_park_t *pk = ap_get_module_config(c->conn_config, &mcp_module);
    apr_time_t at;

    if (!pk) {
        return;
    }
    ap_set_module_config(c->conn_config, &mcp_module, NULL);
    if (c->aborted) {
        /* The event MPM closes an aborted connection instead of suspending it (and still runs
         * this hook): the stream must not outlive it. mcp_park_go refuses such a connection;
         * this is the belt to those braces. */
        ap_log_cerror(APLOG_MARK, APLOG_WARNING, 0, c, "stream %" APR_INT64_T_FMT ": its "
                      "connection was aborted before it was parked; it is not", pk->stream_id);
        mcp_park_abandon(pk);
        mcp_status_parked(-1);
        return;
    }
    ap_log_cerror(APLOG_MARK, APLOG_TRACE1, 0, c, "stream %" APR_INT64_T_FMT ": the MPM let go "
                  "of its connection; the loop takes it", pk->stream_id);
    mcp_loop_src_fd(pk->src, pk->fd, 0);
    pk->next_tick = apr_time_now() + tick_of(pk);
    at = pk->last_write + pk->q->conf->keepalive_interval;
    mcp_loop_src_timer(pk->src, at < pk->next_tick ? at : pk->next_tick);
    /* The MPM still writes a little of its own after this hook returns: the first run waits for
     * the loop's next look. */
    mcp_loop_src_go(pk->src, apr_time_now());
}

