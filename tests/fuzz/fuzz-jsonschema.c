/* fuzz-jsonschema: libFuzzer target for the JSON-schema compiler, the
 * grammar compiler and matcher, and the token masks.
 *
 * The input is a schema (any bytes), compiled from an exact-size heap copy.
 * A refusal must carry a message.  An accepted schema's grammar is walked
 * byte by byte (choices drawn from a generator seeded by the input, closing
 * bytes favoured so that documents end), and each walk checks that:
 *  - feeding the walked bytes at once gives the state the steps gave;
 *  - a complete document is JSON (common/json.c parses it, unless it has
 *    a duplicate key, which json_object mode allows and json.c refuses);
 *  - at the first states of the walk, the mask over stories260K's 512
 *    tokens equals a brute force (each token's bytes fed alone), the
 *    end-of-generation tokens allowed exactly when the document is complete.
 * Any difference aborts.  The vocabulary comes from $LLMQ_TEST_DATA
 * (default tests/data). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "engine/jsonschema.h"
#include "engine/tokenmask.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WALK_MAX 4096
#define MASKED_STATES 8

typedef struct vocab_trie {
    tok_vocab *v;
    tokenmask_vocab *tv;
} vocab_trie;

/* Loaded once for the process: libFuzzer calls the target many times. */
static const vocab_trie *vocab(void)
{
    static vocab_trie vt;
    if (!vt.tv) {
        const char *dir = getenv("LLMQ_TEST_DATA");
        char path[1024];
        llmq_err err;
        gguf_file *f = NULL;
        snprintf(path, sizeof path, "%s/models/stories260K.gguf", dir ? dir : "tests/data");
        if (gguf_open(&f, path, &err) < 0 || tok_load(&vt.v, f, &err) < 0 ||
            tokenmask_vocab_new(&vt.tv, vt.v, &err) < 0) {
            fprintf(stderr, "fuzz-jsonschema: %s\n", err.msg);
            abort();
        }
        gguf_close(f);
    }
    return &vt;
}

static uint64_t next_random(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void check_mask(const grammar *g, tokenmask_cache *c, const grammar_stack *st)
{
    const vocab_trie *vt = vocab();
    tokenmask m;
    llmq_err err;
    if (tokenmask_get(c, st, &m, &err) != 0)
        abort();
    for (int32_t t = 0; t < (int32_t)tok_n_vocab(vt->v); t++) {
        size_t len;
        const char *p = tok_piece(vt->v, t, false, &len);
        grammar_stack copy = *st;
        const bool want = tok_is_eog(vt->v, t) ? grammar_complete(g, st)
                                               : len > 0 && grammar_advance(g, &copy, p, len);
        if (tokenmask_allows(c, &m, st, t) != want)
            abort();
    }
}

/* The next byte of the walk: one of the bytes the state takes, a closing
 * one half the time when there is one; -1 when it takes none. */
static int choose(const grammar *g, const grammar_stack *st, uint64_t *rng)
{
    int taken[256], n = 0, closing[8], n_closing = 0;
    for (int b = 0; b < 256; b++) {
        grammar_stack copy = *st;
        if (grammar_step(g, &copy, (uint8_t)b)) {
            taken[n++] = b;
            if (b && strchr("\"]}", b))
                closing[n_closing++] = b;
        }
    }
    if (n == 0)
        return -1;
    if (n_closing > 0 && next_random(rng) % 2)
        return closing[next_random(rng) % (uint64_t)n_closing];
    return taken[next_random(rng) % (uint64_t)n];
}

static void walk(const grammar *g, uint64_t seed)
{
    static char doc[WALK_MAX];
    tokenmask_cache *c;
    llmq_err err;
    if (tokenmask_cache_new(&c, g, vocab()->tv, &err) != 0)
        abort();
    grammar_stack st, again;
    grammar_start(g, &st);
    uint64_t rng = seed | 1;
    size_t n = 0;
    for (; n < WALK_MAX && !grammar_complete(g, &st); n++) {
        if (n < MASKED_STATES)
            check_mask(g, c, &st);
        const int b = choose(g, &st, &rng);
        if (b < 0)
            break; /* only at the depth bound: every way on is a call */
        if (!grammar_step(g, &st, (uint8_t)b))
            abort();
        doc[n] = (char)b;
    }
    check_mask(g, c, &st);
    grammar_start(g, &again);
    if (!grammar_advance(g, &again, doc, n) || again.depth != st.depth ||
        memcmp(again.frames, st.frames, (size_t)st.depth * sizeof *st.frames) != 0)
        abort();
    json_value *v;
    if (grammar_complete(g, &st)) {
        if (json_parse(doc, n, &v, &err) == 0)
            json_free(v);
        else if (!strstr(err.msg, "duplicate key"))
            abort();
    }
    tokenmask_cache_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    grammar *g = NULL;
    llmq_err err = {0};
    if (jsonschema_compile(&g, text, size, &err) == 0) {
        uint64_t seed = 1469598103934665603u;
        for (size_t i = 0; i < size; i++)
            seed = (seed ^ data[i]) * 1099511628211u;
        walk(g, seed);
        grammar_free(g);
    } else if (!err.msg[0]) {
        abort();
    }
    free(text);
    return 0;
}
