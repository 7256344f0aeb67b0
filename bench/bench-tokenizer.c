/* bench-tokenizer: tokenizer throughput on 1 MB of English text.
 *
 * The text is tests/data/reference/story.txt repeated to 1 MiB, tokenized in
 * one call (no BOS, no special parsing) with a SentencePiece vocabulary
 * (llama-spm) and a byte-level BPE one (gpt-2); each figure is the median of
 * several runs on one core, timed in CPU time so that other load on the
 * machine does not count.  Usage: bench-tokenizer [DATA_DIR] (default
 * $LLMQ_TEST_DATA, else tests/data). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cli.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

#define TEXT_BYTES (1u << 20)
#define RUNS 7

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* story.txt repeated (whole copies, then a cut at a line end) to ~1 MiB. */
static char *build_text(const char *dir, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/story.txt", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench-tokenizer: cannot open %s\n", path);
        return NULL;
    }
    char *story = malloc(TEXT_BYTES);
    size_t n = story ? fread(story, 1, TEXT_BYTES, f) : 0;
    fclose(f);
    char *text = n ? malloc(TEXT_BYTES + 1) : NULL;
    if (!text) {
        fprintf(stderr, "bench-tokenizer: %s is empty or memory is short\n", path);
        free(story);
        return NULL;
    }
    size_t t = 0;
    while (t + n <= TEXT_BYTES) {
        memcpy(text + t, story, n);
        t += n;
    }
    size_t rest = TEXT_BYTES - t;
    while (rest > 0 && story[rest - 1] != '\n')
        rest--;
    memcpy(text + t, story, rest);
    t += rest;
    text[t] = 0;
    free(story);
    *len = t;
    return text;
}

static int bench(const char *dir, const char *vocab, const char *text, size_t len)
{
    char path[1024];
    llmq_err err = {0};
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", dir, vocab);
    if (gguf_open(&f, path, &err) < 0 || tok_load(&v, f, &err) < 0) {
        fprintf(stderr, "bench-tokenizer: %s\n", err.msg);
        gguf_close(f);
        return -1;
    }
    double secs[RUNS];
    size_t n_ids = 0;
    for (int r = 0; r < RUNS; r++) {
        int32_t *ids;
        double t0 = now();
        if (tok_encode(v, text, len, false, false, &ids, &n_ids, &err) < 0) {
            fprintf(stderr, "bench-tokenizer: %s\n", err.msg);
            tok_free(v);
            gguf_close(f);
            return -1;
        }
        secs[r] = now() - t0;
        free(ids);
    }
    qsort(secs, RUNS, sizeof secs[0], cmp_double);
    double med = secs[RUNS / 2];
    printf("%-10s %-5s %8.2f MB/s  %7.1f ms/MB  %zu bytes -> %zu tokens (median of %d)\n", vocab,
           tok_model(v), (double)len / 1e6 / med, med * 1e3 * 1e6 / (double)len, len, n_ids, RUNS);
    tok_free(v);
    gguf_close(f);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = getenv("LLMQ_TEST_DATA");
    if (!dir)
        dir = "tests/data";
    const cli_spec spec = {.program = "bench-tokenizer",
                           .usage = "usage: bench-tokenizer [DATA_DIR]\n",
                           .operand = &dir};
    const int status = cli_read(&spec, argc, argv);
    if (status != CLI_RUN)
        return status;
    size_t len;
    char *text = build_text(dir, &len);
    if (!text)
        return 1;
    int rc = bench(dir, "llama-spm", text, len) < 0 || bench(dir, "gpt-2", text, len) < 0;
    free(text);
    return rc;
}
