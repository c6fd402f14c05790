/* mod_mcp_federation_listen — a federated session's standalone GET stream: every member's GET
 * stream as one stored stream (mod_mcp_federation.h), parked on the event loop (one transfer
 * slot per member) where streams can be, else with its thread. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>

#include "mcp_id.h"
#include "mcp_sse.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_federation_private.h"
#include "mod_mcp_park.h"

APLOG_USE_MODULE(mcp);

/* ---- GET: the members' streams as one ------------------------------------------------------- */

/* One message of member m's GET stream, in the client's names, queued on st (parsed in a pool of
 * parent's, gone afterwards). Non-zero once st is broken. */
static int store_message(member_t *m, mcp_stream_t *st, apr_pool_t *parent, const char *json,
                         apr_size_t len)
{
    apr_pool_t *p;
    json_object *obj;
    mcp_req_member_t rm;
    mcp_req_t mq;

    apr_pool_create(&p, parent);
    if ((obj = mcp_jsonrpc_parse_value(p, json, len))) {
        memset(&rm, 0, sizeof(rm));
        rm.fed = &m->mc->fed;
        mq = m->q;
        mq.member = &rm;
        mcp_federation_outbound(&mq, p, obj, &json, &len);
        mcp_stream_add(st, json, len);
    }
    apr_pool_destroy(p);
    return st->broken;
}

static int listen_message(void *baton, const char *json, apr_size_t len)
{
    member_t *m = baton;

    return store_message(m, m->st, m->q.r->pool, json, len);
}

static int listen_answer(void *baton)
{
    member_t *m = baton;

    if (m->x.sse && m->st->mode == MCP_STREAM_UNDECIDED) {
        mcp_stream_start_sse(m->st, m->q.rev->priming ? 0 : -1);
    }
    m->listening = m->x.sse != NULL;
    return 0;
}

static int listen_chunk(void *baton)
{
    member_t *m = baton;

    return mcp_stream_commit(m->st) || m->st->client_gone;
}

static int listen_tick(void *baton)
{
    member_t *m = baton;

    if (mcp_stream_should_hand_over(m->st)) {
        mcp_stream_end_early(m->st);
    }
    return mcp_stream_tick(m->st) || m->st->client_gone;
}

/* ---- GET, parked: the members' GETs on the event loop ---------------------------------------- */

/* How often, at most, a parked federated stream that was woken looks whether someone else ended
 * it (a DELETE, a lease taken over), as the relay's standalone stream does. */
#define LISTEN_WATCH_INTERVAL apr_time_from_sec(1)

typedef struct listen_t listen_t;

/* One member's backend half: its GET in the park's transfer slot. */
typedef struct listen_half_t {
    listen_t        *l;
    member_t        *m;
    int              slot;
    mcp_park_half_t  half;
    int              over;       /* its GET ended, or was stopped                        */
} listen_half_t;

/* A federated standalone stream parked: one backend half per open member, every one storing on
 * the one stream st. A parked stream runs on one loop worker at a time and its run hands each
 * half its news in turn, so the halves never store at once (several sources storing on one
 * stream would). The stream ends when the last half is over: every member's GET ended, or the
 * client went (or a graceful restart: it resumes with Last-Event-ID). */
struct listen_t {
    mcp_req_t        *q;
    mcp_stream_t     *st;
    mcp_park_t       *pk;
    int               n;          /* halves started                                         */
    int               live;       /* ... not over yet                                       */
    int               detached;   /* a member answered with SSE: the client's response is
                                   * SSE, written by the parked stream from now on          */
    int               finished;   /* st was finished                                        */
    mcp_router_sub_t *watch;      /* wake-ups for st (NULL: none to be had)                 */
    apr_time_t        last_watch;
    mcp_store_t      *watch_db;   /* one try per look                                       */
    int               ended_elsewhere;
};

/* The stream ends (the last half is over, or the request thread gives up on it). */
static void listen_finish(listen_t *l, const char *why)
{
    if (l->finished) {
        return;
    }
    l->finished = 1;
    mcp_router_unsubscribe(l->watch);
    l->watch = NULL;
    mcp_stream_finish(l->st, "closed");
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, l->q->r, "standalone stream %" APR_INT64_T_FMT
                  " (federation, parked, %d member stream(s)) ended: %s", l->st->id, l->n, why);
}

/* A member's GET is over (why: how); the last one ends the stream, once the client's response
 * is the parked stream's (before, the request thread decides what the client is told). */
static void half_over(listen_half_t *h, const char *why)
{
    listen_t *l = h->l;

    if (h->over) {
        return;
    }
    h->over = 1;
    l->live--;
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, l->q->r, "standalone stream %" APR_INT64_T_FMT
                  " (federation, parked): member %s's stream ended: %s", l->st->id,
                  h->m->mc->fed.name, why ? why : "?");
    if (l->live == 0 && l->detached) {
        listen_finish(l, l->ended_elsewhere ? "its session ended" : why);
    }
}

/* Has someone else ended the stream (DELETE, a lease taken over)? Looked at after a wake-up, at
 * most once per LISTEN_WATCH_INTERVAL (the stream's own stores wake it too). */
static int listen_ended_elsewhere(listen_t *l)
{
    apr_time_t now = apr_time_now();
    mcp_store_stream_t state;
    apr_pool_t *p;

    if (l->ended_elsewhere || !l->watch || now - l->last_watch < LISTEN_WATCH_INTERVAL
        || !mcp_router_wait(l->watch, 0)) {
        return l->ended_elsewhere;
    }
    l->last_watch = now;
    apr_pool_create(&p, mcp_park_scratch(l->pk) ? mcp_park_scratch(l->pk) : l->q->r->pool);
    if (mcp_store_stream_get(l->watch_db, p, l->st->id, &state) == MCP_STORE_OK
        && strcmp(state.status, "open") != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, l->q->r, "stream %" APR_INT64_T_FMT ": ended "
                      "elsewhere (%s: its session was terminated, or its lease taken over); the "
                      "members' streams are released", l->st->id, state.status);
        l->ended_elsewhere = 1;
        l->st->broken = 1;   /* nothing more may be stored on it */
    }
    apr_pool_destroy(p);
    return l->ended_elsewhere;
}

/* The exchange's hooks (baton: the half), run by the park: on a loop worker, or on the request
 * thread until the stream is parked. */
static int parked_answer(void *baton)
{
    listen_half_t *h = baton;
    listen_t *l = h->l;

    if (!h->m->x.sse) {
        return 0;   /* no stream from this member (405, 409, ...): its answer is read to its end */
    }
    if (l->st->mode == MCP_STREAM_UNDECIDED) {
        mcp_stream_start_sse(l->st, l->q->rev->priming ? 0 : -1);
    }
    if (!l->detached) {
        /* The SSE headers (and the priming event) are out, or the replay's (resumed): from now
         * on the parked stream writes what the members' halves store. */
        mcp_stream_detach(l->st);
        mcp_park_write_through(l->pk, l->st);
        l->detached = 1;
    }
    return 0;
}

static int parked_message(void *baton, const char *json, apr_size_t len)
{
    listen_half_t *h = baton;
    listen_t *l = h->l;

    return store_message(h->m, l->st, mcp_park_scratch(l->pk) ? mcp_park_scratch(l->pk)
                                                              : l->q->r->pool, json, len);
}

static int parked_chunk(void *baton)
{
    listen_half_t *h = baton;

    /* Comments without end (more than two messages' worth without one): this member floods. */
    if (mcp_sse_parser_idle_bytes(h->m->x.sse)
        > 2 * (apr_uint64_t)h->l->q->conf->max_message_size) {
        return 1;
    }
    return mcp_stream_commit(h->l->st);
}

/* The park's hooks (baton: the half). */
static int listen_half_news(void *baton, const mcp_loop_news_t *news)
{
    listen_half_t *h = baton;
    mcp_backend_status_t status;
    const char *err;
    int cut;

    if (!mcp_exchange_feed_news(&h->m->x, news, &cut)) {
        return 0;
    }
    err = news->err;
    status = mcp_exchange_end(&h->m->x, cut ? MCP_BACKEND_ABORTED : news->status, &err);
    half_over(h, cut ? (h->l->st->broken ? "storing failed" : "it flooded the stream")
                 : status != MCP_BACKEND_OK ? err
                 : h->m->x.sse ? "the member ended it"
                 : apr_psprintf(h->l->q->r->pool, "HTTP %ld, no stream",
                                h->m->x.response.status));
    return 1;
}

static int listen_half_tick(void *baton)
{
    listen_half_t *h = baton;
    listen_t *l = h->l;

    if (listen_ended_elsewhere(l) || mcp_stream_tick(l->st)) {
        half_over(h, l->ended_elsewhere ? "its session ended"
                                        : "its lease was taken over, or storing failed");
        return 1;
    }
    return 0;
}

static void listen_half_stop(void *baton, const char *why)
{
    half_over(baton, why);
}

static int listen_detached(void *baton)
{
    return ((listen_half_t *)baton)->l->detached;
}

/* The federated stream parked from its start: a half per open member (st opened, its rows in
 * f). SUSPENDED once parked, OK when the client went before it could be, DECLINED when it
 * cannot be parked (the caller goes on with its thread); any other value is the handler's
 * answer (no member opened a stream). */
static int listen_parked(fed_t *f, mcp_req_t *q, mcp_stream_t *st, int resumed)
{
    request_rec *r = q->r;
    listen_t *l;
    listen_half_t *hs;
    int i, k = 0, not_allowed = 0;

    for (i = 0; i < f->n; i++) {
        k += mcp_federated_open(&f->m[i]);
    }
    if (k == 0 || k > MCP_LOOP_SLOTS) {
        return DECLINED;
    }
    l = apr_pcalloc(r->pool, sizeof(*l));
    l->q = q;
    l->st = st;
    if (!(l->pk = mcp_park_create(q, st->id, 0, 0, 1))) {
        return DECLINED;
    }
    hs = apr_pcalloc(r->pool, sizeof(*hs) * (apr_size_t)k);
    for (i = 0; i < f->n; i++) {
        member_t *m = &f->m[i];
        listen_half_t *h = &hs[l->n];
        mcp_backend_call_t call;
        const char *err = NULL;

        if (!mcp_federated_open(m)) {
            continue;
        }
        h->l = l;
        h->m = m;
        h->slot = l->n;
        m->q.session = q->session;
        m->q.rev = q->rev;
        m->st = st;
        mcp_exchange_init(&m->x, &m->q, h);
        m->x.on_message = parked_message;
        m->x.on_answer = parked_answer;
        m->x.after_chunk = parked_chunk;
        memset(&call, 0, sizeof(call));
        call.method = "GET";
        call.session_id = m->row.backend_session_id;
        call.protocol_version = m->row.protocol_version;
        mcp_exchange_call_defaults(&m->x, &call);
        h->half.on_news = listen_half_news;
        h->half.on_tick = listen_half_tick;
        h->half.on_stop = listen_half_stop;
        h->half.baton = h;
        h->half.lean = 1;   /* a standalone stream mostly waits */
        mcp_exchange_begin(&m->x);
        if (mcp_park_backend_slot(l->pk, h->slot, &call, &h->half, &err) != 0) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "federation: member %s's stream "
                          "could not start on the event loop: %s", m->mc->fed.name, err);
            continue;
        }
        l->n++;
        l->live++;
    }
    if (l->n == 0) {
        mcp_park_abandon(l->pk);
        return DECLINED;
    }
    l->watch = mcp_router_subscribe(mcp_child.router, st->id);
    l->last_watch = apr_time_now();
    l->watch_db = mcp_db_request(r, 0);
    /* Parked once a member's SSE headers are out (the others' answers come to the parked
     * stream); until then, or until every member answered otherwise, this thread waits. */
    mcp_park_wait(l->pk, listen_detached, q->conf->backend_timeout);
    if (l->detached && !mcp_park_gone(l->pk)) {
        if (l->live == 0) {
            listen_finish(l, "every member's stream ended");
        }
        return mcp_park_go(l->pk, 0);
    }
    mcp_park_abandon(l->pk);   /* (the members' GETs still running are cut) */
    listen_finish(l, l->detached ? "the client went away" : "no member's stream opened");
    if (l->detached) {
        st->client_gone = 1;
        return OK;
    }
    if (resumed) {
        return DONE;
    }
    if (l->live > 0) {
        return mcp_req_error(q, HTTP_GATEWAY_TIME_OUT, MCP_JSONRPC_BACKEND_ERROR, "Gateway "
                             "Timeout: no member of this endpoint opened its standalone stream "
                             "within MCPBackendTimeout (%" APR_TIME_T_FMT " s)",
                             apr_time_sec(q->conf->backend_timeout));
    }
    for (i = 0; i < l->n; i++) {
        not_allowed += hs[i].m->x.response.status == HTTP_METHOD_NOT_ALLOWED;
    }
    if (not_allowed == l->n) {
        apr_table_setn(r->headers_out, "Allow", "POST, DELETE");
        return mcp_req_error(q, HTTP_METHOD_NOT_ALLOWED, MCP_JSONRPC_SERVER_ERROR,
                             "Method Not Allowed: no member of this endpoint offers a standalone "
                             "stream (GET)");
    }
    return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR, "Bad Gateway: no member "
                         "of this endpoint opened its standalone stream");
}

int mcp_federation_listen(mcp_req_t *handler_q, int resumed)
{
    /* A parked stream outlives the handler's frame, where its request lives. */
    mcp_req_t *q = apr_pmemdup(handler_q->r->pool, handler_q, sizeof(*handler_q));
    request_rec *r = q->r;
    apr_pool_t *p = r->pool;
    mcp_store_refusal_t refused = MCP_STORE_ADMITTED;
    mcp_store_limits_t limits;
    mcp_store_status_t stored;
    mcp_exchange_t **xs;
    mcp_backend_call_t *calls;
    mcp_backend_status_t *sts;
    const char **errs;
    apr_int64_t stream_id = 0;
    mcp_stream_t *st = apr_pcalloc(p, sizeof(*st));
    int *want, i, k = 0, not_allowed = 0, parked;
    fed_t f;

    mcp_federated_init(&f, q);
    if ((stored = mcp_federated_load(&f, q->session->id)) != MCP_STORE_OK) {
        return resumed ? DONE : mcp_req_store_failed(q, stored);
    }
    want = apr_pcalloc(p, sizeof(int) * (apr_size_t)f.n);
    for (i = 0; i < f.n; i++) {
        want[i] = 1;
    }
    mcp_federated_reopen(&f, want);
    mcp_req_stream_limits(q, &limits);
    stored = mcp_store_stream_open_standalone_admitted(mcp_req_db(q), p, q->session,
                                                       mcp_req_trace_id(r), mcp_child.owner,
                                                       mcp_req_lease_secs(q), &limits,
                                                       &stream_id, &refused);
    if (stored == MCP_STORE_LIMIT) {
        return resumed ? DONE : mcp_req_refused(q, refused);
    }
    if (stored == MCP_STORE_CONFLICT) {
        return resumed ? DONE : mcp_req_error(q, HTTP_CONFLICT, MCP_JSONRPC_SERVER_ERROR,
                                              "Conflict: this session already has an open "
                                              "standalone stream");
    }
    if (stored != MCP_STORE_OK) {
        return resumed ? DONE : mcp_req_store_failed(q, stored);
    }
    mcp_req_note_stream(r, stream_id);
    q->raw = NULL;
    q->raw_len = 0;
    mcp_stream_init(st, q, stream_id, 1);
    mcp_stream_own(st);
    if (resumed) {
        st->mode = MCP_STREAM_SSE;   /* the replay's SSE response goes on */
    }
    /* Without a thread while it waits, where streams can be parked. */
    if ((parked = listen_parked(&f, q, st, resumed)) != DECLINED) {
        return parked == SUSPENDED ? SUSPENDED : parked == OK ? DONE : parked;
    }

    xs = apr_pcalloc(p, sizeof(*xs) * (apr_size_t)f.n);
    calls = apr_pcalloc(p, sizeof(*calls) * (apr_size_t)f.n);
    sts = apr_pcalloc(p, sizeof(*sts) * (apr_size_t)f.n);
    errs = apr_pcalloc(p, sizeof(*errs) * (apr_size_t)f.n);
    for (i = 0; i < f.n; i++) {
        member_t *m = &f.m[i];

        if (!mcp_federated_open(m)) {
            continue;
        }
        m->q.session = q->session;
        m->q.rev = q->rev;
        m->st = st;
        mcp_exchange_init(&m->x, &m->q, m);
        m->x.on_message = listen_message;
        m->x.on_answer = listen_answer;
        m->x.after_chunk = listen_chunk;
        m->x.on_tick = listen_tick;
        calls[k].method = "GET";
        calls[k].session_id = m->row.backend_session_id;
        calls[k].protocol_version = m->row.protocol_version;
        xs[k++] = &m->x;
    }
    mcp_exchange_perform_all(xs, calls, k, sts, errs);
    for (i = 0; i < f.n; i++) {
        not_allowed += mcp_federated_open(&f.m[i]) && f.m[i].x.response.status == HTTP_METHOD_NOT_ALLOWED;
    }
    mcp_stream_finish(st, "closed");
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "standalone stream %" APR_INT64_T_FMT
                  " (federation, %d member stream(s)) ended%s", stream_id, k,
                  st->client_gone ? ": the client went away" : "");
    if (st->mode == MCP_STREAM_SSE || resumed) {
        return DONE;
    }
    if (k > 0 && not_allowed == k) {
        apr_table_setn(r->headers_out, "Allow", "POST, DELETE");
        return mcp_req_error(q, HTTP_METHOD_NOT_ALLOWED, MCP_JSONRPC_SERVER_ERROR,
                             "Method Not Allowed: no member of this endpoint offers a standalone "
                             "stream (GET)");
    }
    return mcp_req_error(q, HTTP_BAD_GATEWAY, MCP_JSONRPC_BACKEND_ERROR, "Bad Gateway: no member "
                         "of this endpoint opened its standalone stream");
}
