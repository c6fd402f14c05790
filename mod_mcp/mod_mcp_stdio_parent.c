/* mod_mcp_stdio_parent — the stdio supervisor's life in httpd's parent (see mod_mcp_stdio.h and
 * docs/stdio.md): started in post_config when some MCPStdioServer exists (fork, PDEATHSIG, its
 * pipes, the configuration line, a bounded wait for its answer), kept across restarts in
 * retained data (a restart sends it the new configuration), registered as an "other child" and
 * replaced when it dies; children close the parent's pipe ends. */
#include <apr_strings.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_config.h>
#include <http_core.h>
#include <http_log.h>
#include <ap_mpm.h>
#include <unixd.h>
#include <json-c/json.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mod_mcp_stdio.h"
#include "mod_mcp_stdio_private.h"

APLOG_USE_MODULE(mcp);

/* How long the parent waits for the supervisor's answer to a configuration line. */
#define ANSWER_WAIT_MS 5000
/* The longest answer line read. */
#define ANSWER_MAX 4096
/* The secret made when MCPStdioSecretFile is not set: bytes from the kernel, sent as hex. */
#define SECRET_RANDOM_BYTES 32

/* ---- the supervisor, kept by the parent across restarts ----------------------------------- */

/* What the children read of the parent's state: the supervisor's current port (it changes when
 * a dead supervisor is replaced while they run), and whether a replacement is being started
 * (its port is not known yet: a new session waits for it rather than knock at the dead one's).
 * A shared anonymous page, mapped once. */
typedef struct stdio_shared_t {
    volatile int port;
    volatile int starting;
} stdio_shared_t;

/* How long a new session waits for a replacement supervisor to say its port: the parent's own
 * wait for the answer, and a little for noticing the death. */
#define STARTING_WAIT_MS (ANSWER_WAIT_MS + 1000)
#define STARTING_POLL_MS 10

typedef struct stdio_retained_t {
    pid_t           pid;          /* 0: none                                               */
    int             control_fd;   /* the parent's ends of the control and answer pipes, or -1 */
    int             answer_fd;
    int             port;
    char            secret[2 * SECRET_RANDOM_BYTES + 1];   /* made once per parent          */
    stdio_shared_t *shared;
} stdio_retained_t;

#define RETAINED_KEY "mod_mcp-stdio-supervisor-1"

/* The retained data as this process knows it: set in post_config (the parent), inherited by the
 * children; read per request without a look-up. */
static stdio_retained_t *retained;

static stdio_retained_t *retained_get(void)
{
    stdio_retained_t *rt = ap_retained_data_get(RETAINED_KEY);

    if (!rt) {
        void *page;

        rt = ap_retained_data_create(RETAINED_KEY, sizeof(*rt));
        rt->control_fd = rt->answer_fd = -1;
        page = mmap(NULL, sizeof(stdio_shared_t), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        rt->shared = page == MAP_FAILED ? NULL : page;
    }
    return rt;
}

/* The registration of the running supervisor as an "other child" (on pconf, made again after
 * each restart: the module is reloaded). */
typedef struct stdio_child_t {
    apr_proc_t   proc;
    server_rec  *s;
    apr_pool_t  *pconf;
    const char  *path;            /* the supervisor program                              */
    const char  *config_line;
} stdio_child_t;

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* In the forked child: PR_SET_PDEATHSIG, a process group of its own, the pipes as stdin and
 * stdout, stderr kept (httpd's error log), nothing else open, default signals; then exec.
 * Never returns. */
static void exec_supervisor(const char *path, int control_r, int answer_w, pid_t parent)
{
    sigset_t none;
    char msg[512];
    long fd, max;
    int sig;

    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) {
        _exit(1);   /* the parent died before the line above */
    }
    /* A process group of its own: httpd signals its own group at restarts and stops
     * (killpg: SIGHUP, prefork's SIGUSR1 at a graceful restart, SIGTERM), which are not for the
     * supervisor; it stops by PDEATHSIG and its control pipe's EOF. */
    setpgid(0, 0);
    if (dup2(control_r, 0) < 0 || dup2(answer_w, 1) < 0) {
        _exit(126);
    }
    max = sysconf(_SC_OPEN_MAX);
    for (fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++) {
        close((int)fd);
    }
    for (sig = 1; sig < NSIG; sig++) {
        signal(sig, SIG_DFL);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execl(path, path, (char *)NULL);
    snprintf(msg, sizeof(msg), "error cannot execute %s: %s\n", path, strerror(errno));
    if (write(1, msg, strlen(msg)) < 0) {
        _exit(127);
    }
    _exit(127);
}

/* Writes all of buf to the control pipe (its parent's end is non-blocking) within
 * ANSWER_WAIT_MS: a supervisor that stopped reading must not hold up the parent. SIGPIPE is
 * ignored meanwhile (a supervisor that died early must not kill the parent). */
static int write_all(int fd, const char *buf, apr_size_t len)
{
    apr_time_t deadline = apr_time_now() + apr_time_from_msec(ANSWER_WAIT_MS);
    struct sigaction ign, old;
    struct pollfd pfd;
    ssize_t n;
    int rc = 0;

    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old);
    while (len > 0) {
        n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            apr_interval_time_t left = deadline - apr_time_now();

            if (left <= 0) {
                errno = ETIMEDOUT;
                rc = -1;
                break;
            }
            pfd.fd = fd;
            pfd.events = POLLOUT;
            pfd.revents = 0;
            poll(&pfd, 1, (int)apr_time_as_msec(left) + 1);
            continue;
        }
        if (n <= 0) {
            rc = -1;
            break;
        }
        buf += n;
        len -= (apr_size_t)n;
    }
    sigaction(SIGPIPE, &old, NULL);
    return rc;
}

/* The supervisor's answer line (without its newline), within ANSWER_WAIT_MS; NULL with *why. */
static char *read_answer(apr_pool_t *p, int fd, const char **why)
{
    char buf[ANSWER_MAX];
    apr_size_t len = 0;
    apr_time_t deadline = apr_time_now() + apr_time_from_msec(ANSWER_WAIT_MS);
    struct pollfd pfd;
    ssize_t n;
    char *nl;

    for (;;) {
        apr_interval_time_t left = deadline - apr_time_now();

        if (left <= 0) {
            *why = apr_psprintf(p, "it did not answer its configuration within %d s",
                                ANSWER_WAIT_MS / 1000);
            return NULL;
        }
        pfd.fd = fd;
        pfd.events = POLLIN;
        pfd.revents = 0;
        if (poll(&pfd, 1, (int)apr_time_as_msec(left) + 1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            *why = apr_psprintf(p, "poll: %s", strerror(errno));
            return NULL;
        }
        if (!pfd.revents) {
            continue;
        }
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            *why = n == 0 ? "it exited without answering its configuration"
                          : apr_psprintf(p, "reading its answer: %s", strerror(errno));
            return NULL;
        }
        len += (apr_size_t)n;
        buf[len] = '\0';
        if ((nl = memchr(buf, '\n', len))) {
            *nl = '\0';
            return apr_pstrdup(p, buf);
        }
        if (len == sizeof(buf) - 1) {
            *why = "its answer is not one line";
            return NULL;
        }
    }
}

/* Waits a little for a supervisor that is ending (after an error at its first configuration),
 * then kills it; reaps it either way. */
static void reap(pid_t pid)
{
    int i, status;

    for (i = 0; i < 50; i++) {
        if (waitpid(pid, &status, WNOHANG) != 0) {
            return;
        }
        apr_sleep(apr_time_from_msec(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

/* Sends the configuration line to the running supervisor and reads its answer: OK with the
 * port in rt, or the supervisor's "error ..." words / why it did not answer in *err (and
 * *refused set when it answered error: it runs on with its previous configuration). */
static int configure(stdio_retained_t *rt, apr_pool_t *p, const char *line, int *refused,
                     const char **err)
{
    const char *answer;
    char *end;
    long port;

    *refused = 0;
    if (write_all(rt->control_fd, apr_pstrcat(p, line, "\n", NULL), strlen(line) + 1) != 0) {
        *err = apr_psprintf(p, "writing its configuration: %s", strerror(errno));
        return -1;
    }
    if (!(answer = read_answer(p, rt->answer_fd, err))) {
        return -1;
    }
    port = strncmp(answer, "ready ", 6) == 0 ? strtol(answer + 6, &end, 10) : 0;
    if (port > 0 && port <= 65535 && *end == '\0' && answer[6] >= '0' && answer[6] <= '9') {
        rt->port = (int)port;
        if (rt->shared) {
            rt->shared->port = rt->port;
        }
        return 0;
    }
    *refused = 1;
    *err = strncmp(answer, "error ", 6) == 0 ? apr_pstrdup(p, answer + 6)
         : apr_psprintf(p, "an answer that is neither 'ready <port>' nor 'error ...': '%s'",
                        answer);
    return -1;
}

/* Starts the supervisor program and gives it its first configuration. */
static int start(stdio_retained_t *rt, apr_pool_t *p, const char *path, const char *line,
                 const char **err)
{
    int control[2], answer[2], refused;
    pid_t pid, parent = getpid();

    if (pipe2(control, O_CLOEXEC) != 0) {
        *err = apr_psprintf(p, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(answer, O_CLOEXEC) != 0) {
        *err = apr_psprintf(p, "pipe: %s", strerror(errno));
        close(control[0]);
        close(control[1]);
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        exec_supervisor(path, control[0], answer[1], parent);
    }
    close(control[0]);
    close(answer[1]);
    if (pid < 0) {
        *err = apr_psprintf(p, "fork: %s", strerror(errno));
        close(control[1]);
        close(answer[0]);
        return -1;
    }
    fcntl(control[1], F_SETFL, fcntl(control[1], F_GETFL) | O_NONBLOCK);   /* (write_all) */
    rt->pid = pid;
    rt->control_fd = control[1];
    rt->answer_fd = answer[0];
    if (configure(rt, p, line, &refused, err) != 0) {
        close_fd(&rt->control_fd);   /* EOF: it stops, if it still runs */
        close_fd(&rt->answer_fd);
        reap(pid);
        rt->pid = 0;
        return -1;
    }
    return 0;
}

static int alive(pid_t pid)
{
    int status;

    return pid > 0 && waitpid(pid, &status, WNOHANG) == 0;
}

static void register_child(stdio_child_t *ch, stdio_retained_t *rt);

/* The children may use the port again (the new one, or, when the start failed, the old one,
 * which then fails at once). */
static void set_started(stdio_retained_t *rt)
{
    if (rt->shared) {
        __sync_synchronize();   /* the port is seen before the flag clears */
        rt->shared->starting = 0;
    }
}

/* The supervisor died (or was lost): another one takes its place unless httpd stops. */
static void maintenance(int reason, void *data, apr_wait_t status)
{
    stdio_child_t *ch = data;
    stdio_retained_t *rt = retained_get();
    const char *err = NULL;
    int state = AP_MPMQ_STOPPING;

    if (reason != APR_OC_REASON_DEATH && reason != APR_OC_REASON_LOST) {
        return;   /* restarts and unregistering: it runs on (pconf's cleanup unregisters) */
    }
    apr_proc_other_child_unregister(ch);
    close_fd(&rt->control_fd);
    close_fd(&rt->answer_fd);
    rt->pid = 0;
    if (ap_mpm_query(AP_MPMQ_MPM_STATE, &state) != APR_SUCCESS || state == AP_MPMQ_STOPPING) {
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, ch->s, "the stdio supervisor (pid %" APR_PID_T_FMT
                 ") %s; its stdio server processes are gone (their sessions end); starting a "
                 "new one", ch->proc.pid,
                 reason == APR_OC_REASON_LOST ? "was lost"
                 /* The MPM passes apr_proc_wait's code, which does not say which it is. */
                 : apr_psprintf(ch->pconf, "ended (exit status or signal %d)", status));
    if (rt->shared) {
        rt->shared->starting = 1;
        __sync_synchronize();
    }
    if (start(rt, ch->pconf, ch->path, ch->config_line, &err) != 0) {
        set_started(rt);
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, ch->s, "the stdio supervisor could not be "
                     "started again (%s); stdio servers are unavailable until the next restart",
                     err);
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, ch->s, "stdio supervisor (pid %" APR_PID_T_FMT
                 ") started again, on port %d", rt->pid, rt->port);
    set_started(rt);
    register_child(apr_pmemdup(ch->pconf, ch, sizeof(*ch)), rt);
}

static void register_child(stdio_child_t *ch, stdio_retained_t *rt)
{
    ch->proc.pid = rt->pid;
    ch->proc.in = ch->proc.out = ch->proc.err = NULL;
    apr_proc_other_child_register(&ch->proc, maintenance, ch, NULL, ch->pconf);
}

/* ---- post_config: the configuration document, the supervisor ------------------------------ */

static const char *const level_names[] = {
    "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug",
    "trace1", "trace2", "trace3", "trace4", "trace5", "trace6", "trace7", "trace8"
};

static void add_int(json_object *o, const char *key, apr_int64_t v)
{
    json_object_object_add(o, key, json_object_new_int64(v));
}

static json_object *server_json(const stdio_server_t *sv, server_rec *s)
{
    json_object *o = json_object_new_object(), *argv = json_object_new_array();
    json_object *env = json_object_new_object(), *limits = json_object_new_object();
    const char *user, *group;
    int i;

    for (i = 0; i < sv->command->nelts; i++) {
        json_object_array_add(argv, json_object_new_string(
            APR_ARRAY_IDX(sv->command, i, const char *)));
    }
    json_object_object_add(o, "command", argv);
    for (i = 0; i < sv->pass_env->nelts; i++) {
        const char *name = APR_ARRAY_IDX(sv->pass_env, i, const char *), *v = getenv(name);
        if (v) {
            json_object_object_add(env, name, json_object_new_string(v));
        }
        else {
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "<MCPStdioServer %s>: PassEnv %s: "
                         "httpd's environment has no such variable", sv->name, name);
        }
    }
    for (i = 0; i + 1 < sv->env->nelts; i += 2) {
        json_object_object_add(env, APR_ARRAY_IDX(sv->env, i, const char *),
                               json_object_new_string(APR_ARRAY_IDX(sv->env, i + 1,
                                                                    const char *)));
    }
    json_object_object_add(o, "env", env);
    if (sv->directory) {
        json_object_object_add(o, "directory", json_object_new_string(sv->directory));
    }
    /* By default httpd's own User and Group: never root unless a section says so. */
    user = sv->user ? sv->user : ap_unixd_config.user_name;
    group = sv->group ? sv->group : ap_unixd_config.group_name;
    if (user) {
        json_object_object_add(o, "user", json_object_new_string(user));
    }
    if (group) {
        json_object_object_add(o, "group", json_object_new_string(group));
    }
    if (sv->limit_as >= 0) add_int(limits, "as", sv->limit_as);
    if (sv->limit_cpu >= 0) add_int(limits, "cpu", sv->limit_cpu);
    if (sv->limit_nofile >= 0) add_int(limits, "nofile", sv->limit_nofile);
    if (sv->limit_nproc >= 0) add_int(limits, "nproc", sv->limit_nproc);
    json_object_object_add(o, "limits", limits);
    add_int(o, "start_timeout", sv->start_timeout >= 0 ? sv->start_timeout : 30);
    add_int(o, "idle_timeout", sv->idle_timeout >= 0 ? sv->idle_timeout : 3600);
    add_int(o, "stop_grace", sv->stop_grace >= 0 ? sv->stop_grace : 5);
    add_int(o, "max_line", sv->max_line >= 0 ? sv->max_line : 16 * 1024 * 1024);
    add_int(o, "max_sessions", sv->max_sessions >= 0 ? sv->max_sessions : 0);
    add_int(o, "max_sessions_per_principal", sv->max_per_user >= 0 ? sv->max_per_user : 0);
    return o;
}

/* The configuration line (docs/stdio.md), in p. */
static const char *config_line(apr_pool_t *p, const stdio_conf_t *c, const char *secret,
                               server_rec *s)
{
    json_object *doc = json_object_new_object(), *servers = json_object_new_object();
    int level = ap_get_server_module_loglevel(s, APLOG_MODULE_INDEX);
    const char *line;
    int i;

    json_object_object_add(doc, "listen", json_object_new_string(c->listen ? c->listen
                                                                           : MCP_STDIO_DEFAULT_LISTEN));
    json_object_object_add(doc, "advertise", json_object_new_string(
        c->advertise ? c->advertise : MCP_STDIO_DEFAULT_ADVERTISE));
    json_object_object_add(doc, "secret", json_object_new_string(secret));
    json_object_object_add(doc, "log_level", json_object_new_string(
        level_names[level < 0 ? 0 : level > 15 ? 15 : level]));
    add_int(doc, "max_sessions", c->max_processes >= 0 ? c->max_processes : 0);
    for (i = 0; i < c->servers->nelts; i++) {
        const stdio_server_t *sv = APR_ARRAY_IDX(c->servers, i, stdio_server_t *);
        json_object_object_add(servers, sv->name, server_json(sv, s));
    }
    json_object_object_add(doc, "servers", servers);
    line = apr_pstrdup(p, json_object_to_json_string_ext(
        doc, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(doc);
    return line;
}

/* The targets of MCPBackend stdio:name, for the supervisor on rt->port. */
static void fill_targets(apr_pool_t *pconf, stdio_conf_t *c, stdio_retained_t *rt)
{
    const char *secret = c->secret ? c->secret : rt->secret;
    int i;

    c->key_lines = apr_array_make(pconf, 1, sizeof(const char *));
    APR_ARRAY_PUSH(c->key_lines, const char *) = apr_pstrcat(pconf, "MCP-Supervisor-Key: ",
                                                             secret, NULL);
    for (i = 0; i < c->backends->nelts; i++) {
        stdio_backend_t *b = APR_ARRAY_IDX(c->backends, i, stdio_backend_t *);
        b->port = rt->port;
        b->target.url = mcp_stdio_local_url(pconf, b, rt->port);
        b->target.headers = c->key_lines;
    }
}

/* The random key, once per parent. */
static int make_secret(stdio_retained_t *rt)
{
    unsigned char raw[SECRET_RANDOM_BYTES];
    int i;

    if (rt->secret[0]) {
        return 0;
    }
    if (apr_generate_random_bytes(raw, sizeof(raw)) != APR_SUCCESS) {
        return -1;
    }
    for (i = 0; i < SECRET_RANDOM_BYTES; i++) {
        apr_snprintf(rt->secret + 2 * i, 3, "%02x", raw[i]);
    }
    return 0;
}

int mcp_stdio_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                          server_rec *s)
{
    stdio_retained_t *rt;
    stdio_conf_t *c = mcp_stdio_conf;
    stdio_child_t *ch;
    const char *line, *err = NULL, *path;
    int refused = 0;

    (void)plog;
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        return OK;   /* the first pass only checks the configuration */
    }
    if (!c || c->servers->nelts == 0) {
        /* (Nothing is made for an httpd without stdio servers.) */
        rt = ap_retained_data_get(RETAINED_KEY);
        if (rt && rt->pid) {
            /* No stdio server any more: its control pipe's EOF stops it (reaped as a lost
             * child by the MPM). */
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "no MCPStdioServer is configured any "
                         "more: the stdio supervisor (pid %" APR_PID_T_FMT ") stops", rt->pid);
            close_fd(&rt->control_fd);
            close_fd(&rt->answer_fd);
            rt->pid = 0;
        }
        return OK;
    }
    rt = retained = retained_get();
    path = mcp_stdio_supervisor_path(c);   /* check_config made sure there is one */
    if (!c->secret && make_secret(rt) != 0) {
        ap_log_error(APLOG_MARK, APLOG_EMERG, 0, s, "stdio supervisor: no random bytes for its "
                     "key (MCPStdioSecretFile)");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    line = config_line(ptemp, c, c->secret ? c->secret : rt->secret, s);
    if (rt->pid && alive(rt->pid)) {
        if (configure(rt, ptemp, line, &refused, &err) == 0) {
            ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "stdio supervisor (pid %" APR_PID_T_FMT
                         ") took the new configuration; port %d", rt->pid, rt->port);
        }
        else if (refused) {
            ap_log_error(APLOG_MARK, APLOG_EMERG, 0, s, "the stdio supervisor refused the "
                         "configuration: %s", err);
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        else {
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "the stdio supervisor (pid %"
                         APR_PID_T_FMT ") failed: %s; it is killed and a new one started",
                         rt->pid, err);
            kill(rt->pid, SIGKILL);
            waitpid(rt->pid, NULL, 0);
            close_fd(&rt->control_fd);
            close_fd(&rt->answer_fd);
            rt->pid = 0;
        }
    }
    else {
        close_fd(&rt->control_fd);
        close_fd(&rt->answer_fd);
        rt->pid = 0;
    }
    if (!rt->pid) {
        if (start(rt, ptemp, path, line, &err) != 0) {
            ap_log_error(APLOG_MARK, APLOG_EMERG, 0, s, "the stdio supervisor %s could not be "
                         "started: %s", path, err);
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "stdio supervisor (pid %" APR_PID_T_FMT
                     ") started on port %d, serving %d stdio server(s)", rt->pid, rt->port,
                     c->servers->nelts);
    }
    fill_targets(pconf, c, rt);
    ch = apr_pcalloc(pconf, sizeof(*ch));
    ch->s = s;
    ch->pconf = pconf;
    ch->config_line = apr_pstrdup(pconf, line);
    ch->path = apr_pstrdup(pconf, path);
    register_child(ch, rt);
    return OK;
}

/* ---- child_init ------------------------------------------------------------------------------ */

void mcp_stdio_child_init(apr_pool_t *pchild, server_rec *s)
{
    stdio_retained_t *rt = ap_retained_data_get(RETAINED_KEY);

    (void)pchild;
    (void)s;
    if (rt) {
        /* The parent's ends: a child that held the control pipe would keep the supervisor
         * from seeing its EOF. */
        close_fd(&rt->control_fd);
        close_fd(&rt->answer_fd);
    }
}

int mcp_stdio_port(server_rec *s)
{
    int waited = 0;

    if (!retained || !retained->shared) {
        return 0;
    }
    if (retained->shared->starting) {
        while (retained->shared->starting && waited < STARTING_WAIT_MS) {
            apr_sleep(apr_time_from_msec(STARTING_POLL_MS));
            waited += STARTING_POLL_MS;
        }
        ap_log_error(APLOG_MARK, retained->shared->starting ? APLOG_WARNING : APLOG_DEBUG, 0, s,
                     "the stdio supervisor is being started again: a new session %s after "
                     "%d ms", retained->shared->starting ? "gave up waiting for it" : "waited",
                     waited);
    }
    __sync_synchronize();
    return retained->shared->port;
}
