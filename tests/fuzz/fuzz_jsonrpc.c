/* libFuzzer harness for mcp_jsonrpc: the parser and classifier of untrusted request bodies and
 * backend messages.
 *
 * Each input is a body as a client could POST it (any bytes, NULs included). Checked:
 *  1. mcp_jsonrpc_parse keeps its contract: a reason exactly when it fails, *out set on OK and
 *     INVALID and not on PARSE, counts that add up, every message valid on OK;
 *  2. mcp_jsonrpc_parse_value accepts exactly the bodies mcp_jsonrpc_parse does not refuse as
 *     unparsable;
 *  3. a parsed body written out again (mcp_jsonrpc_to_string, as the gateway writes JSON)
 *     parses again to the same classification — what the gateway writes, it can read;
 *  4. every message's reply id makes an error body that parses as a JSON-RPC error carrying
 *     that id; find_method and is_single_request agree with the classification;
 *  5. mcp_jsonrpc_array_length, the allocation-free pre-count, agrees with the parser: every
 *     body that parses as an array is counted, with the parser's length; a body it counts is
 *     refused by mcp_jsonrpc_parse_limited exactly when it counts more than the limit (and
 *     then without a tree), and parsed as without a limit otherwise;
 *  6. mcp_jsonrpc_methods_joined names each message once, joined by ", ";
 *  7. mcp_jsonrpc_member_span walks any bytes within them; on a parsed object, the span it finds
 *     for "id" holds that member's value (and it finds one whenever the object has an "id" and
 *     the body no backslash); an id kept as sent (mcp_jsonrpc_keep_id_as_sent) is written as a
 *     text that reads back as the same value, and so is its message.
 */

#include "fuzz.h"

#include <json-c/json.h>

#include "mcp_jsonrpc.h"

static void check_body(apr_pool_t *p, const mcp_jsonrpc_body_t *b)
{
    int i, req = 0, note = 0, resp = 0, bad = 0;

    FUZZ_CHECK(b->count >= 0);
    FUZZ_CHECK(b->count == 0 || b->msgs);
    for (i = 0; i < b->count; i++) {
        const mcp_jsonrpc_msg_t *m = &b->msgs[i];
        json_object *rid;
        const char *err;
        mcp_jsonrpc_body_t *eb;
        const char *why;

        switch (m->kind) {
        case MCP_MSG_REQUEST:
            req++;
            FUZZ_CHECK(m->method && *m->method && m->id);
            FUZZ_CHECK(strlen(m->method) == (size_t)json_object_get_string_len(
                                                json_object_object_get(m->obj, "method")));
            FUZZ_CHECK(mcp_jsonrpc_find_method(b, m->method) >= 0
                       && mcp_jsonrpc_find_method(b, m->method) <= i);
            break;
        case MCP_MSG_NOTIFICATION:
            note++;
            FUZZ_CHECK(m->method && *m->method && !m->id);
            break;
        case MCP_MSG_RESPONSE:
            resp++;
            FUZZ_CHECK(!m->method && m->id);
            break;
        case MCP_MSG_ERROR:
            resp++;
            FUZZ_CHECK(!m->method);     /* id may be JSON null, which json-c holds as NULL */
            break;
        default:
            bad++;
            FUZZ_CHECK(m->invalid_reason && *m->invalid_reason);
            break;
        }

        rid = mcp_jsonrpc_reply_id(m);
        FUZZ_CHECK(!rid || json_object_is_type(rid, json_type_string)
                   || json_object_is_type(rid, json_type_int));
        err = mcp_jsonrpc_error_body(p, rid, MCP_JSONRPC_INVALID_REQUEST, "fuzz", NULL);
        FUZZ_CHECK(err);
        FUZZ_CHECK(mcp_jsonrpc_parse(p, err, strlen(err), &eb, &why) == MCP_JSONRPC_OK);
        FUZZ_CHECK(eb->count == 1 && eb->msgs[0].kind == MCP_MSG_ERROR);
        if (rid)
            FUZZ_CHECK(json_object_equal(eb->msgs[0].id, rid));
        else
            FUZZ_CHECK(json_object_is_type(eb->msgs[0].id, json_type_null));
    }
    FUZZ_CHECK(req == b->n_requests && note == b->n_notifications && resp == b->n_responses
               && bad == b->n_invalid);
    FUZZ_CHECK(mcp_jsonrpc_is_single_request(b, "initialize")
               == (!b->is_batch && b->count == 1 && b->msgs[0].kind == MCP_MSG_REQUEST
                   && !strcmp(b->msgs[0].method, "initialize")));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p;
    mcp_jsonrpc_body_t *body = NULL, *again = NULL;
    const char *reason = NULL, *reason2 = NULL, *text;
    mcp_jsonrpc_status_t st, st2;
    apr_size_t len;
    int i;

    apr_pool_create(&p, fuzz_root());

    st = mcp_jsonrpc_parse(p, (const char *)data, size, &body, &reason);
    switch (st) {
    case MCP_JSONRPC_OK:
        FUZZ_CHECK(body && !reason && body->count >= 1 && body->n_invalid == 0);
        check_body(p, body);
        break;
    case MCP_JSONRPC_ERR_INVALID:
        FUZZ_CHECK(body && reason && *reason);
        check_body(p, body);
        break;
    case MCP_JSONRPC_ERR_PARSE:
        FUZZ_CHECK(!body && reason && *reason);
        break;
    default:
        FUZZ_CHECK(!"unknown status");
    }

    /* parse_value: the same strict parser, without the classification */
    if (st == MCP_JSONRPC_ERR_PARSE) {
        FUZZ_CHECK(mcp_jsonrpc_parse_value(p, (const char *)data, size) == NULL);
    }
    else if (body->root) {
        json_object *v = mcp_jsonrpc_parse_value(p, (const char *)data, size);
        FUZZ_CHECK(v && json_object_equal(v, body->root));
    }

    /* written out as the gateway writes JSON, it reads back the same */
    if (st != MCP_JSONRPC_ERR_PARSE && body->root) {
        text = mcp_jsonrpc_to_string(p, body->root, &len);
        FUZZ_CHECK(text && strlen(text) == len);
        FUZZ_CHECK(!memchr(text, '\n', len));
        st2 = mcp_jsonrpc_parse(p, text, len, &again, &reason2);
        FUZZ_CHECK(st2 == st);
        FUZZ_CHECK(again->count == body->count && again->is_batch == body->is_batch);
        for (i = 0; i < body->count; i++)
            FUZZ_CHECK(again->msgs[i].kind == body->msgs[i].kind);
        FUZZ_CHECK(json_object_equal(again->root, body->root));
    }

    /* the pre-count agrees with the parser, and the limit refuses by it alone */
    {
        apr_size_t n = 0;
        int counted = mcp_jsonrpc_array_length((const char *)data, size, &n);
        mcp_jsonrpc_body_t *lb = NULL;
        const char *lr = NULL;
        int limit = (int)(size % 7);   /* 0: no limit */

        if (st != MCP_JSONRPC_ERR_PARSE && body->is_batch) {
            FUZZ_CHECK(counted && n == json_object_array_length(body->root));
        }
        st2 = mcp_jsonrpc_parse_limited(p, (const char *)data, size, limit, &lb, &lr);
        if (counted && limit > 0 && n > (apr_size_t)limit) {
            FUZZ_CHECK(st2 == MCP_JSONRPC_ERR_TOO_LONG && lb && lb->is_batch
                       && lb->count == (int)n && !lb->root && !lb->msgs && lr && *lr);
        }
        else {
            FUZZ_CHECK(st2 == st && (!lb) == (!body));
            FUZZ_CHECK(!lb || lb->count == body->count);
        }
        if (body && body->msgs) {
            const char *joined = mcp_jsonrpc_methods_joined(p, body);
            apr_size_t want = 0;

            for (i = 0; i < body->count; i++) {
                const mcp_jsonrpc_msg_t *m = &body->msgs[i];
                want += (i ? 2 : 0) + strlen(m->method ? m->method
                                             : m->kind == MCP_MSG_INVALID ? "-" : "response");
            }
            FUZZ_CHECK(strlen(joined) == want);
        }
    }

    /* the span of a member, and an id written as sent */
    {
        apr_size_t off = 0, n = 0;
        int found = mcp_jsonrpc_member_span((const char *)data, size, "id", &off, &n);
        json_object *id = NULL;

        FUZZ_CHECK(!found || (off <= size && n <= size - off));
        if (st != MCP_JSONRPC_ERR_PARSE && body->root && !body->is_batch
            && json_object_is_type(body->root, json_type_object)) {
            int has = json_object_object_get_ex(body->root, "id", &id);

            if (found) {
                json_object *v = mcp_jsonrpc_parse_value(p, (const char *)data + off, n);
                FUZZ_CHECK(has && (v ? json_object_equal(v, id) : !id));
            }
            else {
                FUZZ_CHECK(!has || memchr(data, '\\', size));
            }
            if (has && mcp_jsonrpc_keep_id_as_sent(id, (const char *)data, size)) {
                const char *idt = mcp_jsonrpc_to_string(p, id, &len);
                json_object *back = mcp_jsonrpc_parse_value(p, idt, len);

                FUZZ_CHECK(back && json_object_equal(back, id));
                text = mcp_jsonrpc_to_string(p, body->root, &len);
                back = mcp_jsonrpc_parse_value(p, text, len);
                FUZZ_CHECK(back && json_object_equal(back, body->root));
            }
        }
    }

    /* each element of a batch, classified on its own, is classified the same */
    if (body && body->is_batch) {
        for (i = 0; i < body->count; i++) {
            mcp_jsonrpc_msg_t m;
            mcp_jsonrpc_classify(body->msgs[i].obj, &m);
            FUZZ_CHECK(m.kind == body->msgs[i].kind);
        }
    }

    apr_pool_destroy(p);
    return 0;
}
