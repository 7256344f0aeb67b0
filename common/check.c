#include "common/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void llmq_assert_fail(const char *file, int line, const char *func, const char *cond,
                      const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: %s: invariant broken: %s: ", file, line, func, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
