/* mcp_jsonrpc — see mcp_jsonrpc.h. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <apr_strings.h>

#include "mcp_jsonrpc.h"
#include "mcp_text.h"

#define SERIALIZE_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

static apr_status_t json_put_cleanup(void *obj)
{
    json_object_put(obj);
    return APR_SUCCESS;
}

/* Ties a json-c reference to the pool, so that the value dies with the request. */
static json_object *pool_owned(apr_pool_t *p, json_object *obj)
{
    if (obj) {
        apr_pool_cleanup_register(p, obj, json_put_cleanup, apr_pool_cleanup_null);
    }
    return obj;
}

/* json-c's strict mode still takes single-quoted strings and the literals NaN, Infinity and
 * -Infinity, none of which is JSON (PostgreSQL's jsonb, and most backends, refuse them). Outside
 * a string JSON has no quote ' and no capital N or I (its literals are true, false and null; an
 * exponent is e or E). Returns what is wrong, or NULL. */
static const char *non_json_token(const char *buf, apr_size_t len)
{
    apr_size_t i;
    int in_string = 0;

    for (i = 0; i < len; i++) {
        if (in_string) {
            if (buf[i] == '\\') {
                i++;
            }
            else if (buf[i] == '"') {
                in_string = 0;
            }
        }
        else if (buf[i] == '"') {
            in_string = 1;
        }
        else if (buf[i] == '\'') {
            return "strings must be in double quotes";
        }
        else if (buf[i] == 'N' || buf[i] == 'I') {
            return "NaN and Infinity are not JSON numbers";
        }
    }
    return NULL;
}

/* Returns 0 and *out (NULL for the JSON literal null) on success, -1 with *reason otherwise. */
static int parse_strict(const char *buf, apr_size_t len, json_object **out, const char **reason)
{
    json_tokener *tok;
    json_object *obj;
    enum json_tokener_error jerr;
    size_t end;

    if (len > INT_MAX) {
        *reason = "body too large to parse";
        return -1;
    }
    if (!(tok = json_tokener_new_ex(MCP_JSONRPC_MAX_DEPTH))) {
        *reason = "out of memory";
        return -1;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    obj = json_tokener_parse_ex(tok, buf, (int)len);
    end = json_tokener_get_parse_end(tok);
    if (json_tokener_get_error(tok) == json_tokener_continue && len > 0) {
        /* A bare number or literal at the very end ("42", "true") waits for a delimiter. */
        obj = json_tokener_parse_ex(tok, " ", 1);
        end = len;
    }
    jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);

    if (jerr == json_tokener_continue) {
        *reason = len ? "unexpected end of JSON" : "empty body";
        json_object_put(obj);
        return -1;
    }
    if (jerr != json_tokener_success) {
        *reason = json_tokener_error_desc(jerr);
        json_object_put(obj);
        return -1;
    }
    /* JSON allows trailing whitespace only. */
    for (; end < len; end++) {
        if (buf[end] == '\0' || !strchr(" \t\r\n", buf[end])) {
            *reason = "trailing data after the JSON value";
            json_object_put(obj);
            return -1;
        }
    }
    if ((*reason = non_json_token(buf, len)) != NULL) {
        json_object_put(obj);
        return -1;
    }
    *out = obj;
    return 0;
}

static int is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int mcp_jsonrpc_array_length(const char *buf, apr_size_t len, apr_size_t *n)
{
    char open[MCP_JSONRPC_MAX_DEPTH];
    apr_size_t i = 0, commas = 0;
    int depth = 0, in_string = 0, filled = 0;

    *n = 0;
    while (i < len && is_json_space(buf[i])) {
        i++;
    }
    if (i == len || buf[i] != '[') {
        return 0;
    }
    for (; i < len; i++) {
        char c = buf[i];

        if (in_string) {
            if (c == '\\') {
                i++;
            }
            else if (c == '"') {
                in_string = 0;
            }
            continue;
        }
        if (depth == 1 && c != ',' && c != ']' && !is_json_space(c)) {
            filled = 1;   /* the array has an element */
        }
        if (c == '"') {
            in_string = 1;
        }
        else if (c == '[' || c == '{') {
            if (depth == MCP_JSONRPC_MAX_DEPTH) {
                return 0;
            }
            open[depth++] = c;
        }
        else if (c == ']' || c == '}') {
            if (depth == 0 || open[depth - 1] != (c == ']' ? '[' : '{')) {
                return 0;
            }
            if (--depth == 0) {
                break;
            }
        }
        else if (c == ',' && depth == 1) {
            commas++;
        }
    }
    if (depth != 0 || i == len) {
        return 0;
    }
    for (i++; i < len; i++) {
        if (!is_json_space(buf[i])) {
            return 0;
        }
    }
    *n = filled || commas ? commas + 1 : 0;
    return 1;
}

/* The value of a JSON string as a C string; NULL when v is no string or holds a NUL ("\u0000"),
 * which a C string would silently cut: "initialize\u0000x" must not read as "initialize". */
static const char *c_string(json_object *v)
{
    const char *s;

    if (!json_object_is_type(v, json_type_string)) {
        return NULL;
    }
    s = json_object_get_string(v);
    return strlen(s) == (size_t)json_object_get_string_len(v) ? s : NULL;
}

const char *mcp_jsonrpc_get_string(json_object *obj, const char *key)
{
    json_object *v;

    if (!obj || !json_object_is_type(obj, json_type_object)
        || !json_object_object_get_ex(obj, key, &v)) {
        return NULL;
    }
    return c_string(v);
}

static int id_is_valid(json_object *id)
{
    return json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int);
}

static void invalid(mcp_jsonrpc_msg_t *msg, const char *reason)
{
    msg->kind = MCP_MSG_INVALID;
    msg->invalid_reason = reason;
}

void mcp_jsonrpc_classify(json_object *obj, mcp_jsonrpc_msg_t *msg)
{
    json_object *version, *method, *id, *params, *result, *error;
    int has_id, has_result, has_error;

    memset(msg, 0, sizeof(*msg));
    msg->obj = obj;
    if (!json_object_is_type(obj, json_type_object)) {
        invalid(msg, "a JSON-RPC message must be a JSON object");
        return;
    }
    if (!json_object_object_get_ex(obj, "jsonrpc", &version) || !c_string(version)
        || strcmp(c_string(version), "2.0") != 0) {
        invalid(msg, "\"jsonrpc\" must be \"2.0\"");
        return;
    }
    has_id = json_object_object_get_ex(obj, "id", &id);

    if (json_object_object_get_ex(obj, "method", &method)) {
        if (!c_string(method) || json_object_get_string_len(method) == 0) {
            invalid(msg, "\"method\" must be a non-empty string without NUL characters");
            return;
        }
        if (json_object_object_get_ex(obj, "params", &params)
            && !json_object_is_type(params, json_type_object)
            && !json_object_is_type(params, json_type_array)) {
            invalid(msg, "\"params\" must be an object");
            return;
        }
        if (has_id && !id_is_valid(id)) {
            invalid(msg, "\"id\" must be a string or an integer");
            return;
        }
        msg->method = c_string(method);
        msg->kind = has_id ? MCP_MSG_REQUEST : MCP_MSG_NOTIFICATION;
        msg->id = has_id ? id : NULL;
        return;
    }

    has_result = json_object_object_get_ex(obj, "result", &result);
    has_error = json_object_object_get_ex(obj, "error", &error);
    if (has_result == has_error) {
        invalid(msg, has_result ? "a response must not carry both \"result\" and \"error\""
                                : "a message needs \"method\" (request or notification) "
                                  "or \"result\"/\"error\" (response)");
        return;
    }
    if (!has_id) {
        invalid(msg, "a response must carry an \"id\"");
        return;
    }
    if (has_error) {
        json_object *code;
        if (!json_object_is_type(error, json_type_object)
            || !json_object_object_get_ex(error, "code", &code)
            || !json_object_is_type(code, json_type_int)
            || !mcp_jsonrpc_get_string(error, "message")) {
            invalid(msg, "\"error\" must be an object with an integer \"code\" and a string "
                         "\"message\"");
            return;
        }
        if (!id_is_valid(id) && !json_object_is_type(id, json_type_null)) {
            invalid(msg, "\"id\" must be a string, an integer or null");
            return;
        }
        msg->kind = MCP_MSG_ERROR;
    }
    else {
        if (!id_is_valid(id)) {
            invalid(msg, "\"id\" must be a string or an integer");
            return;
        }
        msg->kind = MCP_MSG_RESPONSE;
    }
    msg->id = id;
}

/* ---- an id's text as sent ------------------------------------------------------------- */

/* Past the string that starts at s[0] ('"'); NULL when it does not end before end. */
static const char *past_string(const char *s, const char *end)
{
    for (s++; s < end; s++) {
        if (*s == '\\') {
            s++;
        }
        else if (*s == '"') {
            return s + 1;
        }
    }
    return NULL;
}

/* Past the JSON value that starts at s[0] (strings skipped whole, so a bracket in one is not
 * counted); NULL when it does not end before end. The text was parsed already: it is JSON. */
static const char *past_value(const char *s, const char *end)
{
    int depth = 0;

    do {
        if (s >= end) {
            return NULL;
        }
        if (*s == '"') {
            if (!(s = past_string(s, end))) {
                return NULL;
            }
            continue;
        }
        if (*s == '{' || *s == '[') {
            depth++;
        }
        else if (*s == '}' || *s == ']') {
            depth--;
        }
        else if (depth == 0) {
            while (s < end && *s != ',' && *s != '}' && *s != ']' && !is_json_space(*s)) {
                s++;
            }
            return s;
        }
        s++;
    } while (depth > 0);
    return s;
}

static const char *past_space(const char *s, const char *end)
{
    while (s < end && is_json_space(*s)) {
        s++;
    }
    return s;
}

int mcp_jsonrpc_member_span(const char *buf, apr_size_t len, const char *key,
                            apr_size_t *off, apr_size_t *n)
{
    const char *s = past_space(buf, buf + len), *end = buf + len, *k, *v;
    apr_size_t key_len = strlen(key);
    int found = 0;

    if (s == end || *s != '{') {
        return 0;
    }
    for (s = past_space(s + 1, end); s < end && *s == '"'; s = past_space(s + 1, end)) {
        k = s + 1;
        if (!(s = past_string(s, end))) {
            return 0;
        }
        if (memchr(k, '\\', (apr_size_t)(s - 1 - k))) {
            return 0;   /* an escaped name might spell key: unknown */
        }
        s = past_space(s, end);
        if (s == end || *s != ':') {
            return 0;
        }
        v = past_space(s + 1, end);
        if (!(s = past_value(v, end))) {
            return 0;
        }
        if ((apr_size_t)(v - k) > key_len && k[key_len] == '"' && memcmp(k, key, key_len) == 0) {
            *off = (apr_size_t)(v - buf);   /* the last one: json-c keeps the last too */
            *n = (apr_size_t)(s - v);
            found = 1;
        }
        s = past_space(s, end);
        if (s == end || *s != ',') {
            break;
        }
    }
    return found;
}

/* Non-zero when the JSON string text[0..n) holds a surrogate escape (\uD800 to \uDFFF). */
static int has_surrogate_escape(const char *text, apr_size_t n)
{
    apr_size_t i;

    for (i = 0; i + 5 < n; i++) {
        if (text[i] != '\\') {
            continue;
        }
        if (text[i + 1] == 'u' && (text[i + 2] == 'd' || text[i + 2] == 'D')
            && text[i + 3] != '\0' && strchr("89abcdefABCDEF", text[i + 3])) {
            return 1;
        }
        i++;   /* the escaped character: never the start of an escape */
    }
    return 0;
}

/* Non-zero when the string value v holds U+FFFD, what json-c reads a surrogate escape as. */
static int has_replacement(json_object *v)
{
    const unsigned char *s = (const unsigned char *)json_object_get_string(v);
    int i, n = json_object_get_string_len(v);

    for (i = 0; i + 2 < n; i++) {
        if (s[i] == 0xEF && s[i + 1] == 0xBF && s[i + 2] == 0xBD) {
            return 1;
        }
    }
    return 0;
}

/* The text buf has for id (a copy, malloc'd) when json-c would write id otherwise: a string
 * that it read U+FFFD into from a surrogate escape. NULL for every other id. */
static char *id_text_to_keep(json_object *id, const char *buf, apr_size_t len)
{
    apr_size_t off, n;
    char *text;

    if (!id || !json_object_is_type(id, json_type_string) || !has_replacement(id)
        || !mcp_jsonrpc_member_span(buf, len, "id", &off, &n)
        || !has_surrogate_escape(buf + off, n) || !(text = malloc(n + 1))) {
        return NULL;
    }
    memcpy(text, buf + off, n);
    text[n] = '\0';
    return text;
}

/* id (and its deep copies) serialize as text, which they free. */
static void serialize_as(json_object *id, char *text)
{
    json_object_set_serializer(id, json_object_userdata_to_json_string, text,
                               json_object_free_userdata);
}

int mcp_jsonrpc_keep_id_as_sent(json_object *id, const char *buf, apr_size_t len)
{
    char *text = id_text_to_keep(id, buf, len);

    if (!text) {
        return 0;
    }
    serialize_as(id, text);
    return 1;
}

json_object *mcp_jsonrpc_id_as_sent(apr_pool_t *p, json_object *id, const char *buf,
                                    apr_size_t len)
{
    char *text = id_text_to_keep(id, buf, len);
    json_object *copy = NULL;

    if (!text) {
        return id;
    }
    if (json_object_deep_copy(id, &copy, NULL) != 0) {
        free(text);
        return id;
    }
    serialize_as(copy, text);
    return pool_owned(p, copy);
}

json_object *mcp_jsonrpc_reply_id(const mcp_jsonrpc_msg_t *msg)
{
    json_object *id;

    if (msg->kind == MCP_MSG_NOTIFICATION || !json_object_is_type(msg->obj, json_type_object)
        || !json_object_object_get_ex(msg->obj, "id", &id) || !id_is_valid(id)) {
        return NULL;
    }
    return id;
}

static void count(mcp_jsonrpc_body_t *body, const mcp_jsonrpc_msg_t *msg)
{
    switch (msg->kind) {
    case MCP_MSG_REQUEST:      body->n_requests++;      break;
    case MCP_MSG_NOTIFICATION: body->n_notifications++; break;
    case MCP_MSG_RESPONSE:
    case MCP_MSG_ERROR:        body->n_responses++;     break;
    default:                   body->n_invalid++;       break;
    }
}

mcp_jsonrpc_status_t mcp_jsonrpc_parse(apr_pool_t *p, const char *buf, apr_size_t len,
                                       mcp_jsonrpc_body_t **out, const char **reason)
{
    return mcp_jsonrpc_parse_limited(p, buf, len, 0, out, reason);
}

mcp_jsonrpc_status_t mcp_jsonrpc_parse_limited(apr_pool_t *p, const char *buf, apr_size_t len,
                                               int max_batch, mcp_jsonrpc_body_t **out,
                                               const char **reason)
{
    mcp_jsonrpc_body_t *body;
    json_object *root;
    apr_size_t n;
    int i;

    *out = NULL;
    if (max_batch > 0 && mcp_jsonrpc_array_length(buf, len, &n) && n > (apr_size_t)max_batch) {
        body = apr_pcalloc(p, sizeof(*body));
        body->is_batch = 1;
        body->count = n > INT_MAX ? INT_MAX : (int)n;
        *out = body;
        *reason = apr_psprintf(p, "the batch holds %d messages, more than %d", body->count,
                               max_batch);
        return MCP_JSONRPC_ERR_TOO_LONG;
    }
    if (parse_strict(buf, len, &root, reason) != 0) {
        return MCP_JSONRPC_ERR_PARSE;
    }
    pool_owned(p, root);
    body = apr_pcalloc(p, sizeof(*body));
    body->root = root;
    *out = body;

    if (json_object_is_type(root, json_type_array)) {
        body->is_batch = 1;
        body->count = (int)json_object_array_length(root);
        if (body->count == 0) {
            *reason = "an empty batch is not a valid JSON-RPC message";
            return MCP_JSONRPC_ERR_INVALID;
        }
        if (max_batch > 0 && body->count > max_batch) {
            *reason = apr_psprintf(p, "the batch holds %d messages, more than %d", body->count,
                                   max_batch);
            return MCP_JSONRPC_ERR_TOO_LONG;
        }
        body->msgs = apr_pcalloc(p, sizeof(*body->msgs) * body->count);
        for (i = 0; i < body->count; i++) {
            mcp_jsonrpc_classify(json_object_array_get_idx(root, i), &body->msgs[i]);
            count(body, &body->msgs[i]);
        }
    }
    else {
        body->count = 1;
        body->msgs = apr_pcalloc(p, sizeof(*body->msgs));
        mcp_jsonrpc_classify(root, &body->msgs[0]);
        count(body, &body->msgs[0]);
    }

    for (i = 0; i < body->count; i++) {
        if (body->msgs[i].kind == MCP_MSG_INVALID) {
            *reason = body->is_batch
                ? apr_psprintf(p, "batch element %d: %s", i, body->msgs[i].invalid_reason)
                : body->msgs[i].invalid_reason;
            return MCP_JSONRPC_ERR_INVALID;
        }
    }
    *reason = NULL;
    return MCP_JSONRPC_OK;
}

static const char *method_word(const mcp_jsonrpc_msg_t *msg)
{
    return msg->method ? msg->method : msg->kind == MCP_MSG_INVALID ? "-" : "response";
}

const char *mcp_jsonrpc_methods_joined(apr_pool_t *p, const mcp_jsonrpc_body_t *body)
{
    apr_size_t total = 1, n;
    char *out, *at;
    int i;

    if (!body || !body->msgs) {
        return "";
    }
    for (i = 0; i < body->count; i++) {
        total += strlen(method_word(&body->msgs[i])) + (i ? 2 : 0);
    }
    at = out = apr_palloc(p, total);
    for (i = 0; i < body->count; i++) {
        const char *w = method_word(&body->msgs[i]);

        if (i) {
            memcpy(at, ", ", 2);
            at += 2;
        }
        n = strlen(w);
        memcpy(at, w, n);
        at += n;
    }
    *at = '\0';
    return out;
}

int mcp_jsonrpc_find_method(const mcp_jsonrpc_body_t *body, const char *m)
{
    int i;

    for (i = 0; body && i < body->count; i++) {
        if (body->msgs[i].kind == MCP_MSG_REQUEST && strcmp(body->msgs[i].method, m) == 0) {
            return i;
        }
    }
    return -1;
}

int mcp_jsonrpc_is_single_request(const mcp_jsonrpc_body_t *body, const char *m)
{
    return body && !body->is_batch && mcp_jsonrpc_find_method(body, m) == 0;
}

const char *mcp_jsonrpc_to_string(apr_pool_t *p, json_object *obj, apr_size_t *len_out)
{
    size_t len;
    const char *s = json_object_to_json_string_length(obj, SERIALIZE_FLAGS, &len);

    if (len_out) {
        *len_out = len;
    }
    return apr_pstrmemdup(p, s, len);
}

const char *mcp_jsonrpc_error_body(apr_pool_t *p, json_object *id, int code,
                                   const char *message, json_object *data)
{
    json_object *msg = json_object_new_object();
    json_object *err = json_object_new_object();
    const char *s;

    json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
    json_object_object_add(msg, "id", id ? json_object_get(id) : NULL);
    json_object_object_add(err, "code", json_object_new_int(code));
    /* Whatever bytes the message quotes (a backend's headers), the body is valid JSON. */
    if (!mcp_text_is_utf8(message, strlen(message))) {
        message = mcp_text_quote(p, message, strlen(message), 0);
    }
    json_object_object_add(err, "message", json_object_new_string(message));
    if (data) {
        json_object_object_add(err, "data", json_object_get(data));
    }
    json_object_object_add(msg, "error", err);
    s = mcp_jsonrpc_to_string(p, msg, NULL);
    json_object_put(msg);
    return s;
}

json_object *mcp_jsonrpc_parse_value(apr_pool_t *p, const char *buf, apr_size_t len)
{
    return mcp_jsonrpc_parse_value_ex(p, buf, len, NULL);
}

json_object *mcp_jsonrpc_parse_value_ex(apr_pool_t *p, const char *buf, apr_size_t len,
                                        const char **reason)
{
    const char *why = NULL;
    json_object *obj = NULL;

    if (parse_strict(buf, len, &obj, &why) != 0) {
        obj = NULL;
    }
    else if (!obj) {
        why = "the JSON literal null is not a message";
    }
    if (reason) {
        *reason = why;
    }
    return pool_owned(p, obj);
}

int mcp_jsonrpc_is_error_message(apr_pool_t *p, const char *buf, apr_size_t len)
{
    json_object *obj = mcp_jsonrpc_parse_value(p, buf, len);
    mcp_jsonrpc_msg_t msg;

    if (!obj) {
        return 0;
    }
    mcp_jsonrpc_classify(obj, &msg);
    return msg.kind == MCP_MSG_ERROR;
}

mcp_target_kind_t mcp_jsonrpc_target(const mcp_jsonrpc_msg_t *msg, const char **name)
{
    static const struct {
        const char       *method;
        const char       *member;
        mcp_target_kind_t kind;
    } targets[] = {
        { "tools/call", "name", MCP_TARGET_TOOL },
        { "prompts/get", "name", MCP_TARGET_PROMPT },
        { "resources/read", "uri", MCP_TARGET_RESOURCE },
        { "resources/subscribe", "uri", MCP_TARGET_RESOURCE },
        { "resources/unsubscribe", "uri", MCP_TARGET_RESOURCE },
    };
    json_object *params;
    size_t i;

    *name = NULL;
    if (!msg || msg->kind != MCP_MSG_REQUEST || !msg->method
        || !json_object_object_get_ex(msg->obj, "params", &params)) {
        return MCP_TARGET_NONE;
    }
    for (i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        if (strcmp(msg->method, targets[i].method) == 0) {
            *name = mcp_jsonrpc_get_string(params, targets[i].member);
            return *name ? targets[i].kind : MCP_TARGET_NONE;
        }
    }
    return MCP_TARGET_NONE;
}
