/* The engine's path for a backend that samples on the device
 * (backend_ops.sample and log_norm, kernels/backend.h), on stories260K and
 * the CPU backend given those two ops written here after the contract --
 * the sampler's chain without top-k on the row in place, from the pairs
 * and u the engine sends; the normalizer -- so that the engine's half of
 * the device path runs without a GPU (tests/gpu/gpu-parity.c checks the
 * CUDA ops themselves against engine/sampler.c).
 *
 * Pins:
 *  - a batch of sequences at temperature alone, top-p, min-p, their mix,
 *    penalties that lower and that raise logits, greedy after penalties,
 *    and top-k (the candidates' path; with raising penalties, the device's
 *    own selection) beside them, some asking for logprobs and
 *    top_logprobs, two under a JSON grammar (top-k sampled and greedy: the
 *    mask goes to the device): no logit row comes back to the host
 *    (engine_stats.logit_rows_copied 0);
 *  - each sequence generates the tokens the host sampler picks when every
 *    row comes back (an observer), and its logprobs and alternatives are
 *    the host's: so the penalty pairs, the uniform of (seed, step), min-p's
 *    logf and the chosen token's raw logit travel as the host path uses
 *    them;
 *  - a row the device leaves to the host (token -1) is sampled there from
 *    its logits, to the same token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/topk.h"
#include "engine/engine.h"
#include "engine/jsonschema.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/tokenizer.h"

enum { N_SEQ = 12, GEN = 24, TOP = 4 };

/* The CPU backend's ops with the two added (the CPU backend finds its state
 * from the backend pointer, so its ops table is swapped, not wrapped), and
 * a second table whose sample leaves the rows with u < 0.3 to the host. */
typedef struct device_like {
    backend_ops ops, refusing;
    const backend_ops *cpu_ops;
    backend *cpu;
} device_like;

/* ---- the ops, after backend.h ---- */

/* Top-k, then top-p over what it kept, by a full sort (over the whole row
 * the sampler buckets; the mass is the same up to rounding): keep[i] false
 * for the tokens past either. */
static void truncate_sorted(const float *row, int32_t n, float max, const be_sample_row *r,
                            topk_entry *order, bool *keep)
{
    for (int32_t i = 0; i < n; i++)
        order[i] = (topk_entry){row[i], i};
    qsort(order, (size_t)n, sizeof *order, topk_cmp);
    int32_t k = r->top_k > 0 && r->top_k < n ? r->top_k : n;
    if (r->top_p < 1.0f) {
        double sum = 0.0, cum = 0.0;
        for (int32_t j = 0; j < k; j++)
            sum += expf(order[j].value - max);
        int32_t j = 0;
        while (j < k && (cum += expf(order[j].value - max)) < (double)r->top_p * sum)
            j++;
        k = j < k ? j + 1 : k;
    }
    for (int32_t j = k; j < n; j++)
        keep[order[j].id] = false;
}

/* The chain of one row (penalties already in it): the first survivor in id
 * order whose cumulative weight exceeds u * total. */
static int32_t draw_one(const float *row, int32_t n, const be_sample_row *r, topk_entry *order,
                        bool *keep)
{
    float max = -INFINITY;
    int32_t first = 0;
    for (int32_t i = 0; i < n; i++)
        if (row[i] > max) {
            max = row[i];
            first = i;
        }
    if (!(r->temperature > 0.0f) || !isfinite(max))
        return first;
    for (int32_t i = 0; i < n; i++)
        keep[i] = row[i] >= max + r->log_min_p;
    truncate_sorted(row, n, max, r, order, keep);
    const float t = r->temperature, x_max = max / t;
    double total = 0.0, cum = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += keep[i] ? expf(row[i] / t - x_max) : 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (keep[i] && (cum += expf(row[i] / t - x_max)) > r->u * total)
            return i;
    return first;
}

/* The row as the sampler sees it: the mask's refused tokens at -inf. */
static void masked_copy(const float *row, int32_t n, const uint64_t *mask, float *out)
{
    for (int32_t i = 0; i < n; i++)
        out[i] = mask && !((mask[i / 64] >> (i % 64)) & 1) ? -INFINITY : row[i];
}

static void sample_rows(float *x, int32_t n, const be_sample_row *rows, int32_t n_rows,
                        const int32_t *pen, float *save, const uint64_t *masks, be_sample_out *out,
                        bool refuse)
{
    topk_entry *order = malloc((size_t)n * sizeof *order);
    bool *keep = malloc((size_t)n);
    float *seen = malloc((size_t)n * sizeof *seen);
    const int32_t words = (n + 63) / 64;
    for (int32_t i = 0; order && keep && seen && i < n_rows; i++) {
        const be_sample_row *r = &rows[i];
        float *row = x + (size_t)r->row * n;
        for (int32_t j = r->pen_first; j < r->pen_first + r->n_pen; j++) {
            float l = save[j] = row[pen[2 * j]];
            l = l <= 0.0f ? l * r->repeat_penalty : l / r->repeat_penalty;
            row[pen[2 * j]] = l -
                              ((float)pen[2 * j + 1] * r->frequency_penalty + r->presence_penalty);
        }
        masked_copy(row, n, r->mask >= 0 ? masks + (size_t)r->mask * words : NULL, seen);
        const int32_t tok = refuse && r->u < 0.3 ? -1 : draw_one(seen, n, r, order, keep);
        for (int32_t j = r->pen_first; j < r->pen_first + r->n_pen; j++)
            row[pen[2 * j]] = save[j];
        out[i] = (be_sample_out){tok, tok >= 0 ? row[tok] : NAN};
    }
    free(order);
    free(keep);
    free(seen);
}

static void dl_sample(backend *be, float *x, int32_t n, const be_sample_row *rows, int32_t n_rows,
                      const int32_t *pen, float *save, const uint64_t *masks, be_sample_out *out)
{
    (void)be;
    sample_rows(x, n, rows, n_rows, pen, save, masks, out, false);
}

static void dl_sample_refusing(backend *be, float *x, int32_t n, const be_sample_row *rows,
                               int32_t n_rows, const int32_t *pen, float *save,
                               const uint64_t *masks, be_sample_out *out)
{
    (void)be;
    sample_rows(x, n, rows, n_rows, pen, save, masks, out, true);
}

static void dl_log_norm(backend *be, const float *x, int32_t rows, int32_t n, double *out)
{
    (void)be;
    for (int32_t r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * n;
        float max = -INFINITY;
        for (int32_t i = 0; i < n; i++)
            max = row[i] > max ? row[i] : max;
        double sum = 0.0;
        for (int32_t i = 0; max > -INFINITY && i < n; i++)
            sum += isnan(row[i]) ? 0.0 : exp((double)row[i] - max);
        out[2 * r] = max;
        out[2 * r + 1] = max > -INFINITY ? max + log(sum) : INFINITY;
    }
}

static device_like *device_like_new(void)
{
    device_like *dl = calloc(1, sizeof *dl);
    llmq_err err;
    if (!dl || backend_cpu_create(&dl->cpu, 2, &err) != 0) {
        printf("setup: no CPU backend\n");
        free(dl);
        return NULL;
    }
    dl->cpu_ops = dl->cpu->ops;
    dl->ops = *dl->cpu->ops;
    dl->ops.sample = dl_sample;
    dl->ops.log_norm = dl_log_norm;
    dl->refusing = dl->ops;
    dl->refusing.sample = dl_sample_refusing;
    dl->cpu->ops = &dl->ops;
    return dl;
}

/* ---- runs ---- */

typedef struct run {
    int32_t tokens[N_SEQ][GEN];
    engine_logprob lp[N_SEQ][GEN], top[N_SEQ][GEN * TOP];
    int32_t n_tokens[N_SEQ];
    engine_stats stats;
} run;

static void count_rows(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n)
{
    (void)id, (void)step, (void)logits, (void)n;
    (*(int *)ctx)++;
}

/* Sequence i's sampler: the settings the device path serves, and top-k;
 * 10 and 11 under g (sampled, greedy). */
static void settings(int i, const grammar *g, engine_request *req)
{
    sampler_params *p = &req->sampling;
    *p = sampler_default_params();
    p->seed = 77 + (uint64_t)i;
    p->temperature = 1.0f;
    switch (i) {
    case 1: p->top_p = 0.9f, p->temperature = 0.8f; break;
    case 2: p->min_p = 0.1f; break;
    case 3: p->top_p = 0.95f, p->min_p = 0.05f, p->repeat_penalty = 1.3f; break;
    case 4: /* raising logits: the candidates cannot serve top-k, the device's select does */
        p->repeat_penalty = 0.8f, p->presence_penalty = -0.5f, p->top_k = 30;
        break;
    case 5: p->temperature = 0.0f, p->repeat_penalty = 1.5f, p->frequency_penalty = 0.3f; break;
    case 6: p->top_k = 40; break;
    case 7: p->top_p = 0.5f, p->presence_penalty = 0.4f, p->repeat_last_n = -1; break;
    case 8: p->temperature = 0.0f; break;
    }
    req->logprobs = i % 3 == 0 || i >= 6;
    req->top_logprobs = req->logprobs && i % 2 == 0 ? TOP : 0;
    if (i >= 10) {
        req->constraint = g;
        req->ignore_eos = false;
        p->temperature = i == 10 ? 1.0f : 0.0f;
        p->top_k = i == 10 ? 20 : 0;
    }
}

static int run_batch(model *m, const tok_vocab *v, const grammar *g, bool observe, run *out)
{
    static const char *prompts[N_SEQ] = {"Once upon a time",
                                         "The little dog",
                                         "Lily and Ben went",
                                         "One day, a big bear",
                                         "Tom had a red ball",
                                         "The sun was hot",
                                         "Mom said",
                                         "There was a tiny bird",
                                         "The cat",
                                         "A boy named Sam",
                                         "{\"name\": ",
                                         "The list:"};
    engine_config cfg = engine_default_config();
    cfg.max_seqs = N_SEQ;
    cfg.n_ctx = 128;
    engine *e;
    llmq_err err;
    if (engine_create(&e, m, v, &cfg, &err) != 0) {
        printf("# engine_create: %s\n", err.msg);
        return -1;
    }
    int observed = 0;
    if (observe)
        engine_set_logits_observer(e, count_rows, &observed);
    int rc = 0;
    for (int i = 0; rc == 0 && i < N_SEQ; i++) {
        int32_t *ids;
        size_t n;
        rc = tok_encode(v, prompts[i], strlen(prompts[i]), true, true, &ids, &n, &err);
        if (rc != 0)
            break;
        engine_request req = {.id = (uint64_t)i,
                              .prompt = ids,
                              .n_prompt = (int32_t)n,
                              .max_tokens = GEN,
                              .ignore_eos = true};
        settings(i, g, &req);
        rc = engine_add(e, &req, &err);
        free(ids);
    }
    memset(out, 0, sizeof *out);
    while (rc == 0 && engine_has_work(e)) {
        const engine_event *ev;
        int32_t n;
        rc = engine_step(e, &ev, &n, &err);
        for (int32_t k = 0; rc == 0 && k < n; k++) {
            const engine_event *f = &ev[k];
            if (f->finish == ENGINE_RUNNING)
                continue;
            out->n_tokens[f->id] = f->n_tokens;
            memcpy(out->tokens[f->id], f->tokens, (size_t)f->n_tokens * sizeof(int32_t));
            if (f->logprobs)
                memcpy(out->lp[f->id], f->logprobs, (size_t)f->n_tokens * sizeof *f->logprobs);
            if (f->top_logprobs && f->n_top)
                memcpy(out->top[f->id], f->top_logprobs,
                       (size_t)f->n_tokens * f->n_top * sizeof *f->top_logprobs);
        }
    }
    if (rc != 0)
        printf("# run: %s\n", err.msg);
    out->stats = engine_get_stats(e);
    engine_free(e);
    return rc;
}

/* Sequences whose tokens and logprobs are the same in both runs. */
static int same_outputs(const run *a, const run *b)
{
    int same = 0;
    for (int i = 0; i < N_SEQ; i++)
        same += a->n_tokens[i] > 0 && a->n_tokens[i] == b->n_tokens[i] &&
                memcmp(a->tokens[i], b->tokens[i], sizeof a->tokens[i]) == 0 &&
                memcmp(a->lp[i], b->lp[i], sizeof a->lp[i]) == 0 &&
                memcmp(a->top[i], b->top[i], sizeof a->top[i]) == 0;
    return same;
}

int main(void)
{
    device_like *dl = device_like_new();
    char path[512];
    llmq_err err;
    model *m = NULL;
    tok_vocab *v = NULL;
    grammar *g = NULL;
    if (!dl ||
        model_load(&m, check_data_path(path, sizeof path, "models/stories260K.gguf"), dl->cpu,
                   &err) != 0 ||
        tok_load(&v, model_gguf(m), &err) != 0 || jsonschema_any_object(&g, &err) != 0) {
        printf("setup: %s\n", dl ? err.msg : "out of memory");
        return 1;
    }
    static run device, host, refused;
    int rc = run_batch(m, v, g, false, &device) | run_batch(m, v, g, true, &host);
    CHECK(rc == 0 && device.stats.logit_rows_copied == 0,
          "temperature, top-p, min-p, penalties, greedy, top-k and grammar rows with logprobs: no "
          "logit row copied (%llu)",
          (unsigned long long)device.stats.logit_rows_copied);
    CHECK(rc == 0 && device.n_tokens[10] > 0 && device.n_tokens[11] > 0,
          "the constrained sequences generated (%d and %d tokens)", device.n_tokens[10],
          device.n_tokens[11]);
    CHECK(rc == 0 && host.stats.logit_rows_copied >= (uint64_t)(N_SEQ - 2) * GEN,
          "with an observer every row comes back (%llu)",
          (unsigned long long)host.stats.logit_rows_copied);
    int same = rc == 0 ? same_outputs(&device, &host) : 0;
    CHECK(same == N_SEQ,
          "%d of %d sequences: the device path's tokens, logprobs and alternatives are the host "
          "sampler's",
          same, N_SEQ);
    dl->cpu->ops = &dl->refusing;
    rc = run_batch(m, v, g, false, &refused);
    same = rc == 0 ? same_outputs(&refused, &host) : 0;
    CHECK(rc == 0 && same == N_SEQ && refused.stats.logit_rows_copied > 0,
          "a row the device leaves to the host is sampled there the same (%d of %d, %llu rows "
          "copied)",
          same, N_SEQ, (unsigned long long)refused.stats.logit_rows_copied);
    grammar_free(g);
    tok_free(v);
    model_free(m);
    dl->cpu->ops = dl->cpu_ops;
    backend_destroy(dl->cpu);
    free(dl);
    return check_done();
}
