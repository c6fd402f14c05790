/* mcp-fault-backend — a misbehaving MCP backend for the gateway's failure tests.
 *
 * A small HTTP/1.1 server on a unix socket (or loopback TCP), written on raw sockets so that it
 * can send what no HTTP library would: invalid UTF-8 in headers, a connection closed before the
 * headers or in the middle of an event, an answer that never comes, an endless stream. It speaks
 * just enough MCP to be a backend: initialize (issues an Mcp-Session-Id), notifications (202),
 * DELETE (200, remembered), GET (an SSE stream kept open), and tools/call, whose tool name picks
 * the behaviour (an initialize whose clientInfo.name is "bad-session-id" gets a session id
 * ending in the byte 0xFF). server/discover (the era shim's, of a 2026-07-28 backend) gets a
 * DiscoverResult listing 2026-07-28, a malformed one when the request's path is /bad-discover:
 *
 *   echo      a well-formed JSON result ({"content":[{"type":"text","text":"ok"}]})
 *   raw       arguments {"delay_ms": N, "parts": [[TEXT, COUNT], ...], "then": "close"|"hang"}:
 *             waits delay_ms, then writes each TEXT COUNT times (COUNT -1: until the peer goes
 *             or 60 s pass), and then closes, or hangs (reads until the peer closes, at most
 *             120 s). TEXT is bytes written as Latin-1 code points (U+0000..U+00FF, one byte
 *             each), so a test can send any byte; "{{id}}" in TEXT becomes the request's id as
 *             JSON. The whole response, status line included, is TEXT: nothing is added.
 *   notify    sends a notifications/message event on every open GET stream of the session;
 *             the result's text is how many streams got it.
 *   deleted   the result's text is a JSON array of the session ids DELETE was received for.
 *   hanging   the result's text is how many raw answers are hanging now (then "hang"), of the
 *             backend session arguments.session names (all without it): a test sees the
 *             gateway release a transfer when this goes down.
 *
 * Every other method gets a JSON-RPC error (-32601). One thread per connection; every
 * connection is closed after its answer (Connection: close), so no state crosses requests.
 *
 * Usage: mcp-fault-backend (--unix PATH | --port N) [--pidfile FILE]
 * Prints "ready" on stdout once it accepts. SIGTERM stops it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#define MAX_HEAD   65536
#define MAX_BODY   (8 * 1024 * 1024)
#define MAX_GETS   256
#define MAX_DELETED 1024
#define REPEAT_FOREVER_SECS 60
#define HANG_SECS  120

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long next_session = 1;

/* Open GET streams: the session each belongs to. */
static struct { int fd; char session[64]; } gets[MAX_GETS];
static char *deleted[MAX_DELETED];
static int n_deleted;
static char hanging[MAX_GETS][64];   /* the sessions of raw answers that hang now ("" free) */

typedef struct request_t {
    char method[16];
    char path[256];
    char session[64];
    char *body;
    size_t body_len;
} request_t;

static double now_secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Writes everything; -1 when the peer is gone. */
static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_fmt(int fd, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    int n, rc;

    va_start(ap, fmt);
    n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return -1;
    }
    rc = write_all(fd, s, (size_t)n);
    free(s);
    return rc;
}

/* ---- reading a request ------------------------------------------------------------------- */

static const char *header_value(const char *head, const char *name, char *out, size_t size)
{
    size_t nlen = strlen(name);
    const char *p = strstr(head, "\r\n");

    while (p && p[2] != '\r') {
        p += 2;
        if (strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
            const char *v = p + nlen + 1, *end;
            size_t len;
            while (*v == ' ' || *v == '\t') {
                v++;
            }
            end = strstr(v, "\r\n");
            len = end ? (size_t)(end - v) : strlen(v);
            if (len >= size) {
                len = size - 1;
            }
            memcpy(out, v, len);
            out[len] = '\0';
            return out;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

/* Reads one request; 0 on success. */
static int read_request(int fd, request_t *rq)
{
    char *head = malloc(MAX_HEAD + 1), *end = NULL, value[64];
    size_t have = 0, body_have, clen = 0;

    memset(rq, 0, sizeof(*rq));
    if (!head) {
        return -1;
    }
    while (!end) {
        ssize_t n = recv(fd, head + have, MAX_HEAD - have, 0);
        if (n <= 0) {
            free(head);
            return -1;
        }
        have += (size_t)n;
        head[have] = '\0';
        end = strstr(head, "\r\n\r\n");
        if (!end && have == MAX_HEAD) {
            free(head);
            return -1;
        }
    }
    sscanf(head, "%15s %255s", rq->method, rq->path);
    header_value(head, "Mcp-Session-Id", rq->session, sizeof(rq->session));
    if (header_value(head, "Content-Length", value, sizeof(value))) {
        clen = strtoul(value, NULL, 10);
    }
    if (clen > MAX_BODY) {
        free(head);
        return -1;
    }
    rq->body = malloc(clen + 1);
    body_have = have - (size_t)(end + 4 - head);
    if (body_have > clen) {
        body_have = clen;
    }
    memcpy(rq->body, end + 4, body_have);
    free(head);
    while (body_have < clen) {
        ssize_t n = recv(fd, rq->body + body_have, clen - body_have, 0);
        if (n <= 0) {
            free(rq->body);
            return -1;
        }
        body_have += (size_t)n;
    }
    rq->body[clen] = '\0';
    rq->body_len = clen;
    return 0;
}

/* ---- answers ----------------------------------------------------------------------------- */

static void reply(int fd, int status, const char *reason, const char *ctype, const char *extra,
                  const char *body)
{
    size_t len = body ? strlen(body) : 0;

    write_fmt(fd, "HTTP/1.1 %d %s\r\n%s%s%s%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
              status, reason, ctype ? "Content-Type: " : "", ctype ? ctype : "",
              ctype ? "\r\n" : "", extra ? extra : "", len);
    if (len) {
        write_all(fd, body, len);
    }
}

static void reply_result(int fd, json_object *id, json_object *result, const char *extra)
{
    json_object *msg = json_object_new_object();

    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "id", json_object_get(id));
    json_object_object_add(msg, "result", result);
    reply(fd, 200, "OK", "application/json", extra,
          json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN));
    json_object_put(msg);
}

static json_object *text_result(const char *text)
{
    json_object *result = json_object_new_object(), *content = json_object_new_array();
    json_object *item = json_object_new_object();

    json_object_object_add(item, "type", json_object_new_string("text"));
    json_object_object_add(item, "text", json_object_new_string(text));
    json_object_array_add(content, item);
    json_object_object_add(result, "content", content);
    return result;
}

/* UTF-8 text of Latin-1 code points -> bytes; "{{id}}" replaced by id_json. */
static char *latin1_bytes(const char *s, const char *id_json, size_t *out_len)
{
    size_t cap = strlen(s) * 2 + 64, n = 0, idl = strlen(id_json);
    char *out = malloc(cap);
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        if (n + idl + 4 > cap) {
            cap = cap * 2 + idl;
            out = realloc(out, cap);
        }
        if (strncmp((const char *)p, "{{id}}", 6) == 0) {
            memcpy(out + n, id_json, idl);
            n += idl;
            p += 6;
        }
        else if (*p < 0x80) {
            out[n++] = (char)*p++;
        }
        else if ((*p & 0xE0) == 0xC0 && p[1]) {
            out[n++] = (char)(((p[0] & 0x1F) << 6) | (p[1] & 0x3F));
            p += 2;
        }
        else {
            p++;   /* beyond Latin-1: not representable as one byte; skipped */
        }
    }
    *out_len = n;
    return out;
}

/* Reads until the peer closes (or max_secs pass). */
static void hang(int fd, int max_secs)
{
    double deadline = now_secs() + max_secs;
    char buf[4096];

    while (now_secs() < deadline) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        int rc = poll(&pfd, 1, 1000);
        if (rc < 0 && errno != EINTR) {
            return;
        }
        if (rc > 0 && recv(fd, buf, sizeof(buf), 0) <= 0) {
            return;
        }
    }
}

/* Notes (on) or forgets (off) a hanging answer of session; returns its slot or -1. */
static int hanging_mark(const char *session, int slot)
{
    int i;

    pthread_mutex_lock(&lock);
    if (slot >= 0) {
        hanging[slot][0] = '\0';
    }
    else {
        for (i = 0; i < MAX_GETS && slot < 0; i++) {
            if (!hanging[i][0]) {
                slot = i;
                snprintf(hanging[i], sizeof(hanging[i]), "%s", *session ? session : "-");
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return slot;
}

static void tool_raw(int fd, json_object *id, json_object *args, const char *session)
{
    json_object *v, *parts = NULL;
    const char *id_json = json_object_to_json_string_ext(id, JSON_C_TO_STRING_PLAIN);
    const char *then = "close";
    size_t i;

    if (json_object_object_get_ex(args, "delay_ms", &v)) {
        usleep((useconds_t)json_object_get_int(v) * 1000);
    }
    if (json_object_object_get_ex(args, "then", &v)) {
        then = json_object_get_string(v);
    }
    json_object_object_get_ex(args, "parts", &parts);
    for (i = 0; parts && i < json_object_array_length(parts); i++) {
        json_object *part = json_object_array_get_idx(parts, i);
        size_t len;
        char *bytes = latin1_bytes(json_object_get_string(json_object_array_get_idx(part, 0)),
                                   id_json, &len);
        long count = json_object_get_int64(json_object_array_get_idx(part, 1)), k;
        double deadline = now_secs() + REPEAT_FOREVER_SECS;
        int failed = 0;

        for (k = 0; (count < 0 || k < count) && !failed; k++) {
            failed = write_all(fd, bytes, len) != 0 || (count < 0 && now_secs() > deadline);
        }
        free(bytes);
        if (failed) {
            return;
        }
    }
    if (strcmp(then, "hang") == 0) {
        int slot = hanging_mark(session, -1);
        hang(fd, HANG_SECS);
        if (slot >= 0) {
            hanging_mark(session, slot);
        }
    }
}

static void tool_notify(int fd, json_object *id, const char *session)
{
    static const char event[] =
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\","
        "\"params\":{\"level\":\"info\",\"data\":\"hello from the backend\"}}\n\n";
    char text[32];
    int i, sent = 0;

    pthread_mutex_lock(&lock);
    for (i = 0; i < MAX_GETS; i++) {
        if (gets[i].fd > 0 && strcmp(gets[i].session, session) == 0
            && write_all(gets[i].fd, event, sizeof(event) - 1) == 0) {
            sent++;
        }
    }
    pthread_mutex_unlock(&lock);
    snprintf(text, sizeof(text), "%d", sent);
    reply_result(fd, id, text_result(text), NULL);
}

static void tool_deleted(int fd, json_object *id)
{
    json_object *list = json_object_new_array();
    int i;

    pthread_mutex_lock(&lock);
    for (i = 0; i < n_deleted; i++) {
        json_object_array_add(list, json_object_new_string(deleted[i]));
    }
    pthread_mutex_unlock(&lock);
    reply_result(fd, id, text_result(json_object_to_json_string_ext(list, JSON_C_TO_STRING_PLAIN)),
                 NULL);
    json_object_put(list);
}

static void serve_get(int fd, const char *session)
{
    int i, slot = -1;

    pthread_mutex_lock(&lock);
    for (i = 0; i < MAX_GETS && slot < 0; i++) {
        if (gets[i].fd <= 0) {
            slot = i;
            gets[i].fd = fd;
            snprintf(gets[i].session, sizeof(gets[i].session), "%s", session);
        }
    }
    pthread_mutex_unlock(&lock);
    if (slot < 0) {
        reply(fd, 503, "Busy", NULL, NULL, NULL);
        return;
    }
    pthread_mutex_lock(&lock);
    write_fmt(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache"
              "\r\nConnection: close\r\n\r\n: open\n\n");
    pthread_mutex_unlock(&lock);
    hang(fd, 24 * 3600);
    pthread_mutex_lock(&lock);
    gets[slot].fd = 0;
    pthread_mutex_unlock(&lock);
}

/* initialize with clientInfo.name "bad-session-id": the session id gets a byte that is not
 * visible ASCII (and not UTF-8). */
static int bad_session_id(json_object *params)
{
    json_object *info, *name;

    return params && json_object_object_get_ex(params, "clientInfo", &info)
        && json_object_object_get_ex(info, "name", &name)
        && strcmp(json_object_get_string(name), "bad-session-id") == 0;
}

static void serve_post(int fd, const request_t *rq)
{
    json_object *msg = json_tokener_parse(rq->body), *id = NULL, *v, *params = NULL, *args = NULL;
    const char *method = NULL, *name = "";

    if (!msg || !json_object_is_type(msg, json_type_object)) {
        reply(fd, 400, "Bad Request", NULL, NULL, NULL);
        json_object_put(msg);
        return;
    }
    if (json_object_object_get_ex(msg, "method", &v)) {
        method = json_object_get_string(v);
    }
    if (!json_object_object_get_ex(msg, "id", &id) || !method) {
        reply(fd, 202, "Accepted", NULL, NULL, NULL);   /* notifications and responses */
        json_object_put(msg);
        return;
    }
    json_object_object_get_ex(msg, "params", &params);
    if (strcmp(method, "initialize") == 0) {
        json_object *result = json_object_new_object(), *info = json_object_new_object();
        const char *version = "2025-11-25";
        char extra[128];
        unsigned long n;

        if (params && json_object_object_get_ex(params, "protocolVersion", &v)) {
            version = json_object_get_string(v);
        }
        json_object_object_add(result, "protocolVersion", json_object_new_string(version));
        json_object_object_add(result, "capabilities", json_object_new_object());
        json_object_object_add(info, "name", json_object_new_string("mcp-fault-backend"));
        json_object_object_add(info, "version", json_object_new_string("1"));
        json_object_object_add(result, "serverInfo", info);
        pthread_mutex_lock(&lock);
        n = next_session++;
        pthread_mutex_unlock(&lock);
        snprintf(extra, sizeof(extra), "Mcp-Session-Id: fault-%lu-%ld%s\r\n", n, (long)getpid(),
                 bad_session_id(params) ? "\xff" : "");
        reply_result(fd, id, result, extra);
    }
    else if (strcmp(method, "server/discover") == 0) {
        /* A 2026-07-28 backend's discover (for the era shim); malformed at /bad-discover. */
        json_object *result = json_tokener_parse(
            strcmp(rq->path, "/bad-discover") == 0
            ? "{\"supportedVersions\":\"2026-07-28\",\"capabilities\":[]}"
            : "{\"supportedVersions\":[\"2026-07-28\"],\"capabilities\":{\"tools\":{}},"
              "\"serverInfo\":{\"name\":\"mcp-fault-backend\",\"version\":\"1\"}}");
        reply_result(fd, id, result, NULL);
    }
    else if (strcmp(method, "tools/call") == 0) {
        if (params && json_object_object_get_ex(params, "name", &v)) {
            name = json_object_get_string(v);
        }
        if (params) {
            json_object_object_get_ex(params, "arguments", &args);
        }
        if (strcmp(name, "raw") == 0 && args) {
            tool_raw(fd, id, args, rq->session);
        }
        else if (strcmp(name, "notify") == 0) {
            tool_notify(fd, id, rq->session);
        }
        else if (strcmp(name, "deleted") == 0) {
            tool_deleted(fd, id);
        }
        else if (strcmp(name, "hanging") == 0) {
            const char *of = NULL;
            char text[32];
            int i, n = 0;

            if (args && json_object_object_get_ex(args, "session", &v)) {
                of = json_object_get_string(v);
            }
            pthread_mutex_lock(&lock);
            for (i = 0; i < MAX_GETS; i++) {
                n += hanging[i][0] && (!of || strcmp(hanging[i], of) == 0);
            }
            pthread_mutex_unlock(&lock);
            snprintf(text, sizeof(text), "%d", n);
            reply_result(fd, id, text_result(text), NULL);
        }
        else {
            reply_result(fd, id, text_result("ok"), NULL);
        }
    }
    else {
        reply(fd, 200, "OK", "application/json", NULL,
              "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32601,"
              "\"message\":\"method not found\"}}");
    }
    json_object_put(msg);
}

static void *serve(void *arg)
{
    int fd = (int)(long)arg;
    request_t rq;

    if (read_request(fd, &rq) == 0) {
        if (strcmp(rq.method, "POST") == 0) {
            serve_post(fd, &rq);
        }
        else if (strcmp(rq.method, "GET") == 0) {
            serve_get(fd, rq.session);
        }
        else if (strcmp(rq.method, "DELETE") == 0) {
            pthread_mutex_lock(&lock);
            if (n_deleted < MAX_DELETED) {
                deleted[n_deleted++] = strdup(rq.session);
            }
            pthread_mutex_unlock(&lock);
            reply(fd, 200, "OK", NULL, NULL, NULL);
        }
        else {
            reply(fd, 405, "Method Not Allowed", NULL, "Allow: GET, POST, DELETE\r\n", NULL);
        }
        free(rq.body);
    }
    close(fd);
    return NULL;
}

/* ---- main -------------------------------------------------------------------------------- */

static volatile sig_atomic_t stopping;
static const char *unix_path, *pid_path;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int listen_on(int port)
{
    int fd;

    if (unix_path) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        if (strlen(unix_path) >= sizeof(sa.sun_path)) {
            fprintf(stderr, "socket path too long: %s\n", unix_path);
            return -1;
        }
        strcpy(sa.sun_path, unix_path);
        unlink(unix_path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            perror("bind");
            return -1;
        }
        chmod(unix_path, 0666);
    }
    else {
        struct sockaddr_in sa;
        int one = 1;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_port = htons((unsigned short)port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            perror("bind");
            return -1;
        }
    }
    if (listen(fd, 128) != 0) {
        perror("listen");
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    int i, port = 0, lfd;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--unix") == 0 && i + 1 < argc) {
            unix_path = argv[++i];
        }
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
            port = atoi(argv[++i]);
        }
        else if (strcmp(argv[i], "--pidfile") == 0 && i + 1 < argc) {
            pid_path = argv[++i];
        }
        else {
            fprintf(stderr, "usage: %s (--unix PATH | --port N) [--pidfile FILE]\n", argv[0]);
            return 2;
        }
    }
    if (!unix_path && !port) {
        fprintf(stderr, "usage: %s (--unix PATH | --port N) [--pidfile FILE]\n", argv[0]);
        return 2;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;   /* no SA_RESTART: accept() returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if ((lfd = listen_on(port)) < 0) {
        return 1;
    }
    if (pid_path) {
        FILE *f = fopen(pid_path, "w");
        if (f) {
            fprintf(f, "%ld\n", (long)getpid());
            fclose(f);
        }
    }
    printf("ready\n");
    fflush(stdout);
    while (!stopping) {
        pthread_t t;
        pthread_attr_t attr;
        int fd = accept(lfd, NULL, NULL);

        if (fd < 0) {
            continue;
        }
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, serve, (void *)(long)fd) != 0) {
            close(fd);
        }
        pthread_attr_destroy(&attr);
    }
    if (unix_path) {
        unlink(unix_path);
    }
    if (pid_path) {
        unlink(pid_path);
    }
    return 0;
}
