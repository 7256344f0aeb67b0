/* test-log: the one log line format (common/log.c).
 *
 * Pins: a line is "UTC time with milliseconds, program, [id] when there is
 * one, ': ', the message, newline" to the byte, for a fixed time; a message
 * longer than a line is cut and the line still ends in its newline, within
 * LOG_LINE_MAX; and log_line writes exactly that line, with the current
 * time, to standard error. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "tests/unit/check.h"

/* 2026-12-01T10:00:21.539Z */
#define WHEN_MS INT64_C(1796119221539)

static size_t format(char line[LOG_LINE_MAX], const char *id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = log_format(line, WHEN_MS, "llmq-worker", id, fmt, ap);
    va_end(ap);
    return n;
}

static void test_format(void)
{
    char line[LOG_LINE_MAX];
    size_t n = format(line, "h:gpu0", "job %d attempt %u started", 7, 1u);
    const char *want = "2026-12-01T10:00:21.539Z llmq-worker[h:gpu0]: job 7 attempt 1 started\n";
    CHECK(n == strlen(want) && strcmp(line, want) == 0, "a line with an id: %.*s", (int)n - 1,
          line);
    n = format(line, NULL, "supervising %d GPU workers", 2);
    want = "2026-12-01T10:00:21.539Z llmq-worker: supervising 2 GPU workers\n";
    CHECK(n == strlen(want) && strcmp(line, want) == 0, "a line without one: %.*s", (int)n - 1,
          line);
}

static void test_long_message_cut(void)
{
    char big[3 * LOG_LINE_MAX], line[LOG_LINE_MAX];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    size_t n = format(line, "w", "%s", big);
    CHECK(n == LOG_LINE_MAX - 1 && line[n - 1] == '\n' && line[n - 2] == 'x' && !line[n],
          "a message longer than a line is cut, and the line still ends in a newline (%zu bytes)",
          n);
}

/* log_line to a pipe standing in for standard error. */
static void test_one_write(void)
{
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe");
        return;
    }
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    log_line("llmq-broker", NULL, "listening: %s", "tcp://127.0.0.1:5555");
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    char got[LOG_LINE_MAX + 1];
    ssize_t n = read(fds[0], got, sizeof got - 1);
    close(fds[0]);
    got[n > 0 ? n : 0] = '\0';
    const char *tail = "Z llmq-broker: listening: tcp://127.0.0.1:5555\n";
    const size_t stamp = strlen("2026-12-01T10:00:21.539");
    CHECK(n > 0 && (size_t)n == stamp + strlen(tail) && strcmp(got + stamp, tail) == 0 &&
              got[4] == '-' && got[10] == 'T' && got[19] == '.',
          "log_line writes that line, stamped now, to standard error: %.*s",
          (int)(n > 0 ? n - 1 : 0), got);
}

int main(void)
{
    test_format();
    test_long_message_cut();
    test_one_write();
    return check_done();
}
