/* when: the time arguments of llmq-stats (--since, --until, --now, --bucket).
 *
 * Times are milliseconds since the Unix epoch, UTC, as the broker stores
 * them.  A point in time is written in ISO 8601, "2024-05-01",
 * "2024-05-01T12:30", "2024-05-01 12:30:15.250Z", "2024-05-01T12:30+02:00"
 * (no zone: UTC), or relative to now as a duration ("90s", "15m", "1h",
 * "2d", "1w": that long ago), or "now".  A duration is a positive number
 * with a unit ms, s, m, h, d or w ("1.5h" is allowed). */
#ifndef LLMQ_TOOLS_STATS_WHEN_H
#define LLMQ_TOOLS_STATS_WHEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* A point in time; now_ms anchors the relative forms. */
int when_parse(const char *text, int64_t now_ms, int64_t *out_ms, llmq_err *err);

/* A duration, > 0 and at most 10 years. */
int when_duration(const char *text, int64_t *out_ms, llmq_err *err);

/* "2024-05-01T12:30:15Z", with ".250" before the Z when ms is not whole
 * seconds; buf of at least WHEN_ISO_MAX bytes. */
#define WHEN_ISO_MAX 32
void when_format(int64_t ms, char *buf, size_t size);

#endif
