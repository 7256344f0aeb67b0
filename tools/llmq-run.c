/* llmq-run: run a model file from the command line, one process, no queue.
 *
 * Modes: generate (-p, the default: the continuation streamed to stdout;
 * or --messages FILE, a chat rendered by the model's template),
 * --parallel N -f FILE (many prompts through the batched engine),
 * --perplexity FILE, --bench, and --tokenize / --detokenize IDS (ids of a
 * text as llama.cpp's llama-tokenize prints them, and back) and --messages
 * FILE --render-only (the rendered chat prompt); these last need only the
 * tokenizer metadata and the template, so they work on vocabulary-only GGUF
 * files.  A new
 * mode is a value of run_mode, its flag in parse_args' table and in
 * choose_mode, and one run_* function called from main; the engine-driven
 * modes live in run_engine.c.
 *
 * Exit status: 0 done, 1 the work failed (unreadable model, bad ids), 2 the
 * command line is wrong. */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/err.h"
#include "common/file.h"
#include "kernels/backend.h"
#include "common/json.h"
#include "kernels/select.h"
#include "tools/run_engine.h"
#include "model/chat.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "proto/job_params.h"
#include "proto/wire.h" /* the table's named limits */

typedef enum run_mode {
    MODE_NONE,
    MODE_GENERATE,
    MODE_PARALLEL,
    MODE_PERPLEXITY,
    MODE_BENCH,
    MODE_TOKENIZE,
    MODE_DETOKENIZE,
    MODE_RENDER,
} run_mode;

typedef struct run_opts {
    run_mode mode;
    const char *model;       /* -m */
    const char *ids;         /* --detokenize's argument */
    const char *messages;    /* --messages FILE: a chat job's messages */
    const char *chat_template; /* --chat-template NAME|FILE, NULL: the model's */
    bool tokenize, bench;      /* --tokenize, --bench */
    bool render_only;          /* --render-only */
    bool no_parse_special, no_bos, kv_f32, kv_f16, no_prefix_cache;
    bool force_cpu;          /* --cpu */
    const char *bench_pp, *bench_npl; /* --bench-pp LIST, --bench-npl LIST */
    int32_t gpu;             /* --gpu N; -1: the first GPU if there is one */
    int32_t ctx;             /* -c; 0: the model's (perplexity: PPL_CTX) */
    run_gen_opts gen;
} run_opts;

/* --perplexity's window when -c is not given (llama-perplexity's). */
#define PPL_CTX 512

static const char USAGE[] = "usage: llmq-run -m MODEL [MODE] [options]\n";

static const char EPILOG[] =
    "Generated text goes to stdout; logs and timings to stderr.\n"
    "Exit status: 0 done, 1 the work failed, 2 the command line is wrong.\n";

/* A generation's parameters default to the protocol's native set
 * (proto/job_params.h, docs/PROTOCOL.md §4), so that a prompt gives the
 * same text here as in a queue job that sets nothing: greedy, seed 0. */
#define NATIVE_SAMPLER(name) g->sampling.name = d.name;
#define NATIVE_REQUEST(name)
#define NATIVE_CONSTRAINT(name)
#define NATIVE(name, kind, lo, hi, lo_open, dflt, engine) NATIVE_##engine(name)

static void default_opts(run_opts *o)
{
    *o = (run_opts){.gpu = -1};
    run_gen_opts *g = &o->gen;
    const job_params d = job_params_default();
    g->n_predict = (int32_t)d.max_tokens;
    g->sampling = sampler_default_params();
    JOB_PARAMS(NATIVE)
    g->engine = engine_default_config();
    g->logprobs = -1;
    g->bench_reps = 3;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    g->threads = cores > 0 ? (int32_t)cores : 1;
}

/* The mode the flags chose: one mode flag at most, or -p alone. */
static int choose_mode(run_opts *o, llmq_err *err)
{
    const struct {
        bool given;
        run_mode mode;
        const char *flag;
    } modes[] = {
        {o->tokenize, MODE_TOKENIZE, "--tokenize"},
        {o->ids != NULL, MODE_DETOKENIZE, "--detokenize"},
        {o->gen.parallel > 0, MODE_PARALLEL, "--parallel"},
        {o->gen.ppl_file != NULL, MODE_PERPLEXITY, "--perplexity"},
        {o->bench, MODE_BENCH, "--bench"},
        {o->render_only, MODE_RENDER, "--render-only"},
    };
    const char *chosen = NULL;
    o->mode = MODE_NONE;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (!modes[i].given)
            continue;
        if (chosen)
            return llmq_errf(err, "%s and %s: only one mode at a time", chosen, modes[i].flag);
        chosen = modes[i].flag;
        o->mode = modes[i].mode;
    }
    if (o->mode == MODE_NONE && (o->gen.prompt || o->messages))
        o->mode = MODE_GENERATE;
    if (o->mode == MODE_NONE)
        return llmq_errf(err, "no mode given (-p TEXT, --messages FILE, --parallel, --perplexity,"
                              " --bench, --tokenize or --detokenize)");
    return 0;
}

/* --messages goes with generation, --tokenize and --render-only, and in
 * place of a text: special tokens and BOS are the template's to write. */
static int check_messages(const run_opts *o, llmq_err *err)
{
    const run_gen_opts *g = &o->gen;
    if (!o->messages)
        return o->render_only || o->chat_template
                   ? llmq_errf(err, "--render-only and --chat-template go with --messages FILE")
                   : 0;
    if (o->mode != MODE_GENERATE && o->mode != MODE_TOKENIZE && o->mode != MODE_RENDER)
        return llmq_errf(err, "--messages goes with generation, --tokenize and --render-only");
    if (g->prompt || g->prompt_file)
        return llmq_errf(err, "--messages is the prompt: not with -p or -f");
    if (o->no_parse_special || o->no_bos)
        return llmq_errf(err, "--no-parse-special and --no-bos do not go with --messages: special"
                              " tokens come from the template only, and so does BOS");
    return 0;
}

/* Integers separated by spaces, commas or brackets ("1 2 3", "[1, 2, 3]",
 * "512,2048"), each in lo..hi, into a new array (--detokenize's ids,
 * --bench's lists).  -1 with *bad at the text that is no such integer, or
 * with *bad NULL when out of memory. */
static int parse_int_list(const char *s, int64_t lo, int64_t hi, int32_t **ids, size_t *n,
                          const char **bad)
{
    size_t cap = strlen(s) / 2 + 1, k = 0;
    int32_t *out = malloc(cap * sizeof *out);
    *bad = NULL;
    if (!out)
        return -1;
    while (*s) {
        if (strchr(" \t\n,[]", *s)) {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (end == s || errno || x < lo || x > hi || !strchr(" \t\n,[]", *end)) {
            *bad = s;
            free(out);
            return -1;
        }
        out[k++] = (int32_t)x;
        s = end;
    }
    *ids = out;
    *n = k;
    return 0;
}

/* A --bench list of 1..RUN_BENCH_MAX_CASES integers in [lo, hi] into out,
 * naming flag in an error. */
static int parse_sizes(const char *text, const char *flag, int32_t lo, int32_t hi, int32_t *out,
                       int *n, llmq_err *err)
{
    int32_t *v;
    size_t k;
    const char *bad;
    if (parse_int_list(text, lo, hi, &v, &k, &bad) != 0)
        return bad ? llmq_errf(err, "%s: '%s' is not a list of numbers in %d..%d", flag, text, lo,
                               hi)
                   : llmq_errf(err, "%s: out of memory", flag);
    const bool fits = k >= 1 && k <= RUN_BENCH_MAX_CASES;
    if (fits)
        memcpy(out, v, k * sizeof *v);
    free(v);
    *n = (int)k;
    return fits ? 0
                : llmq_errf(err, "%s: 1 to %d values (%zu given)", flag, RUN_BENCH_MAX_CASES, k);
}

/* --bench-pp and --bench-npl: lists for --bench alone; npl's 0 stands alone. */
static int check_bench_lists(run_opts *o, llmq_err *err)
{
    run_gen_opts *g = &o->gen;
    if ((o->bench_pp || o->bench_npl) && o->mode != MODE_BENCH)
        return llmq_errf(err, "--bench-pp and --bench-npl go with --bench");
    if (o->bench_pp &&
        parse_sizes(o->bench_pp, "--bench-pp", 1, 1 << 20, g->bench_pp, &g->n_bench_pp, err) != 0)
        return -1;
    if (o->bench_npl &&
        parse_sizes(o->bench_npl, "--bench-npl", 0, 4096, g->bench_npl, &g->n_bench_npl, err) != 0)
        return -1;
    for (int i = 0; i < g->n_bench_npl; i++)
        if (g->bench_npl[i] == 0 && g->n_bench_npl > 1)
            return llmq_errf(err, "--bench-npl: 0 (no decode cases) goes alone");
    return 0;
}

/* One sampling flag's value against its job parameter's range (lo_open:
 * lo itself refused); floats shown to their precision, integers whole. */
static int sampling_in_range(const char *name, bool is_float, double v, double lo, double hi,
                             bool lo_open, llmq_err *err)
{
    if ((lo_open ? v > lo : v >= lo) && v <= hi)
        return 0;
    /* the flag is the parameter's name with dashes, but for --temp */
    char flag[32];
    snprintf(flag, sizeof flag, "%s", strcmp(name, "temperature") ? name : "temp");
    for (char *c = flag; *c; c++)
        *c = *c == '_' ? '-' : *c;
    return llmq_errf(err, "--%s: %.*g is out of range %s%.10g, %.10g], as a queue job's %s", flag,
                     is_float ? 7 : 17, v, lo_open ? "(" : "[", lo, hi, name);
}

/* The sampling flags in the ranges a queue job's parameters take
 * (proto/job_params.h), so that what runs here runs as a job: --temp 150 is
 * refused as the broker refuses temperature 150. */
static int check_sampling(const sampler_params *sp, llmq_err *err)
{
#define RANGE_SAMPLER(name, kind, lo, hi, lo_open)                                             \
    if (sampling_in_range(#name, strcmp(#kind, "F32") == 0, (double)sp->name, lo, hi, lo_open, \
                          err) != 0)                                                           \
        return -1;
#define RANGE_REQUEST(name, kind, lo, hi, lo_open)
#define RANGE_CONSTRAINT(name, kind, lo, hi, lo_open)
#define RANGE(name, kind, lo, hi, lo_open, dflt, engine) RANGE_##engine(name, kind, lo, hi, lo_open)
    JOB_PARAMS(RANGE)
#undef RANGE
#undef RANGE_CONSTRAINT
#undef RANGE_REQUEST
#undef RANGE_SAMPLER
    return 0;
}

/* Whether the options fit the mode and each other; settles what depends on
 * more than one (the context, the KV type). */
static int check_opts(void *opts, llmq_err *err)
{
    run_opts *o = opts;
    run_gen_opts *g = &o->gen;
    const bool text = g->prompt || g->prompt_file;
    if (choose_mode(o, err) != 0)
        return -1;
    if (o->force_cpu && o->gpu >= 0)
        return llmq_errf(err, "--cpu and --gpu exclude each other");
#ifndef LLMQ_HAVE_CUDA
    if (o->gpu >= 0)
        return llmq_errf(err, "--gpu: this llmq-run was built without CUDA");
#endif
    if (check_messages(o, err) != 0 || check_bench_lists(o, err) != 0 ||
        check_sampling(&g->sampling, err) != 0)
        return -1;
    if (o->mode == MODE_TOKENIZE && !o->messages && !g->prompt == !g->prompt_file)
        return llmq_errf(err,
                         "--tokenize needs exactly one of -p TEXT, -f FILE and --messages FILE");
    if (o->mode == MODE_PARALLEL && (!g->prompt_file || g->prompt))
        return llmq_errf(err, "--parallel needs -f FILE (one prompt per line) and no -p");
    if ((o->mode == MODE_DETOKENIZE || o->mode == MODE_PERPLEXITY || o->mode == MODE_BENCH) && text)
        return llmq_errf(err, "-p and -f go with generation, --parallel and --tokenize");
    if (o->mode == MODE_GENERATE && g->prompt_file)
        return llmq_errf(err, "-f goes with --parallel or --tokenize; give the prompt with -p");
    if (g->logprobs_exact && g->logprobs < 0)
        return llmq_errf(err, "--logprobs-exact goes with --logprobs N");
    if (g->json_schema && g->json_object)
        return llmq_errf(err, "--json-schema and --json-object exclude each other");
    if ((g->json_schema || g->json_object) &&
        (g->ignore_eos || (o->mode != MODE_GENERATE && o->mode != MODE_PARALLEL)))
        return llmq_errf(err, "--json-schema and --json-object go with -p or --parallel, and not"
                              " with --ignore-eos (the schema decides where the output ends)");
    /* Each sequence running takes a row of every forward pass. */
    if (o->mode == MODE_PARALLEL && g->engine.max_batch_tokens < g->parallel)
        return llmq_errf(err,
                         "--batch %d is less than --parallel %d: every sequence running"
                         " takes a token of each forward pass",
                         g->engine.max_batch_tokens, g->parallel);
    g->ppl_ctx = o->ctx ? o->ctx : PPL_CTX;
    if (o->mode != MODE_PERPLEXITY)
        g->engine.n_ctx = o->ctx;
    if (o->kv_f32 && o->kv_f16)
        return llmq_errf(err, "--kv-f32 and --kv-f16 ask for two different KV caches: give one");
    if (o->kv_f32 || o->kv_f16)
        g->engine.kv_type = o->kv_f32 ? BE_KV_F32 : BE_KV_F16;
    g->engine.prefix_cache = !o->no_prefix_cache;
    return sampler_check_params(&g->sampling, err);
}

/* CLI_RUN, or the status to exit with at once (--help, bad usage). */
static int parse_args(int argc, char **argv, run_opts *o)
{
    default_opts(o);
    run_gen_opts *g = &o->gen;
    sampler_params *sp = &g->sampling;
    const cli_flag flags[] = {
        {"model", 'm', "FILE", "the GGUF model file (required)", CLI_TEXT(&o->model),
         .required = true},
        CLI_HEADING("modes:"),
        {"prompt", 'p', "TEXT",
         "generate a continuation of TEXT, streamed to stdout (default mode)",
         CLI_TEXT(&g->prompt)},
        {"parallel", 0, "N", "run the prompts of -f FILE (one per line) N at a time in one batch",
         CLI_INT32(&g->parallel, 1, 4096)},
        {"perplexity", 0, "FILE",
         "perplexity of FILE's text as llama-perplexity computes it (-c CTX)",
         CLI_TEXT(&g->ppl_file)},
        {"bench", 0, NULL,
         "pp512, tg128 and decode tok/s at 1, 8, 64 sequences (table + JSON); on a GPU at 1, 8,"
         " 32, 64, 128, 256 sequences of 512-token prompts",
         CLI_SWITCH(&o->bench)},
        {"tokenize", 0, NULL, "print the ids of the text of -p or -f, space-separated",
         CLI_SWITCH(&o->tokenize)},
        {"detokenize", 0, "IDS", "print the text of IDS (separated by spaces or commas)",
         CLI_TEXT(&o->ids)},
        {"messages", 0, "FILE",
         "a chat: FILE is a JSON array of {\"role\", \"content\"}, rendered by the model's chat"
         " template into the prompt (generation, --tokenize, --render-only)",
         CLI_TEXT(&o->messages)},
        {"render-only", 0, NULL, "print the prompt --messages renders, byte for byte, and exit",
         CLI_SWITCH(&o->render_only)},
        {"chat-template", 0, "NAME|FILE",
         "render --messages with this template: a built-in one (chatml, llama2, llama3, llama3.1,"
         " mistral-v0.3, phi3, qwen2.5, qwen3) or a Jinja file (default: the model's"
         " tokenizer.chat_template)",
         CLI_TEXT(&o->chat_template)},
        CLI_HEADING("generation:"),
        {"n-predict", 'n', "N", "tokens to generate at most (default 256)",
         CLI_INT32(&g->n_predict, 1, 1 << 24)},
        {"temp", 0, "T", "temperature; 0 is greedy (default 0, as a queue job's)",
         CLI_FLOAT(&sp->temperature, -FLT_MAX, FLT_MAX)},
        {"top-k", 0, "K", "keep the K most likely tokens; 0 off (default 0)",
         CLI_INT32(&sp->top_k, 0, INT32_MAX)},
        {"top-p", 0, "P", "nucleus sampling; 1 off (default 1)",
         CLI_FLOAT(&sp->top_p, -FLT_MAX, FLT_MAX)},
        {"min-p", 0, "P", "drop tokens below P x the top probability; 0 off (default 0)",
         CLI_FLOAT(&sp->min_p, -FLT_MAX, FLT_MAX)},
        {"repeat-penalty", 0, "F",
         "penalize the tokens of the last --repeat-last-n: their logits divided by F"
         " (negative ones multiplied); 1 off (default 1)",
         CLI_FLOAT(&sp->repeat_penalty, -FLT_MAX, FLT_MAX)},
        {"presence-penalty", 0, "F",
         "subtract F from the logits of those tokens; 0 off (default 0)",
         CLI_FLOAT(&sp->presence_penalty, -FLT_MAX, FLT_MAX)},
        {"frequency-penalty", 0, "F",
         "subtract F from them per occurrence of the token; 0 off (default 0)",
         CLI_FLOAT(&sp->frequency_penalty, -FLT_MAX, FLT_MAX)},
        {"repeat-last-n", 0, "N",
         "how many tokens back the penalties look; 0 off, -1 all (default 64)",
         CLI_INT32(&sp->repeat_last_n, -1, INT32_MAX)},
        {"seed", 0, "S", "random seed (default 0, as a queue job's: the same text every run)",
         CLI_UINT64(&sp->seed, 0, UINT64_MAX)},
        {"stop", 0, "TEXT", "stop when TEXT appears (repeatable, at most 16)",
         CLI_LIST(g->stop, &g->n_stop, ENGINE_MAX_STOPS, 1, 0)},
        {"ignore-eos", 0, NULL, "keep generating past end-of-generation tokens",
         CLI_SWITCH(&g->ignore_eos)},
        {"json-schema", 0, "FILE",
         "output JSON that follows the JSON schema in FILE (OpenAI's strict structured-outputs"
         " subset)",
         CLI_TEXT(&g->json_schema)},
        {"json-object", 0, NULL, "output a JSON object (any)", CLI_SWITCH(&g->json_object)},
        {"logprobs", 0, "N",
         "after the text, each token's log-probability and the N likeliest tokens' (0..20),"
         " under the raw logits",
         CLI_INT32(&g->logprobs, 0, ENGINE_MAX_TOP_LOGPROBS)},
        {"logprobs-exact", 0, NULL,
         "print --logprobs' values as hex floats (C99 %a), every bit: two builds' outputs then"
         " compare with cmp",
         CLI_SWITCH(&g->logprobs_exact)},
        CLI_HEADING("engine:"),
        {"gpu", 0, "N",
         "run on CUDA device N (default: device 0 when built with CUDA and a GPU is there, else"
         " the CPU)",
         CLI_INT32(&o->gpu, 0, 1023)},
        {"cpu", 0, NULL, "run on the CPU even when a GPU is there", CLI_SWITCH(&o->force_cpu)},
        {"threads", 't', "N", "CPU threads (default: all cores)", CLI_INT32(&g->threads, 1, 1024)},
        {"ctx", 'c', "N", "context per sequence (default: the model's; perplexity: 512)",
         CLI_INT32(&o->ctx, 4, 1 << 24)},
        {"ctx-size", 0, "N", "the same as --ctx (llama.cpp's name)",
         CLI_INT32(&o->ctx, 4, 1 << 24)},
        {"batch", 0, "N", "tokens per forward pass (default 512); with --parallel N, at least N",
         CLI_INT32(&g->engine.max_batch_tokens, 1, 1 << 16)},
        {"kv-blocks", 0, "N",
         "KV cache blocks of 16 tokens (default: enough for every sequence, at most 90% of the"
         " memory left after the weights)",
         CLI_INT32(&g->engine.n_blocks, 1, INT32_MAX)},
        {"kv-f16", 0, NULL,
         "keep the KV cache in f16, 2 bytes a value (default q8_0: 34 bytes per 32 values, half"
         " the memory and the attention reads; f16 where a model's KV rows are no multiple of 32)",
         CLI_SWITCH(&o->kv_f16)},
        {"kv-f32", 0, NULL, "keep the KV cache in f32 (the CPU only)", CLI_SWITCH(&o->kv_f32)},
        {"no-prefix-cache", 0, NULL,
         "compute every prompt in full, even the blocks it shares with an earlier one (the"
         " output is the same; --bench never shares)",
         CLI_SWITCH(&o->no_prefix_cache)},
        {"reps", 0, "N", "benchmark repetitions, the median is reported (default 3)",
         CLI_INT32(&g->bench_reps, 1, 32)},
        {"json", 0, "FILE", "write the benchmark's JSON to FILE instead of stdout",
         CLI_TEXT(&g->bench_json)},
        {"bench-pp", 0, "LIST",
         "--bench's prefill prompt lengths, comma-separated, as llama-bench's -p (default 512)",
         CLI_TEXT(&o->bench_pp)},
        {"bench-npl", 0, "LIST",
         "--bench's decode sequence counts, comma-separated, as llama-batched-bench's -npl"
         " (default 1,8,32,64,128,256 on a GPU, 1,8,64 on the CPU; 0: none)",
         CLI_TEXT(&o->bench_npl)},
        CLI_HEADING("tokenizer:"),
        {"file", 'f', "FILE", "the text to tokenize (or the prompts of --parallel)",
         CLI_TEXT(&g->prompt_file)},
        {"no-parse-special", 0, NULL, "take special tokens written in the text (e.g. <s>) as text",
         CLI_SWITCH(&o->no_parse_special)},
        {"no-bos", 0, NULL, "do not add BOS even if the model asks for it", CLI_SWITCH(&o->no_bos)},
    };
    const cli_spec spec = {.program = "llmq-run",
                           .usage = USAGE,
                           .epilog = EPILOG,
                           .flags = flags,
                           .n_flags = CLI_COUNT(flags),
                           .check = check_opts,
                           .check_ctx = o};
    return cli_read(&spec, argc, argv);
}

static int run_tokenize(const run_opts *o, const tok_vocab *v)
{
    size_t len;
    char *owned = NULL;
    const char *text = o->gen.prompt;
    if (o->gen.prompt_file) {
        llmq_err err;
        if (file_read_all(o->gen.prompt_file, &owned, &len, &err) != 0) {
            fprintf(stderr, "llmq-run: %s\n", err.msg);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    /* llama-tokenize's add_special: BOS when the model asks, and then EOS too
     * if it asks for that. */
    bool special = !o->no_bos && tok_add_bos(v);
    int32_t *ids;
    size_t n;
    llmq_err err = {0};
    int rc = tok_encode(v, text, len, special, !o->no_parse_special, &ids, &n, &err);
    free(owned);
    if (rc < 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s%" PRId32, i ? " " : "", ids[i]);
    if (special && tok_add_eos(v))
        printf("%s%" PRId32, n ? " " : "", tok_eos(v));
    printf("\n");
    free(ids);
    return 0;
}

static int run_detokenize(const run_opts *o, const tok_vocab *v)
{
    int32_t *ids;
    size_t n, len;
    char *text;
    llmq_err err = {0};
    const char *bad;
    if (parse_int_list(o->ids, INT32_MIN, INT32_MAX, &ids, &n, &bad) < 0) {
        if (bad)
            fprintf(stderr, "llmq-run: --detokenize: '%s' is not a token id\n", bad);
        else
            fprintf(stderr, "llmq-run: --detokenize: out of memory\n");
        return 1;
    }
    int rc = tok_detokenize(v, ids, n, TOK_STRIP_SPACE, &text, &len, &err);
    free(ids);
    if (rc < 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        return 1;
    }
    fwrite(text, 1, len, stdout);
    printf("\n");
    free(text);
    return 0;
}

/* ---- --messages: a chat rendered by the model's template ---- */

/* One message of the file: exactly a role and a content, both strings. */
static int read_message(const json_value *m, size_t i, chat_message *out, llmq_err *err)
{
    const json_value *role = json_get(m, "role"), *content = json_get(m, "content");
    if (m->type != JSON_OBJECT || m->obj.n != 2 || !role || !content || role->type != JSON_STRING ||
        content->type != JSON_STRING)
        return llmq_errf(err, "messages[%zu]: must be {\"role\": string, \"content\": string}", i);
    *out = (chat_message){role->str.s, role->str.len, content->str.s, content->str.len};
    return 0;
}

/* FILE's messages (pointing into *doc, which the caller frees). */
static int read_messages(const char *path, json_value **doc, chat_message **msgs, size_t *n,
                         llmq_err *err)
{
    char *text;
    size_t len;
    *doc = NULL;
    *msgs = NULL;
    if (file_read_all(path, &text, &len, err) != 0)
        return -1;
    int rc = json_parse(text, len, doc, err);
    free(text);
    if (rc == 0 && ((*doc)->type != JSON_ARRAY || (*doc)->arr.n == 0))
        rc = llmq_errf(err, "not a non-empty JSON array of messages");
    if (rc == 0 && !(*msgs = calloc((*doc)->arr.n, sizeof **msgs)))
        rc = llmq_errf(err, "out of memory");
    for (size_t i = 0; rc == 0 && i < (*doc)->arr.n; i++)
        rc = read_message(&(*doc)->arr.items[i], i, &(*msgs)[i], err);
    *n = rc == 0 ? (*doc)->arr.n : 0;
    return rc == 0 ? 0 : llmq_err_prefix(err, "%s", path);
}

/* --messages rendered for the model of f and v, with --chat-template's
 * template or the model's own, as llmq-worker renders a chat job. */
static int render_messages(const run_opts *o, const gguf_file *f, const tok_vocab *v,
                           chat_prompt *out, llmq_err *err)
{
    json_value *doc;
    chat_message *msgs;
    size_t n;
    chat_template *t = NULL;
    memset(out, 0, sizeof *out);
    int rc = read_messages(o->messages, &doc, &msgs, &n, err);
    if (rc == 0)
        rc = chat_template_open(&t, o->chat_template, f, err);
    if (rc == 0)
        rc = chat_render_for(t, v, msgs, n, out, err);
    chat_template_free(t);
    free(msgs);
    json_free(doc);
    return rc;
}

/* The ids of the rendered chat, control tokens from the template only. */
static int chat_ids(const run_opts *o, const gguf_file *f, const tok_vocab *v, int32_t **ids,
                    size_t *n, llmq_err *err)
{
    chat_prompt p;
    int rc = render_messages(o, f, v, &p, err);
    if (rc == 0)
        rc = chat_tokenize(&p, v, ids, n, err);
    chat_prompt_free(&p);
    return rc;
}

/* --render-only, or --tokenize of --messages. */
static int run_chat_mode(const run_opts *o, const gguf_file *f, const tok_vocab *v)
{
    llmq_err err = {0};
    chat_prompt p;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = o->mode == MODE_RENDER ? render_messages(o, f, v, &p, &err)
                                    : chat_ids(o, f, v, &ids, &n, &err);
    if (rc != 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        return 1;
    }
    if (o->mode == MODE_RENDER) {
        fwrite(p.text, 1, p.len, stdout);
        chat_prompt_free(&p);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s%" PRId32, i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

/* The tokenizer modes need only the vocabulary (vocab-only files work). */
static int run_tokenizer_mode(const run_opts *o)
{
    llmq_err err = {0};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(&f, o->model, &err) < 0 || tok_load(&v, f, &err) < 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    int rc = o->messages                ? run_chat_mode(o, f, v)
             : o->mode == MODE_TOKENIZE ? run_tokenize(o, v)
                                        : run_detokenize(o, v);
    tok_free(v);
    gguf_close(f);
    return rc;
}

/* --gpu N, or by default the first GPU when there is one, else the CPU. */
static int make_backend(const run_opts *o, backend **be, llmq_err *err)
{
    const backend_request req = {.cpu_only = o->force_cpu, .gpu = o->gpu,
                                 .threads = o->gen.threads};
    char fallback[LLMQ_ERR_MAX];
    int gpu_used;
    if (backend_select(be, &req, &gpu_used, fallback, sizeof fallback, err) != 0)
        return -1;
    if (fallback[0])
        fprintf(stderr, "llmq-run: %s; running on the CPU\n", fallback);
    return 0;
}

static int run_engine_of(const run_opts *o, model *m, const tok_vocab *v)
{
    switch (o->mode) {
    case MODE_GENERATE: return run_generate(&o->gen, m, v);
    case MODE_PARALLEL: return run_parallel(&o->gen, m, v);
    case MODE_PERPLEXITY: return run_perplexity(&o->gen, m, v);
    case MODE_BENCH: return run_bench(&o->gen, m, v);
    default: return 1;
    }
}

static int run_engine_mode(run_opts *o)
{
    llmq_err err = {0};
    backend *be = NULL;
    model *m = NULL;
    tok_vocab *v = NULL;
    if (make_backend(o, &be, &err) != 0 || model_load(&m, o->model, be, &err) != 0 ||
        tok_load(&v, model_gguf(m), &err) != 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        model_free(m);
        backend_destroy(be);
        return 1;
    }
    const model_config *c = model_get_config(m);
    fprintf(stderr,
            "llmq-run: %s: %s, %s, %d layers, dim %d, %d heads (%d kv), vocab %d, %.1f MB "
            "%s; %s\n",
            o->model, c->name, c->arch, c->n_layers, c->dim, c->n_head, c->n_head_kv, c->n_vocab,
            c->weight_bytes / 1e6, quant_type_name(c->weight_type), be->name);
    if (o->mode == MODE_GENERATE || o->mode == MODE_PARALLEL)
        fprintf(stderr, "llmq-run: seed %llu\n", (unsigned long long)o->gen.sampling.seed);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 1;
    if (o->messages && chat_ids(o, model_gguf(m), v, &ids, &n_ids, &err) != 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
    } else {
        o->gen.prompt_ids = ids;
        o->gen.n_prompt_ids = n_ids;
        rc = run_engine_of(o, m, v);
    }
    free(ids);
    tok_free(v);
    model_free(m);
    backend_destroy(be);
    return rc;
}

int main(int argc, char **argv)
{
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_RUN)
        return rc;
    if (o.mode == MODE_TOKENIZE || o.mode == MODE_DETOKENIZE || o.mode == MODE_RENDER)
        rc = run_tokenizer_mode(&o);
    else
        rc = run_engine_mode(&o);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "llmq-run: cannot write the output\n");
        rc = 1;
    }
    return rc;
}
