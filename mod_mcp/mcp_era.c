/* mcp_era — see mcp_era.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include <apr_tables.h>

#include "mcp_era.h"
#include "mcp_protocol.h"
#include "mcp_text.h"

const char *mcp_era_claim(json_object *msg, int *present)
{
    json_object *params, *meta, *v;

    *present = 0;
    if (!msg || !json_object_is_type(msg, json_type_object)
        || !json_object_object_get_ex(msg, "params", &params)
        || !json_object_is_type(params, json_type_object)
        || !json_object_object_get_ex(params, "_meta", &meta)
        || !json_object_is_type(meta, json_type_object)
        || !json_object_object_get_ex(meta, MCP_ERA_META_VERSION, &v)) {
        return NULL;
    }
    *present = 1;
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

mcp_era_route_t mcp_era_route(int is_post, const char *version_header,
                              const mcp_jsonrpc_body_t *body)
{
    int modern_header = version_header && mcp_protocol_is_modern(version_header);
    int present = 0;

    if (!is_post) {
        return modern_header ? MCP_ROUTE_NOT_ALLOWED : MCP_ROUTE_LEGACY;
    }
    if (body && body->count > 0) {
        /* A batch is judged by its first message (and then refused on the modern path). */
        mcp_era_claim(body->msgs[0].obj, &present);
        if (present) {
            return MCP_ROUTE_MODERN;
        }
        if (mcp_jsonrpc_find_method(body, "initialize") >= 0) {
            return MCP_ROUTE_LEGACY;
        }
    }
    return modern_header ? MCP_ROUTE_NO_CLAIM : MCP_ROUTE_LEGACY;
}

/* ---- header values ------------------------------------------------------------------------ */

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict base64 (padding optional unless canonical: then the length is a multiple of four,
 * padded, as RFC 4648 section 4 writes it); NULL when invalid or when it decodes to a NUL
 * byte. */
static const char *b64_decode(apr_pool_t *p, const char *in, apr_size_t len, int canonical)
{
    char *out = apr_palloc(p, len / 4 * 3 + 4), *o = out;
    unsigned int acc = 0;
    int bits = 0;
    apr_size_t i, pad = 0;

    while (len > 0 && in[len - 1] == '=' && pad < 2) {
        len--;
        pad++;
    }
    if ((len + pad) % 4 == 1 || ((pad || canonical) && (len + pad) % 4 != 0)) {
        return NULL;
    }
    for (i = 0; i < len; i++) {
        int v = b64_value(in[i]);
        if (v < 0) {
            return NULL;
        }
        acc = (acc << 6) | (unsigned int)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *o = (char)((acc >> bits) & 0xff);
            if (*o == '\0') {
                return NULL;
            }
            o++;
        }
    }
    *o = '\0';
    return out;
}

static const char *header_value(apr_pool_t *p, const char *raw, int canonical)
{
    apr_size_t len;

    if (!raw) {
        return NULL;
    }
    while (*raw == ' ' || *raw == '\t') {
        raw++;
    }
    len = strlen(raw);
    while (len > 0 && (raw[len - 1] == ' ' || raw[len - 1] == '\t')) {
        len--;
    }
    if (len >= 12 && strncasecmp(raw, "=?base64?", 9) == 0 && raw[len - 2] == '?'
        && raw[len - 1] == '=') {
        return b64_decode(p, raw + 9, len - 11, canonical);
    }
    return apr_pstrmemdup(p, raw, len);
}

const char *mcp_era_header_value(apr_pool_t *p, const char *raw)
{
    return header_value(p, raw, 0);
}

/* ---- the rules of a modern request -------------------------------------------------------- */

const char *mcp_era_name_member(const char *method)
{
    if (!method) {
        return NULL;
    }
    if (strcmp(method, "tools/call") == 0 || strcmp(method, "prompts/get") == 0) {
        return "name";
    }
    return strcmp(method, "resources/read") == 0 ? "uri" : NULL;
}

int mcp_era_listed(const char *list, const char *version)
{
    apr_size_t n = version ? strlen(version) : 0;
    const char *at = list;

    if (!n || !list) {
        return 0;
    }
    while ((at = strstr(at, version)) != NULL) {
        if ((at == list || at[-1] == ' ' || at[-1] == ',') && (at[n] == '\0' || at[n] == ',')) {
            return 1;
        }
        at += n;
    }
    return 0;
}

/* Non-zero when the JSON array arr holds the string version. */
static int array_lists(json_object *arr, const char *version)
{
    size_t i, n = json_object_array_length(arr);

    for (i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(arr, i);

        if (json_object_is_type(v, json_type_string)
            && strcmp(json_object_get_string(v), version) == 0) {
            return 1;
        }
    }
    return 0;
}

const char *mcp_era_learn(apr_pool_t *p, int http_status, json_object *result, int error)
{
    char every[256], *version, *last = NULL;
    const char *out = NULL;
    json_object *versions;
    int modern = 0;

    if (http_status <= 0 || http_status >= 500 || http_status == 401 || http_status == 403
        || http_status == 408 || http_status == 429) {
        return NULL;     /* no answer about the eras: not now, or not to the gateway */
    }
    if (error || http_status >= 400) {
        return mcp_protocol_list(MCP_ERA_2025);
    }
    if (!result) {
        return NULL;
    }
    if (!json_object_is_type(result, json_type_object)
        || !json_object_object_get_ex(result, "supportedVersions", &versions)
        || !json_object_is_type(versions, json_type_array)) {
        return mcp_protocol_list(MCP_ERA_2025);
    }
    /* The served revisions it lists, newest first (the order of mcp_protocol_list). */
    apr_cpystrn(every, mcp_protocol_list(MCP_ERA_UNKNOWN), sizeof(every));
    for (version = apr_strtok(every, ", ", &last); version;
         version = apr_strtok(NULL, ", ", &last)) {
        if (array_lists(versions, version)) {
            out = out ? apr_pstrcat(p, out, ", ", version, NULL) : apr_pstrdup(p, version);
            modern |= mcp_protocol_find(version)->era == MCP_ERA_2026;
        }
    }
    return modern ? out : mcp_protocol_list(MCP_ERA_2025);
}

const char *mcp_era_learn_initialize(apr_pool_t *p, const char *modern, int http_status,
                                     json_object *result)
{
    json_object *v;
    const mcp_protocol_t *rev;

    if (http_status <= 0) {
        return NULL;
    }
    if (http_status < 300 && result && json_object_is_type(result, json_type_object)
        && json_object_object_get_ex(result, "protocolVersion", &v)
        && json_object_is_type(v, json_type_string)
        && (rev = mcp_protocol_served(json_object_get_string(v))) && rev->era == MCP_ERA_2025) {
        return apr_pstrcat(p, modern, ", ", mcp_protocol_list(MCP_ERA_2025), NULL);
    }
    return modern;
}

static int verdict(mcp_era_verdict_t *out, int code, const char *message)
{
    out->code = code;
    out->message = message;
    return code;
}

/* A header that must be present and equal to want (after decoding). */
static int check_header(apr_pool_t *p, mcp_era_verdict_t *out, const char *header,
                        const char *raw, const char *want)
{
    const char *got;

    if (!raw) {
        return verdict(out, MCP_ERA_HEADER_MISMATCH,
                       apr_psprintf(p, "Header mismatch: the %s header is required (the body "
                                    "says '%s')", header, want));
    }
    if (!(got = mcp_era_header_value(p, raw))) {
        return verdict(out, MCP_ERA_HEADER_MISMATCH,
                       apr_psprintf(p, "Header mismatch: the %s header's =?base64?...?= value "
                                    "does not decode", header));
    }
    if (strcmp(got, want) != 0) {
        return verdict(out, MCP_ERA_HEADER_MISMATCH,
                       apr_psprintf(p, "Header mismatch: %s is '%s' but the body says '%s'%s",
                                    header, got, want,
                                    strstr(raw, ", ") ? " (a header sent twice arrives joined "
                                                        "with ', ' and is refused)" : ""));
    }
    return 0;
}

int mcp_era_check(apr_pool_t *p, const mcp_jsonrpc_msg_t *msg, const mcp_era_headers_t *h,
                  const char *supported, mcp_era_verdict_t *out)
{
    json_object *params = NULL, *meta = NULL, *caps = NULL, *named = NULL;
    const char *claim, *member;
    int present = 0;

    memset(out, 0, sizeof(*out));
    claim = mcp_era_claim(msg->obj, &present);
    if (!claim) {
        return verdict(out, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: _meta[\""
                       MCP_ERA_META_VERSION "\"] must be a string");
    }
    json_object_object_get_ex(msg->obj, "params", &params);
    json_object_object_get_ex(params, "_meta", &meta);
    if (msg->kind == MCP_MSG_REQUEST
        && (!json_object_object_get_ex(meta, MCP_ERA_META_CAPABILITIES, &caps)
            || !json_object_is_type(caps, json_type_object))) {
        return verdict(out, MCP_JSONRPC_INVALID_PARAMS, "Invalid params: _meta[\""
                       MCP_ERA_META_CAPABILITIES "\"] (an object) is required on every request");
    }
    if (check_header(p, out, "MCP-Protocol-Version", h->version, claim) != 0) {
        return out->code;
    }
    if (!mcp_era_listed(supported, claim)) {
        out->requested = claim;
        return verdict(out, MCP_ERA_UNSUPPORTED_VERSION,
                       apr_psprintf(p, "Unsupported protocol version '%s' (supported: %s)", claim,
                                    supported && *supported ? supported : "none"));
    }
    if (check_header(p, out, "Mcp-Method", h->method, msg->method) != 0) {
        return out->code;
    }
    if ((member = mcp_era_name_member(msg->method)) != NULL) {
        if (!json_object_object_get_ex(params, member, &named)
            || !json_object_is_type(named, json_type_string)) {
            return verdict(out, MCP_JSONRPC_INVALID_PARAMS,
                           apr_psprintf(p, "Invalid params: %s needs params.%s (a string)",
                                        msg->method, member));
        }
        if (check_header(p, out, "Mcp-Name", h->name, json_object_get_string(named)) != 0) {
            return out->code;
        }
    }
    return 0;
}

/* ---- Mcp-Param-* headers: a tool's x-mcp-header arguments ----------------------------------- */

/* An RFC 9110 token (1*tchar): what a header name may be. */
static int is_token(const char *s)
{
    if (!*s) {
        return 0;
    }
    for (; *s; s++) {
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')
              || strchr("!#$%&'*+-.^_`|~", *s))) {
            return 0;
        }
    }
    return 1;
}

/* Walks schema's properties (at any depth, through "properties" only: the only places the
 * annotation may be) and adds {"header","type","path"} to out for each annotated one. */
static void collect_decls(json_object *schema, json_object *path, json_object *out)
{
    json_object *props;

    if (!json_object_is_type(schema, json_type_object)
        || !json_object_object_get_ex(schema, "properties", &props)
        || !json_object_is_type(props, json_type_object)) {
        return;
    }
    json_object_object_foreach(props, key, child) {
        json_object *here, *header, *type, *decl;
        size_t i;

        if (!json_object_is_type(child, json_type_object)) {
            continue;
        }
        here = json_object_new_array();
        for (i = 0; i < json_object_array_length(path); i++) {
            json_object_array_add(here, json_object_get(json_object_array_get_idx(path, i)));
        }
        json_object_array_add(here, json_object_new_string(key));
        if (json_object_object_get_ex(child, MCP_ERA_X_MCP_HEADER, &header)
            && json_object_is_type(header, json_type_string)
            && is_token(json_object_get_string(header))) {
            decl = json_object_new_object();
            json_object_object_add(decl, "header", json_object_get(header));
            json_object_object_add(decl, "type", json_object_new_string(
                json_object_object_get_ex(child, "type", &type)
                && json_object_is_type(type, json_type_string)
                ? json_object_get_string(type) : ""));
            json_object_object_add(decl, "path", json_object_get(here));
            json_object_array_add(out, decl);
        }
        collect_decls(child, here, out);
        json_object_put(here);
    }
}

int mcp_era_param_decls(json_object *tools, json_object *into)
{
    size_t i;
    int n = 0;

    if (!json_object_is_type(tools, json_type_array)) {
        return 0;
    }
    for (i = 0; i < json_object_array_length(tools); i++) {
        json_object *t = json_object_array_get_idx(tools, i), *name, *schema, *decls;

        if (!json_object_object_get_ex(t, "name", &name)
            || !json_object_is_type(name, json_type_string)) {
            continue;
        }
        decls = json_object_new_array();
        if (json_object_object_get_ex(t, "inputSchema", &schema)) {
            json_object *root = json_object_new_array();
            collect_decls(schema, root, decls);
            json_object_put(root);
        }
        json_object_object_add(into, json_object_get_string(name), decls);
        n++;
    }
    return n;
}

/* The argument at path (a JSON array of member names) in arguments, or NULL. */
static json_object *value_at(json_object *arguments, json_object *path)
{
    json_object *node = arguments;
    size_t i;

    for (i = 0; node && i < json_object_array_length(path); i++) {
        json_object *key = json_object_array_get_idx(path, i), *next = NULL;

        if (!json_object_is_type(node, json_type_object)
            || !json_object_object_get_ex(node, json_object_get_string(key), &next)) {
            return NULL;
        }
        node = next;
    }
    return node;
}

/* "-?digits(.digits)?" */
static int is_decimal(const char *s)
{
    const char *d;

    s += *s == '-';
    for (d = s; *d >= '0' && *d <= '9'; d++) {
    }
    if (d == s) {
        return 0;
    }
    if (*d == '.') {
        s = ++d;
        for (; *d >= '0' && *d <= '9'; d++) {
        }
        if (d == s) {
            return 0;
        }
    }
    return *d == '\0';
}

/* Whether the header's value (decoded) stands for the body's primitive v (a string as it is,
 * a boolean as true/false, a number in decimal; numerically for integer/number properties). */
static int param_equal(const char *type, json_object *v, const char *got)
{
    if (json_object_is_type(v, json_type_string)) {
        return strcmp(got, json_object_get_string(v)) == 0;
    }
    if (json_object_is_type(v, json_type_boolean)) {
        return strcmp(got, json_object_get_boolean(v) ? "true" : "false") == 0;
    }
    if ((strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) && is_decimal(got)) {
        return strtod(got, NULL) == json_object_get_double(v);   /* 42.0 stands for 42 */
    }
    return strcmp(got, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN)) == 0;
}

static const char *lower(apr_pool_t *p, const char *s)
{
    char *c = apr_pstrdup(p, s), *at;

    for (at = c; *at; at++) {
        *at = (char)apr_tolower(*at);
    }
    return c;
}

/* The request's Mcp-Param-* headers by lower-cased name (the first of a name, as apr_table_get
 * finds it): one pass over the headers, so that checking d declarations against h headers costs
 * d + h, not d * h. */
static apr_hash_t *param_headers(apr_pool_t *p, apr_table_t *headers)
{
    const apr_array_header_t *elts = apr_table_elts(headers);
    const apr_table_entry_t *e = (const apr_table_entry_t *)elts->elts;
    apr_hash_t *h = apr_hash_make(p);
    int i;

    for (i = 0; i < elts->nelts; i++) {
        if (e[i].key && strncasecmp(e[i].key, "Mcp-Param-", 10) == 0) {
            const char *name = lower(p, e[i].key);

            if (!apr_hash_get(h, name, APR_HASH_KEY_STRING)) {
                apr_hash_set(h, name, APR_HASH_KEY_STRING, e[i].val);
            }
        }
    }
    return h;
}

int mcp_era_param_check(apr_pool_t *p, json_object *decls, json_object *arguments,
                        apr_table_t *headers, mcp_era_verdict_t *out)
{
    apr_hash_t *sent = NULL;
    size_t i;

    memset(out, 0, sizeof(*out));
    for (i = 0; json_object_is_type(decls, json_type_array) && i < json_object_array_length(decls);
         i++) {
        json_object *d = json_object_array_get_idx(decls, i), *header, *type, *path, *v;
        const char *name, *raw, *got, *body;

        if (!json_object_object_get_ex(d, "header", &header)
            || !json_object_object_get_ex(d, "path", &path)
            || !(v = value_at(arguments, path))
            || !(json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int)
                 || json_object_is_type(v, json_type_double)
                 || json_object_is_type(v, json_type_boolean))) {
            continue;   /* absent, null or not a primitive: no header is expected */
        }
        name = apr_pstrcat(p, "Mcp-Param-", json_object_get_string(header), NULL);
        body = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN
                                                 | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (!sent) {
            sent = param_headers(p, headers);
        }
        if (!(raw = apr_hash_get(sent, lower(p, name), APR_HASH_KEY_STRING))) {
            return verdict(out, MCP_ERA_HEADER_MISMATCH,
                           apr_psprintf(p, "Header mismatch: the %s header is required (the "
                                        "body's argument is %s)", name, body));
        }
        if (!(got = header_value(p, raw, 1)) || !mcp_text_is_utf8(got, strlen(got))) {
            return verdict(out, MCP_ERA_HEADER_MISMATCH,
                           apr_psprintf(p, "Header mismatch: the %s header's =?base64?...?= "
                                        "value is not canonical base64 of UTF-8 text", name));
        }
        if (!param_equal(json_object_object_get_ex(d, "type", &type)
                         ? json_object_get_string(type) : "", v, got)) {
            return verdict(out, MCP_ERA_HEADER_MISMATCH,
                           apr_psprintf(p, "Header mismatch: %s is '%s' but the body's argument "
                                        "is %s%s", name, got, body,
                                        strstr(raw, ", ") ? " (a header sent twice arrives "
                                                            "joined with ', ' and is refused)"
                                                          : ""));
        }
    }
    return 0;
}
