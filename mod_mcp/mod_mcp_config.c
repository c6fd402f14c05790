/* mod_mcp_config — see mod_mcp_config.h. */
#include <apr_lib.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <ap_expr.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mcp_origin.h"
#include "mcp_protocol.h"
#include "mcp_shim.h"
#include "mod_mcp_config.h"
#include "mod_mcp_members.h"
#include "mod_mcp_oauth.h"
#include "mod_mcp_stdio.h"

extern module AP_MODULE_DECLARE_DATA mcp_module;

#define UNSET (-1)

void *mcp_config_create_dir(apr_pool_t *p, char *dir)
{
    mcp_dir_conf_t *conf = apr_pcalloc(p, sizeof(*conf));

    (void)dir;
    conf->max_message_size = UNSET;
    conf->backend_connect_timeout = UNSET;
    conf->backend_timeout = UNSET;
    conf->stream_timeout = UNSET;
    conf->stream_queue_length = UNSET;
    conf->stream_queue_bytes = UNSET;
    conf->retry_interval = UNSET;
    conf->keepalive_interval = UNSET;
    conf->stream_lease = UNSET;
    conf->stream_close_after = UNSET;
    conf->session_idle_timeout = UNSET;
    conf->max_sessions = UNSET;
    conf->max_principal_sessions = UNSET;
    conf->max_session_streams = UNSET;
    conf->max_principal_streams = UNSET;
    conf->max_stream_followers = UNSET;
    conf->max_batch_size = UNSET;
    conf->era_bridge = UNSET;
    conf->async_streams = UNSET;
    conf->bridge_input_timeout = UNSET;
    conf->bridge_tools_ttl = UNSET;
    conf->backend_protocols_ttl = UNSET;
    conf->shim_max_rounds = UNSET;
    return conf;
}

/* Per setting: a section that names only the CA keeps the client certificate it inherits. */
static mcp_backend_tls_t *merge_backend_tls(apr_pool_t *p, mcp_backend_tls_t *base,
                                            mcp_backend_tls_t *add)
{
    mcp_backend_tls_t *tls;

    if (!base || !add) {
        return add ? add : base;
    }
    tls = apr_pmemdup(p, add, sizeof(*tls));
    if (!add->ca_file) {
        tls->ca_file = base->ca_file;
    }
    if (!add->cert_file) {
        tls->cert_file = base->cert_file;
        tls->key_file = base->key_file;
    }
    return tls;
}

/* The more specific section wins wherever it set the field. */
#define MERGE(field, unset) merged->field = (add->field != (unset)) ? add->field : base->field

void *mcp_config_merge_dir(apr_pool_t *p, void *basev, void *addv)
{
    const mcp_dir_conf_t *base = basev, *add = addv;
    mcp_dir_conf_t *merged = apr_pcalloc(p, sizeof(*merged));

    if (add->backend_spec) {
        /* One backend, or members: a Location that says either replaces both. */
        merged->backend_spec = add->backend_spec;
        merged->backend = add->backend;
        merged->members = add->members;
    }
    else {
        merged->backend_spec = base->backend_spec;
        merged->backend = base->backend;
        merged->members = base->members;
    }
    MERGE(backend_headers, NULL);
    merged->backend_tls = merge_backend_tls(p, base->backend_tls, add->backend_tls);
    MERGE(max_message_size, UNSET);
    MERGE(backend_connect_timeout, UNSET);
    MERGE(backend_timeout, UNSET);
    MERGE(stream_timeout, UNSET);
    MERGE(stream_queue_length, UNSET);
    MERGE(stream_queue_bytes, UNSET);
    MERGE(retry_interval, UNSET);
    MERGE(keepalive_interval, UNSET);
    MERGE(stream_lease, UNSET);
    MERGE(stream_close_after, UNSET);
    MERGE(session_idle_timeout, UNSET);
    MERGE(max_sessions, UNSET);
    MERGE(max_principal_sessions, UNSET);
    MERGE(max_session_streams, UNSET);
    MERGE(max_principal_streams, UNSET);
    MERGE(max_stream_followers, UNSET);
    MERGE(max_batch_size, UNSET);
    MERGE(shim_max_rounds, UNSET);
    MERGE(allowed_origins, NULL);
    MERGE(allowed_hosts, NULL);
    MERGE(backend_protocols, NULL);
    MERGE(oauth_resource, NULL);
    MERGE(oauth_servers, NULL);
    MERGE(oauth_scopes, NULL);
    MERGE(era_bridge, UNSET);
    MERGE(async_streams, UNSET);
    MERGE(bridge_input_timeout, UNSET);
    MERGE(bridge_tools_ttl, UNSET);
    MERGE(backend_protocols_ttl, UNSET);
    return merged;
}

#define DEFAULT(field, value) if (conf->field == UNSET) conf->field = (value)

const mcp_dir_conf_t *mcp_config_get(request_rec *r)
{
    const mcp_dir_conf_t *set = ap_get_module_config(r->per_dir_config, &mcp_module);
    mcp_dir_conf_t *conf = apr_pmemdup(r->pool, set, sizeof(*conf));

    DEFAULT(max_message_size, MCP_DEFAULT_MAX_MESSAGE_SIZE);
    DEFAULT(backend_connect_timeout, MCP_DEFAULT_BACKEND_CONNECT_TIMEOUT);
    DEFAULT(backend_timeout, MCP_DEFAULT_BACKEND_TIMEOUT);
    DEFAULT(stream_timeout, MCP_DEFAULT_STREAM_TIMEOUT);
    DEFAULT(stream_queue_length, MCP_DEFAULT_STREAM_QUEUE_LENGTH);
    DEFAULT(stream_queue_bytes, MCP_DEFAULT_STREAM_QUEUE_BYTES);
    DEFAULT(retry_interval, MCP_DEFAULT_RETRY_INTERVAL);
    DEFAULT(keepalive_interval, MCP_DEFAULT_KEEPALIVE_INTERVAL);
    DEFAULT(stream_lease, MCP_DEFAULT_STREAM_LEASE);
    DEFAULT(stream_close_after, 0);
    DEFAULT(session_idle_timeout, MCP_DEFAULT_SESSION_IDLE_TIMEOUT);
    DEFAULT(max_sessions, MCP_DEFAULT_MAX_SESSIONS);
    DEFAULT(max_principal_sessions, MCP_DEFAULT_MAX_PRINCIPAL_SESSIONS);
    DEFAULT(max_session_streams, MCP_DEFAULT_MAX_SESSION_STREAMS);
    DEFAULT(max_principal_streams, MCP_DEFAULT_MAX_PRINCIPAL_STREAMS);
    DEFAULT(max_stream_followers, MCP_DEFAULT_MAX_STREAM_FOLLOWERS);
    DEFAULT(max_batch_size, MCP_DEFAULT_MAX_BATCH_SIZE);
    DEFAULT(era_bridge, 1);
    DEFAULT(async_streams, 1);
    DEFAULT(bridge_input_timeout, MCP_DEFAULT_BRIDGE_INPUT_TIMEOUT);
    DEFAULT(bridge_tools_ttl, MCP_DEFAULT_BRIDGE_TOOLS_TTL);
    DEFAULT(shim_max_rounds, MCP_SHIM_DEFAULT_MAX_ROUNDS);
    DEFAULT(backend_protocols_ttl, MCP_DEFAULT_BACKEND_PROTOCOLS_TTL);
    /* backend_protocols stays NULL when unset: the backend's eras are learned (mod_mcp_eras). */
    if (!conf->allowed_origins) {
        conf->allowed_origins = apr_array_make(r->pool, 2, sizeof(const char *));
        APR_ARRAY_PUSH(conf->allowed_origins, const char *) = "self";
        APR_ARRAY_PUSH(conf->allowed_origins, const char *) = "localhost";
    }
    return conf;
}

void *mcp_config_create_server(apr_pool_t *p, server_rec *s)
{
    mcp_server_conf_t *conf = apr_pcalloc(p, sizeof(*conf));

    (void)s;
    conf->sweep_interval = UNSET;
    conf->database_timeout = UNSET;
    conf->retention = UNSET;
    conf->group_commit = UNSET;
    return conf;
}

void *mcp_config_merge_server(apr_pool_t *p, void *basev, void *addv)
{
    const mcp_server_conf_t *base = basev, *add = addv;
    mcp_server_conf_t *merged = apr_pcalloc(p, sizeof(*merged));

    MERGE(sweep_interval, UNSET);
    MERGE(database_timeout, UNSET);
    MERGE(retention, UNSET);
    MERGE(group_commit, UNSET);
    MERGE(oauth_resources, NULL);
    return merged;
}

mcp_server_conf_t *mcp_config_server(server_rec *s)
{
    return ap_get_module_config(s->module_config, &mcp_module);
}

apr_interval_time_t mcp_config_sweep_interval(server_rec *s)
{
    const mcp_server_conf_t *conf = ap_get_module_config(s->module_config, &mcp_module);

    return conf->sweep_interval == UNSET ? MCP_DEFAULT_SWEEP_INTERVAL : conf->sweep_interval;
}

int mcp_config_group_commit(server_rec *s)
{
    const mcp_server_conf_t *conf = ap_get_module_config(s->module_config, &mcp_module);

    return conf->group_commit == UNSET ? 1 : conf->group_commit;
}

apr_interval_time_t mcp_config_database_timeout(server_rec *s)
{
    const mcp_server_conf_t *conf = ap_get_module_config(s->module_config, &mcp_module);

    return conf->database_timeout == UNSET || conf->database_timeout <= 0
           ? MCP_DEFAULT_DATABASE_TIMEOUT : conf->database_timeout;
}

/* ---- directive handlers ------------------------------------------------------------------ */

static const char *set_backend(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_dir_conf_t *conf = dconf;
    mcp_backend_target_t *target = NULL;
    const char *err = NULL;

    if (conf->members) {
        return "MCPBackend and <MCPMember> exclude each other: a Location has one backend, or "
               "members";
    }
    if (strncasecmp(arg, "stdio:", 6) == 0) {
        /* A stdio server (mod_mcp_stdio): its supervisor's URL is known in post_config. */
        conf->backend = mcp_stdio_backend(cmd, arg + 6, &err);
        arg = apr_pstrcat(cmd->temp_pool, "stdio:", arg + 6, NULL);
    }
    else {
        target = apr_pcalloc(cmd->pool, sizeof(*target));
        err = mcp_backend_target_parse(cmd->pool, arg, target);
        conf->backend = target;
    }
    if (err) {
        return apr_pstrcat(cmd->pool, cmd->cmd->name, ": ", err, NULL);
    }
    conf->backend_spec = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

/* Each setter below finds its field and its bounds through cmd->info: a slot_t made by AT() or
 * BOUNDED() in the table at the end. One setter per shape (count, size, duration, list). */
typedef struct slot_t {
    apr_size_t offset;     /* of the field in mcp_dir_conf_t                                   */
    apr_off_t  min, max;   /* counts and sizes: bounds (max 0: none); durations: the shortest, in
                            * microseconds (0: any)                                            */
} slot_t;

#define SLOT(cmd) ((const slot_t *)(cmd)->info)
#define FIELD(type, dconf, cmd) ((type *)((char *)(dconf) + SLOT(cmd)->offset))

static const char *parse_count(cmd_parms *cmd, const char *arg, apr_off_t min, apr_off_t *out)
{
    char *end;

    if (apr_strtoff(out, arg, &end, 10) != APR_SUCCESS || *end || *out < min) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not a number >= %" APR_OFF_T_FMT,
                            cmd->cmd->name, arg, min);
    }
    return NULL;
}

/* A size in bytes (apr_off_t). MCPMaxMessageSize's bound, MCP_MAX_MESSAGE_SIZE_LIMIT, keeps any
 * length derived from a message (with its framing, or a terminating NUL) inside an int. */
static const char *set_size(cmd_parms *cmd, void *dconf, const char *arg)
{
    apr_off_t *size = FIELD(apr_off_t, dconf, cmd);
    const char *err = parse_count(cmd, arg, SLOT(cmd)->min, size);

    if (!err && SLOT(cmd)->max && *size > SLOT(cmd)->max) {
        return apr_psprintf(cmd->pool, "%s: %s is too large (at most %" APR_OFF_T_FMT " bytes)",
                            cmd->cmd->name, arg, SLOT(cmd)->max);
    }
    return err;
}

/* A count (int): MCPStreamQueueLength, or a limit where 0 means none (MCPMaxSessions). */
static const char *set_count(cmd_parms *cmd, void *dconf, const char *arg)
{
    apr_off_t n;
    const char *err = parse_count(cmd, arg, SLOT(cmd)->min, &n);

    if (!err && SLOT(cmd)->max && n > SLOT(cmd)->max) {
        return apr_psprintf(cmd->pool, "%s: %s is too large", cmd->cmd->name, arg);
    }
    *FIELD(int, dconf, cmd) = (int)n;
    return err;
}

apr_array_header_t *mcp_config_words(apr_pool_t *p, const char *args)
{
    apr_array_header_t *words = apr_array_make(p, 4, sizeof(const char *));
    const char *w;

    while (args && *args && *(w = ap_getword_conf(p, &args))) {
        APR_ARRAY_PUSH(words, const char *) = w;
    }
    return words;
}

/* A list of words, replacing what an enclosing section said. */
static const char *add_word(cmd_parms *cmd, void *dconf, const char *arg)
{
    apr_array_header_t **list = FIELD(apr_array_header_t *, dconf, cmd);

    if (!*list) {
        *list = apr_array_make(cmd->pool, 4, sizeof(const char *));
    }
    APR_ARRAY_PUSH(*list, const char *) = apr_pstrdup(cmd->pool, arg);
    return NULL;
}

/* ---- TLS toward the backend (MCPBackendCACertificateFile, MCPBackendClientCertificateFile) -- */

/* A PEM file the gateway's children will read: its path from ServerRoot, readable now (httpd's
 * parent reads it as root; the children run as User, so its mode matters too: see README). */
static const char *pem_file(cmd_parms *cmd, const char *path, const char **out)
{
    const char *file = ap_server_root_relative(cmd->pool, path);
    apr_file_t *f;

    if (!file || apr_file_open(&f, file, APR_FOPEN_READ, APR_FPROT_OS_DEFAULT, cmd->temp_pool)
        != APR_SUCCESS) {
        return apr_psprintf(cmd->pool, "%s: cannot read %s", cmd->cmd->name, path);
    }
    apr_file_close(f);
    *out = file;
    return NULL;
}

/* This section's TLS settings (merged with the enclosing section's per setting). */
static mcp_backend_tls_t *backend_tls(cmd_parms *cmd, void *dconf)
{
    mcp_dir_conf_t *conf = dconf;

    if (!conf->backend_tls) {
        conf->backend_tls = apr_pcalloc(cmd->pool, sizeof(*conf->backend_tls));
    }
    return conf->backend_tls;
}

static const char *set_backend_ca(cmd_parms *cmd, void *dconf, const char *path)
{
    return pem_file(cmd, path, &backend_tls(cmd, dconf)->ca_file);
}

static const char *set_backend_client_cert(cmd_parms *cmd, void *dconf, const char *cert,
                                           const char *key)
{
    mcp_backend_tls_t *tls = backend_tls(cmd, dconf);
    const char *err = pem_file(cmd, cert, &tls->cert_file);

    tls->key_file = NULL;
    return err ? err : key ? pem_file(cmd, key, &tls->key_file) : NULL;
}

/* ---- headers toward the backend (MCPBackendHeader, MCPBackendHeaderFile) ------------------- */

/* Headers the gateway sets itself on every backend request, or that would change how the
 * request is framed: a directive may not set them. */
static const char *const reserved_headers[] = {
    "Mcp-Session-Id", "MCP-Protocol-Version", "Last-Event-ID", "Accept", "Content-Type",
    "Content-Length", "Transfer-Encoding", "Host", "Connection", "Expect", "traceparent",
    "tracestate", "Upgrade", "TE", "Trailer",
    /* a stdio server's supervisor (mod_mcp_stdio): its key, and who asks */
    "MCP-Supervisor-Key", "MCP-Supervisor-Principal", "MCP-Gateway-Session-Tag", NULL
};

/* A control character (but TAB) or DEL: CR and LF would split the header. */
static int has_control(const char *v)
{
    for (; *v; v++) {
        if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f) {
            return 1;
        }
    }
    return 0;
}

static const char *backend_header_name(cmd_parms *cmd, const char *name)
{
    static const char token[] = "!#$%&'*+-.^_`|~";
    const char *const *r;
    const char *c;

    for (c = name; *c; c++) {
        if (!apr_isalnum(*c) && !strchr(token, *c)) {
            break;
        }
    }
    if (!*name || *c) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not a header name", cmd->cmd->name, name);
    }
    for (r = reserved_headers; *r; r++) {
        if (!strcasecmp(name, *r)) {
            return apr_psprintf(cmd->pool, "%s: %s is the gateway's own header toward the "
                                "backend", cmd->cmd->name, *r);
        }
    }
    return NULL;
}

static mcp_backend_header_t *push_backend_header(cmd_parms *cmd, mcp_dir_conf_t *conf,
                                                 const char *name)
{
    mcp_backend_header_t *h;

    if (!conf->backend_headers) {
        conf->backend_headers = apr_array_make(cmd->pool, 2, sizeof(mcp_backend_header_t));
    }
    h = apr_array_push(conf->backend_headers);
    memset(h, 0, sizeof(*h));
    h->name = apr_pstrdup(cmd->pool, name);
    return h;
}

static const char *add_backend_header(cmd_parms *cmd, void *dconf, const char *name,
                                      const char *expr)
{
    const char *err = backend_header_name(cmd, name);
    mcp_backend_header_t *h;
    ap_expr_info_t *info;

    if (err) {
        return err;
    }
    info = ap_expr_parse_cmd(cmd, expr, AP_EXPR_FLAG_STRING_RESULT, &err, NULL);
    if (err) {
        return apr_psprintf(cmd->pool, "MCPBackendHeader %s: cannot parse '%s': %s", name, expr,
                            err);
    }
    h = push_backend_header(cmd, dconf, name);
    h->expr = info;
    return NULL;
}

static const char *add_backend_header_file(cmd_parms *cmd, void *dconf, const char *name,
                                           const char *path)
{
    const char *err = backend_header_name(cmd, name), *file = ap_server_root_relative(cmd->pool,
                                                                                      path);
    apr_file_t *f;
    char line[8192];
    apr_size_t len;
    apr_status_t rv;

    if (err) {
        return err;
    }
    if (!file || (rv = apr_file_open(&f, file, APR_FOPEN_READ, APR_FPROT_OS_DEFAULT,
                                     cmd->temp_pool)) != APR_SUCCESS) {
        return apr_psprintf(cmd->pool, "MCPBackendHeaderFile %s: cannot open %s", name, path);
    }
    rv = apr_file_gets(line, sizeof(line), f);
    apr_file_close(f);
    len = rv == APR_SUCCESS ? strlen(line) : 0;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '
                       || line[len - 1] == '\t')) {
        line[--len] = '\0';
    }
    if (len == 0 || len == sizeof(line) - 1) {
        return apr_psprintf(cmd->pool, "MCPBackendHeaderFile %s: %s must hold one line of at "
                            "most %d bytes", name, path, (int)sizeof(line) - 2);
    }
    if (has_control(line)) {
        return apr_psprintf(cmd->pool, "MCPBackendHeaderFile %s: %s holds a control "
                            "character", name, path);
    }
    push_backend_header(cmd, dconf, name)->value = apr_pstrdup(cmd->pool, line);
    return NULL;
}

const char *mcp_config_backend_line(cmd_parms *cmd, mcp_dir_conf_t *own, const char *line,
                                    const apr_array_header_t *words)
{
    const char *const *w = (const char *const *)words->elts;
    command_rec named = *cmd->cmd;   /* the directive's own name in what it says */
    const command_rec *section = cmd->cmd;
    const char *err;

    if (!strcasecmp(line, "Header") && words->nelts == 2) {
        named.name = "MCPBackendHeader";
        cmd->cmd = &named;
        err = add_backend_header(cmd, own, w[0], w[1]);
    }
    else if (!strcasecmp(line, "HeaderFile") && words->nelts == 2) {
        named.name = "MCPBackendHeaderFile";
        cmd->cmd = &named;
        err = add_backend_header_file(cmd, own, w[0], w[1]);
    }
    else if (!strcasecmp(line, "CACertificateFile") && words->nelts == 1) {
        named.name = "MCPBackendCACertificateFile";
        cmd->cmd = &named;
        err = set_backend_ca(cmd, own, w[0]);
    }
    else if (!strcasecmp(line, "ClientCertificateFile")
             && (words->nelts == 1 || words->nelts == 2)) {
        named.name = "MCPBackendClientCertificateFile";
        cmd->cmd = &named;
        err = set_backend_client_cert(cmd, own, w[0], words->nelts == 2 ? w[1] : NULL);
    }
    else {
        return apr_psprintf(cmd->pool, "%s takes %s", line,
                            !strcasecmp(line, "ClientCertificateFile")
                            ? "a certificate file and, optionally, its key file"
                            : !strcasecmp(line, "CACertificateFile") ? "one file"
                            : "a header name and a value");
    }
    cmd->cmd = section;
    return err;
}

const apr_array_header_t *mcp_config_backend_headers(request_rec *r,
                                                     const mcp_dir_conf_t *conf)
{
    apr_array_header_t *lines = NULL;
    const char *err, *v, *key;
    int i;

    if (!conf->backend_headers) {
        return NULL;
    }
    /* Per list: a federated endpoint's members may each have their own. */
    key = apr_psprintf(r->pool, "mcp-backend-headers %pp", (void *)conf->backend_headers);
    apr_pool_userdata_get((void **)&lines, key, r->pool);
    if (lines) {
        return lines;
    }
    lines = apr_array_make(r->pool, conf->backend_headers->nelts, sizeof(const char *));
    for (i = 0; i < conf->backend_headers->nelts; i++) {
        const mcp_backend_header_t *h = &APR_ARRAY_IDX(conf->backend_headers, i,
                                                       mcp_backend_header_t);

        err = NULL;
        v = h->expr ? ap_expr_str_exec(r, h->expr, &err) : h->value;
        if (err || !v || !*v || has_control(v)) {
            ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "MCPBackendHeader %s: not sent (%s)",
                          h->name, err ? err : !v || !*v ? "empty" : "a control character");
            continue;
        }
        APR_ARRAY_PUSH(lines, const char *) = apr_pstrcat(r->pool, h->name, ": ", v, NULL);
    }
    apr_pool_userdata_set(lines, key, NULL, r->pool);
    return lines;
}

/* A duration in seconds by default, or with a unit: "500ms", "30s", "5m", "1h". */
static const char *parse_duration(cmd_parms *cmd, const char *arg, apr_interval_time_t *out)
{
    apr_interval_time_t t;
    apr_size_t len = strlen(arg);
    const char *spelled = arg;

    /* httpd's parser spells minutes "min"; the README (and MCPRetention) also take "m". */
    if (len >= 2 && arg[len - 1] == 'm' && apr_isdigit(arg[len - 2])) {
        spelled = apr_pstrcat(cmd->temp_pool, arg, "in", NULL);
    }
    if (ap_timeout_parameter_parse(spelled, &t, "s") != APR_SUCCESS || t < 0) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not a duration (e.g. 30, 30s, 500ms, 5m)",
                            cmd->cmd->name, arg);
    }
    *out = t;
    return NULL;
}

/* A duration; one with a shortest (intervals that pace a loop) must not be shorter. */
static const char *set_duration(cmd_parms *cmd, void *dconf, const char *arg)
{
    apr_interval_time_t *t = FIELD(apr_interval_time_t, dconf, cmd);
    const char *err = parse_duration(cmd, arg, t);

    if (!err && *t < SLOT(cmd)->min) {
        return apr_psprintf(cmd->pool, "%s: '%s' is too short (%" APR_TIME_T_FMT "ms at least)",
                            cmd->cmd->name, arg, apr_time_as_msec(SLOT(cmd)->min));
    }
    return err;
}

/* MCPAllowedOrigins: self, localhost, *, or an origin (scheme://host[:port], no path). */
static const char *add_origin(cmd_parms *cmd, void *dconf, const char *arg)
{
    const char *scheme, *host;
    int port;

    if (strcasecmp(arg, "self") != 0 && strcasecmp(arg, "localhost") != 0 && strcmp(arg, "*") != 0
        && (mcp_origin_parse(cmd->temp_pool, arg, &scheme, &host, &port) != 0 || !host)) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not self, localhost, * or an origin such as "
                            "https://app.example.com (scheme://host[:port], no path)",
                            cmd->cmd->name, arg);
    }
    return add_word(cmd, dconf, arg);
}

/* MCPBackendProtocols: the revisions the backend serves, each one the gateway serves. */
static const char *add_backend_protocol(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_dir_conf_t *conf = dconf;

    if (!mcp_protocol_served(arg)) {
        return apr_psprintf(cmd->pool, "%s: '%s' is not a protocol revision the gateway serves "
                            "(%s)", cmd->cmd->name, arg, mcp_protocol_list(MCP_ERA_UNKNOWN));
    }
    conf->backend_protocols = conf->backend_protocols
        ? apr_pstrcat(cmd->pool, conf->backend_protocols, ", ", arg, NULL)
        : apr_pstrdup(cmd->pool, arg);
    return NULL;
}

static const char *set_sweep_interval(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_server_conf_t *conf = ap_get_module_config(cmd->server->module_config, &mcp_module);
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);

    (void)dconf;
    return err ? err : parse_duration(cmd, arg, &conf->sweep_interval);
}

/* MCPDatabaseGroupCommit off | N (committers per child, 1-16). */
static const char *set_group_commit(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_server_conf_t *conf = ap_get_module_config(cmd->server->module_config, &mcp_module);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    char *end;
    long n;

    (void)dconf;
    if (err) {
        return err;
    }
    if (strcasecmp(arg, "off") == 0) {
        conf->group_commit = 0;
        return NULL;
    }
    n = strtol(arg, &end, 10);
    if (end == arg || *end || n < 1 || n > 16) {
        return apr_psprintf(cmd->pool, "%s: '%s' is neither off nor a number of committers "
                            "from 1 to 16", cmd->cmd->name, arg);
    }
    conf->group_commit = (int)n;
    return NULL;
}

/* MCPRetention off | N[s|m|h|d] (seconds by default). */
static const char *set_retention(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_server_conf_t *conf = ap_get_module_config(cmd->server->module_config, &mcp_module);
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);
    char *end;
    apr_int64_t n;

    (void)dconf;
    if (err) {
        return err;
    }
    if (strcasecmp(arg, "off") == 0) {
        conf->retention = UNSET;
        return NULL;
    }
    n = apr_strtoi64(arg, &end, 10);
    if (n <= 0 || end == arg || (*end && end[1])
        || (*end && !strchr("smhd", *end))) {
        return apr_psprintf(cmd->pool, "MCPRetention: '%s' is not off or a duration such as "
                            "30d, 12h, 90m or 3600 (seconds)", arg);
    }
    n *= *end == 'd' ? 86400 : *end == 'h' ? 3600 : *end == 'm' ? 60 : 1;
    if (n > 100L * 365 * 86400) {
        return "MCPRetention: more than 100 years; use off to keep everything";
    }
    conf->retention = apr_time_from_sec(n);
    return NULL;
}

apr_interval_time_t mcp_config_retention(server_rec *s)
{
    const mcp_server_conf_t *conf = ap_get_module_config(s->module_config, &mcp_module);

    return conf->retention == UNSET ? -1 : conf->retention;
}

static const char *set_database_timeout(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_server_conf_t *conf = ap_get_module_config(cmd->server->module_config, &mcp_module);
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);

    (void)dconf;
    if (!err && !(err = parse_duration(cmd, arg, &conf->database_timeout))
        && conf->database_timeout < apr_time_from_msec(100)) {
        err = apr_pstrcat(cmd->pool, cmd->cmd->name, ": must be at least 100ms", NULL);
    }
    return err;
}

/* The slot of a field of mcp_dir_conf_t (see slot_t): unbounded, bounded, an interval that
 * paces a loop (10ms at least), a limit where 0 means none. */
#define BOUNDED(field, min, max) \
    ((void *)&(const slot_t){APR_OFFSETOF(mcp_dir_conf_t, field), (min), (max)})
#define AT(field) BOUNDED(field, 0, 0)
#define INTERVAL(field) BOUNDED(field, apr_time_from_msec(10), 0)
#define LIMIT(field) BOUNDED(field, 0, 100000000)
#define CONTEXT (RSRC_CONF | ACCESS_CONF)

const command_rec mcp_config_cmds[] = {
    AP_INIT_TAKE1("MCPBackend", set_backend, NULL, CONTEXT,
                  "URL of the backend MCP server: http://host:port/path, https://..., "
                  "unix:/path/to.sock|http://localhost/path, or stdio:name (an "
                  "<MCPStdioServer name>)"),
    AP_INIT_RAW_ARGS("<MCPMember", mcp_members_section, NULL, CONTEXT,
                     "A member of a federated endpoint: <MCPMember name> with Backend, Prefix, "
                     "AllowTools, DenyTools, RenameTool, DescribeTool, MaxAnswerSize; several "
                     "serve one endpoint (instead of MCPBackend)"),
    AP_INIT_TAKE1("MCPMaxMessageSize", set_size,
                  BOUNDED(max_message_size, 1, MCP_MAX_MESSAGE_SIZE_LIMIT), CONTEXT,
                  "Largest JSON-RPC message accepted from a client or a backend, in bytes "
                  "(default 4194304, at most 1073741824)"),
    AP_INIT_TAKE1("MCPBackendConnectTimeout", set_duration, AT(backend_connect_timeout), CONTEXT,
                  "How long to wait for a connection to the backend (default 5s)"),
    AP_INIT_TAKE1("MCPBackendTimeout", set_duration, AT(backend_timeout), CONTEXT,
                  "Longest an exchange with the backend that opens no stream may take "
                  "(initialize, notifications, DELETE), 0 for no limit (default 60s)"),
    AP_INIT_TAKE1("MCPStreamTimeout", set_duration, AT(stream_timeout), CONTEXT,
                  "Longest the gateway relays the answer to a request, with or without the "
                  "client, before it ends the stream with an error (default 300s; 0: no limit)"),
    AP_INIT_TAKE1("MCPStreamQueueLength", set_count, BOUNDED(stream_queue_length, 1, 1000000),
                  CONTEXT,
                  "Events held in a stream's output queue before they are stored and flushed "
                  "(default 16)"),
    AP_INIT_TAKE1("MCPStreamQueueBytes", set_size, BOUNDED(stream_queue_bytes, 1, 0), CONTEXT,
                  "Bytes held in a stream's output queue before they are stored and flushed "
                  "(default 262144)"),
    AP_INIT_TAKE1("MCPRetryInterval", set_duration, INTERVAL(retry_interval), CONTEXT,
                  "The retry: hint sent with priming events (default 1s)"),
    AP_INIT_TAKE1("MCPKeepAliveInterval", set_duration, INTERVAL(keepalive_interval), CONTEXT,
                  "Idle time after which an SSE stream gets a keep-alive comment (default 15s)"),
    AP_INIT_TAKE1("MCPStreamLease", set_duration, INTERVAL(stream_lease), CONTEXT,
                  "How long a stream's owner may go silent before others treat it as dead; "
                  "renewed every third of it (default 30s)"),
    AP_INIT_TAKE1("MCPStreamCloseAfter", set_duration, AT(stream_close_after), CONTEXT,
                  "End a 2025-11-25 client's stream after this long, with a retry: hint, so that "
                  "it polls with Last-Event-ID instead of holding a connection (default 0: off)"),
    AP_INIT_TAKE1("MCPSessionIdleTimeout", set_duration, AT(session_idle_timeout), CONTEXT,
                  "Inactivity after which a session expires; an open stream is activity "
                  "(default 1h; 0: never)"),
    AP_INIT_TAKE1("MCPMaxSessions", set_count, LIMIT(max_sessions), CONTEXT,
                  "Live sessions allowed at once across all servers sharing the database "
                  "(default 10000; 0: no limit)"),
    AP_INIT_TAKE1("MCPMaxSessionsPerPrincipal", set_count, LIMIT(max_principal_sessions), CONTEXT,
                  "Live sessions one user (or, unauthenticated, one client address) may hold "
                  "across all servers (default 1000; 0: no limit)"),
    AP_INIT_TAKE1("MCPMaxStreamsPerSession", set_count, LIMIT(max_session_streams), CONTEXT,
                  "Open streams (requests being relayed, the standalone GET, Last-Event-ID "
                  "followers) one session may hold across all servers (default 16; 0: no limit)"),
    AP_INIT_TAKE1("MCPMaxStreamsPerPrincipal", set_count, LIMIT(max_principal_streams), CONTEXT,
                  "Open streams one user (or, unauthenticated, one client address) may hold "
                  "across all servers (default 64; 0: no limit)"),
    AP_INIT_TAKE1("MCPMaxFollowersPerStream", set_count, LIMIT(max_stream_followers), CONTEXT,
                  "Clients following one open stream with Last-Event-ID at once "
                  "(default 4; 0: no limit)"),
    AP_INIT_TAKE1("MCPMaxBatchSize", set_count, LIMIT(max_batch_size), CONTEXT,
                  "Messages allowed in one JSON-RPC batch (2025-03-26) (default 100; 0: no "
                  "limit)"),
    AP_INIT_TAKE1("MCPShimMaxRounds", set_count, LIMIT(shim_max_rounds), CONTEXT,
                  "Input-required rounds one request may take when the era shim serves a "
                  "2025-era client in front of a 2026-only backend (default 8; 0: no limit)"),
    AP_INIT_ITERATE("MCPAllowedOrigins", add_origin, AT(allowed_origins), CONTEXT,
                    "Origins allowed to call: self, localhost, *, or exact origins such as "
                    "https://app.example.com (default: self localhost)"),
    AP_INIT_ITERATE("MCPAllowedHosts", add_word, AT(allowed_hosts), CONTEXT,
                    "Host header names accepted besides the server's own names and loopback "
                    "(DNS-rebinding protection); * accepts any"),
    AP_INIT_ITERATE("MCPBackendProtocols", add_backend_protocol, NULL, CONTEXT,
                    "The protocol revisions the backend serves (default: learned from the "
                    "backend's answer to server/discover); 2026-07-28 lets stateless requests "
                    "through to it"),
    AP_INIT_TAKE1("MCPBackendProtocolsTTL", set_duration, INTERVAL(backend_protocols_ttl),
                  CONTEXT,
                  "How long the backend's eras learned by server/discover are used (shared by "
                  "every process and host through PostgreSQL) before they are learned again, "
                  "unless the discover result's ttlMs says (default 1h)"),
    AP_INIT_FLAG("MCPAsyncStreams", ap_set_flag_slot,
                 (void *)APR_OFFSETOF(mcp_dir_conf_t, async_streams), CONTEXT,
                 "Streams that only wait (standalone GET streams, Last-Event-ID followers) "
                 "are parked in the process's event loop and hold no thread, where httpd "
                 "allows it (event MPM, HTTP/1.x with or without TLS): On (default) or Off "
                 "(every stream holds its thread, as on prefork, worker and HTTP/2)"),
    AP_INIT_FLAG("MCPEraBridge", ap_set_flag_slot,
                 (void *)APR_OFFSETOF(mcp_dir_conf_t, era_bridge), CONTEXT,
                 "The era bridge, both directions: serve 2026-07-28 (stateless) clients through "
                 "a backend that serves the 2025 era only, and 2025-era clients through a "
                 "2026-only backend (MCPBackendProtocols 2026-07-28 alone): On (default) or Off "
                 "(2026 clients get -32022 and fall back to initialize; 2025 traffic is "
                 "forwarded as it came)"),
    AP_INIT_TAKE1("MCPEraBridgeInputTimeout", set_duration, INTERVAL(bridge_input_timeout), CONTEXT,
                  "How long an input-required round of the era bridge waits for the client's "
                  "retry before its requestState expires and the backend call is cancelled "
                  "(default 300s)"),
    AP_INIT_TAKE1("MCPEraBridgeToolsTTL", set_duration, INTERVAL(bridge_tools_ttl), CONTEXT,
                  "How long the era bridge trusts a pooled session's tool list (read with "
                  "tools/list, for checking Mcp-Param-* headers against x-mcp-header arguments) "
                  "before a tools/call reads it again (default 60s)"),
    AP_INIT_TAKE1("MCPProtectedResource", mcp_oauth_set_resource, NULL, ACCESS_CONF,
                  "This endpoint's OAuth resource identifier (an https URL, RFC 9728): its "
                  "metadata is served at /.well-known/oauth-protected-resource<path>, and "
                  "unauthenticated requests get 401 with WWW-Authenticate: Bearer "
                  "resource_metadata=..."),
    AP_INIT_ITERATE("MCPAuthorizationServers", add_word, AT(oauth_servers), ACCESS_CONF,
                    "Issuer URLs of the authorization servers whose tokens this endpoint "
                    "accepts (the metadata's authorization_servers)"),
    AP_INIT_ITERATE("MCPResourceScopes", add_word, AT(oauth_scopes), ACCESS_CONF,
                    "Scopes a client should ask for (the metadata's scopes_supported, and the "
                    "scope hint of a 401)"),
    AP_INIT_TAKE1("MCPSweepInterval", set_sweep_interval, NULL, RSRC_CONF,
                  "How often one process per host finishes streams whose owner died "
                  "(default 30s; 0: never)"),
    AP_INIT_TAKE1("MCPRetention", set_retention, NULL, RSRC_CONF,
                  "How long the stored rows of a stream and its session stay after both ended "
                  "(e.g. 30d; default off: kept for ever); the sweep drops whole expired day "
                  "partitions (mcp.maintain) and makes the next days' partitions"),
    AP_INIT_TAKE1("MCPDatabaseGroupCommit", set_group_commit, NULL, RSRC_CONF,
                  "Group commit of the streams' writes in each child: off (the default) or how "
                  "many such transactions may be under way at once per child (1-16)"),
    AP_INIT_TAKE1("MCPDatabaseTimeout", set_database_timeout, NULL, RSRC_CONF,
                  "Longest a request waits for PostgreSQL (one statement, or an outage) before "
                  "it gets 503 (default 10s)"),
    AP_INIT_TAKE2("MCPBackendHeader", add_backend_header, NULL, CONTEXT,
                  "A header every backend request carries, its value an httpd expression "
                  "evaluated per request, e.g. MCPBackendHeader X-User \"%{REMOTE_USER}\" "
                  "(an empty value sends nothing)"),
    AP_INIT_TAKE1("MCPBackendCACertificateFile", set_backend_ca, NULL, CONTEXT,
                  "PEM file of the CAs that verify an https backend's certificate (default: the "
                  "system's trusted CAs)"),
    AP_INIT_TAKE12("MCPBackendClientCertificateFile", set_backend_client_cert, NULL, CONTEXT,
                   "PEM file of the certificate the gateway presents to an https backend, and "
                   "optionally its key's file (default: the key is in the same file)"),
    AP_INIT_TAKE2("MCPBackendHeaderFile", add_backend_header_file, NULL, CONTEXT,
                  "A header every backend request carries, its value the one line of a file read "
                  "at start-up (a static credential: MCPBackendHeaderFile Authorization "
                  "/etc/apache2/backend-token, the file holding \"Bearer ...\")"),
    MCP_STDIO_CMDS,
    { NULL }
};
