/* The grammar matcher (engine/grammar.c) and its token masks
 * (engine/tokenmask.c).
 *
 * Pins:
 *  - a recursive grammar runs as a pushdown automaton: byte strings taken
 *    and refused, completeness, at most GRAMMAR_MAX_DEPTH frames, a call in
 *    tail position replacing its caller's frame, a refused advance leaving
 *    the state as it was, dead ends pruned;
 *  - grammar_compile refuses, naming the rule, what the matcher cannot run
 *    or what exceeds its bounds;
 *  - on real vocabularies (stories260K's 512 SentencePiece tokens, the 32k
 *    Llama SentencePiece and the 50k GPT-2 byte-level BPE ones) the mask of
 *    every state of random walks through three grammars equals a brute
 *    force over the whole vocabulary (each token's bytes fed alone), the
 *    end-of-generation tokens included exactly when the document is
 *    complete; tokenmask_apply leaves finite exactly the allowed logits,
 *    and tokenmask_allowed_bits (the mask a device applies) sets exactly
 *    their bits;
 *  - masks are cached by the part of the stack a token can reach: two
 *    stacks alike in their top frames share one mask, and it is right for
 *    both;
 *  - SentencePiece's U+2581 and <0xNN> tokens and BPE's byte-level
 *    characters stand for the bytes they decode to. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/grammar.h"
#include "engine/jsonschema.h"
#include "engine/tokenmask.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

enum { REFUSED, PREFIX, COMPLETE };

static int match(const grammar *g, const char *s)
{
    grammar_stack st;
    grammar_start(g, &st);
    if (!grammar_advance(g, &st, s, strlen(s)))
        return REFUSED;
    return grammar_complete(g, &st) ? COMPLETE : PREFIX;
}

static gram_expr lit(grammar_builder *b, const char *s)
{
    return gram_lit(b, s, strlen(s));
}

static gram_expr digit(grammar_builder *b)
{
    gram_bytes d = {0};
    gram_bytes_add(&d, '0', '9');
    return gram_set(b, &d);
}

/* list := "[" (item ("," item)*)? "]"; item := [0-9]+ | list.  The root is
 * `root` (list itself, or another rule built on it by the caller). */
static int32_t list_rule(grammar_builder *b)
{
    const int32_t list = gram_rule(b, "list");
    const gram_expr item = GRAM_ALT(b, GRAM_SEQ(b, digit(b), gram_star(b, digit(b))),
                                    gram_call(b, list));
    gram_define(
        b, list,
        GRAM_SEQ(b, lit(b, "["), gram_opt(b, gram_list(b, item, lit(b, ","))), lit(b, "]")));
    return list;
}

static void test_pushdown(void)
{
    grammar_builder *b;
    grammar *g;
    llmq_err err;
    grammar_builder_new(&b, &err);
    const int32_t list = list_rule(b);
    CHECK(grammar_compile(&g, b, list, &err) == 0, "a recursive list grammar compiles");
    CHECK(match(g, "[]") == COMPLETE && match(g, "[1,[2,[]],33]") == COMPLETE &&
              match(g, "[[[[7]]]]") == COMPLETE,
          "it takes nested lists");
    CHECK(match(g, "[1,]") == REFUSED && match(g, "[,1]") == REFUSED && match(g, "]") == REFUSED &&
              match(g, "[]]") == REFUSED && match(g, "[1 ]") == REFUSED,
          "and refuses what is not one");
    CHECK(match(g, "[1,[2") == PREFIX, "a list not closed yet is a prefix, not complete");

    char deep[2 * GRAMMAR_MAX_DEPTH + 4];
    memset(deep, '[', GRAMMAR_MAX_DEPTH);
    memset(deep + GRAMMAR_MAX_DEPTH, ']', GRAMMAR_MAX_DEPTH);
    deep[2 * GRAMMAR_MAX_DEPTH] = '\0';
    CHECK(match(g, deep) == COMPLETE, "lists nested %d deep are taken", GRAMMAR_MAX_DEPTH);
    memset(deep, '[', GRAMMAR_MAX_DEPTH + 1);
    deep[GRAMMAR_MAX_DEPTH + 1] = '\0';
    grammar_stack st;
    grammar_start(g, &st);
    CHECK(grammar_advance(g, &st, deep, GRAMMAR_MAX_DEPTH) && st.depth == GRAMMAR_MAX_DEPTH &&
              !grammar_step(g, &st, '['),
          "the stack holds %d frames and the byte that would push one more is refused",
          GRAMMAR_MAX_DEPTH);

    grammar_start(g, &st);
    CHECK(grammar_advance(g, &st, "[1", 2) && !grammar_advance(g, &st, ",]", 2) &&
              grammar_advance(g, &st, "]", 1) && grammar_complete(g, &st),
          "a refused advance leaves the state as it was");
    grammar_free(g);
    grammar_builder_free(b);

    /* root := list | "x": the call of list ends the root, so list's frame
     * takes the root's place instead of going on top of it. */
    grammar_builder_new(&b, &err);
    const int32_t inner = list_rule(b), root = gram_rule(b, "root");
    gram_define(b, root, GRAM_ALT(b, gram_call(b, inner), lit(b, "x")));
    CHECK(grammar_compile(&g, b, root, &err) == 0, "a root that ends with a call compiles");
    grammar_start(g, &st);
    const bool one = grammar_step(g, &st, '[') && st.depth == 1;
    const bool two = grammar_step(g, &st, '[') && st.depth == 2;
    CHECK(one && two && match(g, "[]") == COMPLETE && match(g, "x") == COMPLETE,
          "a call in tail position replaces its caller's frame (depth 1 after '[', 2 after '[[')");
    grammar_free(g);
    grammar_builder_free(b);
}

/* Compiles the grammar build() makes and returns the error ("" on success). */
static const char *compile_error(int32_t (*build)(grammar_builder *), llmq_err *err)
{
    grammar_builder *b;
    grammar *g = NULL;
    grammar_builder_new(&b, err);
    const int32_t root = build(b);
    const int rc = grammar_compile(&g, b, root, err);
    grammar_free(g);
    grammar_builder_free(b);
    return rc == 0 ? "" : err->msg;
}

static int32_t nullable(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r");
    gram_define(b, r, gram_opt(b, lit(b, "a")));
    return r;
}

static int32_t left_recursive(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r");
    gram_define(b, r, GRAM_ALT(b, GRAM_SEQ(b, gram_call(b, r), lit(b, "a")), lit(b, "b")));
    return r;
}

static int32_t ambiguous(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r"), s = gram_rule(b, "s");
    gram_define(b, s, lit(b, "[]"));
    gram_define(b, r, GRAM_ALT(b, gram_call(b, s), lit(b, "[x]")));
    return r;
}

static int32_t undefined(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r"), s = gram_rule(b, "s");
    gram_define(b, r, GRAM_SEQ(b, lit(b, "a"), gram_call(b, s)));
    return r;
}

static int32_t endless(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r");
    gram_define(b, r, GRAM_SEQ(b, lit(b, "["), gram_call(b, r), lit(b, "]")));
    return r;
}

static int32_t defined_twice(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r");
    gram_define(b, r, lit(b, "a"));
    gram_define(b, r, lit(b, "b"));
    return r;
}

static int32_t too_many_states(grammar_builder *b)
{
    const int32_t r = gram_rule(b, "r");
    gram_define(b, r, gram_repeat(b, digit(b), 1, GRAMMAR_MAX_STATES + 10));
    return r;
}

static void test_refusals(void)
{
    llmq_err err;
    CHECK(strcmp(compile_error(nullable, &err), "grammar: rule 'r' matches the empty string") == 0,
          "a rule matching the empty string is refused (%s)", err.msg);
    CHECK(strcmp(compile_error(left_recursive, &err),
                 "grammar: rule 'r' is left-recursive (it can begin with a call of itself)") == 0,
          "left recursion is refused (%s)", err.msg);
    CHECK(strcmp(compile_error(ambiguous, &err), "grammar: rule 'r' is ambiguous: '[' can begin "
                                                 "a call of 's' and another alternative") == 0,
          "a call sharing its first byte with another alternative is refused (%s)", err.msg);
    CHECK(strcmp(compile_error(undefined, &err), "grammar: rule 's' is called but has no body") ==
              0,
          "a call of a rule without a body is refused (%s)", err.msg);
    CHECK(strcmp(compile_error(endless, &err),
                 "grammar: rule 'r' matches nothing (no complete match can be reached)") == 0,
          "a grammar no complete match can come out of is refused (%s)", err.msg);
    CHECK(strcmp(compile_error(defined_twice, &err),
                 "grammar: an expression could not be built (out of memory or a bad argument)") ==
              0,
          "a rule defined twice is refused (%s)", err.msg);
    CHECK(strcmp(compile_error(too_many_states, &err),
                 "grammar: too large (more than 65536 automaton states)") == 0,
          "a grammar past the state bound is refused (%s)", err.msg);

    /* "a" then a byte of an empty set (a dead end), or "ac". */
    grammar_builder *b;
    grammar *g;
    grammar_builder_new(&b, &err);
    const gram_bytes none = {0};
    const int32_t r = gram_rule(b, "r");
    gram_define(
        b, r, GRAM_ALT(b, GRAM_SEQ(b, lit(b, "a"), gram_set(b, &none), lit(b, "b")), lit(b, "ac")));
    CHECK(grammar_compile(&g, b, r, &err) == 0 && match(g, "a") == PREFIX &&
              match(g, "ac") == COMPLETE,
          "a grammar with a dead end compiles, and takes what can finish");
    grammar_stack st;
    grammar_start(g, &st);
    CHECK(grammar_step(g, &st, 'a') && !grammar_step(g, &st, 'b'),
          "no byte leads into the dead end");
    CHECK(grammar_n_classes(g) <= 4, "bytes no edge tells apart share a class (%d classes)",
          grammar_n_classes(g));
    grammar_free(g);
    grammar_builder_free(b);
}

/* ---- masks against brute force ------------------------------------------ */

typedef struct vocab_fixture {
    const char *file;
    int walks, steps;
    tok_vocab *v;
    tokenmask_vocab *tv;
} vocab_fixture;

/* Whether token t may come next from st, by feeding its bytes alone. */
static bool brute_allows(const grammar *g, const tok_vocab *v, const grammar_stack *st, int32_t t)
{
    if (tok_is_eog(v, t))
        return grammar_complete(g, st);
    size_t len;
    const char *p = tok_piece(v, t, false, &len);
    grammar_stack copy = *st;
    return len > 0 && grammar_advance(g, &copy, p, len);
}

static uint32_t rng_next(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* Compares st's mask with the brute force, token by token; returns the
 * allowed tokens other than end-of-generation ones into allowed (count
 * returned), or -1 on a mismatch. */
static int32_t compare_mask(const grammar *g, const vocab_fixture *f, tokenmask_cache *c,
                            const grammar_stack *st, int32_t *allowed, float *logits)
{
    tokenmask m;
    llmq_err err;
    if (tokenmask_get(c, st, &m, &err) != 0)
        return -1;
    const int32_t n_vocab = (int32_t)tok_n_vocab(f->v);
    memset(logits, 0, (size_t)n_vocab * sizeof *logits);
    tokenmask_apply(c, &m, st, logits);
    uint64_t *bits = malloc((size_t)(n_vocab + 63) / 64 * sizeof *bits);
    if (!bits)
        return -1;
    tokenmask_allowed_bits(c, &m, st, bits);
    int32_t n = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        const bool want = brute_allows(g, f->v, st, t);
        const bool bit = (bits[t / 64] >> (t % 64)) & 1;
        if (tokenmask_allows(c, &m, st, t) != want || isfinite(logits[t]) != want || bit != want) {
            free(bits);
            printf("# token %d (%s): mask %d, logit %g, brute force %d\n", t,
                   tok_text(f->v, t, &(size_t){0}), tokenmask_allows(c, &m, st, t),
                   (double)logits[t], want);
            return -1;
        }
        if (want && !tok_is_eog(f->v, t))
            allowed[n++] = t;
    }
    free(bits);
    return n == m.n_allowed ? n : -1;
}

/* The allowed tokens (of allowed[0..n)) whose bytes continue doc at `at`,
 * moved to the front; returns how many. */
static int32_t continuing(const vocab_fixture *f, int32_t *allowed, int32_t n, const char *doc,
                          size_t at)
{
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(f->v, allowed[i], false, &len);
        if (len <= strlen(doc) - at && memcmp(p, doc + at, len) == 0)
            allowed[k++] = allowed[i];
    }
    return k;
}

/* Walks: at each state the mask is checked, then a random allowed token
 * taken -- any of them, or with docs, one that continues the walk's
 * document (a random segmentation of it).  A walk ends when nothing but
 * end-of-generation is left, or its document is written. */
static void walk_grammar(const char *name, const grammar *g, const vocab_fixture *f,
                         const char *const *docs)
{
    tokenmask_cache *c;
    llmq_err err;
    const size_t n_vocab = tok_n_vocab(f->v);
    int32_t *allowed = malloc(n_vocab * sizeof *allowed);
    float *logits = malloc(n_vocab * sizeof *logits);
    if (tokenmask_cache_new(&c, g, f->tv, &err) != 0 || !allowed || !logits) {
        CHECK(0, "%s: cache for %s", f->file, name);
        return;
    }
    uint32_t rng = 12345;
    int states = 0, complete = 0, bad = 0, max_depth = 0;
    for (int w = 0; w < f->walks && !bad; w++) {
        const char *doc = docs ? docs[w % 2] : NULL;
        size_t at = 0;
        grammar_stack st;
        grammar_start(g, &st);
        for (int s = 0; s < (doc ? 1 << 20 : f->steps) && !bad; s++) {
            int32_t n = compare_mask(g, f, c, &st, allowed, logits);
            states++;
            complete += grammar_complete(g, &st);
            max_depth = st.depth > max_depth ? st.depth : max_depth;
            if (n > 0 && doc)
                n = at < strlen(doc) ? continuing(f, allowed, n, doc, at) : 0;
            if (n < 0 || (doc && n == 0 && at < strlen(doc)))
                bad = 1;
            if (n <= 0)
                break;
            const int32_t t = allowed[rng_next(&rng) % (uint32_t)n];
            size_t len;
            tok_piece(f->v, t, false, &len);
            at += len;
            bad = !tokenmask_accept(c, &st, t);
        }
    }
    const tokenmask_stats stats = tokenmask_get_stats(c);
    CHECK(!bad && states > f->walks && (complete > 0 || !docs),
          "%s, %s: the masks of %d states (%d complete, stacks up to %d deep, %llu computed, "
          "%llu from the cache) equal the brute force over %zu tokens",
          f->file, name, states, complete, max_depth, (unsigned long long)stats.computed,
          (unsigned long long)stats.hits, n_vocab);
    tokenmask_cache_free(c);
    free(allowed);
    free(logits);
}

static const char k_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"maxLength\": 8},"
    "\"n\": {\"type\": \"integer\"}, \"x\": {\"type\": \"number\"},"
    "\"kind\": {\"enum\": [\"a b\", \"c\\\"d\", 3, null]},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"maxItems\": 3},"
    "\"sub\": {\"type\": [\"object\", \"null\"], \"properties\": {\"deep\": {\"type\": "
    "\"string\"}}}},"
    "\"required\": [\"name\", \"kind\"]}";

static const char *const k_object_docs[] = {
    "{\"a\": [{\"b\": {\"c\": [1, 2.5e3, -0, \"x\\\"y\\u00e9 z\"]}}, [], {}], \"d\": true,"
    "\"e\": null, \"f\": {\"g\": [[[[\"deep\", {\"h\": [false]}]]]]}}",
    "{\"id\": 7, \"items\": [{\"sku\": \"A-1\", \"qty\": 2}, {\"sku\": \"caf\xc3\xa9\", \"qty\": "
    "10}]}",
};

static const char *const k_tree_docs[] = {
    "{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": [{\"v\": 3, \"kids\": []}]}, {\"v\": 4, \"kids\": "
    "[]}]}",
    "{\"v\":-5,\"kids\":[{\"v\":6,\"kids\":[{\"v\":7,\"kids\":[{\"v\":8,\"kids\":[]}]}]}]}",
};

static const char k_tree[] =
    "{\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
    "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/t\"}, \"maxItems\": 2}}, "
    "\"required\": [\"v\", \"kids\"]}}, \"$ref\": \"#/$defs/t\"}";

/* Two stacks of json_object with the same depth and top frames, different
 * at the bottom: one mask serves both, and it is right for both. */
static void test_reach(const vocab_fixture *f)
{
    grammar *g;
    tokenmask_cache *c;
    llmq_err err;
    jsonschema_any_object(&g, &err);
    tokenmask_cache_new(&c, g, f->tv, &err);
    const int32_t reach = grammar_reach(g, tok_max_piece(f->v));
    char a[256] = "", b[256] = "{\"a\":[";
    for (int i = 0; i < reach + 4; i++)
        strcat(a, "{\"a\":");
    for (int i = 0; i < reach + 2; i++)
        strcat(b, "{\"a\":");
    grammar_stack sa, sb;
    grammar_start(g, &sa);
    grammar_start(g, &sb);
    const bool walked = grammar_advance(g, &sa, a, strlen(a)) &&
                        grammar_advance(g, &sb, b, strlen(b)) && sa.depth == sb.depth &&
                        memcmp(sa.frames, sb.frames, (size_t)sa.depth * sizeof *sa.frames) != 0;
    const size_t n_vocab = tok_n_vocab(f->v);
    int32_t *allowed = malloc(n_vocab * sizeof *allowed);
    float *logits = malloc(n_vocab * sizeof *logits);
    const bool right_a = compare_mask(g, f, c, &sa, allowed, logits) > 0;
    const uint64_t hits = tokenmask_get_stats(c).hits;
    const bool right_b = compare_mask(g, f, c, &sb, allowed, logits) > 0;
    CHECK(walked && right_a && right_b && tokenmask_get_stats(c).hits == hits + 1 &&
              tokenmask_get_stats(c).computed == 1,
          "%s: stacks %d deep that differ below the %d frames a token reaches share one mask, "
          "right for both",
          f->file, sa.depth, reach);
    free(allowed);
    free(logits);
    tokenmask_cache_free(c);
    grammar_free(g);
}

/* The id of the token whose vocabulary text is s, or -1. */
static int32_t token_of(const tok_vocab *v, const char *s)
{
    for (int32_t t = 0; t < (int32_t)tok_n_vocab(v); t++) {
        size_t len;
        const char *p = tok_text(v, t, &len);
        if (len == strlen(s) && memcmp(p, s, len) == 0)
            return t;
    }
    return -1;
}

/* At the start of a JSON object: '{' as a byte token or a plain one is
 * allowed, a space-prefixed '{' is not. */
static void test_pieces(const vocab_fixture *spm, const vocab_fixture *bpe)
{
    grammar *g;
    llmq_err err;
    jsonschema_any_object(&g, &err);
    const struct {
        const vocab_fixture *f;
        const char *text;
        bool allowed;
    } cases[] = {
        {spm, "<0x7B>", true}, {spm, "\xe2\x96\x81{", false}, {spm, "{", true},
        {bpe, "{", true},      {bpe, "\xc4\xa0{", false},     {bpe, "{\"", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tokenmask_cache *c;
        tokenmask m;
        grammar_stack st;
        tokenmask_cache_new(&c, g, cases[i].f->tv, &err);
        grammar_start(g, &st);
        tokenmask_get(c, &st, &m, &err);
        const int32_t t = token_of(cases[i].f->v, cases[i].text);
        CHECK(t >= 0 && tokenmask_allows(c, &m, &st, t) == cases[i].allowed,
              "%s: token %d '%s' %s the start of an object", cases[i].f->file, t, cases[i].text,
              cases[i].allowed ? "may begin" : "may not begin");
        tokenmask_cache_free(c);
    }
    grammar_free(g);
}

static int load(vocab_fixture *f)
{
    char path[1024];
    gguf_file *file;
    llmq_err err;
    check_data_path(path, sizeof path, f->file);
    if (gguf_open(&file, path, &err) != 0 || tok_load(&f->v, file, &err) != 0 ||
        tokenmask_vocab_new(&f->tv, f->v, &err) != 0) {
        printf("# %s: %s\n", path, err.msg);
        return -1;
    }
    gguf_close(file);
    return 0;
}

int main(void)
{
    test_pushdown();
    test_refusals();

    vocab_fixture vocabs[] = {
        {"models/stories260K.gguf", 40, 80, NULL, NULL},
        {"vocab/ggml-vocab-llama-spm.gguf", 4, 40, NULL, NULL},
        {"vocab/ggml-vocab-gpt-2.gguf", 3, 40, NULL, NULL},
    };
    grammar *schema = NULL, *object = NULL, *tree = NULL;
    llmq_err err;
    CHECK(jsonschema_compile(&schema, k_schema, strlen(k_schema), &err) == 0 &&
              jsonschema_any_object(&object, &err) == 0 &&
              jsonschema_compile(&tree, k_tree, strlen(k_tree), &err) == 0,
          "the three test grammars compile");
    for (size_t i = 0; i < sizeof vocabs / sizeof *vocabs; i++) {
        vocab_fixture *f = &vocabs[i];
        CHECK(load(f) == 0, "%s loads into a trie", f->file);
        if (!f->tv)
            continue;
        walk_grammar("schema", schema, f, NULL);
        walk_grammar("json_object", object, f, NULL);
        walk_grammar("json_object documents", object, f, k_object_docs);
        walk_grammar("recursive schema", tree, f, NULL);
        walk_grammar("recursive schema documents", tree, f, k_tree_docs);
        /* (A vocabulary whose longest piece reaches the whole stack keys
         * masks by the whole stack: nothing to share.) */
        if (grammar_reach(object, tok_max_piece(f->v)) + 4 <= GRAMMAR_MAX_DEPTH)
            test_reach(f);
    }
    if (vocabs[1].tv && vocabs[2].tv)
        test_pieces(&vocabs[1], &vocabs[2]);
    for (size_t i = 0; i < sizeof vocabs / sizeof *vocabs; i++) {
        tokenmask_vocab_free(vocabs[i].tv);
        tok_free(vocabs[i].v);
    }
    grammar_free(schema);
    grammar_free(object);
    grammar_free(tree);
    return check_done();
}
