/* mcp_metrics — counters and latency histograms that several processes share, and their
 * rendering in the Prometheus text exposition format (version 0.0.4).
 *
 * Pure code: no httpd headers. A histogram is plain memory of fixed size (it may live in shared
 * memory); mcp_metrics_observe updates it with atomic additions, so any thread of any process
 * that maps it may record into it while another renders it. Values are microseconds; the
 * rendering speaks seconds, as Prometheus names them (`*_seconds`).
 */
#ifndef MCP_METRICS_H
#define MCP_METRICS_H

#include <apr_pools.h>
#include <apr_time.h>

/* Upper bounds of the buckets, in microseconds (1 ms ... 30 s); one more bucket, +Inf, follows. */
#define MCP_METRICS_BOUNDS 14

typedef struct mcp_metrics_hist_t {
    apr_uint64_t buckets[MCP_METRICS_BOUNDS + 1];  /* per bucket, not cumulative; last: +Inf */
    apr_uint64_t count;
    apr_uint64_t sum_usec;
} mcp_metrics_hist_t;

/* The bucket bounds in microseconds (MCP_METRICS_BOUNDS of them, ascending). */
const apr_int64_t *mcp_metrics_bounds(void);

/* The bucket a value falls in: the first whose bound is >= usec, or MCP_METRICS_BOUNDS (+Inf).
 * A negative value counts as 0. */
int mcp_metrics_bucket(apr_int64_t usec);

/* Records one value (atomic; any thread, any process). */
void mcp_metrics_observe(mcp_metrics_hist_t *h, apr_int64_t usec);

/* Adds n to a shared counter (atomic), and reads one. */
void mcp_metrics_add(apr_uint64_t *counter, apr_uint64_t n);
apr_uint64_t mcp_metrics_read(const apr_uint64_t *counter);

/* ---- Prometheus text ------------------------------------------------------------------------ */

typedef struct mcp_metrics_text_t mcp_metrics_text_t;

mcp_metrics_text_t *mcp_metrics_text_create(apr_pool_t *p);

/* The # HELP and # TYPE lines of a family (type: "counter", "gauge" or "histogram"). */
void mcp_metrics_family(mcp_metrics_text_t *t, const char *name, const char *type,
                        const char *help);

/* One sample line: name{label="value"} value. label may be NULL (no labels); the label's
 * value is escaped as the format requires (backslash, double quote, newline). */
void mcp_metrics_sample(mcp_metrics_text_t *t, const char *name, const char *label,
                        const char *label_value, apr_int64_t value);

/* A whole histogram family: HELP, TYPE, the cumulative _bucket lines (le in seconds, the last
 * "+Inf"), _sum (seconds) and _count, from a consistent-enough snapshot of h. */
void mcp_metrics_histogram(mcp_metrics_text_t *t, const char *name, const char *help,
                           const mcp_metrics_hist_t *h);

/* The text so far (NUL-terminated; its length in *len when len is not NULL). */
const char *mcp_metrics_text_get(mcp_metrics_text_t *t, apr_size_t *len);

#endif
