/* mcp_era — see mcp_era.h. */
#include <string.h>
#include <strings.h>

#include <apr_strings.h>

#include "mcp_era.h"
#include "mcp_protocol.h"

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

/* Strict base64 (padding optional); NULL when invalid or when it decodes to a NUL byte. */
static const char *b64_decode(apr_pool_t *p, const char *in, apr_size_t len)
{
    char *out = apr_palloc(p, len / 4 * 3 + 4), *o = out;
    unsigned int acc = 0;
    int bits = 0;
    apr_size_t i, pad = 0;

    while (len > 0 && in[len - 1] == '=' && pad < 2) {
        len--;
        pad++;
    }
    if ((len + pad) % 4 == 1 || (pad && (len + pad) % 4 != 0)) {
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

const char *mcp_era_header_value(apr_pool_t *p, const char *raw)
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
        return b64_decode(p, raw + 9, len - 11);
    }
    return apr_pstrmemdup(p, raw, len);
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
