#include "common/log.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

/* snprintf's count, or what is left of size when it did not all fit. */
static size_t fitted(int n, size_t size)
{
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

size_t log_format(char line[LOG_LINE_MAX], int64_t wall_ms, const char *program, const char *id,
                  const char *fmt, va_list ap)
{
    const time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    /* One byte is kept for the newline (and one, as ever, for the NUL). */
    const size_t room = LOG_LINE_MAX - 1;
    size_t n = fitted(
        snprintf(line, room, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s%s%s%s: ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000),
                 program, id ? "[" : "", id ? id : "", id ? "]" : ""),
        room);
    n += fitted(vsnprintf(line + n, room - n, fmt, ap), room - n);
    line[n++] = '\n';
    line[n] = '\0';
    return n;
}

void log_vline(const char *program, const char *id, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];
    const size_t n = log_format(line, clock_wall_ms(), program, id, fmt, ap);
    /* Nowhere to report a failed write of the log itself. */
    const ssize_t written = write(STDERR_FILENO, line, n);
    (void)written;
}

void log_line(const char *program, const char *id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline(program, id, fmt, ap);
    va_end(ap);
}
