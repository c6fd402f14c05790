/* unit_json.h — parse(json): a JSON text parsed in the test case's pool (unit_pool.h), failing
 * the case when it is not JSON. For the test programs of translations (mcp_bridge, mcp_shim). */
#ifndef MCP_UNIT_JSON_H
#define MCP_UNIT_JSON_H

#include <string.h>

#include <check.h>

#include "unit_pool.h"

#include "mcp_jsonrpc.h"

static json_object *parse(const char *json)
{
    json_object *v = mcp_jsonrpc_parse_value(pool, json, strlen(json));

    ck_assert_ptr_nonnull(v);
    return v;
}

#endif
