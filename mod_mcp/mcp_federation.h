/* mcp_federation — several backend MCP servers ("members") behind one gateway endpoint: the
 * names, URIs, ids and cursors the gateway shows its client, and the messages it rewrites on
 * their way between the client and a member (mod_mcp_federation.c is the httpd glue).
 *
 * What the client sees:
 *   - a member's tools and prompts under its prefix ("" for at most one member, the unprefixed
 *     one), after its rename, and only those its allow/deny globs let through;
 *   - a prefixed member's resource URIs as "<name>+<uri>" (a valid URI scheme, since member names
 *     are [A-Za-z][A-Za-z0-9.-]*, and still an expandable uriTemplate: no percent-encoding); the
 *     unprefixed member's URIs unchanged;
 *   - a member's server->client request ids as the string "mcpfed:<name>:<id as JSON text>", so
 *     two members' ids never collide and 5 and "5" stay apart;
 *   - a list cursor that holds, for every member with more to list, that member's own cursor.
 *
 * Callers may assume: every name, URI and id the functions expose resolves back to the member
 * and the member's own value that produced it (for the name, within its member: the glue keeps
 * prefixes from overlapping, or accepts that the longest prefix wins); nothing is exposed that
 * resolution would refuse. Matching of tool and prompt names, prefixes and ids is exact
 * (case-sensitive); a member name in a URI scheme matches without regard to case (schemes are
 * case-insensitive, RFC 3986 section 3.1).
 *
 * Pure code: APR and json-c only. Rewrites change the json_object given; new objects are the
 * caller's to put (or to hand on); strings are allocated in the pool given, or point into the
 * arguments where a function says so.
 */
#ifndef MCP_FEDERATION_H
#define MCP_FEDERATION_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>

/* One member, as the configuration (<MCPMember>) made it. The arrays and tables may be NULL
 * (empty). The shaping (allow, deny, renames, descriptions) applies alike to the member's tools
 * and prompts, by the member's own names. */
typedef struct mcp_fed_member_t {
    const char *name;            /* [A-Za-z][A-Za-z0-9.-]* (mcp_fed_name_valid)                */
    const char *prefix;          /* "" or NULL: unprefixed (at most one member); else prepended
                                  * to the tool and prompt names                                */
    apr_array_header_t *allow;   /* const char * fnmatch(3) globs on the own names; empty: all */
    apr_array_header_t *deny;    /* the same; deny wins over allow                              */
    apr_table_t *renames;        /* own name -> new name (before the prefix is added)           */
    apr_table_t *descriptions;   /* own name -> description that replaces the member's          */
    apr_size_t max_answer;       /* 0: none; the glue enforces it, this file only carries it    */
} mcp_fed_member_t;

/* ---- names -------------------------------------------------------------------------------- */

/* Non-zero when name is a valid member name: [A-Za-z][A-Za-z0-9.-]* (NULL and "" are not). */
int mcp_fed_name_valid(const char *name);

/* Non-zero when the member's allow and deny globs let its own tool or prompt name through:
 * allow empty or one allow glob matches, and no deny glob matches. */
int mcp_fed_name_allowed(const mcp_fed_member_t *m, const char *own);

/* The name the client sees for the member's own tool or prompt name: renamed (renames, matched
 * exactly, not by apr_table_get's case-insensitive look-up), then the prefix prepended. NULL
 * when own is NULL, when the rules hide it, or when a rename of another own name to this one
 * shadows it (the exposed name calls the renamed one, so this one cannot be called). May return
 * own itself (unprefixed, not renamed); else allocated in p. */
const char *mcp_fed_expose_name(apr_pool_t *p, const mcp_fed_member_t *m, const char *own);

/* The member that serves an exposed tool or prompt name: the member whose non-empty prefix is the
 * longest proper prefix of exposed, else the unprefixed member (the first one with an empty or
 * NULL prefix). Returns its index and sets *own to the member's own name (the rename inverted:
 * a renamed name is callable by its new name only), pointing into exposed or into the member's
 * renames table; -1 when no member claims exposed, when the name left is an old name that was
 * renamed away, or when the rules hide the own name (a hidden tool cannot be called). The
 * member is chosen by prefix alone: a name its prefix claims never falls back to the
 * unprefixed member. */
int mcp_fed_resolve_name(const mcp_fed_member_t *members, int n, const char *exposed,
                         const char **own);

/* ---- resource URIs ------------------------------------------------------------------------ */

/* The URI (or uriTemplate) the client sees for a member's own one: unchanged for the unprefixed
 * member, "<name>+<uri>" for a prefixed one (allocated in p). NULL when uri is NULL. */
const char *mcp_fed_expose_uri(apr_pool_t *p, const mcp_fed_member_t *m, const char *uri);

/* The member that serves an exposed URI (or uriTemplate): when uri starts with "<x>+" where x is
 * a valid member name and the name of a prefixed member (without regard to case), that member,
 * and *own_uri what follows the "+"; otherwise the unprefixed member, and *own_uri the URI
 * unchanged ("git+ssh://..." stays the unprefixed member's when no prefixed member is called
 * "git"). *own_uri points into uri. -1 when no member claims it. */
int mcp_fed_resolve_uri(const mcp_fed_member_t *members, int n, const char *uri,
                        const char **own_uri);

/* ---- server->client request ids ----------------------------------------------------------- */

/* The id the client sees for a request a member sends it (sampling, elicitation, roots):
 * a new string "mcpfed:<member_name>:<id as compact JSON text>" (5 gives "mcpfed:a:5", "5"
 * gives "mcpfed:a:\"5\""). NULL when member_name is not a valid member name or id is not a
 * string or a number (JSON-RPC ids are nothing else). The caller puts the result. */
json_object *mcp_fed_tag_id(const char *member_name, json_object *id);

/* The reverse, for the id of the client's response (or of its notifications/cancelled): 0,
 * *member_name (allocated in p) and *id (a new string or number; the caller puts it) when tagged
 * is exactly what mcp_fed_tag_id makes of some member name and id (the JSON text canonical, as
 * mcp_fed_tag_id writes it); non-zero, and neither output touched, for anything else (not a
 * string, another prefix, a bad member name, JSON that is not a string or number, trailing
 * bytes, a NUL character). */
int mcp_fed_untag_id(apr_pool_t *p, json_object *tagged, const char **member_name,
                     json_object **id);

/* ---- cursors that page across members ----------------------------------------------------- */

/* Limits of a gateway cursor: pairs, and characters of the encoded cursor. */
#define MCP_FED_CURSOR_MAX_PAIRS 64
#define MCP_FED_CURSOR_MAX_LEN   16384

/* One member still to list, and the cursor to ask it with. */
typedef struct mcp_fed_cursor_pair_t {
    const char *member;
    const char *cursor;
} mcp_fed_cursor_pair_t;

/* The gateway cursor for n (member name, member cursor) pairs: base64url without padding
 * (RFC 4648 section 5) of the compact JSON [["<name>","<cursor>"],...], allocated in p. NULL
 * when n <= 0, and when the cursor would be one mcp_fed_cursor_decode refuses (more than
 * MCP_FED_CURSOR_MAX_PAIRS pairs, longer than MCP_FED_CURSOR_MAX_LEN, a name that is not
 * valid, a NULL cursor, a name twice). */
const char *mcp_fed_cursor_encode(apr_pool_t *p, const char *const *names,
                                  const char *const *cursors, int n);

/* Decodes a gateway cursor from a client: 0 and *pairs (an array of mcp_fed_cursor_pair_t, in
 * the cursor's order, at least one, strings allocated in p); non-zero, *pairs untouched, for
 * anything malformed: NULL, longer than MCP_FED_CURSOR_MAX_LEN, not canonical base64url without
 * padding, not JSON, not a non-empty array of at most MCP_FED_CURSOR_MAX_PAIRS arrays of two
 * strings, a member name that is not valid or comes twice, a NUL character. Whether the names
 * are members is the caller's to check. */
int mcp_fed_cursor_decode(apr_pool_t *p, const char *cursor, apr_array_header_t **pairs);

/* ---- list results ------------------------------------------------------------------------- */

/* Rewrites in place one member's result (the response's "result" object) of a list method:
 * tools/list and prompts/list: each item's name exposed (mcp_fed_expose_name), its description
 * replaced when the member's descriptions name its own name, hidden items dropped;
 * resources/list: each item's uri exposed; resources/templates/list: each item's uriTemplate
 * exposed. Items that are not objects or lack a string name (uri, uriTemplate) are dropped too
 * (what cannot be named cannot be used). Returns how many items were dropped; 0, nothing
 * changed, when method is not one of the four or result holds no such array. Every other member
 * of result (nextCursor, _meta) and of the items stays. */
int mcp_fed_list_rewrite(apr_pool_t *p, const mcp_fed_member_t *m, const char *method,
                         json_object *result);

/* Merges the rewritten results of one page of a list method, one per member asked, in member
 * order (NULL entries, members that failed, are skipped): a new result object (the caller puts
 * it) whose array (tools, prompts, resources or resourceTemplates) is the concatenation of the
 * members' arrays, items shared with the results (referenced, not copied). An item whose name
 * (uri, uriTemplate) an earlier item already has is dropped (a rename can make two alike), and
 * so is an item without one; *dropped (if not NULL) says how many. *next_cursor is the gateway
 * cursor of the members whose result has a non-empty string nextCursor (NULL when none), and the
 * result carries it as its nextCursor. Returns NULL, *next_cursor NULL, when method is not a list
 * method or the members' cursors make a gateway cursor too long (mcp_fed_cursor_encode): the
 * glue answers the page with an internal error rather than end the listing silently. */
json_object *mcp_fed_list_merge(apr_pool_t *p, const char *method, json_object *const *results,
                                const char *const *member_names, int n,
                                const char **next_cursor, int *dropped);

/* ---- messages in flight ------------------------------------------------------------------- */

/* What the gateway does with a client's message of a method. */
typedef enum {
    MCP_FED_LOCAL = 0,   /* initialize (the gateway's own); anything else (the glue answers
                          * -32601)                                                             */
    MCP_FED_ROUTED,      /* tools/call, prompts/get, resources/read, resources/subscribe,
                          * resources/unsubscribe, completion/complete: mcp_fed_route            */
    MCP_FED_LIST,        /* tools/list, prompts/list, resources/list, resources/templates/list:
                          * every member (or the cursor's), mcp_fed_list_rewrite + _merge        */
    MCP_FED_ALL,         /* ping, logging/setLevel: every member, one answer                     */
    MCP_FED_NOTIFY_ALL   /* notifications/initialized, notifications/roots/list_changed,
                          * notifications/cancelled (which the glue may route instead, by the
                          * request it cancels): every member                                   */
} mcp_fed_kind_t;

/* The kind of method (NULL: MCP_FED_LOCAL). */
mcp_fed_kind_t mcp_fed_method_kind(const char *method);

/* Routes a client's request of an MCP_FED_ROUTED method to its member and rewrites it in place
 * for that member: tools/call and prompts/get params.name to the own name; resources/read,
 * resources/subscribe, resources/unsubscribe params.uri to the own URI; completion/complete by
 * params.ref: "ref/prompt" its name, "ref/resource" its uri. Returns the member's index; -1,
 * request untouched, with *why an English sentence fit for the error message (the client's name
 * quoted, at most 200 bytes of it) when the request is not such a request, misses the name or
 * URI ("tools/call needs params.name, a string"), or no member serves it ("Unknown tool: xyz",
 * "Unknown prompt: xyz", "No member serves the resource uri: x+y:z"). The glue answers -32602
 * (invalid params), what an MCP server answers for an unknown tool or prompt. */
int mcp_fed_route(apr_pool_t *p, const mcp_fed_member_t *members, int n, json_object *request,
                  const char **why);

/* Rewrites in place one message member m sends the client: a request (method and id) gets its id
 * tagged (mcp_fed_tag_id); notifications/resources/updated its params.uri exposed;
 * notifications/cancelled its params.requestId tagged (the member cancels a request it sent);
 * a response whose request's method answered_method is "resources/read" (the glue knows; NULL
 * when it does not) its result.contents[].uri exposed; of "tools/call" and "prompts/get" the
 * resource URIs of its content blocks (resource_link's uri, an embedded resource's
 * resource.uri; result.content[], result.messages[].content), so that the client can read them
 * through the gateway. Everything else stays as it is:
 * progress, list_changed and logging notifications, other responses (a tool's result too), a
 * batch (the glue hands one message at a time), an id that cannot be tagged. */
void mcp_fed_outbound(apr_pool_t *p, const mcp_fed_member_t *m, json_object *msg,
                      const char *answered_method);

/* ---- initialize --------------------------------------------------------------------------- */

/* The InitializeResult the gateway answers with, from its members' (the "result" objects, in
 * member order; NULL entries, members that are down, are skipped): a new object (the caller puts
 * it) with protocolVersion as given, serverInfo as given (referenced; may be NULL: left out),
 * capabilities the union of the members' — tools, prompts, resources, logging, completions
 * present when any member has them, tools/prompts/resources listChanged and resources.subscribe
 * true when any member's is true, experimental merged key by key (the first member's wins);
 * tasks and capabilities unknown here left out (they cannot be merged blindly) — and
 * instructions, the members' non-empty instructions as "<name>: <text>" paragraphs separated
 * by a blank line (left out when none). */
json_object *mcp_fed_merge_initialize(apr_pool_t *p, json_object *const *results,
                                      const char *const *member_names, int n,
                                      const char *protocol_version, json_object *server_info);

#endif
