/* unit_pool.h — the fixture most unit test programs share: `pool`, a fresh APR pool for each test
 * case (tcase_add_checked_fixture(tc, setup, teardown)), destroyed after it with all it holds. */
#ifndef MCP_UNIT_POOL_H
#define MCP_UNIT_POOL_H

#include <apr_pools.h>
#include <check.h>

static apr_pool_t *pool;

static void setup(void)
{
    ck_assert_int_eq(apr_pool_create(&pool, NULL), APR_SUCCESS);
}

static void teardown(void)
{
    apr_pool_destroy(pool);
    pool = NULL;
}

#endif
