/* mod_mcp_members — see mod_mcp_members.h. */
#include <string.h>

#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>

#include "mod_mcp_config.h"
#include "mod_mcp_members.h"
#include "mod_mcp_stdio.h"

#define WORD(i) APR_ARRAY_IDX(words, (i), const char *)

/* One inner line's meaning; NULL or what is wrong with it (the caller says where). */
typedef const char *inner_fn(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                             apr_array_header_t *words);

static const char *inner_backend(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                                 apr_array_header_t *words)
{
    mcp_backend_target_t *target;
    const char *err = NULL;

    (void)name;
    if (words->nelts != 1) {
        return "Backend takes one URL (http://, https://, unix:/path|http://..., or stdio:name)";
    }
    if (strncasecmp(WORD(0), "stdio:", 6) == 0) {
        m->target = mcp_stdio_backend(cmd, WORD(0) + 6, &err);
    }
    else {
        target = apr_pcalloc(cmd->pool, sizeof(*target));
        err = mcp_backend_target_parse(cmd->pool, WORD(0), target);
        m->target = target;
    }
    m->spec = WORD(0);
    return err;
}

static const char *inner_prefix(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                                apr_array_header_t *words)
{
    (void)name;
    (void)cmd;
    if (words->nelts != 1) {
        return "Prefix takes one word (\"none\": the member's names are not prefixed)";
    }
    m->fed.prefix = strcasecmp(WORD(0), "none") == 0 ? "" : WORD(0);
    return NULL;
}

static const char *inner_globs(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                               apr_array_header_t *words)
{
    apr_array_header_t **globs = strcasecmp(name, "AllowTools") == 0 ? &m->fed.allow
                                                                      : &m->fed.deny;

    if (words->nelts < 1) {
        return "AllowTools and DenyTools take one or more patterns (fnmatch: *, ?, [...])";
    }
    *globs = *globs ? apr_array_append(cmd->pool, *globs, words) : words;
    return NULL;
}

static const char *inner_rename(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                                apr_array_header_t *words)
{
    (void)name;
    if (words->nelts != 2) {
        return "RenameTool takes the member's name of a tool (or prompt) and its new name";
    }
    apr_table_set(m->fed.renames, WORD(0), WORD(1));
    (void)cmd;
    return NULL;
}

static const char *inner_describe(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                                  apr_array_header_t *words)
{
    (void)name;
    if (words->nelts != 2) {
        return "DescribeTool takes the member's name of a tool (or prompt) and its description "
               "(quoted)";
    }
    apr_table_set(m->fed.descriptions, WORD(0), WORD(1));
    (void)cmd;
    return NULL;
}

static const char *inner_max_answer(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                                    apr_array_header_t *words)
{
    apr_off_t n;

    (void)name;
    (void)cmd;
    if (words->nelts != 1 || apr_strtoff(&n, WORD(0), NULL, 10) != APR_SUCCESS || n < 0
        || n > MCP_MAX_MESSAGE_SIZE_LIMIT) {
        return "MaxAnswerSize takes a number of bytes (0: MCPMaxMessageSize)";
    }
    m->fed.max_answer = (apr_size_t)n;
    return NULL;
}

/* Header, HeaderFile, CACertificateFile, ClientCertificateFile: as the Location's directives,
 * for this member only. */
static const char *inner_sent(cmd_parms *cmd, mcp_member_conf_t *m, const char *name,
                              apr_array_header_t *words)
{
    mcp_dir_conf_t *own = apr_pcalloc(cmd->pool, sizeof(*own));
    const char *err;

    own->backend_headers = (apr_array_header_t *)m->headers;
    own->backend_tls = (mcp_backend_tls_t *)m->tls;
    if ((err = mcp_config_backend_line(cmd, own, name, words))) {
        return err;
    }
    m->headers = own->backend_headers;
    m->tls = own->backend_tls;
    return NULL;
}

static const struct {
    const char *name;
    inner_fn   *fn;
} inner[] = {
    { "Header", inner_sent }, { "HeaderFile", inner_sent },
    { "CACertificateFile", inner_sent }, { "ClientCertificateFile", inner_sent },
    { "Backend", inner_backend }, { "Prefix", inner_prefix },
    { "AllowTools", inner_globs }, { "DenyTools", inner_globs },
    { "RenameTool", inner_rename }, { "DescribeTool", inner_describe },
    { "MaxAnswerSize", inner_max_answer },
};

static const char *inner_line(cmd_parms *cmd, mcp_member_conf_t *m, const ap_directive_t *d)
{
    apr_array_header_t *words = mcp_config_words(cmd->pool, d->args);
    const char *err = NULL;
    size_t i;

    for (i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
        if (strcasecmp(inner[i].name, d->directive) == 0) {
            err = inner[i].fn(cmd, m, inner[i].name, words);
            break;
        }
    }
    if (i == sizeof(inner) / sizeof(inner[0])) {
        err = apr_psprintf(cmd->pool, "'%s' is not a directive of <MCPMember> (Backend, Prefix, "
                           "AllowTools, DenyTools, RenameTool, DescribeTool, MaxAnswerSize, "
                           "Header, HeaderFile, CACertificateFile, ClientCertificateFile)",
                           d->directive);
    }
    return err ? apr_psprintf(cmd->pool, "<MCPMember %s>, line %d of %s: %s", m->fed.name,
                              d->line_num, d->filename, err) : NULL;
}

const mcp_member_conf_t *mcp_members_find(const apr_array_header_t *members, const char *name)
{
    int i;

    for (i = 0; members && i < members->nelts; i++) {
        const mcp_member_conf_t *m = APR_ARRAY_IDX(members, i, const mcp_member_conf_t *);
        if (strcmp(m->fed.name, name) == 0) {
            return m;
        }
    }
    return NULL;
}

mcp_fed_member_t *mcp_members_fed(apr_pool_t *p, const apr_array_header_t *members)
{
    mcp_fed_member_t *fed = apr_pcalloc(p, sizeof(*fed) * (apr_size_t)(members->nelts + 1));
    int i;

    for (i = 0; i < members->nelts; i++) {
        fed[i] = APR_ARRAY_IDX(members, i, const mcp_member_conf_t *)->fed;
    }
    return fed;
}

const char *mcp_members_section(cmd_parms *cmd, void *dconf, const char *arg)
{
    mcp_dir_conf_t *conf = dconf;
    const char *err, *end = ap_strrchr_c(arg, '>');
    const ap_directive_t *d;
    mcp_member_conf_t *m;
    char *name;
    int i;

    if (!end || end[1]) {
        return "<MCPMember> directive missing closing '>'";
    }
    if (!cmd->path) {
        return "<MCPMember> belongs in a <Location> (or <Directory>, <Files>...), beside "
               "SetHandler mcp";
    }
    name = apr_pstrmemdup(cmd->pool, arg, (apr_size_t)(end - arg));
    apr_collapse_spaces(name, name);
    if (!mcp_fed_name_valid(name)) {
        return apr_psprintf(cmd->pool, "<MCPMember %s>: a member's name is a letter, then up to "
                            "63 letters, digits, '-' or '.' (it is also the scheme prefix of its "
                            "resource URIs)", name);
    }
    if (conf->backend) {
        return "<MCPMember> and MCPBackend exclude each other: a Location has one backend, or "
               "members";
    }
    if (!conf->members) {
        conf->members = apr_array_make(cmd->pool, 4, sizeof(mcp_member_conf_t *));
        /* What the sessions of this endpoint record as their backend (mcp.sessions.backend_url):
         * a session is served by the endpoint that began it. */
        conf->backend_spec = apr_pstrcat(cmd->pool, MCP_MEMBERS_SPEC_PREFIX, cmd->path, NULL);
    }
    if (mcp_members_find(conf->members, name)) {
        return apr_psprintf(cmd->pool, "<MCPMember %s>: a member of that name is configured "
                            "already here", name);
    }
    m = apr_pcalloc(cmd->pool, sizeof(*m));
    m->fed.name = name;
    m->fed.prefix = apr_pstrcat(cmd->pool, name, "_", NULL);
    m->fed.renames = apr_table_make(cmd->pool, 2);
    m->fed.descriptions = apr_table_make(cmd->pool, 2);
    m->file = cmd->directive->filename;
    m->line = cmd->directive->line_num;
    for (d = cmd->directive->first_child; d; d = d->next) {
        if ((err = inner_line(cmd, m, d))) {
            return err;
        }
    }
    if (!m->target) {
        return apr_psprintf(cmd->pool, "<MCPMember %s>: Backend is required (the member's URL, "
                            "or stdio:name)", name);
    }
    for (i = 0; i < conf->members->nelts; i++) {
        const mcp_member_conf_t *o = APR_ARRAY_IDX(conf->members, i, const mcp_member_conf_t *);
        if (!*o->fed.prefix && !*m->fed.prefix) {
            return apr_psprintf(cmd->pool, "<MCPMember %s>: only one member may be unprefixed "
                                "(Prefix none), and <MCPMember %s> is", name, o->fed.name);
        }
        if (*o->fed.prefix && strcmp(o->fed.prefix, m->fed.prefix) == 0) {
            return apr_psprintf(cmd->pool, "<MCPMember %s>: <MCPMember %s> has the prefix '%s' "
                                "already", name, o->fed.name, m->fed.prefix);
        }
    }
    APR_ARRAY_PUSH(conf->members, mcp_member_conf_t *) = m;
    return NULL;
}
