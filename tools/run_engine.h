/* run_engine: llmq-run's modes that drive the engine (generate, --parallel,
 * --perplexity, --bench), kept apart from its option parsing.
 *
 * Each mode takes a loaded model and vocabulary, writes its product to
 * stdout (generated text, perplexity, the benchmark table) and its logs and
 * timings to stderr, and returns an exit status: 0 done, 1 failed. */
#ifndef LLMQ_TOOLS_RUN_ENGINE_H
#define LLMQ_TOOLS_RUN_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define RUN_BENCH_MAX_CASES 8 /* prompt lengths, and sequence counts, a --bench measures */

typedef struct run_gen_opts {
    const char *prompt;       /* generate */
    const int32_t *prompt_ids; /* generate: the prompt's ids when given (--messages), else NULL */
    size_t n_prompt_ids;
    const char *prompt_file;  /* --parallel: one prompt per line */
    int32_t n_predict;        /* -n */
    int32_t parallel;         /* --parallel; 0 in other modes */
    sampler_params sampling;
    const char *stop[ENGINE_MAX_STOPS];
    size_t n_stop;
    bool ignore_eos;
    int32_t logprobs;        /* --logprobs N: each token's logprob and its N likeliest; -1: off */
    bool logprobs_exact;     /* --logprobs-exact: those values as hex floats, every bit */
    const char *json_schema; /* --json-schema FILE: outputs follow this JSON schema */
    bool json_object;        /* --json-object: outputs are JSON objects */
    engine_config engine;
    int32_t threads;          /* -t, for reports */
    const char *ppl_file;     /* --perplexity */
    int32_t ppl_ctx;          /* -c */
    int32_t bench_reps;       /* --reps */
    const char *bench_json;   /* --json FILE (default: stdout after the table) */
    /* --bench-pp: the prefill cases' prompt lengths (n_bench_pp 0: 512);
     * --bench-npl: the decode cases' sequence counts (n_bench_npl 0: the
     * backend's default set; one 0: no decode cases). */
    int32_t bench_pp[RUN_BENCH_MAX_CASES], bench_npl[RUN_BENCH_MAX_CASES];
    int n_bench_pp, n_bench_npl;
} run_gen_opts;

int run_generate(const run_gen_opts *o, model *m, const tok_vocab *v);
int run_parallel(const run_gen_opts *o, model *m, const tok_vocab *v);
int run_perplexity(const run_gen_opts *o, model *m, const tok_vocab *v);
int run_bench(const run_gen_opts *o, model *m, const tok_vocab *v);

#endif
