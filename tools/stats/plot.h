/* plot: llmq-stats --plot, one SVG page with two charts.
 *
 * Top: generated tokens per second over time, one line per worker (from the
 * worker-time report: columns epoch_ms, worker, tok_s), with axes, ticks,
 * labels and a legend.  Bottom: how many jobs ran at each decode speed
 * (from the histogram report: decode_tok_s_from, decode_tok_s_to, jobs,
 * tail): the bins span the chart's width, so that its axis follows the bulk
 * of the jobs, and the jobs beyond the bins (the tails) stand as a bar of
 * their own at either end, past a break in the axis.
 *
 * Each worker's line is a <polyline data-series="WORKER"> inside
 * <g id="throughput">, each bar a <rect> inside <g id="histogram">, so that
 * tests and scripts can find the series in the XML. */
#ifndef LLMQ_TOOLS_STATS_PLOT_H
#define LLMQ_TOOLS_STATS_PLOT_H

#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "tools/stats/table.h"

/* Writes the page to f; worker_time's buckets are bucket_ms long; subtitle
 * says what was selected (database, filter).  Fails only when a table lacks
 * the columns above. */
int plot_write(FILE *f, const table *worker_time, int64_t bucket_ms, const table *histogram,
               const char *subtitle, llmq_err *err);

#endif
