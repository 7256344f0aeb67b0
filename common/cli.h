/* cli: what every program's command line and process set-up share.
 *
 * Number flags are parsed strictly (the whole text, in range) with a message
 * that names the flag and the range; callers print it with their own name. */
#ifndef LLMQ_COMMON_CLI_H
#define LLMQ_COMMON_CLI_H

#include <stdint.h>

#include "common/err.h"

int cli_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out,
            llmq_err *err);
int cli_float(const char *flag, const char *text, float *out, llmq_err *err);

/* Blocks SIGTERM and SIGINT (call it before any thread starts, so that all
 * inherit the mask), ignores SIGPIPE, and returns a non-blocking signalfd
 * that reports the stop signals, for the caller's poll loop; -1 on error. */
int cli_stop_signals(void);

#endif
