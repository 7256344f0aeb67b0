/* llmq-run: run a model file from the command line, one process, no queue.
 *
 * Modes: generate (-p, the default: the continuation streamed to stdout),
 * --parallel N -f FILE (many prompts through the batched engine),
 * --perplexity FILE, --bench, and --tokenize / --detokenize IDS (ids of a
 * text as llama.cpp's llama-tokenize prints them, and back; these need only
 * the tokenizer metadata, so they work on vocabulary-only GGUF files).  A new
 * mode is a value of run_mode, its options in parse_args, and one run_*
 * function called from main; the engine-driven modes live in run_engine.c.
 *
 * Exit status: 0 done, 1 the work failed (unreadable model, bad ids), 2 the
 * command line is wrong. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/err.h"
#include "common/file.h"
#include "kernels/backend.h"
#include "kernels/select.h"
#include "tools/run_engine.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

#define EXIT_USAGE 2

typedef enum run_mode {
    MODE_NONE,
    MODE_GENERATE,
    MODE_PARALLEL,
    MODE_PERPLEXITY,
    MODE_BENCH,
    MODE_TOKENIZE,
    MODE_DETOKENIZE,
} run_mode;

typedef struct run_opts {
    run_mode mode;
    const char *model;       /* -m */
    const char *prompt;      /* -p */
    const char *prompt_file; /* -f */
    const char *ids;         /* --detokenize's argument */
    bool parse_special;
    bool bos;                /* add BOS if the model asks; --no-bos clears */
    bool seeded;             /* --seed given */
    bool force_cpu;          /* --cpu */
    int32_t gpu;             /* --gpu N; -1: the first GPU if there is one */
    run_gen_opts gen;
} run_opts;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: llmq-run -m MODEL [MODE] [options]\n"
            "\n"
            "  -m, --model FILE      the GGUF model file (required)\n"
            "\n"
            "modes:\n"
            "  -p, --prompt TEXT     generate a continuation of TEXT, streamed to stdout (default mode)\n"
            "  --parallel N -f FILE  run the prompts of FILE (one per line) N at a time in one batch\n"
            "  --perplexity FILE     perplexity of FILE's text as llama-perplexity computes it (-c CTX)\n"
            "  --bench               pp512, tg128 and decode tok/s at 1, 8, 64 sequences (table + JSON);\n"
            "                        on a GPU at 1, 8, 32, 64, 128, 256 sequences of 512-token prompts\n"
            "  --tokenize            print the ids of the text of -p or -f, space-separated\n"
            "  --detokenize IDS      print the text of IDS (separated by spaces or commas)\n"
            "\n"
            "generation:\n"
            "  -n, --n-predict N     tokens to generate at most (default 256)\n"
            "      --temp T          temperature; 0 is greedy (default 0.8)\n"
            "      --top-k K         keep the K most likely tokens; 0 off (default 40)\n"
            "      --top-p P         nucleus sampling; 1 off (default 0.95)\n"
            "      --min-p P         drop tokens below P x the top probability; 0 off (default 0.05)\n"
            "      --repeat-penalty F, --presence-penalty F, --frequency-penalty F, --repeat-last-n N\n"
            "                        penalties over the last N tokens (defaults 1, 0, 0, 64)\n"
            "      --seed S          random seed (default: a new one, printed)\n"
            "      --stop TEXT       stop when TEXT appears (repeatable, at most 16)\n"
            "      --ignore-eos      keep generating past end-of-generation tokens\n"
            "      --json-schema FILE  output JSON that follows the JSON schema in FILE (OpenAI's\n"
            "                        strict structured-outputs subset)\n"
            "      --json-object     output a JSON object (any)\n"
            "\n"
            "engine:\n"
            "      --gpu N           run on CUDA device N (default: device 0 when built with\n"
            "                        CUDA and a GPU is there, else the CPU)\n"
            "      --cpu             run on the CPU even when a GPU is there\n"
            "  -t, --threads N       CPU threads (default: all cores)\n"
            "  -c, --ctx N           context per sequence (default: the model's; perplexity: 512);\n"
            "                        --ctx-size N is the same (llama.cpp's name)\n"
            "      --batch N         tokens per forward pass (default 512)\n"
            "      --kv-blocks N     KV cache blocks of 16 tokens (default: enough for every sequence,\n"
            "                        at most 90%% of the memory left after the weights)\n"
            "      --kv-f32          keep the KV cache in f32 (default f16)\n"
            "      --reps N          benchmark repetitions, the median is reported (default 3)\n"
            "      --json FILE       write the benchmark's JSON to FILE instead of stdout\n"
            "\n"
            "tokenizer:\n"
            "  -f, --file FILE       the text to tokenize (or the prompts of --parallel)\n"
            "      --no-parse-special  take special tokens written in the text (e.g. <s>) as text\n"
            "      --no-bos          do not add BOS even if the model asks for it\n"
            "  -h, --help            show this help\n"
            "\n"
            "Generated text goes to stdout; logs and timings to stderr.\n"
            "Exit status: 0 done, 1 the work failed, 2 the command line is wrong.\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "llmq-run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'llmq-run --help'.\n");
    return EXIT_USAGE;
}

static int set_mode(run_opts *o, run_mode m, const char *name)
{
    if (o->mode != MODE_NONE && o->mode != m)
        return usage_error("%s: only one mode at a time", name);
    o->mode = m;
    return 0;
}

static int parse_int(const char *opt, const char *arg, long lo, long hi, int32_t *out)
{
    int64_t v;
    llmq_err err;
    if (cli_int(opt, arg, lo, hi, &v, &err) != 0)
        return usage_error("%s", err.msg);
    *out = (int32_t)v;
    return 0;
}

static int parse_float(const char *opt, const char *arg, float *out)
{
    llmq_err err;
    return cli_float(opt, arg, out, &err) != 0 ? usage_error("%s", err.msg) : 0;
}

static void default_opts(run_opts *o)
{
    *o = (run_opts){.parse_special = true, .bos = true, .gpu = -1};
    run_gen_opts *g = &o->gen;
    g->n_predict = 256;
    g->sampling = sampler_default_params();
    g->sampling.temperature = 0.8f;
    g->sampling.top_k = 40;
    g->sampling.top_p = 0.95f;
    g->sampling.min_p = 0.05f;
    g->engine = engine_default_config();
    g->ppl_ctx = 512;
    g->bench_reps = 3;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    g->threads = cores > 0 ? (int32_t)cores : 1;
}

enum {
    OPT_TOKENIZE = 256, OPT_DETOKENIZE, OPT_NO_PARSE_SPECIAL, OPT_NO_BOS, OPT_PARALLEL,
    OPT_PERPLEXITY, OPT_BENCH, OPT_TEMP, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY,
    OPT_PRESENCE, OPT_FREQUENCY, OPT_REPEAT_LAST_N, OPT_SEED, OPT_STOP, OPT_IGNORE_EOS,
    OPT_BATCH, OPT_KV_BLOCKS, OPT_KV_F32, OPT_REPS, OPT_JSON, OPT_CPU, OPT_GPU,
    OPT_JSON_SCHEMA, OPT_JSON_OBJECT,
};

/* One option into o; 0, or EXIT_USAGE with a message. */
static int take_option(int c, const char *arg, run_opts *o, bool *ctx_given)
{
    run_gen_opts *g = &o->gen;
    sampler_params *sp = &g->sampling;
    switch (c) {
    case 'm': o->model = arg; return 0;
    case 'p': o->prompt = g->prompt = arg; return 0;
    case 'f': o->prompt_file = g->prompt_file = arg; return 0;
    case 'n': return parse_int("-n", arg, 1, 1 << 24, &g->n_predict);
    case 't': return parse_int("--threads", arg, 1, 1024, &g->threads);
    case 'c': *ctx_given = true; return parse_int("--ctx", arg, 4, 1 << 24, &g->ppl_ctx);
    case OPT_TOKENIZE: return set_mode(o, MODE_TOKENIZE, "--tokenize");
    case OPT_DETOKENIZE: o->ids = arg; return set_mode(o, MODE_DETOKENIZE, "--detokenize");
    case OPT_PARALLEL:
        return set_mode(o, MODE_PARALLEL, "--parallel") ||
               parse_int("--parallel", arg, 1, 4096, &g->parallel);
    case OPT_PERPLEXITY: g->ppl_file = arg; return set_mode(o, MODE_PERPLEXITY, "--perplexity");
    case OPT_BENCH: return set_mode(o, MODE_BENCH, "--bench");
    case OPT_NO_PARSE_SPECIAL: o->parse_special = false; return 0;
    case OPT_NO_BOS: o->bos = false; return 0;
    case OPT_TEMP: return parse_float("--temp", arg, &sp->temperature);
    case OPT_TOP_K: return parse_int("--top-k", arg, 0, INT32_MAX, &sp->top_k);
    case OPT_TOP_P: return parse_float("--top-p", arg, &sp->top_p);
    case OPT_MIN_P: return parse_float("--min-p", arg, &sp->min_p);
    case OPT_REPEAT_PENALTY: return parse_float("--repeat-penalty", arg, &sp->repeat_penalty);
    case OPT_PRESENCE: return parse_float("--presence-penalty", arg, &sp->presence_penalty);
    case OPT_FREQUENCY: return parse_float("--frequency-penalty", arg, &sp->frequency_penalty);
    case OPT_REPEAT_LAST_N: return parse_int("--repeat-last-n", arg, -1, INT32_MAX,
                                             &sp->penalty_last_n);
    case OPT_SEED: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (errno || end == arg || *end || arg[0] == '-')
            return usage_error("--seed: '%s' is not a whole number >= 0", arg);
        sp->seed = v;
        o->seeded = true;
        return 0;
    }
    case OPT_STOP:
        if (g->n_stop == ENGINE_MAX_STOPS || !arg[0])
            return usage_error("--stop: '%s': empty, or more than 16 stop strings", arg);
        g->stop[g->n_stop++] = arg;
        return 0;
    case OPT_IGNORE_EOS: g->ignore_eos = true; return 0;
    case OPT_JSON_SCHEMA: g->json_schema = arg; return 0;
    case OPT_JSON_OBJECT: g->json_object = true; return 0;
    case OPT_BATCH: return parse_int("--batch", arg, 1, 1 << 16, &g->engine.max_batch_tokens);
    case OPT_KV_BLOCKS: return parse_int("--kv-blocks", arg, 1, INT32_MAX, &g->engine.n_blocks);
    case OPT_KV_F32: g->engine.kv_type = BE_KV_F32; return 0;
    case OPT_REPS: return parse_int("--reps", arg, 1, 32, &g->bench_reps);
    case OPT_JSON: g->bench_json = arg; return 0;
    case OPT_CPU: o->force_cpu = true; return 0;
    case OPT_GPU: return parse_int("--gpu", arg, 0, 1023, &o->gpu);
    }
    return usage_error("unknown option '%s'", arg ? arg : "?");
}

/* Which mode the options chose, and whether they fit together. */
static int check_opts(run_opts *o, bool ctx_given)
{
    run_gen_opts *g = &o->gen;
    if (o->mode == MODE_NONE && o->prompt)
        o->mode = MODE_GENERATE;
    if (o->mode == MODE_NONE)
        return usage_error("%s", "no mode given (-p TEXT, --parallel, --perplexity, --bench, "
                                 "--tokenize or --detokenize)");
    if (!o->model)
        return usage_error("%s", "no model given (-m FILE)");
    if (o->force_cpu && o->gpu >= 0)
        return usage_error("%s", "--cpu and --gpu exclude each other");
#ifndef LLMQ_HAVE_CUDA
    if (o->gpu >= 0)
        return usage_error("%s", "--gpu: this llmq-run was built without CUDA");
#endif
    if (o->mode == MODE_TOKENIZE && !o->prompt == !o->prompt_file)
        return usage_error("%s", "--tokenize needs exactly one of -p TEXT and -f FILE");
    if (o->mode == MODE_PARALLEL && (!o->prompt_file || o->prompt))
        return usage_error("%s", "--parallel needs -f FILE (one prompt per line) and no -p");
    if ((o->mode == MODE_DETOKENIZE || o->mode == MODE_PERPLEXITY || o->mode == MODE_BENCH) &&
        (o->prompt || o->prompt_file))
        return usage_error("%s", "-p and -f go with generation, --parallel and --tokenize");
    if (o->mode == MODE_GENERATE && o->prompt_file)
        return usage_error("%s", "-f goes with --parallel or --tokenize; give the prompt with -p");
    if (g->json_schema && g->json_object)
        return usage_error("%s", "--json-schema and --json-object exclude each other");
    if ((g->json_schema || g->json_object) &&
        (g->ignore_eos || (o->mode != MODE_GENERATE && o->mode != MODE_PARALLEL)))
        return usage_error("%s", "--json-schema and --json-object go with -p or --parallel, and "
                                 "not with --ignore-eos (the schema decides where the output ends)");
    if (ctx_given && o->mode != MODE_PERPLEXITY)
        g->engine.n_ctx = g->ppl_ctx;
    if (g->engine.max_seqs > g->engine.max_batch_tokens || g->parallel > g->engine.max_batch_tokens)
        g->engine.max_batch_tokens = g->parallel;
    llmq_err err;
    if (sampler_check_params(&g->sampling, &err) != 0)
        return usage_error("%s", err.msg);
    if (!o->seeded) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g->sampling.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    return 0;
}

/* 0: run; -1: help was printed; EXIT_USAGE: the command line is wrong. */
static int parse_args(int argc, char **argv, run_opts *o)
{
    static const struct option k_long[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt", required_argument, NULL, 'p'},
        {"file", required_argument, NULL, 'f'},
        {"n-predict", required_argument, NULL, 'n'},
        {"threads", required_argument, NULL, 't'},
        {"ctx", required_argument, NULL, 'c'},
        {"ctx-size", required_argument, NULL, 'c'},
        {"tokenize", no_argument, NULL, OPT_TOKENIZE},
        {"detokenize", required_argument, NULL, OPT_DETOKENIZE},
        {"parallel", required_argument, NULL, OPT_PARALLEL},
        {"perplexity", required_argument, NULL, OPT_PERPLEXITY},
        {"bench", no_argument, NULL, OPT_BENCH},
        {"no-parse-special", no_argument, NULL, OPT_NO_PARSE_SPECIAL},
        {"no-bos", no_argument, NULL, OPT_NO_BOS},
        {"temp", required_argument, NULL, OPT_TEMP},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"min-p", required_argument, NULL, OPT_MIN_P},
        {"repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY},
        {"presence-penalty", required_argument, NULL, OPT_PRESENCE},
        {"frequency-penalty", required_argument, NULL, OPT_FREQUENCY},
        {"repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N},
        {"seed", required_argument, NULL, OPT_SEED},
        {"stop", required_argument, NULL, OPT_STOP},
        {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
        {"json-schema", required_argument, NULL, OPT_JSON_SCHEMA},
        {"json-object", no_argument, NULL, OPT_JSON_OBJECT},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"kv-blocks", required_argument, NULL, OPT_KV_BLOCKS},
        {"kv-f32", no_argument, NULL, OPT_KV_F32},
        {"reps", required_argument, NULL, OPT_REPS},
        {"json", required_argument, NULL, OPT_JSON},
        {"cpu", no_argument, NULL, OPT_CPU},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    default_opts(o);
    opterr = 0; /* our own messages, below */
    bool ctx_given = false;
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, ":m:p:f:n:t:c:h", k_long, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        if (c == ':')
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        if (c == '?')
            return usage_error("unknown option '%s'", argv[optind - 1]);
        rc = take_option(c, optarg, o, &ctx_given);
    }
    if (rc)
        return rc;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    return check_opts(o, ctx_given);
}

static int run_tokenize(const run_opts *o, const tok_vocab *v)
{
    size_t len;
    char *owned = NULL;
    const char *text = o->prompt;
    if (o->prompt_file) {
        llmq_err err;
        if (file_read_all(o->prompt_file, &owned, &len, &err) != 0) {
            fprintf(stderr, "llmq-run: %s\n", err.msg);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    /* llama-tokenize's add_special: BOS when the model asks, and then EOS too
     * if it asks for that. */
    bool special = o->bos && tok_add_bos(v);
    int32_t *ids;
    size_t n;
    llmq_err err = {{0}};
    int rc = tok_encode(v, text, len, special, o->parse_special, &ids, &n, &err);
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

/* Ids separated by spaces, commas or brackets ("1 2 3", "[1, 2, 3]"). */
static int parse_id_list(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = strlen(s) / 2 + 1, k = 0;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out)
        return -1;
    while (*s) {
        if (strchr(" \t\n,[]", *s)) {
            s++;
            continue;
        }
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || x < INT32_MIN || x > INT32_MAX || !strchr(" \t\n,[]", *end)) {
            fprintf(stderr, "llmq-run: --detokenize: '%s' is not a token id\n", s);
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

static int run_detokenize(const run_opts *o, const tok_vocab *v)
{
    int32_t *ids;
    size_t n, len;
    char *text;
    llmq_err err = {{0}};
    if (parse_id_list(o->ids, &ids, &n) < 0)
        return 1;
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

/* The tokenizer modes need only the vocabulary (vocab-only files work). */
static int run_tokenizer_mode(const run_opts *o)
{
    llmq_err err = {{0}};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(&f, o->model, &err) < 0 || tok_load(&v, f, &err) < 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    int rc = o->mode == MODE_TOKENIZE ? run_tokenize(o, v) : run_detokenize(o, v);
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

static int run_engine_mode(run_opts *o)
{
    llmq_err err = {{0}};
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
    fprintf(stderr, "llmq-run: %s: %s, %d layers, dim %d, %d heads (%d kv), vocab %d, %.1f MB %s; "
                    "%s\n",
            o->model, c->name, c->n_layers, c->dim, c->n_head, c->n_head_kv, c->n_vocab,
            c->weight_bytes / 1e6, quant_type_name(c->weight_type), be->name);
    if (o->mode == MODE_GENERATE || o->mode == MODE_PARALLEL)
        fprintf(stderr, "llmq-run: seed %llu\n", (unsigned long long)o->gen.sampling.seed);
    int rc = 1;
    switch (o->mode) {
    case MODE_GENERATE: rc = run_generate(&o->gen, m, v); break;
    case MODE_PARALLEL: rc = run_parallel(&o->gen, m, v); break;
    case MODE_PERPLEXITY: rc = run_perplexity(&o->gen, m, v); break;
    case MODE_BENCH: rc = run_bench(&o->gen, m, v); break;
    default: break;
    }
    tok_free(v);
    model_free(m);
    backend_destroy(be);
    return rc;
}

int main(int argc, char **argv)
{
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (o.mode == MODE_TOKENIZE || o.mode == MODE_DETOKENIZE)
        rc = run_tokenizer_mode(&o);
    else
        rc = run_engine_mode(&o);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "llmq-run: cannot write the output\n");
        rc = 1;
    }
    return rc;
}
