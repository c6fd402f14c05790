/* mcp_bridge — see mcp_bridge.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_sha1.h>
#include <apr_strings.h>

#include "mcp_bridge.h"
#include "mcp_era.h"
#include "mcp_jsonrpc.h"

#define ERA_PREFIX "io.modelcontextprotocol/"

static json_object *copy_of(json_object *v)
{
    json_object *c = NULL;

    return v && json_object_deep_copy(v, &c, NULL) == 0 ? c : NULL;
}

static json_object *member(json_object *obj, const char *key)
{
    json_object *v = NULL;

    return obj && json_object_is_type(obj, json_type_object)
           && json_object_object_get_ex(obj, key, &v) ? v : NULL;
}

static json_object *object_member(json_object *obj, const char *key)
{
    json_object *v = member(obj, key);

    return v && json_object_is_type(v, json_type_object) ? v : NULL;
}

/* ---- canonical text ---------------------------------------------------------------------- */

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void canonical(apr_pool_t *p, json_object *v, struct apr_array_header_t *out)
{
    if (json_object_is_type(v, json_type_object)) {
        int n = json_object_object_length(v), i = 0;
        const char **keys = apr_palloc(p, sizeof(*keys) * (n ? n : 1));
        json_object_object_foreach(v, k, val) {
            (void)val;
            keys[i++] = k;
        }
        qsort(keys, (size_t)n, sizeof(*keys), key_cmp);
        APR_ARRAY_PUSH(out, const char *) = "{";
        for (i = 0; i < n; i++) {
            json_object *key = json_object_new_string(keys[i]);
            APR_ARRAY_PUSH(out, const char *) = i ? "," : "";
            APR_ARRAY_PUSH(out, const char *) = mcp_jsonrpc_to_string(p, key, NULL);
            APR_ARRAY_PUSH(out, const char *) = ":";
            json_object_put(key);
            canonical(p, member(v, keys[i]), out);
        }
        APR_ARRAY_PUSH(out, const char *) = "}";
    }
    else if (json_object_is_type(v, json_type_array)) {
        size_t i, n = json_object_array_length(v);
        APR_ARRAY_PUSH(out, const char *) = "[";
        for (i = 0; i < n; i++) {
            APR_ARRAY_PUSH(out, const char *) = i ? "," : "";
            canonical(p, json_object_array_get_idx(v, i), out);
        }
        APR_ARRAY_PUSH(out, const char *) = "]";
    }
    else {
        APR_ARRAY_PUSH(out, const char *) = v ? mcp_jsonrpc_to_string(p, v, NULL) : "null";
    }
}

const char *mcp_bridge_canonical(apr_pool_t *p, json_object *v)
{
    apr_array_header_t *parts = apr_array_make(p, 16, sizeof(const char *));

    canonical(p, v, parts);
    return apr_array_pstrcat(p, parts, 0);
}

static json_object *meta_of(json_object *msg)
{
    return object_member(object_member(msg, "params"), "_meta");
}

const char *mcp_bridge_caps_key(apr_pool_t *p, json_object *msg)
{
    json_object *caps = object_member(meta_of(msg), MCP_ERA_META_CAPABILITIES);

    return caps ? mcp_bridge_canonical(p, caps) : "{}";
}

/* ---- going in ---------------------------------------------------------------------------- */

static const char *text_of(apr_pool_t *p, json_object *obj)
{
    const char *s = mcp_jsonrpc_to_string(p, obj, NULL);

    json_object_put(obj);
    return s;
}

const char *mcp_bridge_initialize(apr_pool_t *p, json_object *msg, apr_int64_t id,
                                  const char *gateway_version)
{
    json_object *meta = meta_of(msg), *caps = object_member(meta, MCP_ERA_META_CAPABILITIES);
    json_object *info = object_member(meta, MCP_ERA_META_CLIENT_INFO);
    json_object *req = json_object_new_object(), *params = json_object_new_object();

    json_object_object_add(req, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(req, "id", json_object_new_int64(id));
    json_object_object_add(req, "method", json_object_new_string("initialize"));
    json_object_object_add(params, "protocolVersion",
                           json_object_new_string(MCP_BRIDGE_BACKEND_VERSION));
    json_object_object_add(params, "capabilities", caps ? copy_of(caps) : json_object_new_object());
    if (info) {
        json_object_object_add(params, "clientInfo", copy_of(info));
    }
    else {
        json_object *gw = json_object_new_object();
        json_object_object_add(gw, "name", json_object_new_string("mod_mcp era bridge"));
        json_object_object_add(gw, "version", json_object_new_string(gateway_version));
        json_object_object_add(params, "clientInfo", gw);
    }
    json_object_object_add(req, "params", params);
    return text_of(p, req);
}

const char *mcp_bridge_request_tail(apr_pool_t *p, json_object *msg)
{
    json_object *req, *params, *meta;
    const char *text;

    if (!msg || !json_object_is_type(msg, json_type_object) || !(req = copy_of(msg))) {
        return NULL;
    }
    json_object_object_del(req, "id");
    if ((params = object_member(req, "params")) != NULL) {
        json_object_object_del(params, "inputResponses");
        json_object_object_del(params, "requestState");
        if ((meta = object_member(params, "_meta")) != NULL) {
            apr_array_header_t *drop = apr_array_make(p, 4, sizeof(const char *));
            int i;
            json_object_object_foreach(meta, k, v) {
                (void)v;
                if (strncmp(k, ERA_PREFIX, sizeof(ERA_PREFIX) - 1) == 0) {
                    APR_ARRAY_PUSH(drop, const char *) = apr_pstrdup(p, k);
                }
            }
            for (i = 0; i < drop->nelts; i++) {
                json_object_object_del(meta, APR_ARRAY_IDX(drop, i, const char *));
            }
            if (json_object_object_length(meta) == 0) {
                json_object_object_del(params, "_meta");
            }
        }
    }
    text = text_of(p, req);   /* "{...}" (plain: no space after the brace) */
    return text[1] == '}' ? "}" : apr_pstrcat(p, ",", text + 1, NULL);
}

const char *mcp_bridge_request_join(apr_pool_t *p, apr_int64_t backend_id, const char *tail)
{
    return tail ? apr_psprintf(p, "{\"id\":%" APR_INT64_T_FMT "%s", backend_id, tail) : NULL;
}

const char *mcp_bridge_request_in(apr_pool_t *p, json_object *msg, apr_int64_t backend_id)
{
    return mcp_bridge_request_join(p, backend_id, mcp_bridge_request_tail(p, msg));
}

/* The SHA-1 of len bytes at text, in hex. */
static const char *sha1_hex(apr_pool_t *p, const char *text, apr_size_t len)
{
    apr_sha1_ctx_t ctx;
    unsigned char digest[APR_SHA1_DIGESTSIZE];
    char *hex = apr_palloc(p, 2 * APR_SHA1_DIGESTSIZE + 1);
    int i;

    apr_sha1_init(&ctx);
    apr_sha1_update_binary(&ctx, (const unsigned char *)text, (unsigned int)len);
    apr_sha1_final(digest, &ctx);
    for (i = 0; i < APR_SHA1_DIGESTSIZE; i++) {
        apr_snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    }
    return hex;
}

const char *mcp_bridge_request_digest(apr_pool_t *p, json_object *msg)
{
    json_object *params = object_member(msg, "params"), *what = json_object_new_object();
    const char *method = mcp_jsonrpc_get_string(msg, "method"), *member_name, *text;

    json_object_object_add(what, "method", json_object_new_string(method ? method : ""));
    member_name = mcp_era_name_member(method);
    if (member_name && member(params, member_name)) {
        json_object_object_add(what, "name", copy_of(member(params, member_name)));
    }
    if (member(params, "arguments")) {
        json_object_object_add(what, "arguments", copy_of(member(params, "arguments")));
    }
    text = mcp_bridge_canonical(p, what);
    json_object_put(what);
    return sha1_hex(p, text, strlen(text));
}

const char *mcp_bridge_pool_tag(apr_pool_t *p, const char *principal, const char *backend_url,
                                const char *caps_key)
{
    /* NULs between the parts: no two keys' texts are the same */
    const char *parts[3] = { principal ? principal : "", backend_url, caps_key };
    apr_size_t len[3], i;
    char *text, *at;

    for (i = 0; i < 3; i++) {
        len[i] = strlen(parts[i]) + 1;
    }
    at = text = apr_palloc(p, len[0] + len[1] + len[2]);
    for (i = 0; i < 3; i++) {
        memcpy(at, parts[i], len[i]);
        at += len[i];
    }
    return sha1_hex(p, text, (apr_size_t)(at - text));
}

/* ---- coming out -------------------------------------------------------------------------- */

int mcp_bridge_error_code(int code)
{
    switch (code) {
    case -32002:   /* resource not found: retired, now invalid params */
    case -32042:   /* URL elicitation required: retired (rounds carry URL elicitations) */
        return -32602;
    default:
        return code;
    }
}

int mcp_bridge_method_is_gone(const char *method)
{
    static const char *const gone[] = {
        "initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe",
        NULL
    };
    int i;

    for (i = 0; method && gone[i]; i++) {
        if (strcmp(method, gone[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

int mcp_bridge_is_cacheable(const char *method)
{
    static const char *const cacheable[] = {
        "tools/list", "prompts/list", "resources/list", "resources/templates/list",
        "resources/read", "server/discover", NULL
    };
    int i;

    for (i = 0; method && cacheable[i]; i++) {
        if (strcmp(method, cacheable[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int is_input_method(const char *method)
{
    return method && (strcmp(method, "sampling/createMessage") == 0
                      || strcmp(method, "elicitation/create") == 0
                      || strcmp(method, "roots/list") == 0);
}

int mcp_bridge_log_level(const char *level)
{
    static const char *const levels[] = {
        "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", NULL
    };
    int i;

    for (i = 0; level && levels[i]; i++) {
        if (strcmp(level, levels[i]) == 0) {
            return i;
        }
    }
    return -1;
}

int mcp_bridge_request_log_level(json_object *msg)
{
    json_object *v = member(meta_of(msg), MCP_BRIDGE_META_LOG_LEVEL);

    return v && json_object_is_type(v, json_type_string)
           ? mcp_bridge_log_level(json_object_get_string(v)) : -1;
}

mcp_bridge_kind_t mcp_bridge_classify(json_object *msg, apr_int64_t backend_id, int log_min)
{
    int level;

    mcp_jsonrpc_msg_t m;
    const char *method;

    mcp_jsonrpc_classify(msg, &m);
    switch (m.kind) {
    case MCP_MSG_RESPONSE:
    case MCP_MSG_ERROR:
        return m.id && json_object_is_type(m.id, json_type_int)
               && json_object_get_int64(m.id) == backend_id ? MCP_BRIDGE_FINAL : MCP_BRIDGE_OTHER;
    case MCP_MSG_REQUEST:
        if (strcmp(m.method, "ping") == 0) {
            return MCP_BRIDGE_PING;
        }
        return is_input_method(m.method) ? MCP_BRIDGE_INPUT_REQUEST : MCP_BRIDGE_OTHER;
    case MCP_MSG_NOTIFICATION:
        method = m.method;
        if (strcmp(method, "notifications/message") == 0) {
            level = mcp_bridge_log_level(mcp_jsonrpc_get_string(object_member(msg, "params"),
                                                                "level"));
            return log_min >= 0 && level >= log_min ? MCP_BRIDGE_NOTIFICATION : MCP_BRIDGE_OTHER;
        }
        /* Progress and everything else about the request; never a session's list changes. */
        return strstr(method, "/list_changed") || strcmp(method, "notifications/resources/"
                                                         "updated") == 0
               ? MCP_BRIDGE_OTHER : MCP_BRIDGE_NOTIFICATION;
    default:
        return MCP_BRIDGE_OTHER;
    }
}

/* _meta[serverInfo] on a result (kept when the backend set one). */
static void stamp_server_info(json_object *result, json_object *server_info)
{
    json_object *meta = member(result, "_meta");

    if (!server_info) {
        return;
    }
    if (!meta) {
        meta = json_object_new_object();
        json_object_object_add(result, "_meta", meta);
    }
    if (json_object_is_type(meta, json_type_object)
        && !member(meta, MCP_BRIDGE_META_SERVER_INFO)) {
        json_object_object_add(meta, MCP_BRIDGE_META_SERVER_INFO, copy_of(server_info));
    }
}

static void add_cache_fields(json_object *result)
{
    json_object *ttl = member(result, "ttlMs"), *scope = member(result, "cacheScope");

    if (!ttl || !json_object_is_type(ttl, json_type_int) || json_object_get_int64(ttl) < 0) {
        json_object_object_add(result, "ttlMs", json_object_new_int(0));
    }
    if (!scope || !json_object_is_type(scope, json_type_string)
        || (strcmp(json_object_get_string(scope), "public") != 0
            && strcmp(json_object_get_string(scope), "private") != 0)) {
        json_object_object_add(result, "cacheScope", json_object_new_string("private"));
    }
}

const char *mcp_bridge_response_out(apr_pool_t *p, json_object *response, json_object *client_id,
                                    const char *method, json_object *server_info)
{
    json_object *out = copy_of(response), *result, *error;

    json_object_object_add(out, "id", copy_of(client_id));
    if ((result = object_member(out, "result")) != NULL) {
        json_object_object_add(result, "resultType", json_object_new_string("complete"));
        if (mcp_bridge_is_cacheable(method)) {
            add_cache_fields(result);
        }
        stamp_server_info(result, server_info);
    }
    else if ((error = object_member(out, "error")) != NULL) {
        json_object *code = member(error, "code");
        int old = code ? json_object_get_int(code) : 0, mapped = mcp_bridge_error_code(old);
        if (mapped != old) {
            json_object_object_add(error, "code", json_object_new_int(mapped));
            if (old == -32042) {
                const char *msg = mcp_jsonrpc_get_string(error, "message");
                json_object_object_add(error, "message", json_object_new_string(
                    apr_psprintf(p, "%s (the backend asked for a URL elicitation, -32042, which "
                                 "the gateway does not bridge)", msg ? msg : "URL elicitation "
                                 "required")));
            }
        }
    }
    return text_of(p, out);
}

json_object *mcp_bridge_server_info(apr_pool_t *p, const char *init_result)
{
    json_object *r = init_result ? mcp_jsonrpc_parse_value(p, init_result, strlen(init_result))
                                 : NULL;

    return object_member(r, "serverInfo");
}

const char *mcp_bridge_discover(apr_pool_t *p, const char *init_result, json_object *client_id,
                                const char *supported)
{
    static const char *const caps_2026[] = {
        "experimental", "logging", "completions", "prompts", "resources", "tools", "extensions",
        NULL
    };
    json_object *init = init_result ? mcp_jsonrpc_parse_value(p, init_result, strlen(init_result))
                                    : NULL;
    json_object *out, *result, *versions, *caps, *given;
    char *list, *v, *last;
    int i;

    if (!init || !json_object_is_type(init, json_type_object)) {
        return NULL;
    }
    out = json_object_new_object();
    result = json_object_new_object();
    versions = json_object_new_array();
    caps = json_object_new_object();
    json_object_object_add(out, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(out, "id", copy_of(client_id));
    json_object_object_add(result, "resultType", json_object_new_string("complete"));
    list = apr_pstrdup(p, supported ? supported : "");
    for (v = apr_strtok(list, ", ", &last); v; v = apr_strtok(NULL, ", ", &last)) {
        json_object_array_add(versions, json_object_new_string(v));
    }
    json_object_object_add(result, "supportedVersions", versions);
    given = object_member(init, "capabilities");
    for (i = 0; caps_2026[i]; i++) {
        if (member(given, caps_2026[i])) {
            json_object_object_add(caps, caps_2026[i], copy_of(member(given, caps_2026[i])));
        }
    }
    json_object_object_add(result, "capabilities", caps);
    if (member(init, "serverInfo")) {
        json_object_object_add(result, "serverInfo", copy_of(member(init, "serverInfo")));
    }
    if (member(init, "instructions")) {
        json_object_object_add(result, "instructions", copy_of(member(init, "instructions")));
    }
    json_object_object_add(result, "ttlMs", json_object_new_int(0));
    json_object_object_add(result, "cacheScope", json_object_new_string("private"));
    stamp_server_info(result, object_member(init, "serverInfo"));
    json_object_object_add(out, "result", result);
    return text_of(p, out);
}

/* ---- rounds ------------------------------------------------------------------------------ */

const char *mcp_bridge_input_name(apr_pool_t *p, int n)
{
    return apr_psprintf(p, "input-%d", n);
}

const char *mcp_bridge_input_key(apr_pool_t *p, json_object *request, int n)
{
    json_object *id = member(request, "id");

    if (id && json_object_is_type(id, json_type_string) && json_object_get_string_len(id) > 0) {
        return apr_pstrdup(p, json_object_get_string(id));
    }
    if (id && json_object_is_type(id, json_type_int)) {
        return apr_psprintf(p, "%" APR_INT64_T_FMT, (apr_int64_t)json_object_get_int64(id));
    }
    return mcp_bridge_input_name(p, n);
}

const char *mcp_bridge_input_capability(json_object *request)
{
    const char *method = mcp_jsonrpc_get_string(request, "method");

    if (!method) {
        return NULL;
    }
    if (strcmp(method, "sampling/createMessage") == 0) {
        return "sampling";
    }
    if (strcmp(method, "elicitation/create") == 0) {
        return "elicitation";
    }
    return strcmp(method, "roots/list") == 0 ? "roots" : NULL;
}

const char *mcp_bridge_missing_capability(json_object *msg, json_object *request)
{
    json_object *caps = object_member(meta_of(msg), MCP_ERA_META_CAPABILITIES);
    const char *cap = mcp_bridge_input_capability(request);

    return cap && !object_member(caps, cap) ? cap : NULL;
}

const char *mcp_bridge_input_required(apr_pool_t *p, json_object *client_id,
                                      const apr_array_header_t *names,
                                      const apr_array_header_t *requests, const char *state,
                                      json_object *server_info)
{
    json_object *out = json_object_new_object(), *result = json_object_new_object();
    json_object *inputs = json_object_new_object();
    int i;

    json_object_object_add(out, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(out, "id", copy_of(client_id));
    json_object_object_add(result, "resultType", json_object_new_string("input_required"));
    for (i = 0; i < requests->nelts && i < names->nelts; i++) {
        json_object *req = APR_ARRAY_IDX(requests, i, json_object *), *one;
        one = json_object_new_object();
        json_object_object_add(one, "method", copy_of(member(req, "method")));
        if (member(req, "params")) {
            json_object_object_add(one, "params", copy_of(member(req, "params")));
        }
        json_object_object_add(inputs, APR_ARRAY_IDX(names, i, const char *), one);
    }
    json_object_object_add(result, "inputRequests", inputs);
    json_object_object_add(result, "requestState", json_object_new_string(state));
    stamp_server_info(result, server_info);
    json_object_object_add(out, "result", result);
    return text_of(p, out);
}

const char *mcp_bridge_input_responses(apr_pool_t *p, json_object *retry, const char *pending,
                                       apr_array_header_t **out)
{
    json_object *given = object_member(object_member(retry, "params"), "inputResponses");
    json_object *map = pending ? mcp_jsonrpc_parse_value(p, pending, strlen(pending)) : NULL;

    *out = apr_array_make(p, 2, sizeof(const char *));
    if (!map || !json_object_is_type(map, json_type_object)) {
        return "the round's pending requests are unreadable";
    }
    if (!given) {
        return "params.inputResponses (an object) is required with this requestState";
    }
    json_object_object_foreach(map, name, backend_id) {
        json_object *answer = member(given, name), *resp;
        if (!answer || !json_object_is_type(answer, json_type_object)) {
            return apr_psprintf(p, "params.inputResponses lacks an object for '%s'", name);
        }
        resp = json_object_new_object();
        json_object_object_add(resp, "jsonrpc", json_object_new_string("2.0"));
        json_object_object_add(resp, "id", copy_of(backend_id));
        json_object_object_add(resp, "result", copy_of(answer));
        APR_ARRAY_PUSH(*out, const char *) = text_of(p, resp);
    }
    return NULL;
}

const char *mcp_bridge_request_state(json_object *msg, int *has_responses)
{
    json_object *params = object_member(msg, "params"), *state = member(params, "requestState");

    *has_responses = member(params, "inputResponses") != NULL;
    return state && json_object_is_type(state, json_type_string) ? json_object_get_string(state)
                                                                : NULL;
}

const char *mcp_bridge_pong(apr_pool_t *p, json_object *ping)
{
    json_object *out = json_object_new_object();

    json_object_object_add(out, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(out, "id", copy_of(member(ping, "id")));
    json_object_object_add(out, "result", json_object_new_object());
    return text_of(p, out);
}

apr_array_header_t *mcp_bridge_url_elicitations(apr_pool_t *p, json_object *response)
{
    json_object *error, *code, *data, *list;
    apr_array_header_t *out;
    size_t i;

    if (!json_object_object_get_ex(response, "error", &error)
        || !json_object_object_get_ex(error, "code", &code)
        || json_object_get_int(code) != MCP_BRIDGE_URL_ELICITATION_REQUIRED
        || !json_object_object_get_ex(error, "data", &data)
        || !json_object_object_get_ex(data, "elicitations", &list)
        || !json_object_is_type(list, json_type_array)) {
        return NULL;
    }
    out = apr_array_make(p, 2, sizeof(json_object *));
    for (i = 0; i < json_object_array_length(list); i++) {
        json_object *e = json_object_array_get_idx(list, i), *id = NULL, *req, *params;

        if (!json_object_is_type(e, json_type_object)) {
            continue;
        }
        params = NULL;
        json_object_deep_copy(e, &params, NULL);
        json_object_object_add(params, "mode", json_object_new_string("url"));
        req = mcp_jsonrpc_parse_value(p, "{\"jsonrpc\":\"2.0\"}", 17);   /* released with p */
        json_object_object_get_ex(e, "elicitationId", &id);
        json_object_object_add(req, "id", id && json_object_is_type(id, json_type_string)
                                          ? json_object_get(id)
                                          : json_object_new_string(apr_psprintf(p, "url-%d",
                                                                                (int)i + 1)));
        json_object_object_add(req, "method", json_object_new_string("elicitation/create"));
        json_object_object_add(req, "params", params);
        APR_ARRAY_PUSH(out, json_object *) = req;
    }
    return out->nelts > 0 ? out : NULL;
}

const char *mcp_bridge_cancelled(apr_pool_t *p, apr_int64_t backend_id, const char *reason)
{
    json_object *n = json_object_new_object(), *params = json_object_new_object();

    json_object_object_add(n, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(n, "method", json_object_new_string("notifications/cancelled"));
    json_object_object_add(params, "requestId", json_object_new_int64(backend_id));
    json_object_object_add(params, "reason", json_object_new_string(reason));
    json_object_object_add(n, "params", params);
    return text_of(p, n);
}

/* ---- subscriptions/listen ------------------------------------------------------------------ */

#define META_SUBSCRIPTION_ID "io.modelcontextprotocol/subscriptionId"

static int flag(json_object *obj, const char *key)
{
    json_object *v = member(obj, key);

    return v && json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

const char *mcp_bridge_listen_ack(apr_pool_t *p, json_object *msg, const char *init_result)
{
    static const struct { const char *filter, *capability; } lists[] = {
        { "toolsListChanged", "tools" },
        { "promptsListChanged", "prompts" },
        { "resourcesListChanged", "resources" },
    };
    json_object *init = init_result ? mcp_jsonrpc_parse_value(p, init_result, strlen(init_result))
                                    : NULL;
    json_object *caps = object_member(init, "capabilities");
    json_object *asked = object_member(object_member(msg, "params"), "notifications");
    json_object *ack = json_object_new_object(), *uris = member(asked, "resourceSubscriptions");
    size_t i;

    for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        if (flag(asked, lists[i].filter)
            && flag(object_member(caps, lists[i].capability), "listChanged")) {
            json_object_object_add(ack, lists[i].filter, json_object_new_boolean(1));
        }
    }
    if (uris && json_object_is_type(uris, json_type_array)
        && flag(object_member(caps, "resources"), "subscribe")) {
        json_object *kept = json_object_new_array();
        for (i = 0; i < json_object_array_length(uris); i++) {
            json_object *u = json_object_array_get_idx(uris, i);
            if (json_object_is_type(u, json_type_string)) {
                json_object_array_add(kept, json_object_get(u));
            }
        }
        json_object_object_add(ack, "resourceSubscriptions", kept);
    }
    return text_of(p, ack);
}

const char *mcp_bridge_listen_pass(apr_pool_t *p, json_object *msg, const char *acked,
                                   json_object *listen_id)
{
    json_object *filter = acked ? mcp_jsonrpc_parse_value(p, acked, strlen(acked)) : NULL;
    const char *method = mcp_jsonrpc_get_string(msg, "method");
    json_object *out, *params, *meta;
    int pass = 0;

    if (!method || member(msg, "id")) {
        return NULL;
    }
    if (strcmp(method, "notifications/tools/list_changed") == 0) {
        pass = flag(filter, "toolsListChanged");
    }
    else if (strcmp(method, "notifications/prompts/list_changed") == 0) {
        pass = flag(filter, "promptsListChanged");
    }
    else if (strcmp(method, "notifications/resources/list_changed") == 0) {
        pass = flag(filter, "resourcesListChanged");
    }
    else if (strcmp(method, "notifications/resources/updated") == 0) {
        const char *uri = mcp_jsonrpc_get_string(object_member(msg, "params"), "uri");
        json_object *uris = member(filter, "resourceSubscriptions");
        size_t i;
        for (i = 0; uri && uris && json_object_is_type(uris, json_type_array)
                    && i < json_object_array_length(uris); i++) {
            const char *u = json_object_get_string(json_object_array_get_idx(uris, i));
            pass = pass || (u && strcmp(u, uri) == 0);
        }
    }
    if (!pass) {
        return NULL;
    }
    out = copy_of(msg);
    if (!(params = object_member(out, "params"))) {
        params = json_object_new_object();
        json_object_object_add(out, "params", params);
    }
    if (!(meta = object_member(params, "_meta"))) {
        meta = json_object_new_object();
        json_object_object_add(params, "_meta", meta);
    }
    json_object_object_add(meta, META_SUBSCRIPTION_ID, copy_of(listen_id));
    return text_of(p, out);
}
