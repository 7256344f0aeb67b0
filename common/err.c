#include "common/err.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Bytes of a chain's start kept when its middle is cut. */
#define KEEP_START (LLMQ_ERR_MAX / 4)

static int verrc(llmq_err *err, llmq_err_code code, const char *fmt, va_list ap)
{
    if (!err)
        return -1;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    err->code = code;
    return -1;
}

int llmq_errf(llmq_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrc(err, LLMQ_ERR_GENERIC, fmt, ap);
    va_end(ap);
    return -1;
}

int llmq_errc(llmq_err *err, llmq_err_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrc(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

static bool is_continuation(char c)
{
    return ((unsigned char)c & 0xC0) == 0x80;
}

int llmq_err_prefix(llmq_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char joined[2 * LLMQ_ERR_MAX + 2];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, LLMQ_ERR_MAX, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    size_t used = strlen(joined);
    used += (size_t)snprintf(joined + used, sizeof joined - used, ": %s", err->msg);
    if (used < sizeof err->msg) {
        memcpy(err->msg, joined, used + 1);
        return -1;
    }
    size_t start = KEEP_START, tail = used - (sizeof err->msg - 1 - KEEP_START - 3);
    while (start > 0 && is_continuation(joined[start]))
        start--;
    while (tail < used && is_continuation(joined[tail]))
        tail++;
    memcpy(err->msg, joined, start);
    memcpy(err->msg + start, "...", 3);
    memcpy(err->msg + start + 3, joined + tail, used - tail + 1);
    return -1;
}

const char *llmq_err_code_name(llmq_err_code code)
{
    static const char *const NAMES[LLMQ_ERR_CODE_COUNT] = {
        [LLMQ_ERR_GENERIC] = "generic", [LLMQ_ERR_INVALID] = "invalid",
        [LLMQ_ERR_NO_ROOM] = "no_room", [LLMQ_ERR_UNAVAILABLE] = "unavailable",
        [LLMQ_ERR_IO] = "io",           [LLMQ_ERR_INTERNAL] = "internal",
    };
    return (unsigned)code < LLMQ_ERR_CODE_COUNT ? NAMES[code] : "?";
}
