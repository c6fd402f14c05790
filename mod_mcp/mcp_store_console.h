/* mcp_store_console — what the operator's console reads (SetHandler mcp-console; mcp_console.h
 * renders it).
 *
 * One statement per page, read-only, all parameters bound. PostgreSQL builds the page's whole
 * JSON document (json_build_object), which the handler serves as it is with format=json and
 * renders as HTML otherwise. Session ids are bearer tokens and never leave the database: a
 * session is shown by its tag, left(md5(id), 8) (what the error log calls it, mcp_id_tag), and
 * linked by its handle, left(md5(id), 16); both are found again through the index on md5(id).
 *
 * Every statement is bounded whatever the tables hold: by an index (sessions by created_at or
 * md5(id), events by (session_id, id) or (stream_id, seq), streams by id, which carries the
 * start time), by a row limit, and by the handle's statement timeout (MCPDatabaseTimeout). The
 * figures over many calls (the overview's outcomes and backends' health, the tools page) are
 * taken from the latest calls only (the sample's size is a parameter, reported in the document).
 *
 * Pure code: no httpd headers.
 */
#ifndef MCP_STORE_CONSOLE_H
#define MCP_STORE_CONSOLE_H

#include "mcp_store.h"

/* Each gives the page's JSON document in *json (allocated in p). OK, UNAVAILABLE or REFUSED (a
 * value PostgreSQL cannot read, such as a malformed sessions cursor, is a REFUSED of SQLSTATE
 * class 22). */

/* Live sessions, open streams and followers, requests started per minute over the last 15
 * minutes, the outcomes of the latest `sample` requests of the last hour and each backend's
 * health from them, and the processes of every host that own open streams or followers. */
mcp_store_status_t mcp_store_console_overview(mcp_store_t *db, apr_pool_t *p, int sample,
                                              const char **json);

/* Sessions newest first, `rows` of them started before `before` (NULL: now): all, live or
 * ended (state), matching q ("" anything): a user's name (prefix), a client's name (part, any
 * case) or a tag (8 to 32 hex digits). "next" is the cursor of the following page, or null. */
mcp_store_status_t mcp_store_console_sessions(mcp_store_t *db, apr_pool_t *p, const char *q,
                                              const char *before, const char *state, int rows,
                                              const char **json);

/* The session whose md5(id) starts with ref ("matches" lists them when there are more than
 * one, "session" is then null), and `rows` of its messages after event id `after` (-1: from the
 * start), each with at most text_max characters of its text (and its size in bytes). */
mcp_store_status_t mcp_store_console_session(mcp_store_t *db, apr_pool_t *p, const char *ref,
                                             apr_int64_t after, int rows, int text_max,
                                             const char **json);

/* A stream and `rows` of its messages after seq `after` (-1: from the start), with their
 * offsets from its start. */
mcp_store_status_t mcp_store_console_stream(mcp_store_t *db, apr_pool_t *p, apr_int64_t id,
                                            apr_int64_t after, int rows, int text_max,
                                            const char **json);

/* Per tool and backend, over the latest `sample` tools/call requests of the last window_secs:
 * calls, errors (JSON-RPC errors, tool errors, no answer), latency percentiles; and the calls
 * and errors of 30 equal spans of the window. Two statements: the sample's lowest id, then the
 * page. */
mcp_store_status_t mcp_store_console_tools(mcp_store_t *db, apr_pool_t *p, int window_secs,
                                           int sample, const char **json);

#endif
