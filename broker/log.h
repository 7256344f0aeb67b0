/* log: one timestamped line per notable event, on stderr.
 *
 * "2026-11-30T03:57:15.123Z llmq-broker: worker h:gpu0 connected ..."
 * Stateless: whether a line is worth writing (verbose or not) is decided by
 * the caller. */
#ifndef LLMQ_BROKER_LOG_H
#define LLMQ_BROKER_LOG_H

void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
