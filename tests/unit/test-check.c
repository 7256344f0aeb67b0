/* test-check: LLMQ_ASSERT (common/check.h), as make check builds it.
 *
 * Pins: a holding assertion evaluates its condition once and lets the
 * program go on; a broken one aborts the process (SIGABRT) after writing
 * "FILE:LINE: FUNCTION: invariant broken: COND: message" to stderr.  A
 * build with NDEBUG has no assertions to test: it reports a skip. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "tests/unit/check.h"

static int evaluated(int *count, int value)
{
    (*count)++;
    return value;
}

static void check_holding(void)
{
    int count = 0;
    LLMQ_ASSERT(evaluated(&count, 1) == 1, "never printed");
    CHECK(count == 1, "a holding assertion evaluates its condition once (%d) and returns", count);
}

/* The child breaks an invariant; its stderr comes back through a pipe. */
static void break_invariant(int fd)
{
    const struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    dup2(fd, STDERR_FILENO);
    const int free_blocks = 3, total = 2;
    LLMQ_ASSERT(free_blocks <= total, "%d free of %d", free_blocks, total);
    _exit(0);
}

static void check_broken(void)
{
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        break_invariant(fds[1]);
    }
    close(fds[1]);
    char out[512] = {0};
    size_t n = 0;
    ssize_t got;
    while (n < sizeof out - 1 && (got = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)got;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "a broken assertion aborts the process (status %#x)", status);
    const char *at = strstr(out, "test-check.c:");
    char *rest = NULL;
    const long line = at ? strtol(at + strlen("test-check.c:"), &rest, 10) : 0;
    CHECK(line > 0 && strcmp(rest, ": break_invariant: invariant broken: free_blocks <= total: "
                                   "3 free of 2\n") == 0,
          "it says where (line %ld), which invariant and the message: %s", line, out);
}

int main(void)
{
    if (!LLMQ_ASSERTS_ON) {
        printf("built with NDEBUG: LLMQ_ASSERT is compiled out, nothing to test\n");
        return 77;
    }
    check_holding();
    check_broken();
    return check_done();
}
