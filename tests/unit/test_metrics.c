/* Unit tests for mcp_metrics: buckets, atomic counters, the Prometheus text. */
#include <string.h>

#include <apr_pools.h>
#include <check.h>

#include "unit_main.h"
#include "unit_pool.h"

#include "mcp_metrics.h"

START_TEST(buckets)
{
    ck_assert_int_eq(mcp_metrics_bucket(-5), 0);
    ck_assert_int_eq(mcp_metrics_bucket(0), 0);
    ck_assert_int_eq(mcp_metrics_bucket(1000), 0);      /* le is inclusive */
    ck_assert_int_eq(mcp_metrics_bucket(1001), 1);
    ck_assert_int_eq(mcp_metrics_bucket(30000000), MCP_METRICS_BOUNDS - 1);
    ck_assert_int_eq(mcp_metrics_bucket(30000001), MCP_METRICS_BOUNDS);
}
END_TEST

START_TEST(counter_sample_and_escape)
{
    mcp_metrics_text_t *t = mcp_metrics_text_create(pool);
    apr_uint64_t c = 0;
    apr_size_t len;
    const char *text;

    mcp_metrics_add(&c, 3);
    mcp_metrics_add(&c, 4);
    ck_assert_uint_eq(mcp_metrics_read(&c), 7);
    mcp_metrics_family(t, "mcp_calls_total", "counter", "Calls.");
    mcp_metrics_sample(t, "mcp_calls_total", NULL, NULL, (apr_int64_t)mcp_metrics_read(&c));
    mcp_metrics_sample(t, "mcp_rejected_total", "status", "4\"0\\0\n", 2);
    text = mcp_metrics_text_get(t, &len);
    ck_assert_str_eq(text, "# HELP mcp_calls_total Calls.\n# TYPE mcp_calls_total counter\n"
                           "mcp_calls_total 7\n"
                           "mcp_rejected_total{status=\"4\\\"0\\\\0\\n\"} 2\n");
    ck_assert_uint_eq(len, strlen(text));
}
END_TEST

START_TEST(histogram_is_cumulative)
{
    mcp_metrics_text_t *t = mcp_metrics_text_create(pool);
    mcp_metrics_hist_t h;
    const char *text;

    memset(&h, 0, sizeof(h));
    mcp_metrics_observe(&h, 500);        /* le 0.001 */
    mcp_metrics_observe(&h, 2000);       /* le 0.0025 */
    mcp_metrics_observe(&h, 2000);
    mcp_metrics_observe(&h, 60000000);   /* +Inf only */
    ck_assert_uint_eq(h.count, 4);
    mcp_metrics_histogram(t, "mcp_x_seconds", "X.", &h);
    text = mcp_metrics_text_get(t, NULL);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE mcp_x_seconds histogram\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_bucket{le=\"0.001\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_bucket{le=\"0.0025\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_bucket{le=\"1\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_bucket{le=\"30\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_bucket{le=\"+Inf\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_sum 60.0045\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_x_seconds_count 4\n"));
}
END_TEST

START_TEST(empty_histogram)
{
    mcp_metrics_text_t *t = mcp_metrics_text_create(pool);
    mcp_metrics_hist_t h;
    const char *text;

    memset(&h, 0, sizeof(h));
    mcp_metrics_histogram(t, "mcp_y_seconds", "Y.", &h);
    text = mcp_metrics_text_get(t, NULL);
    ck_assert_ptr_nonnull(strstr(text, "mcp_y_seconds_bucket{le=\"+Inf\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_y_seconds_sum 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "mcp_y_seconds_count 0\n"));
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("mcp_metrics");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, buckets);
    tcase_add_test(tc, counter_sample_and_escape);
    tcase_add_test(tc, histogram_is_cumulative);
    tcase_add_test(tc, empty_histogram);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(metrics_suite());
}
