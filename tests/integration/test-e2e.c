/* test-e2e: llmq end to end with real processes: llmq-broker, two
 * llmq-worker processes on the CPU engine (stories260K, one thread each),
 * the SQLite database, and clients through the public C library, on ipc://
 * endpoints in a temp dir.
 *
 * Pins: a batch of 200 jobs spread over both workers gives exactly the
 * texts llmq-run gives for the same prompts, neither setting any sampling
 * parameter (one native default set), with timings in every result row;
 * logprobs asked for travel from the worker through the store to the C and
 * Python clients, consistent with the tokens; kill -9 of a
 * worker in the middle of a batch loses no job and duplicates none (one
 * result row per job, the killed worker's running jobs finished by the
 * other); kill -9 of the broker while clients submit and
 * workers run, then a restart on the same database: every acknowledged job
 * is there and completes, and the workers come back by themselves; SIGTERM
 * of the broker then stops the workers cleanly (exit 0). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/clock.h"
#include "tests/integration/fleet.h"
#include "tests/unit/check.h"

/* A short liveness timeout so that a killed worker's jobs move on within
 * seconds; attempts to spare, since a loaded machine may starve a worker. */
static const char *const BROKER_FLAGS[] = {"--heartbeat-ms", "200", "--worker-timeout-ms",
                                           "2000", "--max-attempts", "5", NULL};
static const char *const WORKER_FLAGS[] = {"--slots", "8", "--ctx", "512", NULL};

static size_t count_state(const llmq_state *st, size_t n, llmq_state want)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += st[i] == want;
    return k;
}

/* ---- 200 jobs, two workers, llmq-run's texts ----------------------------------------- */

static void test_batch_matches_llmq_run(harness *h, llmq_client *c)
{
    enum { N = 200, MAX = 32 };
    char **prompts = fleet_prompts(N);
    char *ref[N] = {0}, *got[N] = {0};
    CHECK(fleet_reference(h, prompts, N, MAX, ref) == 0,
          "llmq-run --parallel gives the %d reference continuations", N);
    llmq_job *jobs = fleet_jobs(prompts, N, MAX, false);
    uint64_t ids[N];
    llmq_error err;
    int rc = llmq_submit(c, "e2e-200", NULL, jobs, N, ids, NULL, &err);
    CHECK(rc == 0, "a batch of %d jobs is acknowledged%s%s", N, rc ? ": " : "",
          rc ? err.message : "");
    llmq_state st[N] = {0};
    int64_t t0 = clock_mono_ms();
    size_t final = rc == 0 ? fleet_wait(c, ids, N, 90000, st, got) : 0;
    size_t done = count_state(st, N, LLMQ_STATE_DONE), same = 0, first_diff = N;
    for (size_t i = 0; i < N; i++) {
        bool eq = got[i] && ref[i] && strcmp(got[i], ref[i]) == 0;
        same += eq;
        if (!eq && first_diff == N)
            first_diff = i;
    }
    CHECK(final == N && done == N, "all %d jobs done in %.1f s (%zu final, %zu done)", N,
          (clock_mono_ms() - t0) / 1e3, final, done);
    CHECK(same == N,
          "every text is llmq-run's for the same prompt, both at their defaults (%zu of %d"
          " identical%s%s)",
          same, N, first_diff < N ? "; first difference: " : "",
          first_diff < N ? prompts[first_diff] : "");
    const char *batch = "(SELECT id FROM jobs WHERE batch_id = 'e2e-200')";
    CHECK(fleet_sqlf(h, "SELECT count(DISTINCT worker_id) FROM results WHERE job_id IN %s",
                     batch) == 2,
          "both workers took jobs of the batch");
    CHECK(fleet_sqlf(h, "SELECT count(*) FROM results WHERE job_id IN %s AND prefill_ms > 0"
                        " AND prefill_tok_s > 0 AND (generated_tokens < 2 OR decode_tok_s > 0)"
                        " AND prompt_tokens > 0", batch) == N,
          "every result row has the worker's prefill and decode timings");
    CHECK(fleet_sqlf(h, "SELECT count(*) FROM v_worker_stats WHERE jobs_done > 0"
                        " AND gen_tok_s > 0") == 2,
          "v_worker_stats gives each worker's tok/s");
    free(jobs);
    fleet_strings_free(prompts, N);
    for (size_t i = 0; i < N; i++) {
        free(ref[i]);
        free(got[i]);
    }
}

/* ---- logprobs ---------------------------------------------------------------------------- */

#define LP_MAX 16
#define LP_TOP 3

typedef struct lp_seen {
    bool done, has;
    uint32_t tokens[LP_MAX];
    size_t n_tokens;
    char text[512];
    bool agree, greedy, ordered, in_range, bytes_are_text;
} lp_seen;

/* What a greedy result's logprobs must satisfy, checked on the client's copy. */
static void inspect(const llmq_result *r, lp_seen *s)
{
    s->done = r->state == LLMQ_STATE_DONE;
    s->has = r->logprobs != NULL;
    s->n_tokens = r->n_tokens < LP_MAX ? r->n_tokens : LP_MAX;
    memcpy(s->tokens, r->tokens, s->n_tokens * sizeof *s->tokens);
    snprintf(s->text, sizeof s->text, "%s", r->text ? r->text : "");
    s->agree = s->greedy = s->ordered = s->in_range = s->has && r->n_logprobs == r->n_tokens;
    char joined[512];
    size_t len = 0;
    for (size_t i = 0; s->has && i < r->n_logprobs; i++) {
        const llmq_token_logprobs *t = &r->logprobs[i];
        s->agree &= t->chosen.token == r->tokens[i] && t->n_top == LP_TOP;
        s->greedy &= t->n_top > 0 && t->top[0].token == t->chosen.token &&
                     t->top[0].logprob == t->chosen.logprob;
        for (size_t k = 0; k < t->n_top; k++) {
            s->ordered &= k == 0 || t->top[k].logprob <= t->top[k - 1].logprob;
            s->in_range &= t->top[k].logprob >= -9999.0f && t->top[k].logprob <= 0.0f;
        }
        if (len + t->chosen.n_bytes < sizeof joined) {
            memcpy(joined + len, t->chosen.bytes, t->chosen.n_bytes);
            len += t->chosen.n_bytes;
        }
    }
    joined[len] = '\0';
    s->bytes_are_text = s->has && strcmp(joined, s->text) == 0;
}

static void wait_inspect(llmq_client *c, const uint64_t *ids, lp_seen *seen)
{
    llmq_select sel = {.ids = ids, .n_ids = 2};
    llmq_wait *w;
    llmq_error err;
    if (llmq_wait_begin(c, &sel, 60000, &w, &err) != 0)
        return;
    llmq_result r;
    int ev;
    while ((ev = llmq_wait_next(w, 1000, &r, &err)) != LLMQ_WAIT_END && ev >= 0)
        if (ev == LLMQ_WAIT_RESULT)
            inspect(&r, &seen[r.id == ids[0] ? 0 : 1]);
    llmq_wait_free(w);
}

/* A non-streaming wait gets the results in its wait_end: the broker copies
 * them out of the store, logprobs included. */
static uint32_t logprobs_in_wait_end(harness *h, uint64_t id)
{
    void *peer = h_peer(h, h->clients);
    wire_msg m, reply;
    wire_msg_init(&m, WIRE_T_WAIT);
    m.req = 5;
    m.wait = (wire_wait){.sel = {.ids = &id, .n_ids = 1}, .timeout_ms = 0, .stream = false};
    uint32_t n = 0;
    if (h_send(peer, &m) == 0 && h_recv_type(peer, 10000, WIRE_T_WAIT_END, &reply) == 0) {
        if (reply.wait_end.n_results == 1 && reply.wait_end.results[0].logprobs)
            n = reply.wait_end.results[0].n_logprobs;
        wire_msg_free(&reply);
    }
    h_close(peer);
    return n;
}

/* One greedy job with logprobs and its twin without, through broker, store
 * and a worker; then the same job from the Python client. */
static void test_logprobs(harness *h, llmq_client *c)
{
    llmq_job jobs[2];
    for (int i = 0; i < 2; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].prompt = "Once upon a time";
        jobs[i].max_tokens = LP_MAX;
        jobs[i].ignore_eos = true;
    }
    jobs[0].logprobs = true;
    jobs[0].top_logprobs = LP_TOP;
    uint64_t ids[2] = {0};
    llmq_error err;
    lp_seen seen[2] = {0};
    if (llmq_submit(c, "e2e-logprobs", NULL, jobs, 2, ids, NULL, &err) == 0)
        wait_inspect(c, ids, seen);
    CHECK(seen[0].done && seen[0].has && seen[0].agree && seen[1].done && !seen[1].has,
          "a job that asks gets a logprob, and %d alternatives, for each of its %zu tokens; its"
          " twin that does not, none",
          LP_TOP, seen[0].n_tokens);
    CHECK(seen[0].greedy && seen[0].ordered && seen[0].in_range,
          "greedy, each token is its step's likeliest; alternatives in order, within [-9999, 0]");
    CHECK(seen[0].bytes_are_text, "the tokens' bytes make up the text: '%s'", seen[0].text);
    CHECK(seen[0].n_tokens == seen[1].n_tokens &&
              memcmp(seen[0].tokens, seen[1].tokens, seen[0].n_tokens * sizeof(uint32_t)) == 0,
          "asking for logprobs does not change the tokens");
    CHECK(fleet_sqlf(h, "SELECT length(logprobs) > %d FROM results WHERE job_id = %llu",
                     LP_MAX * 4 * 10, (unsigned long long)ids[0]) == 1 &&
              fleet_sqlf(h, "SELECT logprobs IS NULL FROM results WHERE job_id = %llu",
                         (unsigned long long)ids[1]) == 1,
          "the store keeps them in results.logprobs, NULL for the job that did not ask");
    CHECK(logprobs_in_wait_end(h, ids[0]) == seen[0].n_tokens,
          "a non-streaming wait's wait_end carries them too");
    const char *src = getenv("LLMQ_SRCDIR");
    int rc = fleet_sh("/usr/bin/python3 %s/proto/python/llmq_client.py --broker %s submit"
                      " --prompt 'Once upon a time' --max-tokens 4 --top-logprobs 2 --wait |"
                      " /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin);"
                      " lp = r[\"logprobs\"]; assert len(lp) == len(r[\"tokens\"]) == 4;"
                      " assert all(len(t[\"top_logprobs\"]) == 2 and isinstance(t[\"bytes\"],"
                      " list) for t in lp)' 2> %s/py-lp.err",
                      src, h->clients, h->dir);
    CHECK(rc == 0, "the Python client gets them, the bytes printed as numbers");
}

/* ---- kill -9 of a worker ---------------------------------------------------------------- */

/* Waits until worker w has finished a job of the batch and runs others. */
static int64_t wait_busy(harness *h, const fleet_worker *w, const char *batch)
{
    int64_t end = clock_mono_ms() + 30000, running = 0;
    while (clock_mono_ms() < end) {
        running = fleet_sqlf(h, "SELECT count(*) FROM jobs WHERE batch_id = '%s' AND"
                                " state = 'running' AND worker_id IN"
                                " (SELECT id FROM workers WHERE pid = %d)", batch, (int)w->pid);
        int64_t done = fleet_sqlf(h, "SELECT count(*) FROM results WHERE worker_id IN"
                                     " (SELECT id FROM workers WHERE pid = %d)", (int)w->pid);
        if (running >= 2 && done >= 1)
            return running;
        h_sleep_ms(20);
    }
    return 0;
}

static void test_worker_killed(harness *h, llmq_client *c, fleet_worker *w)
{
    enum { N = 48, MAX = 160 };
    const char *batch = "e2e-kill-worker";
    char **prompts = fleet_prompts(N);
    llmq_job *jobs = fleet_jobs(prompts, N, MAX, true);
    uint64_t ids[N];
    llmq_error err;
    int rc = llmq_submit(c, batch, NULL, jobs, N, ids, NULL, &err);
    int64_t running = rc == 0 ? wait_busy(h, &w[0], batch) : 0;
    CHECK(rc == 0 && running >= 2, "a batch of %d long jobs runs on both workers", N);
    fleet_kill9(&w[0]);
    llmq_state st[N] = {0};
    size_t final = fleet_wait(c, ids, N, 90000, st, NULL);
    size_t done = count_state(st, N, LLMQ_STATE_DONE);
    char in_batch[128];
    snprintf(in_batch, sizeof in_batch, "(SELECT id FROM jobs WHERE batch_id = '%s')", batch);
    int64_t rows = fleet_sqlf(h, "SELECT count(*) FROM results WHERE job_id IN %s", in_batch);
    int64_t distinct = fleet_sqlf(h, "SELECT count(DISTINCT job_id) FROM results WHERE job_id"
                                     " IN %s", in_batch);
    int64_t lost = fleet_sqlf(h, "SELECT count(*) FROM attempts WHERE outcome = 'lost' AND"
                                 " job_id IN %s", in_batch);
    printf("# kill -9 of a worker: %d jobs, %lld running on it when killed, %lld requeued,"
           " %zu done, %lld result rows (%lld distinct jobs): %lld lost, %lld duplicates\n",
           N, (long long)running, (long long)lost, done, (long long)rows, (long long)distinct,
           (long long)(N - distinct), (long long)(rows - distinct));
    CHECK(final == N && done == N, "every job of the batch completes (%zu of %d)", done, N);
    CHECK(rows == N && distinct == N, "exactly one result row per job (%lld rows, %lld jobs)",
          (long long)rows, (long long)distinct);
    CHECK(lost >= running && lost > 0,
          "the killed worker's running jobs were requeued (%lld attempts lost)", (long long)lost);
    CHECK(fleet_sqlf(h, "SELECT count(*) FROM results r JOIN attempts a ON a.job_id = r.job_id"
                        " AND a.outcome = 'lost' WHERE r.worker_id = a.worker_id") == 0 &&
              fleet_sqlf(h, "SELECT count(*) FROM results WHERE job_id IN %s AND"
                            " generated_tokens = %d", in_batch, MAX) == N,
          "and finished, whole, by the other worker");
    free(jobs);
    fleet_strings_free(prompts, N);
}

/* ---- kill -9 of the broker ---------------------------------------------------------------- */

static void id_list(char *out, size_t cap, const uint64_t *ids, size_t n)
{
    size_t at = (size_t)snprintf(out, cap, "(");
    for (size_t i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%llu", i ? "," : "",
                               (unsigned long long)ids[i]);
    if (at < cap)
        snprintf(out + at, cap - at, ")");
}

static void test_broker_killed(harness *h, fleet_worker *w)
{
    enum { ROUNDS = 24, PER = 8, MAX = 160 };
    llmq_client *c = fleet_client(h, 1000);
    char **prompts = fleet_prompts(PER);
    llmq_job *jobs = fleet_jobs(prompts, PER, MAX, true);
    uint64_t acked[ROUNDS * PER];
    size_t n_acked = 0, before = 0;
    int refused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        llmq_error err;
        if (llmq_submit(c, "e2e-kill-broker", NULL, jobs, PER, acked + n_acked, NULL, &err) == 0)
            n_acked += PER;
        else
            refused++;
        if (r == ROUNDS / 2) {
            /* Kill while jobs of this round run (a fast machine may have
             * finished the earlier rounds already). */
            for (int t = 0; t < 500 && fleet_sqlf(h, "SELECT count(*) FROM jobs WHERE"
                                                     " state = 'running'") <= 0; t++)
                h_sleep_ms(10);
            before = n_acked;
            h_kill9(h);
            h_start(h, BROKER_FLAGS);
        }
        h_sleep_ms(50);
    }
    CHECK(before > 0 && n_acked > before,
          "submits are acknowledged before the kill and after the restart (%zu, %zu; %d"
          " unanswered)", before, n_acked - before, refused);
    llmq_state st[ROUNDS * PER] = {0};
    size_t final = fleet_wait(c, acked, n_acked, 120000, st, NULL);
    size_t done = count_state(st, n_acked, LLMQ_STATE_DONE);
    char list[ROUNDS * PER * 24];
    id_list(list, sizeof list, acked, n_acked);
    int64_t present = fleet_sqlf(h, "SELECT count(*) FROM jobs WHERE id IN %s", list);
    int64_t rows = fleet_sqlf(h, "SELECT count(*) FROM results WHERE job_id IN %s", list);
    int64_t rerun = fleet_sqlf(h, "SELECT count(*) FROM attempts WHERE outcome = 'interrupted'"
                                  " AND job_id IN %s", list);
    printf("# kill -9 of the broker: %zu jobs acknowledged (%zu before the kill), %lld present"
           " after the restart, %lld were running and ran again, %zu done, %lld result rows:"
           " %lld lost, %lld duplicates\n",
           n_acked, before, (long long)present, (long long)rerun, done, (long long)rows,
           (long long)n_acked - present, (long long)rows - (long long)done);
    CHECK(present == (int64_t)n_acked, "every acknowledged job is in the database (%lld of %zu)",
          (long long)present, n_acked);
    CHECK(final == n_acked && done == n_acked && rows == (int64_t)n_acked,
          "and completes, with one result row each (%zu done, %lld rows)", done,
          (long long)rows);
    CHECK(rerun > 0, "jobs running when the broker died ran again (%lld)", (long long)rerun);
    CHECK(fleet_log_has(&w[0], "saying hello again") && fleet_log_has(&w[1], "saying hello again") &&
              fleet_sqlf(h, "SELECT count(*) FROM workers WHERE state = 'alive'") == 2,
          "both workers said hello to the new broker by themselves");
    llmq_close(c);
    free(jobs);
    fleet_strings_free(prompts, PER);
}

int main(void)
{
    harness h;
    h_init(&h, "llmq-e2e", 170);
    h_start(&h, BROKER_FLAGS);
    fleet_worker w[2];
    fleet_start(&h, &w[0], "w0", WORKER_FLAGS);
    fleet_start(&h, &w[1], "w1", WORKER_FLAGS);
    llmq_client *c = fleet_client(&h, 10000);

    test_batch_matches_llmq_run(&h, c);
    test_logprobs(&h, c);
    test_worker_killed(&h, c, w);
    fleet_start(&h, &w[0], "w0", WORKER_FLAGS);
    llmq_close(c);
    test_broker_killed(&h, w);

    int st = h_stop(&h, 20000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIGTERM stops the broker cleanly (exit 0)");
    int s0 = fleet_reap(&w[0], 10000), s1 = fleet_reap(&w[1], 10000);
    CHECK(WIFEXITED(s0) && WEXITSTATUS(s0) == 0 && WIFEXITED(s1) && WEXITSTATUS(s1) == 0,
          "its shutdown stops both workers cleanly (exit 0)");
    h_done(&h, check_state.failed > 0);
    return check_done();
}
