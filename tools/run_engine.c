#include "tools/run_engine.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/file.h"
#include "common/grow.h"
#include "common/json.h"
#include "engine/jsonschema.h"
#include "engine/perplexity.h"

/* "llmq-run: WHAT: message", WHAT once where the message begins with it
 * (the engine's and perplexity's own errors name themselves). */
static int fail(const char *what, const llmq_err *err)
{
    const size_t n = strlen(what);
    const bool named = strncmp(err->msg, what, n) == 0 && err->msg[n] == ':';
    fprintf(stderr, "llmq-run: %s%s%s\n", named ? "" : what, named ? "" : ": ", err->msg);
    return 1;
}

static engine_request make_request(const run_gen_opts *o, const grammar *constraint, uint64_t id,
                                   const int32_t *ids, size_t n)
{
    return (engine_request){.id = id,
                            .prompt = ids,
                            .n_prompt = (int32_t)n,
                            .sampling = o->sampling,
                            .max_tokens = o->n_predict,
                            .stop = o->stop,
                            .n_stop = (int32_t)o->n_stop,
                            .ignore_eos = o->ignore_eos,
                            .logprobs = o->logprobs >= 0,
                            .top_logprobs = o->logprobs > 0 ? o->logprobs : 0,
                            .constraint = constraint};
}

/* exact: the value as a C99 hex float, whose every bit a reader gets back
 * (strtod, Python's float.fromhex), so that two builds' outputs compare
 * with cmp; else 4 decimals, for reading. */
static void print_token(const tok_vocab *v, engine_logprob lp, bool exact)
{
    size_t n = 0;
    const char *piece = tok_piece(v, lp.token, true, &n);
    json_write_string(stdout, piece, n);
    printf(exact ? " %a" : " %.4f", (double)lp.logprob);
}

/* --logprobs: a line per generated token, its own logprob then the likeliest. */
static void print_logprobs(const tok_vocab *v, const engine_event *ev, bool exact)
{
    if (!ev->logprobs)
        return;
    printf("logprobs (ln p under the model's raw logits): step, token, then the %d likeliest\n",
           ev->n_top);
    for (int32_t i = 0; i < ev->n_tokens; i++) {
        printf("%5d  ", i);
        print_token(v, ev->logprobs[i], exact);
        for (int32_t k = 0; k < ev->n_top; k++) {
            printf(k ? "  " : "   |  ");
            print_token(v, ev->top_logprobs[(size_t)i * ev->n_top + k], exact);
        }
        printf("\n");
    }
}

/* The grammar of --json-schema FILE or --json-object into *g (NULL when
 * neither was given). */
static int load_constraint(const run_gen_opts *o, grammar **g)
{
    llmq_err err;
    char *text;
    size_t len;
    *g = NULL;
    if (o->json_object)
        return jsonschema_any_object(g, &err) != 0 ? fail("--json-object", &err) : 0;
    if (!o->json_schema)
        return 0;
    if (file_read_all(o->json_schema, &text, &len, &err) != 0)
        return fail("--json-schema", &err);
    int rc = jsonschema_compile(g, text, len, &err);
    free(text);
    return rc != 0 ? fail(o->json_schema, &err) : 0;
}

/* The prompt rate counts the tokens computed, not those the prefix cache
 * held. */
static void print_timing(const char *label, const engine_timing *t)
{
    const double prefill = t->first_token_ms - t->first_sched_ms;
    const double decode = t->finished_ms - t->first_token_ms;
    const int32_t computed = t->n_prompt - t->n_cached;
    char cached[48] = "";
    if (t->n_cached > 0)
        snprintf(cached, sizeof cached, " (%d from the prefix cache)", t->n_cached);
    fprintf(stderr,
            "%s%d prompt tokens%s in %.1f ms (%.1f tok/s), %d generated in %.1f ms (%.1f tok/s)\n",
            label, t->n_prompt, cached, prefill, prefill > 0 ? computed * 1e3 / prefill : 0.0,
            t->n_generated, decode, decode > 0 ? (t->n_generated - 1) * 1e3 / decode : 0.0);
}

/* What the engine was made with: --batch and --parallel as it took them,
 * and the KV cache it built. */
static void print_engine(const engine *e)
{
    const engine_config *c = engine_get_config(e);
    fprintf(stderr,
            "llmq-run: engine: %d tokens per forward pass, %d sequence%s at once, %d tokens of"
            " context each, a KV cache of %lld tokens in %s\n",
            c->max_batch_tokens, c->max_seqs, c->max_seqs == 1 ? "" : "s", c->n_ctx,
            (long long)c->n_blocks * c->block_size, be_kv_type_name(c->kv_type));
    char warning[256];
    if (engine_ctx_warning(e, warning, sizeof warning))
        fprintf(stderr, "llmq-run: warning: %s\n", warning);
}

/* ---- generate: one prompt, streamed ---- */

/* The prompt's ids, malloc'd: those given, or -p's tokenized. */
static int prompt_ids(const run_gen_opts *o, const tok_vocab *v, int32_t **ids, size_t *n,
                      llmq_err *err)
{
    if (!o->prompt_ids)
        return tok_encode(v, o->prompt, strlen(o->prompt), tok_add_bos(v), true, ids, n, err);
    *n = o->n_prompt_ids;
    *ids = malloc((*n ? *n : 1) * sizeof **ids);
    if (!*ids)
        return llmq_errf(err, "out of memory");
    memcpy(*ids, o->prompt_ids, *n * sizeof **ids);
    return 0;
}

int run_generate(const run_gen_opts *o, model *m, const tok_vocab *v)
{
    llmq_err err;
    int32_t *ids;
    size_t n;
    if (prompt_ids(o, v, &ids, &n, &err) != 0)
        return fail("tokenizing the prompt", &err);
    engine_config cfg = o->engine;
    cfg.max_seqs = 1;
    grammar *g;
    if (load_constraint(o, &g) != 0) {
        free(ids);
        return 1;
    }
    engine *e;
    if (engine_create(&e, m, v, &cfg, &err) != 0) {
        free(ids);
        grammar_free(g);
        return fail("engine", &err);
    }
    print_engine(e);
    engine_request req = make_request(o, g, 1, ids, n);
    int rc = engine_add(e, &req, &err) != 0 ? fail("prompt", &err) : 0;
    free(ids);
    while (rc == 0 && engine_has_work(e)) {
        const engine_event *ev;
        int32_t n_ev;
        if (engine_step(e, &ev, &n_ev, &err) != 0) {
            rc = fail("generation", &err);
            break;
        }
        for (int32_t i = 0; i < n_ev; i++) {
            fwrite(ev[i].text, 1, ev[i].text_len, stdout);
            fflush(stdout);
            if (ev[i].finish != ENGINE_RUNNING) {
                printf("\n");
                print_logprobs(v, &ev[i], o->logprobs_exact);
                fprintf(stderr, "llmq-run: finished (%s): ", engine_finish_name(ev[i].finish));
                print_timing("", &ev[i].timing);
            }
        }
    }
    engine_free(e);
    grammar_free(g);
    return rc;
}

/* ---- --parallel: many prompts through the batched engine ---- */

typedef struct prompt_list {
    char *text;
    char **lines;
    size_t n;
} prompt_list;

static int read_prompts(const char *path, prompt_list *pl, llmq_err *err)
{
    size_t len;
    memset(pl, 0, sizeof *pl);
    if (file_read_all(path, &pl->text, &len, err) != 0)
        return -1;
    size_t cap = 0;
    for (char *line = strtok(pl->text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!line[0])
            continue;
        if (grow_reserve(&pl->lines, &cap, pl->n + 1, sizeof *pl->lines))
            return llmq_errf(err, "%s: out of memory at line %zu", path, pl->n + 1);
        pl->lines[pl->n++] = line;
    }
    if (pl->n == 0)
        return llmq_errf(err, "%s: no prompts (one per line)", path);
    return 0;
}

static int add_prompt(engine *e, const run_gen_opts *o, const grammar *g, const tok_vocab *v,
                      size_t i, const char *text, llmq_err *err)
{
    int32_t *ids;
    size_t n;
    if (tok_encode(v, text, strlen(text), tok_add_bos(v), true, &ids, &n, err) != 0)
        return llmq_err_prefix(err, "prompt %zu", i + 1);
    engine_request req = make_request(o, g, i, ids, n);
    int rc = engine_add(e, &req, err);
    free(ids);
    return rc != 0 ? llmq_err_prefix(err, "prompt %zu", i + 1) : 0;
}

int run_parallel(const run_gen_opts *o, model *m, const tok_vocab *v)
{
    llmq_err err;
    prompt_list pl;
    if (read_prompts(o->prompt_file, &pl, &err) != 0) {
        free(pl.text);
        free(pl.lines);
        return fail("prompts", &err);
    }
    engine_config cfg = o->engine;
    cfg.max_seqs = o->parallel;
    grammar *g = NULL;
    engine *e = NULL;
    int rc = load_constraint(o, &g);
    if (rc == 0 && engine_create(&e, m, v, &cfg, &err) != 0)
        rc = fail("engine", &err);
    if (rc != 0) {
        grammar_free(g);
        free(pl.text);
        free(pl.lines);
        return rc;
    }
    print_engine(e);
    size_t next = 0, done = 0;
    uint64_t generated = 0;
    const double t0 = clock_mono_ms_f();
    while (rc == 0 && done < pl.n) {
        /* Keep the engine fed: more sequences wait than run, so a finished
         * one is replaced in the very next step. */
        while (next < pl.n && engine_free_slots(e) > 0)
            if (add_prompt(e, o, g, v, next, pl.lines[next], &err) != 0)
                rc = fail("prompts", &err), next = pl.n;
            else
                next++;
        const engine_event *ev;
        int32_t n_ev;
        if (rc == 0 && engine_step(e, &ev, &n_ev, &err) != 0)
            rc = fail("generation", &err);
        for (int32_t i = 0; rc == 0 && i < n_ev; i++) {
            if (ev[i].finish == ENGINE_RUNNING)
                continue;
            done++;
            generated += (uint64_t)ev[i].n_tokens;
            printf("--- prompt %llu (%s, %d tokens)\n%s%.*s\n", (unsigned long long)ev[i].id + 1,
                   engine_finish_name(ev[i].finish), ev[i].n_tokens, pl.lines[ev[i].id],
                   (int)ev[i].full_text_len, ev[i].full_text);
            print_logprobs(v, &ev[i], o->logprobs_exact);
            char label[48];
            snprintf(label, sizeof label, "llmq-run: prompt %llu: ",
                     (unsigned long long)ev[i].id + 1);
            print_timing(label, &ev[i].timing);
        }
        if (rc != 0)
            break;
    }
    const double secs = (clock_mono_ms_f() - t0) / 1e3;
    if (rc == 0) {
        const engine_stats st = engine_get_stats(e);
        fprintf(stderr,
                "llmq-run: %zu prompts, %llu tokens generated in %.2f s: %.1f tok/s; prefix cache:"
                " %llu of %llu prompt tokens\n",
                pl.n, (unsigned long long)generated, secs, secs > 0 ? generated / secs : 0.0,
                (unsigned long long)st.prefix_hit_tokens,
                (unsigned long long)st.prefix_lookup_tokens);
    }
    engine_free(e);
    grammar_free(g);
    free(pl.text);
    free(pl.lines);
    return rc;
}

/* The KV cache that --perplexity and --bench build for m (engine_kv_type). */
static be_kv_type kv_type_of(const model *m, const run_gen_opts *o)
{
    const model_config *c = model_get_config(m);
    return engine_kv_type(o->engine.kv_type, c->n_head_kv * c->head_dim);
}

/* ---- --perplexity ---- */

static void ppl_progress(void *ctx, int32_t chunk, int32_t n_chunks, double ppl)
{
    (void)ctx;
    printf("[%d]%.4f,", chunk, ppl);
    if (chunk == n_chunks)
        printf("\n");
    fflush(stdout);
}

int run_perplexity(const run_gen_opts *o, model *m, const tok_vocab *v)
{
    llmq_err err;
    char *text;
    size_t len;
    if (file_read_all(o->ppl_file, &text, &len, &err) != 0)
        return fail("perplexity", &err);
    ppl_result r;
    const double t0 = clock_mono_ms_f();
    int rc = ppl_compute(m, v, text, len, o->ppl_ctx, o->engine.kv_type, ppl_progress, NULL, &r,
                         &err);
    free(text);
    if (rc != 0)
        return fail("perplexity", &err);
    printf("PPL = %.4f\n", r.ppl);
    fprintf(stderr, "llmq-run: %d chunks of %d tokens (%lld scored, KV cache %s) in %.2f s\n",
            r.n_chunks, o->ppl_ctx, (long long)r.n_scored, be_kv_type_name(kv_type_of(m, o)),
            (clock_mono_ms_f() - t0) / 1e3);
    return 0;
}

/* ---- --bench: llama-bench's pp512 and tg128, and batched decode ---- */

/* The GPU's batched decode follows llama-batched-bench -npp 512 -ntg 128
 * -npl 1,8,32,64,128,256, so its figures compare with the anchors; the CPU
 * keeps shorter prompts and fewer sequences. */
enum { BENCH_PP = 512, BENCH_TG = 128, BENCH_BATCH_PROMPT = 128, BENCH_GPU_PROMPT = 512 };

/* Random prompt tokens (BOS first), as llama-bench uses: a fixed LCG so
 * every run measures the same work. */
static void random_prompt(const tok_vocab *v, int32_t *ids, int32_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (int32_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % tok_n_vocab(v));
    }
    if (tok_bos(v) != TOK_NONE)
        ids[0] = tok_bos(v);
}

typedef struct bench_run {
    double prefill_ms;  /* until every sequence has its first token */
    double decode_ms;   /* the rest */
    uint64_t decode_rows;
    engine_stats decode; /* the decode phase's share of the engine's counters */
} bench_run;

/* B sequences of n_prompt tokens each generating n_gen tokens, in
 * llama-batched-bench's order (every prompt, then all B decoding together),
 * so that decode tok/s is its S_TG: B x (n_gen - 1) rows over n_gen - 1
 * steps of B rows.  (The engine's own order starts a sequence's decoding
 * while later prompts are still running; measured that way the decode phase
 * is a ramp-down of ever fewer rows, not B.) */
static int bench_once(model *m, const tok_vocab *v, const engine_config *base, int32_t b,
                      int32_t n_prompt, int32_t n_gen, bench_run *out, llmq_err *err)
{
    engine_config cfg = *base;
    cfg.prefill_first = true;
    /* The engine's own rate, as llama-batched-bench measures its: every
     * prompt computed (they share nothing but the BOS anyway). */
    cfg.prefix_cache = false;
    cfg.max_seqs = b;
    cfg.n_ctx = n_prompt + n_gen + 1;
    cfg.max_batch_tokens = cfg.max_batch_tokens > b ? cfg.max_batch_tokens : b;
    cfg.n_blocks = 0;
    engine *e;
    if (engine_create(&e, m, v, &cfg, err) != 0)
        return -1;
    int32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
    int rc = ids ? 0 : llmq_errf(err, "out of memory");
    for (int32_t s = 0; rc == 0 && s < b; s++) {
        random_prompt(v, ids, n_prompt, (uint32_t)s + 1);
        engine_request req = {.id = (uint64_t)s,
                              .prompt = ids,
                              .n_prompt = n_prompt,
                              .sampling = sampler_default_params(),
                              .max_tokens = n_gen,
                              .ignore_eos = true};
        rc = engine_add(e, &req, err);
    }
    free(ids);
    const double t0 = clock_mono_ms_f();
    double t_first = 0;
    engine_stats at_first = {0};
    while (rc == 0 && engine_has_work(e)) {
        const engine_event *ev;
        int32_t n_ev;
        rc = engine_step(e, &ev, &n_ev, err);
        /* Prefill ends with the step that computes the last prompt row. */
        if (rc == 0 && t_first == 0 &&
            engine_get_stats(e).prefill_rows >= (uint64_t)b * (uint64_t)n_prompt) {
            t_first = clock_mono_ms_f();
            at_first = engine_get_stats(e);
        }
    }
    const double t1 = clock_mono_ms_f();
    if (rc == 0) {
        if (t_first == 0)
            t_first = t1; /* n_gen == 1: no decode phase */
        const engine_stats end = engine_get_stats(e);
        *out = (bench_run){.prefill_ms = t_first - t0, .decode_ms = t1 - t_first,
                           .decode_rows = end.decode_rows - at_first.decode_rows,
                           .decode = {.steps = end.steps - at_first.steps,
                                      .issue_ms = end.issue_ms - at_first.issue_ms,
                                      .read_ms = end.read_ms - at_first.read_ms,
                                      .host_ms = end.host_ms - at_first.host_ms}};
    }
    engine_free(e);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_case {
    const char *name;
    int32_t batch, n_prompt, n_gen;
    bool prefill; /* report prefill tok/s (pp), else decode tok/s */
    double median, samples[32];
} bench_case;

static int bench_case_run(model *m, const tok_vocab *v, const run_gen_opts *o, bench_case *c,
                          llmq_err *err)
{
    const int reps = o->bench_reps < 1 ? 1 : (o->bench_reps > 32 ? 32 : o->bench_reps);
    for (int r = 0; r < reps; r++) {
        bench_run br;
        if (bench_once(m, v, &o->engine, c->batch, c->n_prompt, c->n_gen, &br, err) != 0)
            return llmq_err_prefix(err, "%s", c->name);
        if (c->prefill)
            c->samples[r] = (double)c->batch * c->n_prompt * 1e3 / br.prefill_ms;
        else if (c->batch == 1 && c->n_prompt == 1) /* tg: every step is one decode */
            c->samples[r] = (double)c->n_gen * 1e3 / (br.prefill_ms + br.decode_ms);
        else
            c->samples[r] = br.decode_ms > 0 ? (double)br.decode_rows * 1e3 / br.decode_ms : 0;
        fprintf(stderr, "llmq-run: bench %s run %d: %.1f tok/s", c->name, r + 1, c->samples[r]);
        const engine_stats *d = &br.decode;
        if (!c->prefill && d->steps > 0) /* where a decode step's time goes */
            fprintf(stderr, "; per decode step %.3f ms: issue %.3f, wait+copy %.3f, host %.3f",
                    br.decode_ms / (double)d->steps, d->issue_ms / (double)d->steps,
                    d->read_ms / (double)d->steps, d->host_ms / (double)d->steps);
        fputc('\n', stderr);
    }
    double sorted[32];
    memcpy(sorted, c->samples, (size_t)reps * sizeof *sorted);
    qsort(sorted, (size_t)reps, sizeof *sorted, cmp_double);
    c->median = reps % 2 ? sorted[reps / 2] : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;
    return 0;
}

/* The member name "key": (after ", " unless first).  Names and texts go
 * through the JSON writer: a model's name comes from its file. */
static void json_key(FILE *f, bool first, const char *key)
{
    if (!first)
        fputs(", ", f);
    json_write_string(f, key, strlen(key));
    fputs(": ", f);
}

static void json_text(FILE *f, const char *key, const char *text)
{
    json_key(f, false, key);
    json_write_string(f, text, strlen(text));
}

static void bench_report(FILE *f, const model *m, const run_gen_opts *o, const bench_case *cases,
                         int n, int threads)
{
    const model_config *c = model_get_config(m);
    fputs("{\"model\": ", f);
    json_write_string(f, c->name, strlen(c->name));
    json_text(f, "weights", quant_type_name(c->weight_type));
    fprintf(f, ", \"bytes\": %llu", (unsigned long long)c->weight_bytes);
    json_text(f, "backend", model_backend(m)->name);
    json_text(f, "kv_cache", be_kv_type_name(kv_type_of(m, o)));
    fprintf(f,
            ", \"threads\": %d, \"reps\": %d, \"decode_order\": \"prefill_first\", "
            "\"results\": {",
            threads, o->bench_reps);
    for (int i = 0; i < n; i++) {
        json_key(f, i == 0, cases[i].name);
        fprintf(f, "%.1f", cases[i].median);
    }
    fprintf(f, "}, \"samples\": {");
    for (int i = 0; i < n; i++) {
        json_key(f, i == 0, cases[i].name);
        fputc('[', f);
        for (int r = 0; r < o->bench_reps; r++)
            fprintf(f, "%s%.1f", r ? ", " : "", cases[i].samples[r]);
        fputc(']', f);
    }
    fprintf(f, "}}\n");
}

/* One unmeasured pass over the shapes the cases use -- each prefill length
 * and decode steps of 1 and 8 rows -- so that no case's first run pays for
 * loading kernels, growing scratch or first-touching memory (llama-bench
 * warms up the same way). */
static int bench_warm_up(model *m, const tok_vocab *v, const run_gen_opts *o, const int32_t *pp,
                         int n_pp, llmq_err *err)
{
    bench_run br;
    const double t0 = clock_mono_ms_f();
    for (int i = 0; i < n_pp; i++)
        if (bench_once(m, v, &o->engine, 1, pp[i], 8, &br, err) != 0)
            return llmq_err_prefix(err, "warm-up");
    if (bench_once(m, v, &o->engine, 8, BENCH_BATCH_PROMPT, 8, &br, err) != 0)
        return llmq_err_prefix(err, "warm-up");
    fprintf(stderr, "llmq-run: bench warm-up (not counted): %.1f s\n",
            (clock_mono_ms_f() - t0) / 1e3);
    return 0;
}

int run_bench(const run_gen_opts *o, model *m, const tok_vocab *v)
{
    static const int32_t default_pp[] = {BENCH_PP};
    static const int32_t cpu_batches[] = {1, 8, 64}, gpu_batches[] = {1, 8, 32, 64, 128, 256};
    const bool gpu = strcmp(model_backend(m)->name, "cpu") != 0;
    const int32_t *pp = o->n_bench_pp > 0 ? o->bench_pp : default_pp;
    const int n_pp = o->n_bench_pp > 0 ? o->n_bench_pp : 1;
    const int32_t *batches = o->n_bench_npl > 0 ? o->bench_npl : gpu ? gpu_batches : cpu_batches;
    int n_batches = o->n_bench_npl > 0 ? o->n_bench_npl : gpu ? 6 : 3;
    if (n_batches == 1 && batches[0] == 0) /* --bench-npl 0: prefill and tg128 alone */
        n_batches = 0;
    char names[2 * RUN_BENCH_MAX_CASES + 1][24];
    bench_case cases[2 * RUN_BENCH_MAX_CASES + 1];
    int n = 0;
    for (int i = 0; i < n_pp; i++) {
        snprintf(names[n], sizeof names[n], "pp%d", pp[i]);
        cases[n] = (bench_case){
            .name = names[n], .batch = 1, .n_prompt = pp[i], .n_gen = 1, .prefill = true};
        n++;
    }
    cases[n++] = (bench_case){.name = "tg128", .batch = 1, .n_prompt = 1, .n_gen = BENCH_TG};
    for (int i = 0; i < n_batches; i++) {
        snprintf(names[n], sizeof names[n], "decode_b%d", batches[i]);
        cases[n] = (bench_case){.name = names[n],
                                .batch = batches[i],
                                .n_prompt = gpu ? BENCH_GPU_PROMPT : BENCH_BATCH_PROMPT,
                                .n_gen = BENCH_TG};
        n++;
    }
    /* Opened first: a path that cannot be written fails before the run. */
    FILE *jf = stdout;
    if (o->bench_json && !(jf = fopen(o->bench_json, "w"))) {
        fprintf(stderr, "llmq-run: --json: cannot write %s: %s\n", o->bench_json, strerror(errno));
        return 1;
    }
    llmq_err err;
    int rc = bench_warm_up(m, v, o, pp, n_pp, &err);
    const model_config *c = model_get_config(m);
    if (rc == 0)
        printf("| model | weights | test | tok/s (median of %d, KV cache %s) |\n"
               "| --- | --- | --- | --- |\n",
               o->bench_reps, be_kv_type_name(kv_type_of(m, o)));
    /* Each row as its case ends (flushed): a run stopped or failed part way,
     * say by a time limit at 256 sequences, keeps the rows it finished. */
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = bench_case_run(m, v, o, &cases[i], &err);
        if (rc == 0) {
            printf("| %s | %s | %s | %.1f |\n", c->name, quant_type_name(c->weight_type),
                   cases[i].name, cases[i].median);
            fflush(stdout);
        }
    }
    if (rc != 0) {
        if (jf != stdout)
            fclose(jf);
        return fail("bench", &err);
    }
    bench_report(jf, m, o, cases, n, o->threads);
    if (jf != stdout && (ferror(jf) | fclose(jf)) != 0) {
        fprintf(stderr, "llmq-run: --json: cannot write %s: %s\n", o->bench_json, strerror(errno));
        return 1;
    }
    return 0;
}
