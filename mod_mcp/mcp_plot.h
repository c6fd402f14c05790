/* mcp_plot — the console's plots, drawn on the server as inline SVG.
 *
 * No script and no library from the network: the console must work on a host without internet
 * access and under a Content Security Policy that allows no script at all. Each plot is an
 * <svg> element (colours come from the stylesheet through class names, since the policy allows
 * no inline style) followed by an HTML legend; every mark carries a <title>, which browsers
 * show as its tooltip. Labels and names are data: they go in through mcp_html_text.
 *
 * Pure code: APR only, no httpd headers.
 */
#ifndef MCP_PLOT_H
#define MCP_PLOT_H

#include "mcp_html.h"

/* One series of values: its name (legend, tooltips) and its class (the stylesheet's colour). */
typedef struct mcp_plot_series_t {
    const char   *name;
    const char   *css_class;
    const double *values;      /* one per column or per bar row; negative counts as 0 */
} mcp_plot_series_t;

/* A column chart of n columns, each a stack of the k series' values (the first at the bottom),
 * scaled to the highest stack; the first and last column's labels under the axis, and
 * labels[i] in column i's tooltip (labels may be NULL). unit follows the numbers ("calls"). */
void mcp_plot_columns(mcp_html_t *h, const char *title, int n, const char *const *labels,
                      const mcp_plot_series_t *series, int k, const char *unit);

/* Horizontal bars: a row per label, k bars in each (e.g. p50, p90, p99), on one scale. */
void mcp_plot_bars(mcp_html_t *h, const char *title, int n, const char *const *labels,
                   const mcp_plot_series_t *series, int k, const char *unit);

/* A timeline of n marks at offsets_ms (from 0, ascending), marks[i] of class classes[i] with
 * the tooltip tips[i]; the axis runs from 0 to the last offset. */
void mcp_plot_timeline(mcp_html_t *h, const char *title, int n, const double *offsets_ms,
                       const char *const *classes, const char *const *tips);

/* The smallest "round" number (1, 2 or 5 times a power of ten) >= v; 1 for v <= 0. */
double mcp_plot_ceiling(double v);

#endif
