/* mod_mcp_stdio — see mod_mcp_stdio.h and docs/stdio.md. */
#include <apr_lib.h>
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
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mod_mcp_stdio.h"

APLOG_USE_MODULE(mcp);

/* How long the parent waits for the supervisor's answer to a configuration line. */
#define ANSWER_WAIT_MS 5000
/* The longest answer line read. */
#define ANSWER_MAX 4096
/* The secret made when MCPStdioSecretFile is not set: bytes from the kernel, sent as hex. */
#define SECRET_RANDOM_BYTES 32
/* The longest secret a file may hold. */
#define SECRET_MAX 1024
#define SECRET_MIN 16

#define DEFAULT_LISTEN    "127.0.0.1:0"
#define DEFAULT_ADVERTISE "http://127.0.0.1:{port}"

/* ---- the configuration ------------------------------------------------------------------- */

/* One <MCPStdioServer name> section; -1: not set (the supervisor's member is then left out or
 * gets its default here). */
typedef struct stdio_server_t {
    const char         *name;
    const char         *file;
    int                 line;
    apr_array_header_t *command;       /* const char *: argv                                */
    apr_array_header_t *env;           /* const char *: name, value, name, value ...        */
    apr_array_header_t *pass_env;      /* const char *: names read at post_config           */
    const char         *directory, *user, *group;
    apr_int64_t         limit_as, limit_cpu, limit_nofile, limit_nproc;
    apr_int64_t         start_timeout, idle_timeout, stop_grace, max_line;
    apr_int64_t         max_sessions, max_per_user;
} stdio_server_t;

/* `MCPBackend stdio:name`: the location's conf->backend points at target, the first member. */
typedef struct stdio_backend_t {
    mcp_backend_target_t target;
    const char          *name;
    const char          *file;
    int                  line;
    int                  port;         /* the supervisor's port the target's url was made for */
} stdio_backend_t;

/* Everything the directives said, in pconf; NULL before the first directive of a pass. */
typedef struct stdio_conf_t {
    const char         *listen, *advertise, *secret_file, *secret, *supervisor;
    apr_int64_t         max_processes;
    apr_array_header_t *servers;       /* stdio_server_t *, in order                        */
    apr_array_header_t *backends;      /* stdio_backend_t *                                 */
    const char         *local_host;    /* how this host reaches its supervisor (post_config) */
    apr_array_header_t *key_lines;     /* const char *: "MCP-Supervisor-Key: ..."           */
} stdio_conf_t;

static stdio_conf_t *stdio_conf;

static apr_status_t conf_gone(void *data)
{
    (void)data;
    stdio_conf = NULL;
    return APR_SUCCESS;
}

static stdio_conf_t *conf_get(apr_pool_t *pconf)
{
    if (!stdio_conf) {
        stdio_conf = apr_pcalloc(pconf, sizeof(*stdio_conf));
        stdio_conf->max_processes = -1;
        stdio_conf->servers = apr_array_make(pconf, 4, sizeof(stdio_server_t *));
        stdio_conf->backends = apr_array_make(pconf, 4, sizeof(stdio_backend_t *));
        apr_pool_cleanup_register(pconf, NULL, conf_gone, apr_pool_cleanup_null);
    }
    return stdio_conf;
}

static stdio_server_t *server_find(const stdio_conf_t *c, const char *name)
{
    int i;

    for (i = 0; c && i < c->servers->nelts; i++) {
        stdio_server_t *sv = APR_ARRAY_IDX(c->servers, i, stdio_server_t *);
        if (strcmp(sv->name, name) == 0) {
            return sv;
        }
    }
    return NULL;
}

/* A server's name: what a URL path segment and a log line carry without quoting. */
static int name_ok(const char *name)
{
    const char *c;

    if (!*name || strlen(name) > 64) {
        return 0;
    }
    for (c = name; *c; c++) {
        if (!apr_isalnum(*c) && *c != '-' && *c != '_' && *c != '.') {
            return 0;
        }
    }
    return 1;
}

/* A visible-ASCII word without spaces (a secret, a URL). */
static int visible(const char *s)
{
    for (; *s; s++) {
        if (*s <= 0x20 || *s >= 0x7f) {
            return 0;
        }
    }
    return 1;
}

/* ---- directive values --------------------------------------------------------------------- */

/* A count: N >= 0, at most max. */
static int parse_count(const char *arg, apr_int64_t max, apr_int64_t *out)
{
    char *end;
    apr_int64_t n;

    if (!apr_isdigit(*arg)) {
        return -1;
    }
    errno = 0;
    n = apr_strtoi64(arg, &end, 10);
    if (errno || *end || n < 0 || n > max) {
        return -1;
    }
    *out = n;
    return 0;
}

/* Bytes: N, or N with K, M or G (binary multiples). */
static int parse_size(const char *arg, apr_int64_t *out)
{
    char *end;
    apr_int64_t n, unit = 1;

    if (!apr_isdigit(*arg)) {
        return -1;
    }
    errno = 0;
    n = apr_strtoi64(arg, &end, 10);
    if (errno || n < 0) {
        return -1;
    }
    if (*end) {
        switch (apr_toupper(*end)) {
        case 'K': unit = 1024; break;
        case 'M': unit = 1024 * 1024; break;
        case 'G': unit = 1024 * 1024 * 1024; break;
        default: return -1;
        }
        if (end[1] && !(apr_toupper(end[1]) == 'B' && !end[2])) {
            return -1;
        }
    }
    if (n > APR_INT64_MAX / unit / 2) {
        return -1;
    }
    *out = n * unit;
    return 0;
}

/* Seconds: N, or N with s, m or h. */
static int parse_seconds(const char *arg, apr_int64_t *out)
{
    char *end;
    apr_int64_t n;

    if (!apr_isdigit(*arg)) {
        return -1;
    }
    errno = 0;
    n = apr_strtoi64(arg, &end, 10);
    if (errno || n < 0 || (*end && end[1]) || (*end && !strchr("smh", *end))) {
        return -1;
    }
    n *= *end == 'h' ? 3600 : *end == 'm' ? 60 : 1;
    if (n > 100L * 365 * 86400) {
        return -1;
    }
    *out = n;
    return 0;
}

/* host:port, [v6]:port or name:port, port 0-65535; *host and *port out (host without []). */
static const char *parse_listen(apr_pool_t *p, const char *arg, const char **host, int *port)
{
    const char *colon;
    apr_int64_t n;

    if (*arg == '[') {
        const char *close = strchr(arg, ']');
        if (!close || close == arg + 1 || close[1] != ':') {
            return "an IPv6 address is written [addr]:port";
        }
        *host = apr_pstrmemdup(p, arg + 1, (apr_size_t)(close - arg - 1));
        colon = close + 1;
    }
    else {
        colon = strrchr(arg, ':');
        if (!colon || colon == arg || memchr(arg, ':', (apr_size_t)(colon - arg))) {
            return "not host:port";
        }
        *host = apr_pstrmemdup(p, arg, (apr_size_t)(colon - arg));
    }
    if (!visible(*host) || parse_count(colon + 1, 65535, &n) != 0) {
        return "not host:port (port 0 to 65535)";
    }
    *port = (int)n;
    return NULL;
}

/* ---- the directives ----------------------------------------------------------------------- */

const char *mcp_stdio_set_listen(cmd_parms *cmd, void *dconf, const char *addr,
                                 const char *advertise)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY), *host;
    stdio_conf_t *c;
    int port;

    (void)dconf;
    if (err) {
        return err;
    }
    if ((err = parse_listen(cmd->temp_pool, addr, &host, &port))) {
        return apr_psprintf(cmd->pool, "MCPStdioListen: '%s' is %s", addr, err);
    }
    if (advertise && (!visible(advertise) || !mcp_backend_session_url(
                          apr_pstrcat(cmd->temp_pool, "x@", advertise, NULL)))) {
        return apr_psprintf(cmd->pool, "MCPStdioListen: '%s' is not an http:// or https:// "
                            "URL (the base URL other hosts reach this supervisor at; {port} "
                            "stands for its port)", advertise);
    }
    c = conf_get(cmd->pool);
    c->listen = apr_pstrdup(cmd->pool, addr);
    c->advertise = advertise ? apr_pstrdup(cmd->pool, advertise) : NULL;
    return NULL;
}

const char *mcp_stdio_set_secret_file(cmd_parms *cmd, void *dconf, const char *path)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    const char *file = ap_server_root_relative(cmd->pool, path);
    char line[SECRET_MAX + 2];
    apr_file_t *f;
    apr_size_t len;
    apr_status_t rv;
    stdio_conf_t *c;

    (void)dconf;
    if (err) {
        return err;
    }
    if (!file || apr_file_open(&f, file, APR_FOPEN_READ, APR_FPROT_OS_DEFAULT, cmd->temp_pool)
                 != APR_SUCCESS) {
        return apr_psprintf(cmd->pool, "MCPStdioSecretFile: cannot open %s", path);
    }
    rv = apr_file_gets(line, sizeof(line), f);
    apr_file_close(f);
    len = rv == APR_SUCCESS ? strlen(line) : 0;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) {
        line[--len] = '\0';
    }
    if (len < SECRET_MIN || len > SECRET_MAX || !visible(line)) {
        return apr_psprintf(cmd->pool, "MCPStdioSecretFile: the first line of %s must be %d to "
                            "%d visible ASCII characters (no spaces)", path, SECRET_MIN,
                            SECRET_MAX);
    }
    c = conf_get(cmd->pool);
    c->secret_file = file;
    c->secret = apr_pstrdup(cmd->pool, line);
    return NULL;
}

const char *mcp_stdio_set_supervisor(cmd_parms *cmd, void *dconf, const char *path)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    (void)dconf;
    if (err) {
        return err;
    }
    if (*path != '/') {
        return apr_psprintf(cmd->pool, "MCPStdioSupervisor: '%s' is not an absolute path", path);
    }
    conf_get(cmd->pool)->supervisor = apr_pstrdup(cmd->pool, path);
    return NULL;
}

const char *mcp_stdio_set_max_processes(cmd_parms *cmd, void *dconf, const char *n)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    stdio_conf_t *c;

    (void)dconf;
    if (err) {
        return err;
    }
    c = conf_get(cmd->pool);
    if (parse_count(n, 1000000, &c->max_processes) != 0) {
        return apr_psprintf(cmd->pool, "MCPStdioMaxProcesses: '%s' is not a number from 0 "
                            "(no limit) to 1000000", n);
    }
    return NULL;
}

/* ---- <MCPStdioServer name> ---------------------------------------------------------------- */

/* The words of an inner line, as httpd splits a directive's arguments (quotes kept together). */
static apr_array_header_t *words_of(apr_pool_t *p, const char *args)
{
    apr_array_header_t *words = apr_array_make(p, 4, sizeof(const char *));
    const char *w;

    while (args && *args && *(w = ap_getword_conf(p, &args))) {
        APR_ARRAY_PUSH(words, const char *) = w;
    }
    return words;
}

/* One inner line's meaning; NULL or what is wrong with it (the caller says where). */
typedef const char *inner_fn(apr_pool_t *p, stdio_server_t *sv, const char *name,
                             apr_array_header_t *words);

#define WORD(i) APR_ARRAY_IDX(words, (i), const char *)

static const char *one_word(const char *name, apr_array_header_t *words)
{
    return words->nelts == 1 ? NULL : apr_pstrcat(words->pool, name, " takes one argument",
                                                  NULL);
}

static const char *inner_command(apr_pool_t *p, stdio_server_t *sv, const char *name,
                                 apr_array_header_t *words)
{
    (void)p;
    if (words->nelts < 1) {
        return apr_pstrcat(words->pool, name, " needs the program and its arguments", NULL);
    }
    if (*WORD(0) != '/') {
        return apr_psprintf(words->pool, "%s: the program '%s' must be an absolute path", name,
                            WORD(0));
    }
    sv->command = words;
    return NULL;
}

static const char *inner_setenv(apr_pool_t *p, stdio_server_t *sv, const char *name,
                                apr_array_header_t *words)
{
    (void)p;
    if (words->nelts < 1 || words->nelts > 2) {
        return apr_pstrcat(words->pool, name, " takes a variable's name and its value", NULL);
    }
    if (!*WORD(0) || strchr(WORD(0), '=')) {
        return apr_psprintf(words->pool, "%s: '%s' is not a variable name", name, WORD(0));
    }
    APR_ARRAY_PUSH(sv->env, const char *) = WORD(0);
    APR_ARRAY_PUSH(sv->env, const char *) = words->nelts == 2 ? WORD(1) : "";
    return NULL;
}

static const char *inner_passenv(apr_pool_t *p, stdio_server_t *sv, const char *name,
                                 apr_array_header_t *words)
{
    int i;

    (void)p;
    if (words->nelts < 1) {
        return apr_pstrcat(words->pool, name, " needs one or more variable names", NULL);
    }
    for (i = 0; i < words->nelts; i++) {
        if (strchr(WORD(i), '=')) {
            return apr_psprintf(words->pool, "%s: '%s' is not a variable name", name, WORD(i));
        }
        APR_ARRAY_PUSH(sv->pass_env, const char *) = WORD(i);
    }
    return NULL;
}

static const char *inner_word(apr_pool_t *p, stdio_server_t *sv, const char *name,
                              apr_array_header_t *words)
{
    const char *err = one_word(name, words);

    (void)p;
    if (err) {
        return err;
    }
    if (strcasecmp(name, "Directory") == 0) {
        if (*WORD(0) != '/') {
            return apr_psprintf(words->pool, "Directory: '%s' is not an absolute path", WORD(0));
        }
        sv->directory = WORD(0);
    }
    else if (strcasecmp(name, "User") == 0) {
        sv->user = WORD(0);
    }
    else {
        sv->group = WORD(0);
    }
    return NULL;
}

/* The numeric inner directives: their member, and how each is read. */
enum { NUM_COUNT, NUM_SIZE, NUM_SECONDS };
static const struct {
    const char *name;
    apr_size_t  offset;
    int         kind;
    apr_int64_t min;
    const char *what;
} numbers[] = {
    { "LimitAddressSpace", APR_OFFSETOF(stdio_server_t, limit_as), NUM_SIZE, 1,
      "a size in bytes (e.g. 1G, 512M)" },
    { "LimitCPU", APR_OFFSETOF(stdio_server_t, limit_cpu), NUM_SECONDS, 1,
      "a number of CPU seconds (e.g. 600, 10m)" },
    { "LimitFiles", APR_OFFSETOF(stdio_server_t, limit_nofile), NUM_COUNT, 1,
      "a number of open files" },
    { "LimitProcesses", APR_OFFSETOF(stdio_server_t, limit_nproc), NUM_COUNT, 1,
      "a number of processes" },
    { "StartTimeout", APR_OFFSETOF(stdio_server_t, start_timeout), NUM_SECONDS, 1,
      "a duration of 1 second or more (e.g. 30, 30s, 2m)" },
    { "IdleTimeout", APR_OFFSETOF(stdio_server_t, idle_timeout), NUM_SECONDS, 0,
      "a duration (e.g. 3600, 60m, 1h; 0: never)" },
    { "StopGrace", APR_OFFSETOF(stdio_server_t, stop_grace), NUM_SECONDS, 0,
      "a duration (e.g. 5, 5s)" },
    { "MaxLine", APR_OFFSETOF(stdio_server_t, max_line), NUM_SIZE, 1024,
      "a size of 1K or more (e.g. 16M)" },
    { "MaxProcesses", APR_OFFSETOF(stdio_server_t, max_sessions), NUM_COUNT, 0,
      "a number of processes (0: no limit)" },
    { "MaxProcessesPerUser", APR_OFFSETOF(stdio_server_t, max_per_user), NUM_COUNT, 0,
      "a number of processes (0: no limit)" },
};

static const char *inner_number(apr_pool_t *p, stdio_server_t *sv, const char *name,
                                apr_array_header_t *words)
{
    const char *err = one_word(name, words);
    apr_int64_t n = -1;
    size_t i;
    int bad;

    (void)p;
    if (err) {
        return err;
    }
    for (i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        if (strcasecmp(numbers[i].name, name) != 0) {
            continue;
        }
        bad = numbers[i].kind == NUM_SIZE ? parse_size(WORD(0), &n)
            : numbers[i].kind == NUM_SECONDS ? parse_seconds(WORD(0), &n)
            : parse_count(WORD(0), APR_INT32_MAX, &n);
        if (bad || n < numbers[i].min) {
            return apr_psprintf(words->pool, "%s: '%s' is not %s", numbers[i].name, WORD(0),
                                numbers[i].what);
        }
        *(apr_int64_t *)((char *)sv + numbers[i].offset) = n;
        return NULL;
    }
    return apr_pstrcat(words->pool, name, ": unknown", NULL);   /* not reached */
}

static const struct {
    const char *name;
    inner_fn   *fn;
} inner[] = {
    { "Command", inner_command }, { "SetEnv", inner_setenv }, { "PassEnv", inner_passenv },
    { "Directory", inner_word }, { "User", inner_word }, { "Group", inner_word },
    { "LimitAddressSpace", inner_number }, { "LimitCPU", inner_number },
    { "LimitFiles", inner_number }, { "LimitProcesses", inner_number },
    { "StartTimeout", inner_number }, { "IdleTimeout", inner_number },
    { "StopGrace", inner_number }, { "MaxLine", inner_number },
    { "MaxProcesses", inner_number }, { "MaxProcessesPerUser", inner_number },
};

static const char *inner_line(cmd_parms *cmd, stdio_server_t *sv, const ap_directive_t *d)
{
    apr_array_header_t *words = words_of(cmd->pool, d->args);
    const char *err = NULL;
    size_t i;

    for (i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
        if (strcasecmp(inner[i].name, d->directive) == 0) {
            err = inner[i].fn(cmd->pool, sv, inner[i].name, words);
            break;
        }
    }
    if (i == sizeof(inner) / sizeof(inner[0])) {
        err = apr_psprintf(cmd->pool, "'%s' is not a directive of <MCPStdioServer> (Command, "
                           "SetEnv, PassEnv, Directory, User, Group, LimitAddressSpace, LimitCPU, "
                           "LimitFiles, LimitProcesses, StartTimeout, IdleTimeout, StopGrace, "
                           "MaxLine, MaxProcesses, MaxProcessesPerUser)", d->directive);
    }
    return err ? apr_psprintf(cmd->pool, "<MCPStdioServer %s>, line %d of %s: %s", sv->name,
                              d->line_num, d->filename, err) : NULL;
}

const char *mcp_stdio_server_section(cmd_parms *cmd, void *dconf, const char *arg)
{
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY), *end = ap_strrchr_c(arg, '>');
    const ap_directive_t *d;
    stdio_conf_t *c;
    stdio_server_t *sv;
    char *name;

    (void)dconf;
    if (err) {
        return err;
    }
    if (!end || end[1]) {
        return "<MCPStdioServer> directive missing closing '>'";
    }
    name = apr_pstrmemdup(cmd->pool, arg, (apr_size_t)(end - arg));
    apr_collapse_spaces(name, name);
    if (!name_ok(name)) {
        return apr_psprintf(cmd->pool, "<MCPStdioServer %s>: a server's name is 1 to 64 "
                            "letters, digits, '-', '_' or '.'", name);
    }
    c = conf_get(cmd->pool);
    if (server_find(c, name)) {
        return apr_psprintf(cmd->pool, "<MCPStdioServer %s>: a server of that name is "
                            "configured already", name);
    }
    sv = apr_pcalloc(cmd->pool, sizeof(*sv));
    sv->name = name;
    sv->file = cmd->directive->filename;
    sv->line = cmd->directive->line_num;
    sv->env = apr_array_make(cmd->pool, 4, sizeof(const char *));
    sv->pass_env = apr_array_make(cmd->pool, 4, sizeof(const char *));
    sv->limit_as = sv->limit_cpu = sv->limit_nofile = sv->limit_nproc = -1;
    sv->start_timeout = sv->idle_timeout = sv->stop_grace = sv->max_line = -1;
    sv->max_sessions = sv->max_per_user = -1;
    for (d = cmd->directive->first_child; d; d = d->next) {
        if ((err = inner_line(cmd, sv, d))) {
            return err;
        }
    }
    if (!sv->command) {
        return apr_psprintf(cmd->pool, "<MCPStdioServer %s>: Command is required (the program "
                            "and its arguments)", name);
    }
    APR_ARRAY_PUSH(c->servers, stdio_server_t *) = sv;
    return NULL;
}

/* ---- MCPBackend stdio:name ---------------------------------------------------------------- */

const mcp_backend_target_t *mcp_stdio_backend(cmd_parms *cmd, const char *name,
                                              const char **err)
{
    stdio_conf_t *c;
    stdio_backend_t *b;

    if (!name_ok(name)) {
        *err = apr_psprintf(cmd->pool, "'stdio:%s': a stdio backend is written stdio:name, the "
                            "name of an <MCPStdioServer name> section", name);
        return NULL;
    }
    c = conf_get(cmd->pool);
    b = apr_pcalloc(cmd->pool, sizeof(*b));
    b->name = apr_pstrdup(cmd->pool, name);
    b->file = cmd->directive ? cmd->directive->filename : "?";
    b->line = cmd->directive ? cmd->directive->line_num : 0;
    b->target.stdio = 1;
    /* Filled in by post_config, once the supervisor said its port. */
    b->target.url = apr_pstrcat(cmd->pool, "http://127.0.0.1:0/stdio/", name, NULL);
    APR_ARRAY_PUSH(c->backends, stdio_backend_t *) = b;
    return &b->target;
}

const mcp_backend_target_t *mcp_stdio_target_of(const char *spec)
{
    int i;

    if (!stdio_conf || !spec || strncasecmp(spec, "stdio:", 6) != 0) {
        return NULL;
    }
    for (i = 0; i < stdio_conf->backends->nelts; i++) {
        stdio_backend_t *b = APR_ARRAY_IDX(stdio_conf->backends, i, stdio_backend_t *);
        if (strcmp(b->name, spec + 6) == 0) {
            return &b->target;
        }
    }
    return NULL;
}

const char *mcp_stdio_lost(apr_pool_t *p, const mcp_backend_target_t *target,
                           const char *backend_session_id, mcp_backend_status_t st,
                           const char *err)
{
    const char *url;

    if (!target || !target->stdio || !backend_session_id || st != MCP_BACKEND_UNREACHABLE) {
        return NULL;
    }
    url = mcp_backend_session_url(backend_session_id);
    return apr_psprintf(p, "Session not found: the stdio server's supervisor at %s cannot be "
                        "reached (%s); the session's process is gone and the session has "
                        "ended: initialize a new session", url ? url : target->url,
                        err ? err : "no connection");
}

/* ---- the supervisor, kept by the parent across restarts ----------------------------------- */

/* What the children read of the parent's state: the supervisor's current port (it changes when
 * a dead supervisor is replaced while they run). A shared anonymous page, mapped once. */
typedef struct stdio_shared_t {
    volatile int port;
} stdio_shared_t;

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

/* Writes all of buf to fd, SIGPIPE ignored meanwhile (a supervisor that died early must not
 * kill the parent). */
static int write_all(int fd, const char *buf, apr_size_t len)
{
    struct sigaction ign, old;
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
    apr_int64_t port;

    *refused = 0;
    if (write_all(rt->control_fd, line, strlen(line)) != 0 || write_all(rt->control_fd, "\n", 1)) {
        *err = apr_psprintf(p, "writing its configuration: %s", strerror(errno));
        return -1;
    }
    if (!(answer = read_answer(p, rt->answer_fd, err))) {
        return -1;
    }
    if (strncmp(answer, "ready ", 6) == 0 && parse_count(answer + 6, 65535, &port) == 0
        && port > 0) {
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
    if (start(rt, ch->pconf, ch->path, ch->config_line, &err)
        != 0) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, ch->s, "the stdio supervisor could not be "
                     "started again (%s); stdio servers are unavailable until the next restart",
                     err);
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, ch->s, "stdio supervisor (pid %" APR_PID_T_FMT
                 ") started again, on port %d", rt->pid, rt->port);
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
                                                                           : DEFAULT_LISTEN));
    json_object_object_add(doc, "advertise", json_object_new_string(
        c->advertise ? c->advertise : DEFAULT_ADVERTISE));
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

/* How this host reaches its own supervisor: the listen address, loopback for a wildcard. */
static const char *local_host(apr_pool_t *p, const stdio_conf_t *c)
{
    const char *host = "127.0.0.1";
    int port;

    parse_listen(p, c->listen ? c->listen : DEFAULT_LISTEN, &host, &port);
    if (!*host || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "*") == 0) {
        return "127.0.0.1";
    }
    if (strcmp(host, "::") == 0) {
        return "[::1]";
    }
    return strchr(host, ':') ? apr_pstrcat(p, "[", host, "]", NULL) : host;
}

static const char *supervisor_path(const stdio_conf_t *c)
{
    if (c->supervisor) {
        return c->supervisor;
    }
#ifdef MCP_STDIO_SUPERVISOR_DEFAULT
    return MCP_STDIO_SUPERVISOR_DEFAULT;
#else
    return NULL;
#endif
}

static const char *local_url(apr_pool_t *p, const stdio_backend_t *b, int port)
{
    return apr_psprintf(p, "http://%s:%d/stdio/%s", stdio_conf->local_host, port, b->name);
}

/* The targets of MCPBackend stdio:name, for the supervisor on rt->port. */
static void fill_targets(apr_pool_t *pconf, stdio_conf_t *c, stdio_retained_t *rt)
{
    const char *secret = c->secret ? c->secret : rt->secret;
    int i;

    c->local_host = local_host(pconf, c);
    c->key_lines = apr_array_make(pconf, 1, sizeof(const char *));
    APR_ARRAY_PUSH(c->key_lines, const char *) = apr_pstrcat(pconf, "MCP-Supervisor-Key: ",
                                                             secret, NULL);
    for (i = 0; i < c->backends->nelts; i++) {
        stdio_backend_t *b = APR_ARRAY_IDX(c->backends, i, stdio_backend_t *);
        b->port = rt->port;
        b->target.url = local_url(pconf, b, rt->port);
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

static int stdio_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                             server_rec *s)
{
    stdio_retained_t *rt;
    stdio_conf_t *c = stdio_conf;
    stdio_child_t *ch;
    const char *line, *err = NULL, *path;
    int refused = 0;

    (void)plog;
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        return OK;   /* the first pass only checks the configuration */
    }
    rt = retained = retained_get();
    if (!c || c->servers->nelts == 0) {
        if (rt->pid) {
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
    path = supervisor_path(c);   /* check_config made sure there is one */
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

/* ---- check_config: what can be told before anything starts -------------------------------- */

static int stdio_check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                              server_rec *s)
{
    const stdio_conf_t *c = stdio_conf;
    const char *path;
    int i, rc = OK;

    (void)pconf;
    (void)plog;
    (void)ptemp;
    for (i = 0; c && i < c->backends->nelts; i++) {
        const stdio_backend_t *b = APR_ARRAY_IDX(c->backends, i, stdio_backend_t *);
        if (!server_find(c, b->name)) {
            ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s, "MCPBackend stdio:%s "
                         "(line %d of %s): no <MCPStdioServer %s> is configured", b->name,
                         b->line, b->file, b->name);
            rc = !OK;
        }
    }
    if (rc != OK || !c || c->servers->nelts == 0) {
        return rc;
    }
    if (!(path = supervisor_path(c))) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s, "MCPStdioSupervisor: stdio "
                     "servers are configured but not the supervisor program that runs them "
                     "(this build has no default: set MCPStdioSupervisor "
                     "/path/to/mcp-stdio-supervisor)");
        return !OK;
    }
    if (access(path, X_OK) != 0) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_EMERG, 0, s, "MCPStdioSupervisor: %s is "
                     "not an executable file (%s)", path, strerror(errno));
        return !OK;
    }
    return OK;
}

/* ---- per request ---------------------------------------------------------------------------- */

void mcp_stdio_call(request_rec *r, mcp_backend_call_t *call)
{
    const stdio_backend_t *b = (const stdio_backend_t *)call->target;
    mcp_backend_target_t *t;
    apr_array_header_t *lines;
    const char *tag;
    int port;

    if (!call->target || !call->target->stdio || call->session_id || !stdio_conf) {
        return;
    }
    /* A new session: this host's supervisor, at its port of now (a replaced supervisor may
     * listen elsewhere than when this child was forked). */
    port = retained && retained->shared ? retained->shared->port : b->port;
    if (port > 0 && port != b->port) {
        t = apr_pmemdup(r->pool, &b->target, sizeof(*t));
        t->url = local_url(r->pool, b, port);
        call->target = t;
    }
    lines = call->identity ? apr_array_copy(r->pool, call->identity)
                           : apr_array_make(r->pool, 2, sizeof(const char *));
    if (r->user && *r->user && !strpbrk(r->user, "\r\n")) {
        APR_ARRAY_PUSH(lines, const char *) = apr_pstrcat(r->pool, "MCP-Supervisor-Principal: ",
                                                          r->user, NULL);
    }
    if ((tag = apr_table_get(r->notes, MCP_STDIO_SESSION_TAG_NOTE))) {
        APR_ARRAY_PUSH(lines, const char *) = apr_pstrcat(r->pool, "MCP-Gateway-Session-Tag: ",
                                                          tag, NULL);
    }
    call->identity = lines;
}

/* ---- child_init ------------------------------------------------------------------------------ */

static void stdio_child_init(apr_pool_t *pchild, server_rec *s)
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

void mcp_stdio_register_hooks(void)
{
    ap_hook_check_config(stdio_check_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(stdio_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(stdio_child_init, NULL, NULL, APR_HOOK_FIRST);
}
