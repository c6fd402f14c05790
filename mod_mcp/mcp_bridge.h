/* mcp_bridge — translating between a 2026-07-28 (stateless) client and a 2025-era backend.
 *
 * The era bridge (MCPEraBridge) serves a modern request through a backend that speaks the
 * session era only. This file holds its pure translations; mod_mcp_bridge does the I/O.
 *
 *   going in   the client's request, its id replaced by the gateway's backend-side id (calls
 *              sharing one pooled backend session never collide), the io.modelcontextprotocol/...
 *              _meta keys and the retry members (inputResponses, requestState) removed;
 *              progressToken and trace context (traceparent, tracestate, baggage) kept;
 *   pooled     a backend session is keyed by the canonical text of the request's client
 *              capabilities (mcp_bridge_caps_key) and started with mcp_bridge_initialize;
 *   coming out the backend's response to the backend-side id gets the client's id back, a
 *              result gets resultType "complete", ttlMs/cacheScope on list/read/discover
 *              results (when the backend gave none: 0 and "private", a pooled session being
 *              the principal's), and _meta["io.modelcontextprotocol/serverInfo"]; retired
 *              error codes are mapped (-32002 -> -32602, -32042 -> -32602 with a message
 *              when it names no elicitation: one that does becomes a round,
 *              mcp_bridge_url_elicitations);
 *              notifications/message passes only at or above the logLevel the request asked
 *              for (the pooled session is set to debug when the backend logs at all);
 *   discover   server/discover's result from the backend's InitializeResult;
 *   rounds     the backend's server->client requests (sampling/createMessage, elicitation/create,
 *              roots/list) of one round become an InputRequiredResult whose inputRequests are
 *              keyed by each request's own id (mcp_bridge_input_key: a string id as it is, an
 *              integer in decimal); the retry's inputResponses become JSON-RPC responses
 *              carrying the backend's ids again, numbers as numbers (mcp_bridge_input_responses);
 *              a request for a capability the client did not declare is refused (-32021,
 *              mcp_bridge_missing_capability); a backend's ping is answered (mcp_bridge_pong).
 * Pure code: no httpd headers.
 */
#ifndef MCP_BRIDGE_H
#define MCP_BRIDGE_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>

/* The revision the gateway speaks to a 2025-era backend on a pooled session. */
#define MCP_BRIDGE_BACKEND_VERSION "2025-11-25"

/* The _meta key that carries the server's identity on 2026-07-28 results. */
#define MCP_BRIDGE_META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
#define MCP_BRIDGE_META_LOG_LEVEL   "io.modelcontextprotocol/logLevel"

/* Serialises v with every object's keys sorted, recursively (plain, no spaces): equal JSON
 * values give equal texts whatever their key order. NULL gives "null". */
const char *mcp_bridge_canonical(apr_pool_t *p, json_object *v);

/* The pooling key of a request: the canonical text of params._meta's clientCapabilities
 * ("{}" when there is none). */
const char *mcp_bridge_caps_key(apr_pool_t *p, json_object *msg);

/* A pool key's name in 40 hex digits (SHA-1): its principal (NULL: none), backend URL and
 * capabilities key (mcp_bridge_caps_key). Short enough for mcp_refresh. */
const char *mcp_bridge_pool_tag(apr_pool_t *p, const char *principal, const char *backend_url,
                                const char *caps_key);

/* The initialize request sent on the client's behalf to start a pooled session: revision
 * MCP_BRIDGE_BACKEND_VERSION, the request's clientCapabilities and clientInfo (or the gateway's
 * name when it gave none), with JSON-RPC id id. */
const char *mcp_bridge_initialize(apr_pool_t *p, json_object *msg, apr_int64_t id,
                                  const char *gateway_version);

/* The request as it goes to the backend: a copy with id backend_id, without the
 * io.modelcontextprotocol/... _meta keys (an emptied _meta goes) and without inputResponses and
 * requestState. The id is its first member: the text is mcp_bridge_request_join's of
 * mcp_bridge_request_tail's, so that a statement that makes the id can store the same text as
 * '{"id":' || id || tail. */
const char *mcp_bridge_request_in(apr_pool_t *p, json_object *msg, apr_int64_t backend_id);

/* The request as it goes to the backend after its id: its other members, each after a comma,
 * and the closing brace. NULL when msg is not an object. */
const char *mcp_bridge_request_tail(apr_pool_t *p, json_object *msg);

/* {"id":backend_id followed by tail (NULL when tail is). */
const char *mcp_bridge_request_join(apr_pool_t *p, apr_int64_t backend_id, const char *tail);

/* The binding of a round to its request: a canonical text of method, name (or uri) and
 * arguments, hashed (SHA-1, hex). A retry must give the same. */
const char *mcp_bridge_request_digest(apr_pool_t *p, json_object *msg);

/* Non-zero for the methods 2026-07-28 removed that a 2025 backend would still answer
 * (initialize, ping, logging/setLevel, resources/subscribe, resources/unsubscribe): the bridge
 * answers them 404, -32601, as a 2026-07-28 server does. */
int mcp_bridge_method_is_gone(const char *method);

/* A 2025 error code as 2026-07-28 has it (retired codes mapped), else the code itself. */
int mcp_bridge_error_code(int code);

/* Non-zero for the methods whose results carry ttlMs/cacheScope. */
int mcp_bridge_is_cacheable(const char *method);

/* What a backend message is to the bridged call. */
typedef enum {
    MCP_BRIDGE_OTHER = 0,      /* dropped (an unrelated response, a notification not relayed) */
    MCP_BRIDGE_NOTIFICATION,   /* relayed to the client as it is (progress, logs asked for)   */
    MCP_BRIDGE_INPUT_REQUEST,  /* sampling/elicitation/roots: an input-required round         */
    MCP_BRIDGE_PING,           /* the backend's ping: answered by the gateway (mcp_bridge_pong) */
    MCP_BRIDGE_FINAL           /* the response to the call: translated, then the call ends     */
} mcp_bridge_kind_t;

/* Classifies one backend message (parsed) for the call whose backend-side id is backend_id;
 * log_min: the lowest log level the request asked for (mcp_bridge_log_level of its _meta
 * logLevel), or -1 when it asked for none: notifications/message of a lower level, or of any
 * level without a logLevel, are not relayed. */
mcp_bridge_kind_t mcp_bridge_classify(json_object *msg, apr_int64_t backend_id, int log_min);

/* The rank of a log level (debug 0 ... emergency 7), or -1 for anything else. */
int mcp_bridge_log_level(const char *level);

/* The log level a request asks for in _meta["io.modelcontextprotocol/logLevel"]: its rank, or
 * -1 when absent or unknown. */
int mcp_bridge_request_log_level(json_object *msg);

/* The final response translated for the client: id client_id, the result completed as said
 * above for method (or the error code mapped); server_info (may be NULL) is stamped in _meta.
 * Returns the text, allocated in p. */
const char *mcp_bridge_response_out(apr_pool_t *p, json_object *response, json_object *client_id,
                                    const char *method, json_object *server_info);

/* server/discover's response (id client_id) from an InitializeResult (JSON text): the
 * supportedVersions given (", "-separated), capabilities (the 2026 set), serverInfo,
 * instructions, ttlMs 0 and cacheScope "private". NULL when init_result is not an object. */
const char *mcp_bridge_discover(apr_pool_t *p, const char *init_result, json_object *client_id,
                                const char *supported);

/* The serverInfo member of an InitializeResult (JSON text), or NULL. Released with p. */
json_object *mcp_bridge_server_info(apr_pool_t *p, const char *init_result);

/* The name a round gives the backend request with this id: "input-<n>" for the n-th request of
 * the round (n >= 1). */
const char *mcp_bridge_input_name(apr_pool_t *p, int n);

/* The key of a backend request (parsed) in a round's inputRequests: its JSON-RPC id, a string
 * as it is, an integer in decimal ("7" for id 7; the round stores the id itself, so the answer
 * goes back with the number); a request without a usable id gets mcp_bridge_input_name(n).
 * A key that another request of the same round has already is the caller's to replace. */
const char *mcp_bridge_input_key(apr_pool_t *p, json_object *request, int n);

/* The client capability a backend request needs: "sampling" (sampling/createMessage),
 * "elicitation" (elicitation/create), "roots" (roots/list), or NULL. */
const char *mcp_bridge_input_capability(json_object *request);

/* The capability request needs that the client's request msg did not declare in
 * _meta["io.modelcontextprotocol/clientCapabilities"] (an object member), or NULL. */
const char *mcp_bridge_missing_capability(json_object *msg, json_object *request);

/* An InputRequiredResult response (id client_id): inputRequests maps names[i] to
 * {method, params} of requests[i] (json_object *, parsed backend requests); requestState state. */
const char *mcp_bridge_input_required(apr_pool_t *p, json_object *client_id,
                                      const apr_array_header_t *names,
                                      const apr_array_header_t *requests, const char *state,
                                      json_object *server_info);

/* pending: a JSON object text mapping each name of a round to the backend's request id (as
 * mod_mcp_bridge stores it). For each of them the retry's params.inputResponses must hold an
 * object: *out (const char *) gets one JSON-RPC response per name, {"jsonrpc":"2.0","id":<the
 * backend's id>,"result":<the client's answer>}. Returns NULL, or what is wrong (in words for
 * the client). */
const char *mcp_bridge_input_responses(apr_pool_t *p, json_object *retry, const char *pending,
                                       apr_array_header_t **out);

/* The retry members of a request: params.requestState (a string, else NULL); *has_responses
 * when params.inputResponses is present. */
const char *mcp_bridge_request_state(json_object *msg, int *has_responses);

/* subscriptions/listen: what the bridge can honour of the request's params.notifications,
 * given the backend's capabilities (an InitializeResult's, JSON text): toolsListChanged,
 * promptsListChanged, resourcesListChanged only where the backend declares listChanged, and
 * resourceSubscriptions (the URIs asked for) only when it declares resources.subscribe. The
 * filter object's text ("{}" when nothing can be honoured). */
const char *mcp_bridge_listen_ack(apr_pool_t *p, json_object *msg, const char *init_result);

/* A backend notification for a listen whose acknowledged filter is acked (JSON text): the
 * notification tagged with _meta["io.modelcontextprotocol/subscriptionId"] = listen_id when the
 * filter lets it through (a list change asked for, resources/updated of a URI asked for), else
 * NULL (everything else: logs, progress, requests, responses). */
const char *mcp_bridge_listen_pass(apr_pool_t *p, json_object *msg, const char *acked,
                                   json_object *listen_id);

/* The 2025-11-25 error a backend answers when the call needs URL-mode elicitations first. */
#define MCP_BRIDGE_URL_ELICITATION_REQUIRED (-32042)

/* A backend's -32042 response (parsed) as a round: for each object of error.data.elicitations,
 * an elicitation/create request (json_object *, in p) {"jsonrpc":"2.0","id":<its elicitationId,
 * else "url-<n>">,"method":"elicitation/create","params":<the elicitation, mode "url">}, in an
 * array for mcp_bridge_input_required. NULL when the response is not -32042 or names none (it
 * is then mapped to -32602 as mcp_bridge_response_out does). */
apr_array_header_t *mcp_bridge_url_elicitations(apr_pool_t *p, json_object *response);

/* The answer to a backend's ping request (parsed): {"jsonrpc":"2.0","id":<its id>,"result":{}}. */
const char *mcp_bridge_pong(apr_pool_t *p, json_object *ping);

/* notifications/cancelled for the backend-side id, with a reason. */
const char *mcp_bridge_cancelled(apr_pool_t *p, apr_int64_t backend_id, const char *reason);

#endif
