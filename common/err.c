#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int llmq_errf(llmq_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int llmq_err_prefix(llmq_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char head[LLMQ_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    /* Keep as much of both as fits; the tail of a long chain is the cause. */
    char joined[LLMQ_ERR_MAX];
    size_t used = strnlen(head, sizeof joined - 3);
    memcpy(joined, head, used);
    memcpy(joined + used, ": ", 2);
    used += 2;
    size_t rest = strnlen(err->msg, sizeof err->msg);
    if (rest > sizeof joined - 1 - used)
        rest = sizeof joined - 1 - used;
    memcpy(joined + used, err->msg, rest);
    joined[used + rest] = '\0';
    memcpy(err->msg, joined, used + rest + 1);
    return -1;
}
