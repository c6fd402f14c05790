/* mod_mcp_status — what an operator sees: counters and latency histograms shared by every child
 * of the server, each child's listener and database use, shown by mod_status (/server-status,
 * and ?auto as "Key: value" lines) and by the `mcp-metrics` handler (Prometheus text).
 *
 * The numbers live in one anonymous shared memory segment made by the parent at its first
 * start (kept across graceful restarts, so counters count since the server started): global
 * counters and histograms updated atomically by any thread of any child, and one slot per
 * running child (claimed in child_init) for what only that child knows. Cluster-wide numbers
 * (live sessions, open streams, followers on every host) come from PostgreSQL, one statement
 * per status page or scrape.
 *
 * Every mcp_status_* recording call is a no-op when the segment could not be made, so callers
 * in other files are one line each and never check anything.
 */
#ifndef MOD_MCP_STATUS_H
#define MOD_MCP_STATUS_H

#include <httpd.h>

typedef enum {
    MCP_STAT_REQUESTS = 0,     /* HTTP requests to an mcp handler                            */
    MCP_STAT_CALLS,            /* JSON-RPC requests relayed to a backend                     */
    MCP_STAT_SESSIONS,         /* sessions started                                           */
    MCP_STAT_EVENTS,           /* messages stored on streams                                 */
    MCP_STAT_BYTES,            /* ... their bytes                                            */
    MCP_STAT_RESUMPTIONS,      /* GETs with Last-Event-ID                                    */
    MCP_STAT_TAKEOVERS,        /* streams finished by a follower after their owner died      */
    MCP_STAT_SWEEPS,           /* sweep rounds                                               */
    MCP_STAT_SWEPT,            /* streams the sweep finished                                 */
    MCP_STAT_DENIED,           /* calls refused by a Require mcp-tool/-prompt/-resource       */
    MCP_STAT_COUNTERS
} mcp_stat_t;

typedef enum {
    MCP_HIST_BACKEND = 0,      /* backend: request sent -> answer's headers                  */
    MCP_HIST_STORE,            /* one database statement (connection borrowed -> returned)   */
    MCP_HIST_FIRST_EVENT,      /* request arrived -> first stored message of its stream      */
    MCP_HIST_COUNT
} mcp_hist_t;

/* Makes the shared segment (once per server start; from post_config's second pass). */
void mcp_status_post_config(server_rec *s);

/* Claims this child's slot; from child_init. */
void mcp_status_child_init(apr_pool_t *pchild, server_rec *s);

/* The status hook (when mod_status is loaded) and the mcp-metrics handler. */
void mcp_status_register_hooks(void);

void mcp_status_count(mcp_stat_t which, apr_uint64_t n);

/* n messages (const char * JSON texts in messages) were stored on a stream. */
void mcp_status_stored(const apr_array_header_t *messages, int n);

/* A request answered with an error status (400-599). */
void mcp_status_rejected(int http_status);

/* Records now - since into a histogram. */
void mcp_status_observe(mcp_hist_t which, apr_time_t since);

/* A database connection of this child was borrowed (+1) or given back (-1). */
void mcp_status_db_in_use(int delta);

/* Streams parked in this child's event loop: +1 when one is parked, -1 when it ends. */
void mcp_status_parked(int delta);

/* Backend exchanges going on after their request (mod_mcp_detach): +1 when one is let go, -1
 * when it is done. */
void mcp_status_detached(int delta);

/* This host's numbers for the console's overview (mod_mcp_console.c): {"since", "parked",
 * "counters": {key: n}, "rejected": {status: n}, "children": [{"pid", "listener", "db_in_use",
 * "parked", "detached", "wakeups", "last_wakeup_ago_s"}]}; NULL when there is no segment. The
 * object belongs to p. */
struct json_object *mcp_status_json(apr_pool_t *p);

/* Publishes this child's listener state (connected, last wake-up); called often by a
 * background thread of the child. */
void mcp_status_child_tick(void);

#endif
