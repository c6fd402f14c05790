/* mcp_trace — see mcp_trace.h. */
#include <string.h>

#include <apr_strings.h>

#include "mcp_trace.h"

static const char hex[] = "0123456789abcdef";

/* n lower-case hex digits at s, not all zeros: copied to out (n + 1 bytes). */
static int hex_field(const char *s, apr_size_t n, char *out)
{
    apr_size_t i;
    int nonzero = 0;

    for (i = 0; i < n; i++) {
        if (!strchr(hex, s[i]) || !s[i]) {
            return -1;
        }
        nonzero |= s[i] != '0';
        out[i] = s[i];
    }
    out[n] = '\0';
    return nonzero ? 0 : -1;
}

int mcp_trace_parse(const char *h, mcp_trace_t *out)
{
    char version[3];

    /* version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 */
    if (!h || strlen(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') {
        return -1;
    }
    if (!strchr(hex, h[0]) || !strchr(hex, h[1]) || !h[0] || !h[1]) {
        return -1;
    }
    version[0] = h[0], version[1] = h[1], version[2] = '\0';
    if (!strcmp(version, "ff") || (!strcmp(version, "00") && h[55] != '\0')
        || (h[55] != '\0' && h[55] != '-')) {
        return -1;
    }
    if (hex_field(h + 3, MCP_TRACE_ID_HEX, out->trace_id)
        || hex_field(h + 36, MCP_TRACE_SPAN_HEX, out->parent_id)) {
        return -1;
    }
    if (!strchr(hex, h[53]) || !strchr(hex, h[54]) || !h[53] || !h[54]) {
        return -1;
    }
    out->flags[0] = h[53], out->flags[1] = h[54], out->flags[2] = '\0';
    return 0;
}

static void to_hex(const unsigned char *b, apr_size_t n, char *out)
{
    apr_size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* All zeros is not a valid id: the last digit becomes 1 (one chance in 2^64 or 2^128). */
static void nonzero(char *id)
{
    if (strspn(id, "0") == strlen(id)) {
        id[strlen(id) - 1] = '1';
    }
}

void mcp_trace_start(mcp_trace_t *t, const unsigned char *random)
{
    to_hex(random, MCP_TRACE_ID_HEX / 2, t->trace_id);
    nonzero(t->trace_id);
    to_hex(random + MCP_TRACE_ID_HEX / 2, MCP_TRACE_SPAN_HEX / 2, t->parent_id);
    nonzero(t->parent_id);
    strcpy(t->flags, "01");
}

const char *mcp_trace_child(apr_pool_t *p, const mcp_trace_t *t, const unsigned char *span)
{
    char id[MCP_TRACE_SPAN_HEX + 1];

    to_hex(span, MCP_TRACE_SPAN_HEX / 2, id);
    nonzero(id);
    return apr_pstrcat(p, "00-", t->trace_id, "-", id, "-", t->flags, NULL);
}

int mcp_trace_state_ok(const char *state)
{
    apr_size_t i;

    if (!state || strlen(state) > 512) {
        return 0;
    }
    for (i = 0; state[i]; i++) {
        if (state[i] < 0x20 || state[i] > 0x7e) {
            return 0;
        }
    }
    return 1;
}
