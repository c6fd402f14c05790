/* mcp_federation — see mcp_federation.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <apr_fnmatch.h>
#include <apr_hash.h>
#include <apr_strings.h>

#include "mcp_federation.h"
#include "mcp_jsonrpc.h"
#include "mcp_text.h"

#define FED_ID_TAG      "mcpfed:"
#define FED_ID_TAG_LEN  (sizeof(FED_ID_TAG) - 1)
#define FED_QUOTE_MAX   200    /* bytes of a client's name quoted in a routing error */
#define FED_JSON_FLAGS  (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* ---- names -------------------------------------------------------------------------------- */

/* The length of the member name s starts with ([A-Za-z][A-Za-z0-9.-]*), 0 when none. */
static apr_size_t fed_name_span(const char *s)
{
    static const char rest[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-";

    if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))) {
        return 0;
    }
    return 1 + strspn(s + 1, rest);
}

int mcp_fed_name_valid(const char *name)
{
    apr_size_t span = fed_name_span(name);

    return span > 0 && name[span] == '\0';
}

static int fed_is_unprefixed(const mcp_fed_member_t *m)
{
    return !m->prefix || !*m->prefix;
}

static int fed_globs_match(const apr_array_header_t *globs, const char *name)
{
    int i;

    for (i = 0; globs && i < globs->nelts; i++) {
        const char *glob = APR_ARRAY_IDX(globs, i, const char *);

        if (glob && apr_fnmatch(glob, name, 0) == APR_SUCCESS) {
            return 1;
        }
    }
    return 0;
}

int mcp_fed_name_allowed(const mcp_fed_member_t *m, const char *own)
{
    if (!own) {
        return 0;
    }
    if (m->allow && m->allow->nelts > 0 && !fed_globs_match(m->allow, own)) {
        return 0;
    }
    return !fed_globs_match(m->deny, own);
}

/* The first entry whose key (by_value: whose value) is exactly s (apr_table_get ignores case
 * and looks at keys only), or NULL. */
static const apr_table_entry_t *fed_entry(const apr_table_t *t, const char *s, int by_value)
{
    const apr_array_header_t *elts;
    const apr_table_entry_t *e;
    int i;

    if (!t) {
        return NULL;
    }
    elts = apr_table_elts(t);
    e = (const apr_table_entry_t *)elts->elts;
    for (i = 0; i < elts->nelts; i++) {
        const char *v = by_value ? e[i].val : e[i].key;
        if (e[i].key && v && strcmp(v, s) == 0) {
            return &e[i];
        }
    }
    return NULL;
}

/* The value of the table entry whose key is exactly key, or NULL. */
static const char *fed_table_exact(const apr_table_t *t, const char *key)
{
    const apr_table_entry_t *e = fed_entry(t, key, 0);

    return e ? e->val : NULL;
}

/* The key of the first rename whose new name is exactly new_name, or NULL. */
static const char *fed_renamed_from(const apr_table_t *t, const char *new_name)
{
    const apr_table_entry_t *e = fed_entry(t, new_name, 1);

    return e ? e->key : NULL;
}

/* The own name behind a name the member shows (renamed, not yet prefixed), or NULL when that
 * name calls nothing: an old name renamed away, or an own name the rules hide. */
static const char *fed_own_name(const mcp_fed_member_t *m, const char *shown)
{
    const char *own;

    if (!*shown) {
        return NULL;
    }
    if (!(own = fed_renamed_from(m->renames, shown))) {
        if (fed_table_exact(m->renames, shown)) {
            return NULL;
        }
        own = shown;
    }
    return mcp_fed_name_allowed(m, own) ? own : NULL;
}

const char *mcp_fed_expose_name(apr_pool_t *p, const mcp_fed_member_t *m, const char *own)
{
    const char *shown, *back;

    if (!own) {
        return NULL;
    }
    if (!(shown = fed_table_exact(m->renames, own))) {
        shown = own;
    }
    /* Shown only when it calls this very name back (hidden, shadowed and empty names do not). */
    back = fed_own_name(m, shown);
    if (!back || strcmp(back, own) != 0) {
        return NULL;
    }
    return fed_is_unprefixed(m) ? shown : apr_pstrcat(p, m->prefix, shown, NULL);
}

int mcp_fed_resolve_name(const mcp_fed_member_t *members, int n, const char *exposed,
                         const char **own)
{
    apr_size_t best_len = 0;
    int i, best = -1, unprefixed = -1;
    const char *found;

    if (!exposed || !*exposed) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        const char *prefix = members[i].prefix;
        apr_size_t len;

        if (fed_is_unprefixed(&members[i])) {
            if (unprefixed < 0) {
                unprefixed = i;
            }
            continue;
        }
        len = strlen(prefix);
        if (len > best_len && strncmp(exposed, prefix, len) == 0 && exposed[len] != '\0') {
            best = i;
            best_len = len;
        }
    }
    if (best < 0 && (best = unprefixed) < 0) {
        return -1;
    }
    if (!(found = fed_own_name(&members[best], exposed + best_len))) {
        return -1;
    }
    *own = found;
    return best;
}

/* ---- resource URIs ------------------------------------------------------------------------ */

const char *mcp_fed_expose_uri(apr_pool_t *p, const mcp_fed_member_t *m, const char *uri)
{
    if (!uri) {
        return NULL;
    }
    return fed_is_unprefixed(m) ? uri : apr_pstrcat(p, m->name, "+", uri, NULL);
}

int mcp_fed_resolve_uri(const mcp_fed_member_t *members, int n, const char *uri,
                        const char **own_uri)
{
    apr_size_t span = fed_name_span(uri);
    int i;

    if (!uri) {
        return -1;
    }
    if (span > 0 && uri[span] == '+') {
        for (i = 0; i < n; i++) {
            if (!fed_is_unprefixed(&members[i]) && members[i].name
                && strlen(members[i].name) == span
                && strncasecmp(members[i].name, uri, span) == 0) {
                *own_uri = uri + span + 1;
                return i;
            }
        }
    }
    for (i = 0; i < n; i++) {
        if (fed_is_unprefixed(&members[i])) {
            *own_uri = uri;
            return i;
        }
    }
    return -1;
}

/* ---- server->client request ids ----------------------------------------------------------- */

static int fed_id_type_ok(json_object *id)
{
    return json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int)
           || json_object_is_type(id, json_type_double);
}

json_object *mcp_fed_tag_id(const char *member_name, json_object *id)
{
    const char *text;
    size_t name_len, text_len, len;
    json_object *tagged;
    char *buf;

    if (!mcp_fed_name_valid(member_name) || !id || !fed_id_type_ok(id)) {
        return NULL;
    }
    text = json_object_to_json_string_ext(id, FED_JSON_FLAGS);
    name_len = strlen(member_name);
    text_len = strlen(text);
    len = FED_ID_TAG_LEN + name_len + 1 + text_len;
    if (!(buf = malloc(len + 1))) {
        return NULL;
    }
    memcpy(buf, FED_ID_TAG, FED_ID_TAG_LEN);
    memcpy(buf + FED_ID_TAG_LEN, member_name, name_len);
    buf[FED_ID_TAG_LEN + name_len] = ':';
    memcpy(buf + FED_ID_TAG_LEN + name_len + 1, text, text_len + 1);
    tagged = json_object_new_string_len(buf, (int)len);
    free(buf);
    return tagged;
}

int mcp_fed_untag_id(apr_pool_t *p, json_object *tagged, const char **member_name,
                     json_object **id)
{
    const char *s, *text;
    apr_size_t len, span;
    json_object *v;

    if (!json_object_is_type(tagged, json_type_string)) {
        return -1;
    }
    s = json_object_get_string(tagged);
    len = (apr_size_t)json_object_get_string_len(tagged);
    if (strlen(s) != len || len <= FED_ID_TAG_LEN || strncmp(s, FED_ID_TAG, FED_ID_TAG_LEN) != 0) {
        return -1;
    }
    span = fed_name_span(s + FED_ID_TAG_LEN);
    if (span == 0 || s[FED_ID_TAG_LEN + span] != ':') {
        return -1;
    }
    text = s + FED_ID_TAG_LEN + span + 1;
    /* Only the text mcp_fed_tag_id writes: a string or number, canonical (so one id, one tag). */
    v = mcp_jsonrpc_parse_value(p, text, strlen(text));
    if (!v || !fed_id_type_ok(v) || strcmp(json_object_to_json_string_ext(v, FED_JSON_FLAGS),
                                           text) != 0) {
        return -1;
    }
    *member_name = apr_pstrndup(p, s + FED_ID_TAG_LEN, span);
    *id = json_object_get(v);   /* the pool keeps its own reference until it is cleared */
    return 0;
}

/* ---- cursors ------------------------------------------------------------------------------ */

static const char fed_b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static char *fed_b64url_encode(apr_pool_t *p, const unsigned char *in, apr_size_t n)
{
    char *out = apr_palloc(p, (n + 2) / 3 * 4 + 1), *o = out;
    apr_size_t i;

    for (i = 0; i + 2 < n; i += 3) {
        *o++ = fed_b64url[in[i] >> 2];
        *o++ = fed_b64url[((in[i] & 0x03) << 4) | (in[i + 1] >> 4)];
        *o++ = fed_b64url[((in[i + 1] & 0x0f) << 2) | (in[i + 2] >> 6)];
        *o++ = fed_b64url[in[i + 2] & 0x3f];
    }
    if (n - i == 1) {
        *o++ = fed_b64url[in[i] >> 2];
        *o++ = fed_b64url[(in[i] & 0x03) << 4];
    }
    else if (n - i == 2) {
        *o++ = fed_b64url[in[i] >> 2];
        *o++ = fed_b64url[((in[i] & 0x03) << 4) | (in[i + 1] >> 4)];
        *o++ = fed_b64url[(in[i + 1] & 0x0f) << 2];
    }
    *o = '\0';
    return out;
}

static int fed_b64url_value(char c)
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
    return c == '-' ? 62 : c == '_' ? 63 : -1;
}

/* Strict: the alphabet only, no padding, no length that leaves a lone character, and the unused
 * bits of the last character zero (so that one byte string has one encoding). Returns the bytes
 * NUL-terminated in p, *n their number; NULL when s is not such base64url. */
static unsigned char *fed_b64url_decode(apr_pool_t *p, const char *s, apr_size_t len,
                                        apr_size_t *n)
{
    unsigned char *out, *o;
    apr_uint32_t acc = 0;
    apr_size_t i;
    int bits = 0;

    if (len % 4 == 1) {
        return NULL;
    }
    o = out = apr_palloc(p, len / 4 * 3 + 3);
    for (i = 0; i < len; i++) {
        int v = fed_b64url_value(s[i]);

        if (v < 0) {
            return NULL;
        }
        acc = (acc << 6) | (apr_uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *o++ = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) {
        return NULL;
    }
    *o = '\0';
    *n = (apr_size_t)(o - out);
    return out;
}

/* Non-zero when name is valid and not among names[0..n). */
static int fed_name_new(const char *name, const char *const *names, int n)
{
    int i;

    if (!mcp_fed_name_valid(name)) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return 0;
        }
    }
    return 1;
}

const char *mcp_fed_cursor_encode(apr_pool_t *p, const char *const *names,
                                  const char *const *cursors, int n)
{
    json_object *all;
    const char *text, *out = NULL;
    int i;

    if (n <= 0 || n > MCP_FED_CURSOR_MAX_PAIRS) {
        return NULL;
    }
    all = json_object_new_array_ext(n);
    for (i = 0; i < n; i++) {
        json_object *pair;

        if (!cursors[i] || !fed_name_new(names[i], names, i)) {
            json_object_put(all);
            return NULL;
        }
        pair = json_object_new_array_ext(2);
        json_object_array_add(pair, json_object_new_string(names[i]));
        json_object_array_add(pair, json_object_new_string(cursors[i]));
        json_object_array_add(all, pair);
    }
    text = json_object_to_json_string_ext(all, FED_JSON_FLAGS);
    if ((strlen(text) + 2) / 3 * 4 <= MCP_FED_CURSOR_MAX_LEN) {
        out = fed_b64url_encode(p, (const unsigned char *)text, strlen(text));
    }
    json_object_put(all);
    return out;
}

int mcp_fed_cursor_decode(apr_pool_t *p, const char *cursor, apr_array_header_t **pairs)
{
    apr_array_header_t *out;
    const char **seen;
    unsigned char *text;
    apr_size_t len, text_len;
    json_object *all;
    int i, n;

    if (!cursor || (len = strlen(cursor)) == 0 || len > MCP_FED_CURSOR_MAX_LEN
        || !(text = fed_b64url_decode(p, cursor, len, &text_len))
        || !(all = mcp_jsonrpc_parse_value(p, (const char *)text, text_len))
        || !json_object_is_type(all, json_type_array)) {
        return -1;
    }
    n = (int)json_object_array_length(all);
    if (n < 1 || n > MCP_FED_CURSOR_MAX_PAIRS) {
        return -1;
    }
    out = apr_array_make(p, n, sizeof(mcp_fed_cursor_pair_t));
    seen = apr_palloc(p, sizeof(*seen) * (apr_size_t)n);
    for (i = 0; i < n; i++) {
        json_object *pair = json_object_array_get_idx(all, (size_t)i), *name, *cur;
        mcp_fed_cursor_pair_t *dst;

        if (!json_object_is_type(pair, json_type_array) || json_object_array_length(pair) != 2
            || !json_object_is_type(name = json_object_array_get_idx(pair, 0), json_type_string)
            || !json_object_is_type(cur = json_object_array_get_idx(pair, 1), json_type_string)
            || strlen(json_object_get_string(name)) != (size_t)json_object_get_string_len(name)
            || strlen(json_object_get_string(cur)) != (size_t)json_object_get_string_len(cur)
            || !fed_name_new(json_object_get_string(name), seen, i)) {
            return -1;
        }
        seen[i] = json_object_get_string(name);
        dst = apr_array_push(out);
        dst->member = apr_pstrdup(p, seen[i]);
        dst->cursor = apr_pstrdup(p, json_object_get_string(cur));
    }
    *pairs = out;
    return 0;
}

/* ---- list results ------------------------------------------------------------------------- */

typedef struct {
    const char *method;
    const char *array;   /* the result's member that holds the items  */
    const char *key;     /* the item's member that names it           */
    int         by_uri;  /* the key is a URI (template), not a name   */
} fed_list_t;

static const fed_list_t *fed_list_of(const char *method)
{
    static const fed_list_t lists[] = {
        { "tools/list", "tools", "name", 0 },
        { "prompts/list", "prompts", "name", 0 },
        { "resources/list", "resources", "uri", 1 },
        { "resources/templates/list", "resourceTemplates", "uriTemplate", 1 },
    };
    size_t i;

    for (i = 0; method && i < sizeof(lists) / sizeof(lists[0]); i++) {
        if (strcmp(method, lists[i].method) == 0) {
            return &lists[i];
        }
    }
    return NULL;
}

/* Rewrites one item in place; 0 when it is to be dropped. */
static int fed_item_rewrite(apr_pool_t *p, const mcp_fed_member_t *m, const fed_list_t *list,
                            json_object *item)
{
    const char *own = mcp_jsonrpc_get_string(item, list->key), *exposed, *desc = NULL;

    if (!own) {
        return 0;
    }
    if (list->by_uri) {
        exposed = mcp_fed_expose_uri(p, m, own);
    }
    else if ((exposed = mcp_fed_expose_name(p, m, own)) != NULL) {
        desc = fed_table_exact(m->descriptions, own);
    }
    if (!exposed) {
        return 0;
    }
    if (exposed != own) {
        json_object_object_add(item, list->key, json_object_new_string(exposed));
    }
    if (desc) {
        json_object_object_add(item, "description", json_object_new_string(desc));
    }
    return 1;
}

int mcp_fed_list_rewrite(apr_pool_t *p, const mcp_fed_member_t *m, const char *method,
                         json_object *result)
{
    const fed_list_t *list = fed_list_of(method);
    json_object *items, *kept;
    size_t i, n;
    int dropped = 0;

    if (!list || !json_object_object_get_ex(result, list->array, &items)
        || !json_object_is_type(items, json_type_array)) {
        return 0;
    }
    n = json_object_array_length(items);
    kept = json_object_new_array_ext((int)n);
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(items, i);

        if (fed_item_rewrite(p, m, list, item)) {
            json_object_array_add(kept, json_object_get(item));
        }
        else {
            dropped++;
        }
    }
    if (dropped) {
        json_object_object_add(result, list->array, kept);   /* frees the old array */
    }
    else {
        json_object_put(kept);
    }
    return dropped;
}

json_object *mcp_fed_list_merge(apr_pool_t *p, const char *method, json_object *const *results,
                                const char *const *member_names, int n,
                                const char **next_cursor, int *dropped)
{
    const fed_list_t *list = fed_list_of(method);
    const char **names, **cursors;
    apr_hash_t *seen = apr_hash_make(p);
    json_object *out, *all;
    int i, more = 0, gone = 0;

    *next_cursor = NULL;
    if (dropped) {
        *dropped = 0;
    }
    if (!list) {
        return NULL;
    }
    names = apr_palloc(p, sizeof(*names) * (apr_size_t)(n > 0 ? n : 1));
    cursors = apr_palloc(p, sizeof(*cursors) * (apr_size_t)(n > 0 ? n : 1));
    out = json_object_new_object();
    all = json_object_new_array();
    json_object_object_add(out, list->array, all);
    for (i = 0; i < n; i++) {
        json_object *items;
        const char *next;
        size_t j, len;

        if (!json_object_is_type(results[i], json_type_object)) {
            continue;
        }
        if (json_object_object_get_ex(results[i], list->array, &items)
            && json_object_is_type(items, json_type_array)) {
            len = json_object_array_length(items);
            for (j = 0; j < len; j++) {
                json_object *item = json_object_array_get_idx(items, j);
                const char *key = mcp_jsonrpc_get_string(item, list->key);

                if (!key || apr_hash_get(seen, key, APR_HASH_KEY_STRING)) {
                    gone++;
                    continue;
                }
                apr_hash_set(seen, key, APR_HASH_KEY_STRING, key);
                json_object_array_add(all, json_object_get(item));
            }
        }
        if ((next = mcp_jsonrpc_get_string(results[i], "nextCursor")) != NULL && *next) {
            names[more] = member_names[i];
            cursors[more++] = next;
        }
    }
    if (more > 0) {
        if (!(*next_cursor = mcp_fed_cursor_encode(p, names, cursors, more))) {
            json_object_put(out);
            return NULL;
        }
        json_object_object_add(out, "nextCursor", json_object_new_string(*next_cursor));
    }
    if (dropped) {
        *dropped = gone;
    }
    return out;
}

/* ---- messages in flight ------------------------------------------------------------------- */

mcp_fed_kind_t mcp_fed_method_kind(const char *method)
{
    static const struct {
        const char    *method;
        mcp_fed_kind_t kind;
    } kinds[] = {
        { "tools/call", MCP_FED_ROUTED },
        { "prompts/get", MCP_FED_ROUTED },
        { "resources/read", MCP_FED_ROUTED },
        { "resources/subscribe", MCP_FED_ROUTED },
        { "resources/unsubscribe", MCP_FED_ROUTED },
        { "completion/complete", MCP_FED_ROUTED },
        { "tools/list", MCP_FED_LIST },
        { "prompts/list", MCP_FED_LIST },
        { "resources/list", MCP_FED_LIST },
        { "resources/templates/list", MCP_FED_LIST },
        { "ping", MCP_FED_ALL },
        { "logging/setLevel", MCP_FED_ALL },
        { "notifications/initialized", MCP_FED_NOTIFY_ALL },
        { "notifications/roots/list_changed", MCP_FED_NOTIFY_ALL },
        { "notifications/cancelled", MCP_FED_NOTIFY_ALL },
    };
    size_t i;

    for (i = 0; method && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(method, kinds[i].method) == 0) {
            return kinds[i].kind;
        }
    }
    return MCP_FED_LOCAL;
}

static const char *fed_quote(apr_pool_t *p, const char *s)
{
    return mcp_text_quote(p, s, strlen(s), FED_QUOTE_MAX);
}

/* Routes by obj[key] (a tool or prompt name, what says which, or a URI when what is NULL) and
 * rewrites it to the member's own; where names obj for the error ("params", "params.ref"). */
static int fed_route_by(apr_pool_t *p, const mcp_fed_member_t *members, int n, const char *method,
                        json_object *obj, const char *where, const char *key, const char *what,
                        const char **why)
{
    const char *exposed = mcp_jsonrpc_get_string(obj, key), *own = NULL;
    int i;

    if (!exposed) {
        *why = apr_psprintf(p, "%s needs %s.%s, a string", method, where, key);
        return -1;
    }
    i = what ? mcp_fed_resolve_name(members, n, exposed, &own)
             : mcp_fed_resolve_uri(members, n, exposed, &own);
    if (i < 0) {
        *why = what ? apr_psprintf(p, "Unknown %s: %s", what, fed_quote(p, exposed))
                    : apr_psprintf(p, "No member serves the resource uri: %s",
                                   fed_quote(p, exposed));
        return -1;
    }
    if (own != exposed) {
        json_object_object_add(obj, key, json_object_new_string(own));   /* copies own first */
    }
    return i;
}

static int fed_route_completion(apr_pool_t *p, const mcp_fed_member_t *members, int n,
                                json_object *params, const char **why)
{
    static const char method[] = "completion/complete";
    json_object *ref;
    const char *type;

    if (!json_object_object_get_ex(params, "ref", &ref)
        || !json_object_is_type(ref, json_type_object)) {
        *why = "completion/complete needs params.ref, an object";
        return -1;
    }
    type = mcp_jsonrpc_get_string(ref, "type");
    if (type && strcmp(type, "ref/prompt") == 0) {
        return fed_route_by(p, members, n, method, ref, "params.ref", "name", "prompt", why);
    }
    if (type && strcmp(type, "ref/resource") == 0) {
        return fed_route_by(p, members, n, method, ref, "params.ref", "uri", NULL, why);
    }
    *why = "completion/complete needs params.ref.type, \"ref/prompt\" or \"ref/resource\"";
    return -1;
}

int mcp_fed_route(apr_pool_t *p, const mcp_fed_member_t *members, int n, json_object *request,
                  const char **why)
{
    const char *method = mcp_jsonrpc_get_string(request, "method");
    json_object *params;

    if (!method) {
        *why = "not a request (no method)";
        return -1;
    }
    if (mcp_fed_method_kind(method) != MCP_FED_ROUTED) {
        *why = apr_psprintf(p, "%s is not routed to one member", fed_quote(p, method));
        return -1;
    }
    if (!json_object_object_get_ex(request, "params", &params)
        || !json_object_is_type(params, json_type_object)) {
        *why = apr_psprintf(p, "%s needs params, an object", method);
        return -1;
    }
    if (strcmp(method, "tools/call") == 0) {
        return fed_route_by(p, members, n, method, params, "params", "name", "tool", why);
    }
    if (strcmp(method, "prompts/get") == 0) {
        return fed_route_by(p, members, n, method, params, "params", "name", "prompt", why);
    }
    if (strcmp(method, "completion/complete") == 0) {
        return fed_route_completion(p, members, n, params, why);
    }
    return fed_route_by(p, members, n, method, params, "params", "uri", NULL, why);
}

/* Tags obj[key] (an id) in place, when it can be. */
static void fed_tag_member(const mcp_fed_member_t *m, json_object *obj, const char *key)
{
    json_object *id, *tagged;

    if (json_object_object_get_ex(obj, key, &id) && (tagged = mcp_fed_tag_id(m->name, id))) {
        json_object_object_add(obj, key, tagged);
    }
}

/* Exposes obj[key] (a URI) in place, when it is a string. */
static void fed_expose_member(apr_pool_t *p, const mcp_fed_member_t *m, json_object *obj,
                              const char *key)
{
    const char *uri = mcp_jsonrpc_get_string(obj, key), *exposed;

    if (uri && (exposed = mcp_fed_expose_uri(p, m, uri)) != uri) {
        json_object_object_add(obj, key, json_object_new_string(exposed));
    }
}

/* A content block's resource URI (resource_link: uri; an embedded resource: resource.uri). */
static void fed_expose_block(apr_pool_t *p, const mcp_fed_member_t *m, json_object *block)
{
    const char *type = mcp_jsonrpc_get_string(block, "type");
    json_object *resource;

    if (!type) {
        return;
    }
    if (strcmp(type, "resource_link") == 0) {
        fed_expose_member(p, m, block, "uri");
    }
    else if (strcmp(type, "resource") == 0
             && json_object_object_get_ex(block, "resource", &resource)
             && json_object_is_type(resource, json_type_object)) {
        fed_expose_member(p, m, resource, "uri");
    }
}

/* The resource URIs in content blocks: content, an array of blocks (a tool's result) or one
 * block (a prompt message's). */
static void fed_expose_content(apr_pool_t *p, const mcp_fed_member_t *m, json_object *content)
{
    size_t i, n;

    if (json_object_is_type(content, json_type_object)) {
        fed_expose_block(p, m, content);
        return;
    }
    if (!json_object_is_type(content, json_type_array)) {
        return;
    }
    n = json_object_array_length(content);
    for (i = 0; i < n; i++) {
        json_object *block = json_object_array_get_idx(content, i);
        if (json_object_is_type(block, json_type_object)) {
            fed_expose_block(p, m, block);
        }
    }
}

void mcp_fed_outbound(apr_pool_t *p, const mcp_fed_member_t *m, json_object *msg,
                      const char *answered_method)
{
    const char *method;
    json_object *params, *result, *contents;
    size_t i, n;

    if (!json_object_is_type(msg, json_type_object)) {
        return;
    }
    if ((method = mcp_jsonrpc_get_string(msg, "method")) != NULL) {
        if (json_object_object_get_ex(msg, "id", NULL)) {
            fed_tag_member(m, msg, "id");
        }
        else if (json_object_object_get_ex(msg, "params", &params)
                 && json_object_is_type(params, json_type_object)) {
            if (strcmp(method, "notifications/resources/updated") == 0) {
                fed_expose_member(p, m, params, "uri");
            }
            else if (strcmp(method, "notifications/cancelled") == 0) {
                fed_tag_member(m, params, "requestId");
            }
        }
        return;
    }
    if (answered_method && strcmp(answered_method, "resources/read") == 0
        && json_object_object_get_ex(msg, "result", &result)
        && json_object_object_get_ex(result, "contents", &contents)
        && json_object_is_type(contents, json_type_array)) {
        n = json_object_array_length(contents);
        for (i = 0; i < n; i++) {
            json_object *item = json_object_array_get_idx(contents, i);

            if (json_object_is_type(item, json_type_object)) {
                fed_expose_member(p, m, item, "uri");
            }
        }
        return;
    }
    if (answered_method && json_object_object_get_ex(msg, "result", &result)
        && json_object_is_type(result, json_type_object)) {
        json_object *content, *messages;

        if (strcmp(answered_method, "tools/call") == 0
            && json_object_object_get_ex(result, "content", &content)) {
            fed_expose_content(p, m, content);
        }
        else if (strcmp(answered_method, "prompts/get") == 0
                 && json_object_object_get_ex(result, "messages", &messages)
                 && json_object_is_type(messages, json_type_array)) {
            n = json_object_array_length(messages);
            for (i = 0; i < n; i++) {
                json_object *pm = json_object_array_get_idx(messages, i);
                if (json_object_is_type(pm, json_type_object)
                    && json_object_object_get_ex(pm, "content", &content)) {
                    fed_expose_content(p, m, content);
                }
            }
        }
    }
}

/* ---- initialize --------------------------------------------------------------------------- */

/* What the members' capabilities add up to. */
typedef struct {
    int tools, tools_changed;
    int prompts, prompts_changed;
    int resources, resources_changed, resources_subscribe;
    int logging, completions;
    json_object *experimental;
} fed_caps_t;

/* Non-zero when caps[key] is an object; *flag_set |= its flag is true. */
static int fed_cap(json_object *caps, const char *key, const char *flag, int *flag_set)
{
    json_object *cap, *v;

    if (!json_object_object_get_ex(caps, key, &cap)
        || !json_object_is_type(cap, json_type_object)) {
        return 0;
    }
    if (flag && json_object_object_get_ex(cap, flag, &v)
        && json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v)) {
        *flag_set = 1;
    }
    return 1;
}

static void fed_caps_add(fed_caps_t *u, json_object *caps)
{
    json_object *exp;
    int ignored = 0;

    u->tools |= fed_cap(caps, "tools", "listChanged", &u->tools_changed);
    u->prompts |= fed_cap(caps, "prompts", "listChanged", &u->prompts_changed);
    u->resources |= fed_cap(caps, "resources", "listChanged", &u->resources_changed);
    fed_cap(caps, "resources", "subscribe", &u->resources_subscribe);
    u->logging |= fed_cap(caps, "logging", NULL, &ignored);
    u->completions |= fed_cap(caps, "completions", NULL, &ignored);
    if (json_object_object_get_ex(caps, "experimental", &exp)
        && json_object_is_type(exp, json_type_object)) {
        json_object_object_foreach(exp, key, val) {
            if (!u->experimental) {
                u->experimental = json_object_new_object();
            }
            if (!json_object_object_get_ex(u->experimental, key, NULL)) {
                json_object_object_add(u->experimental, key, json_object_get(val));
            }
        }
    }
}

/* caps[key] = {flag: true} when on (either flag may be NULL), {} otherwise. */
static void fed_cap_put(json_object *caps, const char *key, const char *flag, int on,
                        const char *flag2, int on2)
{
    json_object *cap = json_object_new_object();

    if (flag && on) {
        json_object_object_add(cap, flag, json_object_new_boolean(1));
    }
    if (flag2 && on2) {
        json_object_object_add(cap, flag2, json_object_new_boolean(1));
    }
    json_object_object_add(caps, key, cap);
}

static json_object *fed_caps_object(const fed_caps_t *u)
{
    json_object *caps = json_object_new_object();

    if (u->experimental) {
        json_object_object_add(caps, "experimental", u->experimental);
    }
    if (u->logging) {
        fed_cap_put(caps, "logging", NULL, 0, NULL, 0);
    }
    if (u->completions) {
        fed_cap_put(caps, "completions", NULL, 0, NULL, 0);
    }
    if (u->prompts) {
        fed_cap_put(caps, "prompts", "listChanged", u->prompts_changed, NULL, 0);
    }
    if (u->resources) {
        fed_cap_put(caps, "resources", "subscribe", u->resources_subscribe, "listChanged",
                    u->resources_changed);
    }
    if (u->tools) {
        fed_cap_put(caps, "tools", "listChanged", u->tools_changed, NULL, 0);
    }
    return caps;
}

json_object *mcp_fed_merge_initialize(apr_pool_t *p, json_object *const *results,
                                      const char *const *member_names, int n,
                                      const char *protocol_version, json_object *server_info)
{
    fed_caps_t u;
    json_object *out = json_object_new_object(), *caps;
    const char *instructions = NULL;
    int i;

    memset(&u, 0, sizeof(u));
    for (i = 0; i < n; i++) {
        const char *text;

        if (!json_object_is_type(results[i], json_type_object)) {
            continue;
        }
        if (json_object_object_get_ex(results[i], "capabilities", &caps)
            && json_object_is_type(caps, json_type_object)) {
            fed_caps_add(&u, caps);
        }
        if ((text = mcp_jsonrpc_get_string(results[i], "instructions")) != NULL && *text) {
            const char *para = apr_pstrcat(p, member_names[i] ? member_names[i] : "", ": ", text,
                                           NULL);

            instructions = instructions ? apr_pstrcat(p, instructions, "\n\n", para, NULL) : para;
        }
    }
    if (protocol_version) {
        json_object_object_add(out, "protocolVersion", json_object_new_string(protocol_version));
    }
    json_object_object_add(out, "capabilities", fed_caps_object(&u));
    if (server_info) {
        json_object_object_add(out, "serverInfo", json_object_get(server_info));
    }
    if (instructions) {
        json_object_object_add(out, "instructions", json_object_new_string(instructions));
    }
    return out;
}
