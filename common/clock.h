/* clock: the clocks every program measures time with.
 *
 * Spans, timers and deadlines use the monotonic clock, which never jumps
 * with the wall clock: a span between two readings is the time that passed,
 * whatever an operator does to the date.  Integer milliseconds for timers;
 * fractional ones for accounting, where a 0.3 ms step must not read as 0.
 * Only what is stored for people to read (a job's submission time) uses the
 * wall clock. */
#ifndef LLMQ_COMMON_CLOCK_H
#define LLMQ_COMMON_CLOCK_H

#include <stdint.h>

int64_t clock_mono_ms(void);
double clock_mono_ms_f(void);
/* Milliseconds since the Unix epoch. */
int64_t clock_wall_ms(void);

#endif
