#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu; /* guards sleeping only; runs are handed out lock-free */
    pthread_cond_t wake;
    int sleepers;
    atomic_uint_fast64_t generation; /* bumped for every run */
    atomic_int busy;                 /* workers still in the current run */
    atomic_int stopping;
    pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_int_fast64_t next; /* next task to claim */
};

/* A decode step of a small model is hundreds of short parallel loops, each a
 * few microseconds: waking threads through a condition variable every time
 * would cost more than the work.  Workers spin for a while after a run (about
 * a millisecond) and only then sleep.  On a busy machine a spinning thread
 * may hold the core that the thread it waits for needs, so every wait loop
 * yields the processor after a short spin. */
#define POOL_SPINS 200000
#define POOL_SPINS_BEFORE_YIELD 2000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Tasks are claimed one at a time from a shared counter: which thread runs a
 * task varies, but each task is a fixed slice of work, so results do not. */
static void drain(pool *p)
{
    for (;;) {
        int64_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks)
            return;
        p->fn(p->ctx, i);
    }
}

/* Waits for a generation other than `seen`; returns it, or 0 when stopping. */
static uint64_t await_run(pool *p, uint64_t seen)
{
    for (int spins = 0;; spins++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen)
            return g;
        if (atomic_load(&p->stopping))
            return 0;
        if (spins < POOL_SPINS) {
            if (spins % POOL_SPINS_BEFORE_YIELD == POOL_SPINS_BEFORE_YIELD - 1)
                sched_yield();
            else
                cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        p->sleepers++;
        while (atomic_load(&p->generation) == seen && !atomic_load(&p->stopping))
            pthread_cond_wait(&p->wake, &p->mu);
        p->sleepers--;
        pthread_mutex_unlock(&p->mu);
        spins = 0;
    }
}

static void *worker_main(void *arg)
{
    pool *p = arg;
    uint64_t seen = 0;
    while ((seen = await_run(p, seen)) != 0) {
        drain(p);
        atomic_fetch_sub_explicit(&p->busy, 1, memory_order_release);
    }
    return NULL;
}

int pool_create(pool **out, int n_threads, llmq_err *err)
{
    *out = NULL;
    if (n_threads < 1)
        return llmq_errf(err, "thread pool: %d threads requested (need >= 1)", n_threads);
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return llmq_errf(err, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        pool_free(p);
        return llmq_errf(err, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            p->n_threads = i; /* join only the threads that started */
            pool_free(p);
            return llmq_errf(err, "thread pool: cannot start thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return 0;
}

void pool_free(pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stopping, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        if (p->threads)
            pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}

int pool_threads(const pool *p) { return p->n_threads; }

/* Below this many scalar operations a job runs on the caller alone. */
#define POOL_MIN_WORK 65536

void pool_run(pool *p, pool_fn fn, void *ctx, int64_t n_tasks, int64_t work)
{
    if (n_tasks <= 0)
        return;
    if (p->n_threads == 1 || n_tasks == 1 || work < POOL_MIN_WORK) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->n_threads - 1);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers > 0)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p);
    for (int spins = 1; atomic_load_explicit(&p->busy, memory_order_acquire) > 0; spins++) {
        if (spins % POOL_SPINS_BEFORE_YIELD == 0)
            sched_yield();
        else
            cpu_relax();
    }
}
