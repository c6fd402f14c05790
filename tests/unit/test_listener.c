/* Unit tests for mcp_listener against a real PostgreSQL: the test starts a private server (initdb
 * and pg_ctl as the postgres user, in a fresh directory under /tmp, on a free port, TCP on
 * 127.0.0.1 only) and removes it at the end. Without root, runuser or the PostgreSQL 15 binaries
 * it FAILS (it never skips): the listener's robustness can only be shown against a server that
 * is restarted, stopped and has backends terminated and frozen under it.
 *
 * Covered: a NOTIFY wakes the followers of its stream and no others (with the measured
 * NOTIFY-to-wake latency), malformed payloads are ignored, many notifications coalesce without
 * losing the final state (trigger-driven, as in sql/schema.sql), a PostgreSQL restart (connected
 * goes 0 then 1, every follower is woken on both edges, later NOTIFYs arrive), exponential
 * backoff with its cap and reset, connect timeout, keep-alive detection of a frozen backend,
 * prompt stop while connected, connecting or backing off, stop by pool cleanup, constant
 * memory, params_from_conn round trip, argument validation.
 *
 * Threads other than the test's own never call ck_assert (Check reports failures from the
 * test's thread only); they record what they saw and the test asserts after joining them.
 * Set TEST_LISTENER_VERBOSE=1 to see the listener's debug log. */

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <apr_time.h>

#include <libpq-fe.h>

#include "mcp_listener.h"
#include "mcp_router.h"

#define PG_BIN  "/usr/lib/postgresql/15/bin"
#define CHANNEL "mcp_events"

#define MS(n) ((apr_interval_time_t)(n) * 1000)
#define S(n)  ((apr_interval_time_t)(n) * APR_USEC_PER_SEC)
#define AS_MS(t) ((double)(t) / 1000.0)

/* ---- the private PostgreSQL server --------------------------------------------------------- */

static char pg_dir[] = "/tmp/mcp-listener-pg.XXXXXX";
static int pg_dir_made;
static int pg_port;
static pid_t parent_pid;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    int st;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    st = system(cmd);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* cd /tmp: runuser keeps the working directory, which postgres may not be allowed to enter. */
static int pg_ctl(const char *args)
{
    return sh("cd /tmp && runuser -u postgres -- " PG_BIN "/pg_ctl -D %s/data -l %s/server.log "
              "-w -t 30 %s >>%s/pg_ctl.out 2>&1", pg_dir, pg_dir, args, pg_dir);
}

static int pg_start(void)
{
    char args[512];

    snprintf(args, sizeof(args), "-o \"-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off\" "
             "start", pg_port, pg_dir);
    return pg_ctl(args);
}

static int pg_running(void)
{
    return sh("cd /tmp && runuser -u postgres -- " PG_BIN "/pg_ctl -D %s/data status "
              ">/dev/null 2>&1", pg_dir) == 0;
}

static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0
        && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int setup_failed(const char *why)
{
    fprintf(stderr, "test_listener: FAIL: %s\n", why);
    return -1;
}

static int server_setup(void)
{
    struct passwd *pw;

    if (geteuid() != 0)
        return setup_failed("must run as root: it starts a private PostgreSQL server as the "
                            "postgres user (initdb and pg_ctl refuse to run as root)");
    if (access(PG_BIN "/initdb", X_OK) != 0 || access(PG_BIN "/pg_ctl", X_OK) != 0
        || access(PG_BIN "/postgres", X_OK) != 0)
        return setup_failed("the PostgreSQL 15 server binaries are missing from " PG_BIN
                            " (apt-get install postgresql-15)");
    if (sh("command -v runuser >/dev/null 2>&1") != 0)
        return setup_failed("runuser is missing (util-linux)");
    pw = getpwnam("postgres");
    if (!pw)
        return setup_failed("there is no postgres user (installed with postgresql-15)");
    if (!mkdtemp(pg_dir))
        return setup_failed("cannot create a directory under /tmp");
    pg_dir_made = 1;
    if (chown(pg_dir, pw->pw_uid, pw->pw_gid) != 0 || chmod(pg_dir, 0700) != 0)
        return setup_failed("cannot hand the server directory to the postgres user");
    pg_port = free_port();
    if (pg_port <= 0)
        return setup_failed("no free TCP port on 127.0.0.1");
    if (sh("cd /tmp && runuser -u postgres -- " PG_BIN "/initdb -D %s/data -U postgres -A trust "
           "-E UTF8 --locale=C.UTF-8 -N >%s/initdb.out 2>&1", pg_dir, pg_dir) != 0) {
        sh("tail -n 20 %s/initdb.out >&2", pg_dir);
        return setup_failed("initdb failed");
    }
    if (pg_start() != 0) {
        sh("tail -n 20 %s/server.log %s/pg_ctl.out >&2", pg_dir, pg_dir);
        return setup_failed("the PostgreSQL server did not start");
    }
    fprintf(stderr, "test_listener: private PostgreSQL on 127.0.0.1:%d in %s\n", pg_port, pg_dir);
    return 0;
}

/* atexit: Check's forked test processes run atexit handlers too; only the parent cleans up. */
static void server_teardown(void)
{
    if (getpid() != parent_pid || !pg_dir_made)
        return;
    if (pg_running() && pg_ctl("-m immediate stop") != 0)
        fprintf(stderr, "test_listener: could not stop the server in %s\n", pg_dir);
    sh("rm -rf %s", pg_dir);
    pg_dir_made = 0;
}

/* ---- a test's side of the database ---------------------------------------------------------- */

static PGconn *db_as(const char *app)
{
    char port[16];
    const char *k[] = { "host", "port", "user", "dbname", "application_name", NULL };
    const char *v[] = { "127.0.0.1", port, "postgres", "postgres", app, NULL };
    PGconn *c;

    snprintf(port, sizeof(port), "%d", pg_port);
    c = PQconnectdbParams(k, v, 0);
    ck_assert_msg(PQstatus(c) == CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

static PGconn *db(void)
{
    return db_as("test_listener");
}

static void exec_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK,
                  "%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static void notify_on(PGconn *c, const char *channel, const char *payload)
{
    const char *params[2] = { channel, payload };
    PGresult *r = PQexecParams(c, "SELECT pg_notify($1, $2)", 2, NULL, params, NULL, NULL, 0);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "pg_notify: %s", PQresultErrorMessage(r));
    PQclear(r);
}

static void notify(PGconn *c, const char *payload)
{
    notify_on(c, CHANNEL, payload);
}

/* The pid of the backend serving the connection with this application_name (0: none). */
static int backend_pid(PGconn *c, const char *app)
{
    const char *params[1] = { app };
    PGresult *r = PQexecParams(c, "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                               1, NULL, params, NULL, NULL, 0);
    int pid = 0;

    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    if (PQntuples(r) == 1)
        pid = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    return pid;
}

/* ---- the listener's callbacks, recording what they saw --------------------------------------- */

#define MAX_CALLS 256
#define MAX_LOGS  256

typedef struct tb {
    apr_thread_mutex_t *mutex;
    char         port[16];
    char         app[64];
    const char  *kw[8];
    const char  *val[8];
    int          fail;                   /* the params callback fails while set */
    int          calls;
    apr_time_t   call_at[MAX_CALLS];
    int          counts[4];              /* log lines by level */
    int          nlogs;
    int          log_level[MAX_LOGS];
    apr_time_t   log_at[MAX_LOGS];
    char         log_msg[MAX_LOGS][512];
} tb;

static apr_pool_t *pool;
static int verbose;

static tb *tb_new(const char *app, int port)
{
    tb *t = apr_pcalloc(pool, sizeof(*t));

    ck_assert_int_eq(apr_thread_mutex_create(&t->mutex, APR_THREAD_MUTEX_DEFAULT, pool),
                     APR_SUCCESS);
    snprintf(t->port, sizeof(t->port), "%d", port);
    snprintf(t->app, sizeof(t->app), "%s", app);
    t->kw[0] = "host";             t->val[0] = "127.0.0.1";
    t->kw[1] = "port";             t->val[1] = t->port;
    t->kw[2] = "user";             t->val[2] = "postgres";
    t->kw[3] = "dbname";           t->val[3] = "postgres";
    t->kw[4] = "application_name"; t->val[4] = t->app;
    t->kw[5] = "sslmode";          t->val[5] = "disable";
    t->kw[6] = NULL;               t->val[6] = NULL;
    return t;
}

static int params_cb(void *baton, apr_pool_t *p, const char *const **keywords,
                     const char *const **values)
{
    tb *t = baton;
    int fail;

    apr_thread_mutex_lock(t->mutex);
    fail = t->fail;
    if (t->calls < MAX_CALLS)
        t->call_at[t->calls] = apr_time_now();
    t->calls++;
    apr_thread_mutex_unlock(t->mutex);
    if (fail)
        return -1;
    /* copies in p, as a real callback would make, so that clearing p is exercised */
    *keywords = apr_pmemdup(p, t->kw, sizeof(t->kw));
    *values = apr_pmemdup(p, t->val, sizeof(t->val));
    return 0;
}

static void log_cb(void *baton, int level, const char *msg)
{
    static const char *names[] = { "debug", "info", "warning", "error" };
    tb *t = baton;

    if (level < 0 || level > 3)
        level = 3;
    apr_thread_mutex_lock(t->mutex);
    t->counts[level]++;
    if (t->nlogs < MAX_LOGS) {
        t->log_level[t->nlogs] = level;
        t->log_at[t->nlogs] = apr_time_now();
        snprintf(t->log_msg[t->nlogs], sizeof(t->log_msg[0]), "%s", msg);
        t->nlogs++;
    }
    apr_thread_mutex_unlock(t->mutex);
    if (level > 0 || verbose)
        fprintf(stderr, "    [%s %s] %s\n", t->app, names[level], msg);
}

static void set_fail(tb *t, int fail)
{
    apr_thread_mutex_lock(t->mutex);
    t->fail = fail;
    apr_thread_mutex_unlock(t->mutex);
}

static int calls_of(tb *t)
{
    int n;
    apr_thread_mutex_lock(t->mutex);
    n = t->calls;
    apr_thread_mutex_unlock(t->mutex);
    return n;
}

static int counts_above_debug(tb *t)
{
    int n;
    apr_thread_mutex_lock(t->mutex);
    n = t->counts[1] + t->counts[2] + t->counts[3];
    apr_thread_mutex_unlock(t->mutex);
    return n;
}

/* The first log line at or above min_level containing text, from index *from on; its time
 * in *at and its index in *from. */
static int find_log_from(tb *t, int min_level, const char *text, int *from, apr_time_t *at)
{
    int i, found = 0;

    apr_thread_mutex_lock(t->mutex);
    for (i = from ? *from : 0; i < t->nlogs; i++) {
        if (t->log_level[i] >= min_level && strstr(t->log_msg[i], text)) {
            found = 1;
            if (at)
                *at = t->log_at[i];
            if (from)
                *from = i;
            break;
        }
    }
    apr_thread_mutex_unlock(t->mutex);
    return found;
}

static int find_log(tb *t, int min_level, const char *text)
{
    return find_log_from(t, min_level, text, NULL, NULL);
}

static int count_logs(tb *t, int level, const char *text)
{
    int i, n = 0;

    apr_thread_mutex_lock(t->mutex);
    for (i = 0; i < t->nlogs; i++) {
        if (t->log_level[i] == level && strstr(t->log_msg[i], text))
            n++;
    }
    apr_thread_mutex_unlock(t->mutex);
    return n;
}

/* ---- waiting with deadlines ------------------------------------------------------------------ */

static int await_connected(mcp_listener_t *l, int want, apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;

    while (mcp_listener_connected(l) != want) {
        if (apr_time_now() > deadline)
            return 0;
        apr_sleep(MS(1));
    }
    return 1;
}

static int await_notifications(mcp_listener_t *l, apr_uint64_t n, apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;

    while (mcp_listener_notifications(l) < n) {
        if (apr_time_now() > deadline)
            return 0;
        apr_sleep(MS(1));
    }
    return 1;
}

static int await_calls(tb *t, int n, apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;

    while (calls_of(t) < n) {
        if (apr_time_now() > deadline)
            return 0;
        apr_sleep(MS(1));
    }
    return 1;
}

static int await_log(tb *t, int min_level, const char *text, apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;

    while (!find_log(t, min_level, text)) {
        if (apr_time_now() > deadline)
            return 0;
        apr_sleep(MS(1));
    }
    return 1;
}

static int await_backend_gone(PGconn *c, const char *app, apr_interval_time_t timeout)
{
    apr_time_t deadline = apr_time_now() + timeout;

    while (backend_pid(c, app) != 0) {
        if (apr_time_now() > deadline)
            return 0;
        apr_sleep(MS(5));
    }
    return 1;
}

/* ---- fixtures -------------------------------------------------------------------------------- */

static void setup(void)
{
    /* A test that failed half-way may have left the server stopped. */
    if (!pg_running())
        ck_assert_int_eq(pg_start(), 0);
    ck_assert_int_eq(apr_pool_create(&pool, NULL), APR_SUCCESS);
}

static void teardown(void)
{
    apr_pool_destroy(pool);   /* stops any listener still running (pre-cleanup) */
    pool = NULL;
}

static mcp_listener_t *start_listener(mcp_router_t *r, tb *t, const mcp_listener_timing_t *timing)
{
    mcp_listener_t *l = NULL;

    ck_assert_int_eq(mcp_listener_start_ex(&l, pool, r, CHANNEL, params_cb, log_cb, t, timing),
                     APR_SUCCESS);
    ck_assert_ptr_nonnull(l);
    return l;
}

/* Subscribed before the listener started: the wake-up every follower gets once the listener is
 * connected (connected is set before it) must come. Consumes it. */
static void consume_connect_wakeup(mcp_router_sub_t *sub)
{
    ck_assert_int_eq(mcp_router_wait(sub, S(2)), 1);
}

static int cmp_time(const void *a, const void *b)
{
    apr_interval_time_t x = *(const apr_interval_time_t *)a, y = *(const apr_interval_time_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- tests ----------------------------------------------------------------------------------- */

START_TEST(test_arguments)
{
    static const char *bad[] = {
        "", "MCP_events", "Mcp", "1abc", "a-b", "a b", "mcp_events;", "x\"y", "caf\xc3\xa9",
        "_234567890123456789012345678901234567890123456789012345678901234"   /* 64 chars */
    };
    mcp_router_t *r = mcp_router_create(pool, 4);
    mcp_listener_timing_t timing = { MS(100), S(5), S(10), S(30), S(10) };
    tb *t = tb_new("mcp_args", pg_port);
    mcp_listener_t *l = (mcp_listener_t *)&timing;
    apr_size_t i;

    ck_assert_ptr_nonnull(r);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        l = (mcp_listener_t *)&timing;
        ck_assert_int_eq(mcp_listener_start(&l, pool, r, bad[i], params_cb, log_cb, t),
                         APR_EINVAL);
        ck_assert_ptr_null(l);
    }
    ck_assert_int_eq(mcp_listener_start(&l, pool, r, NULL, params_cb, log_cb, t), APR_EINVAL);
    ck_assert_int_eq(mcp_listener_start(&l, pool, NULL, CHANNEL, params_cb, log_cb, t),
                     APR_EINVAL);
    ck_assert_int_eq(mcp_listener_start(&l, pool, r, CHANNEL, NULL, log_cb, t), APR_EINVAL);
    ck_assert_int_eq(mcp_listener_start(&l, NULL, r, CHANNEL, params_cb, log_cb, t), APR_EINVAL);
    ck_assert_int_eq(mcp_listener_start(NULL, pool, r, CHANNEL, params_cb, log_cb, t), APR_EINVAL);
    timing.backoff_min = 0;
    ck_assert_int_eq(mcp_listener_start_ex(&l, pool, r, CHANNEL, params_cb, log_cb, t, &timing),
                     APR_EINVAL);
    timing.backoff_min = S(6);   /* above backoff_max */
    ck_assert_int_eq(mcp_listener_start_ex(&l, pool, r, CHANNEL, params_cb, log_cb, t, &timing),
                     APR_EINVAL);
    timing.backoff_min = MS(100);
    timing.ping_timeout = 0;
    ck_assert_int_eq(mcp_listener_start_ex(&l, pool, r, CHANNEL, params_cb, log_cb, t, &timing),
                     APR_EINVAL);
    ck_assert_int_eq(calls_of(t), 0);   /* no thread was started */

    /* NULL is harmless */
    mcp_listener_stop(NULL);
    ck_assert_int_eq(mcp_listener_connected(NULL), 0);
    ck_assert(mcp_listener_notifications(NULL) == 0);

    /* The longest channel, and one that is a keyword (LISTEN quotes it), both work; log may
     * be NULL. */
    {
        char chan63[64];
        PGconn *c = db();
        mcp_router_sub_t *sub = mcp_router_subscribe(r, 3);
        mcp_listener_t *l63 = NULL, *lsel = NULL;

        memcpy(chan63, bad[9], 63);
        chan63[63] = '\0';
        ck_assert_int_eq(strlen(bad[9]), 64);
        ck_assert_int_eq(mcp_listener_start(&l63, pool, r, chan63, params_cb, NULL, t),
                         APR_SUCCESS);
        ck_assert_int_eq(mcp_listener_start(&lsel, pool, r, "select", params_cb, log_cb, t),
                         APR_SUCCESS);
        ck_assert(await_connected(l63, 1, S(5)));
        ck_assert(await_connected(lsel, 1, S(5)));
        while (mcp_router_wait(sub, 0))   /* the connect wake-ups */
            ;
        notify_on(c, chan63, "3");
        ck_assert_int_eq(mcp_router_wait(sub, S(2)), 1);
        notify_on(c, "select", "3");
        ck_assert_int_eq(mcp_router_wait(sub, S(2)), 1);
        ck_assert(await_notifications(l63, 1, S(2)));
        ck_assert(await_notifications(lsel, 1, S(2)));
        mcp_listener_stop(l63);
        mcp_listener_stop(lsel);
        mcp_router_unsubscribe(sub);
        PQfinish(c);
    }
}
END_TEST

static int clone_params_cb(void *baton, apr_pool_t *p, const char *const **keywords,
                           const char *const **values)
{
    return mcp_listener_params_from_conn(p, baton, keywords, values);
}

START_TEST(test_params_from_conn)
{
    PGconn *c = db_as("mcp_roundtrip");
    const char *const *k = NULL;
    const char *const *v = NULL;
    int i, seen = 0;
    char port[16];
    PGconn *c2;
    PGresult *res;

    snprintf(port, sizeof(port), "%d", pg_port);
    ck_assert_int_eq(mcp_listener_params_from_conn(pool, c, &k, &v), 0);
    ck_assert_ptr_nonnull(k);
    ck_assert_ptr_nonnull(v);
    for (i = 0; k[i]; i++) {
        ck_assert_ptr_nonnull(v[i]);
        ck_assert_int_gt(strlen(v[i]), 0);
        if (!strcmp(k[i], "host") && !strcmp(v[i], "127.0.0.1"))
            seen |= 1;
        if (!strcmp(k[i], "port") && !strcmp(v[i], port))
            seen |= 2;
        if (!strcmp(k[i], "user") && !strcmp(v[i], "postgres"))
            seen |= 4;
        if (!strcmp(k[i], "dbname") && !strcmp(v[i], "postgres"))
            seen |= 8;
        if (!strcmp(k[i], "application_name") && !strcmp(v[i], "mcp_roundtrip"))
            seen |= 16;
    }
    ck_assert_ptr_null(v[i]);
    ck_assert_int_eq(seen, 31);

    /* The copies outlive the connection they came from. */
    PQfinish(c);
    c2 = PQconnectdbParams(k, v, 0);
    ck_assert_msg(PQstatus(c2) == CONNECTION_OK, "%s", PQerrorMessage(c2));
    res = PQexec(c2, "SELECT current_setting('application_name'), inet_server_port()");
    ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
    ck_assert_str_eq(PQgetvalue(res, 0, 0), "mcp_roundtrip");
    ck_assert_str_eq(PQgetvalue(res, 0, 1), port);
    PQclear(res);

    ck_assert_int_eq(mcp_listener_params_from_conn(NULL, c2, &k, &v), -1);
    ck_assert_int_eq(mcp_listener_params_from_conn(pool, NULL, &k, &v), -1);
    ck_assert_int_eq(mcp_listener_params_from_conn(pool, c2, NULL, &v), -1);
    ck_assert_int_eq(mcp_listener_params_from_conn(pool, c2, &k, NULL), -1);

    /* What mod_mcp does: a listener whose parameters are cloned from a live connection. */
    {
        mcp_router_t *r = mcp_router_create(pool, 2);
        mcp_listener_t *l = NULL;
        mcp_router_sub_t *sub = mcp_router_subscribe(r, 4);

        ck_assert_int_eq(mcp_listener_start(&l, pool, r, CHANNEL, clone_params_cb, NULL, c2),
                         APR_SUCCESS);
        ck_assert(await_connected(l, 1, S(5)));
        consume_connect_wakeup(sub);
        {
            PGconn *c3 = db();
            notify(c3, "4");
            ck_assert_int_eq(mcp_router_wait(sub, S(2)), 1);
            PQfinish(c3);
        }
        mcp_listener_stop(l);
        mcp_router_unsubscribe(sub);
    }
    PQfinish(c2);
}
END_TEST

START_TEST(test_notify_wakes_only_its_stream)
{
    enum { N = 50 };
    mcp_router_t *r = mcp_router_create(pool, 8);
    tb *t = tb_new("mcp_wake", pg_port);
    mcp_router_sub_t *s1 = mcp_router_subscribe(r, 1);
    mcp_router_sub_t *s1b = mcp_router_subscribe(r, 1);   /* two followers of stream 1 */
    mcp_router_sub_t *s2 = mcp_router_subscribe(r, 2);
    apr_interval_time_t total[N], after[N];
    apr_time_t t0;
    mcp_listener_t *l;
    PGconn *c;
    int i, loud;

    l = start_listener(r, t, NULL);
    ck_assert(await_connected(l, 1, S(5)));
    ck_assert(find_log(t, MCP_LISTENER_LOG_INFO, "listening on channel mcp_events"));
    consume_connect_wakeup(s1);
    consume_connect_wakeup(s1b);
    consume_connect_wakeup(s2);
    c = db();
    loud = counts_above_debug(t);

    for (i = 0; i < N; i++) {
        apr_time_t a = apr_time_now(), b;
        notify(c, "1");
        b = apr_time_now();
        ck_assert_int_eq(mcp_router_wait(s1, S(2)), 1);
        total[i] = apr_time_now() - a;
        after[i] = apr_time_now() - b;
        ck_assert_int_eq(mcp_router_wait(s1b, S(2)), 1);
    }
    ck_assert_int_eq(mcp_router_wait(s2, 0), 0);   /* never woken */
    ck_assert_int_eq(mcp_router_wait(s1, MS(50)), 0);   /* one wake-up per notification */
    ck_assert(await_notifications(l, N, S(2)));
    ck_assert(mcp_listener_notifications(l) == N);
    /* nothing is logged per notification above debug */
    ck_assert_int_eq(counts_above_debug(t), loud);
    qsort(total, N, sizeof(total[0]), cmp_time);
    qsort(after, N, sizeof(after[0]), cmp_time);
    fprintf(stderr, "test_listener: NOTIFY-to-wake latency over %d notifications (from sending "
            "pg_notify to the follower's wait returning): min %.2f ms, median %.2f ms, "
            "p90 %.2f ms, max %.2f ms; after pg_notify's own round trip returned: median %.2f ms, "
            "max %.2f ms\n", N, AS_MS(total[0]), AS_MS(total[N / 2]), AS_MS(total[N * 9 / 10]),
            AS_MS(total[N - 1]), AS_MS(after[N / 2]), AS_MS(after[N - 1]));

    /* Stopping a connected, idle listener is prompt and idempotent. */
    t0 = apr_time_now();
    mcp_listener_stop(l);
    ck_assert_int_lt(apr_time_now() - t0, S(1));
    ck_assert_int_eq(mcp_listener_connected(l), 0);
    mcp_listener_stop(l);
    ck_assert(await_backend_gone(c, "mcp_wake", S(2)));
    /* stopped: no more wake-ups */
    notify(c, "1");
    ck_assert_int_eq(mcp_router_wait(s1, MS(200)), 0);
    PQfinish(c);
    mcp_router_unsubscribe(s1);
    mcp_router_unsubscribe(s1b);
    mcp_router_unsubscribe(s2);
}
END_TEST

START_TEST(test_garbage_ignored)
{
    static const char *garbage[] = {
        "", "abc", "0", "00", "-7", "+7", " 7", "7 ", "07", "7abc", "7\n", "1e3", "0x7", "7.0",
        "12abc", "9223372036854775808", "99999999999999999999999", ("\xe2\x80\x8b" "7")
    };
    mcp_router_t *r = mcp_router_create(pool, 8);
    tb *t = tb_new("mcp_garbage", pg_port);
    mcp_router_sub_t *s7 = mcp_router_subscribe(r, 7);
    mcp_router_sub_t *s12 = mcp_router_subscribe(r, 12);
    mcp_router_sub_t *smax = mcp_router_subscribe(r, APR_INT64_MAX);
    char *huge = apr_palloc(pool, 7001);
    mcp_listener_t *l;
    PGconn *c;
    apr_size_t i;
    int ng = (int)(sizeof(garbage) / sizeof(garbage[0]));

    l = start_listener(r, t, NULL);
    ck_assert(await_connected(l, 1, S(5)));
    consume_connect_wakeup(s7);
    consume_connect_wakeup(s12);
    consume_connect_wakeup(smax);
    c = db();
    for (i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
        notify(c, garbage[i]);
    memset(huge, '7', 7000);
    huge[7000] = '\0';
    notify(c, huge);
    notify_on(c, "other_channel", "7");   /* not listened to */
    /* Notifications arrive in order: once this one is routed, all the above were handled. */
    notify(c, "9223372036854775807");
    ck_assert_int_eq(mcp_router_wait(smax, S(2)), 1);
    ck_assert_int_eq(mcp_router_wait(s7, 0), 0);
    ck_assert_int_eq(mcp_router_wait(s12, 0), 0);
    ck_assert(mcp_listener_notifications(l) == 1);
    /* each ignored at debug (the huge one too, truncated) */
    ck_assert_int_eq(count_logs(t, MCP_LISTENER_LOG_DEBUG, "ignored a notification"), ng + 1);
    ck_assert_int_eq(counts_above_debug(t), 1);   /* just "connected" */
    /* and the connection is fine */
    notify(c, "12");
    ck_assert_int_eq(mcp_router_wait(s12, S(2)), 1);
    ck_assert_int_eq(mcp_listener_connected(l), 1);
    PQfinish(c);
    mcp_listener_stop(l);
    mcp_router_unsubscribe(s7);
    mcp_router_unsubscribe(s12);
    mcp_router_unsubscribe(smax);
}
END_TEST

/* A follower in its own thread, reading the "table" through its own connection. */
typedef struct follower {
    mcp_router_sub_t *sub;
    PGconn           *conn;
    long              target;
    long              final;
    long              reads;
    long              wakeups;
    long              lost;
    long              errors;
} follower;

static void *APR_THREAD_FUNC follower_thread(apr_thread_t *thread, void *arg)
{
    follower *f = arg;

    (void)thread;
    for (;;) {
        PGresult *res = PQexec(f->conn, "SELECT v FROM listener_state WHERE id = 5");
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
            f->errors++;
            PQclear(res);
            break;
        }
        f->final = atol(PQgetvalue(res, 0, 0));
        f->reads++;
        PQclear(res);
        if (f->final >= f->target)
            break;
        /* v < target: at least one more commit, hence one more notification, is coming. */
        if (mcp_router_wait(f->sub, S(5)))
            f->wakeups++;
        else if (++f->lost > 0)
            break;
    }
    return NULL;
}

START_TEST(test_coalesce_final_state)
{
    enum { N = 300 };
    mcp_router_t *r = mcp_router_create(pool, 4);
    tb *t = tb_new("mcp_coalesce", pg_port);
    mcp_router_sub_t *sub = mcp_router_subscribe(r, 5);
    follower f;
    apr_thread_t *th;
    apr_status_t ignored;
    mcp_listener_t *l;
    PGconn *c = db();
    int i;

    /* The shape of sql/schema.sql: a trigger notifies the stream id at commit. */
    exec_ok(c, "CREATE TABLE IF NOT EXISTS listener_state (id bigint PRIMARY KEY, v bigint NOT NULL)");
    exec_ok(c, "CREATE OR REPLACE FUNCTION listener_state_notify() RETURNS trigger "
               "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('" CHANNEL "', NEW.id::text); "
               "RETURN NULL; END $$");
    exec_ok(c, "CREATE OR REPLACE TRIGGER listener_state_notify AFTER UPDATE ON listener_state "
               "FOR EACH ROW EXECUTE FUNCTION listener_state_notify()");
    exec_ok(c, "DELETE FROM listener_state WHERE id = 5");
    exec_ok(c, "INSERT INTO listener_state VALUES (5, 0)");   /* an insert does not notify */

    l = start_listener(r, t, NULL);
    ck_assert(await_connected(l, 1, S(5)));
    consume_connect_wakeup(sub);

    memset(&f, 0, sizeof(f));
    f.sub = sub;
    f.conn = db_as("mcp_follower");
    f.target = N;
    ck_assert_int_eq(apr_thread_create(&th, NULL, follower_thread, &f, pool), APR_SUCCESS);
    for (i = 0; i < N; i++)
        exec_ok(c, "UPDATE listener_state SET v = v + 1 WHERE id = 5");
    apr_thread_join(&ignored, th);

    ck_assert_int_eq(f.errors, 0);
    ck_assert_int_eq(f.lost, 0);
    ck_assert_int_eq(f.final, N);
    ck_assert_int_le(f.wakeups, N);
    ck_assert(await_notifications(l, N, S(5)));
    ck_assert(mcp_listener_notifications(l) == N);
    fprintf(stderr, "test_listener: %d commits, %d notifications routed; the follower read the "
            "table %ld times after %ld wake-ups and saw the final value %ld\n", N,
            (int)mcp_listener_notifications(l), f.reads, f.wakeups, f.final);
    PQfinish(f.conn);
    PQfinish(c);
    mcp_listener_stop(l);
    mcp_router_unsubscribe(sub);
}
END_TEST

typedef struct restarter {
    int status;
} restarter;

static void *APR_THREAD_FUNC restart_thread(apr_thread_t *thread, void *arg)
{
    restarter *rs = arg;

    (void)thread;
    rs->status = pg_ctl("-m fast restart");
    return NULL;
}

START_TEST(test_restart)
{
    mcp_router_t *r = mcp_router_create(pool, 8);
    tb *t = tb_new("mcp_restart", pg_port);
    mcp_router_sub_t *sa = mcp_router_subscribe(r, 77);
    mcp_router_sub_t *sb, *sc;
    restarter rs = { -1 };
    apr_thread_t *th;
    apr_status_t ignored;
    apr_time_t t_down, t_up;
    int went_down, down_wake, still_down, came_up, up_wake;
    mcp_listener_t *l;
    PGconn *c;

    l = start_listener(r, t, NULL);
    ck_assert(await_connected(l, 1, S(5)));
    consume_connect_wakeup(sa);

    ck_assert_int_eq(apr_thread_create(&th, NULL, restart_thread, &rs, pool), APR_SUCCESS);
    went_down = await_connected(l, 0, S(15));
    t_down = apr_time_now();
    /* connected is cleared before every follower is woken: that wake-up is certain now */
    down_wake = mcp_router_wait(sa, S(2));
    sb = mcp_router_subscribe(r, 78);   /* after the disconnect: only the reconnect can wake it */
    still_down = !mcp_listener_connected(l);
    came_up = await_connected(l, 1, S(20));
    t_up = apr_time_now();
    up_wake = mcp_router_wait(sb, S(2));
    apr_thread_join(&ignored, th);

    ck_assert_msg(went_down, "connected never went to 0 during the restart");
    ck_assert_msg(down_wake, "followers were not woken on the disconnect");
    ck_assert_msg(still_down, "reconnected within the minimum backoff");
    ck_assert_msg(came_up, "connected never came back after the restart");
    ck_assert_msg(up_wake, "followers were not woken after the reconnect");
    ck_assert_int_eq(rs.status, 0);
    ck_assert_int_eq(mcp_router_wait(sa, 0), 1);   /* woken by the reconnect as well */
    ck_assert(find_log(t, MCP_LISTENER_LOG_WARNING, "connection to PostgreSQL lost"));
    ck_assert(find_log(t, MCP_LISTENER_LOG_INFO, "reconnected to PostgreSQL"));
    fprintf(stderr, "test_listener: pg_ctl restart -m fast: listener disconnected for %.0f ms\n",
            AS_MS(t_up - t_down));

    /* A NOTIFY after the restart is delivered. */
    c = db();
    sc = mcp_router_subscribe(r, 79);
    notify(c, "79");
    ck_assert_int_eq(mcp_router_wait(sc, S(2)), 1);
    ck_assert_int_eq(mcp_router_wait(sb, 0), 0);
    PQfinish(c);
    mcp_listener_stop(l);
    mcp_router_unsubscribe(sa);
    mcp_router_unsubscribe(sb);
    mcp_router_unsubscribe(sc);
}
END_TEST

START_TEST(test_stop_during_backoff)
{
    static const apr_interval_time_t expect_gap[] = { MS(200), MS(400), MS(800) };
    mcp_router_t *r = mcp_router_create(pool, 2);
    tb *t = tb_new("mcp_backoff", pg_port);
    apr_interval_time_t gaps[3], stop_took;
    apr_time_t t0;
    int c0, i, stopped_rc, restarted_rc;
    mcp_listener_t *l;

    l = start_listener(r, t, NULL);
    ck_assert(await_connected(l, 1, S(5)));
    c0 = calls_of(t);
    stopped_rc = pg_ctl("-m fast stop");
    ck_assert_int_eq(stopped_rc, 0);
    ck_assert(await_connected(l, 0, S(10)));
    /* attempts about 100, 300, 700 and 1500 ms after the loss, all failing */
    ck_assert(await_calls(t, c0 + 4, S(5)));
    apr_sleep(MS(50));   /* now inside the 800 ms wait before the fifth attempt */
    t0 = apr_time_now();
    mcp_listener_stop(l);
    stop_took = apr_time_now() - t0;
    restarted_rc = pg_start();

    fprintf(stderr, "test_listener: stop() during backoff took %.2f ms\n", AS_MS(stop_took));
    ck_assert_int_lt(stop_took, S(1));
    ck_assert_int_eq(restarted_rc, 0);
    ck_assert_int_eq(mcp_listener_connected(l), 0);
    apr_thread_mutex_lock(t->mutex);
    for (i = 0; i < 3; i++)
        gaps[i] = t->call_at[c0 + i + 1] - t->call_at[c0 + i];
    apr_thread_mutex_unlock(t->mutex);
    for (i = 0; i < 3; i++) {
        ck_assert_msg(gaps[i] >= expect_gap[i] - MS(2) && gaps[i] <= expect_gap[i] + MS(300),
                      "gap %d between attempts: %.1f ms, expected about %.0f ms", i,
                      AS_MS(gaps[i]), AS_MS(expect_gap[i]));
    }
    /* After a loss (a warning of its own), the first failed attempt is only info. */
    ck_assert(find_log(t, MCP_LISTENER_LOG_INFO, "reconnecting to PostgreSQL failed (attempt 1,"));
    ck_assert(!find_log(t, MCP_LISTENER_LOG_WARNING, "reconnecting to PostgreSQL failed (attempt 1,"));
    ck_assert(!find_log(t, MCP_LISTENER_LOG_WARNING, "(attempt 2,"));
    ck_assert(find_log(t, MCP_LISTENER_LOG_DEBUG, "(attempt 2,"));
}
END_TEST

START_TEST(test_params_failure_backoff_cap_and_reset)
{
    static const apr_interval_time_t expect_gap[] = { MS(20), MS(40), MS(80), MS(160), MS(160),
                                                      MS(160) };
    mcp_listener_timing_t timing = { MS(20), MS(160), S(5), S(30), S(10) };
    mcp_router_t *r = mcp_router_create(pool, 2);
    tb *t = tb_new("mcp_cap", pg_port);
    apr_interval_time_t gaps[6];
    apr_time_t lost_at = 0;
    int i, c_lost, from = 0, pid;
    mcp_listener_t *l;
    PGconn *c;

    set_fail(t, 1);
    l = start_listener(r, t, &timing);
    ck_assert(await_calls(t, 7, S(5)));
    ck_assert_int_eq(mcp_listener_connected(l), 0);
    apr_thread_mutex_lock(t->mutex);
    for (i = 0; i < 6; i++)
        gaps[i] = t->call_at[i + 1] - t->call_at[i];
    apr_thread_mutex_unlock(t->mutex);
    for (i = 0; i < 6; i++) {
        ck_assert_msg(gaps[i] >= expect_gap[i] - MS(2) && gaps[i] <= expect_gap[i] + MS(150),
                      "gap %d between attempts: %.1f ms, expected about %.0f ms", i,
                      AS_MS(gaps[i]), AS_MS(expect_gap[i]));
    }
    ck_assert(find_log(t, MCP_LISTENER_LOG_WARNING, "connecting to PostgreSQL failed (attempt 1,"));
    ck_assert(find_log(t, MCP_LISTENER_LOG_WARNING, "no connection parameters"));
    ck_assert(!find_log(t, MCP_LISTENER_LOG_WARNING, "(attempt 2,"));

    /* the parameters become available: connected at the next attempt */
    set_fail(t, 0);
    ck_assert(await_connected(l, 1, S(2)));

    /* Stable for longer than backoff_max: a loss starts the backoff over at backoff_min. */
    apr_sleep(MS(400));
    c = db();
    pid = backend_pid(c, "mcp_cap");
    ck_assert_int_gt(pid, 0);
    c_lost = calls_of(t);
    {
        char sql[64];
        snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", pid);
        exec_ok(c, sql);
    }
    ck_assert(await_connected(l, 0, S(5)));
    ck_assert(await_connected(l, 1, S(5)));
    ck_assert(find_log_from(t, MCP_LISTENER_LOG_WARNING, "connection to PostgreSQL lost", &from,
                            &lost_at));
    ck_assert(find_log(t, MCP_LISTENER_LOG_INFO, "terminating connection due to administrator"));
    apr_thread_mutex_lock(t->mutex);
    ck_assert_int_eq(t->calls, c_lost + 1);
    ck_assert_msg(t->call_at[c_lost] - lost_at < MS(120), "reconnected %.1f ms after the loss; "
                  "the backoff was not reset", AS_MS(t->call_at[c_lost] - lost_at));
    apr_thread_mutex_unlock(t->mutex);
    PQfinish(c);
    mcp_listener_stop(l);
}
END_TEST

/* A TCP port that accepts connections (the kernel completes the handshake) and never answers. */
static int black_hole(int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 64), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

START_TEST(test_connect_timeout_and_stop_while_connecting)
{
    mcp_listener_timing_t timing = { MS(50), MS(100), MS(300), S(30), S(10) };
    mcp_router_t *r = mcp_router_create(pool, 2);
    int port, fd = black_hole(&port);
    tb *t1 = tb_new("mcp_hole1", port);
    tb *t2 = tb_new("mcp_hole2", port);
    mcp_listener_t *l1, *l2;
    apr_time_t t0;
    apr_interval_time_t took;

    /* an attempt is given up after connect_timeout */
    l1 = start_listener(r, t1, &timing);
    ck_assert(await_log(t1, MCP_LISTENER_LOG_WARNING, "connecting timed out after 300 ms", S(3)));
    ck_assert_int_eq(mcp_listener_connected(l1), 0);
    mcp_listener_stop(l1);

    /* with the default 10 s, stop interrupts the attempt at once */
    l2 = start_listener(r, t2, NULL);
    ck_assert(await_calls(t2, 1, S(2)));
    apr_sleep(MS(100));
    t0 = apr_time_now();
    mcp_listener_stop(l2);
    took = apr_time_now() - t0;
    fprintf(stderr, "test_listener: stop() while connecting took %.2f ms\n", AS_MS(took));
    ck_assert_int_lt(took, S(1));
    ck_assert_int_eq(calls_of(t2), 1);
    ck_assert_int_eq(counts_above_debug(t2), 0);   /* a stop is not a failure */
    close(fd);
}
END_TEST

START_TEST(test_keepalive_detects_frozen_backend)
{
    mcp_listener_timing_t timing = { MS(50), MS(200), S(2), MS(150), MS(300) };
    mcp_router_t *r = mcp_router_create(pool, 2);
    tb *t = tb_new("mcp_frozen", pg_port);
    mcp_router_sub_t *sub = mcp_router_subscribe(r, 9);
    apr_time_t t0;
    apr_interval_time_t took;
    int pid, down;
    mcp_listener_t *l;
    PGconn *c;

    l = start_listener(r, t, &timing);
    ck_assert(await_connected(l, 1, S(5)));
    consume_connect_wakeup(sub);
    /* several keep-alive queries are answered: still connected, nothing logged */
    apr_sleep(MS(700));
    ck_assert_int_eq(mcp_listener_connected(l), 1);
    ck_assert_int_eq(counts_above_debug(t), 1);
    c = db();
    notify(c, "9");   /* notifications and keep-alives mix */
    ck_assert_int_eq(mcp_router_wait(sub, S(2)), 1);

    /* The backend stops answering (as a vanished host would, without a word). */
    pid = backend_pid(c, "mcp_frozen");
    ck_assert_int_gt(pid, 0);
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    t0 = apr_time_now();
    down = await_connected(l, 0, S(3));
    took = apr_time_now() - t0;
    kill(pid, SIGCONT);
    ck_assert_msg(down, "a frozen backend went unnoticed");
    fprintf(stderr, "test_listener: frozen backend noticed after %.0f ms (idle_ping 150 ms, "
            "ping_timeout 300 ms)\n", AS_MS(took));
    /* (connected is cleared before the loss is logged) */
    ck_assert(await_log(t, MCP_LISTENER_LOG_WARNING, "no answer to a keep-alive query", S(2)));
    ck_assert(await_connected(l, 1, S(3)));
    consume_connect_wakeup(sub);   /* the disconnect's and the reconnect's, coalesced or not */
    {
        apr_uint64_t n0 = mcp_listener_notifications(l);
        notify(c, "9");
        ck_assert(await_notifications(l, n0 + 1, S(2)));
    }
    PQfinish(c);
    mcp_listener_stop(l);
    mcp_router_unsubscribe(sub);
}
END_TEST

START_TEST(test_pool_cleanup_stops)
{
    apr_pool_t *sp;
    mcp_router_t *r;
    mcp_listener_t *l = NULL;
    tb *t = tb_new("mcp_cleanup", pg_port);
    PGconn *c = db();
    apr_time_t t0;
    apr_interval_time_t took;

    /* As in mod_mcp: router and listener in the same (child) pool. */
    ck_assert_int_eq(apr_pool_create(&sp, pool), APR_SUCCESS);
    r = mcp_router_create(sp, 4);
    ck_assert_int_eq(mcp_listener_start(&l, sp, r, CHANNEL, params_cb, log_cb, t), APR_SUCCESS);
    ck_assert(await_connected(l, 1, S(5)));
    t0 = apr_time_now();
    apr_pool_destroy(sp);
    took = apr_time_now() - t0;
    ck_assert_int_lt(took, S(1));
    ck_assert(await_backend_gone(c, "mcp_cleanup", S(2)));   /* the connection was closed */

    /* The same while the thread is waiting to retry. */
    ck_assert_int_eq(apr_pool_create(&sp, pool), APR_SUCCESS);
    set_fail(t, 1);
    r = mcp_router_create(sp, 4);
    ck_assert_int_eq(mcp_listener_start(&l, sp, r, CHANNEL, params_cb, log_cb, t), APR_SUCCESS);
    ck_assert(await_log(t, MCP_LISTENER_LOG_WARNING, "no connection parameters", S(2)));
    t0 = apr_time_now();
    apr_pool_destroy(sp);
    took = apr_time_now() - t0;
    ck_assert_int_lt(took, S(1));
    PQfinish(c);
}
END_TEST

START_TEST(test_constant_memory)
{
    apr_pool_t *sp;
    mcp_router_t *r = mcp_router_create(pool, 4);
    mcp_listener_timing_t timing = { MS(20), MS(40), S(5), S(30), S(10) };
    mcp_router_sub_t *sub = mcp_router_subscribe(r, 11);
    mcp_listener_t *l = NULL;
    tb *t = tb_new("mcp_memory", pg_port);
    PGconn *c = db();
    char *before, *after, sql[64];
    int i, round;

    ck_assert_int_eq(apr_pool_create(&sp, pool), APR_SUCCESS);
    ck_assert_int_eq(mcp_listener_start_ex(&l, sp, r, CHANNEL, params_cb, log_cb, t, &timing),
                     APR_SUCCESS);
    ck_assert(await_connected(l, 1, S(5)));
    consume_connect_wakeup(sub);
    /* The next allocation's address: anything the listener took from sp meanwhile would
     * move it (sp is fresh, so its first block is far from full). */
    before = apr_palloc(sp, 1);
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 100; i++)
            notify(c, i % 2 ? "11" : "not a stream");
        ck_assert(await_notifications(l, (apr_uint64_t)(round + 1) * 50, S(5)));
        /* a reconnect, with a failed attempt first */
        set_fail(t, 1);
        snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", backend_pid(c, "mcp_memory"));
        exec_ok(c, sql);
        ck_assert(await_connected(l, 0, S(5)));
        ck_assert(await_calls(t, calls_of(t) + 2, S(5)));
        set_fail(t, 0);
        ck_assert(await_connected(l, 1, S(5)));
    }
    after = apr_palloc(sp, 1);
    ck_assert_ptr_eq(after, before + 8);
    mcp_listener_stop(l);
    apr_pool_destroy(sp);
    mcp_router_unsubscribe(sub);
    PQfinish(c);
}
END_TEST

static pthread_t signal_seen_by;
static volatile sig_atomic_t signal_seen;

static void on_usr1(int sig)
{
    (void)sig;
    signal_seen_by = pthread_self();
    signal_seen = 1;
}

/* Process-directed signals are never delivered to the listener's thread (in httpd they belong
 * to the MPM): with SIGUSR1 blocked in the test's thread, a SIGUSR1 to the process stays
 * pending instead of running its handler in the listener's thread. */
START_TEST(test_signals_not_delivered_to_listener)
{
    mcp_router_t *r = mcp_router_create(pool, 2);
    tb *t = tb_new("mcp_signals", pg_port);
    struct sigaction sa, old_sa;
    sigset_t usr1, old_mask;
    mcp_listener_t *l;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, &old_sa), 0);
    l = start_listener(r, t, NULL);
    ck_assert(await_connected(l, 1, S(5)));
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, &usr1, &old_mask), 0);
    signal_seen = 0;
    ck_assert_int_eq(kill(getpid(), SIGUSR1), 0);
    apr_sleep(MS(100));
    ck_assert_int_eq(signal_seen, 0);   /* pending: no thread would take it */
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, &old_mask, NULL), 0);   /* delivered here */
    ck_assert_int_eq(signal_seen, 1);
    ck_assert(pthread_equal(signal_seen_by, pthread_self()));
    sigaction(SIGUSR1, &old_sa, NULL);
    mcp_listener_stop(l);
}
END_TEST

static Suite *listener_suite(void)
{
    Suite *s = suite_create("mcp_listener");
    TCase *tc = tcase_create("postgresql");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_arguments);
    tcase_add_test(tc, test_params_from_conn);
    tcase_add_test(tc, test_notify_wakes_only_its_stream);
    tcase_add_test(tc, test_garbage_ignored);
    tcase_add_test(tc, test_coalesce_final_state);
    tcase_add_test(tc, test_restart);
    tcase_add_test(tc, test_stop_during_backoff);
    tcase_add_test(tc, test_params_failure_backoff_cap_and_reset);
    tcase_add_test(tc, test_connect_timeout_and_stop_while_connecting);
    tcase_add_test(tc, test_keepalive_detects_frozen_backend);
    tcase_add_test(tc, test_pool_cleanup_stops);
    tcase_add_test(tc, test_constant_memory);
    tcase_add_test(tc, test_signals_not_delivered_to_listener);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    parent_pid = getpid();
    verbose = getenv("TEST_LISTENER_VERBOSE") != NULL;
    apr_initialize();
    atexit(server_teardown);
    if (server_setup() != 0) {
        apr_terminate();
        return EXIT_FAILURE;   /* never 77 (skip): the test needs its server */
    }
    sr = srunner_create(listener_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    apr_terminate();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
