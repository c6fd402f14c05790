/* mcp_supervisor_http.c — the supervisor's HTTP/1.1 server side (docs/stdio.md, "The
 * supervisor's HTTP API"): the listener, keep-alive connections, request heads
 * (mcp_reqhead), Content-Length bodies, which request goes where, and the responses: a
 * JSON-RPC error, a JSON body, an empty one, or a chunked SSE stream.
 *
 * The clients are the gateway's libcurl (no pipelining, "Expect:" empty) and the tests. A
 * request refused before its body is read (403, 405, 411, 413, a bad head) is answered with
 * "Connection: close", so that no unread body has to be skipped. A connection that is killed
 * (its peer went away, it wrote too much) is closed at the end of the loop turn: until then
 * writes to it do nothing, and its exchange stays open in the session's route, so that a route
 * walk in progress is never changed under it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "mcp_supervisor.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { SV_C_HEAD, SV_C_BODY, SV_C_BUSY, SV_C_LINGER };

#define SV_LINGER_MS 2000

static sv_watch_t listen_w = {.fd = -1};
static sv_conn_t *all_conns, *todo;

static void conn_process(sv_conn_t *c);

/* ---- output --------------------------------------------------------------------------------- */

static void set_todo(sv_conn_t *c)
{
    if (c->todo)
        return;
    c->todo = 1;
    c->todo_next = todo;
    todo = c;
}

void sv_http_kill(sv_conn_t *c)
{
    if (c->dead)
        return;
    c->dead = 1;
    sv_watch_mod(&c->w, 0);
    set_todo(c);
}

static void linger_over(sv_timer_t *t)
{
    sv_http_kill(t->data);
}

/* Closing a connection whose request body was not read: a close() with unread bytes sends an
 * RST, which can reach the client before it has read the answer. So the sending side is shut
 * down first, and what comes is read and dropped until the client closes (or 2 s pass). */
static void linger(sv_conn_t *c)
{
    c->state = SV_C_LINGER;
    if (shutdown(c->w.fd, SHUT_WR) < 0) {
        sv_http_kill(c);
        return;
    }
    sv_timer_set(&c->keepalive, SV_LINGER_MS, linger_over, c);
}

static void flush(sv_conn_t *c)
{
    while (sv_buf_pending(&c->out)) {
        ssize_t n = send(c->w.fd, c->out.data + c->out.off, sv_buf_pending(&c->out),
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            sv_http_kill(c);
            return;
        }
        sv_buf_consume(&c->out, (size_t)n);
    }
    if (sv_buf_pending(&c->out)) {
        if (sv_buf_pending(&c->out) > SV_CONN_OUT_MAX) {
            sv_log(SV_WARN, "a connection has not read %zu bytes: closed",
                   sv_buf_pending(&c->out));
            sv_http_kill(c);
            return;
        }
        sv_watch_mod(&c->w, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
        if (sv_buf_pending(&c->out) < SV_RESUME_BYTES)
            sv_session_drained(c);
        return;
    }
    sv_session_drained(c);
    sv_watch_mod(&c->w, EPOLLIN | EPOLLRDHUP);
    if (c->out.cap > 65536)
        sv_buf_free(&c->out);                /* an idle connection keeps no large buffer */
    if (c->close_after && c->finished && c->state != SV_C_LINGER)
        linger(c);
}

static void put(sv_conn_t *c, const void *p, size_t n)
{
    if (c->dead)
        return;
    sv_buf_add(&c->out, p, n);
}

/* The response is written: the connection takes the next request (or closes). */
static void complete(sv_conn_t *c)
{
    c->finished = 1;
    if (c->close_after && c->state != SV_C_LINGER)
        c->state = SV_C_BUSY;               /* nothing more is parsed */
    flush(c);
    if (c->dead || c->close_after)
        return;
    mcp_reqhead_reset(c->head);
    sv_buf_free(&c->body);
    c->body_need = 0;
    c->state = SV_C_HEAD;
    if (sv_buf_pending(&c->in))
        set_todo(c);
}

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default:  return "Unknown";
    }
}

static void head_out(sv_conn_t *c, int status, const char *type, const char *extra)
{
    sv_buf_t h = {0};

    sv_buf_printf(&h, "HTTP/1.1 %d %s\r\n", status, reason(status));
    if (type)
        sv_buf_printf(&h, "Content-Type: %s\r\n", type);
    if (extra)
        sv_buf_printf(&h, "%s", extra);
    if (c->close_after)
        sv_buf_printf(&h, "Connection: close\r\n");
    sv_buf_add(&h, "\r\n", 2);
    put(c, h.data, h.len);
    sv_buf_free(&h);
}

void sv_http_error(sv_conn_t *c, int status, int code, const char *extra_headers,
                   const char *fmt, ...)
{
    json_object *o = json_object_new_object(), *e = json_object_new_object();
    char msg[1024], len[64];
    const char *body;
    sv_buf_t h = {0};
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(o, "id", NULL);
    json_object_object_add(e, "code", json_object_new_int(code));
    json_object_object_add(e, "message", json_object_new_string(msg));
    json_object_object_add(o, "error", e);
    body = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    snprintf(len, sizeof(len), "Content-Length: %zu\r\n", strlen(body));
    sv_buf_printf(&h, "%s%s", len, extra_headers ? extra_headers : "");
    sv_log(status >= 500 ? SV_WARN : SV_INFO, "%s %s: %d %s", mcp_reqhead_method(c->head)
           ? mcp_reqhead_method(c->head) : "-", mcp_reqhead_target(c->head)
           ? mcp_reqhead_target(c->head) : "-", status, msg);
    head_out(c, status, "application/json", h.data);
    put(c, body, strlen(body));
    sv_buf_free(&h);
    json_object_put(o);
    complete(c);
}

void sv_http_json(sv_conn_t *c, const char *body, size_t len, const char *session_id)
{
    sv_buf_t h = {0};

    sv_buf_printf(&h, "Content-Length: %zu\r\n", len);
    if (session_id)
        sv_buf_printf(&h, "Mcp-Session-Id: %s\r\n", session_id);
    head_out(c, 200, "application/json", h.data);
    put(c, body, len);
    sv_buf_free(&h);
    complete(c);
}

void sv_http_empty(sv_conn_t *c, int status)
{
    head_out(c, status, NULL, status == 204 ? NULL : "Content-Length: 0\r\n");
    complete(c);
}

static void keepalive_fire(sv_timer_t *t)
{
    sv_conn_t *c = t->data;
    static const char comment[] = "3\r\n:\n\n\r\n";

    if (!c->sse || c->dead)
        return;
    put(c, comment, sizeof(comment) - 1);
    flush(c);
    sv_timer_set(&c->keepalive, SV_KEEPALIVE_MS, keepalive_fire, c);
}

void sv_http_sse_start(sv_conn_t *c)
{
    head_out(c, 200, "text/event-stream",
             "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n");
    c->sse = 1;
    flush(c);
    sv_timer_set(&c->keepalive, SV_KEEPALIVE_MS, keepalive_fire, c);
}

void sv_http_sse_event(sv_conn_t *c, const char *data, size_t len)
{
    char size[32];
    int n;

    if (!c->sse || c->dead)
        return;
    n = snprintf(size, sizeof(size), "%zx\r\ndata: ", len + 8);
    put(c, size, (size_t)n);
    put(c, data, len);
    put(c, "\n\n\r\n", 4);
    flush(c);
}

void sv_http_sse_end(sv_conn_t *c)
{
    if (!c->sse)
        return;
    c->sse = 0;
    sv_timer_cancel(&c->keepalive);
    put(c, "0\r\n\r\n", 5);
    complete(c);
}

/* ---- requests ------------------------------------------------------------------------------ */

/* Compares the whole of both (no early exit on the first difference). */
static int same_secret(const char *given, const char *secret)
{
    size_t gl = strlen(given), sl = strlen(secret), i;
    unsigned char diff = gl != sl;

    for (i = 0; i < sl; i++)
        diff |= (unsigned char)(secret[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

/* The server name of a target "/stdio/<name>[?query]" into name; -1 when it is not one. */
static int target_name(const char *target, char *name, size_t len)
{
    size_t n;

    if (strncmp(target, "/stdio/", 7) != 0)
        return -1;
    target += 7;
    n = strcspn(target, "?#");
    if (n == 0 || n >= len || memchr(target, '/', n))
        return -1;
    memcpy(name, target, n);
    name[n] = '\0';
    return 0;
}

static json_object *parse_body(sv_conn_t *c)
{
    json_tokener *tok = json_tokener_new_ex(SV_JSON_DEPTH);
    json_object *o;

    if (!tok)
        return NULL;
    o = json_tokener_parse_ex(tok, c->body.data ? c->body.data : "", (int)c->body.len);
    if (o && json_tokener_get_parse_end(tok) != c->body.len) {
        /* Only whitespace may follow the document. */
        size_t i;
        for (i = json_tokener_get_parse_end(tok); i < c->body.len; i++) {
            if (!strchr(" \t\r\n", c->body.data[i])) {
                json_object_put(o);
                o = NULL;
                break;
            }
        }
    }
    if (!o) {
        enum json_tokener_error e = json_tokener_get_error(tok);
        sv_http_error(c, 400, -32700, NULL, "the request body is not one JSON document: %s",
                      e == json_tokener_continue ? "it ends too early"
                      : e == json_tokener_success ? "text after the document"
                                                  : json_tokener_error_desc(e));
    }
    json_tokener_free(tok);
    return o;
}

/* The 32 hex digits before the '@' of a session id header; -1 when not that form. */
static int session_hex(const char *sid, char hex[33])
{
    int i;

    for (i = 0; i < 32; i++) {
        if (!strchr("0123456789abcdef", sid[i]) || !sid[i])
            return -1;
        hex[i] = sid[i];
    }
    hex[32] = '\0';
    return sid[32] == '@' || sid[32] == '\0' ? 0 : -1;
}

static void dispatch_session(sv_conn_t *c, const char *method, const char *name, const char *sid)
{
    sv_session_t *s = NULL;
    char hex[33];
    json_object *msg;

    if (session_hex(sid, hex) == 0)
        s = sv_session_find(hex);
    if (!s || s->state == SV_STARTING) {
        sv_http_error(c, 404, -32001, NULL, "Session not found");
        return;
    }
    if (strcmp(s->server->name, name) != 0) {
        sv_http_error(c, 404, -32001, NULL, "Session not found: this session belongs to the "
                      "stdio server %s, not %s", s->server->name, name);
        return;
    }
    if (s->state == SV_DEAD) {
        sv_http_error(c, 404, -32001, NULL, "Session not found: the stdio server of this "
                      "session %s", s->ended);
        return;
    }
    if (!strcmp(method, "GET")) {
        sv_session_get(c, s);
    }
    else if (!strcmp(method, "DELETE")) {
        sv_session_delete(c, s);
    }
    else if ((msg = parse_body(c)) != NULL) {
        sv_session_post(c, s, msg);
        json_object_put(msg);
    }
}

static int is_initialize(json_object *msg)
{
    json_object *m, *id;

    return json_object_is_type(msg, json_type_object)
           && json_object_object_get_ex(msg, "method", &m)
           && json_object_is_type(m, json_type_string)
           && !strcmp(json_object_get_string(m), "initialize")
           && json_object_object_get_ex(msg, "id", &id)
           && (json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int));
}

static void dispatch(sv_conn_t *c)
{
    const char *method = mcp_reqhead_method(c->head);
    const char *sid = mcp_reqhead_field(c->head, "Mcp-Session-Id");
    sv_server_t *server;
    json_object *msg;
    char name[128];

    c->state = SV_C_BUSY;
    target_name(mcp_reqhead_target(c->head), name, sizeof(name));  /* checked by head_done */
    if (sv.stopping) {
        c->close_after = 1;
        sv_http_error(c, 503, -32000, NULL, "the stdio supervisor is stopping");
        return;
    }
    if (sid) {
        dispatch_session(c, method, name, sid);
        return;
    }
    server = sv_config_server(sv.config, name);
    if (!server) {
        sv_http_error(c, 404, -32000, NULL, "no stdio server named %s", name);
        return;
    }
    if (strcmp(method, "POST") != 0) {
        sv_http_error(c, 400, -32000, NULL, "a %s needs the Mcp-Session-Id header", method);
        return;
    }
    if (!(msg = parse_body(c)))
        return;
    if (!is_initialize(msg)) {
        sv_http_error(c, 400, -32600, NULL, "without Mcp-Session-Id, the body must be one "
                      "JSON-RPC request whose method is initialize");
    }
    else {
        sv_session_initialize(c, server, msg);
    }
    json_object_put(msg);
}

/* A refusal before the body is read: the connection closes after it. */
#define REFUSE(c, status, extra, ...)                                                        \
    do {                                                                                     \
        (c)->close_after = 1;                                                                \
        sv_http_error((c), (status), -32000, (extra), __VA_ARGS__);                          \
        return;                                                                              \
    } while (0)

static void head_done(sv_conn_t *c)
{
    const char *method = mcp_reqhead_method(c->head), *key;
    long long cl = mcp_reqhead_content_length(c->head);
    char name[128];

    c->state = SV_C_BUSY;
    c->finished = 0;
    c->keep_alive = mcp_reqhead_keep_alive(c->head);
    if (!c->keep_alive)
        c->close_after = 1;
    key = mcp_reqhead_field(c->head, "MCP-Supervisor-Key");
    if (!sv.config || !key || !same_secret(key, sv.config->secret))
        REFUSE(c, 403, NULL, "%s", key ? "the MCP-Supervisor-Key is wrong"
                                       : "the MCP-Supervisor-Key header is missing");
    if (target_name(mcp_reqhead_target(c->head), name, sizeof(name)) < 0)
        REFUSE(c, 404, NULL, "no such path: the supervisor serves /stdio/<server name>");
    if (strcmp(method, "POST") && strcmp(method, "GET") && strcmp(method, "DELETE"))
        REFUSE(c, 405, "Allow: GET, POST, DELETE\r\n", "the method %s is not allowed here",
               method);
    if (mcp_reqhead_has_transfer_encoding(c->head))
        REFUSE(c, 411, NULL, "request bodies with Transfer-Encoding are not accepted: send "
               "Content-Length");
    if (!strcmp(method, "POST") && cl < 0)
        REFUSE(c, 411, NULL, "a POST needs Content-Length");
    if (cl > SV_MAX_BODY)
        REFUSE(c, 413, NULL, "the request body of %lld bytes is over the limit of %lld bytes",
               cl, SV_MAX_BODY);
    c->body_need = cl > 0 ? cl : 0;
    if (c->body_need && mcp_reqhead_expects_continue(c->head)) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        put(c, cont, sizeof(cont) - 1);
        flush(c);
    }
    if (c->body_need) {
        c->state = SV_C_BODY;
        return;
    }
    dispatch(c);
}

static void conn_process(sv_conn_t *c)
{
    while (!c->dead) {
        if (c->state == SV_C_HEAD) {
            size_t used = 0;
            int rc;
            if (!sv_buf_pending(&c->in))
                return;
            rc = mcp_reqhead_feed(c->head, c->in.data + c->in.off, sv_buf_pending(&c->in),
                                  &used);
            sv_buf_consume(&c->in, used);
            if (rc == MCP_REQHEAD_MORE)
                return;
            if (rc == MCP_REQHEAD_ERROR) {
                c->state = SV_C_BUSY;
                c->close_after = 1;
                sv_http_error(c, mcp_reqhead_status(c->head), -32000, NULL, "%s",
                              mcp_reqhead_error(c->head));
                return;
            }
            head_done(c);
        }
        else if (c->state == SV_C_BODY) {
            size_t want = (size_t)c->body_need - c->body.len, have = sv_buf_pending(&c->in);
            size_t take = have < want ? have : want;
            sv_buf_add(&c->body, c->in.data + c->in.off, take);
            sv_buf_consume(&c->in, take);
            if (c->body.len < (size_t)c->body_need)
                return;
            dispatch(c);
        }
        else {
            return;
        }
    }
}

static void conn_ready(sv_watch_t *w, uint32_t events)
{
    sv_conn_t *c = w->data;
    char buf[SV_CHUNK];
    ssize_t n;

    if (c->dead)
        return;
    if (events & EPOLLOUT)
        flush(c);
    if (c->dead || !(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    n = recv(w->fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        sv_http_kill(c);                     /* the peer is gone: so is its exchange */
        return;
    }
    if (c->state == SV_C_LINGER)
        return;                              /* dropped: the answer is out, the end near */
    sv_buf_add(&c->in, buf, (size_t)n);
    if (c->state == SV_C_BUSY) {
        /* Bytes while a response is going on: a pipelined request, kept for later, within
         * bounds (libcurl does not pipeline). */
        if (sv_buf_pending(&c->in) > SV_MAX_HEAD + SV_CHUNK)
            sv_http_kill(c);
        return;
    }
    conn_process(c);
}

static void conn_free(sv_conn_t *c)
{
    if (c->session)
        sv_session_detach(c);
    sv_timer_cancel(&c->keepalive);
    sv_watch_del(&c->w);
    if (c->all_prev)
        c->all_prev->all_next = c->all_next;
    else
        all_conns = c->all_next;
    if (c->all_next)
        c->all_next->all_prev = c->all_prev;
    mcp_reqhead_destroy(c->head);
    sv_buf_free(&c->in);
    sv_buf_free(&c->out);
    sv_buf_free(&c->body);
    sv_defer(free, c);
}

void sv_http_turn(void)
{
    while (todo) {
        sv_conn_t *c = todo;
        todo = c->todo_next;
        c->todo = 0;
        if (c->dead) {
            int fd = c->w.fd;
            conn_free(c);
            close(fd);
        }
        else {
            conn_process(c);
        }
    }
}

/* ---- the listener -------------------------------------------------------------------------- */

static void listen_ready(sv_watch_t *w, uint32_t events)
{
    int i;

    (void)events;
    for (i = 0; i < 64; i++) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
        sv_conn_t *c;
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                sv_log(SV_ERR, "accept: %s", strerror(errno));
            return;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c = sv_xcalloc(1, sizeof(*c));
        c->head = mcp_reqhead_create(SV_MAX_HEAD, SV_MAX_FIELDS);
        if (!c->head) {
            free(c);
            close(fd);
            return;
        }
        c->all_next = all_conns;
        if (all_conns)
            all_conns->all_prev = c;
        all_conns = c;
        sv_watch_add(&c->w, fd, EPOLLIN | EPOLLRDHUP, conn_ready, c);
    }
}

void sv_http_listen_start(int fd)
{
    sv_watch_add(&listen_w, fd, EPOLLIN, listen_ready, NULL);
}

void sv_http_listen_stop(void)
{
    int fd = listen_w.fd;

    if (fd < 0)
        return;
    sv_watch_del(&listen_w);
    close(fd);
}

void sv_http_close_all(void)
{
    sv_conn_t *c;

    for (c = all_conns; c; c = c->all_next) {
        flush(c);                           /* what can go now (errors of ended sessions) */
        sv_http_kill(c);
    }
    sv_http_turn();
}
