/* unit_main.h — the main() every unit test program shares: APR initialised, one Check suite
 * run, exit status 0 only when every case passed. */
#ifndef MCP_UNIT_MAIN_H
#define MCP_UNIT_MAIN_H

#include <stdlib.h>

#include <apr_general.h>
#include <check.h>

static inline int mcp_unit_run(Suite *suite)
{
    SRunner *sr;
    int failed;

    apr_initialize();
    sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    apr_terminate();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
