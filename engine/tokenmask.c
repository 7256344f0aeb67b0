#include "engine/tokenmask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the trie ------------------------------------------------------------ */

struct tokenmask_vocab {
    const tok_vocab *vocab;
    int32_t n_vocab, words;
    int32_t n_nodes, max_depth;
    /* per node, in preorder */
    uint8_t *byte;
    int32_t *depth;     /* >= 1: the root (the empty prefix) is not a node */
    int32_t *skip;      /* the first node after the node's subtree */
    int32_t *first_tok; /* n_nodes + 1: the node's tokens are toks[first_tok[i]..first_tok[i+1]) */
    int32_t *toks;
    uint64_t *eog_bits; /* the end-of-generation tokens, as a mask */
};

typedef struct piece_ref {
    const char *p;
    size_t len;
    int32_t id;
} piece_ref;

static int cmp_piece(const void *a, const void *b)
{
    const piece_ref *x = a, *y = b;
    const int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool is_set(const uint64_t *bits, int32_t t)
{
    return bits[t >> 6] >> (t & 63) & 1;
}

static void set_bit(uint64_t *bits, int32_t t)
{
    bits[t >> 6] |= UINT64_C(1) << (t & 63);
}

/* The tokens with bytes, sorted by them; the end-of-generation ones go to
 * eog_bits instead. */
static piece_ref *sorted_pieces(tokenmask_vocab *tv, int32_t *n_out, size_t *bytes_out)
{
    piece_ref *refs = malloc((size_t)tv->n_vocab * sizeof *refs);
    if (!refs)
        return NULL;
    int32_t n = 0;
    size_t bytes = 0;
    for (int32_t id = 0; id < tv->n_vocab; id++) {
        size_t len;
        const char *p = tok_piece(tv->vocab, id, false, &len);
        if (tok_is_eog(tv->vocab, id)) {
            set_bit(tv->eog_bits, id);
        } else if (len > 0) {
            refs[n++] = (piece_ref){p, len, id};
            bytes += len;
        }
    }
    qsort(refs, (size_t)n, sizeof *refs, cmp_piece);
    *n_out = n;
    *bytes_out = bytes;
    return refs;
}

/* One pass over the sorted pieces: a piece shares with the one before it
 * the nodes of their common prefix, the nodes deeper than that are closed
 * (their subtrees end here), and its remaining bytes open new nodes. */
static void fill_trie(tokenmask_vocab *tv, const piece_ref *refs, int32_t n, int32_t *path,
                      int32_t *tok_node)
{
    int32_t open = 0;
    for (int32_t k = 0; k < n; k++) {
        const piece_ref *r = &refs[k];
        size_t common = 0;
        if (k > 0) {
            const piece_ref *prev = &refs[k - 1];
            while (common < r->len && common < prev->len && r->p[common] == prev->p[common])
                common++;
        }
        for (; open > (int32_t)common; open--)
            tv->skip[path[open]] = tv->n_nodes;
        for (size_t d = common + 1; d <= r->len; d++) {
            const int32_t node = tv->n_nodes++;
            tv->byte[node] = (uint8_t)r->p[d - 1];
            tv->depth[node] = (int32_t)d;
            path[d] = node;
        }
        open = (int32_t)r->len;
        tv->toks[k] = r->id;
        tok_node[k] = path[r->len];
    }
    for (; open > 0; open--)
        tv->skip[path[open]] = tv->n_nodes;
    /* Tokens come in node order (a piece's node is the newest one or, for
     * a repeated piece, the one before's): count them into first_tok. */
    memset(tv->first_tok, 0, ((size_t)tv->n_nodes + 1) * sizeof *tv->first_tok);
    for (int32_t k = 0; k < n; k++)
        tv->first_tok[tok_node[k] + 1]++;
    for (int32_t i = 0; i < tv->n_nodes; i++)
        tv->first_tok[i + 1] += tv->first_tok[i];
}

void tokenmask_vocab_free(tokenmask_vocab *tv)
{
    if (!tv)
        return;
    free(tv->byte);
    free(tv->depth);
    free(tv->skip);
    free(tv->first_tok);
    free(tv->toks);
    free(tv->eog_bits);
    free(tv);
}

int tokenmask_vocab_new(tokenmask_vocab **out, const tok_vocab *v, llmq_err *err)
{
    *out = NULL;
    tokenmask_vocab *tv = calloc(1, sizeof *tv);
    if (!tv)
        return llmq_errf(err, "tokenmask: out of memory");
    tv->vocab = v;
    tv->n_vocab = (int32_t)tok_n_vocab(v);
    tv->words = (tv->n_vocab + 63) / 64;
    tv->max_depth = (int32_t)tok_max_piece(v);
    tv->eog_bits = calloc((size_t)tv->words + 1, sizeof *tv->eog_bits);
    int32_t n = 0;
    size_t bytes = 0;
    piece_ref *refs = tv->eog_bits ? sorted_pieces(tv, &n, &bytes) : NULL;
    int32_t *path = malloc(((size_t)tv->max_depth + 1) * sizeof *path);
    int32_t *tok_node = malloc(((size_t)n + 1) * sizeof *tok_node);
    const size_t nodes = bytes + 1; /* at most one node per byte of the pieces */
    tv->byte = malloc(nodes);
    tv->depth = malloc(nodes * sizeof *tv->depth);
    tv->skip = malloc(nodes * sizeof *tv->skip);
    tv->first_tok = malloc((nodes + 1) * sizeof *tv->first_tok);
    tv->toks = malloc(((size_t)n + 1) * sizeof *tv->toks);
    const bool ok = refs && path && tok_node && tv->byte && tv->depth && tv->skip &&
                    tv->first_tok && tv->toks && bytes < INT32_MAX;
    if (ok)
        fill_trie(tv, refs, n, path, tok_node);
    free(refs);
    free(path);
    free(tok_node);
    if (!ok) {
        tokenmask_vocab_free(tv);
        return llmq_errf(err, "tokenmask: out of memory for a vocabulary of %d tokens",
                         (int)tok_n_vocab(v));
    }
    *out = tv;
    return 0;
}

int32_t tokenmask_vocab_nodes(const tokenmask_vocab *tv)
{
    return tv->n_nodes;
}

/* ---- the cache ----------------------------------------------------------- */

/* A key: the stack's depth, then its top frames a token can reach. */
#define KEY_MAX (GRAMMAR_MAX_DEPTH + 1)
#define INDEX_SIZE (2 * TOKENMASK_CACHE_MAX) /* a power of two */

typedef struct entry {
    int32_t key[KEY_MAX];
    int32_t key_len;
    int32_t n_allowed;
    uint64_t *bits;
} entry;

struct tokenmask_cache {
    const grammar *g;
    const tokenmask_vocab *tv;
    int32_t reach; /* frames a token's bytes can reach */
    entry *entries;
    int32_t n_entries;
    int32_t index[INDEX_SIZE]; /* open addressing over entries, -1 empty */
    grammar_stack *levels;     /* the trie walk's stack per depth */
    tokenmask_stats stats;
};

static void clear(tokenmask_cache *c)
{
    for (int32_t i = 0; i < c->n_entries; i++)
        free(c->entries[i].bits);
    c->n_entries = 0;
    memset(c->index, -1, sizeof c->index);
}

void tokenmask_cache_free(tokenmask_cache *c)
{
    if (!c)
        return;
    if (c->entries)
        clear(c);
    free(c->entries);
    free(c->levels);
    free(c);
}

int tokenmask_cache_new(tokenmask_cache **out, const grammar *g, const tokenmask_vocab *tv,
                        llmq_err *err)
{
    *out = NULL;
    tokenmask_cache *c = calloc(1, sizeof *c);
    if (!c)
        return llmq_errf(err, "tokenmask: out of memory");
    c->g = g;
    c->tv = tv;
    c->reach = grammar_reach(g, (size_t)tv->max_depth);
    c->entries = malloc(TOKENMASK_CACHE_MAX * sizeof *c->entries);
    c->levels = malloc(((size_t)tv->max_depth + 1) * sizeof *c->levels);
    if (!c->entries || !c->levels) {
        tokenmask_cache_free(c);
        return llmq_errf(err, "tokenmask: out of memory");
    }
    memset(c->index, -1, sizeof c->index);
    *out = c;
    return 0;
}

tokenmask_stats tokenmask_get_stats(const tokenmask_cache *c)
{
    return c->stats;
}

static int32_t make_key(const tokenmask_cache *c, const grammar_stack *st, int32_t *key)
{
    const int32_t k = st->depth < c->reach ? st->depth : c->reach;
    key[0] = st->depth;
    memcpy(key + 1, st->frames + st->depth - k, (size_t)k * sizeof *key);
    return k + 1;
}

static uint32_t hash_key(const int32_t *key, int32_t n)
{
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)key[i]) * 16777619u;
    return h;
}

static void copy_stack(grammar_stack *dst, const grammar_stack *src)
{
    dst->depth = src->depth;
    memcpy(dst->frames, src->frames, (size_t)src->depth * sizeof *dst->frames);
}

/* The trie walk: level d holds the stack after the d bytes of the current
 * node's prefix, so a node steps a copy of its parent's level. */
static int32_t walk(tokenmask_cache *c, const grammar_stack *st, uint64_t *bits)
{
    const tokenmask_vocab *tv = c->tv;
    grammar_stack *level = c->levels;
    int32_t n_allowed = 0;
    uint64_t steps = 0;
    copy_stack(&level[0], st);
    for (int32_t i = 0; i < tv->n_nodes;) {
        const int32_t d = tv->depth[i];
        copy_stack(&level[d], &level[d - 1]);
        steps++;
        if (!grammar_step(c->g, &level[d], tv->byte[i])) {
            i = tv->skip[i];
            continue;
        }
        for (int32_t k = tv->first_tok[i]; k < tv->first_tok[i + 1]; k++)
            set_bit(bits, tv->toks[k]);
        n_allowed += tv->first_tok[i + 1] - tv->first_tok[i];
        i++;
    }
    c->stats.trie_steps += steps;
    return n_allowed;
}

int tokenmask_get(tokenmask_cache *c, const grammar_stack *st, tokenmask *out, llmq_err *err)
{
    int32_t key[KEY_MAX];
    const int32_t n = make_key(c, st, key);
    uint32_t h = hash_key(key, n) & (INDEX_SIZE - 1);
    for (; c->index[h] >= 0; h = (h + 1) & (INDEX_SIZE - 1)) {
        const entry *e = &c->entries[c->index[h]];
        if (e->key_len == n && memcmp(e->key, key, (size_t)n * sizeof *key) == 0) {
            c->stats.hits++;
            *out = (tokenmask){e->bits, e->n_allowed};
            return 0;
        }
    }
    if (c->n_entries == TOKENMASK_CACHE_MAX) {
        clear(c);
        h = hash_key(key, n) & (INDEX_SIZE - 1);
    }
    uint64_t *bits = calloc((size_t)c->tv->words + 1, sizeof *bits);
    if (!bits)
        return llmq_errf(err, "tokenmask: out of memory for a mask of %d tokens", c->tv->n_vocab);
    entry *e = &c->entries[c->n_entries];
    memcpy(e->key, key, (size_t)n * sizeof *key);
    e->key_len = n;
    e->bits = bits;
    e->n_allowed = walk(c, st, bits);
    c->index[h] = c->n_entries++;
    c->stats.computed++;
    *out = (tokenmask){e->bits, e->n_allowed};
    return 0;
}

void tokenmask_apply(const tokenmask_cache *c, const tokenmask *m, const grammar_stack *st,
                     float *logits)
{
    const tokenmask_vocab *tv = c->tv;
    const uint64_t *eog = grammar_complete(c->g, st) ? tv->eog_bits : NULL;
    for (int32_t w = 0; w < tv->words; w++) {
        const int32_t base = w * 64, n = tv->n_vocab - base < 64 ? tv->n_vocab - base : 64;
        const uint64_t in_vocab = n == 64 ? ~UINT64_C(0) : (UINT64_C(1) << n) - 1;
        uint64_t refused = ~(m->bits[w] | (eog ? eog[w] : 0)) & in_vocab;
        if (refused == in_vocab) { /* most words of most states: a plain fill */
            for (int32_t j = 0; j < n; j++)
                logits[base + j] = -INFINITY;
            continue;
        }
        for (; refused; refused &= refused - 1) /* one store per refused token */
            logits[base + __builtin_ctzll(refused)] = -INFINITY;
    }
}

void tokenmask_allowed_bits(const tokenmask_cache *c, const tokenmask *m, const grammar_stack *st,
                            uint64_t *out)
{
    const tokenmask_vocab *tv = c->tv;
    const uint64_t *eog = grammar_complete(c->g, st) ? tv->eog_bits : NULL;
    for (int32_t w = 0; w < tv->words; w++)
        out[w] = m->bits[w] | (eog ? eog[w] : 0);
}

bool tokenmask_allows(const tokenmask_cache *c, const tokenmask *m, const grammar_stack *st,
                      int32_t token)
{
    if (token < 0 || token >= c->tv->n_vocab)
        return false;
    if (is_set(c->tv->eog_bits, token))
        return grammar_complete(c->g, st);
    return is_set(m->bits, token);
}

bool tokenmask_accept(const tokenmask_cache *c, grammar_stack *st, int32_t token)
{
    if (token < 0 || token >= c->tv->n_vocab)
        return false;
    if (is_set(c->tv->eog_bits, token))
        return grammar_complete(c->g, st);
    size_t len;
    const char *p = tok_piece(c->tv->vocab, token, false, &len);
    return len > 0 && grammar_advance(c->g, st, p, len);
}
