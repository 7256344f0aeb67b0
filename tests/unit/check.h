/* check: the smallest test helper that does the job.
 *
 * CHECK(cond, fmt, ...) prints "ok - <what>" or "FAIL - <what> (file:line)"
 * and counts failures; a test's main returns check_done(), which prints the
 * tally and gives the exit status Automake's harness expects (0 pass, 1 fail).
 * State lives in a struct the test owns, passed implicitly through a static
 * per-translation-unit instance: each test is its own program. */
#ifndef LLMQ_TESTS_CHECK_H
#define LLMQ_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct check_tally {
    int passed;
    int failed;
} check_tally;

static check_tally check_state;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        const int check_ok_ = (cond) ? 1 : 0; /* evaluated once */             \
        if (check_ok_) {                                                       \
            check_state.passed++;                                              \
            printf("ok - ");                                                   \
        } else {                                                               \
            check_state.failed++;                                              \
            printf("FAIL - ");                                                 \
        }                                                                      \
        printf(__VA_ARGS__);                                                   \
        if (!check_ok_)                                                        \
            printf("  (%s:%d)", __FILE__, __LINE__);                           \
        printf("\n");                                                          \
        fflush(stdout);                                                        \
    } while (0)

/* A 64-bit fingerprint of n bytes (logits, a file), for a test to compare
 * with another run's or with one it recorded: FNV-1a's xor-and-multiply from
 * the basis 1469598103934665603 (not FNV's own 14695981039346656037: the
 * fingerprints recorded in the tests were taken with this one). */
static inline uint64_t check_hash64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static inline int check_done(void)
{
    printf("%d passed, %d failed\n", check_state.passed, check_state.failed);
    return check_state.failed ? 1 : 0;
}

/* Path rel under the directory $var names (exits 77, "skip", if unset). */
static inline const char *check_env_path(const char *var, char *buf, size_t size, const char *rel)
{
    const char *dir = getenv(var);
    if (!dir) {
        fprintf(stderr, "%s is not set: run through `make check`\n", var);
        exit(77);
    }
    snprintf(buf, size, "%s/%s", dir, rel);
    return buf;
}

/* Path of a fixture under $LLMQ_TEST_DATA. */
static inline const char *check_data_path(char *buf, size_t size, const char *rel)
{
    return check_env_path("LLMQ_TEST_DATA", buf, size, rel);
}

/* Path of a file make check wrote into the build tree ($LLMQ_BUILDDIR). */
static inline const char *check_build_path(char *buf, size_t size, const char *rel)
{
    return check_env_path("LLMQ_BUILDDIR", buf, size, rel);
}

#endif
