/* mcp_metrics — see mcp_metrics.h. */
#include <string.h>

#include <apr_strings.h>
#include <apr_tables.h>

#include "mcp_metrics.h"

static const apr_int64_t bounds[MCP_METRICS_BOUNDS] = {
    1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 30000000
};

const apr_int64_t *mcp_metrics_bounds(void)
{
    return bounds;
}

int mcp_metrics_bucket(apr_int64_t usec)
{
    int i;

    for (i = 0; i < MCP_METRICS_BOUNDS; i++) {
        if (usec <= bounds[i]) {
            return i;
        }
    }
    return MCP_METRICS_BOUNDS;
}

void mcp_metrics_add(apr_uint64_t *counter, apr_uint64_t n)
{
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

apr_uint64_t mcp_metrics_read(const apr_uint64_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void mcp_metrics_observe(mcp_metrics_hist_t *h, apr_int64_t usec)
{
    if (usec < 0) {
        usec = 0;
    }
    mcp_metrics_add(&h->buckets[mcp_metrics_bucket(usec)], 1);
    mcp_metrics_add(&h->sum_usec, (apr_uint64_t)usec);
    mcp_metrics_add(&h->count, 1);
}

/* ---- Prometheus text ------------------------------------------------------------------------ */

struct mcp_metrics_text_t {
    apr_pool_t         *pool;
    apr_array_header_t *lines;   /* const char *, joined by mcp_metrics_text_get */
};

mcp_metrics_text_t *mcp_metrics_text_create(apr_pool_t *p)
{
    mcp_metrics_text_t *t = apr_palloc(p, sizeof(*t));

    t->pool = p;
    t->lines = apr_array_make(p, 128, sizeof(const char *));
    return t;
}

static void puts_(mcp_metrics_text_t *t, const char *s)
{
    APR_ARRAY_PUSH(t->lines, const char *) = s;
}

void mcp_metrics_family(mcp_metrics_text_t *t, const char *name, const char *type,
                        const char *help)
{
    puts_(t, apr_psprintf(t->pool, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type));
}

static const char *escape_label(apr_pool_t *p, const char *v)
{
    char *out = apr_palloc(p, strlen(v) * 2 + 1), *o = out;

    for (; *v; v++) {
        if (*v == '\\' || *v == '"') {
            *o++ = '\\';
            *o++ = *v;
        }
        else if (*v == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        }
        else {
            *o++ = *v;
        }
    }
    *o = '\0';
    return out;
}

void mcp_metrics_sample(mcp_metrics_text_t *t, const char *name, const char *label,
                        const char *label_value, apr_int64_t value)
{
    if (label) {
        puts_(t, apr_psprintf(t->pool, "%s{%s=\"%s\"} %" APR_INT64_T_FMT "\n", name, label,
                              escape_label(t->pool, label_value ? label_value : ""), value));
    }
    else {
        puts_(t, apr_psprintf(t->pool, "%s %" APR_INT64_T_FMT "\n", name, value));
    }
}

/* Seconds as the format writes them: 0.001, 2.5, 30 (no exponent, no trailing zeros). */
static const char *seconds(apr_pool_t *p, apr_uint64_t usec)
{
    char *s = apr_psprintf(p, "%" APR_UINT64_T_FMT ".%06" APR_UINT64_T_FMT, usec / 1000000,
                           usec % 1000000);
    char *end = s + strlen(s) - 1;

    while (*end == '0') {
        *end-- = '\0';
    }
    if (*end == '.') {
        *end = '\0';
    }
    return s;
}

void mcp_metrics_histogram(mcp_metrics_text_t *t, const char *name, const char *help,
                           const mcp_metrics_hist_t *h)
{
    apr_uint64_t cumulative = 0, sum;
    int i;

    mcp_metrics_family(t, name, "histogram", help);
    for (i = 0; i <= MCP_METRICS_BOUNDS; i++) {
        cumulative += mcp_metrics_read(&h->buckets[i]);
        puts_(t, apr_psprintf(t->pool, "%s_bucket{le=\"%s\"} %" APR_UINT64_T_FMT "\n", name,
                              i < MCP_METRICS_BOUNDS ? seconds(t->pool, (apr_uint64_t)bounds[i])
                                                     : "+Inf", cumulative));
    }
    /* Observations landing while this is rendered could make h->count differ from +Inf; the
     * format wants them equal, so _count is the cumulative total. */
    sum = mcp_metrics_read(&h->sum_usec);
    puts_(t, apr_psprintf(t->pool, "%s_sum %s\n%s_count %" APR_UINT64_T_FMT "\n", name,
                          seconds(t->pool, sum), name, cumulative));
}

const char *mcp_metrics_text_get(mcp_metrics_text_t *t, apr_size_t *len)
{
    const char *text = apr_array_pstrcat(t->pool, t->lines, '\0');

    if (len) {
        *len = strlen(text);
    }
    return text;
}
