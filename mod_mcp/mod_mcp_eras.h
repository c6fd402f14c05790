/* mod_mcp_eras — the protocol eras a <Location>'s backend serves: what MCPBackendProtocols says,
 * or, where it is not set, what the gateway learned from the backend itself.
 *
 * Learning: a server/discover probe (mcp_shim_discover, whose per-process cache it shares),
 * judged by mcp_era_learn: a result listing 2026-07-28 -> that and the 2025 revisions it lists
 * (none: a 2026-only backend, whose 2025-era clients go through the era shim); a JSON-RPC error
 * or a 4xx -> the 2025 era (a 2025-era backend: 2026-07-28 clients go through the era bridge);
 * no answer, a 5xx, a timeout -> nothing learned: the last eras known (else the 2025 era) for
 * MCP_ERAS_RETRY, then a new probe.
 *
 * What was learned is kept in mcp.backend_eras (mcp_store_eras) for the discover result's ttlMs,
 * else MCPBackendProtocolsTTL, so every process and host uses it without probing; and in a
 * per-process cache in front of it, so the hot path runs no statement. A stdio backend is not
 * probed: its supervisor serves the 2025 era.
 */
#ifndef MOD_MCP_ERAS_H
#define MOD_MCP_ERAS_H

#include "mod_mcp_request.h"

/* How long a probe that learned nothing is not repeated (per process). */
#define MCP_ERAS_RETRY apr_time_from_sec(10)

/* The revisions the request's backend serves (", " separated, newest first, as
 * MCPBackendProtocols): the configured list when set, else the learned one (probing when no
 * process has learned it, or its lifetime is over). Never NULL. */
const char *mcp_eras_backend(mcp_req_t *q);

/* Non-zero when the request's backend serves 2026-07-28 and no revision of the 2025 era, and
 * MCPEraBridge is On: its 2025-era clients go through the era shim (mod_mcp_shim). Off turns
 * off both directions: such traffic is then forwarded as it came. */
int mcp_eras_shimmed(mcp_req_t *q);

#endif
