/*
 * mcp_test_backend.c - the MCP server that mod_mcp forwards to in the
 * integration tests and in the demo.
 *
 * It speaks the MCP Streamable HTTP transport on one endpoint, /mcp:
 *   POST    JSON-RPC messages, answered as JSON or as an SSE stream,
 *   GET     the session's standalone SSE stream,
 *   DELETE  ends the session.
 * The tools exist to exercise a gateway: echo/add for plain calls, slow and
 * sample for streamed answers and server->client requests, notify for the
 * standalone stream, and session_info to report what really arrived here.
 * Besides them it serves what the official MCP conformance suite
 * (@modelcontextprotocol/conformance, "server" scenarios) asks of a server:
 * the test_* tools, prompts, resources and a resource template, completion,
 * logging levels and resource subscriptions.  Tools, prompts, resources and
 * completions are tables; each entry has a small handler.
 *
 * libmicrohttpd runs in epoll mode with a small fixed pool of threads
 * (--threads, default 4), so nothing may block in its callbacks.  A stream or
 * request with nothing to send yet is *parked*: its connection is suspended
 * (MHD_suspend_connection) and its waiter is put in a timer heap (when its
 * next event is due) and in an epoll set that watches its socket for a
 * hang-up.  Whatever could give it something to do (a queued message, an
 * answer, a cancellation, a DELETE, shutdown) resumes it; so do the timer
 * thread, at its deadline, and a hang-up.  MHD then calls the content reader
 * (or the access handler) again, which looks at the state, produces what is
 * due or parks again.  Threads: main, the timer thread and the MHD pool,
 * whatever the number of connections.  All shared state is guarded by one
 * mutex (g_lock); parking and waking happen under it, so no wake-up is lost.
 *
 * With --stdio it serves one session on stdin/stdout instead, the MCP stdio
 * transport, through the same dispatch and the same stream producers (see
 * "The stdio transport" below); issue 23's supervisor of stdio servers is
 * tested against it, with the faults of its --stdio-* options.
 */
#define _GNU_SOURCE /* POLLRDHUP, strcasestr */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <json-c/json.h>
#include <microhttpd.h>

/* ------------------------------------------------------------------------
 * Limits.  Everything a client can make us keep is bounded.
 * ------------------------------------------------------------------------ */
#define ENDPOINT          "/mcp"
#define BROADCAST_PATH    "/broadcast" /* POST: a notification on every open GET stream */
#define MAX_BODY          (4u * 1024 * 1024)
#define MAX_SESSIONS      100000
#define SESSION_BUCKETS   65536  /* the session table: a hash of the id */
#define MAX_QUEUE         100    /* messages waiting for a standalone stream */
#define MAX_CANCELLED     1000   /* requestIds kept for session_info */
#define MAX_METHOD_KEYS   1000   /* distinct notification methods counted */
#define JSON_MAX_DEPTH    64
#define SLOW_MAX_COUNT    1000
#define SLOW_MAX_INTERVAL 10000
#define SAMPLE_TIMEOUT_MS 30000  /* how long a tool waits for the client's answer */
#define DIALOG_MAX_ASKS   4      /* server->client requests in one round of a dialog fixture */
#define DIALOG_MAX_ROUNDS 4
#define MAX_SUBSCRIPTIONS 100    /* resources/subscribe URIs per session */
#define MAX_COMPLETIONS   100    /* values in one completion/complete answer */
#define RETRY_MS          1000   /* retry: hint of test_reconnection's priming event */
#define RECONNECT_DELAY_MS 1500  /* test_reconnection's default delay_ms */
#define KEEPALIVE_MS      15000
#define SESSION_ID_LEN    32
#define JSON_FLAGS        (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)
#define NELEM(a)          (sizeof(a) / sizeof((a)[0]))
#define STR_(x)           #x
#define STR(x)            STR_(x)   /* a macro's value as a string literal */

static const char *const init_versions[] = {"2025-03-26", "2025-06-18", "2025-11-25"};
#define LATEST_VERSION "2025-11-25"
/* MCP-Protocol-Version header values accepted; anything else is a 400. */
static const char *const header_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18",
                                              "2025-11-25"};

/* ------------------------------------------------------------------------
 * Configuration and shared state.
 * ------------------------------------------------------------------------ */
enum mode { MODE_AUTO, MODE_JSON, MODE_SSE };

static struct {
    enum mode mode;
    int stateless;
    int quiet;
    int stdio;       /* --stdio: one session on stdin/stdout (see "The stdio transport") */
} cfg;

/* --stdio's faults, for the tests of a gateway's process supervisor. */
static struct {
    long crash_after;    /* exit(3) on reading message N, unanswered; 0: never */
    int exit_at_start;   /* exit 1 at once */
    int garbage;         /* a line that is not JSON before each answer */
    size_t huge_line;    /* the first tools/call's answer is a line of this many bytes */
    int no_read;         /* never read stdin */
    int stderr_flood;    /* write stderr lines as fast as possible */
} faults;
#define GARBAGE_LINE "this line is not JSON (mcp-test-backend --stdio-garbage)\n"

struct session;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct session *g_sessions;  /* stateful sessions, newest first */
static struct session *g_buckets[SESSION_BUCKETS]; /* the same, by id */
static unsigned g_nsessions;
static struct session *g_anon;      /* --stateless: one pseudo-session for all */
static int g_stopping;              /* shutdown: every wait gives up */
static unsigned long g_next_stream; /* numbers SSE streams (event ids), atomic */
static unsigned long g_next_srv;    /* numbers our server->client requests, atomic */
static int g_threads = 4;           /* MHD's thread pool (--threads) */
static size_t g_page_size;          /* tools/list pages of this many tools (--page-size); 0: all */

/* ------------------------------------------------------------------------
 * Small utilities.  Allocation failure in a test server is fatal.
 * ------------------------------------------------------------------------ */
static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fputs("mcp-test-backend: out of memory\n", stderr);
        abort();
    }
    return p;
}

static void *xcalloc(size_t n)
{
    return memset(xrealloc(NULL, n), 0, n);
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xrealloc(NULL, n), s, n);
}

static char *xvasprintf(const char *fmt, va_list ap)
{
    char *s;
    if (vasprintf(&s, fmt, ap) < 0) {
        fputs("mcp-test-backend: out of memory\n", stderr);
        abort();
    }
    return s;
}

static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    s = xvasprintf(fmt, ap);
    va_end(ap);
    return s;
}

struct buf {
    char *data;
    size_t len, cap;
};

static void buf_add(struct buf *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->data = xrealloc(b->data, cap);
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_adds(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

static void buf_free(struct buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------------
 * Parking.  A connection with nothing to send is suspended in MHD and its
 * waiter is listed here (g_lock held throughout): in a min-heap by wake_at,
 * and, by its socket, in g_epfd, which the timer thread watches for a
 * hang-up (EPOLLRDHUP).  wake_locked() takes it out of both and resumes it.
 * ------------------------------------------------------------------------ */
struct waiter {
    struct MHD_Connection *conn; /* NULL: a --stdio thread, waiting on g_wake */
    int fd;             /* the client socket, or -1 */
    int parked;
    int64_t wake_at;    /* when the timer thread resumes it */
    size_t heap_idx;
    uint32_t seq;       /* which parking: stale epoll events are ignored */
};

static struct waiter **g_heap;
static size_t g_heap_n, g_heap_cap;
static struct waiter **g_by_fd;     /* parked waiters by socket, for epoll events */
static size_t g_by_fd_n;
static int g_epfd = -1, g_evfd = -1; /* the timer thread's epoll set and its wake-up */
static int g_timer_stop;
static unsigned long g_nparked;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER; /* --stdio: a waiter was woken */
#define EV_WAKEUP UINT64_MAX

static void heap_swap(size_t a, size_t b)
{
    struct waiter *t = g_heap[a];
    g_heap[a] = g_heap[b];
    g_heap[b] = t;
    g_heap[a]->heap_idx = a;
    g_heap[b]->heap_idx = b;
}

static void heap_up(size_t i)
{
    while (i > 0 && g_heap[(i - 1) / 2]->wake_at > g_heap[i]->wake_at) {
        heap_swap(i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < g_heap_n && g_heap[l]->wake_at < g_heap[m]->wake_at)
            m = l;
        if (r < g_heap_n && g_heap[r]->wake_at < g_heap[m]->wake_at)
            m = r;
        if (m == i)
            return;
        heap_swap(i, m);
        i = m;
    }
}

static void heap_push(struct waiter *w)
{
    if (g_heap_n == g_heap_cap) {
        g_heap_cap = g_heap_cap ? 2 * g_heap_cap : 1024;
        g_heap = xrealloc(g_heap, g_heap_cap * sizeof *g_heap);
    }
    w->heap_idx = g_heap_n;
    g_heap[g_heap_n++] = w;
    heap_up(w->heap_idx);
}

static void heap_remove(struct waiter *w)
{
    size_t i = w->heap_idx;
    if (i >= g_heap_n || g_heap[i] != w)
        return;
    g_heap_n--;
    if (i != g_heap_n) {
        g_heap[i] = g_heap[g_heap_n];
        g_heap[i]->heap_idx = i;
        heap_down(i);
        heap_up(i);
    }
}

static void timer_kick(void)
{
    uint64_t one = 1;
    if (write(g_evfd, &one, sizeof one) < 0 && errno != EAGAIN)
        perror("mcp-test-backend: eventfd");
}

/* Takes a parked waiter out of the heap and the epoll set; no resume. */
static void unpark_locked(struct waiter *w)
{
    if (!w->parked)
        return;
    heap_remove(w);
    if (w->fd >= 0 && (size_t)w->fd < g_by_fd_n && g_by_fd[w->fd] == w) {
        epoll_ctl(g_epfd, EPOLL_CTL_DEL, w->fd, NULL);
        g_by_fd[w->fd] = NULL;
    }
    w->parked = 0;
    g_nparked--;
}

/* Whatever may have given a parked connection something to do calls this. */
static void wake_locked(struct waiter *w)
{
    if (!w || !w->parked)
        return;
    unpark_locked(w);
    if (w->conn)
        MHD_resume_connection(w->conn);
    else
        pthread_cond_broadcast(&g_wake); /* its thread sees w->parked cleared */
}

/* Called from an MHD callback of w's connection, which then returns without
   data: suspends the connection until wake_locked(), at the latest at
   wake_at.  -1 when shutting down (the caller gives up instead).  A --stdio
   waiter (no connection) is only listed: its thread waits on g_wake until
   w->parked is cleared. */
static int park_locked(struct waiter *w, int64_t wake_at)
{
    if (g_stopping)
        return -1;
    w->wake_at = wake_at;
    w->parked = 1;
    w->seq++;
    g_nparked++;
    heap_push(w);
    if (w->fd >= 0 && (size_t)w->fd < g_by_fd_n) {
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT,
                                 .data.u64 = (uint64_t)w->fd << 32 | w->seq};
        if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, w->fd, &ev) == 0)
            g_by_fd[w->fd] = w;
    }
    if (w->conn)
        MHD_suspend_connection(w->conn);
    if (w->heap_idx == 0)
        timer_kick(); /* a new earliest deadline */
    return 0;
}

/* The timer thread: resumes parked connections whose deadline has come and
   those whose client hung up. */
static void *timer_main(void *arg)
{
    struct epoll_event evs[256];
    (void)arg;
    pthread_mutex_lock(&g_lock);
    while (!g_timer_stop) {
        int64_t now = now_ms();
        int timeout = -1, n;
        while (g_heap_n && g_heap[0]->wake_at <= now)
            wake_locked(g_heap[0]);
        if (g_heap_n)
            timeout = (int)(g_heap[0]->wake_at - now < 60000 ? g_heap[0]->wake_at - now : 60000);
        pthread_mutex_unlock(&g_lock);
        n = epoll_wait(g_epfd, evs, NELEM(evs), timeout);
        pthread_mutex_lock(&g_lock);
        for (int i = 0; i < n; i++) {
            uint64_t v = evs[i].data.u64, drain;
            size_t fd = (size_t)(v >> 32);
            if (v == EV_WAKEUP) {
                if (read(g_evfd, &drain, sizeof drain) < 0 && errno != EAGAIN)
                    perror("mcp-test-backend: eventfd");
            } else if (fd < g_by_fd_n && g_by_fd[fd] && g_by_fd[fd]->seq == (uint32_t)v) {
                wake_locked(g_by_fd[fd]); /* the reader sees client_gone() */
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

static int timer_start(pthread_t *t, size_t max_fds)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_WAKEUP};
    g_by_fd_n = max_fds;
    g_by_fd = xcalloc(max_fds * sizeof *g_by_fd);
    g_epfd = epoll_create1(EPOLL_CLOEXEC);
    g_evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g_epfd < 0 || g_evfd < 0 || epoll_ctl(g_epfd, EPOLL_CTL_ADD, g_evfd, &ev) ||
        pthread_create(t, NULL, timer_main, NULL)) {
        perror("mcp-test-backend: timer thread");
        return -1;
    }
    return 0;
}

/* A stream learns of a vanished client by looking: MHD is not watching the
   socket while our callback runs or the connection is parked (the timer
   thread's epoll set resumes a parked one when its client hangs up). */
static int client_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (fd < 0)
        return 0;
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int one_of(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        if (!strcmp(s, list[i]))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------
 * JSON and JSON-RPC helpers.
 * ------------------------------------------------------------------------ */
static const char *json_text(json_object *o)
{
    return json_object_to_json_string_ext(o, JSON_FLAGS);
}

static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (json_object_is_type(o, json_type_object))
        json_object_object_get_ex(o, key, &v);
    return v;
}

static const char *member_string(json_object *o, const char *key)
{
    json_object *v = member(o, key);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* Untrusted input: strict JSON, valid UTF-8, bounded nesting, nothing after
   the value (strict mode rejects trailing characters). */
static json_object *parse_body(const char *data, size_t len)
{
    struct json_tokener *tok;
    json_object *o;
    if (memchr(data, '\0', len))
        return NULL;
    tok = json_tokener_new_ex(JSON_MAX_DEPTH);
    if (!tok)
        return NULL;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    o = json_tokener_parse_ex(tok, data, (int)len + 1); /* the '\0' ends numbers */
    if (o && json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

static json_object *rpc_message(json_object *id)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(m, "id", id ? json_object_get(id) : NULL);
    return m;
}

/* Takes ownership of result. */
static json_object *rpc_result(json_object *id, json_object *result)
{
    json_object *m = rpc_message(id);
    json_object_object_add(m, "result", result);
    return m;
}

static json_object *rpc_error(json_object *id, int code, const char *fmt, ...)
{
    json_object *m = rpc_message(id), *e = json_object_new_object();
    char *msg;
    va_list ap;
    va_start(ap, fmt);
    msg = xvasprintf(fmt, ap);
    va_end(ap);
    json_object_object_add(e, "code", json_object_new_int(code));
    json_object_object_add(e, "message", json_object_new_string(msg));
    json_object_object_add(m, "error", e);
    free(msg);
    return m;
}

static json_object *rpc_notification(const char *method, json_object *params)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(m, "method", json_object_new_string(method));
    json_object_object_add(m, "params", params);
    return m;
}

/* The RFC 5424 levels of logging/setLevel, least severe first. */
static const char *const log_levels[] = {"debug", "info",     "notice", "warning",
                                         "error", "critical", "alert",  "emergency"};
enum { LOG_DEBUG, LOG_INFO };

static int log_level_index(const char *name)
{
    for (size_t i = 0; name && i < NELEM(log_levels); i++)
        if (!strcmp(name, log_levels[i]))
            return (int)i;
    return -1;
}

static json_object *log_message(const char *logger, int level, const char *text)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "level", json_object_new_string(log_levels[level]));
    json_object_object_add(p, "logger", json_object_new_string(logger));
    json_object_object_add(p, "data", json_object_new_string(text));
    return rpc_notification("notifications/message", p);
}

/* Content blocks, as tool results and prompt messages carry them. */
static json_object *text_block(const char *text)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "type", json_object_new_string("text"));
    json_object_object_add(b, "text", json_object_new_string(text));
    return b;
}

/* An image or audio block: base64 data. */
static json_object *media_block(const char *type, const char *mime_type, const char *data)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "type", json_object_new_string(type));
    json_object_object_add(b, "data", json_object_new_string(data));
    json_object_object_add(b, "mimeType", json_object_new_string(mime_type));
    return b;
}

/* An embedded text resource. */
static json_object *resource_block(const char *uri, const char *mime_type, const char *text)
{
    json_object *b = json_object_new_object(), *r = json_object_new_object();
    json_object_object_add(r, "uri", json_object_new_string(uri));
    json_object_object_add(r, "mimeType", json_object_new_string(mime_type));
    json_object_object_add(r, "text", json_object_new_string(text));
    json_object_object_add(b, "type", json_object_new_string("resource"));
    json_object_object_add(b, "resource", r);
    return b;
}

/* A CallToolResult holding the given blocks (a NULL-terminated list, each
   owned by the result). */
static json_object *tool_content(int is_error, json_object *block, ...)
{
    json_object *r = json_object_new_object(), *content = json_object_new_array();
    va_list ap;
    va_start(ap, block);
    for (; block; block = va_arg(ap, json_object *))
        json_object_array_add(content, block);
    va_end(ap);
    json_object_object_add(r, "content", content);
    if (is_error)
        json_object_object_add(r, "isError", json_object_new_boolean(1));
    return r;
}

/* A CallToolResult with one text block. */
static json_object *tool_text(const char *text, int is_error)
{
    return tool_content(is_error, text_block(text), NULL);
}

enum msg_kind { MSG_INVALID, MSG_REQUEST, MSG_NOTIFICATION, MSG_RESPONSE };

/* Sorts a JSON-RPC 2.0 message; *id is set whenever a usable id exists, so
   even an invalid request can be answered with its own id. */
static enum msg_kind classify(json_object *m, const char **method, json_object **id)
{
    json_object *v;
    const char *version = member_string(m, "jsonrpc");
    int has_id;
    *method = NULL;
    *id = NULL;
    if (!json_object_is_type(m, json_type_object))
        return MSG_INVALID;
    has_id = json_object_object_get_ex(m, "id", &v);
    if (has_id &&
        (json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int)))
        *id = v;
    if (!version || strcmp(version, "2.0"))
        return MSG_INVALID;
    if (json_object_object_get_ex(m, "method", &v)) {
        if (!json_object_is_type(v, json_type_string))
            return MSG_INVALID;
        *method = json_object_get_string(v);
        if (!has_id)
            return MSG_NOTIFICATION;
        return *id ? MSG_REQUEST : MSG_INVALID;
    }
    /* A response has exactly one of result/error ("result": null counts). */
    if (has_id && json_object_object_get_ex(m, "result", NULL) !=
                      json_object_object_get_ex(m, "error", NULL))
        return MSG_RESPONSE;
    return MSG_INVALID;
}

/* ------------------------------------------------------------------------
 * Sessions.  A session is reference counted: the table holds one reference
 * while it is listed, every request handler and SSE stream using it holds
 * one more, so DELETE can unlist it while streams drain.
 * ------------------------------------------------------------------------ */

/* A tools/call that waits (timed tools, tools that ask the client):
   registered so a cancellation, or the client's answer to our request, can
   find and wake it. */
struct call {
    struct call *next;
    char *req_id;          /* JSON text of the client's request id */
    char srv_id[32];       /* asking tools: id of our request to the client */
    char *answer;          /* asking tools: JSON text of the client's response */
    int cancelled;
    struct waiter *w;      /* the stream or request waiting for this call */
    /* Dialog fixtures (the 2026-07-28 section): our requests of the current
       round, whose ids are their keys, and the JSON text of each answer. */
    int nkeys;
    char *keys[DIALOG_MAX_ASKS];
    char *key_answers[DIALOG_MAX_ASKS];
    int superseded;        /* a newer call of the session asked with one of our keys */
};

struct queued {
    struct queued *next;
    char *json;
};

struct session {
    struct session *next, *prev; /* g_sessions */
    struct session *hnext;       /* g_buckets */
    char id[SESSION_ID_LEN + 1];
    int refs;
    int terminated;
    char *protocol_header;      /* last MCP-Protocol-Version seen */
    char *traceparent;          /* last traceparent seen (W3C trace context) */
    char *tracestate;           /* ... and tracestate */
    json_object *x_headers;     /* the last request's X-* and Authorization headers */
    long authorization_headers; /* requests that carried an Authorization header */
    char version[16];           /* protocolVersion agreed at initialize */
    int client_sampling;        /* the client declared these capabilities */
    int client_elicitation;
    int client_roots;
    int log_level;              /* logging/setLevel: index into log_levels */
    json_object *subscriptions; /* resources/subscribe: uri -> true */
    long requests, responses;
    json_object *notifications; /* method -> count */
    json_object *cancelled;     /* requestIds from notifications/cancelled */
    struct call *calls;
    int stream_open;            /* a standalone GET stream is attached */
    struct queued *q_head, *q_tail;
    int q_len;
    struct waiter *stream_w;    /* the standalone stream's, while it is open */
};

static struct session *session_new(void)
{
    struct session *s = xcalloc(sizeof *s);
    s->refs = 1;
    s->notifications = json_object_new_object();
    s->cancelled = json_object_new_array();
    s->subscriptions = json_object_new_object();
    s->log_level = LOG_DEBUG; /* until the client says otherwise, everything */
    return s;
}

static void session_free(struct session *s)
{
    struct queued *q;
    while ((q = s->q_head)) {
        s->q_head = q->next;
        free(q->json);
        free(q);
    }
    json_object_put(s->notifications);
    json_object_put(s->cancelled);
    json_object_put(s->subscriptions);
    free(s->protocol_header);
    free(s->traceparent);
    free(s->tracestate);
    json_object_put(s->x_headers);
    free(s);
}

static void session_unref_locked(struct session *s)
{
    if (--s->refs == 0)
        session_free(s);
}

static void session_release(struct session *s)
{
    pthread_mutex_lock(&g_lock);
    session_unref_locked(s);
    pthread_mutex_unlock(&g_lock);
}

static void session_wake_locked(struct session *s)
{
    wake_locked(s->stream_w);
    for (struct call *c = s->calls; c; c = c->next)
        wake_locked(c->w);
}

static struct session **session_bucket(const char *id)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return &g_buckets[h % SESSION_BUCKETS];
}

static struct session *session_find_locked(const char *id)
{
    for (struct session *s = *session_bucket(id); s; s = s->hnext)
        if (!strcmp(s->id, id))
            return s;
    return NULL;
}

static void session_list_locked(struct session *s)
{
    struct session **b = session_bucket(s->id);
    s->next = g_sessions;
    s->prev = NULL;
    if (g_sessions)
        g_sessions->prev = s;
    g_sessions = s;
    s->hnext = *b;
    *b = s;
    g_nsessions++;
}

/* Unlists the session; streams still attached see `terminated` and end. */
static void session_terminate_locked(struct session *s)
{
    struct session **pp = session_bucket(s->id);
    while (*pp && *pp != s)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = s->hnext;
        if (s->prev)
            s->prev->next = s->next;
        else
            g_sessions = s->next;
        if (s->next)
            s->next->prev = s->prev;
        g_nsessions--;
    }
    s->terminated = 1;
    session_wake_locked(s);
    session_unref_locked(s);
}

static int random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    size_t got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || nbytes > sizeof raw)
        return -1;
    while (got < nbytes) {
        ssize_t n = read(fd, raw + got, nbytes - got);
        if (n <= 0 && errno != EINTR)
            break;
        if (n > 0)
            got += (size_t)n;
    }
    close(fd);
    if (got < nbytes)
        return -1;
    for (size_t i = 0; i < nbytes; i++)
        sprintf(out + 2 * i, "%02x", raw[i]);
    return 0;
}

static struct call *call_new_locked(struct session *s, json_object *req_id, int asks,
                                    struct waiter *w)
{
    struct call *c = xcalloc(sizeof *c);
    c->req_id = xstrdup(req_id ? json_text(req_id) : "null");
    if (asks)
        snprintf(c->srv_id, sizeof c->srv_id, "srv-%lu",
                 __atomic_add_fetch(&g_next_srv, 1, __ATOMIC_RELAXED));
    c->w = w;
    c->next = s->calls;
    s->calls = c;
    return c;
}

static void call_free_locked(struct session *s, struct call *c)
{
    struct call **pp = &s->calls;
    while (*pp && *pp != c)
        pp = &(*pp)->next;
    if (*pp)
        *pp = c->next;
    for (int i = 0; i < c->nkeys; i++) {
        free(c->keys[i]);
        free(c->key_answers[i]);
    }
    free(c->req_id);
    free(c->answer);
    free(c);
}

enum wait_result { WAIT_DUE, WAIT_READY, WAIT_CANCELLED, WAIT_ABORT, WAIT_SUPERSEDED,
                   WAIT_PENDING };

/* How a call's wait stands (g_lock held): answered or cancelled, its
   session ended or its client hung up, the deadline passed, shutdown, or
   still pending (the caller parks until then). */
static enum wait_result call_check_locked(struct session *s, struct call *c, int fd,
                                          int64_t deadline)
{
    if (g_stopping)
        return WAIT_ABORT;
    if (c->cancelled || s->terminated || client_gone(fd))
        return WAIT_CANCELLED;
    if (c->answer)
        return WAIT_READY;
    if (now_ms() >= deadline)
        return WAIT_DUE;
    return WAIT_PENDING;
}

/* Standalone-stream queue: bounded, the oldest message gives way. */
static void queue_push_locked(struct session *s, char *json)
{
    struct queued *q = xcalloc(sizeof *q);
    q->json = json;
    if (s->q_len >= MAX_QUEUE) {
        struct queued *old = s->q_head;
        s->q_head = old->next;
        if (!s->q_head)
            s->q_tail = NULL;
        free(old->json);
        free(old);
        s->q_len--;
    }
    if (s->q_tail)
        s->q_tail->next = q;
    else
        s->q_head = q;
    s->q_tail = q;
    s->q_len++;
    wake_locked(s->stream_w);
}

/* Books an incoming message on its session; these counters are what
   session_info reports.  A cancellation, or an answer to one of our own
   requests, wakes the call waiting for it.  json-c objects are never shared
   between threads: what is kept is copied first. */
static void record_message(struct session *s, enum msg_kind kind, const char *method,
                           json_object *msg)
{
    json_object *cancel_id = NULL, *count;
    char *cancel_key = NULL, *answer = NULL;
    const char *srv_id = NULL;

    if (kind == MSG_RESPONSE) {
        srv_id = member_string(msg, "id");
        if (srv_id)
            answer = xstrdup(json_text(msg));
    } else if (kind == MSG_NOTIFICATION && !strcmp(method, "notifications/cancelled")) {
        json_object *rid = member(member(msg, "params"), "requestId");
        if (rid) {
            cancel_key = xstrdup(json_text(rid));
            json_object_deep_copy(rid, &cancel_id, NULL);
        }
    }

    pthread_mutex_lock(&g_lock);
    switch (kind) {
    case MSG_REQUEST:
        s->requests++;
        break;
    case MSG_NOTIFICATION:
        if (json_object_object_get_ex(s->notifications, method, &count))
            json_object_int_inc(count, 1);
        else if (json_object_object_length(s->notifications) < MAX_METHOD_KEYS)
            json_object_object_add(s->notifications, method, json_object_new_int(1));
        if (cancel_key) {
            if (json_object_array_length(s->cancelled) < MAX_CANCELLED) {
                json_object_array_add(s->cancelled, cancel_id);
                cancel_id = NULL;
            }
            for (struct call *c = s->calls; c; c = c->next)
                if (!strcmp(c->req_id, cancel_key)) {
                    c->cancelled = 1;
                    wake_locked(c->w);
                }
        }
        break;
    case MSG_RESPONSE:
        s->responses++;
        for (struct call *c = s->calls; srv_id && c; c = c->next)
            if (c->srv_id[0] && !strcmp(c->srv_id, srv_id) && !c->answer) {
                c->answer = answer;
                answer = NULL;
                wake_locked(c->w);
                break;
            }
        /* A dialog fixture's request: the newest call waiting for that id. */
        for (struct call *c = s->calls; srv_id && answer && c; c = c->next)
            for (int i = 0; i < c->nkeys; i++)
                if (!c->key_answers[i] && !strcmp(c->keys[i], srv_id)) {
                    c->key_answers[i] = answer;
                    answer = NULL;
                    wake_locked(c->w);
                    break;
                }
        break;
    case MSG_INVALID:
        break;
    }
    pthread_mutex_unlock(&g_lock);
    free(answer);
    free(cancel_key);
    json_object_put(cancel_id);
}

/* ------------------------------------------------------------------------
 * Per-request state and HTTP replies.
 * ------------------------------------------------------------------------ */
struct deferred;

struct request {
    struct MHD_Connection *conn;
    const char *method, *url;
    int fd;                          /* client socket, polled for hang-up */
    struct waiter w;                 /* parks the request while dfr waits */
    struct deferred *dfr;            /* --mode json: a tools/call that waits */
    struct buf body;
    int too_big;
    int replied;
    char session[SESSION_ID_LEN + 1]; /* for the log line */
    char issued[SESSION_ID_LEN + 1];  /* new session: sent as Mcp-Session-Id */
    char rpc[128];                    /* what the body was, for the log line */
};

static const char *header(struct request *rq, const char *name)
{
    return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

static void log_request(struct request *rq, unsigned status, const char *how)
{
    if (cfg.quiet)
        return;
    fprintf(stderr, "%s %s session=%s rpc=%s -> %u%s\n", rq->method, rq->url,
            rq->session[0] ? rq->session : "-", rq->rpc[0] ? rq->rpc : "-", status, how);
}

static enum MHD_Result send_response(struct request *rq, unsigned status,
                                     struct MHD_Response *r, const char *how)
{
    enum MHD_Result ret;
    if (!r)
        return MHD_NO;
    if (rq->issued[0])
        MHD_add_response_header(r, "Mcp-Session-Id", rq->issued);
    ret = MHD_queue_response(rq->conn, status, r);
    MHD_destroy_response(r);
    rq->replied = 1;
    log_request(rq, status, how);
    return ret;
}

/* Takes ownership of msg. */
static struct MHD_Response *json_response(json_object *msg)
{
    const char *text = json_text(msg);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    json_object_put(msg);
    return r;
}

static enum MHD_Result reply_json(struct request *rq, unsigned status, json_object *msg)
{
    return send_response(rq, status, json_response(msg), "");
}

/* Transport-level failures still carry a JSON-RPC error body (id null). */
static enum MHD_Result reply_error(struct request *rq, unsigned status, int code,
                                   const char *message)
{
    return reply_json(rq, status, rpc_error(NULL, code, "%s", message));
}

static enum MHD_Result reply_not_allowed(struct request *rq, const char *allow)
{
    struct MHD_Response *r = json_response(rpc_error(NULL, -32000, "Method not allowed"));
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    return send_response(rq, MHD_HTTP_METHOD_NOT_ALLOWED, r, "");
}

static enum MHD_Result reply_empty(struct request *rq, unsigned status)
{
    return send_response(
        rq, status, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT), "");
}

static void add_sse_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
}

/* --mode sse: messages that are ready at once still go out as a (short) SSE
   stream, one event per message.  Takes ownership of the array. */
static enum MHD_Result reply_sse_now(struct request *rq, json_object *list)
{
    unsigned long serial = __atomic_add_fetch(&g_next_stream, 1, __ATOMIC_RELAXED);
    struct buf b = {0};
    struct MHD_Response *r;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        char *event = xasprintf("id: %lu-%zu\ndata: %s\n\n", serial, i + 1,
                                json_text(json_object_array_get_idx(list, i)));
        buf_adds(&b, event);
        free(event);
    }
    r = MHD_create_response_from_buffer(b.len, b.data, MHD_RESPMEM_MUST_COPY);
    if (r)
        add_sse_headers(r);
    buf_free(&b);
    json_object_put(list);
    return send_response(rq, MHD_HTTP_OK, r, " (sse)");
}

/* A finished answer to one request: JSON, or one SSE event in --mode sse. */
static enum MHD_Result reply_message(struct request *rq, json_object *msg)
{
    json_object *list;
    if (cfg.mode != MODE_SSE)
        return reply_json(rq, MHD_HTTP_OK, msg);
    list = json_object_new_array();
    json_object_array_add(list, msg);
    return reply_sse_now(rq, list);
}

/* ------------------------------------------------------------------------
 * SSE streams that take time: timed tools (slow, test_tool_with_logging,
 * ...), tools that ask the client something (sample, test_sampling,
 * test_elicitation, ...), and the standalone GET stream.
 * MHD pulls bytes through stream_read(); when the buffer is empty it asks
 * the stream to produce its next event, which may block until it is due.
 * ------------------------------------------------------------------------ */
enum stream_kind { STREAM_TIMED, STREAM_ASK, STREAM_STANDALONE, STREAM_DIALOG };

struct stream;
struct dialog_run;                               /* the 2026-07-28 section */
static int produce_dialog(struct stream *st);
static void dialog_run_free(struct dialog_run *run);

/* A timed tool: `count` steps `interval_ms` apart (the first at once), then,
   one interval after the last step, the result. */
struct timed {
    void (*step)(struct stream *st);     /* the events of step st->step (1..count), if any */
    json_object *(*result)(int count);   /* the CallToolResult */
};

/* A tool that asks the client: our request's method, and how the client's
   result becomes the tool's text. */
struct ask {
    const char *method;
    const char *what; /* "sampling", "elicitation": failures read "<what> failed: ..." */
    char *(*outcome)(json_object *result, int *is_error);
};

struct stream {
    enum stream_kind kind;
    struct session *s;       /* holds a reference */
    struct call *call;       /* timed/ask, registered in s->calls */
    int fd;
    unsigned long serial, events; /* event ids are "<serial>-<n>" */
    json_object *req_id;     /* the tools/call id, for the final result */
    const struct timed *timed;
    json_object *token;      /* timed: progress token, or NULL */
    int step, count, interval_ms;
    const struct ask *ask;
    char *request;           /* ask: JSON text of our request to the client */
    int64_t due;             /* when the next event may go out */
    struct dialog_run *dialog; /* dialog fixtures */
    struct buf out;          /* produced, not yet handed to MHD (or written to stdout) */
    size_t off;
    int lines;               /* --stdio: each message a line of JSON, not an SSE event */
    int done;
    struct waiter w;         /* parks the connection while nothing is due */
};

static struct stream *stream_new(enum stream_kind kind, struct request *rq,
                                 struct session *s, json_object *id)
{
    struct stream *st = xcalloc(sizeof *st);
    st->kind = kind;
    st->s = s;
    st->fd = rq->fd;
    st->serial = __atomic_add_fetch(&g_next_stream, 1, __ATOMIC_RELAXED);
    st->req_id = id ? json_object_get(id) : NULL;
    st->due = now_ms();
    st->lines = cfg.stdio;
    st->w.conn = rq->conn;
    st->w.fd = rq->fd;
    pthread_mutex_lock(&g_lock);
    s->refs++;
    if (kind != STREAM_STANDALONE)
        st->call = call_new_locked(s, id, kind == STREAM_ASK, &st->w);
    else
        s->stream_w = &st->w;
    pthread_mutex_unlock(&g_lock);
    return st;
}

static void stream_event_text(struct stream *st, const char *json)
{
    char *event;
    if (st->lines) { /* --stdio: the message as one line */
        buf_adds(&st->out, json);
        buf_add(&st->out, "\n", 1);
        return;
    }
    event = xasprintf("id: %lu-%lu\ndata: %s\n\n", st->serial, ++st->events, json);
    buf_adds(&st->out, event);
    free(event);
}

/* A response (or a batch of them), as opposed to a request or notification. */
static int is_answer(json_object *m)
{
    return json_object_is_type(m, json_type_array) || member(m, "result") || member(m, "error");
}

/* Takes ownership of msg. */
static void stream_event(struct stream *st, json_object *msg)
{
    if (st->lines && faults.garbage && is_answer(msg))
        buf_adds(&st->out, GARBAGE_LINE);
    stream_event_text(st, json_text(msg));
    json_object_put(msg);
}

/* SEP-1699 priming: an event id with empty data, and a retry hint (SSE only:
   stdio has no event ids). */
static void stream_priming(struct stream *st)
{
    char *event;
    if (st->lines)
        return;
    event = xasprintf("id: %lu-%lu\nretry: %d\ndata: \n\n", st->serial, ++st->events,
                      RETRY_MS);
    buf_adds(&st->out, event);
    free(event);
}

/* Whether the session wants log messages of this level (logging/setLevel). */
static int session_logs(struct session *s, int level)
{
    int yes;
    pthread_mutex_lock(&g_lock);
    yes = level >= s->log_level;
    pthread_mutex_unlock(&g_lock);
    return yes;
}

/* Our request to the client, as JSON text.  Takes ownership of params. */
static char *client_request(const char *srv_id, const char *method, json_object *params)
{
    json_object *m = json_object_new_object();
    char *text;
    json_object_object_add(m, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(m, "id", json_object_new_string(srv_id));
    json_object_object_add(m, "method", json_object_new_string(method));
    json_object_object_add(m, "params", params);
    text = xstrdup(json_text(m));
    json_object_put(m);
    return text;
}

/* An asking tool's answer for how its wait ended. */
static json_object *ask_result(json_object *id, const struct ask *ask, enum wait_result r,
                               const char *answer)
{
    json_object *msg, *err, *resp;
    char *text;
    int is_error = 1;

    if (r == WAIT_DUE) {
        text = xasprintf("%s failed: no response within %d s", ask->what,
                         SAMPLE_TIMEOUT_MS / 1000);
    } else if (r != WAIT_READY) {
        return rpc_error(id, -32000, "Request cancelled");
    } else {
        msg = parse_body(answer, strlen(answer)); /* our copy of what the client sent */
        err = member(msg, "error");
        if (err) {
            const char *m = member_string(err, "message");
            text = xasprintf("%s failed: %s", ask->what, m ? m : "error response");
        } else {
            text = ask->outcome(member(msg, "result"), &is_error);
        }
        json_object_put(msg);
    }
    resp = rpc_result(id, tool_text(text, is_error));
    free(text);
    return resp;
}

/* Each producer appends to st->out or sets st->done, or parks the stream
   (1) when nothing is due yet; -1 (shutdown) drops the connection.  A
   cancelled call, a terminated session or a client that hung up ends the
   stream without a result, as MCP asks for cancellation. */
static int produce_timed(struct stream *st)
{
    enum wait_result r;
    pthread_mutex_lock(&g_lock);
    r = call_check_locked(st->s, st->call, st->fd, st->due);
    if (r == WAIT_PENDING)
        r = park_locked(&st->w, st->due) ? WAIT_ABORT : WAIT_PENDING;
    pthread_mutex_unlock(&g_lock);
    if (r == WAIT_PENDING)
        return 1;
    if (r == WAIT_ABORT)
        return -1;
    if (r == WAIT_CANCELLED) {
        st->done = 1;
        return 0;
    }
    st->due += st->interval_ms;
    if (st->step < st->count) {
        st->step++;
        st->timed->step(st);
    } else {
        stream_event(st, rpc_result(st->req_id, st->timed->result(st->count)));
        st->done = 1;
    }
    return 0;
}

static int produce_ask(struct stream *st)
{
    enum wait_result r;
    char *answer = NULL;
    if (st->step++ == 0) {
        stream_event_text(st, st->request);
        st->due = now_ms() + SAMPLE_TIMEOUT_MS;
        return 0;
    }
    pthread_mutex_lock(&g_lock);
    r = call_check_locked(st->s, st->call, st->fd, st->due);
    if (r == WAIT_PENDING)
        r = park_locked(&st->w, st->due) ? WAIT_ABORT : WAIT_PENDING;
    if (r == WAIT_READY) {
        answer = st->call->answer;
        st->call->answer = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    if (r == WAIT_PENDING)
        return 1;
    st->done = 1;
    if (r == WAIT_READY || r == WAIT_DUE)
        stream_event(st, ask_result(st->req_id, st->ask, r, answer));
    free(answer);
    return r == WAIT_ABORT ? -1 : 0;
}

static int produce_standalone(struct stream *st)
{
    struct session *s = st->s;
    struct queued *q;
    int rc = 0;
    pthread_mutex_lock(&g_lock);
    for (;;) {
        if (g_stopping) {
            rc = -1;
            break;
        }
        if (client_gone(st->fd)) {
            st->done = 1;
            break;
        }
        if (s->q_head) {
            while ((q = s->q_head)) {
                s->q_head = q->next;
                stream_event_text(st, q->json);
                free(q->json);
                free(q);
            }
            s->q_tail = NULL;
            s->q_len = 0;
            break;
        }
        if (s->terminated) {
            st->done = 1;
            break;
        }
        if (now_ms() >= st->due) {
            if (!st->lines) /* stdio needs no keepalive */
                buf_adds(&st->out, ": keepalive\n\n");
            break;
        }
        rc = park_locked(&st->w, st->due) ? -1 : 1;
        pthread_mutex_unlock(&g_lock);
        return rc;
    }
    pthread_mutex_unlock(&g_lock);
    st->due = now_ms() + KEEPALIVE_MS;
    return rc;
}

/* The stream's next step, whatever the transport: appends to st->out or
   sets st->done (0), parks (1), or gives up at shutdown (-1). */
static int stream_produce(struct stream *st)
{
    switch (st->kind) {
    case STREAM_TIMED:
        return produce_timed(st);
    case STREAM_ASK:
        return produce_ask(st);
    case STREAM_DIALOG:
        return produce_dialog(st);
    default:
        return produce_standalone(st);
    }
}

/* MHD's content reader: the HTTP side of a stream. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *st = cls;
    size_t n;
    int rc;
    (void)pos;
    while (st->off == st->out.len) { /* a step may produce nothing: go on to the next */
        st->off = st->out.len = 0;
        if (st->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        rc = stream_produce(st);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc > 0)
            return 0; /* parked: MHD calls again once resumed */
    }
    n = st->out.len - st->off;
    if (n > max)
        n = max;
    memcpy(buf, st->out.data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

/* MHD calls this when the response is gone: finished, failed or aborted. */
static void stream_free(void *cls)
{
    struct stream *st = cls;
    pthread_mutex_lock(&g_lock);
    unpark_locked(&st->w);
    if (st->call)
        call_free_locked(st->s, st->call);
    if (st->kind == STREAM_STANDALONE) {
        st->s->stream_open = 0;
        if (st->s->stream_w == &st->w)
            st->s->stream_w = NULL;
    }
    session_unref_locked(st->s);
    pthread_mutex_unlock(&g_lock);
    json_object_put(st->req_id);
    json_object_put(st->token);
    dialog_run_free(st->dialog);
    free(st->request);
    buf_free(&st->out);
    free(st);
}

static enum MHD_Result reply_stream(struct request *rq, struct stream *st)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                               stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    add_sse_headers(r);
    return send_response(rq, MHD_HTTP_OK, r, " (sse stream)");
}

/* ------------------------------------------------------------------------
 * Tools.  Each returns the JSON-RPC response, or NULL after handing the
 * caller an SSE stream that will produce it.
 * ------------------------------------------------------------------------ */
struct tool_call {
    struct request *rq;
    struct session *s;
    json_object *id;
    json_object *args;  /* arguments object, may be NULL */
    json_object *meta;  /* params._meta, may be NULL */
    struct stream **stream;
    const char *name;   /* the tool's */
};

static json_object *invalid_params(struct tool_call *tc, const char *what)
{
    return rpc_error(tc->id, -32602, "Invalid params: %s", what);
}

static int arg_string(json_object *args, const char *key, const char **out)
{
    json_object *v = member(args, key);
    if (!json_object_is_type(v, json_type_string))
        return -1;
    *out = json_object_get_string(v);
    return 0;
}

static int arg_int(json_object *args, const char *key, int def, int lo, int hi, int *out)
{
    json_object *v = member(args, key);
    int64_t n;
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return -1;
    n = json_object_get_int64(v);
    if (n < lo || n > hi)
        return -1;
    *out = (int)n;
    return 0;
}

/* params._meta.progressToken, if it is a usable one. */
static json_object *progress_token(struct tool_call *tc)
{
    json_object *token = member(tc->meta, "progressToken");
    if (json_object_is_type(token, json_type_string) || json_object_is_type(token, json_type_int))
        return token;
    return NULL;
}

static json_object *progress_notification(json_object *token, int progress, int total,
                                          const char *message)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "progressToken", json_object_get(token));
    json_object_object_add(p, "progress", json_object_new_int(progress));
    json_object_object_add(p, "total", json_object_new_int(total));
    if (message)
        json_object_object_add(p, "message", json_object_new_string(message));
    return rpc_notification("notifications/progress", p);
}

/* --mode json: a tools/call whose answer has to wait (a timed tool's
   duration, or the client's answer to our request on the GET stream).  The
   request parks; MHD calls on_request again whenever it is resumed, and
   deferred_poll() answers once the wait is over. */
struct deferred {
    struct session *s;          /* holds a reference */
    struct call *c;             /* registered in s->calls, woken through rq->w */
    json_object *id;
    const struct timed *timed;  /* a timed tool, or NULL: */
    int count;
    const struct ask *ask;      /* an asking tool */
    int64_t deadline;
};

static struct deferred *defer_locked(struct tool_call *tc, int asks, int64_t deadline)
{
    struct deferred *d = xcalloc(sizeof *d);
    d->s = tc->s;
    d->s->refs++;
    d->id = tc->id ? json_object_get(tc->id) : NULL;
    d->c = call_new_locked(tc->s, tc->id, asks, &tc->rq->w);
    d->deadline = deadline;
    tc->rq->dfr = d;
    return d;
}

static void deferred_free(struct request *rq)
{
    struct deferred *d = rq->dfr;
    if (!d)
        return;
    pthread_mutex_lock(&g_lock);
    unpark_locked(&rq->w);
    call_free_locked(d->s, d->c);
    session_unref_locked(d->s);
    pthread_mutex_unlock(&g_lock);
    json_object_put(d->id);
    free(d);
    rq->dfr = NULL;
}

static enum MHD_Result reply_message(struct request *rq, json_object *msg);
static json_object *ask_result(json_object *id, const struct ask *ask, enum wait_result r,
                               const char *answer);

/* on_request's every call for a deferred request: parks it again, or
   answers. */
static enum MHD_Result deferred_poll(struct request *rq)
{
    struct deferred *d = rq->dfr;
    enum wait_result r;
    char *answer = NULL;
    json_object *resp;

    pthread_mutex_lock(&g_lock);
    r = call_check_locked(d->s, d->c, rq->fd, d->deadline);
    if (r == WAIT_PENDING) {
        if (park_locked(&rq->w, d->deadline) == 0) {
            pthread_mutex_unlock(&g_lock);
            return MHD_YES;
        }
        r = WAIT_ABORT;
    }
    if (r == WAIT_READY) {
        answer = d->c->answer;
        d->c->answer = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    if (d->timed)
        resp = r == WAIT_DUE ? rpc_result(d->id, d->timed->result(d->count))
                             : rpc_error(d->id, -32000, "Request cancelled");
    else
        resp = ask_result(d->id, d->ask, r, answer);
    free(answer);
    deferred_free(rq);
    return reply_message(rq, resp);
}

/* Runs a timed tool: as an SSE stream, or in --mode json as a plain wait
   just as long, without the notifications. */
static json_object *run_timed(struct tool_call *tc, const struct timed *t, int count,
                              int interval_ms, json_object *token)
{
    struct stream *st;
    struct deferred *d;

    if (cfg.mode == MODE_JSON) {
        pthread_mutex_lock(&g_lock);
        d = defer_locked(tc, 0, now_ms() + (int64_t)count * interval_ms);
        d->timed = t;
        d->count = count;
        pthread_mutex_unlock(&g_lock);
        return NULL;
    }
    st = stream_new(STREAM_TIMED, tc->rq, tc->s, tc->id);
    st->timed = t;
    st->count = count;
    st->interval_ms = interval_ms;
    st->token = token ? json_object_get(token) : NULL;
    *tc->stream = st;
    return NULL;
}

/* Sends our request to the client and makes the tool's result of its answer:
   on the call's own SSE stream, or in --mode json on the session's GET
   stream while this POST waits.  Takes ownership of params. */
static json_object *ask_client(struct tool_call *tc, const struct ask *ask, json_object *params)
{
    struct stream *st;
    struct deferred *d;
    char *text;
    json_object *resp;

    if (cfg.mode != MODE_JSON) {
        st = stream_new(STREAM_ASK, tc->rq, tc->s, tc->id);
        st->ask = ask;
        st->request = client_request(st->call->srv_id, ask->method, params);
        *tc->stream = st;
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    if (!tc->s->stream_open) {
        pthread_mutex_unlock(&g_lock);
        json_object_put(params);
        text = xasprintf("%s failed: in --mode json the %s request needs an open GET stream",
                         ask->what, ask->what);
        resp = rpc_result(tc->id, tool_text(text, 1));
        free(text);
        return resp;
    }
    d = defer_locked(tc, 1, now_ms() + SAMPLE_TIMEOUT_MS);
    d->ask = ask;
    queue_push_locked(tc->s, client_request(d->c->srv_id, ask->method, params));
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* What the client's sampling result says. */
static const char *sampled_text(json_object *result)
{
    json_object *content = member(result, "content");
    if (json_object_is_type(content, json_type_array)) /* newer specs allow a list */
        content = json_object_array_get_idx(content, 0);
    return member_string(content, "text");
}

static char *sampled_as(const char *prefix, json_object *result, int *is_error)
{
    const char *text = sampled_text(result);
    *is_error = !text;
    if (!text)
        return xstrdup("sampling failed: response has no text content");
    return xasprintf("%s%s", prefix, text);
}

static char *sample_outcome(json_object *result, int *is_error)
{
    return sampled_as("sampled: ", result, is_error);
}

static char *llm_outcome(json_object *result, int *is_error)
{
    return sampled_as("LLM response: ", result, is_error);
}

/* What the client's elicitation result says: its action and content. */
static char *elicited_as(const char *prefix, json_object *result, int *is_error)
{
    const char *action = member_string(result, "action");
    json_object *content = member(result, "content");
    *is_error = !action;
    if (!action)
        return xstrdup("elicitation failed: response has no action");
    return xasprintf("%s: action=%s, content=%s", prefix, action,
                     content ? json_text(content) : "{}");
}

static char *user_response_outcome(json_object *result, int *is_error)
{
    return elicited_as("User response", result, is_error);
}

static char *form_outcome(json_object *result, int *is_error)
{
    return elicited_as("Elicitation completed", result, is_error);
}

static const struct ask ask_sample = {"sampling/createMessage", "sampling", sample_outcome};
static const struct ask ask_llm = {"sampling/createMessage", "sampling", llm_outcome};
static const struct ask ask_user = {"elicitation/create", "elicitation", user_response_outcome};
static const struct ask ask_form = {"elicitation/create", "elicitation", form_outcome};

static json_object *sampling_params(const char *prompt)
{
    json_object *p = json_object_new_object(), *msgs = json_object_new_array();
    json_object *msg = json_object_new_object();
    json_object_object_add(msg, "role", json_object_new_string("user"));
    json_object_object_add(msg, "content", text_block(prompt));
    json_object_array_add(msgs, msg);
    json_object_object_add(p, "messages", msgs);
    json_object_object_add(p, "maxTokens", json_object_new_int(100));
    return p;
}

static json_object *elicitation_params(const char *message, const char *schema)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "message", json_object_new_string(message));
    json_object_object_add(p, "requestedSchema", json_tokener_parse(schema));
    return p;
}

/* Whether the client declared sampling (or elicitation) at initialize. */
static int client_declared(struct session *s, int elicitation)
{
    int yes;
    pthread_mutex_lock(&g_lock);
    yes = elicitation ? s->client_elicitation : s->client_sampling;
    pthread_mutex_unlock(&g_lock);
    return yes;
}

static json_object *undeclared(struct tool_call *tc, const char *what)
{
    char *text = xasprintf("%s failed: the client did not declare the %s capability", what, what);
    json_object *resp = rpc_result(tc->id, tool_text(text, 1));
    free(text);
    return resp;
}

/* --- the project's own tools --- */

static json_object *tool_echo(struct tool_call *tc)
{
    const char *text;
    if (arg_string(tc->args, "text", &text))
        return invalid_params(tc, "text must be a string");
    return rpc_result(tc->id, tool_text(text, 0));
}

static int is_number(json_object *v)
{
    return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

static json_object *tool_add(struct tool_call *tc)
{
    json_object *a = member(tc->args, "a"), *b = member(tc->args, "b");
    json_object *sum, *result, *structured;
    int64_t isum;
    if (!is_number(a) || !is_number(b))
        return invalid_params(tc, "a and b must be numbers");
    if (json_object_is_type(a, json_type_int) && json_object_is_type(b, json_type_int) &&
        !__builtin_add_overflow(json_object_get_int64(a), json_object_get_int64(b), &isum)) {
        sum = json_object_new_int64(isum);
    } else {
        double d = json_object_get_double(a) + json_object_get_double(b);
        if (!isfinite(d))
            return invalid_params(tc, "the sum is not a finite number");
        sum = json_object_new_double(d);
    }
    result = tool_text(json_text(sum), 0);
    structured = json_object_new_object();
    json_object_object_add(structured, "sum", sum);
    json_object_object_add(result, "structuredContent", structured);
    return rpc_result(tc->id, result);
}

static void slow_step(struct stream *st)
{
    char text[64];
    snprintf(text, sizeof text, "step %d of %d", st->step, st->count);
    if (st->token)
        stream_event(st, progress_notification(st->token, st->step, st->count, text));
    else if (session_logs(st->s, LOG_INFO))
        stream_event(st, log_message("slow", LOG_INFO, text));
}

static json_object *slow_result(int count)
{
    char text[64];
    snprintf(text, sizeof text, "slow done: %d steps", count);
    return tool_text(text, 0);
}

static const struct timed timed_slow = {slow_step, slow_result};

static json_object *tool_slow(struct tool_call *tc)
{
    int count, interval;
    if (arg_int(tc->args, "count", 3, 0, SLOW_MAX_COUNT, &count) ||
        arg_int(tc->args, "interval_ms", 200, 0, SLOW_MAX_INTERVAL, &interval))
        return invalid_params(tc, "count must be an integer 0..1000, interval_ms 0..10000");
    return run_timed(tc, &timed_slow, count, interval, progress_token(tc));
}

static json_object *tool_sample(struct tool_call *tc)
{
    const char *prompt;
    if (arg_string(tc->args, "prompt", &prompt))
        return invalid_params(tc, "prompt must be a string");
    return ask_client(tc, &ask_sample, sampling_params(prompt));
}

static json_object *tool_session_info(struct tool_call *tc)
{
    json_object *info = json_object_new_object(), *copy = NULL, *subs, *result;
    struct session *s = tc->s;
    pthread_mutex_lock(&g_lock);
    json_object_object_add(info, "session", cfg.stateless ? NULL : json_object_new_string(s->id));
    json_object_object_add(info, "protocolVersionHeader",
                           s->protocol_header ? json_object_new_string(s->protocol_header) : NULL);
    json_object_object_add(info, "requests", json_object_new_int64(s->requests));
    json_object_object_add(info, "authorizationHeaders",
                           json_object_new_int64(s->authorization_headers));
    json_object_object_add(info, "traceparent",
                           s->traceparent ? json_object_new_string(s->traceparent) : NULL);
    json_object_object_add(info, "tracestate",
                           s->tracestate ? json_object_new_string(s->tracestate) : NULL);
    copy = NULL;
    if (s->x_headers)
        json_object_deep_copy(s->x_headers, &copy, NULL);
    json_object_object_add(info, "headers", copy);
    copy = NULL;
    json_object_deep_copy(s->notifications, &copy, NULL);
    json_object_object_add(info, "notifications", copy);
    json_object_object_add(info, "responses", json_object_new_int64(s->responses));
    copy = NULL;
    json_object_deep_copy(s->cancelled, &copy, NULL);
    json_object_object_add(info, "cancelled", copy);
    json_object_object_add(info, "logLevel", json_object_new_string(log_levels[s->log_level]));
    subs = json_object_new_array();
    json_object_object_foreach(s->subscriptions, uri, v) {
        (void)v;
        json_object_array_add(subs, json_object_new_string(uri));
    }
    json_object_object_add(info, "subscriptions", subs);
    pthread_mutex_unlock(&g_lock);
    result = tool_text(json_text(info), 0);
    json_object_put(info);
    return rpc_result(tc->id, result);
}

static json_object *tool_fail(struct tool_call *tc)
{
    return rpc_result(tc->id, tool_text("requested failure", 1));
}

static json_object *tool_notify(struct tool_call *tc)
{
    const char *text, *how;
    json_object *msg;
    if (arg_string(tc->args, "text", &text))
        return invalid_params(tc, "text must be a string");
    msg = log_message("notify", LOG_INFO, text);
    pthread_mutex_lock(&g_lock);
    if (LOG_INFO < tc->s->log_level) {
        how = "filtered";
    } else {
        how = tc->s->stream_open ? "sent" : "queued";
        queue_push_locked(tc->s, xstrdup(json_text(msg)));
    }
    pthread_mutex_unlock(&g_lock);
    json_object_put(msg);
    return rpc_result(tc->id, tool_text(how, 0));
}

/* The era bridge's probe (tests/integration/test_bridge.py): notifications/resources/updated
 * for uri on the session's standalone GET stream, when the session subscribed to it. */
static json_object *tool_touch_resource(struct tool_call *tc)
{
    const char *uri, *how;
    json_object *msg, *params;
    if (arg_string(tc->args, "uri", &uri))
        return invalid_params(tc, "uri must be a string");
    msg = json_object_new_object();
    params = json_object_new_object();
    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "method", json_object_new_string("notifications/resources/updated"));
    json_object_object_add(params, "uri", json_object_new_string(uri));
    json_object_object_add(msg, "params", params);
    pthread_mutex_lock(&g_lock);
    if (!json_object_object_get_ex(tc->s->subscriptions, uri, NULL)) {
        how = "not subscribed";
    } else {
        how = tc->s->stream_open ? "sent" : "queued";
        queue_push_locked(tc->s, xstrdup(json_text(msg)));
    }
    pthread_mutex_unlock(&g_lock);
    json_object_put(msg);
    return rpc_result(tc->id, tool_text(how, 0));
}

/* --- the tools the MCP conformance suite calls --- */

/* A 1x1 red PNG and a WAV of eight samples of silence (8 kHz, 8 bit). */
#define PNG_1X1 \
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC"
#define WAV_TINY "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA=="

static json_object *tool_simple_text(struct tool_call *tc)
{
    return rpc_result(tc->id, tool_text("This is a simple text response for testing.", 0));
}

static json_object *tool_image(struct tool_call *tc)
{
    return rpc_result(tc->id, tool_content(0, media_block("image", "image/png", PNG_1X1), NULL));
}

static json_object *tool_audio(struct tool_call *tc)
{
    return rpc_result(tc->id, tool_content(0, media_block("audio", "audio/wav", WAV_TINY), NULL));
}

static json_object *tool_embedded_resource(struct tool_call *tc)
{
    return rpc_result(tc->id, tool_content(0, resource_block("test://embedded-resource",
                                                             "text/plain",
                                                             "This is an embedded resource content."),
                                           NULL));
}

static json_object *tool_mixed_content(struct tool_call *tc)
{
    return rpc_result(tc->id,
                      tool_content(0, text_block("Multiple content types test:"),
                                   media_block("image", "image/png", PNG_1X1),
                                   resource_block("test://mixed-content-resource",
                                                  "application/json",
                                                  "{\"test\":\"data\",\"value\":123}"),
                                   NULL));
}

static json_object *tool_error_handling(struct tool_call *tc)
{
    return rpc_result(tc->id, tool_text("This tool intentionally returns an error for testing", 1));
}

static const char *const logging_steps[] = {"Tool execution started", "Tool processing data",
                                            "Tool execution completed"};

static void logging_step(struct stream *st)
{
    if (session_logs(st->s, LOG_INFO))
        stream_event(st, log_message("test_tool_with_logging", LOG_INFO,
                                     logging_steps[st->step - 1]));
}

static json_object *logging_result(int count)
{
    (void)count;
    return tool_text("Tool with logging executed successfully", 0);
}

static const struct timed timed_logging = {logging_step, logging_result};

static json_object *tool_with_logging(struct tool_call *tc)
{
    return run_timed(tc, &timed_logging, (int)NELEM(logging_steps), 50, NULL);
}

/* Progress 0, 50 and 100 of 100, if the client asked for progress. */
static void progress_step(struct stream *st)
{
    if (st->token)
        stream_event(st, progress_notification(st->token, (st->step - 1) * 50, 100, NULL));
}

static json_object *progress_result(int count)
{
    (void)count;
    return tool_text("Tool with progress executed successfully", 0);
}

static const struct timed timed_progress = {progress_step, progress_result};

static json_object *tool_with_progress(struct tool_call *tc)
{
    return run_timed(tc, &timed_progress, 3, 50, progress_token(tc));
}

/* SEP-1699: the stream starts with a priming event (2025-11-25 sessions
   only: older clients cannot parse empty data) and the result follows
   delay_ms later.  The stream is not closed early: resumption is the
   gateway's business (MCPStreamCloseAfter). */
static void reconnection_step(struct stream *st)
{
    int primes;
    pthread_mutex_lock(&g_lock);
    primes = strcmp(st->s->version, "2025-11-25") >= 0;
    pthread_mutex_unlock(&g_lock);
    if (primes)
        stream_priming(st);
}

static json_object *reconnection_result(int count)
{
    (void)count;
    return tool_text("Reconnection test completed successfully", 0);
}

static const struct timed timed_reconnection = {reconnection_step, reconnection_result};

static json_object *tool_reconnection(struct tool_call *tc)
{
    int delay;
    if (arg_int(tc->args, "delay_ms", RECONNECT_DELAY_MS, 0, SLOW_MAX_INTERVAL, &delay))
        return invalid_params(tc, "delay_ms must be an integer 0..10000");
    return run_timed(tc, &timed_reconnection, 1, delay, NULL);
}

static json_object *tool_test_sampling(struct tool_call *tc)
{
    const char *prompt;
    if (arg_string(tc->args, "prompt", &prompt))
        return invalid_params(tc, "prompt must be a string");
    if (!client_declared(tc->s, 0))
        return undeclared(tc, "sampling");
    return ask_client(tc, &ask_llm, sampling_params(prompt));
}

#define ELICIT_USER_SCHEMA                                                                  \
    "{\"type\":\"object\",\"properties\":{"                                                 \
    "\"username\":{\"type\":\"string\",\"description\":\"User's response\"},"               \
    "\"email\":{\"type\":\"string\",\"description\":\"User's email address\"}},"            \
    "\"required\":[\"username\",\"email\"]}"

/* SEP-1034: a default for every primitive type. */
#define ELICIT_DEFAULTS_SCHEMA                                                              \
    "{\"type\":\"object\",\"properties\":{"                                                 \
    "\"name\":{\"type\":\"string\",\"description\":\"Name\",\"default\":\"John Doe\"},"     \
    "\"age\":{\"type\":\"integer\",\"description\":\"Age\",\"default\":30},"                \
    "\"score\":{\"type\":\"number\",\"description\":\"Score\",\"default\":95.5},"           \
    "\"status\":{\"type\":\"string\",\"description\":\"Status\","                           \
    "\"enum\":[\"active\",\"inactive\",\"pending\"],\"default\":\"active\"},"               \
    "\"verified\":{\"type\":\"boolean\",\"description\":\"Verified\",\"default\":true}}}"

/* SEP-1330: the five kinds of enum. */
#define ELICIT_ENUMS_SCHEMA                                                                 \
    "{\"type\":\"object\",\"properties\":{"                                                 \
    "\"untitledSingle\":{\"type\":\"string\",\"title\":\"Untitled single-select\","         \
    "\"enum\":[\"option1\",\"option2\",\"option3\"]},"                                      \
    "\"titledSingle\":{\"type\":\"string\",\"title\":\"Titled single-select\",\"oneOf\":["  \
    "{\"const\":\"value1\",\"title\":\"First Option\"},"                                    \
    "{\"const\":\"value2\",\"title\":\"Second Option\"},"                                   \
    "{\"const\":\"value3\",\"title\":\"Third Option\"}]},"                                  \
    "\"legacyEnum\":{\"type\":\"string\",\"title\":\"Legacy titled enum\","                 \
    "\"enum\":[\"opt1\",\"opt2\",\"opt3\"],"                                                \
    "\"enumNames\":[\"Option One\",\"Option Two\",\"Option Three\"]},"                      \
    "\"untitledMulti\":{\"type\":\"array\",\"title\":\"Untitled multi-select\","            \
    "\"items\":{\"type\":\"string\",\"enum\":[\"option1\",\"option2\",\"option3\"]}},"      \
    "\"titledMulti\":{\"type\":\"array\",\"title\":\"Titled multi-select\","                \
    "\"items\":{\"anyOf\":["                                                                \
    "{\"const\":\"value1\",\"title\":\"First Choice\"},"                                    \
    "{\"const\":\"value2\",\"title\":\"Second Choice\"},"                                   \
    "{\"const\":\"value3\",\"title\":\"Third Choice\"}]}}}}"

static json_object *tool_test_elicitation(struct tool_call *tc)
{
    const char *message;
    if (arg_string(tc->args, "message", &message))
        return invalid_params(tc, "message must be a string");
    if (!client_declared(tc->s, 1))
        return undeclared(tc, "elicitation");
    return ask_client(tc, &ask_user, elicitation_params(message, ELICIT_USER_SCHEMA));
}

static json_object *tool_elicitation_defaults(struct tool_call *tc)
{
    if (!client_declared(tc->s, 1))
        return undeclared(tc, "elicitation");
    return ask_client(tc, &ask_form,
                      elicitation_params("Please review and update the form fields with defaults",
                                         ELICIT_DEFAULTS_SCHEMA));
}

static json_object *tool_elicitation_enums(struct tool_call *tc)
{
    if (!client_declared(tc->s, 1))
        return undeclared(tc, "elicitation");
    return ask_client(tc, &ask_form,
                      elicitation_params("Please select options from the enum fields",
                                         ELICIT_ENUMS_SCHEMA));
}

static json_object *tool_json_schema(struct tool_call *tc)
{
    char *text = xasprintf("json_schema_2020_12_tool received: %s",
                           tc->args ? json_text(tc->args) : "{}");
    json_object *resp = rpc_result(tc->id, tool_text(text, 0));
    free(text);
    return resp;
}

/* ========================================================================
 * The 2026-07-28 fixtures, written the 2025 way.
 *
 * What the conformance suite's 2026-07-28 server scenarios (0.2.0-alpha.12,
 * --requirements 2026-07-28) call, for a 2026-07-28 client reaching this
 * 2025-era server through mod_mcp's era bridge.  Nothing here speaks
 * 2026-07-28: where a 2026 server would answer InputRequiredResult, these
 * tools send ordinary server->client requests (elicitation/create,
 * sampling/createMessage, roots/list) on the call's SSE stream and wait
 * for the client's responses; the bridge turns each round of them into an
 * InputRequiredResult and each retry's inputResponses back into responses.
 *
 * The contract with the bridge:
 *   - a request's JSON-RPC id is the key the scenario expects in
 *     inputRequests ("user_name", "capital_question", "client_roots", ...);
 *   - the requests of one round go out together, in one write, and the tool
 *     waits for all of them before it goes on (a round = one
 *     InputRequiredResult); a later round follows only after the answers;
 *   - an answer with an error, or one that is not a valid
 *     ElicitResult/CreateMessageResult/ListRootsResult, ends the call with a
 *     JSON-RPC error (-32602 for an invalid one) instead of a result;
 *   - a response with a key id goes to the newest call of the session that
 *     waits for that key; an older call waiting for the same key (a round
 *     its client abandoned) ends with error -32000 "superseded";
 *   - no answer within 30 s ends the call with error -32000.
 * ======================================================================== */

struct dialog_ask {
    const char *key;      /* also the id of our request */
    const char *method;
    const char *params;   /* JSON text */
    const char *required; /* elicitation: the field an accepted answer must carry */
};

struct dialog {
    const char *name;     /* the tool's or prompt's */
    const struct dialog_ask *rounds[DIALOG_MAX_ROUNDS + 1]; /* {0}-terminated lists; NULL ends */
    int by_capability; /* ask only for what the session's client declared at initialize */
    void (*before)(struct stream *st); /* notifications before the first round, or NULL */
    /* The result (CallToolResult, GetPromptResult) from the answers (key ->
       the client's result); may add events to the stream first. */
    json_object *(*finish)(struct stream *st, json_object *answers);
};

struct dialog_run {
    const struct dialog *d;
    int round;            /* the round being asked; -1 before the first */
    json_object *answers; /* key -> result, of every round so far */
};

static void dialog_run_free(struct dialog_run *run)
{
    if (!run)
        return;
    json_object_put(run->answers);
    free(run);
}

/* The requests a dialog asks, for its table (dialogs[], below): a round is a {0}-terminated
   list of {key (also the request's id), method, params (JSON text), the field an accepted
   elicitation must carry}. */
#define ELICIT_FORM(message, field, type, required)                                         \
    "{\"message\":\"" message "\",\"requestedSchema\":{\"type\":\"object\","               \
    "\"properties\":{\"" field "\":{\"type\":\"" type "\"}}" required "}}"
#define ASK_ELICIT(key, message, field, type)                                               \
    {key, "elicitation/create",                                                             \
     ELICIT_FORM(message, field, type, ",\"required\":[\"" field "\"]"), field}
#define ASK_SAMPLE(key, text, max_tokens)                                                   \
    {key, "sampling/createMessage",                                                         \
     "{\"messages\":[{\"role\":\"user\",\"content\":{\"type\":\"text\","                   \
     "\"text\":\"" text "\"}}],\"maxTokens\":" #max_tokens "}", NULL}
#define ASK_ROOTS {"client_roots", "roots/list", "{}", NULL}
#define ASK_NAME ASK_ELICIT("user_name", "What is your name?", "name", "string")
#define ASK_CAPITAL ASK_SAMPLE("capital_question", "What is the capital of France?", 100)
#define ROUND(...) ((const struct dialog_ask[]){__VA_ARGS__, {0}})

/* Whether the session's client declared the capability method needs. */
static int dialog_capable_locked(struct session *s, const char *method)
{
    if (!strcmp(method, "sampling/createMessage"))
        return s->client_sampling;
    if (!strcmp(method, "elicitation/create"))
        return s->client_elicitation;
    return s->client_roots;
}

/* Sends the requests of round run->round (all in one write) and registers
   their keys on the call, superseding older calls that wait for one of
   them.  Returns how many it sent. */
static int dialog_ask_round(struct stream *st)
{
    const struct dialog_ask *asks = st->dialog->d->rounds[st->dialog->round];
    struct call *c = st->call;
    int n = 0;

    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < c->nkeys; i++) {
        free(c->keys[i]);
        free(c->key_answers[i]);
        c->keys[i] = c->key_answers[i] = NULL;
    }
    c->nkeys = 0;
    for (const struct dialog_ask *a = asks; a->key && n < DIALOG_MAX_ASKS; a++) {
        if (st->dialog->d->by_capability && !dialog_capable_locked(st->s, a->method))
            continue;
        for (struct call *o = st->s->calls; o; o = o->next)
            for (int i = 0; o != c && i < o->nkeys; i++)
                if (!o->key_answers[i] && !strcmp(o->keys[i], a->key)) {
                    o->superseded = 1;
                    wake_locked(o->w);
                }
        c->keys[n++] = xstrdup(a->key);
        c->nkeys = n;
    }
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < n; i++) {
        const struct dialog_ask *a = asks;
        while (strcmp(a->key, c->keys[i])) /* c->keys[i] was taken from asks */
            a++;
        char *req = client_request(a->key, a->method, json_tokener_parse(a->params));
        stream_event_text(st, req);
        free(req);
    }
    st->due = now_ms() + SAMPLE_TIMEOUT_MS;
    return n;
}

/* Whether every key of the round is answered, or the call ended otherwise
   (see call_check_locked); g_lock held. */
static enum wait_result dialog_check_locked(struct stream *st)
{
    struct call *c = st->call;
    int missing = 0;
    if (g_stopping)
        return WAIT_ABORT;
    if (c->cancelled || st->s->terminated || client_gone(st->fd))
        return WAIT_CANCELLED;
    if (c->superseded)
        return WAIT_SUPERSEDED;
    for (int i = 0; i < c->nkeys; i++)
        missing += !c->key_answers[i];
    if (!missing)
        return WAIT_READY;
    if (now_ms() >= st->due)
        return WAIT_DUE;
    return WAIT_PENDING;
}

/* NULL if result is a valid answer to ask, else what is wrong with it. */
static const char *dialog_answer_problem(const struct dialog_ask *ask, json_object *result)
{
    if (!json_object_is_type(result, json_type_object))
        return "is not an object";
    if (!strcmp(ask->method, "elicitation/create")) {
        const char *action = member_string(result, "action");
        json_object *content = member(result, "content");
        if (!action || (strcmp(action, "accept") && strcmp(action, "decline") &&
                        strcmp(action, "cancel")))
            return "is not an ElicitResult (action must be accept, decline or cancel)";
        if (!strcmp(action, "accept") && ask->required &&
            !member(json_object_is_type(content, json_type_object) ? content : NULL,
                    ask->required))
            return "accepts without the requested field";
        return NULL;
    }
    if (!strcmp(ask->method, "sampling/createMessage"))
        return sampled_text(result) ? NULL
                                    : "is not a CreateMessageResult with text content";
    return json_object_is_type(member(result, "roots"), json_type_array)
               ? NULL
               : "is not a ListRootsResult (no roots array)";
}

/* The round's answers into run->answers; on an error or an invalid answer
   the JSON-RPC error that ends the call instead. */
static json_object *dialog_take_answers(struct stream *st, char **texts)
{
    const struct dialog_ask *asks = st->dialog->d->rounds[st->dialog->round];
    json_object *failure = NULL;
    for (int i = 0; !failure && i < st->call->nkeys; i++) {
        const struct dialog_ask *a = asks;
        json_object *msg = parse_body(texts[i], strlen(texts[i])), *err, *result, *copy = NULL;
        const char *problem;
        while (strcmp(a->key, st->call->keys[i]))
            a++;
        err = member(msg, "error");
        result = member(msg, "result");
        if (err) {
            json_object *code = member(err, "code");
            const char *m = member_string(err, "message");
            failure = rpc_error(st->req_id,
                                json_object_is_type(code, json_type_int)
                                    ? json_object_get_int(code)
                                    : -32603,
                                "%s (%s) failed: %s", a->method, a->key, m ? m : "error");
            if (member(err, "data")) {
                json_object_deep_copy(member(err, "data"), &copy, NULL);
                json_object_object_add(member(failure, "error"), "data", copy);
            }
        } else if ((problem = dialog_answer_problem(a, result))) {
            failure = rpc_error(st->req_id, -32602, "Invalid params: the answer to %s (%s) %s",
                                a->key, a->method, problem);
        } else {
            json_object_deep_copy(result, &copy, NULL);
            json_object_object_add(st->dialog->answers, a->key, copy);
        }
        json_object_put(msg);
    }
    return failure;
}

/* Producer of STREAM_DIALOG: the notifications, a round of requests, the
   wait for their answers, the next round ... the result. */
static int produce_dialog(struct stream *st)
{
    struct dialog_run *run = st->dialog;
    char *texts[DIALOG_MAX_ASKS] = {0};
    json_object *failure;
    enum wait_result r;
    int n = 0;

    if (run->round < 0) {
        if (run->d->before)
            run->d->before(st);
        run->round = 0;
        if (dialog_ask_round(st) > 0)
            return 0;
        /* by_capability, and the client declared none: nothing to ask. */
        stream_event(st, rpc_result(st->req_id, run->d->finish(st, run->answers)));
        st->done = 1;
        return 0;
    }
    pthread_mutex_lock(&g_lock);
    r = dialog_check_locked(st);
    if (r == WAIT_PENDING && park_locked(&st->w, st->due) == 0) {
        pthread_mutex_unlock(&g_lock);
        return 1;
    }
    if (r == WAIT_PENDING)
        r = WAIT_ABORT;
    if (r == WAIT_READY) {
        n = st->call->nkeys;
        for (int i = 0; i < n; i++) {
            texts[i] = st->call->key_answers[i];
            st->call->key_answers[i] = xstrdup("null"); /* answered: stays matched */
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (r == WAIT_ABORT)
        return -1;
    st->done = 1;
    if (r == WAIT_CANCELLED)
        return 0;
    if (r == WAIT_DUE) {
        stream_event(st, rpc_error(st->req_id, -32000, "no response to %s within %d s",
                                   st->call->keys[0], SAMPLE_TIMEOUT_MS / 1000));
        return 0;
    }
    if (r == WAIT_SUPERSEDED) {
        stream_event(st, rpc_error(st->req_id, -32000,
                                   "superseded: a newer call of this session asked for %s",
                                   st->call->keys[0]));
        return 0;
    }
    failure = dialog_take_answers(st, texts);
    for (int i = 0; i < n; i++)
        free(texts[i]);
    if (failure) {
        stream_event(st, failure);
        return 0;
    }
    if (run->d->rounds[run->round + 1]) {
        run->round++;
        st->done = dialog_ask_round(st) == 0;
        if (!st->done)
            return 0;
    }
    stream_event(st, rpc_result(st->req_id, run->d->finish(st, run->answers)));
    st->done = 1;
    return 0;
}

/* Starts a dialog fixture on the call's SSE stream (in every --mode: a 2025
   server sends its requests to the client on a stream). */
static json_object *run_dialog(struct request *rq, struct session *s, json_object *id,
                               const struct dialog *d, json_object *token,
                               struct stream **stream)
{
    struct stream *st = stream_new(STREAM_DIALOG, rq, s, id);
    st->dialog = xcalloc(sizeof *st->dialog);
    st->dialog->d = d;
    st->dialog->round = -1;
    st->dialog->answers = json_object_new_object();
    st->token = token ? json_object_get(token) : NULL;
    *stream = st;
    return NULL;
}

/* What the answers say. */
static const char *elicited_string(json_object *answers, const char *key, const char *field)
{
    json_object *a = member(answers, key);
    const char *action = member_string(a, "action");
    json_object *v;
    if (!action || strcmp(action, "accept"))
        return NULL;
    v = member(member(a, "content"), field);
    if (!v)
        return NULL;
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : json_text(v);
}

static const char *answer_action(json_object *answers, const char *key)
{
    const char *action = member_string(member(answers, key), "action");
    return action ? action : "none";
}

static char *roots_text(json_object *answers, const char *key)
{
    json_object *roots = member(member(answers, key), "roots");
    struct buf b = {0};
    char *text;
    for (size_t i = 0; i < json_object_array_length(roots); i++) {
        json_object *r = json_object_array_get_idx(roots, i);
        const char *uri = member_string(r, "uri"), *name = member_string(r, "name");
        char *one = xasprintf("%s%s%s%s%s", i ? ", " : "", uri ? uri : "?", name ? " (" : "",
                              name ? name : "", name ? ")" : "");
        buf_adds(&b, one);
        free(one);
    }
    text = xasprintf("%zu root(s): %s", json_object_array_length(roots), b.data ? b.data : "");
    buf_free(&b);
    return text;
}

/* A CallToolResult of one text block; frees text. */
static json_object *text_result(char *text)
{
    json_object *r = tool_text(text, 0);
    free(text);
    return r;
}

static json_object *finish_name(struct stream *st, json_object *answers)
{
    const char *name = elicited_string(answers, "user_name", "name");
    (void)st;
    if (!name)
        return text_result(xasprintf("Hello, stranger! (the user chose to %s)",
                                     answer_action(answers, "user_name")));
    return text_result(xasprintf("Hello, %s!", name));
}

static json_object *finish_capital(struct stream *st, json_object *answers)
{
    (void)st;
    return text_result(xasprintf("The model said: %s",
                                 sampled_text(member(answers, "capital_question"))));
}

static json_object *finish_roots(struct stream *st, json_object *answers)
{
    (void)st;
    return text_result(roots_text(answers, "client_roots"));
}

static json_object *finish_confirm(struct stream *st, json_object *answers)
{
    const char *ok = elicited_string(answers, "confirm", "ok");
    (void)st;
    return text_result(xasprintf("state-ok: the round trip came back to the same call "
                                 "(action=%s, ok=%s)",
                                 answer_action(answers, "confirm"), ok ? ok : "none"));
}

static json_object *finish_three(struct stream *st, json_object *answers)
{
    const char *name = elicited_string(answers, "user_name", "name");
    char *roots = roots_text(answers, "client_roots");
    json_object *r;
    (void)st;
    r = text_result(xasprintf("name: %s; greeting: %s; %s", name ? name : "(none)",
                              sampled_text(member(answers, "greeting")), roots));
    free(roots);
    return r;
}

static json_object *finish_rounds(struct stream *st, json_object *answers)
{
    const char *name = elicited_string(answers, "step1", "name");
    const char *color = elicited_string(answers, "step2", "color");
    (void)st;
    return text_result(xasprintf("%s's favorite color is %s", name ? name : "someone",
                                 color ? color : "unknown"));
}

static json_object *finish_by_capability(struct stream *st, json_object *answers)
{
    struct buf b = {0};
    json_object *r;
    (void)st;
    json_object_object_foreach(answers, key, value) {
        (void)value;
        buf_adds(&b, b.len ? ", " : "");
        buf_adds(&b, key);
    }
    r = text_result(b.len ? xasprintf("answered: %s", b.data)
                          : xstrdup("the client declared nothing to ask it: done without asking"));
    buf_free(&b);
    return r;
}

static json_object *finish_sampled(struct stream *st, json_object *answers)
{
    (void)st;
    return text_result(xasprintf("sampled: %s", sampled_text(member(answers, "capital_question"))));
}

static json_object *finish_prompt(struct stream *st, json_object *answers)
{
    const char *context = elicited_string(answers, "user_context", "context");
    json_object *result = json_object_new_object(), *list = json_object_new_array();
    json_object *m = json_object_new_object();
    char *text = xasprintf("Write a short poem about: %s", context ? context : "anything");
    (void)st;
    json_object_object_add(m, "role", json_object_new_string("user"));
    json_object_object_add(m, "content", text_block(text));
    json_object_array_add(list, m);
    json_object_object_add(result, "description",
                           json_object_new_string("A prompt built from the user's answer"));
    json_object_object_add(result, "messages", list);
    free(text);
    return result;
}

/* test_streaming_elicitation: progress 1 of 2 (with a progressToken) and an
   info log (filtered by the session's level) before the question, progress
   2 of 2 after it. */
static void streaming_before(struct stream *st)
{
    if (st->token)
        stream_event(st, progress_notification(st->token, 1, 2, "asking the user"));
    if (session_logs(st->s, LOG_INFO))
        stream_event(st, log_message("test_streaming_elicitation", LOG_INFO,
                                     "waiting for the user's answer"));
}

static json_object *finish_streaming(struct stream *st, json_object *answers)
{
    json_object *a = member(answers, "user_note");
    if (st->token)
        stream_event(st, progress_notification(st->token, 2, 2, "answered"));
    return text_result(xasprintf("thanks: action=%s, content=%s", answer_action(answers, "user_note"),
                                 member(a, "content") ? json_text(member(a, "content")) : "{}"));
}

/* The dialog fixtures: (tool or prompt, the requests it asks round by round, its result). */
static const struct dialog dialogs[] = {
    {.name = "test_input_required_result_elicitation", .rounds = {ROUND(ASK_NAME)},
     .finish = finish_name},
    {.name = "test_input_required_result_sampling", .rounds = {ROUND(ASK_CAPITAL)},
     .finish = finish_capital},
    {.name = "test_input_required_result_list_roots", .rounds = {ROUND(ASK_ROOTS)},
     .finish = finish_roots},
    /* request_state and tampered_state: the requestState is the bridge's (its single-use
       token); the backend side is one confirmation round. */
    {.name = "test_input_required_result_request_state",
     .rounds = {ROUND(ASK_ELICIT("confirm", "Please confirm", "ok", "boolean"))},
     .finish = finish_confirm},
    {.name = "test_input_required_result_tampered_state",
     .rounds = {ROUND(ASK_ELICIT("confirm", "Please confirm", "ok", "boolean"))},
     .finish = finish_confirm},
    {.name = "test_input_required_result_multiple_inputs",
     .rounds = {ROUND(ASK_NAME, ASK_SAMPLE("greeting", "Generate a greeting", 50), ASK_ROOTS)},
     .finish = finish_three},
    {.name = "test_input_required_result_multi_round",
     .rounds = {ROUND(ASK_ELICIT("step1", "Step 1: What is your name?", "name", "string")),
                ROUND(ASK_ELICIT("step2", "Step 2: What is your favorite color?", "color",
                                 "string"))},
     .finish = finish_rounds},
    {.name = "test_input_required_result_capabilities",
     .rounds = {ROUND(ASK_CAPITAL, ASK_NAME, ASK_ROOTS)}, .by_capability = 1,
     .finish = finish_by_capability},
    /* Asks for sampling whatever the client declared: the one fixture that knowingly breaks a
       2025 rule, so that a gateway can see a request the client cannot answer (the bridge
       answers -32021 for it). */
    {.name = "test_missing_capability", .rounds = {ROUND(ASK_CAPITAL)}, .finish = finish_sampled},
    {.name = "test_streaming_elicitation",
     .rounds = {ROUND({"user_note", "elicitation/create",
                       ELICIT_FORM("Anything to add?", "note", "string", ""), NULL})},
     .before = streaming_before, .finish = finish_streaming},
    {.name = "test_input_required_result_prompt",
     .rounds = {ROUND(ASK_ELICIT("user_context", "What context should the prompt use?",
                                 "context", "string"))},
     .finish = finish_prompt},
};

static const struct dialog *find_dialog(const char *name)
{
    for (size_t i = 0; i < NELEM(dialogs); i++)
        if (!strcmp(dialogs[i].name, name))
            return &dialogs[i];
    return NULL;
}

/* Every params text parses to an object: checked at startup with the other tables. */
static int dialogs_ok(void)
{
    int ok = 1;
    for (size_t i = 0; i < NELEM(dialogs); i++)
        for (int r = 0; dialogs[i].rounds[r]; r++)
            for (const struct dialog_ask *a = dialogs[i].rounds[r]; a->key; a++) {
                json_object *o = json_tokener_parse(a->params);
                if (!json_object_is_type(o, json_type_object)) {
                    fprintf(stderr, "mcp-test-backend: bad JSON in a dialog: %s\n", a->params);
                    ok = 0;
                }
                json_object_put(o);
            }
    return ok;
}

/* The one handler of the dialog tools: the tool's dialog on the call's SSE stream. */
static json_object *tool_dialog(struct tool_call *tc)
{
    return run_dialog(tc->rq, tc->s, tc->id, find_dialog(tc->name), progress_token(tc),
                      tc->stream);
}

/* test_logging_tool: one message at each of debug, info, notice, warning
   and error, 20 ms apart, each only if the session's logging/setLevel lets
   it through; then the result. */
static void level_step(struct stream *st)
{
    int level = st->step - 1;
    char text[64];
    snprintf(text, sizeof text, "a %s message", log_levels[level]);
    if (session_logs(st->s, level))
        stream_event(st, log_message("test_logging_tool", level, text));
}

static json_object *level_result(int count)
{
    (void)count;
    return tool_text("test_logging_tool done", 0);
}

static const struct timed timed_levels = {level_step, level_result};

static json_object *tool_logging_levels(struct tool_call *tc)
{
    return run_timed(tc, &timed_levels, 5, 20, NULL);
}

/* The list_changed triggers: the notification goes to every session's
   standalone GET stream (queued where none is open yet, as notify does). */
static json_object *broadcast(struct tool_call *tc, const char *method)
{
    json_object *msg = rpc_notification(method, json_object_new_object());
    int open = 0, queued = 0;
    char *text;
    pthread_mutex_lock(&g_lock);
    for (struct session *s = cfg.stateless ? g_anon : g_sessions; s;
         s = cfg.stateless ? NULL : s->next) {
        if (s->stream_open)
            open++;
        else
            queued++;
        queue_push_locked(s, xstrdup(json_text(msg)));
    }
    pthread_mutex_unlock(&g_lock);
    json_object_put(msg);
    text = xasprintf("%s: sent on %d open stream(s), queued for %d session(s)", method, open,
                     queued);
    return rpc_result(tc->id, text_result(text));
}

static json_object *tool_trigger_tool_change(struct tool_call *tc)
{
    return broadcast(tc, "notifications/tools/list_changed");
}

static json_object *tool_trigger_prompt_change(struct tool_call *tc)
{
    return broadcast(tc, "notifications/prompts/list_changed");
}

/* test_custom_header: its argument region is annotated x-mcp-header. */
static json_object *tool_custom_header(struct tool_call *tc)
{
    const char *region;
    if (arg_string(tc->args, "region", &region))
        return invalid_params(tc, "region must be a string");
    return rpc_result(tc->id, text_result(xasprintf("region: %s", region)));
}

/* ========================================================================
 * End of the 2026-07-28 fixtures.
 * ======================================================================== */

/* --- the table --- */

#define NO_ARGS "{\"type\":\"object\",\"properties\":{},\"required\":[]}"
#define STRING_ARG(name, what)                                                              \
    "{\"type\":\"object\",\"properties\":{\"" name "\":{\"type\":\"string\","               \
    "\"description\":\"" what "\"}},\"required\":[\"" name "\"]}"

/* SEP-1613: JSON Schema 2020-12 keywords that must reach the client intact; SEP-2106 (the
   2026-07-28 suite): $anchor, allOf/anyOf and if/then/else too. */
#define SCHEMA_2020_12                                                                      \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","    \
    "\"$defs\":{\"address\":{\"$anchor\":\"addressDef\",\"type\":\"object\",\"properties\":{" \
    "\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"}}}},"                   \
    "\"properties\":{\"name\":{\"type\":\"string\"},"                                       \
    "\"address\":{\"$ref\":\"#/$defs/address\"},"                                            \
    "\"contactMethod\":{\"type\":\"string\",\"enum\":[\"phone\",\"email\"]},"                 \
    "\"phone\":{\"type\":\"string\"},\"email\":{\"type\":\"string\"}},"                      \
    "\"allOf\":[{\"anyOf\":[{\"required\":[\"phone\"]},{\"required\":[\"email\"]}]}],"        \
    "\"if\":{\"properties\":{\"contactMethod\":{\"const\":\"phone\"}},"                       \
    "\"required\":[\"contactMethod\"]},\"then\":{\"required\":[\"phone\"]},"                   \
    "\"else\":{\"required\":[\"email\"]},\"additionalProperties\":false}"

/* SEP-2243 (2026-07-28): a string argument that a client also sends as the header
   Mcp-Param-Region; the server side of the check is the bridge's. */
#define SCHEMA_HEADER_PARAM                                                                 \
    "{\"type\":\"object\",\"properties\":{\"region\":{\"type\":\"string\","                  \
    "\"description\":\"Region, mirrored in the Mcp-Param-Region header\","                  \
    "\"x-mcp-header\":\"Region\"}},\"required\":[\"region\"]}"

static const struct tool {
    const char *name, *description;
    const char *input_schema, *output_schema; /* JSON Schema text */
    int sse_only; /* answered by streaming, so impossible inside a batch */
    json_object *(*fn)(struct tool_call *tc);
} tools[] = {
    {"echo", "Returns the given text unchanged.",
     "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
     "\"description\":\"Text to echo\"}},\"required\":[\"text\"]}",
     NULL, 0, tool_echo},
    {"add", "Adds two numbers.",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},"
     "\"b\":{\"type\":\"number\"}},\"required\":[\"a\",\"b\"]}",
     "{\"type\":\"object\",\"properties\":{\"sum\":{\"type\":\"number\"}},"
     "\"required\":[\"sum\"]}",
     0, tool_add},
    {"slow", "Streams count progress (or log) notifications interval_ms apart, then a result.",
     "{\"type\":\"object\",\"properties\":{"
     "\"count\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000,\"default\":3},"
     "\"interval_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":10000,\"default\":200}},"
     "\"required\":[]}",
     NULL, 1, tool_slow},
    {"session_info", "Reports what this backend has received on the current session.", NO_ARGS,
     NULL, 0, tool_session_info},
    {"fail", "Always returns a tool error.", NO_ARGS, NULL, 0, tool_fail},
    {"sample", "Asks the client to sample an LLM (sampling/createMessage) and returns its text.",
     "{\"type\":\"object\",\"properties\":{\"prompt\":{\"type\":\"string\"}},"
     "\"required\":[\"prompt\"]}",
     NULL, 1, tool_sample},
    {"notify", "Sends a log notification on the session's standalone GET stream.",
     "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
     "\"required\":[\"text\"]}",
     NULL, 0, tool_notify},
    /* The era bridge's probe. */
    {"touch_resource", "Sends notifications/resources/updated for a subscribed uri on the GET stream.",
     "{\"type\":\"object\",\"properties\":{\"uri\":{\"type\":\"string\"}},"
     "\"required\":[\"uri\"]}",
     NULL, 0, tool_touch_resource},
    /* The conformance suite's. */
    {"test_simple_text", "Returns a simple text block.", NO_ARGS, NULL, 0, tool_simple_text},
    {"test_image_content", "Returns an image block (a 1x1 PNG).", NO_ARGS, NULL, 0, tool_image},
    {"test_audio_content", "Returns an audio block (a tiny WAV).", NO_ARGS, NULL, 0, tool_audio},
    {"test_embedded_resource", "Returns an embedded text resource.", NO_ARGS, NULL, 0,
     tool_embedded_resource},
    {"test_multiple_content_types", "Returns a text, an image and a resource block.", NO_ARGS,
     NULL, 0, tool_mixed_content},
    {"test_tool_with_logging", "Sends three info log messages 50 ms apart, then a result.",
     NO_ARGS, NULL, 1, tool_with_logging},
    {"test_error_handling", "Always returns a tool error.", NO_ARGS, NULL, 0, tool_error_handling},
    {"test_tool_with_progress",
     "Reports progress 0, 50 and 100 of 100, 50 ms apart (with a progressToken), then a result.",
     NO_ARGS, NULL, 1, tool_with_progress},
    {"test_sampling", "Asks the client to sample an LLM and returns its answer.",
     STRING_ARG("prompt", "The prompt to send to the LLM"), NULL, 1, tool_test_sampling},
    {"test_elicitation", "Asks the client for a username and an email address.",
     STRING_ARG("message", "The message to show the user"), NULL, 1, tool_test_elicitation},
    {"test_elicitation_sep1034_defaults",
     "Elicits a form whose fields of every primitive type have defaults (SEP-1034).", NO_ARGS,
     NULL, 1, tool_elicitation_defaults},
    {"test_elicitation_sep1330_enums",
     "Elicits a form with the five kinds of enum field (SEP-1330).", NO_ARGS, NULL, 1,
     tool_elicitation_enums},
    {"json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12, NULL,
     0, tool_json_schema},
    {"test_reconnection",
     "SSE: a priming event (SEP-1699), then the result delay_ms later (default "
     STR(RECONNECT_DELAY_MS) ").",
     "{\"type\":\"object\",\"properties\":{\"delay_ms\":{\"type\":\"integer\","
     "\"minimum\":0,\"maximum\":10000,\"default\":" STR(RECONNECT_DELAY_MS) "}}}",
     NULL, 1, tool_reconnection},
    /* The 2026-07-28 scenarios' (see "The 2026-07-28 fixtures"; what they ask: dialogs[]). */
    {"test_input_required_result_elicitation",
     "Asks the client for its name (elicitation/create, id user_name), then greets it.", NO_ARGS,
     NULL, 1, tool_dialog},
    {"test_input_required_result_sampling",
     "Asks the client to sample (sampling/createMessage, id capital_question).", NO_ARGS, NULL,
     1, tool_dialog},
    {"test_input_required_result_list_roots",
     "Asks the client for its roots (roots/list, id client_roots).", NO_ARGS, NULL, 1,
     tool_dialog},
    {"test_input_required_result_request_state",
     "Asks the client for a confirmation (elicitation/create, id confirm).", NO_ARGS, NULL, 1,
     tool_dialog},
    {"test_input_required_result_tampered_state",
     "Asks the client for a confirmation (elicitation/create, id confirm).", NO_ARGS, NULL, 1,
     tool_dialog},
    {"test_input_required_result_multiple_inputs",
     "Asks three things at once: user_name (elicitation), greeting (sampling), client_roots "
     "(roots/list).",
     NO_ARGS, NULL, 1, tool_dialog},
    {"test_input_required_result_multi_round",
     "Asks step1 (a name), then, once answered, step2 (a color).", NO_ARGS, NULL, 1,
     tool_dialog},
    {"test_input_required_result_capabilities",
     "Asks only what the client declared at initialize: capital_question (sampling), user_name "
     "(elicitation), client_roots (roots).",
     NO_ARGS, NULL, 1, tool_dialog},
    {"test_missing_capability",
     "Asks for sampling (id capital_question) even when the client did not declare it.",
     NO_ARGS, NULL, 1, tool_dialog},
    {"test_streaming_elicitation",
     "Progress 1/2 (with a progressToken) and an info log, then asks user_note (elicitation).",
     NO_ARGS, NULL, 1, tool_dialog},
    {"test_logging_tool",
     "Logs at debug, info, notice, warning and error, as far as logging/setLevel lets it.",
     NO_ARGS, NULL, 1, tool_logging_levels},
    {"test_trigger_tool_change",
     "Sends notifications/tools/list_changed on every session's GET stream.", NO_ARGS, NULL, 0,
     tool_trigger_tool_change},
    {"test_trigger_prompt_change",
     "Sends notifications/prompts/list_changed on every session's GET stream.", NO_ARGS, NULL,
     0, tool_trigger_prompt_change},
    {"test_custom_header", "Returns its region argument (x-mcp-header: Region).",
     SCHEMA_HEADER_PARAM, NULL, 0, tool_custom_header},
};

/* tools/list from the tool at index first on: the whole table, or with --page-size N at most
   N tools and a nextCursor (the index of the next one, as a decimal string) while more are
   left. */
static json_object *tools_list(size_t first)
{
    json_object *list = json_object_new_array(), *result = json_object_new_object();
    size_t end = NELEM(tools);
    if (g_page_size && first + g_page_size < end)
        end = first + g_page_size;
    for (size_t i = first; i < end; i++) {
        json_object *t = json_object_new_object();
        json_object_object_add(t, "name", json_object_new_string(tools[i].name));
        json_object_object_add(t, "description", json_object_new_string(tools[i].description));
        json_object_object_add(t, "inputSchema", json_tokener_parse(tools[i].input_schema));
        if (tools[i].output_schema)
            json_object_object_add(t, "outputSchema", json_tokener_parse(tools[i].output_schema));
        json_object_array_add(list, t);
    }
    json_object_object_add(result, "tools", list);
    if (end < NELEM(tools)) {
        char next[32];
        snprintf(next, sizeof next, "%zu", end);
        json_object_object_add(result, "nextCursor", json_object_new_string(next));
    }
    return result;
}

/* ------------------------------------------------------------------------
 * Prompts.
 * ------------------------------------------------------------------------ */

/* A PromptMessage list: the blocks (NULL-terminated), each a user message. */
static json_object *user_messages(json_object *block, ...)
{
    json_object *list = json_object_new_array();
    va_list ap;
    va_start(ap, block);
    for (; block; block = va_arg(ap, json_object *)) {
        json_object *m = json_object_new_object();
        json_object_object_add(m, "role", json_object_new_string("user"));
        json_object_object_add(m, "content", block);
        json_object_array_add(list, m);
    }
    va_end(ap);
    return list;
}

static json_object *prompt_simple(json_object *args)
{
    (void)args;
    return user_messages(text_block("This is a simple prompt for testing."), NULL);
}

static json_object *prompt_with_arguments(json_object *args)
{
    char *text = xasprintf("Prompt with arguments: arg1='%s', arg2='%s'",
                           member_string(args, "arg1"), member_string(args, "arg2"));
    json_object *list = user_messages(text_block(text), NULL);
    free(text);
    return list;
}

static json_object *prompt_embedded_resource(json_object *args)
{
    return user_messages(resource_block(member_string(args, "resourceUri"), "text/plain",
                                        "Embedded resource content for testing."),
                         text_block("Please process the embedded resource above."), NULL);
}

static json_object *prompt_with_image(json_object *args)
{
    (void)args;
    return user_messages(media_block("image", "image/png", PNG_1X1),
                         text_block("Please analyze the image above."), NULL);
}

static const struct prompt {
    const char *name, *description;
    const char *arguments; /* JSON text of the PromptArgument list, or NULL */
    json_object *(*messages)(json_object *args); /* required arguments are there; NULL: a
                                                   * dialog asks the client first (dialogs[]) */
} prompts[] = {
    {"test_simple_prompt", "A simple prompt without arguments", NULL, prompt_simple},
    {"test_prompt_with_arguments", "A prompt with two required arguments",
     "[{\"name\":\"arg1\",\"description\":\"First test argument\",\"required\":true},"
     "{\"name\":\"arg2\",\"description\":\"Second test argument\",\"required\":true}]",
     prompt_with_arguments},
    {"test_prompt_with_embedded_resource", "A prompt that embeds the resource it is given",
     "[{\"name\":\"resourceUri\",\"description\":\"URI of the resource to embed\","
     "\"required\":true}]",
     prompt_embedded_resource},
    {"test_prompt_with_image", "A prompt with an image", NULL, prompt_with_image},
    {"test_input_required_result_prompt",
     "Asks the client (elicitation/create, id user_context) what the prompt should be about",
     NULL, NULL},
};

static const struct prompt *find_prompt(const char *name)
{
    for (size_t i = 0; name && i < NELEM(prompts); i++)
        if (!strcmp(prompts[i].name, name))
            return &prompts[i];
    return NULL;
}

static json_object *prompts_list(void)
{
    json_object *list = json_object_new_array(), *result = json_object_new_object();
    for (size_t i = 0; i < NELEM(prompts); i++) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "name", json_object_new_string(prompts[i].name));
        json_object_object_add(p, "description", json_object_new_string(prompts[i].description));
        if (prompts[i].arguments)
            json_object_object_add(p, "arguments", json_tokener_parse(prompts[i].arguments));
        json_object_array_add(list, p);
    }
    json_object_object_add(result, "prompts", list);
    return result;
}

/* NULL if the arguments fit the prompt, else what is wrong with them. */
static const char *prompt_args_problem(const struct prompt *p, json_object *args)
{
    json_object *decl;
    const char *problem = NULL;
    if (args && !json_object_is_type(args, json_type_object))
        return "arguments must be an object";
    if (args) {
        json_object_object_foreach(args, key, value) {
            (void)key;
            if (!json_object_is_type(value, json_type_string))
                return "argument values must be strings";
        }
    }
    if (!p->arguments)
        return NULL;
    decl = json_tokener_parse(p->arguments);
    for (size_t i = 0; !problem && i < json_object_array_length(decl); i++) {
        json_object *a = json_object_array_get_idx(decl, i);
        if (json_object_get_boolean(member(a, "required")) &&
            !member(args, member_string(a, "name")))
            problem = "a required argument is missing";
    }
    json_object_put(decl);
    return problem;
}

/* ------------------------------------------------------------------------
 * Resources: a few fixed ones and the template test://template/{id}/data.
 * ------------------------------------------------------------------------ */
static const struct resource {
    const char *uri, *name, *description, *mime_type;
    const char *text, *blob; /* one of them */
} resources[] = {
    {"test://static-text", "static-text", "A static text resource", "text/plain",
     "This is the content of the static text resource.", NULL},
    {"test://static-binary", "static-binary", "A static binary resource (a 1x1 PNG)",
     "image/png", NULL, PNG_1X1},
    {"test://watched-resource", "watched-resource", "A resource to subscribe to", "text/plain",
     "This is the watched resource.", NULL},
};

#define TEMPLATE_URI    "test://template/{id}/data"
#define TEMPLATE_PREFIX "test://template/"
#define TEMPLATE_SUFFIX "/data"
#define TEMPLATE_ID_MAX 64

/* The {id} of a URI the template matches (1..64 URI-unreserved characters),
   copied to id; -1 if it does not match. */
static int template_id(const char *uri, char id[TEMPLATE_ID_MAX + 1])
{
    size_t plen = strlen(TEMPLATE_PREFIX), slen = strlen(TEMPLATE_SUFFIX), n;
    if (strncmp(uri, TEMPLATE_PREFIX, plen))
        return -1;
    uri += plen;
    n = strspn(uri, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~");
    if (n == 0 || n > TEMPLATE_ID_MAX || strcmp(uri + n, TEMPLATE_SUFFIX) || strlen(uri) != n + slen)
        return -1;
    memcpy(id, uri, n);
    id[n] = '\0';
    return 0;
}

/* The ReadResourceResult contents for uri, or NULL if there is no such
   resource. */
static json_object *resource_contents(const char *uri)
{
    json_object *c = NULL, *data, *list;
    char id[TEMPLATE_ID_MAX + 1];
    for (size_t i = 0; i < NELEM(resources); i++) {
        if (strcmp(resources[i].uri, uri))
            continue;
        c = json_object_new_object();
        json_object_object_add(c, "uri", json_object_new_string(uri));
        json_object_object_add(c, "mimeType", json_object_new_string(resources[i].mime_type));
        if (resources[i].text)
            json_object_object_add(c, "text", json_object_new_string(resources[i].text));
        else
            json_object_object_add(c, "blob", json_object_new_string(resources[i].blob));
        break;
    }
    if (!c && template_id(uri, id) == 0) {
        char *text = xasprintf("Data for ID: %s", id);
        data = json_object_new_object();
        json_object_object_add(data, "id", json_object_new_string(id));
        json_object_object_add(data, "templateTest", json_object_new_boolean(1));
        json_object_object_add(data, "data", json_object_new_string(text));
        free(text);
        c = json_object_new_object();
        json_object_object_add(c, "uri", json_object_new_string(uri));
        json_object_object_add(c, "mimeType", json_object_new_string("application/json"));
        json_object_object_add(c, "text", json_object_new_string(json_text(data)));
        json_object_put(data);
    }
    if (!c)
        return NULL;
    list = json_object_new_array();
    json_object_array_add(list, c);
    return list;
}

static json_object *resources_list(void)
{
    json_object *list = json_object_new_array(), *result = json_object_new_object();
    for (size_t i = 0; i < NELEM(resources); i++) {
        json_object *r = json_object_new_object();
        json_object_object_add(r, "uri", json_object_new_string(resources[i].uri));
        json_object_object_add(r, "name", json_object_new_string(resources[i].name));
        json_object_object_add(r, "description", json_object_new_string(resources[i].description));
        json_object_object_add(r, "mimeType", json_object_new_string(resources[i].mime_type));
        json_object_array_add(list, r);
    }
    json_object_object_add(result, "resources", list);
    return result;
}

static json_object *resource_templates_list(void)
{
    json_object *list = json_object_new_array(), *result = json_object_new_object();
    json_object *t = json_object_new_object();
    json_object_object_add(t, "uriTemplate", json_object_new_string(TEMPLATE_URI));
    json_object_object_add(t, "name", json_object_new_string("template"));
    json_object_object_add(t, "description",
                           json_object_new_string("JSON data for any id (URI-unreserved, 1..64)"));
    json_object_object_add(t, "mimeType", json_object_new_string("application/json"));
    json_object_array_add(list, t);
    json_object_object_add(result, "resourceTemplates", list);
    return result;
}

/* ------------------------------------------------------------------------
 * Completion (completion/complete): fixed candidates per argument, those
 * starting with what the client typed.
 * ------------------------------------------------------------------------ */
static const char *const arg1_values[] = {"hello", "help", "test", "testValue1", "testing"};
static const char *const arg2_values[] = {"world", "word", "test", "testValue2"};
static const char *const id_values[] = {"1", "2", "3", "42", "123"};

static const struct completion {
    const char *ref_type, *ref, *argument;
    const char *const *values;
    size_t n;
} completions[] = {
    {"ref/prompt", "test_prompt_with_arguments", "arg1", arg1_values, NELEM(arg1_values)},
    {"ref/prompt", "test_prompt_with_arguments", "arg2", arg2_values, NELEM(arg2_values)},
    {"ref/resource", TEMPLATE_URI, "id", id_values, NELEM(id_values)},
};

/* Whether ref names a prompt or the resource template. */
static int known_ref(const char *type, const char *ref)
{
    if (!type || !ref)
        return 0;
    if (!strcmp(type, "ref/prompt"))
        return find_prompt(ref) != NULL;
    return !strcmp(type, "ref/resource") && !strcmp(ref, TEMPLATE_URI);
}

/* The CompleteResult; an argument without candidates gets none. */
static json_object *complete(const char *type, const char *ref, const char *argument,
                             const char *prefix)
{
    json_object *values = json_object_new_array(), *c = json_object_new_object();
    json_object *result = json_object_new_object();
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < NELEM(completions); i++) {
        const struct completion *k = &completions[i];
        if (strcmp(k->ref_type, type) || strcmp(k->ref, ref) || strcmp(k->argument, argument))
            continue;
        for (size_t j = 0; j < k->n && json_object_array_length(values) < MAX_COMPLETIONS; j++)
            if (!strncmp(k->values[j], prefix, plen))
                json_object_array_add(values, json_object_new_string(k->values[j]));
    }
    json_object_object_add(c, "total", json_object_new_int((int)json_object_array_length(values)));
    json_object_object_add(c, "values", values);
    json_object_object_add(c, "hasMore", json_object_new_boolean(0));
    json_object_object_add(result, "completion", c);
    return result;
}

/* ------------------------------------------------------------------------
 * JSON-RPC method dispatch: a table of methods, each with a small handler.
 * ------------------------------------------------------------------------ */
struct rpc {
    struct request *rq;
    struct session *s;
    json_object *msg, *params, *id;
    int in_batch;
    struct stream **stream; /* NULL inside a batch */
};

static json_object *bad_params(struct rpc *c, const char *what)
{
    return rpc_error(c->id, -32602, "Invalid params: %s", what);
}

static json_object *m_ping(struct rpc *c)
{
    return rpc_result(c->id, json_object_new_object());
}

static json_object *m_set_level(struct rpc *c)
{
    int level = log_level_index(member_string(c->params, "level"));
    if (level < 0)
        return bad_params(c, "level must be one of debug, info, notice, warning, error, "
                             "critical, alert, emergency");
    pthread_mutex_lock(&g_lock);
    c->s->log_level = level;
    pthread_mutex_unlock(&g_lock);
    return rpc_result(c->id, json_object_new_object());
}

static json_object *m_tools_list(struct rpc *c)
{
    json_object *cursor = member(c->params, "cursor");
    size_t first = 0;
    if (cursor) {
        /* Only a cursor this server gave (--page-size): the decimal index of a tool. */
        const char *text = json_object_is_type(cursor, json_type_string)
                               ? json_object_get_string(cursor) : "";
        char *end;
        unsigned long n = strtoul(text, &end, 10);
        if (!g_page_size || !*text || *end || *text == '-' || *text == '+' || n == 0 ||
            n >= NELEM(tools))
            return bad_params(c, "cursor is not one this server gave");
        first = (size_t)n;
    }
    return rpc_result(c->id, tools_list(first));
}

static json_object *m_tools_call(struct rpc *c)
{
    json_object *args = member(c->params, "arguments");
    const char *name = member_string(c->params, "name");
    struct tool_call tc = {c->rq, c->s, c->id, args, member(c->params, "_meta"), c->stream,
                           name};

    if (!name)
        return bad_params(c, "tool name is required");
    if (!c->in_batch) {
        size_t used = strlen(c->rq->rpc);
        snprintf(c->rq->rpc + used, sizeof c->rq->rpc - used, ":%s", name);
    }
    if (args && !json_object_is_type(args, json_type_object))
        return bad_params(c, "arguments must be an object");
    for (size_t i = 0; i < NELEM(tools); i++) {
        if (strcmp(tools[i].name, name))
            continue;
        if (tools[i].sse_only && c->in_batch)
            return rpc_error(c->id, -32600, "not supported in a batch");
        return tools[i].fn(&tc);
    }
    return rpc_error(c->id, -32602, "Unknown tool: %s", name);
}

static json_object *m_prompts_list(struct rpc *c)
{
    return rpc_result(c->id, prompts_list());
}

static json_object *m_prompts_get(struct rpc *c)
{
    const char *name = member_string(c->params, "name"), *problem;
    const struct prompt *p = find_prompt(name);
    json_object *args = member(c->params, "arguments"), *result;

    if (!name)
        return bad_params(c, "prompt name is required");
    if (!p)
        return rpc_error(c->id, -32602, "Unknown prompt: %s", name);
    if ((problem = prompt_args_problem(p, args)))
        return bad_params(c, problem);
    if (!p->messages) {
        if (!c->stream)
            return rpc_error(c->id, -32600, "not supported in a batch");
        return run_dialog(c->rq, c->s, c->id, find_dialog(name), NULL, c->stream);
    }
    result = json_object_new_object();
    json_object_object_add(result, "description", json_object_new_string(p->description));
    json_object_object_add(result, "messages", p->messages(args));
    return rpc_result(c->id, result);
}

static json_object *m_resources_list(struct rpc *c)
{
    return rpc_result(c->id, resources_list());
}

static json_object *m_templates_list(struct rpc *c)
{
    return rpc_result(c->id, resource_templates_list());
}

static json_object *m_resources_read(struct rpc *c)
{
    const char *uri = member_string(c->params, "uri");
    json_object *contents, *result;
    if (!uri)
        return bad_params(c, "uri must be a string");
    if (!(contents = resource_contents(uri))) {
        json_object *err = rpc_error(c->id, -32002, "Resource not found: %s", uri);
        json_object *data = json_object_new_object();
        json_object_object_add(data, "uri", json_object_new_string(uri));
        json_object_object_add(member(err, "error"), "data", data);
        return err;
    }
    result = json_object_new_object();
    json_object_object_add(result, "contents", contents);
    return rpc_result(c->id, result);
}

/* resources/subscribe and resources/unsubscribe: the session's set of URIs. */
static json_object *subscription(struct rpc *c, int subscribe)
{
    const char *uri = member_string(c->params, "uri");
    json_object *contents;
    int full = 0;
    if (!uri)
        return bad_params(c, "uri must be a string");
    if (subscribe) {
        if (!(contents = resource_contents(uri)))
            return rpc_error(c->id, -32002, "Resource not found: %s", uri);
        json_object_put(contents);
    }
    pthread_mutex_lock(&g_lock);
    if (!subscribe)
        json_object_object_del(c->s->subscriptions, uri);
    else if (json_object_object_get_ex(c->s->subscriptions, uri, NULL))
        ;
    else if (json_object_object_length(c->s->subscriptions) >= MAX_SUBSCRIPTIONS)
        full = 1;
    else
        json_object_object_add(c->s->subscriptions, uri, json_object_new_boolean(1));
    pthread_mutex_unlock(&g_lock);
    if (full)
        return rpc_error(c->id, -32000, "Too many subscriptions (at most %d)", MAX_SUBSCRIPTIONS);
    return rpc_result(c->id, json_object_new_object());
}

static json_object *m_subscribe(struct rpc *c)
{
    return subscription(c, 1);
}

static json_object *m_unsubscribe(struct rpc *c)
{
    return subscription(c, 0);
}

static json_object *m_complete(struct rpc *c)
{
    json_object *ref = member(c->params, "ref"), *argument = member(c->params, "argument");
    const char *type = member_string(ref, "type"), *name = member_string(argument, "name");
    const char *value = member_string(argument, "value");
    const char *target = member_string(ref, type && !strcmp(type, "ref/resource") ? "uri" : "name");

    if (!known_ref(type, target))
        return bad_params(c, "ref must name a prompt (ref/prompt) or the resource template "
                             "(ref/resource)");
    if (!name || !value)
        return bad_params(c, "argument needs a name and a value");
    return rpc_result(c->id, complete(type, target, name, value));
}

static const struct method {
    const char *name;
    json_object *(*fn)(struct rpc *c);
} methods[] = {
    {"ping", m_ping},
    {"logging/setLevel", m_set_level},
    {"tools/list", m_tools_list},
    {"tools/call", m_tools_call},
    {"prompts/list", m_prompts_list},
    {"prompts/get", m_prompts_get},
    {"resources/list", m_resources_list},
    {"resources/templates/list", m_templates_list},
    {"resources/read", m_resources_read},
    {"resources/subscribe", m_subscribe},
    {"resources/unsubscribe", m_unsubscribe},
    {"completion/complete", m_complete},
};

/* Answers one request on an existing session; initialize only gets here from
   inside a batch.  Returns the response, or NULL when *stream was set
   (streamed tools outside batches). */
static json_object *handle_method(struct request *rq, struct session *s, json_object *msg,
                                  const char *method, json_object *id, int in_batch,
                                  struct stream **stream)
{
    struct rpc c = {rq, s, msg, member(msg, "params"), id, in_batch, stream};
    if (!strcmp(method, "initialize"))
        return rpc_error(id, -32600, "initialize must not be part of a batch");
    for (size_t i = 0; i < NELEM(methods); i++)
        if (!strcmp(methods[i].name, method))
            return methods[i].fn(&c);
    return rpc_error(id, -32601, "Method not found: %s", method);
}

/* The protocolVersion we answer: the client's, if we speak it. */
static const char *negotiated_version(json_object *msg)
{
    const char *asked = member_string(member(msg, "params"), "protocolVersion");
    return one_of(asked, init_versions, NELEM(init_versions)) ? asked : LATEST_VERSION;
}

static json_object *flag_object(const char *key, int value)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, key, json_object_new_boolean(value));
    return o;
}

static json_object *initialize_result(json_object *msg)
{
    json_object *r = json_object_new_object(), *caps = json_object_new_object();
    json_object *resources_cap = flag_object("subscribe", 1), *info = json_object_new_object();
    json_object_object_add(r, "protocolVersion", json_object_new_string(negotiated_version(msg)));
    /* listChanged: test_trigger_tool_change and test_trigger_prompt_change. */
    json_object_object_add(caps, "tools", flag_object("listChanged", 1));
    json_object_object_add(caps, "logging", json_object_new_object());
    json_object_object_add(caps, "prompts", flag_object("listChanged", 1));
    json_object_object_add(resources_cap, "listChanged", json_object_new_boolean(0));
    json_object_object_add(caps, "resources", resources_cap);
    json_object_object_add(caps, "completions", json_object_new_object());
    json_object_object_add(r, "capabilities", caps);
    json_object_object_add(info, "name", json_object_new_string("mcp-test-backend"));
    json_object_object_add(info, "version", json_object_new_string("0.1.0"));
    json_object_object_add(r, "serverInfo", info);
    return r;
}

/* What initialize tells us about the client, kept for the tools. */
static void note_initialize(struct session *s, json_object *msg)
{
    json_object *caps = member(member(msg, "params"), "capabilities");
    pthread_mutex_lock(&g_lock);
    snprintf(s->version, sizeof s->version, "%s", negotiated_version(msg));
    s->client_sampling = json_object_is_type(member(caps, "sampling"), json_type_object);
    s->client_elicitation = json_object_is_type(member(caps, "elicitation"), json_type_object);
    s->client_roots = json_object_is_type(member(caps, "roots"), json_type_object);
    pthread_mutex_unlock(&g_lock);
}

/* Every JSON text in the tables parses: checked once at startup. */
static int tables_ok(void)
{
    const char *texts[NELEM(tools) * 2 + NELEM(prompts) + 3];
    size_t n = 0;
    int ok = 1;
    for (size_t i = 0; i < NELEM(tools); i++) {
        texts[n++] = tools[i].input_schema;
        if (tools[i].output_schema)
            texts[n++] = tools[i].output_schema;
    }
    for (size_t i = 0; i < NELEM(prompts); i++)
        if (prompts[i].arguments)
            texts[n++] = prompts[i].arguments;
    texts[n++] = ELICIT_USER_SCHEMA;
    texts[n++] = ELICIT_DEFAULTS_SCHEMA;
    texts[n++] = ELICIT_ENUMS_SCHEMA;
    ok = dialogs_ok();
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_tokener_parse(texts[i]);
        if (!o) {
            fprintf(stderr, "mcp-test-backend: bad JSON in a table: %s\n", texts[i]);
            ok = 0;
        }
        json_object_put(o);
    }
    return ok;
}

/* ------------------------------------------------------------------------
 * What every transport does with a message (HTTP POST, a --stdio line).
 * ------------------------------------------------------------------------ */

/* initialize on the session s: what the client declared is kept, and the
   answer made. */
static json_object *initialize_session(struct session *s, json_object *msg, json_object *id)
{
    note_initialize(s, msg);
    record_message(s, MSG_REQUEST, "initialize", msg);
    return rpc_result(id, initialize_result(msg));
}

/* One valid message (not initialize) for the session s: booked, and a
   request handled.  Returns the response; NULL for a notification or a
   response, and when the request's answer comes later (*stream was set, or,
   --mode json, rq->dfr). */
static json_object *dispatch_message(struct request *rq, struct session *s, json_object *msg,
                                     enum msg_kind kind, const char *method, json_object *id,
                                     int in_batch, struct stream **stream)
{
    record_message(s, kind, method, msg);
    if (kind != MSG_REQUEST)
        return NULL;
    return handle_method(rq, s, msg, method, id, in_batch, stream);
}

/* The answers to a (non-empty) batch: one per request and per invalid
   message, in order; an empty array if it held only notifications and
   responses. */
static json_object *batch_answers(struct request *rq, struct session *s, json_object *batch)
{
    json_object *answers = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(batch); i++) {
        json_object *msg = json_object_array_get_idx(batch, i), *id, *resp;
        const char *method;
        enum msg_kind kind = classify(msg, &method, &id);
        if (kind == MSG_INVALID)
            resp = rpc_error(id, -32600, "Invalid Request");
        else
            resp = dispatch_message(rq, s, msg, kind, method, id, 1, NULL);
        if (resp)
            json_object_array_add(answers, resp);
    }
    return answers;
}

/* ------------------------------------------------------------------------
 * The HTTP side of the transport.
 * ------------------------------------------------------------------------ */
/* Collects the X-* and Authorization headers of a request (session_info reports them: what
   the gateway's MCPBackendHeader lines sent). */
static enum MHD_Result collect_x_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    (void)kind;
    if (key && value && (strncasecmp(key, "x-", 2) == 0 || strcasecmp(key, "authorization") == 0))
        json_object_object_add((json_object *)cls, key, json_object_new_string(value));
    return MHD_YES;
}

static void note_protocol_header(struct request *rq, struct session *s)
{
    json_object *xh = json_object_new_object();
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, collect_x_header, xh);
    const char *v = header(rq, "MCP-Protocol-Version");
    const char *parent = header(rq, "traceparent"), *state = header(rq, "tracestate");
    if (header(rq, "Authorization")) {
        pthread_mutex_lock(&g_lock);
        s->authorization_headers++;
        pthread_mutex_unlock(&g_lock);
    }
    /* The trace context of the last request (session_info reports it: the gateway's hop). */
    pthread_mutex_lock(&g_lock);
    free(s->traceparent);
    s->traceparent = parent ? xstrdup(parent) : NULL;
    free(s->tracestate);
    s->tracestate = state ? xstrdup(state) : NULL;
    json_object_put(s->x_headers);
    s->x_headers = xh;
    pthread_mutex_unlock(&g_lock);
    if (!v)
        return;
    pthread_mutex_lock(&g_lock);
    free(s->protocol_header);
    s->protocol_header = xstrdup(v);
    pthread_mutex_unlock(&g_lock);
}

/* Finds the session named by Mcp-Session-Id and takes a reference, or
   replies 400/404 and returns NULL.  --stateless shares one pseudo-session,
   so session_info and sample still work there. */
static struct session *resolve_session(struct request *rq, enum MHD_Result *ret)
{
    const char *id = header(rq, "Mcp-Session-Id");
    struct session *s;
    if (cfg.stateless) {
        s = g_anon;
        pthread_mutex_lock(&g_lock);
        s->refs++;
        pthread_mutex_unlock(&g_lock);
    } else {
        if (!id) {
            *ret = reply_error(rq, MHD_HTTP_BAD_REQUEST, -32000,
                               "Bad Request: Mcp-Session-Id header is required");
            return NULL;
        }
        snprintf(rq->session, sizeof rq->session, "%s", id);
        pthread_mutex_lock(&g_lock);
        s = session_find_locked(id);
        if (s)
            s->refs++;
        pthread_mutex_unlock(&g_lock);
        if (!s) {
            *ret = reply_error(rq, MHD_HTTP_NOT_FOUND, -32001, "Session not found");
            return NULL;
        }
    }
    note_protocol_header(rq, s);
    return s;
}

static enum MHD_Result post_initialize(struct request *rq, json_object *msg, json_object *id)
{
    struct session *s;
    json_object *resp;
    char sid[SESSION_ID_LEN + 1];

    if (cfg.stateless) {
        s = g_anon;
        pthread_mutex_lock(&g_lock);
        s->refs++;
        pthread_mutex_unlock(&g_lock);
    } else {
        if (random_hex(sid, SESSION_ID_LEN / 2))
            return reply_error(rq, MHD_HTTP_INTERNAL_SERVER_ERROR, -32603,
                               "cannot read /dev/urandom");
        pthread_mutex_lock(&g_lock);
        if (g_nsessions >= MAX_SESSIONS) {
            pthread_mutex_unlock(&g_lock);
            return reply_error(rq, MHD_HTTP_SERVICE_UNAVAILABLE, -32000, "Too many sessions");
        }
        s = session_new();
        memcpy(s->id, sid, sizeof sid);
        session_list_locked(s);
        s->refs++; /* ours, besides the table's */
        pthread_mutex_unlock(&g_lock);
        memcpy(rq->issued, sid, sizeof sid);
        memcpy(rq->session, sid, sizeof sid);
    }
    note_protocol_header(rq, s);
    resp = initialize_session(s, msg, id);
    session_release(s);
    return reply_message(rq, resp);
}

static enum MHD_Result post_single(struct request *rq, json_object *msg)
{
    const char *method;
    json_object *id, *resp;
    struct stream *stream = NULL;
    struct session *s;
    enum MHD_Result ret = MHD_NO;
    enum msg_kind kind = classify(msg, &method, &id);

    if (kind == MSG_INVALID)
        return reply_json(rq, MHD_HTTP_BAD_REQUEST, rpc_error(id, -32600, "Invalid Request"));
    snprintf(rq->rpc, sizeof rq->rpc, "%s", method ? method : "response");
    if (kind == MSG_REQUEST && !strcmp(method, "initialize"))
        return post_initialize(rq, msg, id);
    if (!(s = resolve_session(rq, &ret)))
        return ret;
    resp = dispatch_message(rq, s, msg, kind, method, id, 0, &stream);
    session_release(s); /* a stream or a deferred call holds its own reference */
    if (kind != MSG_REQUEST)
        return reply_empty(rq, MHD_HTTP_ACCEPTED);
    if (stream)
        return reply_stream(rq, stream);
    if (rq->dfr)
        return deferred_poll(rq);
    return reply_message(rq, resp);
}

static enum MHD_Result post_batch(struct request *rq, json_object *batch)
{
    size_t n = json_object_array_length(batch);
    json_object *answers;
    struct session *s;
    enum MHD_Result ret = MHD_NO;

    if (n == 0)
        return reply_error(rq, MHD_HTTP_BAD_REQUEST, -32600, "Invalid Request: empty batch");
    snprintf(rq->rpc, sizeof rq->rpc, "batch[%zu]", n);
    if (!(s = resolve_session(rq, &ret)))
        return ret;
    answers = batch_answers(rq, s, batch);
    session_release(s);
    if (json_object_array_length(answers) == 0) {
        json_object_put(answers);
        return reply_empty(rq, MHD_HTTP_ACCEPTED);
    }
    if (cfg.mode == MODE_SSE)
        return reply_sse_now(rq, answers);
    return reply_json(rq, MHD_HTTP_OK, answers);
}

static int accepts(struct request *rq, const char *type)
{
    const char *accept = header(rq, MHD_HTTP_HEADER_ACCEPT);
    return accept && strcasestr(accept, type);
}

static int is_json_content_type(const char *ct)
{
    if (!ct)
        return 0;
    ct += strspn(ct, " \t");
    if (strncasecmp(ct, "application/json", 16))
        return 0;
    ct += 16;
    ct += strspn(ct, " \t");
    return *ct == '\0' || *ct == ';';
}

static enum MHD_Result handle_post(struct request *rq)
{
    json_object *body;
    enum MHD_Result ret;

    if (!is_json_content_type(header(rq, MHD_HTTP_HEADER_CONTENT_TYPE)))
        return reply_error(rq, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, -32000,
                           "Unsupported Media Type: Content-Type must be application/json");
    if (!accepts(rq, "application/json") || !accepts(rq, "text/event-stream"))
        return reply_error(rq, MHD_HTTP_NOT_ACCEPTABLE, -32000,
                           "Not Acceptable: Accept must include application/json and "
                           "text/event-stream");
    if (rq->too_big)
        return reply_error(rq, MHD_HTTP_CONTENT_TOO_LARGE, -32000, "Request body too large");
    body = parse_body(rq->body.data ? rq->body.data : "", rq->body.len);
    if (!body)
        return reply_error(rq, MHD_HTTP_BAD_REQUEST, -32700, "Parse error");
    if (json_object_is_type(body, json_type_array))
        ret = post_batch(rq, body);
    else
        ret = post_single(rq, body);
    json_object_put(body);
    return ret;
}

static enum MHD_Result handle_get(struct request *rq)
{
    struct session *s;
    struct stream *st;
    enum MHD_Result ret = MHD_NO;
    int busy;

    if (cfg.stateless)
        return reply_not_allowed(rq, "POST");
    if (!accepts(rq, "text/event-stream"))
        return reply_error(rq, MHD_HTTP_NOT_ACCEPTABLE, -32000,
                           "Not Acceptable: Accept must include text/event-stream");
    if (!(s = resolve_session(rq, &ret)))
        return ret;
    pthread_mutex_lock(&g_lock);
    busy = s->stream_open;
    s->stream_open = 1;
    pthread_mutex_unlock(&g_lock);
    if (busy) {
        session_release(s);
        return reply_error(rq, MHD_HTTP_CONFLICT, -32000,
                           "Conflict: a standalone stream is already open for this session");
    }
    /* st->due is now: an idle stream starts with a keepalive comment, since
       MHD sends the headers only together with the first body bytes. */
    st = stream_new(STREAM_STANDALONE, rq, s, NULL);
    session_release(s);
    return reply_stream(rq, st);
}

static enum MHD_Result handle_delete(struct request *rq)
{
    const char *id = header(rq, "Mcp-Session-Id");
    struct session *s;

    if (cfg.stateless)
        return reply_not_allowed(rq, "POST");
    if (!id)
        return reply_error(rq, MHD_HTTP_BAD_REQUEST, -32000,
                           "Bad Request: Mcp-Session-Id header is required");
    snprintf(rq->session, sizeof rq->session, "%s", id);
    pthread_mutex_lock(&g_lock);
    s = session_find_locked(id);
    if (s)
        session_terminate_locked(s);
    pthread_mutex_unlock(&g_lock);
    if (!s)
        return reply_error(rq, MHD_HTTP_NOT_FOUND, -32001, "Session not found");
    return reply_empty(rq, MHD_HTTP_OK);
}

/* POST /broadcast[?method=M]: the notification M (default
   notifications/tools/list_changed, no params) on every open standalone GET
   stream of every session at once; sessions without one get nothing.
   Answers {"method": M, "streams": N}. */
static enum MHD_Result handle_broadcast(struct request *rq)
{
    const char *method =
        MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "method");
    json_object *msg, *answer;
    const char *text;
    int n = 0;

    if (strcmp(rq->method, MHD_HTTP_METHOD_POST))
        return reply_not_allowed(rq, "POST");
    if (!method || !*method)
        method = "notifications/tools/list_changed";
    snprintf(rq->rpc, sizeof rq->rpc, "broadcast:%s", method);
    msg = rpc_notification(method, json_object_new_object());
    text = json_text(msg);
    pthread_mutex_lock(&g_lock);
    for (struct session *s = cfg.stateless ? g_anon : g_sessions; s;
         s = cfg.stateless ? NULL : s->next)
        if (s->stream_open && !s->terminated) {
            queue_push_locked(s, xstrdup(text));
            n++;
        }
    pthread_mutex_unlock(&g_lock);
    answer = json_object_new_object();
    json_object_object_add(answer, "method", json_object_new_string(method));
    json_object_object_add(answer, "streams", json_object_new_int(n));
    json_object_put(msg);
    return reply_json(rq, MHD_HTTP_OK, answer);
}

/* MHD's access handler: called once with the headers, once per body chunk,
   and once more when the body is complete. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct request *rq = *con_cls;
    const char *v;
    (void)cls;
    (void)version;

    if (!rq) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        rq = xcalloc(sizeof *rq);
        rq->conn = conn;
        rq->method = method;
        rq->url = url;
        rq->fd = ci ? ci->connect_fd : -1;
        rq->w.conn = conn;
        rq->w.fd = rq->fd;
        *con_cls = rq;
        v = header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (v && strtoull(v, NULL, 10) > MAX_BODY) { /* refuse before reading it */
            rq->too_big = 1;
            return reply_error(rq, MHD_HTTP_CONTENT_TOO_LARGE, -32000, "Request body too large");
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rq->too_big && rq->body.len + *upload_size > MAX_BODY) {
            rq->too_big = 1;
            buf_free(&rq->body);
        }
        if (!rq->too_big)
            buf_add(&rq->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->replied)
        return MHD_YES;
    if (rq->dfr)
        return deferred_poll(rq);

    if (!strcmp(url, BROADCAST_PATH))
        return handle_broadcast(rq);
    if (strcmp(url, ENDPOINT))
        return reply_error(rq, MHD_HTTP_NOT_FOUND, -32000, "Not Found: the endpoint is " ENDPOINT);
    v = header(rq, "MCP-Protocol-Version");
    if (v && !one_of(v, header_versions, NELEM(header_versions)))
        return reply_error(rq, MHD_HTTP_BAD_REQUEST, -32000,
                           "Bad Request: unsupported MCP-Protocol-Version");
    if (!strcmp(method, MHD_HTTP_METHOD_POST))
        return handle_post(rq);
    if (!strcmp(method, MHD_HTTP_METHOD_GET))
        return handle_get(rq);
    if (!strcmp(method, MHD_HTTP_METHOD_DELETE))
        return handle_delete(rq);
    return reply_not_allowed(rq, cfg.stateless ? "POST" : "GET, POST, DELETE");
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct request *rq = *con_cls;
    (void)cls;
    (void)conn;
    (void)toe;
    if (!rq)
        return;
    deferred_free(rq);
    buf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}

/* ------------------------------------------------------------------------
 * The stdio transport (--stdio): one session on stdin/stdout, as MCP's
 * stdio transport has it.  Each message is one line of JSON (json-c writes
 * none with a newline in it); stderr gets a log line per message.
 *
 * The main thread reads stdin and answers what is answered at once (ping,
 * echo, tools/list, ...) itself, through the same dispatch as a POST.  What
 * over HTTP is an SSE stream (slow, sample, the dialogs, ...) runs here in a
 * thread of its own: the same producers, but with st->lines set they write
 * lines, and a parked waiter without a connection is woken through g_wake
 * (the timer thread still keeps its deadline).  The standalone GET stream
 * is one more such thread, open from the start: notify, the list_changed
 * triggers and the other queued messages go out on stdout.  Responses from
 * the client (to sampling/createMessage, elicitation/create, roots/list)
 * wake the waiting call as a POSTed response does.  Every write to stdout
 * holds g_out_lock and is a whole number of lines, so lines never mix.
 * At EOF on stdin the session ends: the calls in progress end without a
 * result, their threads finish, and the process exits 0.
 * ------------------------------------------------------------------------ */
#define STDIO_READ_CHUNK 65536

static pthread_mutex_t g_out_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_out_dead;       /* stdout is gone (EPIPE): writes are dropped */
static int g_stdio_threads;  /* stream threads running (g_lock) */
static int g_flood_stop;     /* --stdio-stderr-flood: ends the flood thread (atomic) */

/* Writes whole lines to stdout, unbuffered, never interleaved with another's. */
static void stdio_write(const char *data, size_t len)
{
    pthread_mutex_lock(&g_out_lock);
    while (len && !g_out_dead) {
        ssize_t n = write(STDOUT_FILENO, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "mcp-test-backend: stdout: %s\n", strerror(errno));
            g_out_dead = 1;
            break;
        }
        data += n;
        len -= (size_t)n;
    }
    pthread_mutex_unlock(&g_out_lock);
}

/* One message as a line (after a garbage line, with --stdio-garbage, if it
   is an answer).  Takes ownership of msg. */
static void stdio_send(json_object *msg)
{
    struct buf b = {0};
    if (faults.garbage && is_answer(msg))
        buf_adds(&b, GARBAGE_LINE);
    buf_adds(&b, json_text(msg));
    buf_add(&b, "\n", 1);
    stdio_write(b.data, b.len);
    buf_free(&b);
    json_object_put(msg);
}

/* --stdio-huge-line: a valid response to id of faults.huge_line bytes (the
   newline not counted), its text block padded with 'x'. */
static void stdio_send_huge(json_object *id)
{
    char *head = xasprintf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":"
                           "[{\"type\":\"text\",\"text\":\"", id ? json_text(id) : "null");
    static const char tail[] = "\"}]}}\n";
    size_t hl = strlen(head), tl = sizeof tail - 1;
    size_t pad = faults.huge_line > hl + tl - 1 ? faults.huge_line - (hl + tl - 1) : 0;
    char *line = xrealloc(NULL, hl + pad + tl);
    memcpy(line, head, hl);
    memset(line + hl, 'x', pad);
    memcpy(line + hl + pad, tail, tl);
    if (faults.garbage)
        stdio_write(GARBAGE_LINE, strlen(GARBAGE_LINE));
    stdio_write(line, hl + pad + tl);
    free(line);
    free(head);
}

static void stdio_log(const char *what)
{
    if (!cfg.quiet)
        fprintf(stderr, "mcp-test-backend: %s\n", what);
}

/* A stream's thread: what stream_read does for MHD, with stdout instead. */
static void *stdio_stream_main(void *arg)
{
    struct stream *st = arg;
    int rc = 0;
    while (!st->done && rc >= 0) {
        rc = stream_produce(st);
        if (st->out.len) {
            stdio_write(st->out.data, st->out.len);
            st->out.len = 0;
        }
        if (rc > 0) { /* parked: until wake_locked() clears it */
            pthread_mutex_lock(&g_lock);
            while (st->w.parked)
                pthread_cond_wait(&g_wake, &g_lock);
            pthread_mutex_unlock(&g_lock);
        }
    }
    stream_free(st);
    pthread_mutex_lock(&g_lock);
    g_stdio_threads--;
    pthread_cond_broadcast(&g_wake); /* stdio_main may wait for the last one */
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

static void stdio_start_stream(struct stream *st)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&g_lock);
    g_stdio_threads++;
    pthread_mutex_unlock(&g_lock);
    if (pthread_create(&t, &attr, stdio_stream_main, st)) {
        fputs("mcp-test-backend: cannot start a thread\n", stderr);
        abort();
    }
    pthread_attr_destroy(&attr);
}

/* One message (not a batch) of the session s.  Returns the stream of a
   streamed call, for the caller to start once msg is released: the stream
   holds references into it (id, progress token), and json-c's reference
   counts are not atomic, so msg must not be touched by two threads. */
static struct stream *stdio_single(struct session *s, json_object *msg)
{
    struct request rq = {.method = "stdio", .url = "-", .fd = -1, .w.fd = -1};
    struct stream *stream = NULL;
    const char *method;
    json_object *id, *resp;
    enum msg_kind kind = classify(msg, &method, &id);
    int initialized;

    stdio_log(kind == MSG_RESPONSE ? "response" : method ? method : "invalid message");
    if (kind == MSG_INVALID) {
        stdio_send(rpc_error(id, -32600, "Invalid Request"));
        return NULL;
    }
    if (kind == MSG_REQUEST && !strcmp(method, "initialize")) {
        pthread_mutex_lock(&g_lock);
        initialized = s->version[0] != '\0';
        pthread_mutex_unlock(&g_lock);
        stdio_send(initialized ? rpc_error(id, -32600, "Invalid Request: already initialized")
                               : initialize_session(s, msg, id));
        return NULL;
    }
    if (kind == MSG_REQUEST && faults.huge_line && !strcmp(method, "tools/call")) {
        record_message(s, kind, method, msg);
        stdio_send_huge(id);
        faults.huge_line = 0; /* the first tools/call only */
        return NULL;
    }
    resp = dispatch_message(&rq, s, msg, kind, method, id, 0, &stream);
    if (resp)
        stdio_send(resp);
    return stream;
}

/* A batch: as a POST of one is answered, where the negotiated version has
   them (2025-03-26; 2025-06-18 took batches out of MCP); else refused. */
static void stdio_batch(struct session *s, json_object *batch)
{
    struct request rq = {.method = "stdio", .url = "-", .fd = -1, .w.fd = -1};
    char version[sizeof s->version];
    json_object *answers;
    char what[64];

    snprintf(what, sizeof what, "batch[%zu]", json_object_array_length(batch));
    stdio_log(what);
    pthread_mutex_lock(&g_lock);
    memcpy(version, s->version, sizeof version);
    pthread_mutex_unlock(&g_lock);
    if (strcmp(version, "2025-03-26")) {
        stdio_send(rpc_error(NULL, -32600,
                             "Invalid Request: no batches in protocol version %s (only in "
                             "2025-03-26)",
                             version[0] ? version : "(none: not initialized)"));
        return;
    }
    if (json_object_array_length(batch) == 0) {
        stdio_send(rpc_error(NULL, -32600, "Invalid Request: empty batch"));
        return;
    }
    answers = batch_answers(&rq, s, batch);
    if (json_object_array_length(answers))
        stdio_send(answers);
    else
        json_object_put(answers);
}

static void stdio_line(struct session *s, const char *line, size_t len)
{
    json_object *msg = parse_body(line, len);
    struct stream *stream = NULL;
    if (!msg) {
        stdio_log("unparsable line");
        stdio_send(rpc_error(NULL, -32700, "Parse error"));
        return;
    }
    if (json_object_is_type(msg, json_type_array))
        stdio_batch(s, msg);
    else
        stream = stdio_single(s, msg);
    json_object_put(msg);
    if (stream)
        stdio_start_stream(stream);
}

/* --stdio-stderr-flood */
static void *stdio_flood_main(void *arg)
{
    unsigned long n = 0;
    (void)arg;
    while (!__atomic_load_n(&g_flood_stop, __ATOMIC_RELAXED))
        if (fprintf(stderr, "mcp-test-backend: stderr flood line %lu: the quick brown fox "
                            "jumps over the lazy dog\n", ++n) < 0)
            break; /* nobody reads stderr any more */
    return NULL;
}

static int blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r", p[i]))
            return 0;
    return 1;
}

/* Reads lines until EOF, each at most MAX_BODY bytes (a longer one is
   answered with an error and skipped). */
static void stdio_read_loop(struct session *s)
{
    struct buf line = {0};
    char *chunk = xrealloc(NULL, STDIO_READ_CHUNK);
    int too_long = 0;
    long count = 0;

    for (;;) {
        ssize_t n = read(STDIN_FILENO, chunk, STDIO_READ_CHUNK);
        char *p = chunk, *end, *nl;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fprintf(stderr, "mcp-test-backend: stdin: %s\n", strerror(errno));
        if (n <= 0) { /* EOF: a last line without its newline still counts */
            if (!too_long && line.len && !blank(line.data, line.len))
                stdio_line(s, line.data, line.len);
            break;
        }
        end = chunk + n;
        while (p < end) {
            size_t take;
            nl = memchr(p, '\n', (size_t)(end - p));
            take = (size_t)((nl ? nl : end) - p);
            if (!too_long && line.len + take > MAX_BODY) {
                too_long = 1;
                buf_free(&line);
            }
            if (!too_long)
                buf_add(&line, p, take);
            p += take;
            if (!nl)
                break;
            p++; /* the newline: a message is complete */
            if (too_long) {
                too_long = 0;
                stdio_log("line too long");
                stdio_send(rpc_error(NULL, -32000, "Message too large (over %u bytes)",
                                     MAX_BODY));
            } else if (line.len && !blank(line.data, line.len)) {
                if (faults.crash_after && ++count >= faults.crash_after) {
                    fprintf(stderr, "mcp-test-backend: --stdio-crash-after %ld: crashing on "
                                    "message %ld\n", faults.crash_after, count);
                    _exit(3);
                }
                stdio_line(s, line.data, line.len);
            }
            line.len = 0;
        }
    }
    buf_free(&line);
    free(chunk);
}

static int stdio_main(void)
{
    struct request rq = {.method = "stdio", .url = "-", .fd = -1, .w.fd = -1};
    pthread_t timer, flood;
    struct session *s;
    struct stream *st;
    int flooding = 0;

    if (faults.exit_at_start) {
        fputs("mcp-test-backend: --stdio-exit-at-start: exiting with status 1\n", stderr);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is an error from write */
    if (!tables_ok())
        return 1;
    if (faults.no_read) {
        fputs("mcp-test-backend: --stdio-no-read: never reading stdin\n", stderr);
        for (;;)
            pause();
    }
    if (timer_start(&timer, 1)) /* deadlines only: no sockets to watch */
        return 1;
    if (faults.stderr_flood) {
        if (pthread_create(&flood, NULL, stdio_flood_main, NULL)) {
            fputs("mcp-test-backend: cannot start a thread\n", stderr);
            return 1;
        }
        flooding = 1;
    }

    s = session_new();
    if (random_hex(s->id, SESSION_ID_LEN / 2)) {
        fputs("mcp-test-backend: cannot read /dev/urandom\n", stderr);
        return 1;
    }
    pthread_mutex_lock(&g_lock);
    session_list_locked(s); /* the list_changed triggers look there */
    s->refs++;              /* ours, besides the table's */
    s->stream_open = 1;     /* stdout is the standalone stream */
    pthread_mutex_unlock(&g_lock);
    st = stream_new(STREAM_STANDALONE, &rq, s, NULL);
    stdio_start_stream(st);

    stdio_read_loop(s);

    /* EOF: the session ends, and with it every call in progress. */
    stdio_log("EOF on stdin, exiting");
    pthread_mutex_lock(&g_lock);
    session_terminate_locked(s);
    while (g_stdio_threads)
        pthread_cond_wait(&g_wake, &g_lock);
    g_timer_stop = 1;
    timer_kick();
    pthread_mutex_unlock(&g_lock);
    pthread_join(timer, NULL);
    session_release(s);
    if (flooding) {
        /* The flood thread may be blocked on a stderr nobody reads: not
           joined, and exit() must not wait for stderr's lock. */
        __atomic_store_n(&g_flood_stop, 1, __ATOMIC_RELAXED);
        _exit(0);
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Listening sockets.  We create them ourselves so TCP and unix sockets take
 * one path into MHD and the bound port is known before anyone is told.
 * ------------------------------------------------------------------------ */
static int listen_tcp(const char *host, const char *port, char *shown, size_t shown_len)
{
    struct addrinfo hints = {0}, *res, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    int fd = -1, one = 1, rc, err = 0;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        fprintf(stderr, "mcp-test-backend: %s: %s\n", host, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "mcp-test-backend: cannot listen on %s:%s: %s\n", host, port,
                strerror(err));
        return -1;
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV)) {
        close(fd);
        return -1;
    }
    snprintf(shown, shown_len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
    return fd;
}

static int listen_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd;

    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "mcp-test-backend: unix socket path too long\n");
        return -1;
    }
    strcpy(sa.sun_path, path);
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path); /* left over from an earlier run */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || chmod(path, 0666) ||
        listen(fd, SOMAXCONN)) {
        fprintf(stderr, "mcp-test-backend: cannot listen on %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Scripts poll for these files, so they must never be seen half-written. */
static int write_file_atomic(const char *path, const char *content)
{
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(content, f) >= 0;
    if (f && fclose(f))
        ok = 0;
    if (ok && rename(tmp, path))
        ok = 0;
    if (!ok) {
        fprintf(stderr, "mcp-test-backend: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------
 * Command line, startup and shutdown.
 * ------------------------------------------------------------------------ */
static void usage(FILE *f)
{
    fputs("usage: mcp-test-backend [--listen HOST:PORT] [--port N] [--unix PATH]\n"
          "                        [--pidfile FILE] [--portfile FILE]\n"
          "                        [--mode auto|json|sse] [--stateless] [--quiet]\n"
          "                        [--threads N] [--page-size N]\n"
          "       mcp-test-backend --stdio [--quiet] [--stdio-crash-after N]\n"
          "                        [--stdio-exit-at-start] [--stdio-garbage]\n"
          "                        [--stdio-huge-line BYTES] [--stdio-no-read]\n"
          "                        [--stdio-stderr-flood]\n"
          "Serves MCP Streamable HTTP on /mcp (default 127.0.0.1, ephemeral port).\n"
          "--page-size N: tools/list answers pages of N tools, with a nextCursor.\n"
          "--stdio serves one MCP session on stdin/stdout instead (the MCP stdio\n"
          "transport): a JSON-RPC message per line each way, the same tools, prompts\n"
          "and resources, a log line per message on stderr (not with --quiet), and\n"
          "exit 0 at EOF on stdin.  Batches only in protocol version 2025-03-26.\n"
          "Its faults, for a supervisor's tests:\n"
          "  --stdio-crash-after N     exit(3) on reading message N, unanswered\n"
          "  --stdio-exit-at-start     exit 1 at once\n"
          "  --stdio-garbage           a line that is not JSON before each answer\n"
          "  --stdio-huge-line BYTES   answer the first tools/call with a response of\n"
          "                            BYTES bytes on one line (e.g. 16777216)\n"
          "  --stdio-no-read           never read stdin (sleep until killed)\n"
          "  --stdio-stderr-flood      write stderr lines as fast as possible\n",
          f);
}

static int parse_port(const char *s)
{
    char *end;
    long n = strtol(s, &end, 10);
    return (*s && !*end && n >= 0 && n <= 65535) ? (int)n : -1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},  {"port", required_argument, NULL, 'p'},
        {"unix", required_argument, NULL, 'u'},    {"pidfile", required_argument, NULL, 'P'},
        {"portfile", required_argument, NULL, 'F'}, {"mode", required_argument, NULL, 'm'},
        {"stateless", no_argument, NULL, 's'},     {"quiet", no_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
        {"page-size", required_argument, NULL, 'g'},
        {"stdio", no_argument, NULL, 1000},
        {"stdio-crash-after", required_argument, NULL, 1001},
        {"stdio-exit-at-start", no_argument, NULL, 1002},
        {"stdio-garbage", no_argument, NULL, 1003},
        {"stdio-huge-line", required_argument, NULL, 1004},
        {"stdio-no-read", no_argument, NULL, 1005},
        {"stdio-stderr-flood", no_argument, NULL, 1006},
        {NULL, 0, NULL, 0}};
    const char *host = "127.0.0.1", *port = "0", *port_opt = NULL, *unix_path = NULL;
    const char *pidfile = NULL, *portfile = NULL;
    char *listen_spec = NULL, shown[NI_MAXHOST + NI_MAXSERV + 4], num[32];
    struct MHD_Daemon *d;
    struct rlimit nofile;
    pthread_t timer;
    sigset_t sigs;
    int c, fd, sig, rc = 0, timer_up = 0;
    int http_opts = 0, stdio_opts = 0; /* options of one transport only */
    char *end;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'l' || c == 'p' || c == 'u' || c == 'P' || c == 'F' || c == 's' || c == 't' ||
            c == 'm')
            http_opts++;
        else if (c > 1000)
            stdio_opts++;
        switch (c) {
        case 'l': {
            char *colon;
            free(listen_spec);
            listen_spec = xstrdup(optarg);
            if (listen_spec[0] == '[' && (colon = strstr(listen_spec, "]:"))) {
                *colon = '\0';
                host = listen_spec + 1;
                port = colon + 2;
            } else if ((colon = strrchr(listen_spec, ':')) && listen_spec[0] != '[') {
                *colon = '\0';
                host = listen_spec;
                port = colon + 1;
            } else {
                fprintf(stderr, "mcp-test-backend: --listen wants HOST:PORT\n");
                return 2;
            }
            break;
        }
        case 'p': port_opt = optarg; break;
        case 'u': unix_path = optarg; break;
        case 'P': pidfile = optarg; break;
        case 'F': portfile = optarg; break;
        case 's': cfg.stateless = 1; break;
        case 'q': cfg.quiet = 1; break;
        case 't':
            g_threads = atoi(optarg);
            if (g_threads < 1 || g_threads > 14) {
                fprintf(stderr, "mcp-test-backend: --threads wants 1..14\n");
                return 2;
            }
            break;
        case 'g': {
            long n = strtol(optarg, &end, 10);
            if (*end || !*optarg || n < 1 || n > 1000) {
                fprintf(stderr, "mcp-test-backend: --page-size wants 1..1000\n");
                return 2;
            }
            g_page_size = (size_t)n;
            break;
        }
        case 'm':
            if (!strcmp(optarg, "auto"))
                cfg.mode = MODE_AUTO;
            else if (!strcmp(optarg, "json"))
                cfg.mode = MODE_JSON;
            else if (!strcmp(optarg, "sse"))
                cfg.mode = MODE_SSE;
            else {
                usage(stderr);
                return 2;
            }
            break;
        case 1000: cfg.stdio = 1; break;
        case 1001:
            faults.crash_after = strtol(optarg, &end, 10);
            if (*end || faults.crash_after < 1) {
                fprintf(stderr, "mcp-test-backend: --stdio-crash-after wants N >= 1\n");
                return 2;
            }
            break;
        case 1002: faults.exit_at_start = 1; break;
        case 1003: faults.garbage = 1; break;
        case 1004: {
            unsigned long long n = strtoull(optarg, &end, 10);
            if (*end || *optarg == '-' || n < 1 || n > (1ull << 30)) {
                fprintf(stderr, "mcp-test-backend: --stdio-huge-line wants 1..1073741824\n");
                return 2;
            }
            faults.huge_line = (size_t)n;
            break;
        }
        case 1005: faults.no_read = 1; break;
        case 1006: faults.stderr_flood = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (cfg.stdio && http_opts) {
        fprintf(stderr, "mcp-test-backend: --stdio takes none of --listen, --port, --unix, "
                        "--pidfile, --portfile, --mode, --stateless, --threads\n");
        return 2;
    }
    if (!cfg.stdio && stdio_opts) {
        fprintf(stderr, "mcp-test-backend: the --stdio-* options need --stdio\n");
        return 2;
    }
    if (cfg.stdio)
        return stdio_main();
    if (port_opt)
        port = port_opt;
    if (parse_port(port) < 0) {
        fprintf(stderr, "mcp-test-backend: bad port '%s'\n", port);
        return 2;
    }

    /* Every connection is a descriptor: as many as the hard limit allows. */
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &nofile))
            perror("mcp-test-backend: setrlimit(RLIMIT_NOFILE)");
        getrlimit(RLIMIT_NOFILE, &nofile);
    }
    if (nofile.rlim_cur == RLIM_INFINITY || nofile.rlim_cur > 1u << 20)
        nofile.rlim_cur = 1u << 20;

    /* Signals are taken synchronously by main (sigwait); the daemon's
       threads inherit the blocked mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    fd = unix_path ? listen_unix(unix_path) : listen_tcp(host, port, shown, sizeof shown);
    if (fd < 0) {
        free(listen_spec);
        return 1;
    }
    if (!tables_ok()) {
        close(fd);
        free(listen_spec);
        return 1;
    }
    if (cfg.stateless)
        g_anon = session_new();
    if (timer_start(&timer, (size_t)nofile.rlim_cur)) {
        close(fd);
        rc = 1;
        goto out;
    }
    timer_up = 1;
    /* epoll, a fixed pool of g_threads threads, suspend/resume for parking;
       no connection timeout (streams are idle for long), and as many
       connections as descriptors (a few are kept for epoll, eventfds and
       the like). */
    d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                             MHD_USE_ERROR_LOG,
                         0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)g_threads,
                         MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)(nofile.rlim_cur > 256 ? nofile.rlim_cur - 64 : 192),
                         MHD_OPTION_CONNECTION_TIMEOUT, 0u,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "mcp-test-backend: cannot start the HTTP daemon\n");
        close(fd);
        rc = 1;
        goto out;
    }

    snprintf(num, sizeof num, "%ld\n", (long)getpid());
    if (pidfile && write_file_atomic(pidfile, num))
        rc = 1;
    if (unix_path)
        snprintf(num, sizeof num, "0\n");
    else
        snprintf(num, sizeof num, "%s\n", strrchr(shown, ':') + 1);
    if (!rc && portfile && write_file_atomic(portfile, num))
        rc = 1;
    if (!rc) {
        if (unix_path)
            printf("listening on unix:%s (http://localhost" ENDPOINT ")\n", unix_path);
        else
            printf("listening on http://%s" ENDPOINT "\n", shown);
        fflush(stdout);
        while (sigwait(&sigs, &sig) != 0)
            ;
        if (!cfg.quiet)
            fprintf(stderr, "mcp-test-backend: signal %d, shutting down\n", sig);
    }

    /* Resume every parked connection first (MHD must not be stopped with
       suspended ones); each sees g_stopping and ends.  Every parked waiter
       has a deadline, so the heap holds them all. */
    pthread_mutex_lock(&g_lock);
    g_stopping = 1;
    while (g_heap_n)
        wake_locked(g_heap[0]);
    pthread_mutex_unlock(&g_lock);
    usleep(100 * 1000); /* let the pool see the resumed connections */
    MHD_stop_daemon(d); /* also closes the listening socket */

out:
    if (timer_up) {
        pthread_mutex_lock(&g_lock);
        g_timer_stop = 1;
        timer_kick();
        pthread_mutex_unlock(&g_lock);
        pthread_join(timer, NULL);
    }
    pthread_mutex_lock(&g_lock);
    while (g_sessions)
        session_terminate_locked(g_sessions);
    if (g_anon)
        session_unref_locked(g_anon);
    pthread_mutex_unlock(&g_lock);
    if (pidfile)
        unlink(pidfile);
    if (portfile)
        unlink(portfile);
    if (unix_path)
        unlink(unix_path);
    free(listen_spec);
    return rc;
}
