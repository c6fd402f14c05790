/* mcp_shim — see mcp_shim.h. */
#include <stdlib.h>
#include <string.h>

#include <apr_base64.h>
#include <apr_strings.h>

#include "mcp_era.h"
#include "mcp_jsonrpc.h"
#include "mcp_protocol.h"
#include "mcp_shim.h"

#define META_SERVER_INFO     "io.modelcontextprotocol/serverInfo"
#define META_SUBSCRIPTION_ID "io.modelcontextprotocol/subscriptionId"
#define MAX_DISCOVER_TTL_MS  (3600L * 1000L)

static json_object *member(json_object *obj, const char *key, json_type type)
{
    json_object *v;

    return obj && json_object_is_type(obj, json_type_object)
        && json_object_object_get_ex(obj, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

static json_object *copy(json_object *v)
{
    json_object *out = NULL;

    return json_object_deep_copy(v, &out, NULL) == 0 ? out : NULL;
}

/* ---- initialize from server/discover ------------------------------------------------------ */

json_object *mcp_shim_initialize_result(json_object *discover, const char *client_version,
                                        const char **negotiated)
{
    json_object *out = json_object_new_object(), *v, *meta;
    const mcp_protocol_t *rev = client_version ? mcp_protocol_session(client_version) : NULL;

    *negotiated = rev ? rev->version : mcp_protocol_latest();
    json_object_object_add(out, "protocolVersion", json_object_new_string(*negotiated));
    v = member(discover, "capabilities", json_type_object);
    v = v ? copy(v) : json_object_new_object();
    /* resources/subscribe the revision dropped (and the shim does not bridge): not offered.
     * logging stays: the shim answers logging/setLevel and stamps the level on requests. */
    if (member(v, "resources", json_type_object)) {
        json_object_object_del(member(v, "resources", json_type_object), "subscribe");
    }
    json_object_object_add(out, "capabilities", v);
    meta = member(discover, "_meta", json_type_object);
    if ((v = member(meta, META_SERVER_INFO, json_type_object))
        || (v = member(discover, "serverInfo", json_type_object))) {
        json_object_object_add(out, "serverInfo", copy(v));
    }
    else {
        /* Required in a 2025 InitializeResult: the gateway names something. */
        v = json_object_new_object();
        json_object_object_add(v, "name", json_object_new_string("mcp-backend"));
        json_object_object_add(v, "version", json_object_new_string("unknown"));
        json_object_object_add(out, "serverInfo", v);
    }
    if ((v = member(discover, "instructions", json_type_string))) {
        json_object_object_add(out, "instructions", copy(v));
    }
    return out;
}

const char *mcp_shim_discover_problem(json_object *discover)
{
    json_object *versions, *v;
    size_t i, n;

    if (!discover || !json_object_is_type(discover, json_type_object)) {
        return "the result is not an object";
    }
    if (!(versions = member(discover, "supportedVersions", json_type_array))) {
        return "its supportedVersions is missing or not an array";
    }
    n = json_object_array_length(versions);
    for (i = 0; i < n; i++) {
        v = json_object_array_get_idx(versions, i);
        if (!json_object_is_type(v, json_type_string)) {
            return "its supportedVersions holds something other than strings";
        }
        if (strcmp(json_object_get_string(v), MCP_SHIM_VERSION) == 0) {
            break;
        }
    }
    if (i == n) {
        return "its supportedVersions does not list " MCP_SHIM_VERSION;
    }
    if (json_object_object_get_ex(discover, "capabilities", &v)
        && !json_object_is_type(v, json_type_object)) {
        return "its capabilities is not an object";
    }
    return NULL;
}

long mcp_shim_discover_ttl(json_object *discover, long dflt_ms)
{
    json_object *v = member(discover, "ttlMs", json_type_int);
    long ttl = v ? (long)json_object_get_int64(v) : 0;

    ttl = ttl > 0 ? ttl : dflt_ms;
    return ttl > MAX_DISCOVER_TTL_MS ? MAX_DISCOVER_TTL_MS : ttl;
}

/* ---- stamping ------------------------------------------------------------------------------ */

static json_object *parsed_object(const char *json)
{
    json_object *v = json ? json_tokener_parse(json) : NULL;

    if (v && !json_object_is_type(v, json_type_object)) {
        json_object_put(v);
        v = NULL;
    }
    return v;
}

const char *mcp_shim_stamp(apr_pool_t *p, json_object *request, const mcp_shim_client_t *client,
                           json_object *id, json_object *input_responses,
                           const char *request_state, apr_size_t *len)
{
    json_object *out = copy(request), *params, *meta, *caps, *info;
    const char *text;

    if (!out) {
        return NULL;
    }
    if (!(params = member(out, "params", json_type_object))) {
        params = json_object_new_object();
        json_object_object_add(out, "params", params);
    }
    if (!(meta = member(params, "_meta", json_type_object))) {
        meta = json_object_new_object();
        json_object_object_add(params, "_meta", meta);
    }
    json_object_object_add(meta, MCP_ERA_META_VERSION, json_object_new_string(MCP_SHIM_VERSION));
    caps = client ? parsed_object(client->caps_json) : NULL;
    json_object_object_add(meta, MCP_ERA_META_CAPABILITIES, caps ? caps : json_object_new_object());
    if (client && (info = parsed_object(client->info_json))) {
        json_object_object_add(meta, MCP_ERA_META_CLIENT_INFO, info);
    }
    if (client && client->log_level) {
        json_object_object_add(meta, "logLevel", json_object_new_string(client->log_level));
    }
    if (id) {
        json_object_object_add(out, "id", json_object_get(id));
    }
    if (input_responses) {
        json_object_object_add(params, "inputResponses", copy(input_responses));
    }
    if (request_state) {
        json_object_object_add(params, "requestState", json_object_new_string(request_state));
    }
    text = mcp_jsonrpc_to_string(p, out, len);
    json_object_put(out);
    return text;
}

/* A header value as is when it is plain visible ASCII (and no surrounding space), else
 * =?base64?...?= encoded. */
static const char *header_value(apr_pool_t *p, const char *v)
{
    const unsigned char *c;
    char *enc;
    int plain = *v != ' ' && *v != '\t';

    for (c = (const unsigned char *)v; *c && plain; c++) {
        plain = *c >= 0x20 && *c < 0x7f;
    }
    if (plain && (!*v || (v[strlen(v) - 1] != ' ' && strncmp(v, "=?", 2) != 0))) {
        return v;
    }
    enc = apr_palloc(p, (apr_size_t)apr_base64_encode_len((int)strlen(v)));
    apr_base64_encode(enc, v, (int)strlen(v));
    return apr_pstrcat(p, "=?base64?", enc, "?=", NULL);
}

apr_array_header_t *mcp_shim_headers(apr_pool_t *p, json_object *request)
{
    apr_array_header_t *out = apr_array_make(p, 2, sizeof(const char *));
    const char *method = mcp_jsonrpc_get_string(request, "method");
    const char *name_member = mcp_era_name_member(method);
    json_object *params = member(request, "params", json_type_object), *name;

    if (!method) {
        return out;
    }
    APR_ARRAY_PUSH(out, const char *) = apr_pstrcat(p, "Mcp-Method: ", header_value(p, method),
                                                    NULL);
    if (name_member && (name = member(params, name_member, json_type_string))) {
        APR_ARRAY_PUSH(out, const char *) =
            apr_pstrcat(p, "Mcp-Name: ", header_value(p, json_object_get_string(name)), NULL);
    }
    return out;
}

/* ---- what comes back ---------------------------------------------------------------------- */

static void clean_meta(json_object *holder)
{
    json_object *meta = member(holder, "_meta", json_type_object);

    if (!meta) {
        return;
    }
    json_object_object_del(meta, META_SERVER_INFO);
    json_object_object_del(meta, META_SUBSCRIPTION_ID);
    if (json_object_object_length(meta) == 0) {
        json_object_object_del(holder, "_meta");
    }
}

void mcp_shim_clean(json_object *msg)
{
    json_object *result = member(msg, "result", json_type_object);

    if (result) {
        json_object_object_del(result, "resultType");
        json_object_object_del(result, "ttlMs");
        json_object_object_del(result, "cacheScope");
        clean_meta(result);
    }
    clean_meta(member(msg, "params", json_type_object));
}

int mcp_shim_is_input_required(json_object *result)
{
    const char *type = mcp_jsonrpc_get_string(result, "resultType");

    return type && strcmp(type, "input_required") == 0;
}

apr_int64_t mcp_shim_minted_stream(const char *id)
{
    const char *at;
    char *end;
    apr_int64_t v;

    if (!id || strncmp(id, MCP_SHIM_ID_PREFIX, sizeof(MCP_SHIM_ID_PREFIX) - 1) != 0) {
        return 0;
    }
    at = id + sizeof(MCP_SHIM_ID_PREFIX) - 1;
    if (*at < '1' || *at > '9') {
        return 0;
    }
    v = apr_strtoi64(at, &end, 10);
    return *end == '-' && v > 0 ? v : 0;
}

/* ---- rounds -------------------------------------------------------------------------------- */

const char *mcp_shim_round_begin(apr_pool_t *p, mcp_shim_round_t *rd, json_object *result,
                                 apr_int64_t stream_id, int number)
{
    json_object *requests = member(result, "inputRequests", json_type_object);
    json_object *state = member(result, "requestState", json_type_string);
    int i = 0;

    memset(rd, 0, sizeof(*rd));
    rd->number = number;
    rd->n = requests ? (int)json_object_object_length(requests) : 0;
    if (!rd->n && !state) {
        return "an InputRequiredResult with neither inputRequests nor requestState";
    }
    rd->request_state = state ? apr_pstrdup(p, json_object_get_string(state)) : NULL;
    rd->keys = apr_pcalloc(p, sizeof(char *) * (apr_size_t)(rd->n + 1));
    rd->ids = apr_pcalloc(p, sizeof(char *) * (apr_size_t)(rd->n + 1));
    rd->requests = apr_pcalloc(p, sizeof(char *) * (apr_size_t)(rd->n + 1));
    if (requests) {
        json_object_object_foreach(requests, key, req) {
            const char *method = mcp_jsonrpc_get_string(req, "method");
            json_object *params = member(req, "params", json_type_object), *msg;

            if (!method || !json_object_is_type(req, json_type_object)) {
                return apr_psprintf(p, "inputRequests[\"%s\"] is not a request (an object with "
                                    "a string method)", key);
            }
            rd->keys[i] = apr_pstrdup(p, key);
            rd->ids[i] = apr_psprintf(p, MCP_SHIM_ID_PREFIX "%" APR_INT64_T_FMT "-%d-%d",
                                      stream_id, number, i + 1);
            msg = json_object_new_object();
            json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
            json_object_object_add(msg, "id", json_object_new_string(rd->ids[i]));
            json_object_object_add(msg, "method", json_object_new_string(method));
            if (params) {
                json_object_object_add(msg, "params", copy(params));
            }
            rd->requests[i] = mcp_jsonrpc_to_string(p, msg, NULL);
            json_object_put(msg);
            i++;
        }
    }
    rd->responses = json_object_new_object();
    return NULL;
}

mcp_shim_answer_t mcp_shim_round_take(apr_pool_t *p, mcp_shim_round_t *rd, json_object *answer)
{
    const char *id = mcp_jsonrpc_get_string(answer, "id");
    json_object *v;
    int i;

    for (i = 0; id && i < rd->n; i++) {
        if (strcmp(rd->ids[i], id) != 0) {
            continue;
        }
        if (json_object_object_get_ex(rd->responses, rd->keys[i], NULL)) {
            return MCP_SHIM_ANSWER_DUPLICATE;
        }
        if ((v = member(answer, "result", json_type_object))) {
            json_object_object_add(rd->responses, rd->keys[i], copy(v));
            rd->answered++;
            return MCP_SHIM_ANSWER_TAKEN;
        }
        rd->refusal = mcp_jsonrpc_to_string(p, answer, NULL);
        return MCP_SHIM_ANSWER_REFUSED;
    }
    return MCP_SHIM_ANSWER_UNKNOWN;
}

int mcp_shim_round_done(const mcp_shim_round_t *rd)
{
    return rd->answered >= rd->n;
}

const char *mcp_shim_round_ids_json(apr_pool_t *p, const mcp_shim_round_t *rd)
{
    json_object *a = json_object_new_array();
    const char *text;
    int i;

    for (i = 0; i < rd->n; i++) {
        json_object_array_add(a, json_object_new_string(rd->ids[i]));
    }
    text = mcp_jsonrpc_to_string(p, a, NULL);
    json_object_put(a);
    return text;
}

void mcp_shim_round_clear(mcp_shim_round_t *rd)
{
    if (rd->responses) {
        json_object_put(rd->responses);
        rd->responses = NULL;
    }
}

json_object *mcp_shim_retry_id(json_object *client_id, int round)
{
    const char *text = json_object_to_json_string_ext(client_id, JSON_C_TO_STRING_PLAIN);
    char buf[160];

    apr_snprintf(buf, sizeof(buf), MCP_SHIM_ID_PREFIX "retry-%d-%.120s", round, text);
    return json_object_new_string(buf);
}
