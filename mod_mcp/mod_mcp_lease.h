/* mod_mcp_lease — the per-child lease keeper: one thread that renews the leases of every stream
 * this child relays (mcp_lease.h), independently of the threads writing to clients, in one
 * statement per round. A stream found finished by someone else is marked lost; its relaying
 * thread stops at its next step (mcp_stream_tick, mcp_stream_commit).
 */
#ifndef MOD_MCP_LEASE_H
#define MOD_MCP_LEASE_H

#include <httpd.h>

#include "mcp_lease.h"

/* Starts the keeper (from child_init); it stops when pchild is cleaned up. Returns the
 * registry, or NULL (logged) when it cannot run: streams then keep their first lease only. */
mcp_leases_t *mcp_lease_keeper_start(apr_pool_t *pchild, server_rec *s);

#endif
