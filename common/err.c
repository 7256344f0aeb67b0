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
    char joined[LLMQ_ERR_MAX];
    snprintf(joined, sizeof joined, "%s: %s", head, err->msg);
    memcpy(err->msg, joined, sizeof joined);
    return -1;
}
