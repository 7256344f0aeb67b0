/* Parity of the CPU engine with llama.cpp (tests/data/reference, made by
 * llama.cpp on the CPU: c392e509 for the models of tests/data/models,
 * c2b1518 for the synthetic model of each architecture that make check
 * writes with llmq-mkmodel into tests/synth), and batch invariance.
 *
 * Pins:
 *  - teacher-forced logits: feeding the reference's own tokens, every step's
 *    top-5 logits match within the bound of the model's type, error =
 *    |ours - ref| / max(|ref|, 1): f32 and f16 weights: max 1e-3 resp. 1e-2.
 *    Quantized weights: llama.cpp quantizes activations to 8 bits in its own
 *    x86 paths, whose rounding we cannot reproduce exactly; its noise is
 *    what separates us (our own f32-activation path differs from llama.cpp
 *    by the same 2-3e-2 at worst), so the bound there is the median error
 *    <= 1e-2 (the reference README's figure) and the worst <= 4e-2.  Our
 *    top-1 equals llama.cpp's wherever its top-2 margin exceeds twice the
 *    worst bound;
 *  - free-running greedy generation (all prompts batched in one engine)
 *    with the f16 KV cache llama.cpp keeps: identical tokens to the
 *    reference until the first step whose top-2 margin is within the bound
 *    (on stories260K and the f32 synthetic models: all 32 tokens
 *    everywhere).  With the q8_0 cache (the default) the same run is
 *    reported, not bound: how many prompts keep llama.cpp's tokens, and
 *    where the others first leave them;
 *  - perplexity on story.txt with -c 128: with the f16 cache within 0.5% of
 *    llama.cpp's, with the q8_0 cache within 0.5% of the f16 cache's;
 *  - batch invariance (the default q8_0 cache): each prompt alone vs 16
 *    sequences in one batch gives bit-identical logits at every step;
 *  - a synthetic model is the very file its references were made from (its
 *    FNV-1a hash), so a change of llmq-mkmodel's output cannot pass for a
 *    parity failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/json.h"
#include "kernels/backend.h"
#include "engine/engine.h"
#include "engine/perplexity.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define MAX_STEPS 32
#define MAX_PROMPTS 32

/* FNV-1a 64 of the synthetic models (tests/local.mk's command lines) the
 * references in tests/data/reference were made from. */
#define SYNTH_LLAMA3_Q4KM 0xb1dfbeb38c0b0e17ull
#define SYNTH_QWEN2_Q4KM 0x9bcea22f9420914bull
#define SYNTH_PHI3_Q4KM 0x82ed01fbfad33f13ull
#define SYNTH_LLAMA3_BPE_Q8 0x4a885832cb37ac50ull
#define SYNTH_QWEN2_VOCAB_Q8 0xc57fe41f624bc228ull
#define SYNTH_LLAMA3_F32 0x43dd5a8b6015c903ull
#define SYNTH_QWEN2_F32 0xb63b4c41425aa942ull
#define SYNTH_PHI3_F32 0x1c707756468bfff0ull

typedef struct ref_prompt {
    int32_t prompt[256];
    int32_t n_prompt;
    int32_t tokens[MAX_STEPS];
    int32_t top_id[MAX_STEPS][5];
    float top_logit[MAX_STEPS][5];
    int32_t n_steps;
} ref_prompt;

typedef struct fixture {
    const char *name;
    uint64_t synth_fnv; /* a model of tests/synth: its hash; 0 for tests/data/models */
    bool batch_invariance;
    bool greedy_exact;  /* f32 weights: all 32 greedy tokens identical on every prompt */
    float bound;        /* on the worst error */
    float median_bound; /* on the median error */
    model *m;
    tok_vocab *vocab;
    ref_prompt refs[MAX_PROMPTS];
    int32_t n_refs;
} fixture;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static int parse_ref_line(const json_value *v, ref_prompt *r)
{
    const json_value *pt = json_get(v, "prompt_tokens"), *steps = json_get(v, "steps");
    if (!pt || pt->type != JSON_ARRAY || !steps || steps->type != JSON_ARRAY ||
        pt->arr.n > 256 || steps->arr.n > MAX_STEPS)
        return -1;
    r->n_prompt = (int32_t)pt->arr.n;
    for (size_t i = 0; i < pt->arr.n; i++)
        r->prompt[i] = (int32_t)pt->arr.items[i].num.i;
    r->n_steps = (int32_t)steps->arr.n;
    for (size_t s = 0; s < steps->arr.n; s++) {
        const json_value *st = &steps->arr.items[s];
        const json_value *top5 = json_get(st, "top5");
        r->tokens[s] = (int32_t)json_get(st, "token")->num.i;
        for (int k = 0; k < 5; k++) {
            r->top_id[s][k] = (int32_t)top5->arr.items[k].arr.items[0].num.i;
            r->top_logit[s][k] = (float)top5->arr.items[k].arr.items[1].num.d;
        }
    }
    return 0;
}

static int load_refs(fixture *fx)
{
    char path[512], rel[256];
    snprintf(rel, sizeof rel, "reference/%s.greedy.jsonl", fx->name);
    size_t len;
    char *text = slurp(check_data_path(path, sizeof path, rel), &len);
    if (!text)
        return -1;
    fx->n_refs = 0;
    for (char *line = strtok(text, "\n"); line && fx->n_refs < MAX_PROMPTS;
         line = strtok(NULL, "\n")) {
        json_value *v;
        llmq_err err;
        if (json_parse(line, strlen(line), &v, &err) != 0) {
            printf("# %s: %s\n", rel, err.msg);
            free(text);
            return -1;
        }
        int rc = parse_ref_line(v, &fx->refs[fx->n_refs]);
        json_free(v);
        if (rc != 0) {
            free(text);
            return -1;
        }
        fx->n_refs++;
    }
    free(text);
    return 0;
}

static float rel_err(float ours, float ref)
{
    return fabsf(ours - ref) / fmaxf(fabsf(ref), 1.0f);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Feeds prompt + reference tokens in one pass and compares every step. */
static void check_teacher_forced(fixture *fx, backend *be)
{
    const model_config *c = model_get_config(fx->m);
    static float errs[MAX_PROMPTS * MAX_STEPS * 5];
    int n_errs = 0;
    int disagree = 0, unexplained = 0, steps = 0;
    for (int32_t p = 0; p < fx->n_refs; p++) {
        const ref_prompt *r = &fx->refs[p];
        int32_t n = r->n_prompt + r->n_steps - 1, toks[300], pos[300], seqs[300], rows[300];
        int32_t table[32], n_logits = r->n_steps;
        memcpy(toks, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
        memcpy(toks + r->n_prompt, r->tokens, (size_t)(r->n_steps - 1) * sizeof(int32_t));
        for (int32_t i = 0; i < n; i++)
            pos[i] = i, seqs[i] = 0;
        for (int32_t i = 0; i < 32; i++)
            table[i] = i;
        for (int32_t s = 0; s < n_logits; s++)
            rows[s] = r->n_prompt - 1 + s;
        be_kv *kv;
        model_state *st;
        llmq_err err;
        float *logits = malloc((size_t)n_logits * c->n_vocab * sizeof(float));
        if (be->ops->kv_create(be, c->n_layers, 32, 16, c->n_head_kv * c->head_dim, BE_KV_F16, &kv,
                               &err) ||
            model_state_create(&st, fx->m, n, 1, 32, n_logits, &err)) {
            CHECK(0, "%s: scratch: %s", fx->name, err.msg);
            free(logits);
            return;
        }
        model_batch b = {.n_rows = n, .tokens = toks, .pos = pos, .slot = pos, .row_seq = seqs,
                         .n_seqs = 1, .block_table = table, .seq_len = &n, .max_blocks = 32,
                         .n_logits = n_logits, .logit_rows = rows};
        int rc = model_forward(fx->m, st, kv, &b, logits, &err);
        if (rc != 0)
            CHECK(0, "%s: forward: %s", fx->name, err.msg);
        for (int32_t s = 0; rc == 0 && s < n_logits; s++, steps++) {
            const float *l = logits + (size_t)s * c->n_vocab;
            for (int k = 0; k < 5; k++)
                errs[n_errs++] = rel_err(l[r->top_id[s][k]], r->top_logit[s][k]);
            if (argmax(l, c->n_vocab) != r->tokens[s]) {
                disagree++;
                float margin = r->top_logit[s][0] - r->top_logit[s][1];
                bool explained =
                    margin <= 2 * fx->bound * fmaxf(fabsf(r->top_logit[s][0]), 1.0f);
                printf("# %s prompt %d step %d: top-1 %d vs llama.cpp %d, its top-2 margin %.5f (%s)\n",
                       fx->name, p, s, argmax(l, c->n_vocab), r->tokens[s], margin,
                       explained ? "within the bound" : "NOT explained");
                unexplained += !explained;
            }
        }
        model_state_free(st);
        be->ops->kv_destroy(be, kv);
        free(logits);
    }
    qsort(errs, (size_t)n_errs, sizeof errs[0], cmp_float);
    const float median = n_errs ? errs[n_errs / 2] : 0, worst = n_errs ? errs[n_errs - 1] : 0;
    CHECK(n_errs > 0 && median <= fx->median_bound && worst <= fx->bound,
          "%s: teacher-forced top-5 logits of %d steps: median error %.1e (bound %g), worst %.1e "
          "(bound %g)", fx->name, steps, median, fx->median_bound, worst, fx->bound);
    CHECK(unexplained == 0, "%s: top-1 agrees at every step but %d, each within the top-2 margin",
          fx->name, disagree);
}

/* ---- free-running greedy, all prompts batched ---- */

typedef struct run_log {
    int32_t n;
    uint64_t ids[MAX_PROMPTS * 64];
    int32_t steps[MAX_PROMPTS * 64];
    uint64_t sums[MAX_PROMPTS * 64];
} run_log;

static void log_logits(void *ctx, uint64_t id, int32_t step, const float *logits, int32_t n_vocab)
{
    run_log *lg = ctx;
    if (lg->n < (int32_t)(sizeof lg->ids / sizeof lg->ids[0])) {
        lg->ids[lg->n] = id;
        lg->steps[lg->n] = step;
        lg->sums[lg->n] = check_hash64(logits, (size_t)n_vocab * sizeof(float));
        lg->n++;
    }
}

static engine *new_engine(fixture *fx, int32_t max_seqs, be_kv_type kv_type, run_log *lg)
{
    engine_config cfg = engine_default_config();
    cfg.kv_type = kv_type;
    cfg.max_seqs = max_seqs;
    cfg.n_ctx = 256;
    cfg.max_batch_tokens = 64; /* small, so prompts are cut into several chunks */
    engine *e;
    llmq_err err;
    if (engine_create(&e, fx->m, fx->vocab, &cfg, &err) != 0) {
        CHECK(0, "%s: engine: %s", fx->name, err.msg);
        return NULL;
    }
    if (lg)
        engine_set_logits_observer(e, log_logits, lg);
    return e;
}

static int add_greedy(engine *e, uint64_t id, const ref_prompt *r, int32_t max_tokens)
{
    engine_request req = {.id = id, .prompt = r->prompt, .n_prompt = r->n_prompt,
                          .sampling = sampler_default_params(), .max_tokens = max_tokens};
    llmq_err err;
    if (engine_add(e, &req, &err) != 0) {
        CHECK(0, "engine_add: %s", err.msg);
        return -1;
    }
    return 0;
}

typedef struct gen_out {
    int32_t tokens[MAX_PROMPTS][64];
    int32_t n[MAX_PROMPTS];
} gen_out;

static void drain(engine *e, gen_out *out)
{
    llmq_err err;
    while (engine_has_work(e)) {
        const engine_event *ev;
        int32_t n_ev;
        if (engine_step(e, &ev, &n_ev, &err) != 0) {
            CHECK(0, "engine_step: %s", err.msg);
            return;
        }
        for (int32_t i = 0; i < n_ev; i++)
            if (ev[i].finish != ENGINE_RUNNING && out) {
                uint64_t id = ev[i].id % MAX_PROMPTS;
                out->n[id] = ev[i].n_tokens;
                memcpy(out->tokens[id], ev[i].tokens, (size_t)ev[i].n_tokens * sizeof(int32_t));
            }
    }
}

/* All the prompts batched in one engine with a kv_type cache, into out. */
static int run_greedy(fixture *fx, be_kv_type kv_type, gen_out *out)
{
    engine *e = new_engine(fx, 16, kv_type, NULL);
    if (!e)
        return -1;
    memset(out, 0, sizeof *out);
    for (int32_t p = 0; p < fx->n_refs; p++)
        add_greedy(e, (uint64_t)p, &fx->refs[p], fx->refs[p].n_steps);
    drain(e, out);
    engine_free(e);
    return 0;
}

/* The first step where prompt p's output leaves the reference's tokens, or
 * -1 where it keeps them all (the reference stops at EOG without listing it
 * as output). */
static int32_t first_divergence(const fixture *fx, const gen_out *out, int32_t p)
{
    const ref_prompt *r = &fx->refs[p];
    int32_t s = 0;
    while (s < r->n_steps && s < out->n[p] && out->tokens[p][s] == r->tokens[s])
        s++;
    return s == r->n_steps || (s == out->n[p] && s == r->n_steps - 1) ? -1 : s;
}

static void check_greedy(fixture *fx)
{
    static gen_out out;
    if (run_greedy(fx, BE_KV_F16, &out) != 0)
        return;
    int exact = 0, unexplained = 0;
    for (int32_t p = 0; p < fx->n_refs; p++) {
        const ref_prompt *r = &fx->refs[p];
        const int32_t s = first_divergence(fx, &out, p);
        if (s < 0) {
            exact++;
            continue;
        }
        float margin = r->top_logit[s][0] - r->top_logit[s][1];
        bool explained = margin <= 2 * fx->bound * fmaxf(fabsf(r->top_logit[s][0]), 1.0f);
        printf("# %s prompt %d: greedy diverges at step %d, llama.cpp's top-2 margin %.5f (%s)\n",
               fx->name, p, s, margin, explained ? "within the bound" : "NOT explained");
        unexplained += !explained;
    }
    CHECK(unexplained == 0,
          "%s, f16 KV cache: batched greedy equals llama.cpp on %d of %d "
          "prompts, the rest diverge only at low-margin steps",
          fx->name, exact, fx->n_refs);
    if (fx->greedy_exact)
        CHECK(exact == fx->n_refs, "%s: all 32 greedy tokens identical on every prompt", fx->name);
}

/* The q8_0 cache's greedy tokens against llama.cpp's (f16 cache), reported. */
static void report_greedy_q8(fixture *fx)
{
    static gen_out out;
    if (run_greedy(fx, BE_KV_Q8_0, &out) != 0)
        return;
    int exact = 0, kept = 0, total = 0;
    char where[256] = "";
    for (int32_t p = 0; p < fx->n_refs; p++) {
        const int32_t s = first_divergence(fx, &out, p);
        exact += s < 0;
        kept += s < 0 ? fx->refs[p].n_steps : s;
        total += fx->refs[p].n_steps;
        if (s >= 0)
            snprintf(where + strlen(where), sizeof where - strlen(where), " %d@%d", p, s);
    }
    printf("# %s, q8_0 KV cache: greedy equals llama.cpp on %d of %d prompts, %d of %d tokens "
           "before the first divergence (prompt@step:%s)\n",
           fx->name, exact, fx->n_refs, kept, total, exact == fx->n_refs ? " none" : where);
}

/* ---- perplexity ---- */

static void check_perplexity(fixture *fx)
{
    char path[512], rel[256];
    size_t len, ref_len;
    snprintf(rel, sizeof rel, "reference/%s.ppl.txt", fx->name);
    char *ref = slurp(check_data_path(path, sizeof path, rel), &ref_len);
    char *story = slurp(check_data_path(path, sizeof path, "reference/story.txt"), &len);
    const char *at = ref ? strstr(ref, "PPL = ") : NULL;
    if (!story || !at) {
        CHECK(0, "%s: reference perplexity readable", fx->name);
    } else {
        double want = atof(at + 6);
        ppl_result res, q8;
        llmq_err err;
        int rc = ppl_compute(fx->m, fx->vocab, story, len, 128, BE_KV_F16, NULL, NULL, &res, &err);
        if (rc == 0)
            rc = ppl_compute(fx->m, fx->vocab, story, len, 128, BE_KV_Q8_0, NULL, NULL, &q8, &err);
        if (rc != 0) {
            CHECK(0, "%s: perplexity: %s", fx->name, err.msg);
        } else {
            CHECK(fabs(res.ppl - want) / want <= 0.005,
                  "%s: perplexity %.4f over %d chunks (f16 KV) vs llama.cpp %.4f (%.3f%%)",
                  fx->name, res.ppl, res.n_chunks, want, 100 * fabs(res.ppl - want) / want);
            CHECK(fabs(q8.ppl - res.ppl) / res.ppl <= 0.005,
                  "%s: perplexity with the q8_0 KV cache %.4f vs f16 %.4f (%+.3f%%)", fx->name,
                  q8.ppl, res.ppl, 100 * (q8.ppl - res.ppl) / res.ppl);
        }
    }
    free(ref);
    free(story);
}

/* ---- batch invariance ---- */

static bool same_logits(const run_log *a, const run_log *b, uint64_t id)
{
    int32_t n = 0, matched = 0;
    for (int32_t i = 0; i < a->n; i++) {
        if (a->ids[i] != id)
            continue;
        n++;
        for (int32_t j = 0; j < b->n; j++)
            if (b->ids[j] == id && b->steps[j] == a->steps[i]) {
                matched += b->sums[j] == a->sums[i];
                break;
            }
    }
    return n > 0 && matched == n;
}

static void check_batch_invariance(fixture *fx)
{
    static run_log alone, mixed;
    memset(&alone, 0, sizeof alone);
    memset(&mixed, 0, sizeof mixed);
    const int32_t n = 16, steps = 12;
    for (int32_t i = 0; i < n; i++) {
        engine *e = new_engine(fx, 1, BE_KV_Q8_0, &alone);
        if (!e)
            return;
        add_greedy(e, (uint64_t)i, &fx->refs[i % fx->n_refs], steps);
        drain(e, NULL);
        engine_free(e);
    }
    /* Mixed: staggered arrivals so prefill chunks and decodes share steps. */
    engine *e = new_engine(fx, 16, BE_KV_Q8_0, &mixed);
    if (!e)
        return;
    llmq_err err;
    for (int32_t i = 0; i < n; i++) {
        add_greedy(e, (uint64_t)i, &fx->refs[i % fx->n_refs], steps);
        const engine_event *ev;
        int32_t n_ev;
        if (i % 3 == 0 && engine_step(e, &ev, &n_ev, &err) != 0)
            CHECK(0, "engine_step: %s", err.msg);
    }
    drain(e, NULL);
    engine_free(e);
    int same = 0;
    for (int32_t i = 0; i < n; i++)
        same += same_logits(&alone, &mixed, (uint64_t)i);
    CHECK(same == n, "%s: %d of %d sequences have bit-identical logits alone and in a batch of 16",
          fx->name, same, n);
}

/* A synthetic model's path, after checking it is the file the references
 * were made from. */
static int synth_path(const fixture *fx, char *path, size_t cap)
{
    char rel[128];
    snprintf(rel, sizeof rel, "tests/synth/%s.gguf", fx->name);
    check_build_path(path, cap, rel);
    size_t len;
    char *bytes = slurp(path, &len);
    const uint64_t h = bytes ? check_hash64(bytes, len) : 0;
    free(bytes);
    CHECK(h == fx->synth_fnv,
          "%s: the model make check wrote is the one the references were "
          "made from (FNV-1a %016llx, want %016llx)",
          fx->name, (unsigned long long)h, (unsigned long long)fx->synth_fnv);
    return h == fx->synth_fnv ? 0 : -1;
}

static int open_fixture(fixture *fx, backend *be)
{
    char path[512], rel[256];
    llmq_err err;
    snprintf(rel, sizeof rel, "models/%s.gguf", fx->name);
    if (fx->synth_fnv ? synth_path(fx, path, sizeof path) != 0
                      : !check_data_path(path, sizeof path, rel))
        return -1;
    if (model_load(&fx->m, path, be, &err) != 0 ||
        tok_load(&fx->vocab, model_gguf(fx->m), &err) != 0) {
        CHECK(0, "%s: load: %s", fx->name, err.msg);
        return -1;
    }
    if (load_refs(fx) != 0) {
        CHECK(0, "%s: reference greedy file readable", fx->name);
        return -1;
    }
    return 0;
}

int main(void)
{
    /* The synthetic models: llama3 (rope_freqs, GQA), qwen2 (q/k/v biases,
     * tied), phi3 (fused attn_qkv and gate/up) in Q4_K_M with the 512-token
     * vocabulary; llama3 and qwen2 in q8_0 with their own 128k/152k
     * vocabularies (tied: the output matmul and top-k at that width); and
     * each architecture in f32, where no activation is quantized and the
     * f32 bound holds and every greedy token must match. */
    static fixture fixtures[] = {
        {.name = "stories260K",
         .bound = 1e-3f,
         .median_bound = 1e-3f,
         .batch_invariance = true,
         .greedy_exact = true},
        {.name = "tinystories-656k-q8_0", .bound = 4e-2f, .median_bound = 1e-2f},
        {.name = "TinyStories-656K.f16", .bound = 1e-2f, .median_bound = 1e-2f},
        {.name = "synth-q4km-gqa", .bound = 4e-2f, .median_bound = 1e-2f, .batch_invariance = true},
        {.name = "synth-q6k-mha", .bound = 4e-2f, .median_bound = 1e-2f},
        {.name = "synth-llama3-q4km",
         .synth_fnv = SYNTH_LLAMA3_Q4KM,
         .bound = 4e-2f,
         .median_bound = 1e-2f,
         .batch_invariance = true},
        {.name = "synth-qwen2-q4km",
         .synth_fnv = SYNTH_QWEN2_Q4KM,
         .bound = 4e-2f,
         .median_bound = 1e-2f,
         .batch_invariance = true},
        {.name = "synth-phi3-q4km",
         .synth_fnv = SYNTH_PHI3_Q4KM,
         .bound = 4e-2f,
         .median_bound = 1e-2f,
         .batch_invariance = true},
        {.name = "synth-llama3-bpe-q8",
         .synth_fnv = SYNTH_LLAMA3_BPE_Q8,
         .bound = 4e-2f,
         .median_bound = 1e-2f,
         .batch_invariance = true},
        {.name = "synth-qwen2-vocab-q8",
         .synth_fnv = SYNTH_QWEN2_VOCAB_Q8,
         .bound = 4e-2f,
         .median_bound = 1e-2f,
         .batch_invariance = true},
        {.name = "synth-llama3-f32",
         .synth_fnv = SYNTH_LLAMA3_F32,
         .bound = 1e-3f,
         .median_bound = 1e-3f,
         .batch_invariance = true,
         .greedy_exact = true},
        {.name = "synth-qwen2-f32",
         .synth_fnv = SYNTH_QWEN2_F32,
         .bound = 1e-3f,
         .median_bound = 1e-3f,
         .batch_invariance = true,
         .greedy_exact = true},
        {.name = "synth-phi3-f32",
         .synth_fnv = SYNTH_PHI3_F32,
         .bound = 1e-3f,
         .median_bound = 1e-3f,
         .batch_invariance = true,
         .greedy_exact = true},
    };
    backend *be;
    llmq_err err;
    if (backend_cpu_create(&be, 2, &err) != 0) {
        printf("backend: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        fixture *fx = &fixtures[i];
        if (open_fixture(fx, be) == 0) {
            check_teacher_forced(fx, be);
            check_greedy(fx);
            report_greedy_q8(fx);
            check_perplexity(fx);
            if (fx->batch_invariance)
                check_batch_invariance(fx);
        }
        tok_free(fx->vocab);
        model_free(fx->m);
    }
    backend_destroy(be);
    return check_done();
}
