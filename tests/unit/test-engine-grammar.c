/* Grammar-constrained sequences in the engine, on stories260K (real
 * weights, CPU backend).
 *
 * Pins:
 *  - in one batch that mixes two JSON schemas, json_object mode and free
 *    sequences, sampled and greedy, every constrained output is a document
 *    of its grammar: complete when it finishes with "stop", a prefix when
 *    max_tokens cut it; schemas whose documents fit max_tokens always
 *    complete, and the sequence stops right there (no token after it);
 *  - each sequence generates exactly what it generates alone: masks do not
 *    leak between rows, and a constrained row is as deterministic as any;
 *  - an output that ends with end-of-generation is a complete document
 *    (the model rarely picks it here; that the masks allow it exactly at
 *    complete documents is pinned by test-grammar);
 *  - the streamed text adds up to the final text;
 *  - a constraint with ignore_eos is refused, naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/engine.h"
#include "engine/jsonschema.h"
#include "model_fixture.h"

#define OUT_MAX 4096
#define TOKENS_MAX 512

enum { FREE = -1, PERSON, COLORS, OBJECT, INTEGER, N_GRAMMARS };

static const char *const k_schemas[] = {
    [PERSON] = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", "
               "\"maxLength\": 10}, \"age\": {\"type\": \"integer\"}, \"ok\": {\"type\": "
               "\"boolean\"}}, \"required\": [\"name\", \"age\", \"ok\"], "
               "\"additionalProperties\": false}",
    [COLORS] = "{\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"green\", \"blue\"]}, "
               "\"minItems\": 1, \"maxItems\": 4}",
    [OBJECT] = NULL, /* json_object mode */
    [INTEGER] = "{\"type\": \"integer\"}",
};

typedef struct job {
    const char *prompt;
    int grammar; /* FREE or an index of k_schemas */
    float temp;
    int32_t max_tokens;
} job;

static const job k_jobs[] = {
    {"Once upon a time", PERSON, 1.0f, 300},
    {"The little dog", PERSON, 1.0f, 300},
    {"Tom had a red ball", PERSON, 0.0f, 300},
    {"Lily and Ben", COLORS, 1.0f, 300},
    {"Mom said", COLORS, 1.0f, 300},
    {"The sun was hot", COLORS, 0.0f, 300},
    {"One day", OBJECT, 1.0f, 60},
    {"There was a bird", OBJECT, 0.8f, 60},
    {"Once upon a time", FREE, 1.0f, 60},
    {"The little dog", FREE, 0.0f, 60},
    {"A big bear", INTEGER, 1.0f, 40},
    {"Sam counted", INTEGER, 1.0f, 40},
    {"Once upon a time", PERSON, 1.0f, 6},
    {"The cat", FREE, 1.0f, 40},
};
#define N_JOBS ((int)(sizeof k_jobs / sizeof *k_jobs))

typedef struct result {
    char text[OUT_MAX], streamed[OUT_MAX];
    size_t len, streamed_len;
    int32_t tokens[TOKENS_MAX];
    int32_t n_tokens;
    engine_finish finish;
    bool done;
} result;

typedef struct fixture {
    model_fixture model;
    grammar *grammars[N_GRAMMARS];
} fixture;

static void note(result *r, const engine_event *ev)
{
    if (r->streamed_len + ev->text_len <= OUT_MAX) {
        memcpy(r->streamed + r->streamed_len, ev->text, ev->text_len);
        r->streamed_len += ev->text_len;
    }
    if (ev->finish == ENGINE_RUNNING)
        return;
    r->done = true;
    r->finish = ev->finish;
    r->len = ev->full_text_len < OUT_MAX ? ev->full_text_len : OUT_MAX;
    memcpy(r->text, ev->full_text, r->len);
    r->n_tokens = ev->n_tokens < TOKENS_MAX ? ev->n_tokens : TOKENS_MAX;
    memcpy(r->tokens, ev->tokens, (size_t)r->n_tokens * sizeof *r->tokens);
}

static int add_job(const fixture *fx, engine *e, int i, bool ignore_eos, llmq_err *err)
{
    const job *j = &k_jobs[i];
    int32_t *ids;
    size_t n;
    if (tok_encode(fx->model.vocab, j->prompt, strlen(j->prompt), true, true, &ids, &n, err) != 0)
        return -1;
    engine_request req = {.id = (uint64_t)i,
                          .prompt = ids,
                          .n_prompt = (int32_t)n,
                          .sampling = sampler_default_params(),
                          .max_tokens = j->max_tokens,
                          .ignore_eos = ignore_eos,
                          .constraint = j->grammar == FREE ? NULL : fx->grammars[j->grammar]};
    req.sampling.temperature = j->temp;
    req.sampling.seed = 7000 + (uint64_t)i;
    const int rc = engine_add(e, &req, err);
    free(ids);
    return rc;
}

/* Runs jobs first..last (inclusive) in one engine of max_seqs slots. */
static int run(const fixture *fx, int first, int last, int32_t max_seqs, result *out)
{
    engine_config cfg = engine_default_config();
    cfg.max_seqs = max_seqs;
    cfg.n_ctx = 512;
    engine *e;
    llmq_err err;
    if (engine_create(&e, fx->model.m, fx->model.vocab, &cfg, &err) != 0) {
        printf("# engine_create: %s\n", err.msg);
        return -1;
    }
    int rc = 0;
    for (int i = first; rc == 0 && i <= last; i++)
        rc = add_job(fx, e, i, false, &err);
    while (rc == 0 && engine_has_work(e)) {
        const engine_event *ev;
        int32_t n;
        rc = engine_step(e, &ev, &n, &err);
        for (int32_t k = 0; rc == 0 && k < n; k++)
            note(&out[ev[k].id], &ev[k]);
    }
    if (rc != 0)
        printf("# run: %s\n", err.msg);
    engine_free(e);
    return rc;
}

enum { REFUSED, PREFIX, COMPLETE };

static int match(const grammar *g, const result *r)
{
    grammar_stack st;
    grammar_start(g, &st);
    if (!grammar_advance(g, &st, r->text, r->len))
        return REFUSED;
    return grammar_complete(g, &st) ? COMPLETE : PREFIX;
}

/* Whether the job's output is what its grammar and finish reason allow. */
static bool follows(const fixture *fx, int i, const result *r)
{
    const job *j = &k_jobs[i];
    if (j->grammar == FREE)
        return r->done;
    const int m = match(fx->grammars[j->grammar], r);
    const bool bounded = j->grammar != OBJECT && j->max_tokens > 100;
    if (r->finish == ENGINE_FINISH_STOP || r->finish == ENGINE_FINISH_EOG)
        return m == COMPLETE;
    return r->finish == ENGINE_FINISH_LENGTH && m == PREFIX && !bounded;
}

static void check_mixed_batch(const fixture *fx)
{
    static result batch[N_JOBS], alone[N_JOBS];
    memset(batch, 0, sizeof batch);
    memset(alone, 0, sizeof alone);
    CHECK(run(fx, 0, N_JOBS - 1, N_JOBS, batch) == 0,
          "%d sequences run in one batch: two schemas, "
          "json_object, an integer schema and free text, sampled and greedy",
          N_JOBS);
    for (int i = 0; i < N_JOBS; i++)
        run(fx, i, i, 1, alone);
    int followed = 0, same = 0, streamed = 0, stopped = 0, eog = 0;
    for (int i = 0; i < N_JOBS; i++) {
        const result *b = &batch[i], *a = &alone[i];
        followed += follows(fx, i, b);
        same += b->done && a->done && b->n_tokens == a->n_tokens &&
                memcmp(b->tokens, a->tokens, (size_t)b->n_tokens * sizeof *b->tokens) == 0;
        streamed += b->streamed_len == b->len && memcmp(b->streamed, b->text, b->len) == 0;
        if (k_jobs[i].grammar != FREE) {
            stopped += b->finish == ENGINE_FINISH_STOP;
            eog += b->finish == ENGINE_FINISH_EOG;
        }
        printf("# job %d (%s): %.*s\n", i, engine_finish_name(b->finish), (int)b->len, b->text);
    }
    CHECK(followed == N_JOBS,
          "every constrained output follows its grammar: complete when it "
          "stops, a prefix only when max_tokens cut it (%d of %d)",
          followed, N_JOBS);
    CHECK(stopped > 0,
          "constrained sequences stop where their document ends (%d stopped, %d "
          "ended with end-of-generation, at a complete document)",
          stopped, eog);
    CHECK(same == N_JOBS,
          "every sequence generates in the mixed batch exactly what it does "
          "alone (%d of %d)",
          same, N_JOBS);
    CHECK(streamed == N_JOBS, "streamed text adds up to the final text (%d of %d)", streamed,
          N_JOBS);
}

static void check_refusal(const fixture *fx)
{
    engine_config cfg = engine_default_config();
    cfg.n_ctx = 512;
    engine *e;
    llmq_err err;
    if (engine_create(&e, fx->model.m, fx->model.vocab, &cfg, &err) != 0)
        return;
    CHECK(add_job(fx, e, 0, true, &err) == -1 && strstr(err.msg, "job 0: ignore_eos") &&
              engine_n_live(e) == 0,
          "a constraint with ignore_eos is refused, naming the field (%s)", err.msg);
    CHECK(add_job(fx, e, 1, false, &err) == 0 && engine_n_live(e) == 1,
          "and the engine takes the next request");
    engine_free(e);
}

int main(void)
{
    fixture fx = {0};
    llmq_err err;
    if (model_fixture_load(&fx.model) != 0)
        return 1;
    int compiled = 0;
    for (int g = 0; g < N_GRAMMARS; g++)
        compiled += (k_schemas[g] ? jsonschema_compile(&fx.grammars[g], k_schemas[g],
                                                       strlen(k_schemas[g]), &err)
                                  : jsonschema_any_object(&fx.grammars[g], &err)) == 0;
    CHECK(compiled == N_GRAMMARS, "the test's grammars compile");
    if (compiled == N_GRAMMARS) {
        check_mixed_batch(&fx);
        check_refusal(&fx);
    }
    for (int g = 0; g < N_GRAMMARS; g++)
        grammar_free(fx.grammars[g]);
    model_fixture_free(&fx.model);
    return check_done();
}
