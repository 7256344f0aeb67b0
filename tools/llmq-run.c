/* llmq-run: run a model file from the command line, one mode per call.
 *
 * Modes today: --tokenize (ids of a text, space-separated on one line, as
 * llama.cpp's llama-tokenize: BOS when the model asks for it, special tokens
 * in the text parsed unless --no-parse-special) and --detokenize IDS (the
 * text of ids).  Both need only the tokenizer metadata, so they work on
 * vocabulary-only GGUF files.  A new mode is a value of run_mode, its options
 * in parse_args, and one run_* function called from main.
 *
 * Exit status: 0 done, 1 the work failed (unreadable model, bad ids), 2 the
 * command line is wrong. */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "worker/model/gguf.h"
#include "worker/model/tokenizer.h"

#define EXIT_USAGE 2

typedef enum run_mode {
    MODE_NONE,
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
} run_opts;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: llmq-run -m MODEL MODE [options]\n"
            "\n"
            "modes:\n"
            "  --tokenize            print the ids of the text of -p or -f, space-separated\n"
            "  --detokenize IDS      print the text of IDS (separated by spaces or commas)\n"
            "\n"
            "options:\n"
            "  -m, --model FILE      GGUF model (a vocabulary-only file is enough)\n"
            "  -p, --prompt TEXT     the text to tokenize\n"
            "  -f, --file FILE       read the text to tokenize from FILE, as it is\n"
            "      --no-parse-special  take special tokens written in the text (e.g. <s>) as text\n"
            "      --no-bos          do not add BOS even if the model asks for it\n"
            "  -h, --help            show this help\n");
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

/* 0: run; -1: help was printed; EXIT_USAGE: the command line is wrong. */
static int parse_args(int argc, char **argv, run_opts *o)
{
    enum { OPT_TOKENIZE = 256, OPT_DETOKENIZE, OPT_NO_PARSE_SPECIAL, OPT_NO_BOS };
    static const struct option k_long[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt", required_argument, NULL, 'p'},
        {"file", required_argument, NULL, 'f'},
        {"tokenize", no_argument, NULL, OPT_TOKENIZE},
        {"detokenize", required_argument, NULL, OPT_DETOKENIZE},
        {"no-parse-special", no_argument, NULL, OPT_NO_PARSE_SPECIAL},
        {"no-bos", no_argument, NULL, OPT_NO_BOS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (run_opts){.parse_special = true, .bos = true};
    opterr = 0; /* our own messages, below */
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, ":m:p:f:h", k_long, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case OPT_TOKENIZE: rc = set_mode(o, MODE_TOKENIZE, "--tokenize"); break;
        case OPT_DETOKENIZE:
            rc = set_mode(o, MODE_DETOKENIZE, "--detokenize");
            o->ids = optarg;
            break;
        case OPT_NO_PARSE_SPECIAL: o->parse_special = false; break;
        case OPT_NO_BOS: o->bos = false; break;
        case 'h': usage(stdout); return -1;
        case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (rc)
        return rc;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->mode == MODE_NONE)
        return usage_error("%s", "no mode given (--tokenize or --detokenize)");
    if (!o->model)
        return usage_error("%s", "no model given (-m FILE)");
    if (o->mode == MODE_TOKENIZE && !o->prompt == !o->prompt_file)
        return usage_error("%s", "--tokenize needs exactly one of -p TEXT and -f FILE");
    if (o->mode != MODE_TOKENIZE && (o->prompt || o->prompt_file))
        return usage_error("%s", "-p and -f go with --tokenize");
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int run_tokenize(const run_opts *o, const tok_vocab *v)
{
    size_t len;
    char *owned = NULL;
    const char *text = o->prompt;
    if (o->prompt_file) {
        owned = read_file(o->prompt_file, &len);
        if (!owned) {
            fprintf(stderr, "llmq-run: cannot read %s\n", o->prompt_file);
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

int main(int argc, char **argv)
{
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    llmq_err err = {{0}};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    if (gguf_open(&f, o.model, &err) < 0 || tok_load(&v, f, &err) < 0) {
        fprintf(stderr, "llmq-run: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    switch (o.mode) {
    case MODE_TOKENIZE: rc = run_tokenize(&o, v); break;
    case MODE_DETOKENIZE: rc = run_detokenize(&o, v); break;
    case MODE_NONE: break;
    }
    tok_free(v);
    gguf_close(f);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "llmq-run: cannot write the output\n");
        rc = 1;
    }
    return rc;
}
