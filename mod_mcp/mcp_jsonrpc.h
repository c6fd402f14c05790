/* mcp_jsonrpc — JSON-RPC 2.0 as MCP uses it: parse an untrusted body, classify each message,
 * build error bodies.
 *
 * Pure code: no httpd headers. Parsed JSON lives as long as the pool given to the parser
 * (a cleanup drops json-c's reference), so callers never free anything by hand.
 */
#ifndef MCP_JSONRPC_H
#define MCP_JSONRPC_H

#include <apr_pools.h>
#include <json-c/json.h>

/* JSON-RPC and MCP error codes the gateway emits. */
#define MCP_JSONRPC_PARSE_ERROR       (-32700)
#define MCP_JSONRPC_INVALID_REQUEST   (-32600)
#define MCP_JSONRPC_METHOD_NOT_FOUND  (-32601)
#define MCP_JSONRPC_INVALID_PARAMS    (-32602)
#define MCP_JSONRPC_INTERNAL_ERROR    (-32603)
/* Implementation-defined server errors (-32000..-32099), as the MCP SDKs use them. */
#define MCP_JSONRPC_SERVER_ERROR      (-32000)  /* transport-level rejection (400/403/405/406/...) */
#define MCP_JSONRPC_SESSION_NOT_FOUND (-32001)  /* 404: unknown, terminated or foreign session   */
#define MCP_JSONRPC_BACKEND_ERROR     (-32002)  /* 502/504: the backend failed or is unreachable  */
#define MCP_JSONRPC_UNAVAILABLE       (-32003)  /* 503: the gateway's own storage is unavailable  */
#define MCP_JSONRPC_LIMIT_REACHED     (-32004)  /* 429: a configured limit (named in the message) */

/* Nesting limit for untrusted input (json-c's default is 32). */
#define MCP_JSONRPC_MAX_DEPTH 64

typedef enum {
    MCP_MSG_INVALID = 0,
    MCP_MSG_REQUEST,        /* method + id                  */
    MCP_MSG_NOTIFICATION,   /* method, no id                */
    MCP_MSG_RESPONSE,       /* id + result                  */
    MCP_MSG_ERROR           /* id + error (id may be null)  */
} mcp_msg_kind_t;

typedef struct mcp_jsonrpc_msg_t {
    mcp_msg_kind_t kind;
    json_object   *obj;            /* the message itself (borrowed from the body)          */
    const char    *method;         /* requests and notifications; NULL otherwise           */
    json_object   *id;             /* requests and responses; NULL otherwise               */
    const char    *invalid_reason; /* MCP_MSG_INVALID: what is wrong, for the error body   */
} mcp_jsonrpc_msg_t;

typedef struct mcp_jsonrpc_body_t {
    json_object       *root;
    int                is_batch;       /* the body was a JSON array                        */
    int                count;          /* messages (1 unless a batch)                      */
    mcp_jsonrpc_msg_t *msgs;
    int                n_requests;
    int                n_notifications;
    int                n_responses;    /* responses and errors                            */
    int                n_invalid;
} mcp_jsonrpc_body_t;

typedef enum {
    MCP_JSONRPC_OK = 0,
    MCP_JSONRPC_ERR_PARSE,     /* not JSON (or nested deeper than the limit) -> 400, -32700 */
    MCP_JSONRPC_ERR_INVALID,   /* JSON but not JSON-RPC                      -> 400, -32600 */
    MCP_JSONRPC_ERR_TOO_LONG   /* a batch of more than max_batch messages    -> 413, -32600 */
} mcp_jsonrpc_status_t;

/* Parses and classifies len bytes. On MCP_JSONRPC_OK, *out is set and every message is valid.
 * On an error, *reason (never NULL) says what is wrong in words fit for a client, and *out may
 * still be set (for INVALID) so that the caller can echo an id. */
mcp_jsonrpc_status_t mcp_jsonrpc_parse(apr_pool_t *p, const char *buf, apr_size_t len,
                                       mcp_jsonrpc_body_t **out, const char **reason);

/* The same, refusing a batch of more than max_batch messages (0: no limit) as soon as its
 * length is known, before any of its messages is parsed: MCP_JSONRPC_ERR_TOO_LONG, with *out set
 * (is_batch, count; root and msgs NULL). The length comes from mcp_jsonrpc_array_length, one
 * pass over the bytes without an allocation (json-c's tree costs about twenty times the text in
 * memory and most of the time), so refusing costs far less than serving. Every step costs time
 * linear in len. */
mcp_jsonrpc_status_t mcp_jsonrpc_parse_limited(apr_pool_t *p, const char *buf, apr_size_t len,
                                               int max_batch, mcp_jsonrpc_body_t **out,
                                               const char **reason);

/* The number of elements of the JSON array that buf holds, counted in one pass without an
 * allocation: 1 and *n when buf is, but for leading and trailing whitespace, one array whose
 * brackets and braces balance (outside strings) and nest no deeper than MCP_JSONRPC_MAX_DEPTH;
 * 0 otherwise (not an array, or not JSON: the parser says why). The elements themselves are
 * not checked: *n is what a parse finds when the text is JSON ("[1,,2]" counts 3). */
int mcp_jsonrpc_array_length(const char *buf, apr_size_t len, apr_size_t *n);

/* Classifies one already-parsed value (used for each batch element and for backend output). */
void mcp_jsonrpc_classify(json_object *obj, mcp_jsonrpc_msg_t *msg);

/* What the body's messages are, joined by ", " (a request's or notification's method,
 * "response" for a response or error, "-" for an invalid message): the mcp-method note of a
 * batch. Linear in the number of messages (one allocation). */
const char *mcp_jsonrpc_methods_joined(apr_pool_t *p, const mcp_jsonrpc_body_t *body);

/* Non-zero when the body is exactly one request whose method is m. */
int mcp_jsonrpc_is_single_request(const mcp_jsonrpc_body_t *body, const char *m);

/* Index of the first request with method m in the body, or -1. */
int mcp_jsonrpc_find_method(const mcp_jsonrpc_body_t *body, const char *m);

/* The id an error answer to this message should carry: its "id" member when that is a string or
 * an integer, even if the message is otherwise invalid; NULL (JSON null) when there is none. */
json_object *mcp_jsonrpc_reply_id(const mcp_jsonrpc_msg_t *msg);

/* The span buf[*off .. *off + *n) of the value of the last member named key of the JSON object
 * that buf holds (whitespace around it allowed), as written: non-zero when found. 0 as well when
 * a member's name holds an escape (it might spell key) or buf is no object. buf must be JSON
 * (parsed already): this only walks it. */
int mcp_jsonrpc_member_span(const char *buf, apr_size_t len, const char *key,
                            apr_size_t *off, apr_size_t *n);

/* A string id holding a surrogate escape (\ud800 alone, or a pair) reads in json-c as U+FFFD, and
 * so would be written back: a client that sent "a\ud800" would get "a\ufffd" and could not match
 * the answer to its request. When id (the "id" member of the message that buf holds, parsed from
 * it) is such a string, this makes id (and its deep copies) serialize as the text the message
 * has, and returns non-zero; else it changes nothing. For the answers the gateway writes itself
 * (the era bridge, errors); its value for comparisons (json_object_equal) stays json-c's. */
int mcp_jsonrpc_keep_id_as_sent(json_object *id, const char *buf, apr_size_t len);

/* The same for an id that is also matched by its json-c text (the 2025 relay keys a request's
 * answers by it): id itself when there is nothing to keep, else a copy (released with p) that
 * is written as sent, for the answers the gateway writes itself. */
json_object *mcp_jsonrpc_id_as_sent(apr_pool_t *p, json_object *id, const char *buf,
                                    apr_size_t len);

/* Serializes a value the way the gateway writes JSON (plain, '/' unescaped, no newlines). */
const char *mcp_jsonrpc_to_string(apr_pool_t *p, json_object *obj, apr_size_t *len_out);

/* {"jsonrpc":"2.0","id":<id or null>,"error":{"code":code,"message":message[,"data":data]}}.
 * id and data are borrowed (not consumed); either may be NULL. The body is valid JSON whatever
 * message holds: a message that is not UTF-8 is quoted first (mcp_text_quote). */
const char *mcp_jsonrpc_error_body(apr_pool_t *p, json_object *id, int code,
                                   const char *message, json_object *data);

/* A string member of obj, or NULL when absent, not a string, or holding a NUL character
 * ("\u0000": the C string would end early). */
const char *mcp_jsonrpc_get_string(json_object *obj, const char *key);

/* Parses one JSON value (a message read from a backend); NULL when it is not JSON. The result
 * is released with pool p. */
json_object *mcp_jsonrpc_parse_value(apr_pool_t *p, const char *buf, apr_size_t len);

/* The same; when it returns NULL, *reason (if reason is non-NULL) says why in words fit for a
 * client ("nesting too deep", "invalid utf-8 string", ...). */
json_object *mcp_jsonrpc_parse_value_ex(apr_pool_t *p, const char *buf, apr_size_t len,
                                        const char **reason);

/* Non-zero when buf is one JSON-RPC error response (what an MCP server answers with a 404 for a
 * session it does not know, as opposed to a proxy's or web server's page). */
int mcp_jsonrpc_is_error_message(apr_pool_t *p, const char *buf, apr_size_t len);

/* What a request names, for logs and per-name authorization: the kind and the name of the tool
 * (tools/call: params.name), prompt (prompts/get: params.name) or resource (resources/read,
 * resources/subscribe, resources/unsubscribe: params.uri) it is about. MCP_TARGET_NONE, *name
 * NULL, for every other message, and when the name is absent or not a string. */
typedef enum {
    MCP_TARGET_NONE = 0,
    MCP_TARGET_TOOL,
    MCP_TARGET_PROMPT,
    MCP_TARGET_RESOURCE
} mcp_target_kind_t;

mcp_target_kind_t mcp_jsonrpc_target(const mcp_jsonrpc_msg_t *msg, const char **name);

#endif
