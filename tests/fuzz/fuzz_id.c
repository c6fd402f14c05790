/* libFuzzer harness for mcp_id: the session id and event id codecs.
 *
 * Checked:
 *  1. mcp_id_event_parse accepts only canonical ids: whatever it accepts, mcp_id_event_format
 *     writes back byte for byte (so an id has exactly one spelling, and a Last-Event-ID a
 *     client sends maps to one stored position);
 *  2. two int64 taken from the input, formatted, parse back to themselves (or format refuses
 *     them exactly when stream < 1 or seq < 0);
 *  3. the input bytes encoded as a session id have ceil(4n/3) base64url characters, and are
 *     well-formed exactly when there were 24 of them; is_wellformed on the raw input agrees
 *     with a direct check of length and alphabet.
 */

#include "fuzz.h"

#include "mcp_id.h"

static int b64url(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'
           || c == '_';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p;
    char *s, *enc, *back;
    apr_int64_t a = 0, b = 0;
    size_t i, n;
    int ok;

    apr_pool_create(&p, fuzz_root());
    s = fuzz_cstr(p, data, size);

    /* 1. */
    if (mcp_id_event_parse(s, &a, &b) == 0) {
        FUZZ_CHECK(a >= 1 && b >= 0);
        back = mcp_id_event_format(p, a, b);
        FUZZ_CHECK(back && !strcmp(back, s));
    }
    FUZZ_CHECK(mcp_id_event_parse(s, NULL, NULL) == (mcp_id_event_parse(s, &a, &b)));

    /* 2. */
    if (size >= 16) {
        apr_int64_t x, y, x2 = 0, y2 = 0;
        memcpy(&x, data, 8);
        memcpy(&y, data + 8, 8);
        back = mcp_id_event_format(p, x, y);
        if (x < 1 || y < 0) {
            FUZZ_CHECK(back == NULL);
        }
        else {
            FUZZ_CHECK(back && mcp_id_event_parse(back, &x2, &y2) == 0 && x2 == x && y2 == y);
        }
    }

    /* 3. */
    enc = mcp_id_session_encode(p, data, size);
    n = strlen(enc);
    FUZZ_CHECK(n == (size * 4 + 2) / 3);
    for (i = 0; i < n; i++)
        FUZZ_CHECK(b64url((unsigned char)enc[i]));
    FUZZ_CHECK(mcp_id_session_is_wellformed(enc) == (size == MCP_ID_SESSION_RANDOM_BYTES));
    ok = strlen(s) == MCP_ID_SESSION_LEN;
    for (i = 0; ok && s[i]; i++)
        ok = b64url((unsigned char)s[i]);
    FUZZ_CHECK(mcp_id_session_is_wellformed(s) == ok);

    apr_pool_destroy(p);
    return 0;
}
