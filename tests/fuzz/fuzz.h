/* fuzz.h — what every libFuzzer harness in tests/fuzz shares: the APR root pool, a check that
 * aborts with a message (a finding), and, with -DFUZZ_STANDALONE, a main that replays the files
 * named on the command line (any compiler, no libFuzzer: `cc -DFUZZ_STANDALONE ...`).
 *
 * A harness defines LLVMFuzzerTestOneInput; each input gets its own subpool of fuzz_root(),
 * destroyed before returning, so LeakSanitizer sees every allocation the code under test keeps.
 */
#ifndef MCP_FUZZ_H
#define MCP_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <apr_general.h>
#include <apr_pools.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The process-wide root pool (APR initialised on first use). */
static inline apr_pool_t *fuzz_root(void)
{
    static apr_pool_t *root;
    if (!root) {
        apr_initialize();
        apr_pool_create(&root, NULL);
    }
    return root;
}

/* A property the harness checks; a failure is a finding: say which and abort. */
#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* The input as a NUL-terminated string in p (cut at its first NUL byte, as C callers see it). */
static inline char *fuzz_cstr(apr_pool_t *p, const uint8_t *data, size_t size)
{
    char *s = apr_palloc(p, size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Splits the input (as a C string) at '\n' into at most max fields; returns how many. */
static inline int fuzz_fields(apr_pool_t *p, const uint8_t *data, size_t size, char **out, int max)
{
    char *s = fuzz_cstr(p, data, size);
    int n = 0;
    while (n < max) {
        char *nl = strchr(s, '\n');
        out[n++] = s;
        if (!nl)
            break;
        *nl = '\0';
        s = nl + 1;
    }
    return n;
}

#ifdef FUZZ_STANDALONE
int main(int argc, char **argv)
{
    static uint8_t buf[1 << 20];
    int i;
    for (i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        size_t n;
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("%d input(s) ok\n", argc - 1);
    return 0;
}
#endif

#endif
