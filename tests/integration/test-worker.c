/* test-worker: llmq-worker's own behaviours, as a real process against a
 * real broker (CPU engine, stories260K, one thread).
 *
 * Pins: the command line (--help, bad flags exit 2, --gpu in a build
 * without CUDA exits 2, a bad model or --batch below --slots exits 1 naming
 * the problem); a job the model cannot take
 * (a token id outside the vocabulary, a prompt longer than the context)
 * fails for good with a reason naming the job and field while the other jobs of the batch
 * complete; a job the engine has no room for goes back to the queue and
 * runs on another worker; cancel of a running job frees its slot at once;
 * heartbeats keep going through an engine step longer than the broker's
 * worker timeout;
 * SIGTERM lets a running job finish within the grace period, or past it
 * hands the job back to the broker without counting a fault, and exits 0;
 * the Python client (another language, no shared code) gets from a real
 * worker exactly llmq-run's text; jobs of different output formats (two
 * JSON schemas, json_object, free text) run in one batch, each output
 * following its own, and a schema llmq cannot honour fails at once,
 * naming json_schema and the keyword; the Python client's --json-schema
 * sends one.  Against a scripted broker: a refused hello is said again
 * after 1 s, then 2 s, each refusal logged with the broker's reason; a
 * result refused as bad_result makes the worker say bye and exit 1.
 *
 * The workers whose jobs must still be running when the test acts (cancel,
 * SIGTERM) are paced (LLMQ_TEST_MIN_STEP_MS): a step every PACE_MS at the
 * most, so a job of N tokens runs for N * PACE_MS or more however fast the
 * machine; the test waits for the events it checks, never for a time. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/file.h"
#include "common/json.h"
#include "proto/wire.h"
#include "tests/integration/fleet.h"
#include "tests/unit/check.h"

/* 2000 paced tokens take 40 s or more: no cancel or signal of these tests
 * comes that late. */
#define PACE_MS 20

static const char *const BROKER_FLAGS[] = {"--heartbeat-ms", "200", "--worker-timeout-ms",
                                           "1000", NULL};

typedef struct env {
    harness h;
    const char *build, *src, *data;
    llmq_client *c;
} env;

static bool exited(int status, int code)
{
    return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

/* ---- the command line ---------------------------------------------------------------- */

static void test_cli(const env *e)
{
    const char *d = e->h.dir, *b = e->build;
    CHECK(fleet_sh("%s/worker/llmq-worker --help > %s/help 2>&1", b, d) == 0 &&
              fleet_sh("grep -q -- '--broker ENDPOINT' %s/help", d) == 0,
          "--help shows the usage and exits 0");
    CHECK(fleet_sh("%s/worker/llmq-worker --frobnicate > /dev/null 2>&1", b) == 2 &&
              fleet_sh("%s/worker/llmq-worker --slots 0 -m x > /dev/null 2>&1", b) == 2 &&
              fleet_sh("%s/worker/llmq-worker --cpu --gpu 0 -m x > /dev/null 2>&1", b) == 2 &&
              fleet_sh("%s/worker/llmq-worker --broker x > /dev/null 2>&1", b) == 2,
          "an unknown flag, a bad value, --cpu with --gpu, no -m: exit 2");
#ifndef LLMQ_HAVE_CUDA
    /* timeout: a worker that runs instead serves until stopped */
    CHECK(fleet_sh("timeout 60 %s/worker/llmq-worker --gpu 0 -m %s/models/stories260K.gguf"
                   " --broker ipc://%s/nobody 2> %s/nogpu",
                   b, e->data, d, d) == 2 &&
              fleet_sh("grep -q -- '--gpu 0: built without CUDA' %s/nogpu", d) == 0,
          "a build without CUDA given --gpu 0: exit 2, saying so (not the CPU in its place)");
#endif
    CHECK(fleet_sh("%s/worker/llmq-worker -m %s/reference/story.txt 2> %s/bad", b, e->data, d) ==
                  1 &&
              fleet_sh("grep -q 'cannot load the model: .*story.txt.*not a GGUF' %s/bad", d) == 0,
          "a file that is not a model: exit 1, saying so");
    CHECK(fleet_sh("%s/worker/llmq-worker --cpu -m %s/models/stories260K.gguf --slots 8 --batch 4"
                   " 2> %s/batch",
                   b, e->data, d) == 1 &&
              fleet_sh("grep -q -- '--batch 4 is less than the 8 slots' %s/batch", d) == 0,
          "--batch below --slots: exit 1, naming both (it was raised to the slots unsaid)");
}

/* ---- jobs the model cannot take --------------------------------------------------------- */

static char *long_prompt(const env *e)
{
    char path[512], *text;
    size_t len;
    llmq_err err;
    snprintf(path, sizeof path, "%s/reference/story.txt", e->data);
    if (file_read_all(path, &text, &len, &err) != 0)
        return strdup("");
    return text;
}

/* The job failed on its first attempt with "job ID: " + reason (a LIKE
 * pattern) in its error. */
static bool failed_at_once(const env *e, uint64_t id, const char *reason)
{
    return fleet_sqlf(&e->h, "SELECT attempts = 1 AND error LIKE '%%job %llu: %s%%' FROM jobs"
                             " WHERE id = %llu", (unsigned long long)id, reason,
                      (unsigned long long)id) == 1;
}

static void test_bad_jobs(env *e)
{
    fleet_worker w;
    const char *flags[] = {"--slots", "2", "--ctx", "64", NULL};
    fleet_start(&e->h, &w, "w-bad", flags);
    char *story = long_prompt(e);
    static const uint32_t bad_ids[] = {1, 99999};
    llmq_job jobs[4];
    for (int i = 0; i < 4; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].max_tokens = 8;
        jobs[i].prompt = "Once upon a time";
    }
    jobs[1].prompt = NULL;
    jobs[1].tokens = bad_ids;
    jobs[1].n_tokens = 2;
    jobs[2].prompt = story;
    uint64_t ids[4];
    llmq_error err;
    int rc = llmq_submit(e->c, "bad", NULL, jobs, 4, ids, NULL, &err);
    llmq_state st[4] = {0};
    size_t final = rc == 0 ? fleet_wait(e->c, ids, 4, 20000, st, NULL) : 0;
    CHECK(final == 4 && st[0] == LLMQ_STATE_DONE && st[3] == LLMQ_STATE_DONE,
          "the good jobs of a batch complete next to bad ones");
    CHECK(st[1] == LLMQ_STATE_FAILED &&
              failed_at_once(e, ids[1], "prompt token 1: id 99999 out of range"),
          "a token id outside the vocabulary fails at once, naming the job and the token");
    CHECK(st[2] == LLMQ_STATE_FAILED &&
              failed_at_once(e, ids[2], "prompt: % tokens do not fit the context of 64"),
          "a prompt longer than the context fails at once, naming the job and the prompt");
    int64_t t0 = clock_mono_ms();
    int status = fleet_stop(&w, 10000);
    CHECK(exited(status, 0) && clock_mono_ms() - t0 < 3000,
          "an idle worker stops on SIGTERM at once, exit 0");
    free(story);
}

/* ---- cancel, and SIGTERM with a job running ------------------------------------------------- */

static uint64_t submit_one(env *e, const char *prompt, uint32_t max_tokens)
{
    llmq_job j;
    llmq_job_init(&j);
    j.prompt = prompt;
    j.max_tokens = max_tokens;
    j.ignore_eos = true;
    uint64_t id = 0;
    llmq_error err;
    if (llmq_submit(e->c, NULL, NULL, &j, 1, &id, NULL, &err) != 0)
        fprintf(stderr, "submit: %s\n", err.message);
    return id;
}

/* ---- a job the engine has no room for ------------------------------------------------------ */

static void cancel_ids(env *e, const uint64_t *ids, size_t n)
{
    llmq_select sel = {.ids = ids, .n_ids = n};
    llmq_status *st;
    llmq_error err;
    if (llmq_cancel(e->c, &sel, &st, &err) == 0)
        llmq_status_free(st);
}

/* w-full announces 3 slots while its engine holds 2 sequences
 * (LLMQ_TEST_ENGINE_SEQS=1): of three jobs sent together, the third finds no
 * room.  It is not the job's fault: it goes back to the queue, w-full keeps
 * that slot to itself until a job of its own leaves, and the job runs on the
 * next worker that comes. */
static void test_no_room(env *e)
{
    fleet_worker full, roomy;
    const char *flags[] = {"--slots", "3", NULL};
    char pace[48];
    snprintf(pace, sizeof pace, "LLMQ_TEST_MIN_STEP_MS=%d", PACE_MS);
    const char *const knobs[] = {"LLMQ_TEST_ENGINE_SEQS=1", pace, NULL};
    fleet_start_env(&e->h, &full, "w-full", flags, knobs);
    llmq_job jobs[3];
    for (int i = 0; i < 3; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].prompt = "Once upon a time";
        jobs[i].max_tokens = i < 2 ? 2000 : 8; /* the first two outlast the test */
        jobs[i].ignore_eos = true;
    }
    uint64_t ids[3] = {0};
    llmq_error err;
    llmq_submit(e->c, "room", NULL, jobs, 3, ids, NULL, &err);
    const unsigned long long third = (unsigned long long)ids[2];
    CHECK(fleet_sql_becomes(&e->h, 20000,
                            "SELECT outcome = 'failed' AND reason LIKE"
                            " '%%job %llu: engine full%%' FROM attempts WHERE job_id = %llu"
                            " AND attempt = 1",
                            third, third),
          "the engine refuses the third job for lack of room");
    const char *one[] = {"--slots", "1", NULL};
    fleet_start(&e->h, &roomy, "w-roomy", one);
    llmq_state st = 0;
    size_t final = fleet_wait(e->c, &ids[2], 1, 20000, &st, NULL);
    CHECK(final == 1 && st == LLMQ_STATE_DONE &&
              fleet_sqlf(&e->h,
                         "SELECT j.attempts = 2 AND j.faults = 1 AND w.name = 'w-roomy'"
                         " FROM jobs j JOIN results r ON r.job_id = j.id JOIN workers w"
                         " ON w.id = r.worker_id WHERE j.id = %llu",
                         third) == 1,
          "it was retried, once, and done by the worker that came next");
    cancel_ids(e, ids, 2);
    fleet_stop(&full, 20000);
    fleet_stop(&roomy, 10000);
}

static bool wait_running(env *e, uint64_t id)
{
    return fleet_sql_becomes(&e->h, 20000, "SELECT state = 'running' FROM jobs WHERE id = %llu",
                             (unsigned long long)id);
}

/* Running in the worker's engine (its -v log says so), not only dispatched: the broker marks a
 * job running when it sends it, a moment before the worker has it. */
static bool wait_started(const fleet_worker *w, uint64_t id)
{
    char line[64];
    snprintf(line, sizeof line, "job %llu attempt 1 started", (unsigned long long)id);
    for (int64_t end = clock_mono_ms() + 20000; clock_mono_ms() < end; h_sleep_ms(20))
        if (fleet_log_has(w, line))
            return true;
    return false;
}

static void test_cancel(env *e, fleet_worker *w)
{
    uint64_t big = submit_one(e, "Once upon a time", 2000);
    uint64_t small = submit_one(e, "The cat", 8);
    bool running = wait_running(e, big);
    llmq_select sel = {.ids = &big, .n_ids = 1};
    llmq_status *st = NULL;
    llmq_error err;
    int rc = llmq_cancel(e->c, &sel, &st, &err);
    int64_t t0 = clock_mono_ms();
    CHECK(running && rc == 0 && st->jobs[0].state == LLMQ_STATE_CANCELLED,
          "a running job of 2000 tokens is cancelled");
    if (rc == 0)
        llmq_status_free(st);
    llmq_state s = 0;
    size_t final = fleet_wait(e->c, &small, 1, 20000, &s, NULL);
    int64_t took = clock_mono_ms() - t0;
    CHECK(final == 1 && s == LLMQ_STATE_DONE && took < 2000 * PACE_MS / 4,
          "the job queued behind it on the one slot is done %lld ms later, long before the"
          " cancelled one could have ended",
          (long long)took);
    CHECK(fleet_sqlf(&e->h, "SELECT count(*) FROM results WHERE job_id = %llu",
                     (unsigned long long)big) == 0 &&
              fleet_log_has(w, "cancelled by the broker"),
          "the worker stopped it in the engine; no result row");
}

static void test_sigterm_finishes(env *e, fleet_worker *w)
{
    uint64_t id = submit_one(e, "Once upon a time", 100);
    bool running = wait_running(e, id) && wait_started(w, id);
    int status = fleet_stop(w, 20000);
    /* The worker has sent its result before it exits; the broker records
     * it a moment later. */
    CHECK(running && exited(status, 0) &&
              fleet_sql_becomes(&e->h, 20000,
                                "SELECT count(*) FROM results r JOIN workers w ON"
                                " w.id = r.worker_id WHERE r.job_id = %llu AND w.name = 'w-slot'"
                                " AND r.generated_tokens = 100",
                                (unsigned long long)id),
          "SIGTERM: the running job finishes within the grace period, then exit 0");
}

static void test_sigterm_returns(env *e)
{
    fleet_worker w;
    const char *flags[] = {"--slots", "1", "--grace-ms", "300", "-v", NULL};
    fleet_start_paced(&e->h, &w, "w-grace", flags, PACE_MS);
    uint64_t id = submit_one(e, "Once upon a time", 2000);
    bool running = wait_running(e, id) && wait_started(&w, id);
    int64_t t0 = clock_mono_ms();
    int status = fleet_stop(&w, 10000);
    int64_t took = clock_mono_ms() - t0;
    CHECK(running && exited(status, 0) && took < 2000 * PACE_MS / 4,
          "SIGTERM past a grace period of 300 ms: exit 0 after %lld ms, long before the job"
          " could end",
          (long long)took);
    CHECK(fleet_sql_becomes(&e->h, 20000,
                            "SELECT state = 'queued' AND faults = 0 FROM jobs"
                            " WHERE id = %llu",
                            (unsigned long long)id) &&
              fleet_sqlf(&e->h,
                         "SELECT outcome = 'returned' FROM attempts WHERE job_id = %llu"
                         " AND attempt = 1",
                         (unsigned long long)id) == 1,
          "its unfinished job is back in the queue, no fault counted");
    llmq_select sel = {.ids = &id, .n_ids = 1};
    llmq_status *st;
    llmq_error err;
    if (llmq_cancel(e->c, &sel, &st, &err) == 0)
        llmq_status_free(st);
}

/* ---- a step longer than the broker's patience ---------------------------------------------- */

/* Runs the whole story (~1660 tokens) as one prompt in one prefill step on a
 * fresh worker named `name`; the step's ms (-1 on failure) and the job id. */
static int64_t run_long_job(env *e, const char *name, uint64_t *id)
{
    fleet_worker w;
    const char *flags[] = {"--slots", "1", "--batch", "2048", NULL};
    fleet_start(&e->h, &w, name, flags);
    char *story = long_prompt(e);
    *id = submit_one(e, story, 4);
    free(story);
    llmq_state s = 0;
    size_t final = fleet_wait(e->c, id, 1, 60000, &s, NULL);
    int64_t prefill = final == 1 && s == LLMQ_STATE_DONE
                          ? fleet_sqlf(&e->h, "SELECT CAST(prefill_ms AS INTEGER) FROM results"
                                              " WHERE job_id = %llu", (unsigned long long)*id)
                          : -1;
    fleet_stop(&w, 10000);
    return prefill;
}

/* One run against a broker whose worker timeout is a third of `measured`
 * (heartbeats six times as often): the step's ms, or 0 when the step came
 * out no longer than the timeout (the machine sped up since it was
 * measured), which proves nothing and is run again by the caller. */
static int64_t impatient_run(env *e, int64_t measured)
{
    const int64_t timeout = measured / 3 > 30 ? measured / 3 : 30;
    const int64_t beat = timeout / 6 > 5 ? timeout / 6 : 5;
    char to[32], hb[32];
    snprintf(to, sizeof to, "%lld", (long long)timeout);
    snprintf(hb, sizeof hb, "%lld", (long long)beat);
    const char *broker_flags[] = {"--heartbeat-ms", hb, "--worker-timeout-ms", to, NULL};
    env impatient = *e;
    h_init(&impatient.h, "llmq-worker-long", 150);
    h_start(&impatient.h, broker_flags);
    impatient.c = fleet_client(&impatient.h, 10000);
    uint64_t id;
    const int64_t prefill = run_long_job(&impatient, "w-long", &id);
    if (prefill > timeout) {
        CHECK(true,
              "a 1660-token prompt is prefilled in one step of %lld ms (worker timeout"
              " %lld ms)",
              (long long)prefill, (long long)timeout);
        CHECK(fleet_sqlf(&impatient.h, "SELECT attempts FROM jobs WHERE id = %llu",
                         (unsigned long long)id) == 1 &&
                  fleet_sqlf(&impatient.h, "SELECT count(*) FROM workers WHERE name = 'w-long'") ==
                      1 &&
                  fleet_sqlf(&impatient.h, "SELECT count(*) FROM workers WHERE name = 'w-long'"
                                           " AND state = 'lost'") == 0,
              "heartbeats kept the worker alive through it: one attempt, one session");
    }
    llmq_close(impatient.c);
    h_stop(&impatient.h, 15000);
    h_done(&impatient.h, check_state.failed > 0);
    return prefill > timeout ? prefill : -prefill;
}

/* How long a step takes depends on the machine, so the broker's patience is
 * set from a measured step.  When the machine's speed changes between the
 * measure and the real run, the real step is the next measure (4 rounds). */
static void test_long_step(env *e)
{
    uint64_t id;
    int64_t measured = run_long_job(e, "w-measure", &id);
    for (int round = 0; round < 4 && measured > 0; round++) {
        const int64_t got = impatient_run(e, measured);
        if (got > 0)
            return;
        measured = -got;
    }
    CHECK(false, "a step longer than the worker timeout in 4 rounds (last %lld ms)",
          (long long)measured);
}

/* ---- output formats ----------------------------------------------------------------------- */

/* The Python client's `submit ARGS --wait`, its result parsed (NULL when it
 * failed); its output and errors in NAME.json and NAME.err. */
static json_value *python_result(env *e, const char *args, const char *name)
{
    int rc = fleet_sh("/usr/bin/python3 %s/proto/python/llmq_client.py --broker %s submit %s"
                      " --wait > %s/%s.json 2> %s/%s.err",
                      e->src, e->h.clients, args, e->h.dir, name, e->h.dir, name);
    char path[400], *text = NULL;
    size_t len;
    llmq_err err;
    json_value *v = NULL;
    snprintf(path, sizeof path, "%s/%s.json", e->h.dir, name);
    if (rc == 0 && file_read_all(path, &text, &len, &err) == 0)
        json_parse(text, len, &v, &err);
    free(text);
    return v;
}

static char *schema_text(const env *e, const char *name)
{
    char path[512], *text;
    size_t len;
    llmq_err err;
    snprintf(path, sizeof path, "%s/schemas/%s", e->data, name);
    return file_read_all(path, &text, &len, &err) == 0 ? text : strdup("{}");
}

/* What a point (tests/data/schemas/03-point.json) or a list of colors
 * (02-colors.json) must be, as far as the client sees it. */
static bool is_point(const json_value *v)
{
    const json_value *x = json_get(v, "x"), *y = json_get(v, "y"), *l = json_get(v, "label");
    return v && v->type == JSON_OBJECT && v->obj.n == 3 && x && x->type == JSON_NUMBER && y &&
           y->type == JSON_NUMBER && l && (l->type == JSON_NULL || l->type == JSON_STRING);
}

static bool is_colors(const json_value *v)
{
    if (!v || v->type != JSON_ARRAY || v->arr.n < 1 || v->arr.n > 5)
        return false;
    for (size_t i = 0; i < v->arr.n; i++)
        if (v->arr.items[i].type != JSON_STRING)
            return false;
    return true;
}

static bool parses_as(const char *text, bool (*is)(const json_value *))
{
    json_value *v = NULL;
    llmq_err err;
    bool ok = text && json_parse(text, strlen(text), &v, &err) == 0 && is(v);
    json_free(v);
    return ok;
}

static void test_formats(env *e)
{
    enum { N = 6 };
    fleet_worker w;
    const char *flags[] = {"--slots", "8", NULL};
    fleet_start(&e->h, &w, "w-fmt", flags);
    char *point = schema_text(e, "03-point.json"), *colors = schema_text(e, "02-colors.json");
    llmq_job jobs[N];
    for (int i = 0; i < N; i++) {
        llmq_job_init(&jobs[i]);
        jobs[i].prompt = "Once upon a time";
        jobs[i].max_tokens = 460; /* the longest point or list fits */
        jobs[i].temperature = 1.0f;
        jobs[i].seed = (uint64_t)i + 1;
    }
    jobs[0].json_schema = jobs[2].json_schema = point;
    jobs[1].json_schema = colors;
    jobs[3].json_object = true;
    jobs[3].max_tokens = 8;
    jobs[4].max_tokens = 8; /* free text */
    jobs[5].json_schema = "{\"type\": \"integer\", \"minimum\": 3}";
    uint64_t ids[N] = {0};
    llmq_state st[N] = {0};
    char *texts[N] = {0};
    llmq_error err;
    int rc = llmq_submit(e->c, "formats", NULL, jobs, N, ids, NULL, &err);
    size_t final = rc == 0 ? fleet_wait(e->c, ids, N, 60000, st, texts) : 0;
    CHECK(final == N && st[0] == LLMQ_STATE_DONE && st[1] == LLMQ_STATE_DONE &&
              st[2] == LLMQ_STATE_DONE && st[3] == LLMQ_STATE_DONE && st[4] == LLMQ_STATE_DONE,
          "a batch mixing two schemas, json_object and free text completes (%zu final)", final);
    CHECK(parses_as(texts[0], is_point) && parses_as(texts[2], is_point) &&
              parses_as(texts[1], is_colors) &&
              fleet_sqlf(&e->h,
                         "SELECT count(*) FROM results WHERE finish_reason = 'stop' AND"
                         " job_id IN (%llu, %llu, %llu)",
                         (unsigned long long)ids[0], (unsigned long long)ids[1],
                         (unsigned long long)ids[2]) == 3,
          "each schema job's text is a whole document of its own schema: '%s', '%s'",
          texts[0] ? texts[0] : "?", texts[1] ? texts[1] : "?");
    CHECK(texts[3] && texts[3][0] == '{', "a json_object job's text begins an object: '%s'",
          texts[3] ? texts[3] : "?");
    CHECK(st[5] == LLMQ_STATE_FAILED &&
              failed_at_once(e, ids[5], "json_schema: %minimum% is not supported"),
          "a schema llmq cannot honour fails at once, naming the field and the keyword");
    char args[600];
    snprintf(args, sizeof args,
             "--prompt 'Once upon a time' --max-tokens 460 --temperature 1 --seed 3"
             " --json-schema %s/schemas/02-colors.json",
             e->data);
    json_value *v = python_result(e, args, "py-fmt");
    const json_value *t = v ? json_get(v, "text") : NULL;
    CHECK(t && t->type == JSON_STRING && parses_as(t->str.s, is_colors),
          "the Python client's --json-schema FILE gets a document of that schema: %s",
          t && t->type == JSON_STRING ? t->str.s : "?");
    json_free(v);
    for (int i = 0; i < N; i++)
        free(texts[i]);
    free(point);
    free(colors);
    fleet_stop(&w, 10000);
}

/* ---- the Python client ------------------------------------------------------------------ */

static void test_python(env *e)
{
    fleet_worker w;
    const char *flags[] = {"--slots", "4", NULL};
    fleet_start(&e->h, &w, "w-py", flags);
    char *prompt[1] = {"Once upon a time"}, *ref[1] = {NULL};
    int rr = fleet_reference(&e->h, prompt, 1, 16, ref);
    json_value *v = python_result(e, "--prompt 'Once upon a time' --max-tokens 16", "py");
    const json_value *t = v ? json_get(v, "text") : NULL, *s = v ? json_get(v, "state") : NULL,
                     *who = v ? json_get(v, "worker") : NULL;
    CHECK(s && s->type == JSON_STRING && strcmp(s->str.s, "done") == 0 && who &&
              who->type == JSON_STRING && strcmp(who->str.s, "w-py") == 0,
          "the Python client submits and receives a result from a real worker");
    CHECK(rr == 0 && t && t->type == JSON_STRING && strcmp(t->str.s, ref[0]) == 0,
          "its text is llmq-run's: '%s'", t && t->type == JSON_STRING ? t->str.s : "?");
    json_free(v);
    free(ref[0]);
    fleet_stop(&w, 10000);
}

/* ---- against a scripted broker ----------------------------------------------------------- */

/* A ROUTER that plays the broker: what a worker does with replies a real
 * broker sends only in rare states (refusals) is driven here. */
typedef struct script {
    void *sock;
    zmq_msg_t peer; /* the worker's routing id, once it spoke */
    char endpoint[300];
} script;

static void script_open(env *e, script *sb)
{
    snprintf(sb->endpoint, sizeof sb->endpoint, "ipc://%s/scripted", e->h.dir);
    sb->sock = zmq_socket(e->h.zctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(sb->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_msg_init(&sb->peer);
    if (zmq_bind(sb->sock, sb->endpoint) != 0) {
        fprintf(stderr, "bind %s: %s\n", sb->endpoint, zmq_strerror(errno));
        exit(99);
    }
}

static void script_close(script *sb)
{
    zmq_msg_close(&sb->peer);
    zmq_close(sb->sock);
}

/* The next message of type t from the worker within timeout_ms (others are
 * dropped): 0, or -1. */
static int script_recv(script *sb, wire_type t, int timeout_ms, wire_msg *m)
{
    for (int64_t end = clock_mono_ms() + timeout_ms; clock_mono_ms() < end;) {
        zmq_pollitem_t it = {sb->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        zmq_msg_recv(&id, sb->sock, 0);
        zmq_msg_recv(&body, sb->sock, 0);
        zmq_msg_close(&sb->peer);
        zmq_msg_init(&sb->peer);
        zmq_msg_move(&sb->peer, &id);
        wire_error we;
        int rc = wire_decode(zmq_msg_data(&body), zmq_msg_size(&body), WIRE_DIR_WORKER_TO_BROKER, m,
                             &we);
        zmq_msg_close(&id);
        zmq_msg_close(&body);
        if (rc == 0 && m->type == t)
            return 0;
        if (rc == 0)
            wire_msg_free(m);
    }
    return -1;
}

static void script_send(script *sb, const wire_msg *m)
{
    char *body;
    size_t len;
    wire_error we;
    if (wire_encode(m, &body, &len, &we) != 0) {
        fprintf(stderr, "script_send: %s\n", we.err.msg);
        return;
    }
    zmq_msg_t id;
    zmq_msg_init(&id);
    zmq_msg_copy(&id, &sb->peer);
    zmq_msg_send(&id, sb->sock, ZMQ_SNDMORE);
    zmq_send(sb->sock, body, len, 0);
    free(body);
}

static void script_refuse(script *sb, wire_code code, const char *field, const char *message)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_ERROR);
    m.error = (wire_error_msg){.code = code, .field = field, .message = message};
    script_send(sb, &m);
}

/* A refused hello is said again later, later each time; a welcome then
 * opens the session. */
static void test_hello_refused(script *sb, fleet_worker *w)
{
    wire_msg m;
    int64_t at[3] = {0};
    int got = 0;
    for (; got < 3 && script_recv(sb, WIRE_T_HELLO, 30000, &m) == 0; got++) {
        at[got] = clock_mono_ms();
        wire_msg_free(&m);
        if (got < 2)
            script_refuse(sb, WIRE_E_WORKER_IN_USE, "worker",
                          "'w-scripted' is in use by live session 1 (host h, pid 1)");
    }
    CHECK(got == 3 && at[1] - at[0] >= 900 && at[2] - at[1] >= 1900,
          "a refused hello is said again after 1 s, then after 2 s (%lld, %lld ms)",
          (long long)(at[1] - at[0]), (long long)(at[2] - at[1]));
    CHECK(fleet_log_has(w, "refused this worker's hello (worker_in_use)") &&
              fleet_log_has(w, "in use by live session 1 (host h, pid 1)") &&
              fleet_log_has(w, "saying hello again in 2000 ms"),
          "each refusal is logged with the broker's reason and the wait");
}

/* A result the broker refuses: the worker stops, failing. */
static void test_result_refused(script *sb, fleet_worker *w)
{
    wire_msg m;
    wire_msg_init(&m, WIRE_T_WELCOME);
    m.welcome = (wire_welcome){.heartbeat_ms = 1000, .dead_after_ms = 60000};
    script_send(sb, &m);
    int credited = script_recv(sb, WIRE_T_CREDIT, 30000, &m);
    if (credited == 0)
        wire_msg_free(&m);
    wire_msg_init(&m, WIRE_T_JOB);
    m.job = (wire_job){.id = 1, .attempt = 1, .prompt = "Once upon a time"};
    m.job.params = job_params_default();
    m.job.params.max_tokens = 4;
    script_send(sb, &m);
    int answered = script_recv(sb, WIRE_T_JOB_RESULT, 30000, &m);
    if (answered == 0)
        wire_msg_free(&m);
    CHECK(credited == 0 && answered == 0, "after welcome the worker takes a job and sends its"
                                          " result");
    script_refuse(sb, WIRE_E_BAD_RESULT, "gen_tokens",
                  "gen_tokens: job 1 attempt 1: 9 generated, the job allows 4 (max_tokens)");
    int bye = script_recv(sb, WIRE_T_BYE, 30000, &m);
    int st = fleet_reap(w, 30000);
    CHECK(bye == 0 && exited(st, 1) && fleet_log_has(w, "the broker refused a result of this"),
          "a result refused as bad_result: the worker logs it, says bye and exits 1");
}

static void test_scripted_broker(env *e)
{
    script sb;
    script_open(e, &sb);
    fleet_worker w;
    const char *flags[] = {"--broker", sb.endpoint, "--slots", "1", NULL};
    fleet_start(&e->h, &w, "w-scripted", flags);
    test_hello_refused(&sb, &w);
    test_result_refused(&sb, &w);
    if (w.pid > 0)
        fleet_stop(&w, 10000);
    script_close(&sb);
}

int main(void)
{
    env e;
    h_init(&e.h, "llmq-worker", 150);
    e.build = getenv("LLMQ_BUILDDIR");
    e.src = getenv("LLMQ_SRCDIR");
    e.data = getenv("LLMQ_TEST_DATA");
    if (!e.src || !e.data)
        return 77;
    test_cli(&e);
    test_scripted_broker(&e);
    h_start(&e.h, BROKER_FLAGS);
    e.c = fleet_client(&e.h, 10000);
    test_bad_jobs(&e);
    test_no_room(&e);
    fleet_worker w;
    /* A grace period no machine runs 300 paced tokens past. */
    const char *flags[] = {"--slots", "1", "--grace-ms", "120000", "-v", NULL};
    fleet_start_paced(&e.h, &w, "w-slot", flags, PACE_MS);
    test_cancel(&e, &w);
    test_sigterm_finishes(&e, &w);
    test_sigterm_returns(&e);
    test_long_step(&e);
    test_python(&e);
    test_formats(&e);
    llmq_close(e.c);
    int st = h_stop(&e.h, 15000);
    CHECK(exited(st, 0), "the broker stops cleanly");
    h_done(&e.h, check_state.failed > 0);
    return check_done();
}
