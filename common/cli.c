#include "common/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>

int cli_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out,
            llmq_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return llmq_errf(err, "%s: '%s' is not a whole number in %" PRId64 "..%" PRId64, flag,
                         text, lo, hi);
    *out = v;
    return 0;
}

int cli_float(const char *flag, const char *text, float *out, llmq_err *err)
{
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (errno || end == text || *end || !isfinite(v))
        return llmq_errf(err, "%s: '%s' is not a number", flag, text);
    *out = v;
    return 0;
}

int cli_stop_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}
