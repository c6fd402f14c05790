/* mcp_protocol — see mcp_protocol.h. */
#include <string.h>

#include "mcp_protocol.h"

/* Newest first. */
static const mcp_protocol_t revisions[] = {
    /* version       era           served batches header priming */
    { "2026-07-28", MCP_ERA_2026, 1,     0,      1,     0 },
    { "2025-11-25", MCP_ERA_2025, 1,     0,      1,     1 },
    { "2025-06-18", MCP_ERA_2025, 1,     0,      1,     0 },
    { "2025-03-26", MCP_ERA_2025, 1,     1,      0,     0 },
};

#define N_REVISIONS (sizeof(revisions) / sizeof(revisions[0]))

const mcp_protocol_t *mcp_protocol_find(const char *v)
{
    size_t i;

    for (i = 0; v && i < N_REVISIONS; i++) {
        if (strcmp(revisions[i].version, v) == 0) {
            return &revisions[i];
        }
    }
    return NULL;
}

const mcp_protocol_t *mcp_protocol_served(const char *v)
{
    const mcp_protocol_t *rev = mcp_protocol_find(v);

    return rev && rev->served ? rev : NULL;
}

const mcp_protocol_t *mcp_protocol_session(const char *v)
{
    const mcp_protocol_t *rev = mcp_protocol_served(v);

    return rev && rev->era == MCP_ERA_2025 ? rev : NULL;
}

const char *mcp_protocol_latest(void)
{
    size_t i;

    for (i = 0; i < N_REVISIONS; i++) {
        if (revisions[i].served && revisions[i].era == MCP_ERA_2025) {
            return revisions[i].version;
        }
    }
    return MCP_PROTOCOL_DEFAULT;
}

const char *mcp_protocol_list(mcp_era_t era)
{
    switch (era) {
    case MCP_ERA_2025:
        return "2025-11-25, 2025-06-18, 2025-03-26";
    case MCP_ERA_2026:
        return "2026-07-28";
    default:
        return "2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26";
    }
}

const char *mcp_protocol_served_list(void)
{
    return mcp_protocol_list(MCP_ERA_2025);
}

int mcp_protocol_primed(const char **out, int max)
{
    size_t i;
    int n = 0;

    for (i = 0; i < N_REVISIONS && n < max; i++) {
        if (revisions[i].served && revisions[i].era == MCP_ERA_2025 && revisions[i].priming) {
            out[n++] = revisions[i].version;
        }
    }
    if (n < max) {
        out[n] = NULL;
    }
    return n;
}

int mcp_protocol_is_modern(const char *v)
{
    const mcp_protocol_t *rev = mcp_protocol_find(v);

    if (rev) {
        return rev->era == MCP_ERA_2026;
    }
    /* An unknown date-shaped version newer than the 2025 era: YYYY-MM-DD compares as text. */
    return v && strlen(v) == 10 && v[4] == '-' && v[7] == '-' && strcmp(v, "2026") > 0;
}
