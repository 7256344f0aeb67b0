#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct pool_worker {
    struct pool *pool;
    int index; /* 1 .. n_threads - 1 */
} pool_worker;

/* Tasks are claimed from one word holding the run's generation (high 32
 * bits) and the next task (low 32 bits).  A claim is a compare-and-swap
 * that fails once the run is over, so a worker that wakes late (on a busy
 * machine, often milliseconds late) finds nothing to do and cannot touch a
 * later run; the caller waits only for tasks to be done, never for workers
 * to check in, and runs every task itself if no worker shows up. */
struct pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pool_worker *workers;
    pthread_mutex_t mu; /* guards sleeping only; runs are handed out lock-free */
    pthread_cond_t wake;
    int sleepers;
    atomic_uint_fast64_t claim; /* generation << 32 | next task */
    atomic_int_fast64_t done;   /* tasks of the current run finished */
    atomic_int stopping;
    /* The current run; written by the caller before it publishes the
     * generation, read by a worker only after a successful claim. */
    _Atomic(pool_fn) fn;
    _Atomic(void *) ctx;
    /* Task counts by generation parity.  A worker that claimed the last
     * task of generation g may look for more while the caller is already
     * setting up g + 1 but has not yet published it: the claim word still
     * reads (g, n_g), and with one shared count that worker would see
     * n_{g+1}, claim task n_g "of g" and run it with g + 1's function, a
     * call too many that also ends g + 1 early.  With one count per parity
     * it reads g's own count, unchanged until g + 2 is set up, by which time
     * the claim word no longer says g. */
    atomic_int_fast64_t n_tasks[2];
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

static uint32_t generation_of(uint64_t claim) { return (uint32_t)(claim >> 32); }

/* Runs tasks of generation `gen` until none is left.  Which thread runs a
 * task varies, but each task is a fixed slice of work, so results do not. */
static void drain(pool *p, uint32_t gen, int thread)
{
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if (generation_of(c) != gen)
            return;
        const int64_t i = (int64_t)(c & 0xffffffffu);
        if (i >= atomic_load_explicit(&p->n_tasks[gen & 1], memory_order_relaxed))
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* The claim succeeded, so the run is still gen's and fn, ctx are its. */
        atomic_load_explicit(&p->fn, memory_order_relaxed)(
            atomic_load_explicit(&p->ctx, memory_order_relaxed), i, thread);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

/* Waits for a generation other than `seen`; returns it, or 0 when stopping. */
static uint32_t await_run(pool *p, uint32_t seen)
{
    for (int spins = 0;; spins++) {
        uint32_t g = generation_of(atomic_load_explicit(&p->claim, memory_order_acquire));
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
        while (generation_of(atomic_load(&p->claim)) == seen && !atomic_load(&p->stopping))
            pthread_cond_wait(&p->wake, &p->mu);
        p->sleepers--;
        pthread_mutex_unlock(&p->mu);
        spins = 0;
    }
}

static void *worker_main(void *arg)
{
    const pool_worker *w = arg;
    pool *p = w->pool;
    uint32_t seen = 0;
    while ((seen = await_run(p, seen)) != 0)
        drain(p, seen, w->index);
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
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->threads || !p->workers) {
        p->n_threads = 1;
        pool_free(p);
        return llmq_errf(err, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (pool_worker){.pool = p, .index = i};
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]) != 0) {
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
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p->workers);
    free(p);
}

int pool_threads(const pool *p) { return p->n_threads; }

/* Below this many nanoseconds of work a job runs on the caller alone: on
 * the 2-vCPU machine the second thread only pays off for parallel loops of
 * tens of microseconds (handing out and collecting takes ~1 us, and the two
 * vCPUs share much of one core's vector throughput). */
#define POOL_MIN_WORK 16000

void pool_run(pool *p, pool_fn fn, void *ctx, int64_t n_tasks, int64_t work)
{
    if (n_tasks <= 0)
        return;
    if (p->n_threads == 1 || n_tasks == 1 || work < POOL_MIN_WORK) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    /* Generation 0 is never used: it is the workers' "nothing seen yet".
     * At the wrap 0 becomes 2, so that parities still alternate. */
    uint32_t gen = generation_of(atomic_load_explicit(&p->claim, memory_order_relaxed)) + 1;
    if (gen == 0)
        gen = 2;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks[gen & 1], n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint64_t)gen << 32, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers > 0)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p, gen, 0);
    for (int spins = 1; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks; spins++) {
        if (spins % POOL_SPINS_BEFORE_YIELD == 0)
            sched_yield();
        else
            cpu_relax();
    }
}
