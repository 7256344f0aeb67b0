/* bench-sampling: what each sampler setting costs a decode step, through the
 * engine on the default backend (the GPU when there is one).
 *
 * For each setting, --seqs sequences of --prompt random tokens (every prompt
 * first, as llmq-run --bench) each generate up to --gen tokens; a "full
 * step" is a decode step (no prompt rows) of at least half the sequences:
 * all of them until one finishes.  Printed per setting (medians over the
 * full steps): the rows of the step, its time and its parts (issuing the
 * forward pass; waiting for it and bringing back what sampling reads; the
 * host's sampling and bookkeeping, engine_stats), and the logit rows copied
 * whole to the host per step.  The settings: greedy (the argmax), top-k 40
 * (candidates), temperature 1 (OpenAI's default), top-p 0.95, min-p 0.05,
 * the penalties, logprobs with 5 alternatives -- each drawn on the device
 * where the backend can -- temperature 1 with every row copied (an
 * observer: the path before sampling moved to the device), and grammar-
 * constrained jobs: a JSON schema (nested object, array, enum, number,
 * boolean, null) and json_object mode, whose masks the host computes and
 * the device applies.  A constrained sequence ends when its document is
 * complete: in json_object mode a random model closes its object within a
 * few tokens ("{}" is a whole document), so that batch thins at once, and
 * its rows per step say how far; the schema's seven required properties
 * keep its sequences going.
 *
 * usage: bench-sampling MODEL.gguf [--seqs N] [--prompt N] [--gen N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "engine/jsonschema.h"
#include "kernels/select.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define MAX_STEPS 1024

static const char k_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"math\", \"poetry\", \"music\"]}},"
    "\"address\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"},"
    "  \"zip\": {\"type\": \"string\"}}, \"required\": [\"city\", \"zip\"],"
    "  \"additionalProperties\": false},"
    "\"active\": {\"type\": \"boolean\"}, \"score\": {\"type\": \"number\"},"
    "\"nickname\": {\"type\": [\"string\", \"null\"]}},"
    "\"required\": [\"name\", \"age\", \"tags\", \"address\", \"active\", \"score\", \"nickname\"],"
    "\"additionalProperties\": false}";

typedef enum constraint_kind { NONE, SCHEMA, ANY_OBJECT } constraint_kind;

typedef struct setting {
    const char *name;
    sampler_params p;
    bool logprobs, observe;
    constraint_kind constraint;
} setting;

typedef struct opts {
    const char *model;
    int32_t seqs, prompt, gen;
} opts;

/* Per full step: decode rows, wall, issue, wait+copy, host (ms), rows copied. */
enum { N_COSTS = 6 };
typedef struct step_costs {
    double v[N_COSTS][MAX_STEPS];
    int32_t n;
} step_costs;

static void observe(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n)
{
    (void)ctx, (void)id, (void)step, (void)logits, (void)n;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int32_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void random_prompt(int32_t *ids, int32_t n, int32_t n_vocab, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (int32_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)n_vocab);
    }
}

static int add_all(engine *e, const opts *o, const setting *s, const grammar *g, int32_t n_vocab,
                   llmq_err *err)
{
    int32_t *ids = malloc((size_t)o->prompt * sizeof *ids);
    int rc = ids ? 0 : llmq_errf(err, "out of memory");
    for (int32_t i = 0; rc == 0 && i < o->seqs; i++) {
        random_prompt(ids, o->prompt, n_vocab, (uint32_t)i + 1);
        engine_request req = {.id = (uint64_t)i,
                              .prompt = ids,
                              .n_prompt = o->prompt,
                              .sampling = s->p,
                              .max_tokens = o->gen,
                              .ignore_eos = g == NULL,
                              .logprobs = s->logprobs,
                              .top_logprobs = s->logprobs ? 5 : 0,
                              .constraint = g};
        req.sampling.seed = (uint64_t)i + 1;
        rc = engine_add(e, &req, err);
    }
    free(ids);
    return rc;
}

/* Runs one setting; the costs of its full steps into c. */
static int run_setting(model *m, const tok_vocab *v, const opts *o, const setting *s,
                       const grammar *g, step_costs *c, llmq_err *err)
{
    engine_config cfg = engine_default_config();
    cfg.max_seqs = o->seqs;
    cfg.max_batch_tokens = o->seqs > 512 ? o->seqs : 512;
    cfg.n_ctx = o->prompt + o->gen + 1;
    cfg.prefill_first = true;
    cfg.prefix_cache = false;
    engine *e;
    if (engine_create(&e, m, v, &cfg, err) != 0)
        return -1;
    if (s->observe)
        engine_set_logits_observer(e, observe, NULL);
    int rc = add_all(e, o, s, g, model_get_config(m)->n_vocab, err);
    c->n = 0;
    engine_stats before = engine_get_stats(e);
    while (rc == 0 && engine_has_work(e)) {
        const engine_event *ev;
        int32_t n_ev;
        const double t0 = clock_mono_ms_f();
        rc = engine_step(e, &ev, &n_ev, err);
        const double wall = clock_mono_ms_f() - t0;
        const engine_stats now = engine_get_stats(e);
        const uint64_t rows = now.decode_rows - before.decode_rows;
        const bool full = 2 * rows >= (uint64_t)o->seqs && now.prefill_rows == before.prefill_rows;
        if (rc == 0 && full && c->n < MAX_STEPS) {
            const double row[N_COSTS] = {
                (double)rows,
                wall,
                now.issue_ms - before.issue_ms,
                now.read_ms - before.read_ms,
                now.host_ms - before.host_ms,
                (double)(now.logit_rows_copied - before.logit_rows_copied)};
            for (int k = 0; k < N_COSTS; k++)
                c->v[k][c->n] = row[k];
            c->n++;
        }
        before = now;
    }
    engine_free(e);
    return rc;
}

static sampler_params at(float t)
{
    sampler_params p = sampler_default_params();
    p.temperature = t;
    return p;
}

static int bench(model *m, const tok_vocab *v, const opts *o, const grammar *schema,
                 const grammar *object)
{
    setting s[] = {
        {"greedy (argmax)", at(0.0f), false, false, NONE},
        {"top_k 40, t 0.8", at(0.8f), false, false, NONE},
        {"temperature 1", at(1.0f), false, false, NONE},
        {"top_p 0.95", at(1.0f), false, false, NONE},
        {"min_p 0.05", at(1.0f), false, false, NONE},
        {"t 0.8, top_p 0.95, min_p 0.05, repeat 1.1, presence 0.2", at(0.8f), false, false, NONE},
        {"temperature 1, logprobs + 5", at(1.0f), true, false, NONE},
        {"temperature 1, every row copied", at(1.0f), false, true, NONE},
        {"json_schema, temperature 1", at(1.0f), false, false, SCHEMA},
        {"json_object, temperature 1", at(1.0f), false, false, ANY_OBJECT},
    };
    s[1].p.top_k = 40;
    s[3].p.top_p = 0.95f;
    s[4].p.min_p = 0.05f;
    s[5].p.top_p = 0.95f;
    s[5].p.min_p = 0.05f;
    s[5].p.repeat_penalty = 1.1f;
    s[5].p.presence_penalty = 0.2f;
    printf(
        "| setting (%d sequences, %d-token prompts) | full steps | rows/step | ms/step | issue | "
        "wait+copy | host | rows copied/step |\n| --- | --- | --- | --- | --- | --- | --- | --- "
        "|\n",
        o->seqs, o->prompt);
    static step_costs c;
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) {
        llmq_err err;
        const grammar *g = s[i].constraint == SCHEMA       ? schema
                           : s[i].constraint == ANY_OBJECT ? object
                                                           : NULL;
        if (run_setting(m, v, o, &s[i], g, &c, &err) != 0) {
            fprintf(stderr, "bench-sampling: %s: %s\n", s[i].name, err.msg);
            return 1;
        }
        double med[N_COSTS];
        for (int k = 0; k < N_COSTS; k++)
            med[k] = median(c.v[k], c.n);
        printf("| %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.0f |\n", s[i].name, c.n, med[0],
               med[1], med[2], med[3], med[4], med[5]);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.seqs = 64, .prompt = 64, .gen = 64};
    const cli_flag flags[] = {
        {"seqs", 0, "N", "sequences decoding together (default 64)", CLI_INT32(&o.seqs, 1, 1024)},
        {"prompt", 0, "N", "random prompt tokens per sequence (default 64)",
         CLI_INT32(&o.prompt, 1, 4096)},
        {"gen", 0, "N", "tokens generated per sequence at most (default 64)",
         CLI_INT32(&o.gen, 2, MAX_STEPS)},
    };
    const cli_spec spec = {.program = "bench-sampling",
                           .usage = "usage: bench-sampling MODEL.gguf [--seqs N] [--prompt N] "
                                    "[--gen N]\nthe cost of each sampler setting per decode step\n",
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags),
                           .operand = &o.model,
                           .operand_name = "MODEL.gguf"};
    const int status = cli_read(&spec, argc, argv);
    if (status != CLI_RUN)
        return status;
    llmq_err err;
    backend *be = NULL;
    model *m = NULL;
    tok_vocab *v = NULL;
    grammar *schema = NULL, *object = NULL;
    char fallback[256];
    int gpu;
    const backend_request req = {.cpu_only = false, .gpu = -1, .threads = 4};
    int rc = 1;
    if (backend_select(&be, &req, &gpu, fallback, sizeof fallback, &err) != 0 ||
        model_load(&m, o.model, be, &err) != 0 || tok_load(&v, model_gguf(m), &err) != 0 ||
        jsonschema_compile(&schema, k_schema, strlen(k_schema), &err) != 0 ||
        jsonschema_any_object(&object, &err) != 0) {
        fprintf(stderr, "bench-sampling: %s\n", err.msg);
        goto out;
    }
    printf("# bench-sampling: %s on %s%s%s\n\n", o.model, be->name, fallback[0] ? ": " : "",
           fallback);
    rc = bench(m, v, &o, schema, object);
out:
    grammar_free(schema);
    grammar_free(object);
    tok_free(v);
    model_free(m);
    backend_destroy(be);
    return rc;
}
