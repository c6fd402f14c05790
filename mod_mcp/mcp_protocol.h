/* mcp_protocol — MCP protocol revisions and the transport rules that differ between them.
 *
 * Every rule that depends on the negotiated version is asked here, so that the request path
 * stays era-aware: adding a revision means adding a row to the table in mcp_protocol.c.
 * Pure code: no httpd headers.
 */
#ifndef MCP_PROTOCOL_H
#define MCP_PROTOCOL_H

/* Transport families. The 2025 era has sessions, the GET stream and resumability; the
 * 2026-07-28 revision has none of them: every POST is stateless (mcp_era, mod_mcp_modern). */
typedef enum {
    MCP_ERA_UNKNOWN = 0,
    MCP_ERA_2025,
    MCP_ERA_2026
} mcp_era_t;

typedef struct mcp_protocol_t {
    const char *version;         /* "2025-06-18"                                          */
    mcp_era_t   era;
    int         served;          /* the gateway serves it now                             */
    int         batches;         /* JSON arrays of messages allowed on POST                */
    int         version_header;  /* clients send MCP-Protocol-Version after initialize    */
    int         priming;         /* SSE priming event (id + empty data) may be sent       */
} mcp_protocol_t;

/* The revision that assumes nothing newer: a request without MCP-Protocol-Version and without
 * a session that says otherwise is treated as this one (transport spec, "Protocol Version
 * Header"). */
#define MCP_PROTOCOL_DEFAULT "2025-03-26"

/* The newest revision the gateway serves. */
const char *mcp_protocol_latest(void);

/* The revision named v, or NULL when v is not a revision the gateway knows of. */
const mcp_protocol_t *mcp_protocol_find(const char *v);

/* The revision named v if the gateway serves it (either era), else NULL. */
const mcp_protocol_t *mcp_protocol_served(const char *v);

/* The revision named v if the gateway serves it with sessions (the 2025 era), else NULL: what
 * initialize may negotiate and MCP-Protocol-Version may name on the session path. */
const mcp_protocol_t *mcp_protocol_session(const char *v);

/* Comma-separated list of the served revisions of era (MCP_ERA_UNKNOWN: every era), newest
 * first (for error messages and the -32022 error's data.supported). */
const char *mcp_protocol_list(mcp_era_t era);

/* The same as mcp_protocol_list(MCP_ERA_2025): the revisions served with sessions. */
const char *mcp_protocol_served_list(void);

/* The revisions served with sessions whose request streams begin with a priming event, newest
 * first: at most max of them into out (NULL after the last when there is room); returns how
 * many. A stream of another revision never sends one, so the store keeps no priming row for it. */
int mcp_protocol_primed(const char **out, int max);

/* Non-zero when v looks like a revision of the stateless era: known as such, or a date after
 * the newest revision of the 2025 era (so a future version header is not read as legacy). */
int mcp_protocol_is_modern(const char *v);

#endif
