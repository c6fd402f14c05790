/* mcp_plot — see mcp_plot.h. */
#include <math.h>

#include "mcp_plot.h"

/* The drawing area of every plot, in the viewBox's units; the SVG scales to its box. */
#define WIDTH   640.0
#define LEFT     48.0   /* the y axis's labels   */
#define RIGHT     8.0
#define TOP       8.0
#define BOTTOM   20.0   /* the x axis's labels   */

double mcp_plot_ceiling(double v)
{
    double p, steps[] = { 1, 2, 5, 10 };
    int i;

    if (!(v > 0)) {
        return 1;
    }
    p = pow(10, floor(log10(v)));
    for (i = 0; i < 4; i++) {
        if (steps[i] * p >= v * (1 - 1e-12)) {
            return steps[i] * p;
        }
    }
    return 10 * p;
}

static double value_at(const mcp_plot_series_t *s, int i)
{
    double v = s->values[i];

    return v > 0 && isfinite(v) ? v : 0;
}

static void open_svg(mcp_html_t *h, const char *title, double height)
{
    mcp_html_rawf(h, "<figure class=\"plot\"><svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
                  "aria-label=\"", WIDTH, height);
    mcp_html_text(h, title);
    mcp_html_raw(h, "\"><title>");
    mcp_html_text(h, title);
    mcp_html_raw(h, "</title>\n");
}

static void legend(mcp_html_t *h, const char *title, const mcp_plot_series_t *series, int k)
{
    int j;

    mcp_html_raw(h, "</svg><figcaption>");
    mcp_html_text(h, title);
    for (j = 0; j < k; j++) {
        mcp_html_raw(h, " <span class=\"key ");
        mcp_html_text(h, series[j].css_class);
        mcp_html_raw(h, "\"></span>");
        mcp_html_text(h, series[j].name);
    }
    mcp_html_raw(h, "</figcaption></figure>\n");
}

static void number(mcp_html_t *h, double v)
{
    mcp_html_rawf(h, v == floor(v) && fabs(v) < 1e15 ? "%.0f" : "%.1f", v);
}

void mcp_plot_columns(mcp_html_t *h, const char *title, int n, const char *const *labels,
                      const mcp_plot_series_t *series, int k, const char *unit)
{
    const double height = 180, plot_h = height - TOP - BOTTOM;
    double top = 0, w;
    int i, j;

    for (i = 0; i < n; i++) {
        double sum = 0;

        for (j = 0; j < k; j++) {
            sum += value_at(&series[j], i);
        }
        top = sum > top ? sum : top;
    }
    top = mcp_plot_ceiling(top);
    w = n > 0 ? (WIDTH - LEFT - RIGHT) / n : 0;
    open_svg(h, title, height);
    mcp_html_rawf(h, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                  "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
                  LEFT, TOP, LEFT, TOP + plot_h, LEFT, TOP + plot_h, WIDTH - RIGHT, TOP + plot_h);
    mcp_html_rawf(h, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", LEFT - 4,
                  TOP + 10);
    number(h, top);
    mcp_html_rawf(h, "</text><text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0"
                  "</text>\n", LEFT - 4, TOP + plot_h);
    for (i = 0; i < n; i++) {
        double y = TOP + plot_h;

        for (j = 0; j < k; j++) {
            double v = value_at(&series[j], i), bar = v / top * plot_h;

            if (v <= 0) {
                continue;
            }
            y -= bar;
            mcp_html_rawf(h, "<rect class=\"");
            mcp_html_text(h, series[j].css_class);
            mcp_html_rawf(h, "\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>",
                          LEFT + i * w + w * 0.1, y, w * 0.8, bar);
            if (labels && labels[i]) {
                mcp_html_text(h, labels[i]);
                mcp_html_raw(h, ": ");
            }
            number(h, v);
            mcp_html_raw(h, " ");
            mcp_html_text(h, unit);
            mcp_html_raw(h, " (");
            mcp_html_text(h, series[j].name);
            mcp_html_raw(h, ")</title></rect>\n");
        }
    }
    if (labels && n > 0) {
        mcp_html_rawf(h, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">", LEFT, height - 4);
        mcp_html_text(h, labels[0]);
        mcp_html_rawf(h, "</text><text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                      WIDTH - RIGHT, height - 4);
        mcp_html_text(h, labels[n - 1]);
        mcp_html_raw(h, "</text>\n");
    }
    legend(h, title, series, k);
}

void mcp_plot_bars(mcp_html_t *h, const char *title, int n, const char *const *labels,
                   const mcp_plot_series_t *series, int k, const char *unit)
{
    const double row = 6.0 * (k > 0 ? k : 1) + 10, left = 200.0;
    const double height = TOP + row * (n > 0 ? n : 1) + BOTTOM;
    double top = 0, span = WIDTH - left - RIGHT - 60;
    int i, j;

    if (k < 1) {
        return;
    }
    for (i = 0; i < n; i++) {
        for (j = 0; j < k; j++) {
            top = value_at(&series[j], i) > top ? value_at(&series[j], i) : top;
        }
    }
    top = mcp_plot_ceiling(top);
    open_svg(h, title, height);
    mcp_html_rawf(h, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
                  left, TOP, left, height - BOTTOM);
    for (i = 0; i < n; i++) {
        double y = TOP + i * row;

        mcp_html_rawf(h, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                      left - 6, y + row / 2 + 3);
        mcp_html_text(h, labels[i]);
        mcp_html_raw(h, "</text>\n");
        for (j = 0; j < k; j++) {
            double v = value_at(&series[j], i);

            mcp_html_raw(h, "<rect class=\"");
            mcp_html_text(h, series[j].css_class);
            mcp_html_rawf(h, "\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"5\"><title>",
                          left, y + 4 + j * 6, v / top * span);
            mcp_html_text(h, labels[i]);
            mcp_html_raw(h, ", ");
            mcp_html_text(h, series[j].name);
            mcp_html_raw(h, ": ");
            number(h, v);
            mcp_html_raw(h, " ");
            mcp_html_text(h, unit);
            mcp_html_raw(h, "</title></rect>\n");
        }
        mcp_html_rawf(h, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">",
                      left + value_at(&series[k - 1], i) / top * span + 4, y + row / 2 + 3);
        number(h, value_at(&series[k - 1], i));
        mcp_html_raw(h, "</text>\n");
    }
    mcp_html_rawf(h, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">0</text>"
                  "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                  left, height - 4, left + span, height - 4);
    number(h, top);
    mcp_html_raw(h, " ");
    mcp_html_text(h, unit);
    mcp_html_raw(h, "</text>\n");
    legend(h, title, series, k);
}

void mcp_plot_timeline(mcp_html_t *h, const char *title, int n, const double *offsets_ms,
                       const char *const *classes, const char *const *tips)
{
    const double height = 70, axis = 34;
    double last = n > 0 && offsets_ms[n - 1] > 0 ? offsets_ms[n - 1] : 1;
    int i;

    open_svg(h, title, height);
    mcp_html_rawf(h, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
                  LEFT, axis, WIDTH - RIGHT, axis);
    for (i = 0; i < n; i++) {
        /* On the axis: a mark later than the last one (offsets out of order) at its end. */
        double x = fmin(LEFT + (offsets_ms[i] > 0 ? offsets_ms[i] : 0) / last
                        * (WIDTH - LEFT - RIGHT), WIDTH - RIGHT);

        mcp_html_raw(h, "<circle class=\"");
        mcp_html_text(h, classes[i]);
        mcp_html_rawf(h, "\" cx=\"%.1f\" cy=\"%.1f\" r=\"6\"><title>", x,
                      axis - (i % 2 ? 10 : 0));
        mcp_html_text(h, tips[i]);
        mcp_html_raw(h, "</title></circle>\n");
    }
    mcp_html_rawf(h, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">0 ms</text>"
                  "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                  LEFT, height - 4, WIDTH - RIGHT, height - 4);
    number(h, n > 0 ? offsets_ms[n - 1] : 0);
    mcp_html_raw(h, " ms</text>\n</svg><figcaption>");
    mcp_html_text(h, title);
    mcp_html_raw(h, "</figcaption></figure>\n");
}
