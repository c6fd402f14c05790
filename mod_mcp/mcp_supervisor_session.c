/* mcp_supervisor_session.c — sessions (docs/stdio.md, "The supervisor's HTTP API"): a session
 * is started by initialize (limits, its process, the wait for the answer), takes the requests
 * of its id (written to the process, an exchange opened for those that wait for answers),
 * routes what its process writes (mcp_route) to the connections of its open exchanges, and
 * dies once: its process exited, was ended (DELETE, idle, a line over max_line, a failed start,
 * the supervisor stopping) or closed its stdout. Dying answers every request still unanswered
 * with an error carrying its id, ends every stream, hands the process to its ending
 * (mcp_supervisor_proc.c), and leaves the id known for 10 minutes (404 with why).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "mcp_supervisor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

static sv_session_t *live, *tomb_head, *tomb_tail;

static const int json_plain = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;

static void session_die(sv_session_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- counts of live sessions (limits) ------------------------------------------------------ */

typedef struct count_t {
    sv_hnode_t node;
    long       n;
    char       key[];
} count_t;

static long count_get(const char *key)
{
    sv_hnode_t *n = sv_hash_get(&sv.counts, key);

    return n ? ((count_t *)n)->n : 0;
}

static void count_add(const char *key, long delta)
{
    count_t *c = (count_t *)sv_hash_get(&sv.counts, key);

    if (!c) {
        size_t len = strlen(key);
        c = sv_xcalloc(1, sizeof(*c) + len + 1);
        memcpy(c->key, key, len + 1);
        sv_hash_put(&sv.counts, &c->node, c->key);
    }
    c->n += delta;
    if (c->n <= 0) {
        sv_hash_del(&sv.counts, &c->node);
        free(c);
    }
}

static void counts_change(sv_session_t *s, long delta)
{
    sv.live += delta;
    count_add(s->server->name, delta);
    if (s->principal) {
        char *key = sv_xprintf("%s\n%s", s->server->name, s->principal);
        count_add(key, delta);
        free(key);
    }
}

/* ---- what the process writes ------------------------------------------------------------- */

static void init_answered(sv_session_t *s, sv_conn_t *c, json_object *msg, const char *text,
                          size_t len);
static void stream_finish(sv_session_t *s, sv_conn_t *c);

static char *canonical(json_object *v)
{
    return sv_xstrdup(json_object_to_json_string_ext(v, json_plain));
}

/* One JSON-RPC message of the process to where it belongs. text: the message as written, or
 * NULL to serialise it (an element of a batch). */
static void route_one(sv_session_t *s, json_object *msg, const char *text, size_t len)
{
    json_object *method = NULL, *id = NULL, *params, *token = NULL, *v;
    char *id_text = NULL, *token_text = NULL;
    mcp_route_dest_t dest;
    size_t dropped;
    int has_method, is_response;

    has_method = json_object_object_get_ex(msg, "method", &method)
                 && json_object_is_type(method, json_type_string);
    is_response = !has_method && json_object_object_get_ex(msg, "id", &id)
                  && (json_object_object_get_ex(msg, "result", &v)
                      || json_object_object_get_ex(msg, "error", &v));
    if (!has_method && !is_response) {
        const char *t = json_object_to_json_string_ext(msg, json_plain);
        sv_proc_noise(s->proc, "a stdout message that is not JSON-RPC", t, strlen(t));
        return;
    }
    if (is_response)
        id_text = canonical(id);
    if (has_method && json_object_object_get_ex(msg, "params", &params)
        && json_object_is_type(params, json_type_object)
        && json_object_object_get_ex(params, "progressToken", &token))
        token_text = canonical(token);
    /* A CR is whitespace to JSON but a line end to SSE: such a message is serialised again. */
    if (!text || memchr(text, '\r', len)) {
        text = json_object_to_json_string_ext(msg, json_plain);
        len = strlen(text);
    }
    if (mcp_route_message(s->route, id_text, token_text, text, len, &dest) != MCP_ROUTE_OK)
        sv_log(SV_ERR, "%s: out of memory: a message dropped", s->proc->label);
    if ((dropped = mcp_route_dropped(s->route)) != 0)
        sv_log(SV_WARN, "%s: %zu message(s) for no open stream dropped from the queue (over %d "
               "messages or %u bytes)", s->proc->label, dropped, SV_QUEUE_MESSAGES,
               SV_QUEUE_BYTES);
    if (dest.exchange) {
        sv_conn_t *c = dest.owner;
        if (c->xkind == SV_X_INIT) {
            init_answered(s, c, msg, text, len);
        }
        else {
            sv_http_sse_event(c, text, len);
            if (dest.last)
                stream_finish(s, c);
            else if (sv_buf_pending(&c->out) > SV_PAUSE_BYTES && s->proc)
                sv_proc_pause(s->proc, 1);
        }
    }
    free(id_text);
    free(token_text);
}

/* One line of the process's stdout: JSON-RPC messages (one, or a batch split) to where they
 * belong. Non-zero when the session is dead (nothing more is to be read for it). */
int sv_session_line(sv_session_t *s, const char *line, size_t len)
{
    sv_proc_t *pr = s->proc;
    json_tokener *tok;
    json_object *msg;

    if (s->state == SV_DEAD)
        return 1;
    if (!len)
        return 0;
    tok = json_tokener_new_ex(SV_JSON_DEPTH);
    msg = tok ? json_tokener_parse_ex(tok, line, (int)len) : NULL;
    if (msg && json_tokener_get_parse_end(tok) != len) {
        json_object_put(msg);
        msg = NULL;
    }
    json_tokener_free(tok);
    if (json_object_is_type(msg, json_type_object)) {
        route_one(s, msg, line, len);
    }
    else if (json_object_is_type(msg, json_type_array)) {
        size_t i, n = json_object_array_length(msg);
        for (i = 0; i < n && s->state != SV_DEAD; i++) {
            json_object *e = json_object_array_get_idx(msg, i);
            if (json_object_is_type(e, json_type_object))
                route_one(s, e, NULL, 0);
            else
                sv_proc_noise(pr, "a stdout batch element that is not an object", line, len);
        }
    }
    else {
        sv_proc_noise(pr, "a stdout line that is not JSON-RPC", line, len);
    }
    json_object_put(msg);
    return s->state == SV_DEAD;
}

/* The process died or was ended (mcp_supervisor_proc.c): the session dies with it. */
void sv_session_died(sv_session_t *s, const char *what)
{
    session_die(s, "%s", what);
}

/* ---- sessions ------------------------------------------------------------------------------ */

static void session_free(void *p)
{
    sv_session_t *s = p;

    sv_server_release(s->server);
    mcp_route_destroy(s->route);
    free(s->id);
    free(s->principal);
    free(s->ended);
    free(s);
}

sv_session_t *sv_session_find(const char *hex)
{
    return (sv_session_t *)sv_hash_get(&sv.sessions, hex);
}

static void attach(sv_session_t *s, sv_conn_t *c, mcp_route_exchange_t *x, int kind)
{
    c->session = s;
    c->x = x;
    c->xkind = kind;
    c->sess_next = s->conns;
    s->conns = c;
}

void sv_session_drained(sv_conn_t *c)
{
    sv_session_t *s = c->session;

    if (s && s->proc && s->proc->paused)
        sv_proc_pause(s->proc, 0);
}

static void unlink_conn(sv_session_t *s, sv_conn_t *c)
{
    sv_conn_t **p;

    for (p = &s->conns; *p; p = &(*p)->sess_next) {
        if (*p == c) {
            *p = c->sess_next;
            break;
        }
    }
    if (s->route && c->x)
        mcp_route_close(s->route, c->x);
    if (s->proc && s->proc->paused)
        sv_proc_pause(s->proc, 0);           /* the stream that was behind may be this one */
    c->session = NULL;
    c->x = NULL;
    c->sess_next = NULL;
    s->last_activity = sv_now();
}

static void stream_finish(sv_session_t *s, sv_conn_t *c)
{
    unlink_conn(s, c);
    c->xkind = SV_X_NONE;
    sv_http_sse_end(c);
}

typedef struct fail_ctx_t {
    sv_session_t *s;
    const char   *what;
    const char   *last;
} fail_ctx_t;

static void fail_one(void *baton, void *owner, mcp_route_exchange_t *x, const char *id)
{
    fail_ctx_t *f = baton;
    sv_conn_t *c = owner;
    json_object *o, *e;
    char *msg;

    (void)x;
    if (c->xkind == SV_X_INIT) {
        sv_conn_t **p;
        for (p = &f->s->conns; *p; p = &(*p)->sess_next) {
            if (*p == c) {
                *p = c->sess_next;
                break;
            }
        }
        c->session = NULL;
        c->x = NULL;                          /* the route is dropped whole after this */
        c->xkind = SV_X_NONE;
        sv_http_error(c, 502, -32000, NULL, "the stdio server %s before answering initialize%s%s",
                      f->what, *f->last ? "; its last stderr line: " : "", f->last);
        return;
    }
    msg = sv_xprintf("the stdio server %s before answering%s%s", f->what,
                     *f->last ? "; its last stderr line: " : "", f->last);
    o = json_object_new_object();
    e = json_object_new_object();
    json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(o, "id", json_tokener_parse(id));
    json_object_object_add(e, "code", json_object_new_int(-32603));
    json_object_object_add(e, "message", json_object_new_string(msg));
    json_object_object_add(o, "error", e);
    {
        const char *t = json_object_to_json_string_ext(o, json_plain);
        sv_http_sse_event(c, t, strlen(t));
    }
    json_object_put(o);
    free(msg);
}

static void session_die(sv_session_t *s, const char *fmt, ...)
{
    fail_ctx_t f;
    va_list ap;
    char what[300];
    int was_starting = s->state == SV_STARTING;
    sv_proc_t *pr = s->proc;

    if (s->state == SV_DEAD)
        return;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    s->state = SV_DEAD;
    s->ended = sv_xstrdup(what);
    sv_log(was_starting ? SV_WARN : SV_INFO, "%s: session ended: the stdio server %s%s%s",
           pr ? pr->label : s->tag, what, pr && *pr->last_stderr ? "; its last stderr line: " : "",
           pr ? pr->last_stderr : "");
    f.s = s;
    f.what = what;
    f.last = pr ? pr->last_stderr : "";
    mcp_route_fail_all(s->route, fail_one, &f);
    while (s->conns) {
        sv_conn_t *c = s->conns;
        unlink_conn(s, c);
        if (c->xkind == SV_X_STREAM) {
            c->xkind = SV_X_NONE;
            sv_http_sse_end(c);
        }
    }
    mcp_route_destroy(s->route);
    s->route = NULL;
    sv_timer_cancel(&s->start_timer);
    sv_timer_cancel(&s->idle_timer);
    counts_change(s, -1);
    if (s->live_prev)
        s->live_prev->live_next = s->live_next;
    else
        live = s->live_next;
    if (s->live_next)
        s->live_next->live_prev = s->live_prev;
    s->live_prev = s->live_next = NULL;
    if (pr) {
        pr->session = NULL;
        s->proc = NULL;
        sv_proc_end(pr);
    }
    if (was_starting) {
        /* Its id was never given out: nobody will ask why it ended. */
        sv_hash_del(&sv.sessions, &s->node);
        sv_defer(session_free, s);
        return;
    }
    s->dead_at = sv_now();
    if (tomb_tail)
        tomb_tail->tomb_next = s;
    else
        tomb_head = s;
    tomb_tail = s;
}

void sv_session_sweep(int all)
{
    uint64_t now = sv_now();

    while (tomb_head && (all || now - tomb_head->dead_at >= SV_TOMBSTONE_MS)) {
        sv_session_t *s = tomb_head;
        tomb_head = s->tomb_next;
        if (!tomb_head)
            tomb_tail = NULL;
        sv_hash_del(&sv.sessions, &s->node);
        session_free(s);
    }
}

static void idle_check(sv_timer_t *t)
{
    sv_session_t *s = t->data;
    uint64_t idle = s->server->idle_timeout_ms, now = sv_now();

    if (mcp_route_exchanges(s->route) > 0) {
        sv_timer_set(&s->idle_timer, idle, idle_check, s);
        return;
    }
    if (now - s->last_activity >= idle) {
        session_die(s, "was ended: idle for %g s", (double)idle / 1000);
        return;
    }
    sv_timer_set(&s->idle_timer, idle - (now - s->last_activity), idle_check, s);
}

static void drain_queue(sv_session_t *s, sv_conn_t *c)
{
    size_t len;
    char *m;

    while ((m = mcp_route_queue_pop(s->route, &len)) != NULL) {
        sv_http_sse_event(c, m, len);
        free(m);
    }
}

static void init_answered(sv_session_t *s, sv_conn_t *c, json_object *msg, const char *text,
                          size_t len)
{
    json_object *err;

    sv_timer_cancel(&s->start_timer);
    unlink_conn(s, c);
    c->xkind = SV_X_NONE;
    if (json_object_object_get_ex(msg, "error", &err)) {
        /* No session: the client gets the server's error, and nothing to send later. */
        sv_http_json(c, text, len, NULL);
        session_die(s, "was ended: it answered initialize with an error");
        return;
    }
    s->state = SV_RUNNING;
    s->last_activity = sv_now();
    if (s->server->idle_timeout_ms)
        sv_timer_set(&s->idle_timer, s->server->idle_timeout_ms, idle_check, s);
    sv_log(SV_INFO, "%s: session started (process %d)", s->proc->label, (int)s->proc->p.pid);
    sv_http_json(c, text, len, s->id);
}

static void start_timeout(sv_timer_t *t)
{
    sv_session_t *s = t->data;
    sv_conn_t *c = s->conns;
    double secs = (double)s->server->start_timeout_ms / 1000;

    if (c) {
        unlink_conn(s, c);
        c->xkind = SV_X_NONE;
        sv_http_error(c, 504, -32000, NULL, "the stdio server %s did not answer initialize "
                      "within %g s: it was ended", s->server->name, secs);
    }
    session_die(s, "was ended: it did not answer initialize within %g s", secs);
}

/* The line a message is written to the process as: JSON without newlines, then one. */
static const char *as_line(json_object *msg, size_t *len)
{
    const char *t = json_object_to_json_string_ext(msg, json_plain);

    *len = strlen(t);
    return t;
}

static int write_line(sv_proc_t *pr, json_object *msg)
{
    size_t len;
    const char *t = as_line(msg, &len);

    if (sv_proc_write(pr, t, len) < 0)
        return -1;
    return sv_proc_write(pr, "\n", 1);
}

void sv_session_initialize(sv_conn_t *c, sv_server_t *server, json_object *msg)
{
    const char *principal = mcp_reqhead_field(c->head, "MCP-Supervisor-Principal");
    const char *tag = mcp_reqhead_field(c->head, "MCP-Gateway-Session-Tag");
    unsigned char rnd[16];
    char err[512], *id_text;
    mcp_route_exchange_t *x;
    sv_session_t *s;
    json_object *id;
    const char *dup;
    int i;

    if (principal && !*principal)
        principal = NULL;
    if (sv.config->max_sessions > 0 && sv.live >= sv.config->max_sessions) {
        sv_http_error(c, 429, -32000, "Retry-After: 1\r\n", "the host's limit of %ld stdio "
                      "server processes is reached", sv.config->max_sessions);
        return;
    }
    if (server->max_sessions > 0 && count_get(server->name) >= server->max_sessions) {
        sv_http_error(c, 429, -32000, "Retry-After: 1\r\n", "the limit of %ld processes of "
                      "stdio server %s is reached", server->max_sessions, server->name);
        return;
    }
    if (principal && server->max_per_principal > 0) {
        char *key = sv_xprintf("%s\n%s", server->name, principal);
        long n = count_get(key);
        free(key);
        if (n >= server->max_per_principal) {
            sv_http_error(c, 429, -32000, "Retry-After: 1\r\n", "the limit of %ld processes "
                          "of stdio server %s for principal %.100s is reached",
                          server->max_per_principal, server->name, principal);
            return;
        }
    }
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        sv_http_error(c, 500, -32000, NULL, "getrandom: %s", strerror(errno));
        return;
    }
    s = sv_xcalloc(1, sizeof(*s));
    for (i = 0; i < 16; i++)
        snprintf(s->hex + 2 * i, 3, "%02x", rnd[i]);
    s->id = sv_xprintf("%s@%s/stdio/%s", s->hex, sv.advertise, server->name);
    memcpy(s->tag, s->hex, 8);
    if (tag && strlen(tag) == 8 && strspn(tag, "0123456789abcdef") == 8)
        memcpy(s->tag, tag, 8);
    s->server = sv_server_hold(server);
    s->principal = principal ? sv_xstrdup(principal) : NULL;
    s->state = SV_STARTING;
    s->route = mcp_route_create(SV_QUEUE_MESSAGES, SV_QUEUE_BYTES);
    if (!s->route) {
        session_free(s);
        sv_http_error(c, 500, -32000, NULL, "out of memory");
        return;
    }
    s->proc = sv_proc_start(s, err, sizeof(err));
    if (!s->proc) {
        sv_log(SV_ERR, "%s/%s: the stdio server could not be started: %s", server->name,
               s->tag, err);
        session_free(s);
        sv_http_error(c, 502, -32000, NULL, "the stdio server %s could not be started: %s",
                      server->name, err);
        return;
    }
    sv_hash_put(&sv.sessions, &s->node, s->hex);
    s->live_next = live;
    if (live)
        live->live_prev = s;
    live = s;
    counts_change(s, 1);
    json_object_object_get_ex(msg, "id", &id);
    id_text = canonical(id);
    mcp_route_open(s->route, MCP_ROUTE_INIT, c, (const char *const *)&id_text, 1, NULL, 0, &x,
                   &dup);
    free(id_text);
    attach(s, c, x, SV_X_INIT);
    sv_timer_set(&s->start_timer, server->start_timeout_ms, start_timeout, s);
    sv_log(SV_DEBUG, "%s: process %d started", s->proc->label, (int)s->proc->p.pid);
    write_line(s->proc, msg);
}

/* The ids and progress tokens of the requests in a body (one message or a batch). 400 and -1
 * when the body is neither an object nor a non-empty array of objects. */
static int collect(sv_conn_t *c, json_object *msg, char ***ids, size_t *nids, char ***tokens,
                   size_t *ntokens)
{
    size_t n = 1, i;
    int batch = json_object_is_type(msg, json_type_array);

    if (batch)
        n = json_object_array_length(msg);
    else if (!json_object_is_type(msg, json_type_object))
        n = 0;
    if (n == 0) {
        sv_http_error(c, 400, -32600, NULL, "the body must be a JSON-RPC message or a "
                      "non-empty batch of them");
        return -1;
    }
    *ids = sv_xcalloc(n, sizeof(char *));
    *tokens = sv_xcalloc(n, sizeof(char *));
    *nids = *ntokens = 0;
    for (i = 0; i < n; i++) {
        json_object *m = batch ? json_object_array_get_idx(msg, i) : msg, *method, *id, *params,
                    *meta, *token;
        if (!json_object_is_type(m, json_type_object)) {
            sv_http_error(c, 400, -32600, NULL, "batch element %zu is not a JSON object", i);
            return -1;
        }
        if (!json_object_object_get_ex(m, "method", &method)
            || !json_object_object_get_ex(m, "id", &id))
            continue;                         /* a notification or a response */
        (*ids)[(*nids)++] = canonical(id);
        if (json_object_object_get_ex(m, "params", &params)
            && json_object_object_get_ex(params, "_meta", &meta)
            && json_object_object_get_ex(meta, "progressToken", &token))
            (*tokens)[(*ntokens)++] = canonical(token);
    }
    return 0;
}

/* The requests the body cancels (notifications/cancelled): their exchanges stop waiting. */
static void cancel_requests(sv_session_t *s, json_object *msg)
{
    size_t n = json_object_is_type(msg, json_type_array) ? json_object_array_length(msg) : 1, i;

    for (i = 0; i < n && s->route; i++) {
        json_object *m = json_object_is_type(msg, json_type_array)
                         ? json_object_array_get_idx(msg, i) : msg, *method, *params, *id;
        mcp_route_dest_t dest;
        char *text;
        if (!json_object_object_get_ex(m, "method", &method)
            || !json_object_is_type(method, json_type_string)
            || strcmp(json_object_get_string(method), "notifications/cancelled") != 0
            || !json_object_object_get_ex(m, "params", &params)
            || !json_object_object_get_ex(params, "requestId", &id))
            continue;
        text = canonical(id);
        mcp_route_cancel(s->route, text, &dest);
        if (dest.exchange) {
            sv_conn_t *c = dest.owner;
            sv_log(SV_DEBUG, "%s: request %s cancelled by the client", s->proc->label, text);
            if (dest.last && c->xkind == SV_X_STREAM)
                stream_finish(s, c);
        }
        free(text);
    }
}

static void strs_free(char **v, size_t n)
{
    size_t i;

    for (i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void sv_session_post(sv_conn_t *c, sv_session_t *s, json_object *msg)
{
    char **ids = NULL, **tokens = NULL;
    size_t nids = 0, ntokens = 0, len, queued;
    mcp_route_exchange_t *x;
    const char *dup = NULL;
    int rc;

    s->last_activity = sv_now();
    if (collect(c, msg, &ids, &nids, &tokens, &ntokens) < 0)
        goto done;
    as_line(msg, &len);
    queued = sv_buf_pending(&s->proc->inq);
    if (queued && queued + len + 1 > SV_WRITE_QUEUE_MAX) {
        sv_http_error(c, 503, -32000, "Retry-After: 1\r\n", "the stdio server is not reading "
                      "its stdin: %zu bytes wait to be written to it already (at most %u)",
                      queued, SV_WRITE_QUEUE_MAX);
        goto done;
    }
    if (!nids) {
        write_line(s->proc, msg);
        sv_http_empty(c, 202);
        cancel_requests(s, msg);
        goto done;
    }
    rc = mcp_route_open(s->route, MCP_ROUTE_POST, c, (const char *const *)ids, nids,
                        (const char *const *)tokens, ntokens, &x, &dup);
    if (rc == MCP_ROUTE_DUPLICATE) {
        sv_http_error(c, 409, -32600, NULL, "the request id %.100s is already in flight in "
                      "this session", dup);
        goto done;
    }
    if (rc != MCP_ROUTE_OK) {
        sv_http_error(c, 500, -32000, NULL, "out of memory");
        goto done;
    }
    attach(s, c, x, SV_X_STREAM);
    sv_http_sse_start(c);
    drain_queue(s, c);
    write_line(s->proc, msg);
    cancel_requests(s, msg);
done:
    strs_free(ids, nids);
    strs_free(tokens, ntokens);
}

void sv_session_get(sv_conn_t *c, sv_session_t *s)
{
    mcp_route_exchange_t *x;
    const char *dup;

    s->last_activity = sv_now();
    if (mcp_route_open(s->route, MCP_ROUTE_GET, c, NULL, 0, NULL, 0, &x, &dup) != MCP_ROUTE_OK) {
        sv_http_error(c, 409, -32000, NULL, "a GET stream is open already for this session");
        return;
    }
    attach(s, c, x, SV_X_STREAM);
    sv_http_sse_start(c);
    drain_queue(s, c);
}

void sv_session_delete(sv_conn_t *c, sv_session_t *s)
{
    session_die(s, "was ended by DELETE");
    sv_http_empty(c, 204);
}

void sv_session_detach(sv_conn_t *c)
{
    sv_session_t *s = c->session;
    int kind = c->xkind;

    if (!s)
        return;
    unlink_conn(s, c);
    c->xkind = SV_X_NONE;
    if (kind == SV_X_INIT && s->state == SV_STARTING)
        session_die(s, "was ended: the client of its initialize went away");
}

void sv_session_end_all(void)
{
    while (live)
        session_die(live, "was ended: the supervisor is stopping");
}
