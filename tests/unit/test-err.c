/* test-err: errors as values with a kind (common/err.h).
 *
 * Pins: llmq_errf is unclassified and llmq_errc sets its code; the code
 * survives any number of llmq_err_prefix; a chain that outgrows the buffer
 * keeps its start and its cause (the end) with its middle cut at UTF-8
 * character boundaries; NULL errors are accepted; every code has a name. */
#include <stdbool.h>
#include <string.h>

#include "common/err.h"
#include "common/utf8.h"
#include "tests/unit/check.h"

static void test_codes(void)
{
    llmq_err err = {0};
    llmq_errc(&err, LLMQ_ERR_INVALID, "job 3: out of range");
    llmq_errf(&err, "generic %d", 1);
    CHECK(err.code == LLMQ_ERR_GENERIC && strcmp(err.msg, "generic 1") == 0,
          "llmq_errf writes an unclassified error over a coded one");
    CHECK(llmq_errc(&err, LLMQ_ERR_NO_ROOM, "job %d: engine full", 7) == -1 &&
              err.code == LLMQ_ERR_NO_ROOM && strcmp(err.msg, "job 7: engine full") == 0,
          "llmq_errc returns -1 with its code and message");
    llmq_err_prefix(&err, "engine");
    llmq_err_prefix(&err, "worker %s", "w1");
    CHECK(err.code == LLMQ_ERR_NO_ROOM &&
              strcmp(err.msg, "worker w1: engine: job 7: engine full") == 0,
          "the code survives two prefixes: '%s'", err.msg);
    CHECK(llmq_errf(NULL, "x") == -1 && llmq_errc(NULL, LLMQ_ERR_IO, "x") == -1 &&
              llmq_err_prefix(NULL, "x") == -1,
          "a NULL error is accepted and still fails");
    bool named = strcmp(llmq_err_code_name(LLMQ_ERR_CODE_COUNT), "?") == 0;
    for (int c = 0; c < LLMQ_ERR_CODE_COUNT; c++)
        named &= strcmp(llmq_err_code_name((llmq_err_code)c), "?") != 0;
    CHECK(named && strcmp(llmq_err_code_name(LLMQ_ERR_NO_ROOM), "no_room") == 0,
          "every code has a name, and only they");
}

static void test_long_chain(void)
{
    llmq_err err = {0};
    llmq_errc(&err, LLMQ_ERR_IO, "the cause: disk full");
    static const char CAUSE[] = ": the cause: disk full";
    /* Multi-byte characters everywhere, so that any cut lands in one. */
    char context[200];
    for (size_t i = 0; i + 2 < sizeof context; i += 2)
        memcpy(context + i, "\xc3\xa9", 2);
    context[sizeof context - 2] = '\0';
    for (int i = 0; i < 12; i++)
        llmq_err_prefix(&err, "level %d %s", i, context);
    size_t len = strlen(err.msg);
    CHECK(err.code == LLMQ_ERR_IO, "twelve prefixes keep the code");
    CHECK(len < LLMQ_ERR_MAX && strncmp(err.msg, "level 11 ", 9) == 0 &&
              strstr(err.msg, "...") != NULL && strcmp(err.msg + len - strlen(CAUSE), CAUSE) == 0,
          "an overflowing chain keeps its outermost context and its cause, cut in the middle");
    CHECK(utf8_valid_prefix(err.msg, len) == len, "the cuts fall between UTF-8 characters");
}

int main(void)
{
    test_codes();
    test_long_chain();
    return check_done();
}
