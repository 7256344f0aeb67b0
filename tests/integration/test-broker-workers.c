/* test-broker-workers: llmq-broker's worker side, as a real process, with
 * scripted workers speaking the wire protocol over ZeroMQ.
 *
 * The workers here are protocol peers, not engines: they make the broker
 * face exactly the timings the tests need (a worker that goes silent, a
 * late result, a failure, a bye with a job in hand), which a real engine
 * would produce only by chance.  End-to-end runs with llmq-worker are
 * elsewhere.
 *
 * Pins: jobs go out by priority then submission order and never beyond the
 * credits granted (over-grants are capped at the slots); results are
 * written then pushed to waiting clients with the broker's timings; a
 * silent worker is presumed dead, its job runs elsewhere and its late
 * result is ignored (one result row); a job fails after max-attempts
 * faults with every reason, at once on a permanent failure; cancel of a
 * running job reaches its worker; bye puts jobs back; a second hello under
 * a live name from another process is refused (worker_in_use) and changes
 * nothing, one from the same process replaces its session; results that
 * contradict their job (more tokens than max_tokens, a count unlike the
 * ids, more cached prompt tokens than prompt tokens, a prompt count
 * unlike the job's) are refused (bad_result), not stored nor counted, the
 * job runs elsewhere and the sender gets no more jobs, and an honest
 * worker's cached prompt tokens are stored as sent; a result that does
 * not decode (a count sent as a str, a negative count), or a job_failure
 * that does not, is refused the same way (bad_result at the field), its
 * attempt ended with why, the job run elsewhere and finished once, while
 * one naming another session's job or no readable job changes no job;
 * jobs left running by a
 * killed broker run again after the restart;
 * SIGTERM drains (submits refused, running job may finish, unfinished job
 * back in the queue after the grace period); heartbeats go out to idle
 * workers; jobs for a model only go to workers serving it, or answering
 * to it as an alias, and their results name the model that ran; a fresh
 * broker, which has heard from no worker yet, queues a job naming a model
 * (its worker may be starting) and refuses one once a worker is in; a database
 * without room (past --max-db-mb, or its file system below --min-free-mb)
 * refuses submits as unavailable and starts no job, while status is served
 * and the running job's result is stored and pushed, and the broker does
 * not exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/integration/harness.h"
#include "tests/unit/check.h"

#define T_REPLY 5000
static const char *const FAST[] = {"--heartbeat-ms", "100",
                                   "--worker-timeout-ms", "800", NULL};

/* ---- scripted workers ------------------------------------------------------------ */

/* A hello from process pid: the scripted workers all run in this test
 * process, so another pid plays another process.  The reply in *reply
 * (type NONE when none came). */
static void *worker_hello(harness *h, const char *name, const char *model, uint32_t slots,
                          uint32_t pid, wire_msg *reply)
{
    void *w = h_peer(h, h->workers);
    wire_msg m;
    wire_msg_init(&m, WIRE_T_HELLO);
    m.hello = (wire_hello){.worker = name,
                           .host = "testhost",
                           .pid = pid,
                           .gpu_index = -1,
                           .model = model,
                           .engine = "cpu",
                           .slots = slots};
    h_send(w, &m);
    if (h_recv(w, T_REPLY, reply) != 0)
        wire_msg_init(reply, WIRE_T_NONE);
    return w;
}

static void *worker_connect(harness *h, const char *name, const char *model, uint32_t slots,
                            wire_msg *welcome)
{
    wire_msg got;
    void *w = worker_hello(h, name, model, slots, (uint32_t)getpid(), &got);
    if (got.type != WIRE_T_WELCOME) {
        fprintf(stderr, "worker %s: no welcome\n", name);
        wire_msg_free(&got);
        return w;
    }
    if (welcome)
        *welcome = got;
    else
        wire_msg_free(&got);
    return w;
}

static void send_simple(void *w, wire_type t)
{
    wire_msg m;
    wire_msg_init(&m, t);
    h_send(w, &m);
}

static void credit(void *w, uint32_t n)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_CREDIT);
    m.credit = n;
    h_send(w, &m);
}

/* Waits for a message of type t, heartbeating meanwhile so the broker
 * keeps this worker alive; other messages are dropped. */
static int await(void *w, wire_type t, int timeout_ms, wire_msg *m)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    while (clock_mono_ms() < end) {
        send_simple(w, WIRE_T_HEARTBEAT);
        if (h_recv(w, 100, m) != 0)
            continue;
        if (m->type == t)
            return 0;
        wire_msg_free(m);
    }
    return -1;
}

typedef struct got_job {
    uint64_t id;
    uint32_t attempt;
    uint32_t max_tokens;
    char prompt[64];
} got_job;

static int await_job(void *w, int timeout_ms, got_job *j)
{
    wire_msg m;
    memset(j, 0, sizeof *j);
    if (await(w, WIRE_T_JOB, timeout_ms, &m) != 0)
        return -1;
    j->id = m.job.id;
    j->attempt = m.job.attempt;
    j->max_tokens = m.job.params.max_tokens;
    snprintf(j->prompt, sizeof j->prompt, "%s", m.job.prompt ? m.job.prompt : "");
    wire_msg_free(&m);
    return 0;
}

/* Jobs arriving within ms (heartbeating meanwhile). */
static int count_jobs(void *w, int ms)
{
    int n = 0;
    got_job j;
    int64_t end = clock_mono_ms() + ms;
    while (clock_mono_ms() < end)
        n += await_job(w, (int)(end - clock_mono_ms()), &j) == 0;
    return n;
}

/* A result of n_tokens token ids that says it generated gen tokens from a
 * prompt of prompt tokens, cached of them from the prefix cache. */
static void result_counts(void *w, uint64_t id, uint32_t attempt, const char *text,
                          uint32_t n_tokens, uint32_t gen, uint32_t prompt, uint32_t cached)
{
    static const uint32_t toks[16] = {11, 12, 13, 14, 15, 16, 17, 18};
    wire_msg m;
    wire_msg_init(&m, WIRE_T_JOB_RESULT);
    m.result = (wire_result){.id = id,
                             .attempt = attempt,
                             .text = text,
                             .tokens = toks,
                             .n_tokens = n_tokens,
                             .finish = WIRE_FINISH_LENGTH,
                             .prompt_tokens = prompt,
                             .cached_prompt_tokens = cached,
                             .gen_tokens = gen,
                             .timings = {.prefill_ms = 2.5, .decode_ms = 40}};
    h_send(w, &m);
}

static void result(void *w, uint64_t id, uint32_t attempt, const char *text, uint32_t gen)
{
    result_counts(w, id, attempt, text, gen, gen, 5, 0);
}

static void failure(void *w, uint64_t id, uint32_t attempt, const char *why,
                    bool retryable)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_JOB_FAILURE);
    m.failure = (wire_job_failure){.id = id, .attempt = attempt, .reason = why,
                                   .retryable = retryable};
    h_send(w, &m);
}

/* ---- clients -------------------------------------------------------------------------- */

/* Submits n jobs with the given priorities (NULL: 0); ids out. */
static int submit(void *c, const char *batch, int n, const int *prio,
                  const char *model, uint64_t *ids)
{
    wire_job jobs[16];
    char prompts[16][32];
    for (int i = 0; i < n; i++) {
        snprintf(prompts[i], sizeof prompts[i], "prompt %d", i);
        h_job(&jobs[i], NULL, prompts[i]);
        jobs[i].priority = prio ? prio[i] : 0;
        jobs[i].model = model;
        jobs[i].params.max_tokens = 7;
    }
    wire_msg m;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.req = 1;
    m.submit = (wire_submit){.batch = batch, .jobs = jobs, .n_jobs = (uint32_t)n};
    h_send(c, &m);
    if (h_recv(c, T_REPLY, &m) != 0)
        return -1;
    int rc = m.type == WIRE_T_SUBMIT_OK ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++)
        ids[i] = m.submit_ok.ids[i];
    if (rc)
        fprintf(stderr, "submit refused: %s\n",
                m.type == WIRE_T_ERROR ? m.error.message : "?");
    wire_msg_free(&m);
    return rc;
}

static void send_select_status(void *c, uint64_t id)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_STATUS);
    m.req = 42;
    m.select.ids = &id;
    m.select.n_ids = 1;
    h_send(c, &m);
}

static void send_wait(void *c, uint64_t req, const uint64_t *ids, uint32_t n,
                      uint32_t timeout_ms)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WAIT);
    m.req = req;
    m.wait.sel.ids = ids;
    m.wait.sel.n_ids = n;
    m.wait.timeout_ms = timeout_ms;
    h_send(c, &m);
}

static void setup(harness *h, const char *name, const char *const *flags,
                  void **client)
{
    h_init(h, name, 120);
    h_start(h, flags);
    *client = h_peer(h, h->clients);
}

static void teardown(harness *h, void *client, void *const *workers, int n)
{
    for (int i = 0; i < n; i++)
        h_close(workers[i]);
    h_close(client);
    h_done(h, check_state.failed > 0);
}

/* A fresh broker with n jobs queued (ids) and the first running on one
 * worker (w, j). */
typedef struct running {
    harness h;
    void *c, *w;
    uint64_t ids[2];
    got_job j;
} running;

static void start_running(running *r, const char *name,
                          const char *const *flags, const char *worker, int n)
{
    setup(&r->h, name, flags, &r->c);
    submit(r->c, NULL, n, NULL, NULL, r->ids);
    r->w = worker_connect(&r->h, worker, "m", 1, NULL);
    credit(r->w, 1);
    await_job(r->w, T_REPLY, &r->j);
}

static int64_t sqlf(const harness *h, const char *fmt, uint64_t id)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, (unsigned long long)id);
    return h_sql(h, sql);
}

/* ---- scenarios ------------------------------------------------------------------------------ */

static void test_credits_order_and_results(void)
{
    harness h;
    void *c;
    setup(&h, "tbw-credits", FAST, &c);
    static const int prio[5] = {0, 0, 5, 0, 5};
    uint64_t ids[5] = {0};
    submit(c, "b", 5, prio, NULL, ids);
    wire_msg welcome;
    void *w = worker_connect(&h, "w-a", "m", 3, &welcome);
    CHECK(welcome.type == WIRE_T_WELCOME && welcome.welcome.heartbeat_ms == 100 &&
              welcome.welcome.dead_after_ms == 800,
          "hello is answered with welcome carrying the broker's timings");
    credit(w, 2);
    got_job j1, j2;
    int r1 = await_job(w, T_REPLY, &j1), r2 = await_job(w, T_REPLY, &j2);
    CHECK(r1 == 0 && r2 == 0 && j1.id == ids[2] && j2.id == ids[4],
          "two credits bring the two priority-5 jobs, in submission order");
    CHECK(j1.attempt == 1 && j1.max_tokens == 7 &&
              strcmp(j1.prompt, "prompt 2") == 0,
          "a job carries attempt 1, its prompt and parameters");
    int extra = count_jobs(w, 300);
    CHECK(extra == 0, "no job beyond the credits granted (%d extra)", extra);
    send_wait(c, 2, &ids[2], 1, 5000);
    h_sleep_ms(50);
    result(w, j1.id, j1.attempt, "the end", 4);
    wire_msg m;
    int rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && m.result.id == ids[2] && m.result.state == WIRE_STATE_DONE &&
              strcmp(m.result.text, "the end") == 0 && m.result.gen_tokens == 4 &&
              m.result.n_tokens == 4 && m.result.finish == WIRE_FINISH_LENGTH &&
              m.result.worker && strcmp(m.result.worker, "w-a") == 0,
          "the result is pushed to the waiting client with text, tokens, worker");
    CHECK(rc == 0 && m.result.timings.decode_tok_s == 100.0 &&
              m.result.timings.prefill_tok_s == 2000.0 &&
              m.result.timings.total_ms >= m.result.timings.queue_wait_ms,
          "with the rates computed by the broker (decode 100 tok/s)");
    if (rc == 0)
        wire_msg_free(&m);
    CHECK(sqlf(&h, "SELECT count(*) FROM results WHERE job_id = %llu", ids[2]) == 1,
          "the result row is in the database");
    credit(w, 1);
    got_job j3;
    rc = await_job(w, T_REPLY, &j3);
    CHECK(rc == 0 && j3.id == ids[0], "a new credit brings the next job in order");
    credit(w, 100);
    int more = count_jobs(w, 300);
    CHECK(more == 1, "a grant of 100 with 3 slots, 2 busy, brings 1 job of the"
                     " 2 queued (%d)", more);
    teardown(&h, c, &w, 1);
}

static void test_dead_worker_and_late_result(void)
{
    running r;
    start_running(&r, "tbw-dead", FAST, "w-silent", 1);
    harness *h = &r.h;
    void *c = r.c, *b = r.w;
    uint64_t id = r.ids[0];
    got_job jb = r.j;
    /* b now falls silent; another worker keeps heartbeating. */
    void *w = worker_connect(h, "w-alive", "m", 1, NULL);
    credit(w, 1);
    got_job jw;
    int64_t t0 = clock_mono_ms();
    int rc = await_job(w, 3000, &jw);
    int64_t took = clock_mono_ms() - t0;
    CHECK(rc == 0 && jw.id == id && jw.attempt == 2,
          "a silent worker's job is dispatched again as attempt 2");
    CHECK(took >= 600 && took < 2500,
          "after the worker timeout (%lld ms, timeout 800)", (long long)took);
    result(b, jb.id, jb.attempt, "late", 3);
    wire_msg m;
    rc = h_recv_type(b, T_REPLY, WIRE_T_ERROR, &m);
    CHECK(rc == 0 && m.error.code == WIRE_E_UNKNOWN_WORKER,
          "the presumed-dead worker's late result is refused: unknown_worker");
    if (rc == 0)
        wire_msg_free(&m);
    result(w, jw.id, jw.attempt, "on time", 3);
    send_wait(c, 3, &id, 1, 5000);
    rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && strcmp(m.result.text, "on time") == 0,
          "the result of the live attempt is the one recorded");
    if (rc == 0)
        wire_msg_free(&m);
    CHECK(sqlf(h, "SELECT count(*) FROM results WHERE job_id = %llu", id) == 1 &&
              sqlf(h, "SELECT count(*) FROM attempts WHERE job_id = %llu AND"
                       " outcome = 'lost'", id) == 1,
          "exactly one result row; the first attempt is recorded as lost");
    CHECK(h_sql(h, "SELECT count(*) FROM workers WHERE name = 'w-silent'"
                    " AND state = 'lost'") == 1,
          "the silent worker's session is marked lost");
    void *ws[2] = {b, w};
    teardown(h, c, ws, 2);
}

static void test_failures_and_attempts(void)
{
    const char *const flags[] = {"--heartbeat-ms", "100", "--worker-timeout-ms",
                                 "800", "--max-attempts", "2", NULL};
    running r;
    start_running(&r, "tbw-fail", flags, "w-f", 2);
    harness *h = &r.h;
    void *c = r.c, *w = r.w;
    const uint64_t *ids = r.ids;
    got_job j = r.j;
    failure(w, j.id, j.attempt, "out of KV blocks", true);
    credit(w, 1);
    got_job j2;
    await_job(w, T_REPLY, &j2);
    CHECK(j2.id == ids[0] && j2.attempt == 2,
          "a retryable failure requeues the job (attempt 2 comes back)");
    send_wait(c, 4, &ids[0], 1, 5000);
    failure(w, j2.id, j2.attempt, "NaN in logits", true);
    wire_msg m;
    int rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && m.result.state == WIRE_STATE_FAILED && m.result.error &&
              strstr(m.result.error, "out of KV blocks") &&
              strstr(m.result.error, "NaN in logits"),
          "after 2 faulted attempts the job fails with both reasons: %s",
          rc == 0 && m.result.error ? m.result.error : "(none)");
    if (rc == 0)
        wire_msg_free(&m);
    credit(w, 1);
    got_job j3;
    await_job(w, T_REPLY, &j3);
    failure(w, j3.id, j3.attempt, "prompt is longer than the context", false);
    send_wait(c, 5, &ids[1], 1, 5000);
    rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && j3.id == ids[1] && m.result.state == WIRE_STATE_FAILED &&
              m.result.attempt == 1,
          "a permanent failure fails the job at its first attempt");
    if (rc == 0)
        wire_msg_free(&m);
    teardown(h, c, &w, 1);
}

static void test_cancel_running(void)
{
    running r;
    start_running(&r, "tbw-cancel", FAST, "w-c", 2);
    harness *h = &r.h;
    void *c = r.c, *w = r.w;
    const uint64_t *ids = r.ids;
    got_job j = r.j;
    wire_msg m;
    wire_msg_init(&m, WIRE_T_CANCEL);
    m.req = 6;
    m.select.ids = &j.id;
    m.select.n_ids = 1;
    h_send(c, &m);
    int rc = h_recv_type(c, T_REPLY, WIRE_T_CANCEL_OK, &m);
    CHECK(rc == 0 && m.jobs_reply.jobs[0].state == WIRE_STATE_CANCELLED,
          "cancel of a running job answers cancelled");
    if (rc == 0)
        wire_msg_free(&m);
    rc = await(w, WIRE_T_JOB_CANCEL, T_REPLY, &m);
    CHECK(rc == 0 && m.cancel_id == j.id, "its worker is told to stop it");
    if (rc == 0)
        wire_msg_free(&m);
    failure(w, j.id, j.attempt, "cancelled", false);
    result(w, j.id, j.attempt, "too late", 2);
    credit(w, 1);
    got_job next;
    rc = await_job(w, T_REPLY, &next);
    CHECK(rc == 0 && next.id == ids[1],
          "the freed slot's credit brings the next job");
    CHECK(sqlf(h, "SELECT count(*) FROM results WHERE job_id = %llu", j.id) == 0 &&
              sqlf(h, "SELECT state = 'cancelled' FROM jobs WHERE id = %llu",
                   j.id) == 1,
          "the cancelled job stays cancelled: its late failure and result are ignored");
    teardown(h, c, &w, 1);
}

static void test_bye_and_second_hello(void)
{
    running r;
    start_running(&r, "tbw-bye", FAST, "w-bye", 1);
    harness *h = &r.h;
    void *c = r.c, *a = r.w;
    uint64_t id = r.ids[0];
    send_simple(a, WIRE_T_BYE);
    void *b = worker_connect(h, "w-next", "m", 1, NULL);
    credit(b, 1);
    got_job j2;
    int rc = await_job(b, T_REPLY, &j2);
    CHECK(rc == 0 && j2.id == id && j2.attempt == 2,
          "bye puts the worker's running job back in the queue");
    CHECK(sqlf(h, "SELECT faults FROM jobs WHERE id = %llu", id) == 0 &&
              sqlf(h, "SELECT count(*) FROM attempts WHERE job_id = %llu AND"
                       " outcome = 'returned'", id) == 1,
          "without counting a fault (attempt 1 'returned')");
    wire_msg m;
    void *other = worker_hello(h, "w-next", "m", 1, (uint32_t)getpid() + 1, &m);
    char live_pid[32];
    snprintf(live_pid, sizeof live_pid, "pid %u", (unsigned)getpid());
    CHECK(m.type == WIRE_T_ERROR && m.error.code == WIRE_E_WORKER_IN_USE &&
              strcmp(m.error.field, "worker") == 0 && strstr(m.error.message, live_pid),
          "a hello under a live name from another process is refused: worker_in_use,"
          " naming the live session's %s",
          live_pid);
    if (m.type != WIRE_T_NONE)
        wire_msg_free(&m);
    result(b, j2.id, j2.attempt, "kept", 2);
    send_wait(c, 7, &id, 1, 5000);
    rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && m.result.state == WIRE_STATE_DONE && m.result.attempt == 2 &&
              sqlf(h, "SELECT faults FROM jobs WHERE id = %llu", id) == 0,
          "and changes nothing: the live session's job finishes there, no fault");
    if (rc == 0)
        wire_msg_free(&m);
    if (h_recv_type(c, T_REPLY, WIRE_T_WAIT_END, &m) == 0)
        wire_msg_free(&m);
    uint64_t next;
    submit(c, NULL, 1, NULL, NULL, &next);
    credit(b, 1);
    got_job j3;
    await_job(b, T_REPLY, &j3);
    void *b2 = worker_connect(h, "w-next", "m", 1, NULL);
    credit(b2, 1);
    got_job j4;
    rc = await_job(b2, T_REPLY, &j4);
    CHECK(j3.id == next && rc == 0 && j4.id == next && j4.attempt == 2,
          "a second hello from the same process ends its old session; its job"
          " runs again (attempt 2)");
    void *ws[4] = {a, b, other, b2};
    teardown(h, c, ws, 4);
}

/* The worker protocol spoken by a forger: results that contradict their
 * jobs.  Each is refused and logged, nothing of it is stored or counted,
 * the job runs again on another worker, and the forger's session gets no
 * more jobs. */
static void test_forged_results(void)
{
    enum { N = 5 };
    harness h;
    void *c;
    setup(&h, "tbw-forged", FAST, &c);
    uint64_t ids[N];
    submit(c, NULL, N - 1, NULL, NULL, ids); /* "prompt 0".."prompt 3": 8 bytes */
    static const uint32_t prompt[3] = {5, 6, 7};
    wire_job tj;
    h_job(&tj, NULL, NULL);
    tj.tokens = prompt;
    tj.n_tokens = 3;
    tj.params.max_tokens = 7;
    wire_msg m;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.submit = (wire_submit){.jobs = &tj, .n_jobs = 1};
    h_send(c, &m);
    int rc = h_recv_type(c, T_REPLY, WIRE_T_SUBMIT_OK, &m);
    ids[N - 1] = rc == 0 ? m.submit_ok.ids[0] : 0;
    if (rc == 0)
        wire_msg_free(&m);
    void *bad = worker_connect(&h, "w-forger", "m", N, NULL);
    credit(bad, N);
    got_job j[N];
    int took = 0;
    for (int i = 0; i < N; i++)
        took += await_job(bad, T_REPLY, &j[i]) == 0 && j[i].id == ids[i];
    CHECK(took == N, "a worker takes four text jobs (max_tokens 7) and a job of 3 prompt tokens");
    /* UINT32_MAX is what the store reads as -1, "the current attempt". */
    static const struct {
        uint32_t attempt, n_tokens, gen, prompt, cached;
        const char *field;
    } forged[N] = {
        {1, 8, 8, 5, 0, "gen_tokens"},           /* more than max_tokens */
        {1, 4, 3, 5, 0, "gen_tokens"},           /* a count unlike the ids sent */
        {UINT32_MAX, 8, 8, 5, 0, "gen_tokens"},  /* the same, under another attempt */
        {1, 4, 4, 5, 6, "cached_prompt_tokens"}, /* more cached than the prompt has */
        {1, 4, 4, 5, 0, "prompt_tokens"},        /* a prompt count unlike the job's */
    };
    for (int i = 0; i < N; i++) {
        result_counts(bad, j[i].id, forged[i].attempt, "forged", forged[i].n_tokens, forged[i].gen,
                      forged[i].prompt, forged[i].cached);
        rc = await(bad, WIRE_T_ERROR, T_REPLY, &m);
        CHECK(rc == 0 && m.error.code == WIRE_E_BAD_RESULT &&
                  strcmp(m.error.field, forged[i].field) == 0,
              "forged result %d (attempt %u, %u ids, gen_tokens %u, prompt_tokens %u) is"
              " refused: bad_result on %s (%s)",
              i + 1, forged[i].attempt, forged[i].n_tokens, forged[i].gen, forged[i].prompt,
              forged[i].field, rc == 0 ? m.error.message : "no reply");
        if (rc == 0)
            wire_msg_free(&m);
    }
    CHECK(h_sql(&h, "SELECT count(*) FROM results") == 0 &&
              h_sql(&h, "SELECT jobs_done + tokens_done FROM workers WHERE"
                        " name = 'w-forger'") == 0 &&
              h_sql(&h, "SELECT count(*) FROM jobs WHERE state = 'queued' AND faults = 1") == N,
          "nothing is stored nor counted; the jobs are back in the queue, a fault each");
    CHECK(h_sql(&h, "SELECT count(*) FROM attempts WHERE outcome = 'failed' AND"
                    " reason LIKE 'result refused: %'") == N,
          "each attempt records why its result was refused");
    credit(bad, N);
    int extra = count_jobs(bad, 300);
    CHECK(extra == 0, "the forger's session gets no more jobs, credits or not (%d)", extra);
    void *good = worker_connect(&h, "w-honest", "m", N, NULL);
    credit(good, N);
    got_job g[N];
    int got = 0;
    for (int i = 0; i < N; i++)
        got += await_job(good, T_REPLY, &g[i]) == 0 && g[i].attempt == 2;
    CHECK(got == N, "another worker runs them again, attempt 2 (%d of %d)", got, N);
    for (int i = 0; i < got; i++)
        result_counts(good, g[i].id, g[i].attempt, "honest", 4, 4, g[i].id == ids[N - 1] ? 3 : 5,
                      2);
    send_wait(c, 8, ids, N, 5000);
    int honest = 0;
    for (int i = 0; i < N && h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m) == 0; i++) {
        honest += m.result.state == WIRE_STATE_DONE && strcmp(m.result.text, "honest") == 0 &&
                  strcmp(m.result.worker, "w-honest") == 0;
        wire_msg_free(&m);
    }
    CHECK(h_sql(&h, "SELECT count(*) FROM results WHERE cached_prompt_tokens = 2") == N,
          "each honest result's cached prompt tokens are recorded as the worker sent them");
    CHECK(honest == N && h_sql(&h, "SELECT count(*) FROM results") == N &&
              h_sql(&h, "SELECT coalesce(sum(generated_tokens), 0) FROM v_worker_stats"
                        " WHERE name = 'w-forger'") == 0,
          "their results are the honest worker's; the forger's throughput is zero");
    CHECK(h_sql(&h, "SELECT count(*) FROM workers") == 2,
          "the forger's session was not ended (its other jobs would lose an attempt)");
    void *ws[2] = {bad, good};
    teardown(&h, c, ws, 2);
}

/* A job_result that does not decode, in the ways a worker's bug could
 * make one: a count sent as a str, a negative count, an id that is not
 * an int.  Sent as raw msgpack, since proto/wire refuses to encode them. */
typedef enum garble { GEN_AS_STR, GEN_NEGATIVE, ID_AS_STR } garble;

/* A map of v, type, id (a str for ID_AS_STR), attempt and n more fields. */
static msgpack_packer *raw_begin(h_body *r, const char *type, uint64_t id, uint32_t attempt,
                                 garble g, uint32_t n)
{
    msgpack_packer *pk = h_body_start(r);
    msgpack_pack_map(pk, 4 + n);
    h_pk_str(pk, "v");
    msgpack_pack_int(pk, 1);
    h_pk_str(pk, "type");
    h_pk_str(pk, type);
    h_pk_str(pk, "id");
    if (g == ID_AS_STR)
        h_pk_str(pk, "1");
    else
        msgpack_pack_uint64(pk, id);
    h_pk_str(pk, "attempt");
    msgpack_pack_uint32(pk, attempt);
    return pk;
}

static void garbled_result(void *w, uint64_t id, uint32_t attempt, garble g)
{
    h_body r;
    msgpack_packer *pk = raw_begin(&r, "job_result", id, attempt, g, 7);
    h_pk_str(pk, "gen_tokens");
    if (g == GEN_AS_STR)
        h_pk_str(pk, "2");
    else
        msgpack_pack_int(pk, g == GEN_NEGATIVE ? -2 : 2);
    h_pk_str(pk, "text");
    h_pk_str(pk, "garbled");
    h_pk_str(pk, "tokens");
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 11);
    msgpack_pack_int(pk, 12);
    h_pk_str(pk, "finish");
    h_pk_str(pk, "length");
    h_pk_str(pk, "prompt_tokens");
    msgpack_pack_int(pk, 5);
    h_pk_str(pk, "prefill_ms");
    msgpack_pack_double(pk, 1.0);
    h_pk_str(pk, "decode_ms");
    msgpack_pack_double(pk, 1.0);
    h_body_send(w, &r);
}

/* A job_failure whose retryable is a str. */
static void garbled_failure(void *w, uint64_t id, uint32_t attempt)
{
    h_body r;
    msgpack_packer *pk = raw_begin(&r, "job_failure", id, attempt, GEN_NEGATIVE, 2);
    h_pk_str(pk, "reason");
    h_pk_str(pk, "out of memory");
    h_pk_str(pk, "retryable");
    h_pk_str(pk, "yes");
    h_body_send(w, &r);
}

/* The reply to a garbled message: bad_result at field, naming what (a job
 * attempt) in its message. */
static bool refused_as_bad_result(void *w, const char *field, const char *what)
{
    wire_msg m;
    if (await(w, WIRE_T_ERROR, T_REPLY, &m) != 0)
        return false;
    bool ok = m.error.code == WIRE_E_BAD_RESULT && m.error.field &&
              strcmp(m.error.field, field) == 0 && strstr(m.error.message, what);
    if (!ok)
        fprintf(stderr, "  got %s at %s: %s\n", wire_code_name(m.error.code),
                m.error.field ? m.error.field : "-", m.error.message);
    wire_msg_free(&m);
    return ok;
}

static const char *attempt_1(uint64_t id)
{
    static char what[64];
    snprintf(what, sizeof what, "job %llu attempt 1", (unsigned long long)id);
    return what;
}

/* Attempt 1 of job id ended as failed for reason (a LIKE pattern), nothing
 * in results, the job back in the queue with a fault. */
static bool ended_for(const harness *h, uint64_t id, const char *reason)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM attempts WHERE job_id = %llu AND attempt = 1 AND"
             " outcome = 'failed' AND reason LIKE '%s'",
             (unsigned long long)id, reason);
    return h_sql(h, sql) == 1 &&
           sqlf(h, "SELECT state = 'queued' AND faults = 1 FROM jobs WHERE id = %llu", id) == 1 &&
           sqlf(h, "SELECT count(*) FROM results WHERE job_id = %llu", id) == 0;
}

/* Still running where it was, its attempt not ended. */
static bool untouched(const harness *h, uint64_t id)
{
    return sqlf(h, "SELECT state = 'running' AND faults = 0 FROM jobs WHERE id = %llu", id) == 1 &&
           sqlf(h, "SELECT count(*) FROM attempts WHERE job_id = %llu AND outcome IS NOT NULL",
                id) == 0;
}

/* The garbler (bad) holds ids[0..3], the bystander ids[4]: each garbled
 * message is refused, and only the attempts of the garbler's it names end. */
static void send_garbled(harness *h, void *bad, const uint64_t *ids, const got_job *j,
                         const got_job *jo)
{
    garbled_result(bad, j[0].id, j[0].attempt, GEN_AS_STR);
    CHECK(refused_as_bad_result(bad, "gen_tokens", attempt_1(ids[0])) &&
              ended_for(h, ids[0], "result did not decode: gen_tokens: %"),
          "a result whose gen_tokens is a str: bad_result at gen_tokens; its attempt ended"
          " as failed, 'result did not decode: gen_tokens: ...'; nothing in results; the job"
          " back in the queue with a fault");
    garbled_result(bad, j[1].id, j[1].attempt, GEN_NEGATIVE);
    CHECK(refused_as_bad_result(bad, "gen_tokens", attempt_1(ids[1])) &&
              ended_for(h, ids[1], "result did not decode: gen_tokens: %"),
          "the same for a negative gen_tokens");
    garbled_failure(bad, j[2].id, j[2].attempt);
    CHECK(refused_as_bad_result(bad, "retryable", attempt_1(ids[2])) &&
              ended_for(h, ids[2], "failure did not decode: retryable: %"),
          "and for a job_failure whose retryable is a str ('failure did not decode')");
    garbled_result(bad, jo->id, jo->attempt, GEN_AS_STR);
    CHECK(refused_as_bad_result(bad, "gen_tokens", attempt_1(ids[4])) && untouched(h, ids[4]),
          "a garbled result naming another session's job is refused and changes nothing of it");
    garbled_result(bad, j[3].id, j[3].attempt, ID_AS_STR);
    CHECK(refused_as_bad_result(bad, "id", "no job attempt") && untouched(h, ids[3]),
          "one whose id is a str is refused (bad_result at id) and changes no job");
}

/* A worker's result that does not decode must not leave its job running
 * on a session that believes it finished: it is refused as bad_result,
 * its attempt ends (failed, why recorded), nothing is stored, the job runs
 * on another worker, exactly one result at the end, the sender gets no
 * more jobs and the broker stays up.  A garbled result naming another
 * session's job, or no readable job, changes no job; the sender's jobs go
 * back when its session ends. */
static void test_undecoded_results(void)
{
    /* Workers wait in turn here, silent: none may be presumed dead. */
    static const char *const flags[] = {"--heartbeat-ms", "100", "--worker-timeout-ms", "60000",
                                        NULL};
    enum { N = 5 };
    harness h;
    void *c;
    setup(&h, "tbw-garbled", flags, &c);
    uint64_t ids[N];
    submit(c, NULL, N - 1, NULL, NULL, ids);
    void *bad = worker_connect(&h, "w-garbled", "m", N - 1, NULL);
    credit(bad, N - 1);
    got_job j[N - 1], jo;
    int took = 0;
    for (int i = 0; i < N - 1; i++)
        took += await_job(bad, T_REPLY, &j[i]) == 0 && j[i].id == ids[i];
    submit(c, NULL, 1, NULL, NULL, &ids[N - 1]);
    void *other = worker_connect(&h, "w-bystander", "m", 1, NULL);
    credit(other, 1);
    took += await_job(other, T_REPLY, &jo) == 0 && jo.id == ids[N - 1];
    CHECK(took == N, "a worker takes four jobs, another one the fifth");
    send_garbled(&h, bad, ids, j, &jo);

    /* Were the garbling session still trusted, these credits would take
     * the requeued jobs before the next worker could. */
    credit(bad, 3);
    void *good = worker_connect(&h, "w-good", "m", N - 1, NULL);
    credit(good, N - 1);
    got_job g[N - 1];
    int again = 0;
    for (int i = 0; i < 3; i++)
        again += await_job(good, T_REPLY, &g[i]) == 0 && g[i].id == ids[i] && g[i].attempt == 2;
    CHECK(again == 3, "the refused jobs run again on another worker, attempt 2 (%d of 3)", again);
    send_simple(bad, WIRE_T_BYE);
    again = await_job(good, T_REPLY, &g[3]) == 0 && g[3].id == ids[3] && g[3].attempt == 2;
    CHECK(again, "the job the id-less result was about goes back when its session ends (bye)");
    for (int i = 0; i < N - 1; i++)
        result(good, g[i].id, g[i].attempt, "good", 2);
    result(other, jo.id, jo.attempt, "bystander", 2);
    send_wait(c, 9, ids, N, T_REPLY);
    int done = 0;
    wire_msg m;
    for (int i = 0; i < N && h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m) == 0; i++) {
        done += m.result.state == WIRE_STATE_DONE && strcmp(m.result.text, "garbled") != 0;
        wire_msg_free(&m);
    }
    CHECK(done == N && h_sql(&h, "SELECT count(*) FROM results") == N &&
              h_sql(&h, "SELECT count(DISTINCT job_id) FROM results") == N &&
              h_sql(&h, "SELECT coalesce(sum(generated_tokens), 0) FROM v_worker_stats"
                        " WHERE name = 'w-garbled'") == 0,
          "all five finish, exactly one result row each, none the garbler's (%d done)", done);
    CHECK(h.broker > 0 && waitpid(h.broker, NULL, WNOHANG) == 0, "the broker stays up throughout");
    void *ws[3] = {bad, other, good};
    teardown(&h, c, ws, 3);
}

static void test_broker_restart(void)
{
    running r;
    start_running(&r, "tbw-restart", FAST, "w-r", 1);
    harness *h = &r.h;
    void *c = r.c, *w = r.w;
    uint64_t id = r.ids[0];
    h_kill9(h);
    h_start(h, FAST);
    wire_msg m;
    int rc = await(w, WIRE_T_ERROR, T_REPLY, &m);
    CHECK(rc == 0 && m.error.code == WIRE_E_UNKNOWN_WORKER,
          "after a broker restart the worker hears unknown_worker");
    if (rc == 0)
        wire_msg_free(&m);
    h_close(w);
    w = worker_connect(h, "w-r", "m", 1, NULL);
    credit(w, 1);
    got_job j2;
    rc = await_job(w, T_REPLY, &j2);
    CHECK(rc == 0 && j2.id == id && j2.attempt == 2,
          "the job left running by the killed broker runs again (attempt 2)");
    CHECK(sqlf(h, "SELECT count(*) FROM attempts WHERE job_id = %llu AND"
                   " outcome = 'interrupted'", id) == 1,
          "its first attempt is recorded as interrupted");
    teardown(h, c, &w, 1);
}

static int exit_within(harness *h, int ms)
{
    int status;
    int64_t end = clock_mono_ms() + ms;
    while (clock_mono_ms() < end) {
        if (waitpid(h->broker, &status, WNOHANG) == h->broker) {
            h->broker = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        }
        h_sleep_ms(10);
    }
    return -1;
}

static void test_sigterm_finishes(void)
{
    running r;
    start_running(&r, "tbw-term", FAST, "w-t", 1);
    harness *h = &r.h;
    void *c = r.c, *w = r.w;
    uint64_t id = r.ids[0];
    got_job j = r.j;
    kill(h->broker, SIGTERM);
    wire_msg m;
    int rc = await(w, WIRE_T_SHUTDOWN, T_REPLY, &m);
    CHECK(rc == 0 && m.grace_ms == 10000, "SIGTERM sends shutdown with the grace period");
    if (rc == 0)
        wire_msg_free(&m);
    uint64_t refused;
    rc = submit(c, NULL, 1, NULL, NULL, &refused);
    CHECK(rc != 0, "submits are refused while stopping");
    result(w, j.id, j.attempt, "finished in time", 2);
    int st = exit_within(h, 5000);
    CHECK(st == 0, "once the running job is done the broker exits 0");
    CHECK(sqlf(h, "SELECT state = 'done' FROM jobs WHERE id = %llu", id) == 1,
          "the job that finished during the grace period is done");
    teardown(h, c, &w, 1);
}

static void test_sigterm_grace_expires(void)
{
    const char *const flags[] = {"--heartbeat-ms", "100", "--worker-timeout-ms",
                                 "800", "--grace-ms", "300", NULL};
    running r;
    start_running(&r, "tbw-grace", flags, "w-g", 1);
    harness *h = &r.h;
    void *c = r.c, *w = r.w;
    uint64_t id = r.ids[0];
    int64_t t0 = clock_mono_ms();
    kill(h->broker, SIGTERM);
    wire_msg m;
    if (await(w, WIRE_T_SHUTDOWN, T_REPLY, &m) == 0)
        wire_msg_free(&m);
    int st = exit_within(h, 5000);
    int64_t took = clock_mono_ms() - t0;
    CHECK(st == 0 && took >= 250 && took < 3000,
          "a job still running after the grace period does not hold the"
          " broker (%lld ms, grace 300)", (long long)took);
    CHECK(sqlf(h, "SELECT state = 'queued' FROM jobs WHERE id = %llu", id) == 1 &&
              sqlf(h, "SELECT faults FROM jobs WHERE id = %llu", id) == 0,
          "it is back in the queue, without a fault, for the next broker");
    teardown(h, c, &w, 1);
}

static void test_heartbeats_and_models(void)
{
    harness h;
    void *c;
    /* The job for "other-model" must wait in the queue, not be refused. */
    static const char *const flags[] = {"--heartbeat-ms", "100", "--worker-timeout-ms",
                                        "800", "--queue-unknown-models", NULL};
    setup(&h, "tbw-hb", flags, &c);
    void *w = worker_connect(&h, "w-h", "m", 4, NULL);
    int beats = 0;
    int64_t end = clock_mono_ms() + 1000;
    wire_msg m;
    while (clock_mono_ms() < end) {
        if (h_recv(w, 50, &m) == 0) {
            beats += m.type == WIRE_T_HEARTBEAT;
            wire_msg_free(&m);
        }
        send_simple(w, WIRE_T_HEARTBEAT);
    }
    CHECK(beats >= 5 && beats <= 15,
          "an idle worker gets heartbeats every ~100 ms (%d in 1 s)", beats);
    uint64_t other, mine, any;
    submit(c, NULL, 1, NULL, "other-model", &other);
    submit(c, NULL, 1, NULL, "m", &mine);
    submit(c, NULL, 1, NULL, NULL, &any);
    credit(w, 3);
    got_job a, b;
    int ra = await_job(w, T_REPLY, &a), rb = await_job(w, T_REPLY, &b);
    int extra = count_jobs(w, 300);
    CHECK(ra == 0 && rb == 0 && a.id == mine && b.id == any && extra == 0,
          "a worker gets jobs for its model and for any model, not for another");
    wire_msg_init(&m, WIRE_T_STATS);
    h_send(c, &m);
    int rc = h_recv_type(c, T_REPLY, WIRE_T_STATS_OK, &m);
    CHECK(rc == 0 && m.stats_ok.n_workers == 1 && m.stats_ok.workers[0].busy == 2 &&
              m.stats_ok.counts.queued == 1 && m.stats_ok.counts.running == 2,
          "stats lists the worker with 2 busy slots; 1 queued, 2 running");
    if (rc == 0)
        wire_msg_free(&m);
    void *stranger = h_peer(&h, h.workers);
    credit(stranger, 1);
    rc = h_recv_type(stranger, T_REPLY, WIRE_T_ERROR, &m);
    CHECK(rc == 0 && m.error.code == WIRE_E_UNKNOWN_WORKER,
          "a credit before hello is refused as unknown_worker");
    if (rc == 0)
        wire_msg_free(&m);
    void *ws[2] = {w, stranger};
    teardown(&h, c, ws, 2);
}

/* The broker refuses jobs for models no worker serves (its default): an
 * alias makes one. */
static void test_aliases(void)
{
    harness h;
    void *c;
    setup(&h, "tbw-alias", FAST, &c);
    static const char *const aliases[] = {"gpt-4o-mini", "gpt-x"};
    const wire_hello hello = {.worker = "w-al",
                              .host = "testhost",
                              .pid = (uint32_t)getpid(),
                              .gpu_index = -1,
                              .model = "stories",
                              .aliases = aliases,
                              .n_aliases = 2,
                              .engine = "cpu",
                              .slots = 2};
    void *w = h_peer(&h, h.workers);
    wire_msg m;
    wire_msg_init(&m, WIRE_T_HELLO);
    m.hello = hello;
    h_send(w, &m);
    int rc = h_recv_type(w, T_REPLY, WIRE_T_WELCOME, &m);
    CHECK(rc == 0, "a hello with aliases is welcome");
    if (rc == 0)
        wire_msg_free(&m);
    uint64_t id = 0, none = 0;
    rc = submit(c, NULL, 1, NULL, "gpt-x", &id);
    int refused = submit(c, NULL, 1, NULL, "gpt-5", &none);
    CHECK(rc == 0 && refused != 0,
          "a submit naming a worker's alias is taken; one naming no served model is not");
    credit(w, 1);
    got_job j;
    rc = await_job(w, T_REPLY, &j);
    CHECK(rc == 0 && j.id == id, "the job for the alias goes to the worker answering to it");
    send_wait(c, 2, &id, 1, 5000);
    result(w, j.id, j.attempt, "done here", 2);
    rc = h_recv_type(c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && m.result.model && strcmp(m.result.model, "stories") == 0 &&
              strcmp(m.result.worker, "w-al") == 0,
          "its result names the model that ran (%s), not the alias",
          rc == 0 && m.result.model ? m.result.model : "none");
    if (rc == 0)
        wire_msg_free(&m);
    CHECK(h_sql(&h, "SELECT count(*) FROM workers WHERE name = 'w-al'"
                    " AND aliases = '[\"gpt-4o-mini\",\"gpt-x\"]'") == 1,
          "the workers table keeps the session's aliases");
    void *ws[1] = {w};
    teardown(&h, c, ws, 1);
}

/* A fresh broker has no models to judge a job's by: before any worker is
 * in, a job naming a model waits for one (a script that starts the broker,
 * its workers and a submit at once); once a worker is in, a job for a model
 * nobody serves is refused as before. */
static void test_fresh_broker_queues_models(void)
{
    harness h;
    void *c;
    setup(&h, "tbw-fresh", FAST, &c);
    uint64_t early = 0, typo = 0;
    int rc = submit(c, NULL, 1, NULL, "late-model", &early);
    CHECK(rc == 0, "before any worker is in, a job naming a model is queued");
    void *w = worker_connect(&h, "w-late", "late-model", 1, NULL);
    credit(w, 1);
    got_job j;
    rc = await_job(w, T_REPLY, &j);
    CHECK(rc == 0 && j.id == early, "the worker serving it gets it when it comes");
    int refused = submit(c, NULL, 1, NULL, "no-such-model", &typo);
    CHECK(refused != 0, "with a worker in, a job for a model nobody serves is refused");
    void *ws[1] = {w};
    teardown(&h, c, ws, 1);
}

/* ---- a database without room ----------------------------------------------------------------- */

/* Submits one job with a fresh key: the reply's code (WIRE_OK for
 * submit_ok), its message in msg. */
static wire_code submit_code(void *c, const char *prompt, char *msg, size_t size)
{
    static int n;
    char key[32];
    snprintf(key, sizeof key, "full-%d", n++);
    wire_job j;
    h_job(&j, key, prompt);
    wire_msg m;
    wire_msg_init(&m, WIRE_T_SUBMIT);
    m.req = 40;
    m.submit = (wire_submit){.jobs = &j, .n_jobs = 1};
    h_send(c, &m);
    if (h_recv(c, T_REPLY, &m) != 0)
        return WIRE_E_COUNT;
    wire_code code = m.type == WIRE_T_ERROR ? m.error.code : WIRE_OK;
    snprintf(msg, size, "%s", m.type == WIRE_T_ERROR ? m.error.message : "");
    wire_msg_free(&m);
    return code;
}

/* The broker reads its room at most every 100 ms: submits until one is
 * refused (10 s at most). */
static wire_code submit_until_refused(void *c, char *msg, size_t size)
{
    int64_t end = clock_mono_ms() + 10000;
    wire_code code = WIRE_OK;
    while (code == WIRE_OK && clock_mono_ms() < end)
        code = submit_code(c, "small", msg, size);
    return code;
}

/* Jobs sent to w up to the broker's reply to a bad message sent after
 * everything before (replies go out in order, jobs of the same loop
 * iteration after it), and in a moment after. */
static int jobs_until_reply(void *w)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_CREDIT);
    m.credit = 0; /* out of range: answered with an error */
    h_send(w, &m);
    int jobs = 0;
    int64_t end = clock_mono_ms() + T_REPLY;
    bool replied = false;
    while (clock_mono_ms() < end && h_recv(w, replied ? 300 : 100, &m) == 0) {
        jobs += m.type == WIRE_T_JOB;
        replied |= m.type == WIRE_T_ERROR;
        wire_msg_free(&m);
    }
    return jobs;
}

static void test_database_full(void)
{
    static const char *const cap[] = {"--max-db-mb", "1", NULL};
    running r;
    start_running(&r, "tbw-full", cap, "w-full", 2);
    size_t big_len = WIRE_MAX_PROMPT_BYTES;
    char *big = malloc(big_len + 1), msg[512];
    memset(big, 'a', big_len);
    big[big_len] = 0;
    wire_code first = submit_code(r.c, big, msg, sizeof msg);
    free(big);
    wire_code refused = submit_until_refused(r.c, msg, sizeof msg);
    CHECK(r.j.id == r.ids[0] && first == WIRE_OK && refused == WIRE_E_UNAVAILABLE &&
              strstr(msg, "database full") && strstr(msg, "--max-db-mb") &&
              strstr(msg, "retry later"),
          "past --max-db-mb submits are refused as unavailable: %s", msg);
    send_select_status(r.c, r.ids[0]);
    wire_msg m;
    int rc = h_recv_type(r.c, T_REPLY, WIRE_T_STATUS_OK, &m);
    CHECK(rc == 0 && m.jobs_reply.n_jobs == 1 && m.jobs_reply.jobs[0].state == WIRE_STATE_RUNNING,
          "status is served meanwhile");
    if (rc == 0)
        wire_msg_free(&m);
    send_wait(r.c, 41, &r.ids[0], 1, T_REPLY);
    result(r.w, r.j.id, r.j.attempt, "stored though full", 4);
    rc = h_recv_type(r.c, T_REPLY, WIRE_T_RESULT, &m);
    CHECK(rc == 0 && m.result.state == WIRE_STATE_DONE &&
              strcmp(m.result.text, "stored though full") == 0 &&
              sqlf(&r.h, "SELECT count(*) FROM results WHERE job_id = %llu", r.ids[0]) == 1,
          "the running job's result is stored and pushed");
    if (rc == 0)
        wire_msg_free(&m);
    credit(r.w, 1);
    int started = jobs_until_reply(r.w);
    CHECK(started == 0 &&
              sqlf(&r.h, "SELECT count(*) FROM attempts WHERE job_id = %llu", r.ids[1]) == 0,
          "the queued job is not started while the database is full (%d sent)", started);
    int st = h_stop(&r.h, 10000);
    CHECK(st == 0 && h_file_has(r.h.log, "database full"),
          "the broker kept running, said why, and stops cleanly");
    void *ws[1] = {r.w};
    teardown(&r.h, r.c, ws, 1);

    static const char *const reserve[] = {"--min-free-mb", "1000000000", NULL};
    harness h;
    void *c;
    setup(&h, "tbw-nofree", reserve, &c);
    wire_code code = submit_code(c, "x", msg, sizeof msg);
    CHECK(code == WIRE_E_UNAVAILABLE && strstr(msg, "--min-free-mb 1000000000") &&
              strstr(msg, "MiB free"),
          "a file system with less free than --min-free-mb refuses the first submit: %s", msg);
    teardown(&h, c, NULL, 0);
}

int main(void)
{
    test_credits_order_and_results();
    test_dead_worker_and_late_result();
    test_failures_and_attempts();
    test_cancel_running();
    test_bye_and_second_hello();
    test_forged_results();
    test_undecoded_results();
    test_broker_restart();
    test_sigterm_finishes();
    test_sigterm_grace_expires();
    test_heartbeats_and_models();
    test_aliases();
    test_fresh_broker_queues_models();
    test_database_full();
    return check_done();
}
