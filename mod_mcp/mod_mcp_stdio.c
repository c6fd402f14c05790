/* mod_mcp_stdio — see mod_mcp_stdio.h and docs/stdio.md. This file: the directives, the
 * targets of MCPBackend stdio:name, check_config and what a request adds; the supervisor's life
 * in httpd's parent is mod_mcp_stdio_parent.c. */
#include <apr_lib.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "mod_mcp_stdio.h"
#include "mod_mcp_config.h"
#include "mod_mcp_stdio_private.h"

APLOG_USE_MODULE(mcp);

/* The longest and the shortest secret a file may hold. */
#define SECRET_MAX 1024
#define SECRET_MIN 16

stdio_conf_t *mcp_stdio_conf;

static apr_status_t conf_gone(void *data)
{
    (void)data;
    mcp_stdio_conf = NULL;
    return APR_SUCCESS;
}

static stdio_conf_t *conf_get(apr_pool_t *pconf)
{
    if (!mcp_stdio_conf) {
        mcp_stdio_conf = apr_pcalloc(pconf, sizeof(*mcp_stdio_conf));
        mcp_stdio_conf->max_processes = -1;
        mcp_stdio_conf->servers = apr_array_make(pconf, 4, sizeof(stdio_server_t *));
        mcp_stdio_conf->backends = apr_array_make(pconf, 4, sizeof(stdio_backend_t *));
        apr_pool_cleanup_register(pconf, NULL, conf_gone, apr_pool_cleanup_null);
    }
    return mcp_stdio_conf;
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

/* One inner line's meaning; NULL or what is wrong with it (the caller says where). */
typedef const char *inner_fn(stdio_server_t *sv, const char *name, apr_array_header_t *words);

#define WORD(i) APR_ARRAY_IDX(words, (i), const char *)

static const char *one_word(const char *name, apr_array_header_t *words)
{
    return words->nelts == 1 ? NULL : apr_pstrcat(words->pool, name, " takes one argument",
                                                  NULL);
}

static const char *inner_command(stdio_server_t *sv, const char *name,
                                 apr_array_header_t *words)
{
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

static const char *inner_setenv(stdio_server_t *sv, const char *name,
                                apr_array_header_t *words)
{
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

static const char *inner_passenv(stdio_server_t *sv, const char *name,
                                 apr_array_header_t *words)
{
    int i;

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

static const char *inner_word(stdio_server_t *sv, const char *name,
                              apr_array_header_t *words)
{
    const char *err = one_word(name, words);

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

static const char *inner_number(stdio_server_t *sv, const char *name,
                                apr_array_header_t *words)
{
    const char *err = one_word(name, words);
    apr_int64_t n = -1;
    size_t i;
    int bad;

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
    apr_array_header_t *words = mcp_config_words(cmd->pool, d->args);
    const char *err = NULL;
    size_t i;

    for (i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
        if (strcasecmp(inner[i].name, d->directive) == 0) {
            err = inner[i].fn(sv, inner[i].name, words);
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

    if (!mcp_stdio_conf || !spec || strncasecmp(spec, "stdio:", 6) != 0) {
        return NULL;
    }
    for (i = 0; i < mcp_stdio_conf->backends->nelts; i++) {
        stdio_backend_t *b = APR_ARRAY_IDX(mcp_stdio_conf->backends, i, stdio_backend_t *);
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

/* ---- where the supervisor is ------------------------------------------------------------ */

/* How this host reaches its own supervisor: the listen address, loopback for a wildcard. */
static const char *local_host(apr_pool_t *p, const stdio_conf_t *c)
{
    const char *host = "127.0.0.1";
    int port;

    parse_listen(p, c->listen ? c->listen : MCP_STDIO_DEFAULT_LISTEN, &host, &port);
    if (!*host || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "*") == 0) {
        return "127.0.0.1";
    }
    if (strcmp(host, "::") == 0) {
        return "[::1]";
    }
    return strchr(host, ':') ? apr_pstrcat(p, "[", host, "]", NULL) : host;
}

const char *mcp_stdio_supervisor_path(const stdio_conf_t *c)
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

const char *mcp_stdio_local_url(apr_pool_t *p, const stdio_backend_t *b, int port)
{
    return apr_psprintf(p, "http://%s:%d/stdio/%s", mcp_stdio_conf->local_host, port, b->name);
}

/* ---- check_config: what can be told before anything starts -------------------------------- */

static int stdio_check_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                              server_rec *s)
{
    stdio_conf_t *c = mcp_stdio_conf;
    const char *path;
    int i, rc = OK;

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
    c->local_host = local_host(pconf, c);
    if (!(path = mcp_stdio_supervisor_path(c))) {
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

    if (!call->target || !call->target->stdio || call->session_id || !mcp_stdio_conf) {
        return;
    }
    /* A new session: this host's supervisor, at its port of now (a replaced supervisor may
     * listen elsewhere than when this child was forked; one being started is waited for). */
    port = mcp_stdio_port(r->server);
    if (port > 0 && port != b->port) {
        t = apr_pmemdup(r->pool, &b->target, sizeof(*t));
        t->url = mcp_stdio_local_url(r->pool, b, port);
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

void mcp_stdio_register_hooks(void)
{
    ap_hook_check_config(stdio_check_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(mcp_stdio_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(mcp_stdio_child_init, NULL, NULL, APR_HOOK_FIRST);
}
