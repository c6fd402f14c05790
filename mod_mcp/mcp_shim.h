/* mcp_shim — the era shim's translations: a 2025-era client (initialize, Mcp-Session-Id) served
 * by the gateway in front of a 2026-only backend (MCPBackendProtocols lists only 2026-07-28, or
 * mod_mcp_eras learned so).
 *
 * The gateway keeps the client's session itself (mcp.sessions, no backend session id) and
 * speaks the stateless revision to the backend:
 *   - initialize is answered from the backend's server/discover result
 *     (mcp_shim_initialize_result): the client's version when the gateway serves it with
 *     sessions, else the newest it does; capabilities, serverInfo, instructions carried over;
 *   - every later request goes out stamped (mcp_shim_stamp): the session's client capabilities
 *     and clientInfo, its logging/setLevel level as logLevel, and protocolVersion 2026-07-28
 *     in params._meta, and the headers the
 *     revision wants (mcp_shim_headers: Mcp-Method, Mcp-Name);
 *   - what comes back is cleaned (mcp_shim_clean): resultType, ttlMs, cacheScope, the
 *     serverInfo and subscriptionId _meta keys are removed (a 2025 client's schema has none);
 *   - an InputRequiredResult becomes a round (mcp_shim_round_t): its inputRequests become
 *     server->client requests with ids the gateway mints ("mcp-shim-<stream>-<round>-<n>"),
 *     the client's answers are collected and the request retried with a new id,
 *     inputResponses keyed as the backend keyed its inputRequests, and the requestState.
 * Pure code: no httpd headers.
 */
#ifndef MCP_SHIM_H
#define MCP_SHIM_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>

/* The revision the shim speaks to the backend. */
#define MCP_SHIM_VERSION "2026-07-28"

/* Minted server->client request ids start with this. */
#define MCP_SHIM_ID_PREFIX "mcp-shim-"

/* MCPShimMaxRounds' default: input-required rounds one request may take. */
#define MCP_SHIM_DEFAULT_MAX_ROUNDS 8

/* The InitializeResult for a client that asked for client_version (may be NULL), made from a
 * server/discover result. *negotiated gets the version it names. A new object (put it). */
json_object *mcp_shim_initialize_result(json_object *discover, const char *client_version,
                                        const char **negotiated);

/* What makes a server/discover result unusable by the shim, or NULL when it is usable: an
 * object whose supportedVersions (an array of strings) lists 2026-07-28, whose capabilities, when
 * present, is an object. The reason is a static string. */
const char *mcp_shim_discover_problem(json_object *discover);

/* The time a discover result may be reused, in milliseconds: its ttlMs when positive, else
 * dflt_ms; never more than an hour. */
long mcp_shim_discover_ttl(json_object *discover, long dflt_ms);

/* What a request is stamped with, from the stored session. */
typedef struct mcp_shim_client_t {
    const char *caps_json;     /* clientCapabilities ("{}" when NULL or not an object)      */
    const char *info_json;     /* clientInfo (left out when NULL or not an object)          */
    const char *log_level;     /* _meta.logLevel (left out when NULL): the session's
                                * logging/setLevel                                         */
} mcp_shim_client_t;

/* The request as the backend gets it: a copy of request with params._meta stamped
 * (protocolVersion, clientCapabilities, clientInfo, logLevel as client says); the id replaced
 * by id when id is not NULL; inputResponses and requestState set when not NULL (a retry). Text
 * in p. */
const char *mcp_shim_stamp(apr_pool_t *p, json_object *request, const mcp_shim_client_t *client,
                           json_object *id, json_object *input_responses,
                           const char *request_state, apr_size_t *len);

/* The headers of a stamped request ("Name: value" lines in p): Mcp-Method, and Mcp-Name for
 * the methods that name something (mcp_era_name_member). A value that is not plain visible
 * ASCII goes =?base64?...?= encoded. */
apr_array_header_t *mcp_shim_headers(apr_pool_t *p, json_object *request);

/* Removes the revision's own fields from a message in place: result.resultType, .ttlMs,
 * .cacheScope, and the _meta keys io.modelcontextprotocol/serverInfo and
 * io.modelcontextprotocol/subscriptionId (of result or params); a _meta left empty goes. */
void mcp_shim_clean(json_object *msg);

/* Non-zero when result (a response's result) is an InputRequiredResult. */
int mcp_shim_is_input_required(json_object *result);

/* The stream id a minted id names (0: not a minted id). */
apr_int64_t mcp_shim_minted_stream(const char *id);

typedef enum {
    MCP_SHIM_ANSWER_TAKEN = 0,    /* one more request of the round is answered          */
    MCP_SHIM_ANSWER_UNKNOWN,      /* no request of the round has this id                */
    MCP_SHIM_ANSWER_DUPLICATE,    /* answered already                                   */
    MCP_SHIM_ANSWER_REFUSED       /* the client answered with an error                  */
} mcp_shim_answer_t;

/* One input-required round: what the backend asked, and what the client answered. */
typedef struct mcp_shim_round_t {
    int                 number;      /* 1 for the first round                              */
    int                 n;           /* requests in the round                              */
    const char        **keys;        /* the backend's inputRequests keys                   */
    const char        **ids;         /* the minted ids (JSON strings' values)              */
    const char        **requests;    /* the server->client requests, JSON texts            */
    json_object        *responses;   /* inputResponses being built (owned by the round)    */
    int                 answered;
    const char         *request_state; /* the backend's requestState, or NULL              */
    const char         *refusal;     /* an error answer's text (MCP_SHIM_ANSWER_REFUSED)    */
} mcp_shim_round_t;

/* Starts round number from an InputRequiredResult: every inputRequests entry (an object with
 * a string method) becomes a server->client request. Returns NULL, or what is wrong with the
 * result (no inputRequests and no requestState, a malformed entry). A result with
 * requestState only makes a round with no requests (retried at once). Free the round's
 * responses with mcp_shim_round_clear. */
const char *mcp_shim_round_begin(apr_pool_t *p, mcp_shim_round_t *rd, json_object *result,
                                 apr_int64_t stream_id, int number);

/* Takes one of the client's answers (a response or error message). */
mcp_shim_answer_t mcp_shim_round_take(apr_pool_t *p, mcp_shim_round_t *rd, json_object *answer);

/* Non-zero when every request of the round is answered. */
int mcp_shim_round_done(const mcp_shim_round_t *rd);

/* The minted ids as a JSON array's text (for looking the answers up). */
const char *mcp_shim_round_ids_json(apr_pool_t *p, const mcp_shim_round_t *rd);

/* Releases the round's responses object. */
void mcp_shim_round_clear(mcp_shim_round_t *rd);

/* The retry's id: the client's id with "-r<round>" appended (a string). A new object. */
json_object *mcp_shim_retry_id(json_object *client_id, int round);

#endif
