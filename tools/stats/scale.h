/* scale: round numbers for people: time bucket lengths, histogram bins and
 * axis ticks, so that llmq-stats' tables and charts read "per 10 s" and
 * "0, 50, 100, 150" rather than "per 8.7 s" and "0, 43.1, 86.2". */
#ifndef LLMQ_TOOLS_STATS_SCALE_H
#define LLMQ_TOOLS_STATS_SCALE_H

#include <stdint.h>

/* The smallest 1, 2 or 5 times a power of ten that is >= x (x > 0). */
double scale_nice_step(double x);

/* The shortest round time step (10 ms, 20 ms, 50 ms, ... 1 s, 2 s, 5 s, ...
 * 1 min, ... 1 h, ... 1 d, 1 w) that cuts span_ms into at most max_steps
 * steps; 1 w if none does. */
int64_t scale_time_step(int64_t span_ms, int64_t max_steps);

/* Bins of a round width (scale_nice_step) covering [lo, hi] in about
 * target bins; the first starts at a multiple of the width. */
void scale_bins(double lo, double hi, int target, double *bin_lo, double *width, int *n);

#endif
