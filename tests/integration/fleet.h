/* fleet: real llmq-worker processes, llmq-run references and prompts, for
 * the end-to-end tests (tests/integration/test-e2e.c, test-worker.c).
 *
 * Workers run the CPU engine on stories260K with one thread, against a
 * harness's broker; each writes its log to the harness's temp dir and dies
 * with the test process (PR_SET_PDEATHSIG), so a test killed by its alarm
 * leaves no worker behind.  Clients use the public C library (proto/llmq.h),
 * as users do. */
#ifndef LLMQ_TESTS_FLEET_H
#define LLMQ_TESTS_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/llmq.h"
#include "tests/integration/harness.h"

typedef struct fleet_worker {
    pid_t pid;
    char log[320];
} fleet_worker;

/* Starts llmq-worker on stories260K (under $LLMQ_TEST_DATA) with --cpu
 * -t 1 --id NAME and extra flags (NULL-ended). */
void fleet_start(harness *h, fleet_worker *w, const char *name, const char *const *extra);
/* The same, with LLMQ_TEST_MIN_STEP_MS=min_step_ms: no engine step starts
 * sooner than that after the previous one, so a job of N tokens provably
 * runs for N * min_step_ms or more, on a machine of any speed. */
void fleet_start_paced(harness *h, fleet_worker *w, const char *name, const char *const *extra,
                       int min_step_ms);
/* The same with the variables of env ("NAME=VALUE", NULL-ended) set for
 * the worker: its test knobs (llmq-worker(1), ENVIRONMENT). */
void fleet_start_env(harness *h, fleet_worker *w, const char *name, const char *const *extra,
                     const char *const *env);
/* Waits up to wait_ms for the worker to exit: the waitpid status, or -1 if
 * it had to be killed.  fleet_stop sends SIGTERM first. */
int fleet_reap(fleet_worker *w, int wait_ms);
int fleet_stop(fleet_worker *w, int wait_ms);
void fleet_kill9(fleet_worker *w);
/* True when the worker's log contains text. */
int fleet_log_has(const fleet_worker *w, const char *text);

/* n distinct one-line prompts: windows of words of the reference story. */
char **fleet_prompts(size_t n);
void fleet_strings_free(char **v, size_t n);
/* Jobs of the prompts (malloc'd; they point into prompts), greedy. */
llmq_job *fleet_jobs(char **prompts, size_t n, uint32_t max_tokens, bool ignore_eos);

/* Continuations of max_tokens tokens by llmq-run --parallel (one process,
 * no queue) with no sampling flag, so under the native defaults a queue job
 * that sets nothing also has (greedy): texts[i] for prompts[i], malloc'd.
 * 0 or -1. */
int fleet_reference(harness *h, char **prompts, size_t n, int max_tokens, char **texts);

/* A connected client with the given request timeout. */
llmq_client *fleet_client(harness *h, int timeout_ms);

/* Waits up to timeout_ms for the jobs ids[0..n): state[i] and, for done
 * jobs, a malloc'd copy of the text in texts[i] (texts may be NULL).
 * Returns the number of jobs final. */
size_t fleet_wait(llmq_client *c, const uint64_t *ids, size_t n, int timeout_ms,
                  llmq_state *state, char **texts);

/* Runs a shell command (printf format): its exit status, -1 when it did
 * not exit normally. */
int fleet_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Polls the query (printf format) until it reads 1 or timeout_ms passes:
 * true when it did. */
bool fleet_sql_becomes(const harness *h, int timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* h_sql with a printf format. */
int64_t fleet_sqlf(const harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
