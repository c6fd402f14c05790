/* mod_mcp_members — <MCPMember name>: the members of a federated endpoint (several backend MCP
 * servers behind one <Location>), as the configuration names them.
 *
 *   <Location /mcp>
 *       SetHandler mcp
 *       <MCPMember github>
 *           Backend http://127.0.0.1:9001/mcp
 *           Prefix gh_
 *           DenyTools "delete_*"
 *       </MCPMember>
 *       <MCPMember tickets>
 *           Backend stdio:tickets
 *           Prefix none
 *       </MCPMember>
 *   </Location>
 *
 * Inner directives: Backend (required: an http(s) URL, unix:/path|URL, or stdio:name, as
 * MCPBackend), Prefix (prepended to its tool and prompt names; default "<name>_"; "none" for the
 * one member that is not prefixed), AllowTools and DenyTools (fnmatch globs on the member's own
 * tool and prompt names; deny wins), RenameTool (own new), DescribeTool (own "text"),
 * MaxAnswerSize (bytes of a member's answer to a list request; 0: MCPMaxMessageSize), and what
 * the member is sent instead of what the Location says for all: Header, HeaderFile (as
 * MCPBackendHeader, MCPBackendHeaderFile: the member's lines replace the Location's),
 * CACertificateFile, ClientCertificateFile (as MCPBackendCACertificateFile, ...).
 * Everything else (timeouts, limits) is the Location's and applies to each member.
 * A Location's sections replace an enclosing one's; MCPBackend and <MCPMember> exclude each
 * other (mod_mcp_handler says so in the log when both are found).
 */
#ifndef MOD_MCP_MEMBERS_H
#define MOD_MCP_MEMBERS_H

#include <httpd.h>
#include <http_config.h>

#include "mcp_backend.h"
#include "mcp_federation.h"

/* What a federated endpoint's sessions record as their backend (mcp.sessions.backend_url): this,
 * then the Location's path. */
#define MCP_MEMBERS_SPEC_PREFIX "federation:"

typedef struct mcp_member_conf_t {
    mcp_fed_member_t            fed;      /* name, prefix and shaping (mcp_federation)       */
    const char                 *spec;     /* Backend as written (mcp.session_members)        */
    const mcp_backend_target_t *target;   /* ... parsed                                      */
    const apr_array_header_t   *headers;  /* Header, HeaderFile: mcp_backend_header_t, instead
                                           * of the Location's (NULL: the Location's)         */
    const mcp_backend_tls_t    *tls;      /* CACertificateFile, ClientCertificateFile, instead
                                           * of the Location's (NULL: the Location's)         */
    const char                 *file;     /* where the section is, for log lines             */
    int                         line;
} mcp_member_conf_t;

/* The <MCPMember name> section (a directory-context container). */
const char *mcp_members_section(cmd_parms *cmd, void *dconf, const char *arg);

/* The member conf->members names name (NULL: none). */
const mcp_member_conf_t *mcp_members_find(const apr_array_header_t *members, const char *name);

/* The members' mcp_fed_member_t, in order, in p (for mcp_fed_resolve_* and mcp_fed_route). */
mcp_fed_member_t *mcp_members_fed(apr_pool_t *p, const apr_array_header_t *members);

#endif
