/* test-threadpool: kernels/cpu/threadpool's promise that every task of a
 * run is called exactly once and that pool_run returns only after all of
 * them finished, whatever the threads' timing.
 *
 * Many short runs back to back, with task counts that grow and shrink from
 * one run to the next: the case where a worker thread that finished the
 * last task of one run races the caller setting up the next.  A task called
 * twice, or a return before the last task ended, shows up as a count other
 * than 1 when the caller looks right after pool_run.  The race needs the
 * caller to be preempted in a window of a few instructions, so this is a
 * probabilistic guard: more threads than cores make preemption common (the
 * pool before the fix failed here in about one run of this test in five on
 * a loaded 2-core machine, and in test-parity's batched greedy one run in
 * eight). */
#include <stdatomic.h>
#include <stdio.h>

#include "kernels/cpu/threadpool.h"
#include "tests/unit/check.h"

#define RUNS 200000
#define MAX_TASKS 9

typedef struct run_ctx {
    atomic_int calls[MAX_TASKS];
} run_ctx;

/* A short, uneven stretch of work, so that threads are in the middle of
 * claiming when a run ends. */
static void count_call(void *ctx, int64_t task, int thread)
{
    volatile int spin = 0;
    for (int i = 0; i < 50 * (int)(task + thread); i++)
        spin += i;
    atomic_fetch_add(&((run_ctx *)ctx)->calls[task], 1);
}

/* The first run whose counts were wrong, or -1. */
static long first_bad_run(pool *p)
{
    run_ctx ctx;
    for (long r = 0; r < RUNS; r++) {
        const int n = 1 + (int)((r * 7) % MAX_TASKS);
        for (int i = 0; i < MAX_TASKS; i++)
            atomic_store(&ctx.calls[i], 0);
        /* work far above the pool's threshold, so the threads take part */
        pool_run(p, count_call, &ctx, n, (int64_t)1 << 40);
        for (int i = 0; i < MAX_TASKS; i++)
            if (atomic_load(&ctx.calls[i]) != (i < n))
                return r;
    }
    return -1;
}

int main(void)
{
    for (int threads = 2; threads <= 16; threads *= 2) {
        pool *p;
        llmq_err err;
        if (pool_create(&p, threads, &err) != 0) {
            CHECK(0, "pool_create: %s", err.msg);
            continue;
        }
        const long bad = first_bad_run(p);
        CHECK(bad < 0,
              "%d threads: each task of %d runs called exactly once, all done at return"
              " (first bad run: %ld)",
              threads, RUNS, bad);
        pool_free(p);
    }
    return check_done();
}
