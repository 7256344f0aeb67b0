/* log: the one line format of the long-running programs (llmq-broker,
 * llmq-worker and its --gpus supervisor), written to standard error:
 *
 *   2026-12-01T10:00:21.539Z llmq-worker[h:gpu0]: job 7 attempt 1 started
 *
 * the UTC time with milliseconds, the program, its id in brackets where it
 * has one (a worker's id, once it is known), and the message.  Each line
 * leaves in one write(2), so the lines of processes sharing a terminal or
 * a log file never interleave; a message too long for LOG_LINE_MAX is cut,
 * and its line still ends in a newline.  Stateless: the caller says who
 * speaks, and whether a line is worth writing (verbose or not). */
#ifndef LLMQ_COMMON_LOG_H
#define LLMQ_COMMON_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define LOG_LINE_MAX 1024

/* Writes one line for the current wall-clock time.  id may be NULL. */
void log_line(const char *program, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void log_vline(const char *program, const char *id, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* The line log_line writes, for the time wall_ms (ms since the epoch), into
 * line, NUL-terminated; returns its length (newline included, at most
 * LOG_LINE_MAX - 1). */
size_t log_format(char line[LOG_LINE_MAX], int64_t wall_ms, const char *program, const char *id,
                  const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

#endif
