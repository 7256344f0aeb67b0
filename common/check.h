/* check: assertions of llmq's own invariants.
 *
 * LLMQ_ASSERT(cond, fmt, ...) states what holds unless llmq has a bug: an
 * order a list keeps, counts that must balance, a bound a caller promised.
 * A bad input is never such a case: inputs are checked and refused with an
 * llmq_err (common/err.h), and a process never aborts on one.  A broken
 * invariant prints "FILE:LINE: FUNCTION: invariant broken: COND: message"
 * on stderr and aborts, leaving a core to read instead of a process that
 * goes on with state it has corrupted (another job's KV blocks, a count the
 * queue trusts).
 *
 * On unless NDEBUG is defined.  configure's default flags do not define it,
 * so the default build and `make check` run every assertion; a build that
 * wants them out passes CPPFLAGS=-DNDEBUG to configure.  Off, cond and the
 * message are not evaluated (both are still type-checked), so an assertion
 * must have no side effects.  Keep them cheap: at most linear in what the
 * code around them walks anyway.  A check that must compute before it can
 * assert (a count of a table) runs under `if (LLMQ_ASSERTS_ON)`, which
 * keeps it compiled, and dropped, in both builds. */
#ifndef LLMQ_COMMON_CHECK_H
#define LLMQ_COMMON_CHECK_H

#ifndef NDEBUG
#define LLMQ_ASSERTS_ON 1
#define LLMQ_ASSERT(cond, ...) \
    ((cond) ? (void)0 : llmq_assert_fail(__FILE__, __LINE__, __func__, #cond, __VA_ARGS__))
#else
#define LLMQ_ASSERTS_ON 0
#define LLMQ_ASSERT(cond, ...) \
    ((void)sizeof(             \
        (cond) ? 0 : (llmq_assert_fail(__FILE__, __LINE__, __func__, #cond, __VA_ARGS__), 0)))
#endif

/* Prints the broken invariant (printf format for the message) and aborts. */
void llmq_assert_fail(const char *file, int line, const char *func, const char *cond,
                      const char *fmt, ...) __attribute__((noreturn, format(printf, 5, 6)));

#endif
