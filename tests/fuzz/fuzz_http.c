/* libFuzzer harness for the header rules: mcp_http (Accept and Content-Type media types) and
 * mcp_protocol (MCP-Protocol-Version look-ups).
 *
 * The input is split at '\n': line 1 is an Accept value, line 2 a Content-Type value, line 3
 * an MCP-Protocol-Version value. Checked, besides the absence of crashes and overreads:
 *  1. the answers are 0 or 1; appending ", <want>" to any Accept value makes it accept want
 *     (a list is read item by item, whatever came before);
 *  2. a Content-Type is its media type whatever parameters follow;
 *  3. a revision is served only if it is known, and the served ones are in the served list.
 */

#include "fuzz.h"

#include <apr_strings.h>

#include "mcp_http.h"
#include "mcp_protocol.h"

static const char *const wants[] = { "application/json", "text/event-stream" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p;
    char *f[3];
    int n, i;
    const mcp_protocol_t *known, *served;

    apr_pool_create(&p, fuzz_root());
    n = fuzz_fields(p, data, size, f, 3);

    for (i = 0; i < 2; i++) {
        int a = mcp_http_accepts(f[0], wants[i]);
        int m = mcp_http_media_type_is(f[0], wants[i]);
        FUZZ_CHECK(a == 0 || a == 1);
        FUZZ_CHECK(m == 0 || m == 1);
        FUZZ_CHECK(mcp_http_accepts(apr_pstrcat(p, f[0], ", ", wants[i], NULL), wants[i]));
        if (n > 1) {
            m = mcp_http_media_type_is(f[1], wants[i]);
            FUZZ_CHECK(m == 0 || m == 1);
            FUZZ_CHECK(mcp_http_media_type_is(apr_pstrcat(p, wants[i], ";", f[1], NULL),
                                              wants[i]));
            FUZZ_CHECK(mcp_http_accepts(f[1], wants[i]) <= 1);
        }
    }

    known = mcp_protocol_find(f[n > 2 ? 2 : 0]);
    served = mcp_protocol_served(f[n > 2 ? 2 : 0]);
    FUZZ_CHECK(!served || served == known);
    if (known)
        FUZZ_CHECK(!strcmp(known->version, f[n > 2 ? 2 : 0]));
    if (served)
        FUZZ_CHECK(strstr(mcp_protocol_served_list(), served->version) != NULL);
    FUZZ_CHECK(mcp_protocol_served(mcp_protocol_latest()) != NULL);

    apr_pool_destroy(p);
    return 0;
}
