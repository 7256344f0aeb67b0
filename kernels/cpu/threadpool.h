/* threadpool: a persistent pool of worker threads for data-parallel loops.
 *
 * pool_run(p, fn, ctx, n, work) calls fn(ctx, i, thread) for every i in
 * [0, n) spread over the pool's threads plus the caller, and returns when
 * all are done; `thread` (0 = the caller, < pool_threads) names the thread
 * running the call, for per-thread scratch.  `work` estimates the whole
 * job's single-thread nanoseconds: jobs too small to repay handing out
 * (a few microseconds) run on the caller.  Work is
 * handed out in a fixed partition (task i always runs as one call), so the
 * results of an op never depend on timing.  Threads sleep between runs; the
 * pool is owned by one backend and used by one caller thread at a time. */
#ifndef LLMQ_KERNELS_CPU_THREADPOOL_H
#define LLMQ_KERNELS_CPU_THREADPOOL_H

#include <stdint.h>

#include "common/err.h"

typedef struct pool pool;
typedef void (*pool_fn)(void *ctx, int64_t task, int thread);

int pool_create(pool **out, int n_threads, llmq_err *err);
void pool_free(pool *p);
int pool_threads(const pool *p);
void pool_run(pool *p, pool_fn fn, void *ctx, int64_t n_tasks, int64_t work);

#endif
