/* mcp_supervisor_config.c — the configuration line of the control pipe (docs/stdio.md, "The
 * supervisor program: command line and control pipe") read into sv_config_t.
 *
 * Every error names the member as a path ("servers.everything.start_timeout: ..."), since the
 * message goes back to httpd's log through the "error" answer. Members this version does not
 * know are logged and ignored: the supervisor outlives graceful restarts, so a newer module may
 * talk to an older supervisor.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "mcp_supervisor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct ctx_t {
    char  *err;
    size_t errlen;
} ctx_t;

static int bad(ctx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(ctx_t *x, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(x->err, x->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int member_known(const char *key, const char *const *known)
{
    for (; *known; known++) {
        if (!strcmp(key, *known))
            return 1;
    }
    return 0;
}

static void warn_unknown(json_object *obj, const char *where, const char *const *known)
{
    json_object_object_foreach(obj, key, val) {
        (void)val;
        if (!member_known(key, known))
            sv_log(SV_WARN, "configuration: %s%s is not known to this supervisor: ignored",
                   where, key);
    }
}

static int get_string(ctx_t *x, json_object *obj, const char *where, const char *key,
                      int required, char **out)
{
    json_object *v;

    *out = NULL;
    if (!json_object_object_get_ex(obj, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            return bad(x, "%s%s is missing", where, key);
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return bad(x, "%s%s must be a string", where, key);
    if (strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v))
        return bad(x, "%s%s has a NUL character", where, key);
    *out = sv_xstrdup(json_object_get_string(v));
    return 0;
}

/* A number >= min; *out unchanged when absent and not required. */
static int get_number(ctx_t *x, json_object *obj, const char *where, const char *key,
                      int required, double min, double max, double *out)
{
    json_object *v;
    double d;

    if (!json_object_object_get_ex(obj, key, &v)) {
        if (required)
            return bad(x, "%s%s is missing", where, key);
        return 0;
    }
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return bad(x, "%s%s must be a number", where, key);
    d = json_object_get_double(v);
    if (!isfinite(d) || d < min || d > max)
        return bad(x, "%s%s must be a number from %g to %g", where, key, min, max);
    *out = d;
    return 0;
}

static char **string_array(ctx_t *x, json_object *arr, const char *where)
{
    size_t n = json_object_array_length(arr), i;
    char **out = sv_xcalloc(n + 1, sizeof(char *));

    for (i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        if (!json_object_is_type(e, json_type_string)
            || strlen(json_object_get_string(e)) != (size_t)json_object_get_string_len(e)) {
            bad(x, "%s[%zu] must be a string without NUL", where, i);
            for (i = 0; out[i]; i++)
                free(out[i]);
            free(out);
            return NULL;
        }
        out[i] = sv_xstrdup(json_object_get_string(e));
    }
    return out;
}

static void strv_free(char **v)
{
    size_t i;

    if (!v)
        return;
    for (i = 0; v[i]; i++)
        free(v[i]);
    free(v);
}

sv_server_t *sv_server_hold(sv_server_t *s)
{
    s->refs++;
    return s;
}

void sv_server_release(sv_server_t *s)
{
    if (!s || --s->refs > 0)
        return;
    free(s->name);
    strv_free(s->argv);
    strv_free(s->envp);
    free(s->directory);
    free(s);
}

static int parse_env(ctx_t *x, sv_server_t *s, json_object *env, const char *where)
{
    size_t n = 0;

    if (!json_object_is_type(env, json_type_object))
        return bad(x, "%senv must be an object of strings", where);
    s->envp = sv_xcalloc((size_t)json_object_object_length(env) + 1, sizeof(char *));
    json_object_object_foreach(env, key, val) {
        if (!*key || strchr(key, '='))
            return bad(x, "%senv: \"%s\" is not a variable name", where, key);
        if (!json_object_is_type(val, json_type_string))
            return bad(x, "%senv.%s must be a string", where, key);
        s->envp[n++] = sv_xprintf("%s=%s", key, json_object_get_string(val));
    }
    return 0;
}

static int parse_limits(ctx_t *x, sv_server_t *s, json_object *limits, const char *where)
{
    static const struct {
        const char *name;
        int resource;
    } known[] = {{"as", RLIMIT_AS}, {"cpu", RLIMIT_CPU}, {"nofile", RLIMIT_NOFILE},
                 {"nproc", RLIMIT_NPROC}};
    size_t i;

    if (!json_object_is_type(limits, json_type_object))
        return bad(x, "%slimits must be an object", where);
    for (i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        double d = -1;
        char w[300];
        snprintf(w, sizeof(w), "%slimits.", where);
        if (get_number(x, limits, w, known[i].name, 0, 0, 9.0e18, &d) < 0)
            return -1;
        if (d >= 0) {
            s->limits[s->spec.nlimits].resource = known[i].resource;
            s->limits[s->spec.nlimits].value = (unsigned long)d;
            s->spec.nlimits++;
        }
    }
    return 0;
}

static const char *const server_members[] = {
    "command", "env", "directory", "user", "group", "limits", "start_timeout", "idle_timeout",
    "stop_grace", "max_line", "max_sessions", "max_sessions_per_principal", NULL};

static sv_server_t *parse_server(ctx_t *x, const char *name, json_object *o)
{
    sv_server_t *s = sv_xcalloc(1, sizeof(*s));
    json_object *v;
    char where[200], *user = NULL, *group = NULL;
    double start = 0, idle = 0, grace = 0, max_line = 0, max_s = 0, max_p = 0;
    const char *p;

    s->refs = 1;
    s->name = sv_xstrdup(name);
    snprintf(where, sizeof(where), "servers.%.150s.", name);
    if (!*name || strlen(name) > SV_NAME_MAX)
        goto fail_name;
    for (p = name; *p; p++) {
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", *p))
            goto fail_name;
    }
    if (!json_object_is_type(o, json_type_object)) {
        bad(x, "servers.%s must be an object", name);
        goto fail;
    }
    warn_unknown(o, where, server_members);
    if (!json_object_object_get_ex(o, "command", &v) || !json_object_is_type(v, json_type_array)
        || json_object_array_length(v) == 0) {
        bad(x, "%scommand must be a non-empty array of strings", where);
        goto fail;
    }
    {
        char w[220];
        snprintf(w, sizeof(w), "%scommand", where);
        if (!(s->argv = string_array(x, v, w)))
            goto fail;
    }
    if (s->argv[0][0] != '/') {
        bad(x, "%scommand[0] \"%.100s\" must be an absolute path", where, s->argv[0]);
        goto fail;
    }
    if (!json_object_object_get_ex(o, "env", &v)) {
        bad(x, "%senv is missing", where);
        goto fail;
    }
    if (parse_env(x, s, v, where) < 0)
        goto fail;
    if (get_string(x, o, where, "directory", 0, &s->directory) < 0
        || get_string(x, o, where, "user", 0, &user) < 0
        || get_string(x, o, where, "group", 0, &group) < 0)
        goto fail;
    if (s->directory && s->directory[0] != '/') {
        bad(x, "%sdirectory \"%.100s\" must be an absolute path", where, s->directory);
        goto fail;
    }
    if (json_object_object_get_ex(o, "limits", &v) && parse_limits(x, s, v, where) < 0)
        goto fail;
    if (get_number(x, o, where, "start_timeout", 1, 0.001, 86400, &start) < 0
        || get_number(x, o, where, "idle_timeout", 1, 0, 365 * 86400.0, &idle) < 0
        || get_number(x, o, where, "stop_grace", 1, 0, 3600, &grace) < 0
        || get_number(x, o, where, "max_line", 1, 1024, 1024.0 * 1024 * 1024, &max_line) < 0
        || get_number(x, o, where, "max_sessions", 1, 0, 1e9, &max_s) < 0
        || get_number(x, o, where, "max_sessions_per_principal", 1, 0, 1e9, &max_p) < 0)
        goto fail;
    if ((user || group) && geteuid() != 0) {
        /* Not applied (docs/stdio.md): only root can change user, so names are not checked. */
        sv_log(SV_DEBUG, "%suser/group ignored: the supervisor does not run as root", where);
    }
    else if (user || group) {
        char err[200];
        if (mcp_proc_resolve_user(&s->spec, user, group, err, sizeof(err)) < 0) {
            bad(x, "%suser/group: %s", where, err);
            goto fail;
        }
    }
    s->start_timeout_ms = (uint64_t)(start * 1000);
    s->idle_timeout_ms = (uint64_t)(idle * 1000);
    s->stop_grace_ms = (uint64_t)(grace * 1000);
    s->max_line = (size_t)max_line;
    s->max_sessions = (long)max_s;
    s->max_per_principal = (long)max_p;
    s->spec.argv = s->argv;
    s->spec.envp = s->envp;
    s->spec.directory = s->directory;
    s->spec.limits = s->limits;
    s->spec.nofile_soft = sv.nofile_soft;
    free(user);
    free(group);
    return s;
fail_name:
    bad(x, "servers: the name \"%.100s\" must be 1 to %d letters, digits, '-', '_' or '.'",
        name, SV_NAME_MAX);
fail:
    free(user);
    free(group);
    sv_server_release(s);
    return NULL;
}

static const char *const top_members[] = {"listen", "advertise", "secret", "log_level",
                                          "max_sessions", "servers", NULL};

static int parse_top(ctx_t *x, sv_config_t *c, json_object *o)
{
    json_object *servers;
    char *level = NULL;
    double max_s = 0;
    const char *p;

    warn_unknown(o, "", top_members);
    if (get_string(x, o, "", "listen", 1, &c->listen) < 0
        || get_string(x, o, "", "advertise", 1, &c->advertise) < 0
        || get_string(x, o, "", "secret", 1, &c->secret) < 0
        || get_string(x, o, "", "log_level", 1, &level) < 0
        || get_number(x, o, "", "max_sessions", 1, 0, 1e9, &max_s) < 0)
        goto fail;
    if (strlen(c->secret) < 16)
        goto fail_secret;
    for (p = c->secret; *p; p++) {
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
            goto fail_secret;
    }
    if (strncmp(c->advertise, "http://", 7) != 0) {
        bad(x, "advertise \"%.100s\" must be an http:// URL", c->advertise);
        goto fail;
    }
    for (p = c->advertise; *p; p++) {
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) {
            bad(x, "advertise must be visible ASCII (it goes into session ids)");
            goto fail;
        }
    }
    if ((c->log_level = sv_log_level_parse(level)) < 0) {
        bad(x, "log_level \"%.40s\" is not one of emerg alert crit error warn notice info debug "
               "trace1..trace8", level);
        goto fail;
    }
    free(level);
    c->max_sessions = (long)max_s;
    if (!json_object_object_get_ex(o, "servers", &servers)
        || !json_object_is_type(servers, json_type_object))
        return bad(x, "servers must be an object (server name: its configuration)");
    c->servers = sv_xcalloc((size_t)json_object_object_length(servers), sizeof(sv_server_t *));
    json_object_object_foreach(servers, name, val) {
        sv_server_t *s = parse_server(x, name, val);
        if (!s)
            return -1;
        c->servers[c->nservers++] = s;
    }
    return 0;
fail_secret:
    bad(x, "secret must be at least 16 characters of visible ASCII");
fail:
    free(level);
    return -1;
}

sv_config_t *sv_config_parse(const char *text, size_t len, char *err, size_t errlen)
{
    ctx_t x = {err, errlen};
    json_tokener *tok = json_tokener_new_ex(SV_JSON_DEPTH);
    json_object *o;
    sv_config_t *c;

    if (!tok) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    o = json_tokener_parse_ex(tok, text, (int)len);
    if (!o || json_tokener_get_parse_end(tok) != len) {
        enum json_tokener_error e = json_tokener_get_error(tok);
        snprintf(err, errlen, "the configuration is not one JSON document: %s",
                 e == json_tokener_success ? "text after the document"
                 : e == json_tokener_continue ? "it ends too early"
                                              : json_tokener_error_desc(e));
        json_object_put(o);
        json_tokener_free(tok);
        return NULL;
    }
    json_tokener_free(tok);
    if (!json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "the configuration must be a JSON object");
        json_object_put(o);
        return NULL;
    }
    c = sv_xcalloc(1, sizeof(*c));
    if (parse_top(&x, c, o) < 0) {
        sv_config_free(c);
        c = NULL;
    }
    json_object_put(o);
    return c;
}

void sv_config_free(sv_config_t *c)
{
    size_t i;

    if (!c)
        return;
    free(c->listen);
    free(c->advertise);
    free(c->secret);
    for (i = 0; i < c->nservers; i++)
        sv_server_release(c->servers[i]);
    free(c->servers);
    free(c);
}

sv_server_t *sv_config_server(const sv_config_t *c, const char *name)
{
    size_t i;

    for (i = 0; c && i < c->nservers; i++) {
        if (!strcmp(c->servers[i]->name, name))
            return c->servers[i];
    }
    return NULL;
}
