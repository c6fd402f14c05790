/* mod_mcp_console — the `mcp-console` handler: the operator's console (README, "The console").
 *
 * A read-only page like mod_status's, with no state of its own: each request is one statement
 * (mcp_store_console.h) whose JSON document is served as it is (?format=json) or rendered as
 * HTML (mcp_console.h); the overview adds this host's shared-memory numbers (mod_mcp_status.h).
 * GET and HEAD only. Whoever may see it is Apache's business (Require, AuthType ... in the
 * <Location>): it shows users' messages. Answers carry a Content Security Policy that allows
 * no script at all, and are not cached.
 */
#ifndef MOD_MCP_CONSOLE_H
#define MOD_MCP_CONSOLE_H

void mcp_console_register_hooks(void);

#endif
