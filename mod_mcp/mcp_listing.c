/* mcp_listing — see mcp_listing.h. */
#include <string.h>

#include "mcp_listing.h"

mcp_target_kind_t mcp_listing_kind(const char *method)
{
    if (!method) {
        return MCP_TARGET_NONE;
    }
    if (strcmp(method, "tools/list") == 0) {
        return MCP_TARGET_TOOL;
    }
    if (strcmp(method, "prompts/list") == 0) {
        return MCP_TARGET_PROMPT;
    }
    if (strcmp(method, "resources/list") == 0) {
        return MCP_TARGET_RESOURCE;
    }
    return MCP_TARGET_NONE;
}

int mcp_listing_filter(json_object *response, mcp_target_kind_t kind, mcp_listing_keep_fn *keep,
                       void *baton)
{
    static const char *const member[] = { NULL, "tools", "prompts", "resources" };
    static const char *const name_key[] = { NULL, "name", "name", "uri" };
    json_object *result, *items, *kept;
    size_t i, n;
    int removed = 0;

    if (kind == MCP_TARGET_NONE || !json_object_is_type(response, json_type_object)
        || !json_object_object_get_ex(response, "result", &result)
        || !json_object_is_type(result, json_type_object)
        || !json_object_object_get_ex(result, member[kind], &items)
        || !json_object_is_type(items, json_type_array)) {
        return 0;
    }
    n = json_object_array_length(items);
    kept = json_object_new_array_ext((int)n);
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(items, i), *name = NULL;

        if (json_object_is_type(item, json_type_object)
            && json_object_object_get_ex(item, name_key[kind], &name)
            && json_object_is_type(name, json_type_string)
            && keep(baton, kind, json_object_get_string(name))) {
            json_object_array_add(kept, json_object_get(item));
        }
        else {
            removed++;
        }
    }
    if (removed) {
        json_object_object_add(result, member[kind], kept);   /* frees the old array */
    }
    else {
        json_object_put(kept);
    }
    return removed;
}
