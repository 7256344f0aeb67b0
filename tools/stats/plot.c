#include "tools/stats/plot.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tools/stats/scale.h"
#include "tools/stats/svg.h"

#define PAGE_W 960
#define PAGE_H 760
#define AXIS_COLOR "#444444"
#define GRID_COLOR "#e4e4e4"
#define LEGEND_MAX 16

/* Tableau 10: distinct for most kinds of colour blindness. */
static const char *const PALETTE[] = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
};
#define N_PALETTE (sizeof PALETTE / sizeof PALETTE[0])

/* A chart's frame: data domain [x0, x1] x [y0, y1] onto the pixel box
 * left..right, top..bottom (y grows down in SVG). */
typedef struct frame {
    double left, top, right, bottom;
    double x0, x1, y0, y1;
} frame;

static double px(const frame *fr, double x)
{
    return fr->left + (x - fr->x0) / (fr->x1 - fr->x0) * (fr->right - fr->left);
}

static double py(const frame *fr, double y)
{
    return fr->bottom - (y - fr->y0) / (fr->y1 - fr->y0) * (fr->bottom - fr->top);
}

static void number_label(char *buf, size_t size, double v)
{
    snprintf(buf, size, "%.6g", fabs(v) < 1e-9 ? 0.0 : v);
}

/* Y from 0 to a round top, gridlines and labels at round steps. */
static void y_axis(FILE *f, frame *fr, double max, const char *label)
{
    double step = scale_nice_step((max > 0 ? max : 1) / 5);
    fr->y0 = 0;
    fr->y1 = ceil((max > 0 ? max : 1) / step - 1e-9) * step;
    char buf[32];
    for (double v = 0; v <= fr->y1 + step / 2; v += step) {
        double y = py(fr, v);
        svg_line(f, fr->left, y, fr->right, y, GRID_COLOR, 1);
        svg_line(f, fr->left - 4, y, fr->left, y, AXIS_COLOR, 1);
        number_label(buf, sizeof buf, v);
        svg_text(f, fr->left - 7, y + 4, "end", 11, 0, buf);
    }
    svg_line(f, fr->left, fr->top, fr->left, fr->bottom, AXIS_COLOR, 1);
    svg_text(f, fr->left - 52, (fr->top + fr->bottom) / 2, "middle", 12, -90, label);
}

static void x_tick(FILE *f, const frame *fr, double x, const char *label)
{
    double at = px(fr, x);
    svg_line(f, at, fr->bottom, at, fr->bottom + 4, AXIS_COLOR, 1);
    svg_text(f, at, fr->bottom + 17, "middle", 11, 0, label);
}

static void x_axis_numbers(FILE *f, const frame *fr, const char *label)
{
    double step = scale_nice_step((fr->x1 - fr->x0) / 8);
    char buf[32];
    for (double v = ceil(fr->x0 / step - 1e-9) * step; v <= fr->x1 + step * 1e-9; v += step) {
        number_label(buf, sizeof buf, v);
        x_tick(f, fr, v, buf);
    }
    svg_line(f, fr->left, fr->bottom, fr->right, fr->bottom, AXIS_COLOR, 1);
    svg_text(f, (fr->left + fr->right) / 2, fr->bottom + 38, "middle", 12, 0, label);
}

static void utc(char *buf, size_t size, int64_t ms, const char *fmt)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, fmt, &tm);
}

/* Round time steps; labels as precise as the step needs. */
static void x_axis_time(FILE *f, const frame *fr)
{
    int64_t x0 = (int64_t)fr->x0, x1 = (int64_t)fr->x1;
    int64_t step = scale_time_step(x1 - x0, 8);
    const char *fmt = step < 1000    ? "%M:%S"
                      : step < 60000 ? "%H:%M:%S"
                      : step < 86400000 ? "%H:%M" : "%m-%d";
    char buf[64];
    int64_t first = (x0 + step - 1) / step * step;
    for (int64_t t = first; t <= x1; t += step) {
        utc(buf, sizeof buf, t, fmt);
        if (step < 1000) /* sub-second ticks: minutes, seconds and milliseconds */
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), ".%03d", (int)(t % 1000));
        x_tick(f, fr, (double)t, buf);
    }
    svg_line(f, fr->left, fr->bottom, fr->right, fr->bottom, AXIS_COLOR, 1);
    char day[32], label[96];
    utc(day, sizeof day, x0, "%Y-%m-%d");
    snprintf(label, sizeof label, "time (UTC, %s)", day);
    svg_text(f, (fr->left + fr->right) / 2, fr->bottom + 38, "middle", 12, 0, label);
}

static void empty_note(FILE *f, const frame *fr, const char *what)
{
    svg_text(f, (fr->left + fr->right) / 2, (fr->top + fr->bottom) / 2, "middle", 14, 0, what);
}

typedef struct cols3 {
    int a, b, c;
} cols3;

static int find_cols(const table *t, const char *a, const char *b, const char *c, cols3 *out,
                     llmq_err *err)
{
    *out = (cols3){table_col_index(t, a), table_col_index(t, b), table_col_index(t, c)};
    if (out->a < 0 || out->b < 0 || out->c < 0)
        return llmq_errf(err, "plot: table %s lacks %s, %s or %s", t->name, a, b, c);
    return 0;
}

/* ---- throughput per worker ------------------------------------------------------- */

static double cell_num(const table *t, size_t r, int c)
{
    const table_cell *cell = table_at(t, r, (size_t)c);
    if (cell->null)
        return 0;
    return t->cols[c].kind == TABLE_INT ? (double)cell->i : cell->d;
}

static const char *cell_str(const table *t, size_t r, int c)
{
    const table_cell *cell = table_at(t, r, (size_t)c);
    return cell->null ? "(none)" : cell->s;
}

/* Rows [r, end) are one worker's (the report orders by worker, then time). */
static size_t series_end(const table *t, const cols3 *c, size_t r)
{
    size_t end = r + 1;
    while (end < t->n_rows && strcmp(cell_str(t, end, c->b), cell_str(t, r, c->b)) == 0)
        end++;
    return end;
}

static void series(FILE *f, const frame *fr, const table *t, const cols3 *c, size_t r,
                   size_t end, const char *color)
{
    double xy[2 * 512];
    size_t n = 0;
    /* Long series are drawn as consecutive polylines of one label. */
    for (size_t i = r; i < end; i++) {
        xy[2 * n] = px(fr, cell_num(t, i, c->a));
        xy[2 * n + 1] = py(fr, cell_num(t, i, c->c));
        if (end - r <= 120)
            svg_circle(f, xy[2 * n], xy[2 * n + 1], 2.5, color);
        if (++n == 512 || i + 1 == end) {
            svg_polyline(f, xy, n, color, 2, cell_str(t, r, c->b));
            xy[0] = xy[2 * n - 2];
            xy[1] = xy[2 * n - 1];
            n = 1;
        }
    }
}

static void legend_entry(FILE *f, double x, double y, const char *color, const char *label)
{
    svg_line(f, x, y - 4, x + 22, y - 4, color, 2);
    svg_circle(f, x + 11, y - 4, 2.5, color);
    svg_text(f, x + 28, y, "start", 11, 0, label);
}

static void throughput_chart(FILE *f, const table *t, int64_t bucket_ms, const cols3 *c)
{
    frame fr = {.left = 80, .top = 30, .right = PAGE_W - 210, .bottom = 300};
    svg_group_begin(f, "throughput", 0, 70);
    svg_text(f, fr.left, 16, "start", 14, 0, "Generated tokens per second, per worker");
    double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
    for (size_t r = 0; r < t->n_rows; r++) {
        double x = cell_num(t, r, c->a), y = cell_num(t, r, c->c);
        xmin = fmin(xmin, x);
        xmax = fmax(xmax, x);
        ymax = fmax(ymax, y);
    }
    if (t->n_rows == 0) {
        xmin = 0;
        xmax = 1;
    } else if (xmax <= xmin) { /* one bucket: a bucket's room on either side */
        xmin -= (double)bucket_ms;
        xmax += (double)bucket_ms;
    }
    fr.x0 = xmin;
    fr.x1 = xmax;
    y_axis(f, &fr, ymax, "tok/s");
    if (t->n_rows == 0)
        empty_note(f, &fr, "no finished jobs in the selection");
    else
        x_axis_time(f, &fr);
    size_t k = 0;
    for (size_t r = 0; r < t->n_rows; k++) {
        size_t end = series_end(t, c, r);
        const char *color = PALETTE[k % N_PALETTE];
        series(f, &fr, t, c, r, end, color);
        if (k < LEGEND_MAX)
            legend_entry(f, fr.right + 20, fr.top + 12 + 18 * (double)k, color,
                         cell_str(t, r, c->b));
        r = end;
    }
    if (k > LEGEND_MAX) {
        char more[48];
        snprintf(more, sizeof more, "and %zu more", k - LEGEND_MAX);
        svg_text(f, fr.right + 20, fr.top + 12 + 18 * LEGEND_MAX, "start", 11, 0, more);
    }
    svg_group_end(f);
}

/* ---- decode speed histogram -------------------------------------------------------- */

#define TAIL_SLOT 76 /* pixels at either end for a tail's bar, its gaps and its label */
#define TAIL_BAR 40
#define TAIL_GAP 14
#define TAIL_COLOR "#9c755f"

/* The histogram's rows: the regular bins [first, end), and the tails (the
 * jobs beyond the fences, report.h) when they are there. */
typedef struct bins {
    size_t first, end;
    bool below, above;
} bins;

static bool is_tail(const table *t, size_t r, int col, const char *which)
{
    const table_cell *cell = table_at(t, r, (size_t)col);
    return !cell->null && strcmp(cell->s, which) == 0;
}

static bins find_bins(const table *t, int tail_col)
{
    bins b = {.first = 0, .end = t->n_rows};
    b.below = t->n_rows > 0 && is_tail(t, 0, tail_col, "below");
    b.above = t->n_rows > 1 && is_tail(t, t->n_rows - 1, tail_col, "above");
    b.first += b.below;
    b.end -= b.above;
    return b;
}

static void bar(FILE *f, const frame *fr, double x, double w, double n, const char *color,
                double lo, double hi, const char *what)
{
    char title[128];
    snprintf(title, sizeof title, "%.6g to %.6g tok/s: %.0f jobs%s", lo, hi, n, what);
    double y = py(fr, n);
    svg_rect(f, x, y, w, fr->bottom - y, color, title);
}

/* A tail's bar in its slot at the chart's end beside the bins (whole: the
 * chart, inner: the part the bins span), labelled with where it starts
 * ("< 500" or ">= 2300"), past a break in the axis. */
static void tail_bar(FILE *f, const frame *whole, const frame *inner, const table *t,
                     const cols3 *c, size_t r, bool below)
{
    double lo = cell_num(t, r, c->a), hi = cell_num(t, r, c->b), n = cell_num(t, r, c->c);
    double x = below ? whole->left + TAIL_GAP : whole->right - TAIL_GAP - TAIL_BAR;
    bar(f, whole, x, TAIL_BAR, n, TAIL_COLOR, lo, hi,
        below ? " (below the bins: slower than the bulk)"
              : " (above the bins: faster than the bulk)");
    double brk = below ? inner->left - TAIL_GAP : inner->right + TAIL_GAP;
    svg_line(f, x, whole->bottom, x + TAIL_BAR, whole->bottom, AXIS_COLOR, 1);
    svg_line(f, brk - 3, whole->bottom + 5, brk + 3, whole->bottom - 5, AXIS_COLOR, 1);
    char label[48], text[64];
    number_label(label, sizeof label, below ? hi : lo);
    snprintf(text, sizeof text, "%s %s", below ? "<" : "\u2265", label);
    svg_text(f, x + TAIL_BAR / 2.0, whole->bottom + 17, "middle", 11, 0, text);
}

static void histogram_chart(FILE *f, const table *t, const cols3 *c, int tail_col)
{
    frame fr = {.left = 80, .top = 30, .right = PAGE_W - 40, .bottom = 250};
    svg_group_begin(f, "histogram", 0, 450);
    svg_text(f, fr.left, 16, "start", 14, 0, "Jobs by decode speed (tok/s of each job)");
    const bins b = find_bins(t, tail_col);
    double ymax = 0;
    for (size_t r = 0; r < t->n_rows; r++)
        ymax = fmax(ymax, cell_num(t, r, c->c));
    bool empty = b.first >= b.end || ymax == 0;
    y_axis(f, &fr, ymax, "jobs");
    /* The bins span the chart but for the tails' slots at its ends. */
    frame in = fr;
    in.left += b.below && !empty ? TAIL_SLOT : 0;
    in.right -= b.above && !empty ? TAIL_SLOT : 0;
    in.x0 = empty ? 0 : cell_num(t, b.first, c->a);
    in.x1 = empty ? 1 : cell_num(t, b.end - 1, c->b);
    if (empty)
        empty_note(f, &fr, "no done jobs with a decode time");
    for (size_t r = b.first; r < b.end && !empty; r++) {
        double lo = cell_num(t, r, c->a), hi = cell_num(t, r, c->b);
        double x = px(&in, lo);
        bar(f, &in, x + 0.5, fmax(px(&in, hi) - x - 1, 0.5), cell_num(t, r, c->c), PALETTE[0], lo,
            hi, "");
    }
    if (b.below && !empty)
        tail_bar(f, &fr, &in, t, c, 0, true);
    if (b.above && !empty)
        tail_bar(f, &fr, &in, t, c, t->n_rows - 1, false);
    x_axis_numbers(f, &in, "decode tok/s");
    svg_group_end(f);
}

int plot_write(FILE *f, const table *worker_time, int64_t bucket_ms, const table *histogram,
               const char *subtitle, llmq_err *err)
{
    cols3 wt, h;
    if (find_cols(worker_time, "epoch_ms", "worker", "tok_s", &wt, err) ||
        find_cols(histogram, "decode_tok_s_from", "decode_tok_s_to", "jobs", &h, err))
        return -1;
    const int tail = table_col_index(histogram, "tail");
    if (tail < 0)
        return llmq_errf(err, "plot: table %s lacks tail", histogram->name);
    svg_begin(f, PAGE_W, PAGE_H, "llmq throughput");
    svg_text(f, PAGE_W / 2.0, 30, "middle", 18, 0, "llmq throughput");
    svg_text(f, PAGE_W / 2.0, 50, "middle", 12, 0, subtitle);
    throughput_chart(f, worker_time, bucket_ms, &wt);
    histogram_chart(f, histogram, &h, tail);
    svg_end(f);
    return 0;
}
