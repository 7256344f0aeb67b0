/* bench-grammar: the cost of grammar-constrained decoding on the host.
 *
 * For each vocabulary given (default: the 128k Llama-3 BPE one and the 32k
 * Llama SentencePiece one) and each grammar (a JSON schema with nested
 * objects, arrays, enums, strings and numbers; json_object mode), a fixed
 * document is written token by token as a model under the grammar could
 * write it: at each step the allowed token with the longest piece that
 * continues the document.  Per step the mask of the state is looked up
 * (tokenmask_get) and applied to a row of logits (tokenmask_apply).
 *   new state: a lookup that computes a mask (the cache is new at each
 *              run), i.e. one walk of the vocabulary's trie;
 *   cached step: lookup and apply once the run has seen every state.
 * Figures are medians over RUNS runs of every such step, in thread CPU time
 * so that other load on the machine does not count; the slowest new state
 * (inside a string, where almost every token is allowed) is given too.
 * Usage: bench-grammar [VOCAB.gguf ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/jsonschema.h"
#include "engine/tokenmask.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

#define RUNS 5
#define MAX_STEPS 512

static const char *const k_default_vocabs[] = {
    "/work/shared/models/vocab/ggml-vocab-llama-bpe.gguf",
    "tests/data/vocab/ggml-vocab-llama-spm.gguf",
};

static const char k_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
    "\"email\": {\"type\": \"string\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"math\", \"poetry\", \"music\"]}},"
    "\"address\": {\"type\": \"object\", \"properties\": {\"street\": {\"type\": \"string\"},"
    "  \"city\": {\"type\": \"string\"}, \"zip\": {\"type\": \"string\"}},"
    "  \"required\": [\"street\", \"city\", \"zip\"], \"additionalProperties\": false},"
    "\"active\": {\"type\": \"boolean\"}, \"score\": {\"type\": \"number\"},"
    "\"nickname\": {\"type\": [\"string\", \"null\"]}},"
    "\"required\": [\"name\", \"age\", \"tags\", \"address\", \"active\", \"score\", \"nickname\"],"
    "\"additionalProperties\": false}";

static const char k_schema_doc[] =
    "{\"name\": \"Ada Lovelace\", \"age\": 36, \"tags\": [\"math\", \"poetry\"], "
    "\"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", \"zip\": "
    "\"SW1Y 4JH\"}, \"active\": true, \"score\": 9.75, \"nickname\": null}";

static const char k_object_doc[] =
    "{\"id\": 7, \"items\": [{\"sku\": \"A-1\", \"qty\": 2, \"price\": 3.5}, {\"sku\": "
    "\"B-22\", \"qty\": 1, \"price\": 10}], \"meta\": {\"source\": \"web\", \"flags\": [true, "
    "false, null], \"note\": \"caf\xc3\xa9 \\\"ok\\\"\"}}";

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The allowed token with the longest piece that continues doc at `at`. */
static int32_t longest_token(const tok_vocab *v, const tokenmask_cache *c, const tokenmask *m,
                             const grammar_stack *st, const char *doc, size_t at, size_t len)
{
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t t = 0; t < (int32_t)tok_n_vocab(v); t++) {
        size_t n;
        const char *p = tok_piece(v, t, false, &n);
        if (n > best_len && n <= len - at && memcmp(p, doc + at, n) == 0 &&
            tokenmask_allows(c, m, st, t)) {
            best = t;
            best_len = n;
        }
    }
    return best;
}

typedef struct run_times {
    double new_state[MAX_STEPS], step[MAX_STEPS];
    int n_new, n_steps;
} run_times;

/* One run: the document once with a new cache (timing the lookups that
 * compute), then once more (timing lookup + apply). */
static int run(const grammar *g, const tokenmask_vocab *tv, const tok_vocab *v, const char *doc,
               float *logits, run_times *t, int32_t *tokens, llmq_err *err)
{
    tokenmask_cache *c;
    if (tokenmask_cache_new(&c, g, tv, err) != 0)
        return -1;
    const size_t len = strlen(doc);
    int32_t n_tok = 0;
    grammar_stack st;
    grammar_start(g, &st);
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < len && n_tok < MAX_STEPS;) {
        tokenmask m;
        const uint64_t before = tokenmask_get_stats(c).computed;
        const double t0 = now_us();
        rc = tokenmask_get(c, &st, &m, err);
        if (rc == 0 && tokenmask_get_stats(c).computed > before)
            t->new_state[t->n_new++] = now_us() - t0;
        const int32_t tok = rc ? -1 : longest_token(v, c, &m, &st, doc, at, len);
        if (rc == 0 && (tok < 0 || !tokenmask_accept(c, &st, tok)))
            rc = llmq_errf(err, "no allowed token continues the document at byte %zu", at);
        size_t n = 0;
        tok_piece(v, tok, false, &n);
        at += n;
        tokens[n_tok++] = tok;
    }
    grammar_start(g, &st);
    for (int32_t i = 0; rc == 0 && i < n_tok; i++) {
        tokenmask m;
        const double t0 = now_us();
        rc = tokenmask_get(c, &st, &m, err);
        tokenmask_apply(c, &m, &st, logits);
        t->step[t->n_steps++] = now_us() - t0;
        tokenmask_accept(c, &st, tokens[i]);
    }
    tokenmask_cache_free(c);
    return rc;
}

static int bench(const char *name, const grammar *g, const tokenmask_vocab *tv, const tok_vocab *v,
                 const char *doc, llmq_err *err)
{
    static run_times all[RUNS];
    static double news[RUNS * MAX_STEPS], steps[RUNS * MAX_STEPS];
    static int32_t tokens[MAX_STEPS];
    float *logits = calloc(tok_n_vocab(v), sizeof *logits);
    if (!logits)
        return llmq_errf(err, "out of memory");
    int n_new = 0, n_steps = 0, rc = 0;
    for (int r = 0; rc == 0 && r < RUNS; r++) {
        all[r].n_new = all[r].n_steps = 0;
        rc = run(g, tv, v, doc, logits, &all[r], tokens, err);
        memcpy(news + n_new, all[r].new_state, (size_t)all[r].n_new * sizeof *news);
        memcpy(steps + n_steps, all[r].step, (size_t)all[r].n_steps * sizeof *steps);
        n_new += all[r].n_new;
        n_steps += all[r].n_steps;
    }
    free(logits);
    if (rc != 0)
        return -1;
    const double med_new = median(news, n_new), max_new = n_new ? news[n_new - 1] : 0;
    printf("| %-6s | %-11s | %5d | %6d | %12.3f | %12.3f | %14.1f |\n", tok_model(v), name,
           all[0].n_steps, all[0].n_new, med_new / 1e3, max_new / 1e3, median(steps, n_steps));
    return 0;
}

static int bench_vocab(const char *path, llmq_err *err)
{
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    tokenmask_vocab *tv = NULL;
    grammar *schema = NULL, *object = NULL;
    int rc = gguf_open(&f, path, err) || tok_load(&v, f, err);
    double t0 = now_us();
    rc = rc || tokenmask_vocab_new(&tv, v, err);
    const double trie_ms = (now_us() - t0) / 1e3;
    rc = rc || jsonschema_compile(&schema, k_schema, strlen(k_schema), err) ||
         jsonschema_any_object(&object, err);
    if (rc == 0) {
        printf("%s: %u tokens, trie of %d nodes built in %.1f ms\n", path, tok_n_vocab(v),
               tokenmask_vocab_nodes(tv), trie_ms);
        printf("| vocab  | grammar     | steps | states | new state ms | slowest ms   | cached "
               "step us |\n"
               "| ------ | ----------- | ----- | ------ | ------------ | ------------ | "
               "-------------- |\n");
        rc = bench("json schema", schema, tv, v, k_schema_doc, err) ||
             bench("json_object", object, tv, v, k_object_doc, err);
    }
    grammar_free(schema);
    grammar_free(object);
    tokenmask_vocab_free(tv);
    tok_free(v);
    gguf_close(f);
    return rc ? llmq_err_prefix(err, "%s", path) : 0;
}

int main(int argc, char **argv)
{
    const char *const *paths = argc > 1 ? (const char *const *)argv + 1 : k_default_vocabs;
    const int n = argc > 1 ? argc - 1 : 2;
    for (int i = 0; i < n; i++) {
        llmq_err err;
        if (bench_vocab(paths[i], &err) != 0) {
            fprintf(stderr, "bench-grammar: %s\n", err.msg);
            return 1;
        }
    }
    return 0;
}
