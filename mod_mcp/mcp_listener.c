/* mcp_listener — LISTEN thread feeding the router. See mcp_listener.h. */

#include "mcp_listener.h"

#include <apr_portable.h>
#include <apr_strings.h>
#include <apr_thread_proc.h>

#include <libpq-fe.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_DEBUG   MCP_LISTENER_LOG_DEBUG
#define LOG_INFO    MCP_LISTENER_LOG_INFO
#define LOG_WARNING MCP_LISTENER_LOG_WARNING

/* PostgreSQL identifiers longer than NAMEDATALEN - 1 are truncated (with a notice), after
 * which the channel would no longer match the notifications' relname. */
#define MAX_CHANNEL 63

/* Failed attempts in a row beyond the first are logged at warning once in this many. */
#define FAILURES_PER_WARNING 12

int mcp_listener_params_from_conn(apr_pool_t *p, void *pgconn, const char *const **keywords,
                                  const char *const **values)
{
    PQconninfoOption *opts, *o;
    const char **kw, **val;
    apr_size_t n = 0, i = 0;

    if (!p || !pgconn || !keywords || !values)
        return -1;
    opts = PQconninfo(pgconn);
    if (!opts)
        return -1;
    for (o = opts; o->keyword; o++) {
        if (o->val && *o->val)
            n++;
    }
    kw = apr_palloc(p, sizeof(*kw) * (n + 1));
    val = apr_palloc(p, sizeof(*val) * (n + 1));
    for (o = opts; o->keyword; o++) {
        if (o->val && *o->val) {
            kw[i] = apr_pstrdup(p, o->keyword);
            val[i] = apr_pstrdup(p, o->val);
            i++;
        }
    }
    kw[i] = NULL;
    val[i] = NULL;
    PQconninfoFree(opts);
    *keywords = kw;
    *values = val;
    return 0;
}

#if APR_HAS_THREADS

static const mcp_listener_timing_t default_timing = {
    100 * 1000,                 /* backoff_min     */
    5 * APR_USEC_PER_SEC,       /* backoff_max     */
    10 * APR_USEC_PER_SEC,      /* connect_timeout */
    30 * APR_USEC_PER_SEC,      /* idle_ping       */
    10 * APR_USEC_PER_SEC       /* ping_timeout    */
};

static int valid_channel(const char *c)
{
    size_t i;

    if (!c || !((c[0] >= 'a' && c[0] <= 'z') || c[0] == '_'))
        return 0;
    for (i = 1; c[i]; i++) {
        if (!((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= '0' && c[i] <= '9') || c[i] == '_'))
            return 0;
    }
    return i <= MAX_CHANNEL;
}

struct mcp_listener_t {
    mcp_router_t           *router;
    mcp_listener_params_fn *params;
    mcp_listener_log_fn    *log;
    void                   *baton;
    mcp_listener_timing_t   timing;
    char                    channel[MAX_CHANNEL + 1];
    char                    listen_sql[MAX_CHANNEL + 16];
    /* Only the listener's thread uses it. Unmanaged (its own allocator), so clearing it never
     * touches the allocator of the caller's pool, which other threads may be using. */
    apr_pool_t             *scratch;
    apr_thread_t           *thread;
    int                     wake_r, wake_w;   /* the self-pipe; -1 when closed */
    atomic_int              stopping;         /* set once, by the first mcp_listener_stop */
    atomic_int              connected;
    atomic_uint_least64_t   notifications;
};

/* ---- small helpers ------------------------------------------------------------------------- */

static void say(mcp_listener_t *l, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(mcp_listener_t *l, int level, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    if (!l->log)
        return;
    va_start(ap, fmt);
    apr_vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    l->log(l->baton, level, msg);
}

/* Copies text (libpq's multi-line messages, or a payload) as one printable line: control
 * characters become spaces, runs of spaces one space, no trailing space; truncated to fit. */
static void one_line(char *dst, apr_size_t size, const char *src)
{
    apr_size_t n = 0;
    int space = 0;

    if (!src)
        src = "";
    for (; *src && n + 1 < size; src++) {
        unsigned char c = (unsigned char)*src;
        if (c < 0x20 || c == 0x7f || c == ' ') {
            space = n > 0;
            continue;
        }
        if (space) {
            if (n + 2 >= size)
                break;
            dst[n++] = ' ';
            space = 0;
        }
        dst[n++] = (char)c;
    }
    dst[n] = '\0';
}

static apr_interval_time_t min_time(apr_interval_time_t a, apr_interval_time_t b)
{
    return a < b ? a : b;
}

/* Microseconds on the monotonic clock: every deadline and duration here is measured on it, so
 * that a step of the wall clock neither stretches a wait nor cuts it short. */
static apr_time_t now_mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_time_t)ts.tv_sec * APR_USEC_PER_SEC + ts.tv_nsec / 1000;
}

static int is_stopping(mcp_listener_t *l)
{
    return atomic_load(&l->stopping);
}

/* A canonical positive decimal int64: [1-9][0-9]*, no more than APR_INT64_MAX. */
static int parse_stream_id(const char *s, apr_int64_t *out)
{
    apr_int64_t v = 0;

    if (!s || *s < '1' || *s > '9')
        return 0;
    for (; *s; s++) {
        int d;
        if (*s < '0' || *s > '9')
            return 0;
        d = *s - '0';
        if (v > (APR_INT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* ---- waiting ------------------------------------------------------------------------------ */

typedef enum { IO_READY, IO_TIMEOUT, IO_STOP, IO_ERROR } io_result;

/* Waits until fd has one of events (or an error or hang-up, which reading will report), the
 * timeout passes, or stop is requested. fd < 0 waits only for stop or the timeout. */
static io_result wait_io(mcp_listener_t *l, int fd, short events, apr_interval_time_t timeout)
{
    apr_time_t deadline = now_mono() + (timeout > 0 ? timeout : 0);

    for (;;) {
        struct pollfd pfd[2];
        apr_interval_time_t left = deadline - now_mono();
        int ms, rc;

        if (is_stopping(l))
            return IO_STOP;
        if (left < 0)
            left = 0;
        ms = left >= (apr_interval_time_t)INT_MAX * 1000 ? INT_MAX : (int)((left + 999) / 1000);
        pfd[0].fd = l->wake_r;
        pfd[0].events = POLLIN;
        pfd[0].revents = 0;
        pfd[1].fd = fd;
        pfd[1].events = events;
        pfd[1].revents = 0;
        rc = poll(pfd, fd >= 0 ? 2 : 1, ms);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return IO_ERROR;
        }
        if (pfd[0].revents)
            return IO_STOP;
        if (fd >= 0 && pfd[1].revents) {
            if (pfd[1].revents & POLLNVAL) {
                errno = EBADF;
                return IO_ERROR;
            }
            return IO_READY;
        }
        if (rc == 0 && now_mono() >= deadline)
            return IO_TIMEOUT;
    }
}

/* ---- the connection ---------------------------------------------------------------------- */

/* Messages the server sends outside of a result (e.g. FATAL "terminating connection due to
 * administrator command" before a shutdown) would otherwise go to stderr. */
static void on_notice(void *arg, const PGresult *res)
{
    mcp_listener_t *l = arg;
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    char text[512];
    int level = LOG_DEBUG;

    /* A FATAL message announces the end of the connection, which is logged as a warning
     * when it comes: this line only gives the reason. */
    if (sev && (!strcmp(sev, "WARNING") || !strcmp(sev, "ERROR") || !strcmp(sev, "PANIC")))
        level = LOG_WARNING;
    else if (sev && !strcmp(sev, "FATAL"))
        level = LOG_INFO;
    else if (sev && !strcmp(sev, "NOTICE"))
        level = LOG_INFO;
    one_line(text, sizeof(text), PQresultErrorMessage(res));
    say(l, level, "PostgreSQL says: %s", text);
}

/* Routes every notification libpq has queued. No lock is held here: mcp_router_notify takes
 * only the router's short mutex and never waits for a follower. */
static void dispatch(mcp_listener_t *l, PGconn *conn)
{
    PGnotify *n;

    while ((n = PQnotifies(conn)) != NULL) {
        apr_int64_t id;
        if (!strcmp(n->relname, l->channel) && parse_stream_id(n->extra, &id)) {
            /* counted first, so that a woken follower sees the count include its wake-up */
            atomic_fetch_add(&l->notifications, 1);
            mcp_router_notify(l->router, id);
        }
        else {
            char payload[80];
            one_line(payload, sizeof(payload), n->extra);
            say(l, LOG_DEBUG, "ignored a notification on channel %s: payload \"%s\" is not a "
                "stream id", n->relname, payload);
        }
        PQfreemem(n);
    }
}

typedef enum { STEP_OK, STEP_FAILED, STEP_STOP } step_result;

static step_result io_failure(io_result r, char *err, apr_size_t errlen, const char *what,
                              apr_interval_time_t timeout)
{
    if (r == IO_STOP) {
        apr_cpystrn(err, "stopping", errlen);
        return STEP_STOP;
    }
    if (r == IO_TIMEOUT)
        apr_snprintf(err, errlen, "%s timed out after %" APR_INT64_T_FMT " ms", what,
                     (apr_int64_t)(timeout / 1000));
    else
        apr_snprintf(err, errlen, "%s: poll failed: %s", what, strerror(errno));
    return STEP_FAILED;
}

/* Reads results of the query in flight until it is complete (each must be COMMAND_OK). */
static step_result await_command(mcp_listener_t *l, PGconn *conn, apr_time_t deadline,
                                 char *err, apr_size_t errlen)
{
    for (;;) {
        PGresult *res;
        while (PQisBusy(conn)) {
            io_result r = wait_io(l, PQsocket(conn), POLLIN, deadline - now_mono());
            if (r != IO_READY)
                return io_failure(r, err, errlen, "LISTEN", l->timing.connect_timeout);
            if (!PQconsumeInput(conn)) {
                one_line(err, errlen, PQerrorMessage(conn));
                return STEP_FAILED;
            }
        }
        res = PQgetResult(conn);
        if (!res)
            return STEP_OK;
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            one_line(err, errlen, PQresultErrorMessage(res));
            PQclear(res);
            return STEP_FAILED;
        }
        PQclear(res);
    }
}

/* One attempt: parameters, a non-blocking connect, LISTEN. NULL with err set on failure
 * (err "stopping" when stop was requested). */
static PGconn *open_listening(mcp_listener_t *l, char *err, apr_size_t errlen)
{
    const char *const *keywords = NULL;
    const char *const *values = NULL;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    apr_time_t deadline;
    PGconn *conn;
    step_result sr;

    apr_pool_clear(l->scratch);
    if (l->params(l->baton, l->scratch, &keywords, &values) != 0 || !keywords || !values) {
        apr_cpystrn(err, "no connection parameters (the database may be unreachable)", errlen);
        return NULL;
    }
    if (is_stopping(l)) {
        apr_cpystrn(err, "stopping", errlen);
        return NULL;
    }
    conn = PQconnectStartParams(keywords, values, 0);
    apr_pool_clear(l->scratch);   /* libpq has copied what it needs */
    if (!conn) {
        apr_cpystrn(err, "libpq is out of memory", errlen);
        return NULL;
    }
    PQsetNoticeReceiver(conn, on_notice, l);
    deadline = now_mono() + l->timing.connect_timeout;
    /* After PQconnectStart*, behave as if PQconnectPoll had returned PGRES_POLLING_WRITING
     * (the documented protocol). The socket may change between calls (several hosts). */
    while (st != PGRES_POLLING_OK) {
        if (st == PGRES_POLLING_FAILED || PQstatus(conn) == CONNECTION_BAD) {
            one_line(err, errlen, PQerrorMessage(conn));
            PQfinish(conn);
            return NULL;
        }
        if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
            io_result r;
            if (PQsocket(conn) < 0) {
                apr_cpystrn(err, "connecting: libpq has no socket", errlen);
                PQfinish(conn);
                return NULL;
            }
            r = wait_io(l, PQsocket(conn),
                                  st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                                  deadline - now_mono());
            if (r != IO_READY) {
                io_failure(r, err, errlen, "connecting", l->timing.connect_timeout);
                PQfinish(conn);
                return NULL;
            }
        }
        st = PQconnectPoll(conn);
    }
    if (!PQsendQuery(conn, l->listen_sql)) {
        one_line(err, errlen, PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    sr = await_command(l, conn, deadline, err, errlen);
    if (sr != STEP_OK) {
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

/* Routes notifications until the connection fails (returns 1, err set) or stop is requested
 * (returns 0). While quiet for idle_ping it sends an empty query, which must be answered within
 * ping_timeout: a connection whose peer vanished without a word is noticed that way. */
static int serve(mcp_listener_t *l, PGconn *conn, char *err, apr_size_t errlen)
{
    apr_time_t next_ping = now_mono() + l->timing.idle_ping;
    apr_time_t ping_due = 0;   /* a keep-alive query is in flight; its answer is due then */

    dispatch(l, conn);   /* any that arrived together with LISTEN's answer */
    for (;;) {
        apr_time_t now = now_mono();
        io_result r;

        if (PQsocket(conn) < 0) {
            apr_cpystrn(err, "libpq has no socket", errlen);
            return 1;
        }
        r = wait_io(l, PQsocket(conn), POLLIN, (ping_due ? ping_due : next_ping) - now);

        if (r == IO_STOP)
            return 0;
        if (r == IO_ERROR) {
            apr_snprintf(err, errlen, "poll failed: %s", strerror(errno));
            return 1;
        }
        if (r == IO_TIMEOUT) {
            if (ping_due) {
                apr_snprintf(err, errlen, "no answer to a keep-alive query within %"
                             APR_INT64_T_FMT " ms", (apr_int64_t)(l->timing.ping_timeout / 1000));
                return 1;
            }
            if (!PQsendQuery(conn, "")) {
                one_line(err, errlen, PQerrorMessage(conn));
                return 1;
            }
            ping_due = now_mono() + l->timing.ping_timeout;
            continue;
        }
        if (!PQconsumeInput(conn)) {
            one_line(err, errlen, PQerrorMessage(conn));
            return 1;
        }
        /* The keep-alive query's answer (an empty-query result, then NULL when complete). */
        while (ping_due && !PQisBusy(conn)) {
            PGresult *res = PQgetResult(conn);
            if (!res) {
                ping_due = 0;
                break;
            }
            if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
                one_line(err, errlen, PQresultErrorMessage(res));
                PQclear(res);
                return 1;
            }
            PQclear(res);
        }
        dispatch(l, conn);
        if (PQstatus(conn) != CONNECTION_OK) {
            one_line(err, errlen, PQerrorMessage(conn));
            return 1;
        }
        if (!ping_due)   /* anything that arrives shows the connection is alive */
            next_ping = now_mono() + l->timing.idle_ping;
    }
}

static void *APR_THREAD_FUNC run(apr_thread_t *thread, void *arg)
{
    mcp_listener_t *l = arg;
    apr_interval_time_t backoff = l->timing.backoff_min;   /* the wait after the next failure */
    apr_interval_time_t delay = 0;                         /* the wait before the next attempt */
    apr_time_t down_since = now_mono();
    int ever_connected = 0, failures = 0;
    char err[512];

    (void)thread;
    while (!is_stopping(l)) {
        PGconn *conn;
        apr_time_t up_since;

        if (delay > 0 && wait_io(l, -1, 0, delay) == IO_STOP)
            break;
        conn = open_listening(l, err, sizeof(err));
        if (!conn) {
            if (is_stopping(l))
                break;
            failures++;
            /* After a loss (already a warning), the first failures are expected (a restart):
             * a warning only when they go on. */
            say(l, (failures == 1 && !ever_connected) || failures % FAILURES_PER_WARNING == 0
                   ? LOG_WARNING : failures == 1 ? LOG_INFO : LOG_DEBUG,
                "%s PostgreSQL failed (attempt %d, next in %" APR_INT64_T_FMT " ms): %s",
                ever_connected ? "reconnecting to" : "connecting to", failures,
                (apr_int64_t)(backoff / 1000), err);
            delay = backoff;
            backoff = min_time(backoff * 2, l->timing.backoff_max);
            continue;
        }

        /* Connected first, then the wake-up: a follower that re-reads because of it and then
         * looks at mcp_listener_connected must see 1, and LISTEN is already in force. */
        atomic_store(&l->connected, 1);
        if (ever_connected)
            say(l, LOG_INFO, "reconnected to PostgreSQL after %" APR_INT64_T_FMT " ms (failed "
                "attempts: %d); listening on channel %s again, waking every follower",
                (apr_int64_t)apr_time_as_msec(now_mono() - down_since), failures, l->channel);
        else
            say(l, LOG_INFO, "connected to PostgreSQL; listening on channel %s", l->channel);
        mcp_router_notify_all(l->router);
        ever_connected = 1;
        failures = 0;
        up_since = now_mono();

        if (!serve(l, conn, err, sizeof(err))) {
            atomic_store(&l->connected, 0);
            PQfinish(conn);
            break;
        }
        /* Disconnected first, then the wake-up: followers switch to polling at once instead
         * of finishing a long wait. */
        atomic_store(&l->connected, 0);
        PQfinish(conn);
        down_since = now_mono();
        mcp_router_notify_all(l->router);
        if (down_since - up_since >= l->timing.backoff_max)
            backoff = l->timing.backoff_min;
        say(l, LOG_WARNING, "connection to PostgreSQL lost, reconnecting in %" APR_INT64_T_FMT
            " ms: %s", (apr_int64_t)(backoff / 1000), err);
        delay = backoff;
        backoff = min_time(backoff * 2, l->timing.backoff_max);
    }
    atomic_store(&l->connected, 0);
    apr_pool_clear(l->scratch);
    return NULL;
}

/* ---- life cycle -------------------------------------------------------------------------- */

static apr_status_t stop_cleanup(void *data)
{
    mcp_listener_stop(data);
    return APR_SUCCESS;
}

/* Runs after stop_cleanup (a pre-cleanup): the thread is gone. */
static apr_status_t release_cleanup(void *data)
{
    mcp_listener_t *l = data;

    if (l->wake_r >= 0)
        close(l->wake_r);
    if (l->wake_w >= 0)
        close(l->wake_w);
    l->wake_r = l->wake_w = -1;
    if (l->scratch)
        apr_pool_destroy(l->scratch);
    l->scratch = NULL;
    return APR_SUCCESS;
}

static int valid_timing(const mcp_listener_timing_t *t)
{
    return t->backoff_min > 0 && t->backoff_max >= t->backoff_min && t->connect_timeout > 0
           && t->idle_ping > 0 && t->ping_timeout > 0;
}

static int set_fd_flags(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    int fd_fl = fcntl(fd, F_GETFD);

    return fl >= 0 && fd_fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0
           && fcntl(fd, F_SETFD, fd_fl | FD_CLOEXEC) == 0;
}

apr_status_t mcp_listener_start_ex(mcp_listener_t **out, apr_pool_t *p, mcp_router_t *router,
                                   const char *channel, mcp_listener_params_fn *params,
                                   mcp_listener_log_fn *log, void *baton,
                                   const mcp_listener_timing_t *timing)
{
    mcp_listener_t *l;
    int fds[2], masked;
    sigset_t block, saved;
    apr_status_t rv;

    if (out)
        *out = NULL;
    if (!timing)
        timing = &default_timing;
    if (!out || !p || !router || !params || !valid_channel(channel) || !valid_timing(timing))
        return APR_EINVAL;

    l = apr_pcalloc(p, sizeof(*l));
    l->router = router;
    l->params = params;
    l->log = log;
    l->baton = baton;
    l->timing = *timing;
    apr_cpystrn(l->channel, channel, sizeof(l->channel));
    /* Quoted, so that a channel that is a keyword works too; valid_channel keeps it lower
     * case, which is what an unquoted NOTIFY mcp_events or pg_notify('mcp_events', ...) use. */
    apr_snprintf(l->listen_sql, sizeof(l->listen_sql), "LISTEN \"%s\"", channel);
    atomic_init(&l->stopping, 0);
    atomic_init(&l->connected, 0);
    atomic_init(&l->notifications, 0);

    if (pipe(fds) != 0)
        return errno;
    l->wake_r = fds[0];
    l->wake_w = fds[1];
    apr_pool_cleanup_register(p, l, release_cleanup, apr_pool_cleanup_null);
    if (!set_fd_flags(l->wake_r) || !set_fd_flags(l->wake_w)) {
        rv = errno;
        apr_pool_cleanup_run(p, l, release_cleanup);
        return rv;
    }
    rv = apr_pool_create_unmanaged_ex(&l->scratch, NULL, NULL);
    if (rv != APR_SUCCESS) {
        l->scratch = NULL;
        apr_pool_cleanup_run(p, l, release_cleanup);
        return rv;
    }
    /* The thread is created with every asynchronous signal blocked (a new thread inherits the
     * mask): process-directed signals (SIGTERM, SIGHUP, SIGUSR1, SIGPIPE, ...) then go to the
     * MPM's threads, which know what to do with them, and never to this one. */
    sigfillset(&block);
    sigdelset(&block, SIGSEGV);
    sigdelset(&block, SIGBUS);
    sigdelset(&block, SIGFPE);
    sigdelset(&block, SIGILL);
    sigdelset(&block, SIGABRT);
    masked = pthread_sigmask(SIG_SETMASK, &block, &saved) == 0;
    rv = apr_thread_create(&l->thread, NULL, run, l, p);
    if (masked)
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rv != APR_SUCCESS) {
        l->thread = NULL;
        apr_pool_cleanup_run(p, l, release_cleanup);
        return rv;
    }
    /* A pre-cleanup runs before p's subpools are destroyed and before its other cleanups
     * (the router's mutex, release_cleanup): the thread is joined while all it uses exists. */
    apr_pool_pre_cleanup_register(p, l, stop_cleanup);
    *out = l;
    return APR_SUCCESS;
}

void mcp_listener_stop(mcp_listener_t *l)
{
    int expected = 0;
    apr_status_t ignored;

    if (!l || !atomic_compare_exchange_strong(&l->stopping, &expected, 1))
        return;
    /* The pipe is never drained: once written, it stays readable, and the flag is set. A full
     * pipe (EAGAIN) is readable already. */
    while (write(l->wake_w, "x", 1) < 0 && errno == EINTR)
        ;
    if (l->thread) {
        apr_os_thread_t *self = NULL;
        /* Called from the thread itself (a callback that ends the process): it is on its way
         * out already, and joining itself would fail. */
        if (apr_os_thread_get(&self, l->thread) == APR_SUCCESS && self
            && apr_os_thread_equal(*self, apr_os_thread_current()))
            return;
        apr_thread_join(&ignored, l->thread);
    }
    atomic_store(&l->connected, 0);
}

int mcp_listener_connected(const mcp_listener_t *l)
{
    return l ? atomic_load(&l->connected) : 0;
}

apr_uint64_t mcp_listener_notifications(const mcp_listener_t *l)
{
    return l ? (apr_uint64_t)atomic_load(&l->notifications) : 0;
}

#else /* !APR_HAS_THREADS */

struct mcp_listener_t {
    int unused;
};

apr_status_t mcp_listener_start_ex(mcp_listener_t **out, apr_pool_t *p, mcp_router_t *router,
                                   const char *channel, mcp_listener_params_fn *params,
                                   mcp_listener_log_fn *log, void *baton,
                                   const mcp_listener_timing_t *timing)
{
    (void)p;
    (void)router;
    (void)channel;
    (void)params;
    (void)log;
    (void)baton;
    (void)timing;
    if (out)
        *out = NULL;
    return APR_ENOTIMPL;
}

void mcp_listener_stop(mcp_listener_t *l)
{
    (void)l;
}

int mcp_listener_connected(const mcp_listener_t *l)
{
    (void)l;
    return 0;
}

apr_uint64_t mcp_listener_notifications(const mcp_listener_t *l)
{
    (void)l;
    return 0;
}

#endif

/* Both builds: the default timing. */
apr_status_t mcp_listener_start(mcp_listener_t **out, apr_pool_t *p, mcp_router_t *router,
                                const char *channel, mcp_listener_params_fn *params,
                                mcp_listener_log_fn *log, void *baton)
{
    return mcp_listener_start_ex(out, p, router, channel, params, log, baton, NULL);
}
