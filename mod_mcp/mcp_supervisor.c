/* mcp-stdio-supervisor — serves stdio MCP servers as Streamable HTTP backend sessions, one
 * process per session (docs/stdio.md is the contract; mcp_supervisor.h the map of the files).
 *
 * This file: the command line, the control pipe (configuration lines in, "ready <port>" /
 * "error ..." out), the log, signals (signalfd), the loop with its timer heap, and the clean
 * stop: every process ended and reaped, then exit 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "mcp_supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "dev"
#endif

sv_state_t sv;

/* ---- memory and buffers ------------------------------------------------------------------ */

static void out_of_memory(void)
{
    static const char msg[] = "mcp-stdio-supervisor: out of memory\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    abort();
}

void *sv_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory();
    return p;
}

void *sv_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        out_of_memory();
    return p;
}

char *sv_xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        out_of_memory();
    return d;
}

char *sv_xprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        out_of_memory();
    return s;
}

static void buf_reserve(sv_buf_t *b, size_t n)
{
    if (b->off && b->off == b->len) {
        b->off = b->len = 0;                 /* all consumed: start over */
    }
    if (b->len + n <= b->cap)
        return;
    if (b->off > b->cap / 2) {               /* reuse the consumed front */
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->len + n <= b->cap)
            return;
    }
    {
        size_t cap = b->cap ? b->cap : 1024;
        char *d;
        while (cap < b->len + n)
            cap *= 2;
        d = realloc(b->data, cap);
        if (!d)
            out_of_memory();
        b->data = d;
        b->cap = cap;
    }
}

void sv_buf_add(sv_buf_t *b, const void *p, size_t n)
{
    if (!n)
        return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void sv_buf_printf(sv_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

size_t sv_buf_pending(const sv_buf_t *b)
{
    return b->len - b->off;
}

void sv_buf_consume(sv_buf_t *b, size_t n)
{
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
}

void sv_buf_free(sv_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* ---- hash -------------------------------------------------------------------------------- */

static uint64_t hash_of(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;                  /* FNV-1a */
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 0x100000001b3ULL;
    }
    return h;
}

sv_hnode_t *sv_hash_get(const sv_hash_t *h, const char *key)
{
    uint64_t hv;
    sv_hnode_t *n;

    if (!h->nbuckets)
        return NULL;
    hv = hash_of(key);
    for (n = h->buckets[hv & (h->nbuckets - 1)]; n; n = n->next) {
        if (n->hash == hv && !strcmp(n->key, key))
            return n;
    }
    return NULL;
}

static void hash_grow(sv_hash_t *h)
{
    size_t nb = h->nbuckets ? h->nbuckets * 2 : 64, i;
    sv_hnode_t **b = sv_xcalloc(nb, sizeof(*b));

    for (i = 0; i < h->nbuckets; i++) {
        sv_hnode_t *n = h->buckets[i], *next;
        for (; n; n = next) {
            next = n->next;
            n->next = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
        }
    }
    free(h->buckets);
    h->buckets = b;
    h->nbuckets = nb;
}

void sv_hash_put(sv_hash_t *h, sv_hnode_t *node, const char *key)
{
    sv_hnode_t **slot;

    if (h->count >= h->nbuckets)
        hash_grow(h);
    node->key = key;
    node->hash = hash_of(key);
    slot = &h->buckets[node->hash & (h->nbuckets - 1)];
    node->next = *slot;
    *slot = node;
    h->count++;
}

void sv_hash_del(sv_hash_t *h, sv_hnode_t *node)
{
    sv_hnode_t **p;

    if (!h->nbuckets)
        return;
    for (p = &h->buckets[node->hash & (h->nbuckets - 1)]; *p; p = &(*p)->next) {
        if (*p == node) {
            *p = node->next;
            h->count--;
            return;
        }
    }
}

void sv_hash_free(sv_hash_t *h)
{
    free(h->buckets);
    memset(h, 0, sizeof(*h));
}

/* ---- log --------------------------------------------------------------------------------- */

static const char *const level_names[] = {"emerg", "alert", "crit", "error",
                                          "warn",  "notice", "info", "debug"};

int sv_log_level_parse(const char *name)
{
    int i;

    for (i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++) {
        if (!strcmp(name, level_names[i]))
            return i;
    }
    if (!strncmp(name, "trace", 5) && name[5] >= '1' && name[5] <= '8' && !name[6])
        return SV_DEBUG;
    return -1;
}

void sv_log(int level, const char *fmt, ...)
{
    char line[8192], when[64];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n, m;

    if (level > sv.log_level)
        return;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(when, sizeof(when), "%a %b %d %H:%M:%S", &tm);
    n = snprintf(line, sizeof(line), "[%s.%06ld %d] [mcp:%s] [pid %ld] mcp-stdio: ", when,
                 (long)tv.tv_usec, tm.tm_year + 1900, level_names[level], (long)getpid());
    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = m < 0 ? n : n + m;
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    for (m = 0; m < n; m++) {
        if (line[m] == '\n' || line[m] == '\r')
            line[m] = ' ';                          /* one entry, one line */
    }
    line[n++] = '\n';
    /* One write per line: lines of concurrent writers to the error log do not mix. */
    for (m = 0; m < n;) {
        ssize_t w = write(2, line + m, (size_t)(n - m));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        m += (int)w;
    }
}

/* ---- timers (mcp_heap) --------------------------------------------------------------------- */

static mcp_heap_t timers = MCP_HEAP_INIT;

uint64_t sv_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sv_timer_cancel(sv_timer_t *t)
{
    mcp_heap_remove(&timers, &t->node);
}

void sv_timer_set(sv_timer_t *t, uint64_t delay_ms, sv_timer_fn *fn, void *data)
{
    t->fn = fn;
    t->data = data;
    if (mcp_heap_set(&timers, &t->node, (int64_t)(sv_now() + delay_ms)) != 0)
        out_of_memory();
}

/* Runs the timers that are due; returns the ms until the next one (-1: none). */
static int timers_run(void)
{
    int64_t now = (int64_t)sv_now();
    mcp_heap_node_t *n;

    while ((n = mcp_heap_pop_due(&timers, now))) {
        sv_timer_t *t = MCP_HEAP_OWNER(n, sv_timer_t, node);
        t->fn(t);
        now = (int64_t)sv_now();
    }
    if (!(n = mcp_heap_first(&timers)))
        return -1;
    return (int)(n->due - now > 60000 ? 60000 : n->due - now);
}

/* ---- watches ------------------------------------------------------------------------------ */

/* Adds fd; -1 when epoll cannot watch it (a regular file, /dev/null: EPERM). */
static int watch_add(sv_watch_t *w, int fd, uint32_t events, sv_watch_fn *fn, void *data)
{
    struct epoll_event ev;

    w->fd = fd;
    w->events = events;
    w->fn = fn;
    w->data = data;
    ev.events = events;
    ev.data.ptr = w;
    if (epoll_ctl(sv.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        w->fd = -1;
        return -1;
    }
    return 0;
}

void sv_watch_add(sv_watch_t *w, int fd, uint32_t events, sv_watch_fn *fn, void *data)
{
    /* Every other fd is a pipe or socket of ours: failing here is a bug or out of memory. */
    if (watch_add(w, fd, events, fn, data) < 0) {
        sv_log(SV_CRIT, "epoll_ctl ADD fd %d: %s", fd, strerror(errno));
        abort();
    }
}

void sv_watch_mod(sv_watch_t *w, uint32_t events)
{
    struct epoll_event ev;

    if (w->fd < 0 || w->events == events)
        return;
    w->events = events;
    ev.events = events;
    ev.data.ptr = w;
    if (epoll_ctl(sv.epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
        sv_log(SV_ERR, "epoll_ctl MOD fd %d: %s", w->fd, strerror(errno));
}

void sv_watch_del(sv_watch_t *w)
{
    if (w->fd < 0)
        return;
    epoll_ctl(sv.epfd, EPOLL_CTL_DEL, w->fd, NULL);
    w->fd = -1;
}

/* ---- deferred frees ---------------------------------------------------------------------- */

typedef struct deferred_t {
    struct deferred_t *next;
    void (*fn)(void *);
    void *p;
} deferred_t;
static deferred_t *deferred;

void sv_defer(void (*fn)(void *), void *p)
{
    deferred_t *d = sv_xmalloc(sizeof(*d));

    d->fn = fn;
    d->p = p;
    d->next = deferred;
    deferred = d;
}

static void run_deferred(void)
{
    while (deferred) {
        deferred_t *d = deferred;
        deferred = d->next;
        d->fn(d->p);
        free(d);
    }
}

/* ---- the control pipe ---------------------------------------------------------------------- */

static sv_watch_t control_w = {.fd = -1};
static mcp_lines_t *control_lines;
static int listen_fd = -1;
static int exit_code;

static void answer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void answer(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n, off = 0, i;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    for (i = 0; i < n; i++) {
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    }
    line[n++] = '\n';
    while (off < n) {
        ssize_t w = write(1, line + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            sv_log(SV_ERR, "cannot write to the answer pipe: %s", strerror(errno));
            return;
        }
        off += (int)w;
    }
}

/* Binds host:port ("[v6]:port" too); the fd, or -1 with err. */
static int bind_listen(const char *addr, int *port, char *err, size_t errlen)
{
    struct addrinfo hints, *res, *ai;
    char host[256];
    const char *colon, *h = addr, *portstr;
    size_t hl;
    int fd = -1, one = 1, rc;

    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':') {
            snprintf(err, errlen, "listen \"%s\": expected [address]:port", addr);
            return -1;
        }
        h = addr + 1;
        hl = (size_t)(close - h);
        portstr = close + 2;
    }
    else {
        colon = strrchr(addr, ':');
        if (!colon) {
            snprintf(err, errlen, "listen \"%s\": expected host:port", addr);
            return -1;
        }
        hl = (size_t)(colon - addr);
        portstr = colon + 1;
    }
    if (hl >= sizeof(host) || !*portstr) {
        snprintf(err, errlen, "listen \"%s\": expected host:port", addr);
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rc = getaddrinfo(hl ? host : NULL, portstr, &hints, &res);
    if (rc) {
        snprintf(err, errlen, "listen \"%s\": %s", addr, gai_strerror(rc));
        return -1;
    }
    snprintf(err, errlen, "listen \"%s\": no address", addr);
    for (ai = res; ai; ai = ai->ai_next) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0
            && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
            break;
        }
        snprintf(err, errlen, "listen \"%s\": %s", addr, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* "{port}" in the advertised URL replaced by the bound port; -1 when over the bound. */
static int make_advertise(const char *tmpl, int port, char *out, size_t outlen)
{
    sv_buf_t b = {0};
    const char *s = tmpl, *p;
    int rc = 0;

    while ((p = strstr(s, "{port}")) != NULL) {
        sv_buf_add(&b, s, (size_t)(p - s));
        sv_buf_printf(&b, "%d", port);
        s = p + 6;
    }
    sv_buf_add(&b, s, strlen(s) + 1);
    if (b.len - 1 > SV_ADVERTISE_MAX || b.len > outlen)
        rc = -1;
    else
        memcpy(out, b.data, b.len);
    sv_buf_free(&b);
    return rc;
}

/* A configuration line refused (c: what was parsed of it, or NULL): said in the log and on the
 * answer pipe; the previous configuration stays, and without one (the first line) the
 * supervisor exits 1. */
static void refuse_config(sv_config_t *c, int first, const char *err)
{
    sv_log(SV_ERR, "configuration refused: %s", err);
    answer("error %s", err);
    if (c)
        sv_config_free(c);
    if (first) {
        if (listen_fd >= 0) {
            close(listen_fd);
            listen_fd = -1;
        }
        exit_code = 1;
        sv.stopping = 1;
    }
}

/* One configuration line: the first binds the listener; each answers one line. */
static void apply_config(const char *line, size_t len)
{
    char err[512], advertise[SV_ADVERTISE_MAX + 1];
    sv_config_t *c = sv_config_parse(line, len, err, sizeof(err));
    int first = sv.config == NULL, port = sv.port;
    size_t i;

    if (!c) {
        refuse_config(NULL, first, err);
        return;
    }
    if (first) {
        int fd = bind_listen(c->listen, &port, err, sizeof(err));
        if (fd < 0) {
            sv_log(SV_ERR, "%s", err);
            answer("error %s", err);
            sv_config_free(c);
            exit_code = 1;
            sv.stopping = 1;
            return;
        }
        listen_fd = fd;
    }
    if (make_advertise(c->advertise, port, advertise, sizeof(advertise)) < 0) {
        snprintf(err, sizeof(err), "advertise \"%.100s\" is over %d bytes once {port} is "
                 "replaced", c->advertise, SV_ADVERTISE_MAX);
        refuse_config(c, first, err);
        return;
    }
    /* A session id, "<32 hex>@<advertise>/stdio/<name>", must stay within what the gateway
     * accepts (mcp_http_session_id_is_valid). */
    for (i = 0; i < c->nservers; i++) {
        size_t n = 32 + 1 + strlen(advertise) + 7 + strlen(c->servers[i]->name);
        if (n > SV_SESSION_ID_MAX) {
            snprintf(err, sizeof(err), "servers.%s: its session ids would have %zu characters, "
                     "over %d: shorten the advertised URL or the name", c->servers[i]->name, n,
                     SV_SESSION_ID_MAX);
            refuse_config(c, first, err);
            return;
        }
    }
    if (!first && strcmp(c->listen, sv.config->listen) != 0)
        sv_log(SV_WARN, "listen changed from %s to %s: the supervisor keeps listening on %s "
               "(port %d) until it is restarted (an httpd stop and start)", sv.config->listen,
               c->listen, sv.config->listen, sv.port);
    if (!first) {
        /* The address stays the one bound; the rest is the new configuration's. */
        free(c->listen);
        c->listen = sv_xstrdup(sv.config->listen);
        sv_config_free(sv.config);
    }
    sv.config = c;
    sv.port = port;
    sv.log_level = c->log_level;
    memcpy(sv.advertise, advertise, sizeof(advertise));
    if (first)
        sv_http_listen_start(listen_fd);
    sv_log(SV_NOTICE, "%s: %zu stdio server(s), listening on port %d as %s",
           first ? "started" : "configuration reloaded", c->nservers, sv.port, sv.advertise);
    answer("ready %d", sv.port);
}

static void stop(const char *why)
{
    if (sv.stopping)
        return;
    sv_log(SV_NOTICE, "stopping (%s): ending %ld stdio server process(es)", why, sv.live);
    sv.stopping = 1;
}

static int control_line(void *baton, const char *line, size_t len, int cut)
{
    (void)baton;
    (void)cut;
    if (len)
        apply_config(line, len);
    return sv.stopping && !sv.config ? 1 : 0;
}

static void control_ready(sv_watch_t *w, uint32_t events)
{
    char buf[SV_CHUNK];
    ssize_t n = read(w->fd, buf, sizeof(buf));
    int rc;

    (void)events;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        mcp_lines_finish(control_lines, control_line, NULL);
        sv_watch_del(w);
        if (!sv.config) {
            exit_code = 1;
            sv.stopping = 1;
            return;
        }
        stop("EOF on the control pipe");
        return;
    }
    rc = mcp_lines_feed(control_lines, buf, (size_t)n, control_line, NULL);
    if (rc == MCP_LINES_TOO_LONG) {
        answer("error the configuration line is over %u bytes", SV_CONTROL_LINE);
        sv_log(SV_ERR, "the configuration line is over %u bytes", SV_CONTROL_LINE);
        if (!sv.config)
            exit_code = 1;
        stop("unreadable control pipe");
    }
}

/* ---- signals ------------------------------------------------------------------------------ */

static sv_watch_t signal_w = {.fd = -1};

static void reap_all(void)
{
    int status;
    pid_t pid;

    while ((pid = mcp_proc_reap(&status)) > 0)
        sv_proc_reaped(pid, status);
}

static void signal_ready(sv_watch_t *w, uint32_t events)
{
    struct signalfd_siginfo si;
    ssize_t n;

    (void)events;
    while ((n = read(w->fd, &si, sizeof(si))) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            reap_all();
        else if (si.ssi_signo == SIGTERM)
            stop("SIGTERM");
        else if (si.ssi_signo == SIGINT)
            stop("SIGINT");
    }
}

static int setup_signals(void)
{
    sigset_t set;
    int fd;

    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);   /* prefork signals its group with it at a graceful restart */
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return -1;
    fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return -1;
    sv_watch_add(&signal_w, fd, EPOLLIN, signal_ready, NULL);
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fputs("usage: mcp-stdio-supervisor [--version | --help]\n"
          "\n"
          "Serves stdio MCP servers as MCP Streamable HTTP backend sessions, one process per\n"
          "session, for mod_mcp (see docs/stdio.md). Started by the httpd parent: it reads one\n"
          "JSON configuration per line on stdin, answers \"ready <port>\" or \"error <message>\"\n"
          "on stdout for each, logs to stderr, and stops at EOF on stdin, SIGTERM or SIGINT.\n",
          f);
}

/* The most descriptors the hard limit allows: three per process, one per connection. The soft
 * limit it had is what the processes get back (sv.nofile_soft). */
static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        sv.nofile_soft = (unsigned long)rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Stopping: sessions ended, then the loop runs until every process is reaped. */
static int stopped(void)
{
    static int ended;
    static uint64_t deadline;

    if (!ended) {
        ended = 1;
        if (control_w.fd >= 0)
            sv_watch_del(&control_w);
        sv_http_listen_stop();
        sv_session_end_all();
        sv_http_close_all();
        deadline = sv_now() + 120000;
    }
    if (sv_proc_count() == 0)
        return 1;
    if (sv_now() > deadline) {
        sv_log(SV_ERR, "%zu process(es) still not reaped after 120 s: exiting anyway",
               sv_proc_count());
        return 1;
    }
    return 0;
}

/* Last, the descendants that were killed with their group but not yet reaped. */
static void reap_rest(void)
{
    uint64_t deadline = sv_now() + 2000;
    int status;

    while (sv_now() < deadline) {
        pid_t pid = mcp_proc_reap(&status);
        if (pid < 0)
            return;                         /* no child left */
        if (pid == 0)
            usleep(10000);
    }
}

int main(int argc, char **argv)
{
    struct epoll_event evs[256];

    if (argc > 1) {
        if (!strcmp(argv[1], "--version")) {
            printf("mcp-stdio-supervisor %s\n", PACKAGE_VERSION);
            return 0;
        }
        usage(strcmp(argv[1], "--help") ? stderr : stdout);
        return strcmp(argv[1], "--help") ? 2 : 0;
    }
    sv.log_level = SV_WARN;
    sv.port = -1;
    raise_nofile();
    /* Reparented descendants of the stdio servers are ours to reap (and so never zombies of
     * httpd's parent). */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        sv_log(SV_WARN, "PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
    sv.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sv.epfd < 0 || setup_signals() < 0) {
        sv_log(SV_EMERG, "cannot set up epoll or signalfd: %s", strerror(errno));
        return 1;
    }
    if (fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK) < 0) {
        sv_log(SV_EMERG, "stdin: %s", strerror(errno));
        return 1;
    }
    control_lines = mcp_lines_create(SV_CONTROL_LINE, MCP_LINES_REFUSE);
    if (watch_add(&control_w, 0, EPOLLIN, control_ready, NULL) < 0) {
        sv_log(SV_EMERG, "stdin must be the control pipe (a pipe or a socket): %s",
               strerror(errno));
        mcp_lines_destroy(control_lines);
        return 1;
    }

    for (;;) {
        int timeout, n, i;

        sv_http_turn();
        timeout = timers_run();
        sv_http_turn();
        if (sv.stopping && stopped())
            break;
        sv_session_sweep(0);
        if (sv.stopping && (timeout < 0 || timeout > 100))
            timeout = 100;                   /* reaping goes on by signal; timers by heap */
        n = epoll_wait(sv.epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout);
        if (n < 0 && errno != EINTR) {
            sv_log(SV_EMERG, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (i = 0; i < n; i++) {
            sv_watch_t *w = evs[i].data.ptr;
            if (w->fd >= 0)
                w->fn(w, evs[i].events);
        }
        run_deferred();
    }
    reap_rest();
    sv_session_sweep(1);
    sv_http_turn();
    run_deferred();
    if (sv.config)
        sv_log(SV_NOTICE, "stopped");
    sv_config_free(sv.config);
    sv_hash_free(&sv.sessions);
    sv_hash_free(&sv.procs);
    sv_hash_free(&sv.counts);
    mcp_lines_destroy(control_lines);
    mcp_heap_free(&timers);
    close(sv.epfd);
    return exit_code;
}
