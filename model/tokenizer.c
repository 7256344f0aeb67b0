#include "model/tokenizer.h"

#include <ctype.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "model/pretok.h"

/* Token attributes, llama.cpp's llama_token_attr bits. */
enum {
    A_UNKNOWN = 1 << 0,
    A_UNUSED = 1 << 1,
    A_NORMAL = 1 << 2,
    A_CONTROL = 1 << 3,
    A_USER_DEFINED = 1 << 4,
    A_BYTE = 1 << 5,
    A_LSTRIP = 1 << 7,
    A_RSTRIP = 1 << 8,
    A_EOG = 1 << 12, /* ours: ends generation */
};

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

typedef enum { KIND_SPM, KIND_BPE } tok_kind;

#define SPACE_ESC "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#define SPACE_ESC_LEN 3

/* ---- a set of byte strings: arena + index by hash ---- */

/* Where string i lies in the arena. */
typedef struct strspan {
    uint32_t off, len;
} strspan;

typedef struct strset {
    char *arena;
    size_t arena_len, arena_cap;
    strspan *span;
    size_t n, cap;
    uint64_t *slots; /* high half: hash tag; low half: index + 1 (0 = empty) */
    size_t mask;
} strset;

/* Eight bytes at a time: lookups of short strings are the inner loop of
 * SentencePiece merging. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull), w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    return h ^ (h >> 29);
}

static const char *strset_str(const strset *s, size_t i, size_t *len)
{
    *len = s->span[i].len;
    return s->arena + s->span[i].off;
}

static int64_t strset_find(const strset *s, const char *str, size_t len)
{
    uint64_t h = hash_bytes(str, len), tag = h >> 32 << 32;
    for (size_t k = h & s->mask;; k = (k + 1) & s->mask) {
        uint64_t slot = s->slots[k];
        if (!slot)
            return -1;
        size_t i = (size_t)(uint32_t)slot - 1;
        if ((slot & ~0xffffffffull) == tag && s->span[i].len == len &&
            memcmp(s->arena + s->span[i].off, str, len) == 0)
            return (int64_t)i;
    }
}

static void strset_place(strset *s, size_t i)
{
    uint64_t h = hash_bytes(s->arena + s->span[i].off, s->span[i].len);
    size_t k = h & s->mask;
    while (s->slots[k])
        k = (k + 1) & s->mask;
    s->slots[k] = (h >> 32 << 32) | (i + 1);
}

static int strset_grow_index(strset *s)
{
    size_t size = (s->mask + 1) * 2;
    uint64_t *slots = calloc(size, sizeof *slots);
    if (!slots)
        return -1;
    free(s->slots);
    s->slots = slots;
    s->mask = size - 1;
    for (size_t i = 0; i < s->n; i++)
        strset_place(s, i);
    return 0;
}

/* Appends a string known to be absent; its index is s->n - 1. */
static int strset_add(strset *s, const char *str, size_t len)
{
    if (s->arena_len + len > UINT32_MAX ||
        grow_reserve(&s->arena, &s->arena_cap, s->arena_len + len, 1) < 0 ||
        grow_reserve(&s->span, &s->cap, s->n + 1, sizeof *s->span) < 0)
        return -1;
    memcpy(s->arena + s->arena_len, str, len);
    s->span[s->n] = (strspan){(uint32_t)s->arena_len, (uint32_t)len};
    s->arena_len += len;
    s->n++;
    if (s->n * 3 > s->mask + 1) /* at most a third full: short probes */
        return strset_grow_index(s);
    strset_place(s, s->n - 1);
    return 0;
}

static int strset_init(strset *s)
{
    memset(s, 0, sizeof *s);
    s->slots = calloc(1024, sizeof *s->slots);
    s->mask = 1023;
    return s->slots ? 0 : -1;
}

static void strset_free(strset *s)
{
    free(s->arena);
    free(s->span);
    free(s->slots);
}

/* ---- BPE merges: (left string, right string) -> rank and merged string ---- */

typedef struct merge_slot {
    uint64_t key;  /* left << 32 | right, string indices */
    uint32_t rank; /* UINT32_MAX: empty */
    uint32_t result;
} merge_slot;

typedef struct merge_table {
    merge_slot *slots;
    size_t mask;
} merge_table;

static size_t merge_hash(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & mask;
}

static const merge_slot *merge_find(const merge_table *t, uint32_t left, uint32_t right)
{
    uint64_t key = (uint64_t)left << 32 | right;
    for (size_t h = merge_hash(key, t->mask);; h = (h + 1) & t->mask) {
        const merge_slot *m = &t->slots[h];
        if (m->rank == UINT32_MAX)
            return NULL;
        if (m->key == key)
            return m;
    }
}

/* ---- the vocabulary ---- */

struct tok_vocab {
    tok_kind kind;
    const pretok *pre; /* KIND_BPE */
    uint32_t n;        /* tokens; strings n.. of `strs` are merge parts that are not tokens */
    strset strs;
    uint32_t *score_rank; /* SPM: 0 for the highest score, equal scores equal ranks */
    uint16_t *attr;
    uint8_t *byte_val; /* the byte of each A_BYTE token */
    int32_t *specials; /* control/user-defined/unknown ids, longest text first */
    size_t n_specials;
    int32_t *eog; /* the ids that end generation, ascending */
    size_t n_eog;
    char *pieces; /* llama_token_to_piece(special = true) of every token */
    uint32_t *piece_off, *piece_len;
    size_t max_piece, max_token_len;
    merge_table merges;
    int32_t byte_sym[256]; /* BPE: string index of each byte's printable character */
    int32_t byte_tok[256]; /* SPM: the token of each byte for byte fallback */
    int32_t char_tok[128]; /* SPM: the token whose text is this one ASCII character */
    uint16_t byte_cpt[256];
    int16_t cpt_byte[0x144]; /* inverse of byte_cpt, -1 elsewhere */
    int32_t bos, eos, eot, eom, unk;
    int32_t sep, pad; /* read only to be checked: an id past the vocabulary is refused */
    bool add_bos, add_eos, add_space_prefix;
};

uint32_t tok_n_vocab(const tok_vocab *v)
{
    return v->n;
}

const char *tok_model(const tok_vocab *v)
{
    return v->kind == KIND_SPM ? "llama" : "gpt2";
}

int32_t tok_bos(const tok_vocab *v)
{
    return v->bos;
}

int32_t tok_eos(const tok_vocab *v)
{
    return v->eos;
}

int32_t tok_eot(const tok_vocab *v)
{
    return v->eot;
}

int32_t tok_unk(const tok_vocab *v)
{
    return v->unk;
}

int32_t tok_pad(const tok_vocab *v)
{
    return v->pad;
}

static bool valid_id(const tok_vocab *v, int32_t id)
{
    return id >= 0 && (uint32_t)id < v->n;
}

bool tok_is_eog(const tok_vocab *v, int32_t id)
{
    return valid_id(v, id) && (v->attr[id] & A_EOG);
}

size_t tok_eog(const tok_vocab *v, const int32_t **ids)
{
    *ids = v->eog;
    return v->n_eog;
}

bool tok_is_control(const tok_vocab *v, int32_t id)
{
    return valid_id(v, id) && (v->attr[id] & (A_CONTROL | A_UNKNOWN));
}

bool tok_add_bos(const tok_vocab *v)
{
    return v->add_bos;
}

bool tok_add_eos(const tok_vocab *v)
{
    return v->add_eos;
}

const char *tok_text(const tok_vocab *v, int32_t id, size_t *len)
{
    if (!valid_id(v, id))
        return NULL;
    return strset_str(&v->strs, (size_t)id, len);
}

/* The token with exactly this text, or TOK_NONE. */
static int32_t find_token(const tok_vocab *v, const char *s, size_t len)
{
    int64_t i = strset_find(&v->strs, s, len);
    return i >= 0 && (uint64_t)i < v->n ? (int32_t)i : TOK_NONE;
}

void tok_free(tok_vocab *v)
{
    if (!v)
        return;
    strset_free(&v->strs);
    free(v->score_rank);
    free(v->attr);
    free(v->byte_val);
    free(v->specials);
    free(v->eog);
    free(v->pieces);
    free(v->piece_off);
    free(v->piece_len);
    free(v->merges.slots);
    free(v);
}

/* ---- loading ---- */

#define K_MODEL "tokenizer.ggml.model"
#define K_PRE "tokenizer.ggml.pre"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_SCORES "tokenizer.ggml.scores"
#define K_TYPES "tokenizer.ggml.token_type"
#define K_MERGES "tokenizer.ggml.merges"

/* A string array that must be there; `why` says what its absence means. */
static int get_required_strs(const gguf_file *f, const char *key, const char *why,
                             const gguf_str **items, uint64_t *n, llmq_err *err)
{
    int rc = gguf_get_str_array(f, key, items, n, err);
    if (rc > 0)
        return llmq_errf(err, "%s is missing: %s", key, why);
    return rc;
}

static int load_tokens(tok_vocab *v, const gguf_file *f, llmq_err *err)
{
    const gguf_str *items;
    uint64_t n;
    if (get_required_strs(f, K_TOKENS, "the file has no vocabulary", &items, &n, err) < 0)
        return -1;
    if (n == 0 || n >= INT32_MAX)
        return llmq_errf(err, "%s has %" PRIu64 " tokens", K_TOKENS, n);
    v->n = (uint32_t)n;
    if (strset_init(&v->strs) < 0)
        return llmq_errf(err, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        char empty[32];
        const char *s = items[i].ptr;
        size_t len = (size_t)items[i].len;
        if (len == 0) { /* llama.cpp's stand-in, so that every token has a text */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%" PRIu64 "]", i);
            s = empty;
        }
        int64_t dup = strset_find(&v->strs, s, len);
        if (dup >= 0)
            return llmq_errf(err, "%s: token %" PRIu64 " repeats token %" PRId64 " ('%.*s')",
                             K_TOKENS, i, dup, (int)(len > 64 ? 64 : len), s);
        if (strset_add(&v->strs, s, len) < 0)
            return llmq_errf(err, "out of memory reading %s", K_TOKENS);
        if (len > v->max_token_len)
            v->max_token_len = len;
    }
    return 0;
}

/* A numeric array of exactly v->n elements of one of the accepted types. */
static int get_token_array(const tok_vocab *v, const gguf_file *f, const char *key, gguf_vtype t1,
                           gguf_vtype t2, gguf_vtype *type, const void **data, llmq_err *err)
{
    uint64_t n;
    int rc = gguf_get_array(f, key, type, data, &n, err);
    if (rc != 0)
        return rc;
    if (*type != t1 && *type != t2)
        return llmq_errf(err, "%s: elements are %s, expected %s", key, gguf_vtype_name(*type),
                         gguf_vtype_name(t1));
    if (n != v->n)
        return llmq_errf(err, "%s has %" PRIu64 " entries but %s has %" PRIu32, key, n, K_TOKENS,
                         v->n);
    return 0;
}

static int cmp_score_desc(const void *a, const void *b, void *ctx)
{
    const float *score = ctx;
    float x = score[*(const uint32_t *)a], y = score[*(const uint32_t *)b];
    return (x < y) - (x > y);
}

/* SentencePiece merges the highest score first: the heap orders by the rank
 * of the score instead, an integer. */
static int rank_scores(tok_vocab *v, const float *score, llmq_err *err)
{
    uint32_t *order = malloc(v->n * sizeof *order);
    v->score_rank = malloc(v->n * sizeof *v->score_rank);
    if (!order || !v->score_rank) {
        free(order);
        return llmq_errf(err, "out of memory");
    }
    for (uint32_t i = 0; i < v->n; i++)
        order[i] = i;
    qsort_r(order, v->n, sizeof *order, cmp_score_desc, (void *)score);
    for (uint32_t i = 0, rank = 0; i < v->n; i++) {
        if (i > 0 && score[order[i]] != score[order[i - 1]])
            rank++;
        v->score_rank[order[i]] = rank;
    }
    free(order);
    return 0;
}

/* Scores (float or integer; absent: all 0), which only SentencePiece uses. */
static int load_scores(tok_vocab *v, const gguf_file *f, llmq_err *err)
{
    gguf_vtype type;
    const void *data;
    int rc = get_token_array(v, f, K_SCORES, GGUF_FLOAT32, GGUF_INT32, &type, &data, err);
    if (rc < 0 || v->kind != KIND_SPM)
        return rc < 0 ? -1 : 0;
    bool present = rc == 0;
    float *score = calloc(v->n, sizeof *score);
    if (!score)
        return llmq_errf(err, "out of memory");
    for (uint32_t i = 0; present && i < v->n; i++) {
        if (type == GGUF_FLOAT32) {
            memcpy(&score[i], (const char *)data + 4 * (size_t)i, 4);
        } else {
            int32_t s;
            memcpy(&s, (const char *)data + 4 * (size_t)i, 4);
            score[i] = (float)s;
        }
        if (score[i] != score[i]) {
            free(score);
            return llmq_errf(err, "%s: the score of token %" PRIu32 " is NaN", K_SCORES, i);
        }
    }
    rc = rank_scores(v, score, err);
    free(score);
    return rc;
}

static uint16_t attr_of_type(int32_t t)
{
    switch (t) {
    case TT_NORMAL: return A_NORMAL;
    case TT_UNKNOWN: return A_UNKNOWN;
    case TT_CONTROL: return A_CONTROL;
    case TT_USER_DEFINED: return A_USER_DEFINED;
    case TT_UNUSED: return A_UNUSED;
    case TT_BYTE: return A_BYTE;
    default: return 0; /* undefined: never rendered, never matched */
    }
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The byte a <0xNN> token stands for, or -1. */
static int byte_token_value(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int load_types(tok_vocab *v, const gguf_file *f, llmq_err *err)
{
    gguf_vtype type;
    const void *data = NULL;
    v->attr = malloc(v->n * sizeof *v->attr);
    v->byte_val = calloc(v->n, 1);
    if (!v->attr || !v->byte_val)
        return llmq_errf(err, "out of memory");
    int rc = get_token_array(v, f, K_TYPES, GGUF_INT32, GGUF_INT32, &type, &data, err);
    if (rc < 0)
        return -1;
    for (uint32_t i = 0; i < v->n; i++) {
        int32_t t = TT_NORMAL;
        if (rc == 0)
            memcpy(&t, (const char *)data + 4 * (size_t)i, 4);
        v->attr[i] = attr_of_type(t);
        if (!(v->attr[i] & A_BYTE))
            continue;
        size_t len;
        const char *s = strset_str(&v->strs, i, &len);
        int b = byte_token_value(s, len);
        if (b < 0)
            return llmq_errf(err, "%s: token %" PRIu32 " '%.*s' has type byte but is not <0xNN>",
                             K_TYPES, i, (int)(len > 64 ? 64 : len), s);
        v->byte_val[i] = (uint8_t)b;
    }
    return 0;
}

/* GPT-2's byte-to-printable-character map: printable Latin-1 bytes stand for
 * themselves, the others take code points from U+0100 on, in byte order. */
static void byte_level_map(uint16_t cpt[256])
{
    uint16_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cpt[b] = printable ? (uint16_t)b : next++;
    }
}

static int merge_insert(merge_table *t, uint32_t left, uint32_t right, uint32_t rank,
                        uint32_t result)
{
    uint64_t key = (uint64_t)left << 32 | right;
    for (size_t h = merge_hash(key, t->mask);; h = (h + 1) & t->mask) {
        merge_slot *m = &t->slots[h];
        if (m->rank == UINT32_MAX) {
            *m = (merge_slot){key, rank, result};
            return 0;
        }
        if (m->key == key)
            return 0; /* a repeated pair keeps its first rank, as in llama.cpp */
    }
}

/* The string index of s, adding it (as a non-token) when absent. */
static int intern(tok_vocab *v, const char *s, size_t len, uint32_t *idx)
{
    int64_t i = strset_find(&v->strs, s, len);
    if (i < 0) {
        if (strset_add(&v->strs, s, len) < 0)
            return -1;
        i = (int64_t)v->strs.n - 1;
    }
    *idx = (uint32_t)i;
    return 0;
}

static int add_merge(tok_vocab *v, const char *s, size_t len, uint32_t rank, llmq_err *err)
{
    const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
    if (!sp || (size_t)(sp - s) + 1 == len)
        return llmq_errf(err, "%s[%" PRIu32 "] '%.*s' is not \"left right\"", K_MERGES, rank,
                         (int)(len > 64 ? 64 : len), s);
    size_t nl = (size_t)(sp - s), nr = len - nl - 1;
    char *joined = malloc(nl + nr);
    uint32_t l, r, j;
    if (!joined)
        return llmq_errf(err, "out of memory");
    memcpy(joined, s, nl);
    memcpy(joined + nl, sp + 1, nr);
    int rc = intern(v, s, nl, &l) < 0 || intern(v, sp + 1, nr, &r) < 0 ||
             intern(v, joined, nl + nr, &j) < 0;
    free(joined);
    if (rc)
        return llmq_errf(err, "out of memory reading %s", K_MERGES);
    return merge_insert(&v->merges, l, r, rank, j);
}

static int load_merges(tok_vocab *v, const gguf_file *f, llmq_err *err)
{
    const gguf_str *items;
    uint64_t n;
    if (get_required_strs(f, K_MERGES, "a gpt2 vocabulary needs its merges", &items, &n, err) < 0)
        return -1;
    if (n >= UINT32_MAX) /* rank UINT32_MAX marks an empty slot */
        return llmq_errf(err, "%s has %" PRIu64 " merges", K_MERGES, n);
    size_t size = 1024;
    while (size < 2 * n)
        size *= 2;
    v->merges.slots = malloc(size * sizeof *v->merges.slots);
    if (!v->merges.slots)
        return llmq_errf(err, "out of memory");
    for (size_t i = 0; i < size; i++)
        v->merges.slots[i].rank = UINT32_MAX;
    v->merges.mask = size - 1;
    for (uint64_t i = 0; i < n; i++)
        if (add_merge(v, items[i].ptr, (size_t)items[i].len, (uint32_t)i, err) < 0)
            return -1;
    return 0;
}

/* One special id key: absent keeps *id (a default out of range means none);
 * 0xFFFFFFFF or -1 mean none; any other id past the vocabulary is an error. */
static int load_special_id(tok_vocab *v, const gguf_file *f, const char *key, int32_t *id,
                           llmq_err *err)
{
    if (*id != TOK_NONE && !valid_id(v, *id))
        *id = TOK_NONE;
    uint32_t u;
    int rc = gguf_get_u32(f, key, &u, err);
    if (rc > 0)
        return 0;
    if (rc < 0) {
        int32_t s;
        if (gguf_get_i32(f, key, &s, NULL) != 0 || s != -1)
            return -1;
        u = UINT32_MAX;
    }
    if (u == UINT32_MAX) {
        *id = TOK_NONE;
        return 0;
    }
    if (u >= v->n)
        return llmq_errf(err, "%s = %" PRIu32 " is past the vocabulary (%" PRIu32 " tokens)", key,
                         u, v->n);
    *id = (int32_t)u;
    return 0;
}

static int load_flag(const gguf_file *f, const char *key, bool *flag, llmq_err *err)
{
    return gguf_get_bool(f, key, flag, err) < 0 ? -1 : 0;
}

static int load_specials(tok_vocab *v, const gguf_file *f, llmq_err *err)
{
    const struct {
        const char *key;
        int32_t *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},
        {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},
        {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},
        {"tokenizer.ggml.seperator_token_id", &v->sep}, /* sic: the GGUF key's spelling */
        {"tokenizer.ggml.padding_token_id", &v->pad},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (load_special_id(v, f, ids[i].key, ids[i].id, err) < 0)
            return -1;
    if (load_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err) < 0 ||
        load_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err) < 0 ||
        load_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err) < 0)
        return -1;
    if (v->add_bos && v->bos == TOK_NONE)
        return llmq_errf(err, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
    if (v->add_eos && v->eos == TOK_NONE)
        return llmq_errf(err, "tokenizer.ggml.add_eos_token is true but there is no EOS token");
    return 0;
}

/* Tokens llama.cpp (c2b1518, llama-vocab.cpp) recognises by their text,
 * since converters do not always record their role: each becomes a control
 * token.  R_EOT and R_EOM: the first found plays the role when no key gives
 * it.  R_FIM_*: the first found of each group ends generation.  R_EOG: ends
 * generation.  llama.cpp walks a hash map, so where a vocabulary holds two
 * names of one group its pick is unspecified; ours is the first in this
 * table (the order llama.cpp lists them in). */
enum {
    R_EOT = 1,
    R_EOM = 2,
    R_EOG = 4,
    R_FIM = 8,
    R_FIM_PAD = 16,
    R_FIM_REP = 32,
    R_FIM_SEP = 64,
};

#define DS_BAR "\xef\xbd\x9c" /* U+FF5C, DeepSeek's fullwidth bar */
#define SP SPACE_ESC

static const struct {
    const char *text;
    unsigned roles;
} k_named[] = {
    {"<|eot_id|>", R_EOT | R_EOG},
    {"<|im_end|>", R_EOT | R_EOG},
    {"<|end|>", R_EOT | R_EOG},
    {"<end_of_turn>", R_EOT | R_EOG},
    {"<|endoftext|>", R_EOT | R_EOG},
    {"<|end_of_text|>", R_EOT | R_EOG},
    {"<EOT>", R_EOT | R_EOG},
    {"_<EOT>", R_EOT | R_EOG},
    {"[EOT]", R_EOT | R_EOG},
    {"<" DS_BAR "end" SP "of" SP "sentence" DS_BAR ">", R_EOT | R_EOG},
    {"<end_of_utterance>", R_EOT | R_EOG},
    {"<|eom_id|>", R_EOM | R_EOG},
    {"<|return|>", R_EOG},
    {"<|call|>", R_EOG},
    {"<|flush|>", R_EOG},
    {"<|calls|>", R_EOG},
    {"</s>", R_EOG},
    {"[EOS]", R_EOG},
    {"<eos>", R_EOG},
    {"<turn|>", R_EOG},
    {"<|tool_response>", R_EOG},
    {"<|fim_pad|>", R_FIM_PAD},
    {"<fim-pad>", R_FIM_PAD},
    {"<fim_pad>", R_FIM_PAD},
    {"<PAD>", R_FIM_PAD},
    {"[PAD]", R_FIM_PAD},
    {"<|fim_repo|>", R_FIM_REP},
    {"<|repo_name|>", R_FIM_REP},
    {"<fim-repo>", R_FIM_REP},
    {"<REPO>", R_FIM_REP},
    {"<reponame>", R_FIM_REP},
    {"<|file_sep|>", R_FIM_SEP},
    {"<|fim_prefix|>", R_FIM},
    {"<fim-prefix>", R_FIM},
    {"<fim_prefix>", R_FIM},
    {"<" DS_BAR "fim" SP "begin" DS_BAR ">", R_FIM},
    {"<PRE>", R_FIM},
    {SP "<PRE>", R_FIM},
    {"<|code_prefix|>", R_FIM},
    {"<|prefix|>", R_FIM},
    {"<|fim_suffix|>", R_FIM},
    {"<fim-suffix>", R_FIM},
    {"<fim_suffix>", R_FIM},
    {"<" DS_BAR "fim" SP "hole" DS_BAR ">", R_FIM},
    {"<SUF>", R_FIM},
    {SP "<SUF>", R_FIM},
    {"<|code_suffix|>", R_FIM},
    {"<|suffix|>", R_FIM},
    {"<|fim_middle|>", R_FIM},
    {"<fim-middle>", R_FIM},
    {"<fim_middle>", R_FIM},
    {"<" DS_BAR "fim" SP "end" DS_BAR ">", R_FIM},
    {"<MID>", R_FIM},
    {SP "<MID>", R_FIM},
    {"<|code_middle|>", R_FIM},
    {"<|middle|>", R_FIM},
};

#undef SP

static int32_t named_token(const tok_vocab *v, const char *text)
{
    return find_token(v, text, strlen(text));
}

/* llama.cpp's two exceptions: where a vocabulary ends turns with
 * <|return|>/<|call|> (or <|calls|>/<|flush|>), <|end|> only separates
 * messages; where it has <|tool_response>, </s> is ordinary text. */
static void apply_eog_exceptions(tok_vocab *v)
{
    const int32_t end = named_token(v, "<|end|>"), s = named_token(v, "</s>");
    bool eog_return = tok_is_eog(v, named_token(v, "<|return|>"));
    bool eog_call = tok_is_eog(v, named_token(v, "<|call|>")) ||
                    tok_is_eog(v, named_token(v, "<|calls|>"));
    bool eog_flush = tok_is_eog(v, named_token(v, "<|flush|>"));
    if (tok_is_eog(v, end) && eog_call && (eog_return || eog_flush))
        v->attr[end] = A_USER_DEFINED;
    if (tok_is_eog(v, s) && tok_is_eog(v, named_token(v, "<|tool_response>")))
        v->attr[s] = A_NORMAL;
}

static int mark_named_tokens(tok_vocab *v, llmq_err *err)
{
    unsigned fim_seen = 0; /* the R_FIM_* groups whose first token was found */
    for (size_t i = 0; i < sizeof k_named / sizeof k_named[0]; i++) {
        int32_t id = named_token(v, k_named[i].text);
        if (id == TOK_NONE)
            continue;
        unsigned r = k_named[i].roles;
        if ((r & R_EOT) && v->eot == TOK_NONE)
            v->eot = id;
        if ((r & R_EOM) && v->eom == TOK_NONE)
            v->eom = id;
        v->attr[id] |= A_CONTROL;
        const unsigned fim = r & (R_FIM_PAD | R_FIM_REP | R_FIM_SEP);
        if ((r & R_EOG) || (fim && !(fim_seen & fim)))
            v->attr[id] |= A_EOG;
        fim_seen |= fim;
    }
    int32_t ends[] = {v->eos, v->eot, v->eom};
    for (size_t i = 0; i < 3; i++)
        if (ends[i] != TOK_NONE)
            v->attr[ends[i]] |= A_EOG;
    apply_eog_exceptions(v);
    v->eog = malloc(v->n * sizeof *v->eog);
    if (!v->eog)
        return llmq_errf(err, "out of memory");
    for (uint32_t i = 0; i < v->n; i++)
        if (v->attr[i] & A_EOG)
            v->eog[v->n_eog++] = (int32_t)i;
    return 0;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const tok_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->strs.span[x].len, ly = v->strs.span[y].len;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int collect_specials(tok_vocab *v, llmq_err *err)
{
    v->specials = malloc(v->n * sizeof *v->specials);
    if (!v->specials)
        return llmq_errf(err, "out of memory");
    for (uint32_t i = 0; i < v->n; i++)
        if (v->attr[i] & (A_CONTROL | A_USER_DEFINED | A_UNKNOWN))
            v->specials[v->n_specials++] = (int32_t)i;
    qsort_r(v->specials, v->n_specials, sizeof *v->specials, cmp_special, v);
    return 0;
}

/* llama.cpp's per-model attribute fix-up: Phi-3's special tokens swallow the
 * whitespace after them (HF's rstrip), except <unk>, <s> and <|endoftext|>. */
static void apply_model_strips(tok_vocab *v, const gguf_file *f)
{
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name, NULL) != 0)
        return;
    char low[256];
    size_t n = name.len < sizeof low - 1 ? (size_t)name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return;
    for (size_t i = 0; i < v->n_specials; i++)
        v->attr[v->specials[i]] |= A_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    int32_t eos_text = find_token(v, "</s>", 4);
    if (eos_text != TOK_NONE)
        v->attr[eos_text] |= A_RSTRIP;
    for (size_t i = 0; i < 3; i++) {
        int32_t id = find_token(v, keep[i], strlen(keep[i]));
        if (id != TOK_NONE)
            v->attr[id] &= (uint16_t)~A_RSTRIP;
    }
}

/* ---- pieces ---- */

typedef struct bytebuf {
    char *p;
    size_t n, cap;
} bytebuf;

static int buf_put(bytebuf *b, const void *s, size_t n)
{
    if (grow_reserve(&b->p, &b->cap, b->n + n + 1, 1) < 0)
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* A byte-level BPE string back to bytes (llama_decode_text). */
static int decode_byte_level(const tok_vocab *v, const char *s, size_t len, bytebuf *out)
{
    uint32_t *cpts;
    size_t n;
    if (pretok_decode(s, len, &cpts, &n, NULL) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int b = cpts[i] < 0x144 ? v->cpt_byte[cpts[i]] : -1;
        if (b >= 0) {
            unsigned char c = (unsigned char)b;
            rc = buf_put(out, &c, 1);
            continue;
        }
        /* Not a byte character: llama.cpp writes this marker instead. */
        char u[4], hex[16];
        size_t nu = pretok_encode_cpt(cpts[i], u);
        rc = buf_put(out, "[UNK_BYTE_0x", 12);
        for (size_t k = 0; k < nu && rc == 0; k++) {
            snprintf(hex, sizeof hex, "%02x", (unsigned char)u[k]);
            rc = buf_put(out, hex, 2);
        }
        if (rc == 0)
            rc = buf_put(out, s, len) < 0 || buf_put(out, "]", 1) < 0 ? -1 : 0;
    }
    free(cpts);
    return rc;
}

static int piece_of(const tok_vocab *v, uint32_t id, bytebuf *out)
{
    size_t len;
    const char *s = strset_str(&v->strs, id, &len);
    uint16_t a = v->attr[id];
    if (a & (A_UNKNOWN | A_CONTROL | A_USER_DEFINED))
        return buf_put(out, s, len);
    if (a & A_BYTE)
        return buf_put(out, &v->byte_val[id], 1);
    if (!(a & A_NORMAL))
        return 0;
    if (v->kind == KIND_BPE)
        return decode_byte_level(v, s, len, out);
    for (size_t i = 0; i < len;) {
        if (len - i >= SPACE_ESC_LEN && memcmp(s + i, SPACE_ESC, SPACE_ESC_LEN) == 0) {
            if (buf_put(out, " ", 1) < 0)
                return -1;
            i += SPACE_ESC_LEN;
        } else if (buf_put(out, s + i++, 1) < 0) {
            return -1;
        }
    }
    return 0;
}

static int build_pieces(tok_vocab *v, llmq_err *err)
{
    bytebuf b = {0};
    v->piece_off = malloc(v->n * sizeof *v->piece_off);
    v->piece_len = malloc(v->n * sizeof *v->piece_len);
    if (!v->piece_off || !v->piece_len)
        return llmq_errf(err, "out of memory");
    for (uint32_t i = 0; i < v->n; i++) {
        size_t start = b.n;
        if (piece_of(v, i, &b) < 0 || b.n > UINT32_MAX) {
            free(b.p);
            return llmq_errf(err, "out of memory building token pieces");
        }
        v->piece_off[i] = (uint32_t)start;
        v->piece_len[i] = (uint32_t)(b.n - start);
        if (b.n - start > v->max_piece)
            v->max_piece = b.n - start;
    }
    v->pieces = b.p;
    return 0;
}

/* ---- byte tables ---- */

static void build_byte_tables(tok_vocab *v)
{
    byte_level_map(v->byte_cpt);
    memset(v->cpt_byte, 0xFF, sizeof v->cpt_byte);
    for (int b = 0; b < 256; b++)
        v->cpt_byte[v->byte_cpt[b]] = (int16_t)b;
    for (int b = 0; b < 256; b++) {
        char s[8];
        v->byte_sym[b] = TOK_NONE;
        v->byte_tok[b] = TOK_NONE;
        if (v->kind == KIND_BPE) {
            int64_t i = strset_find(&v->strs, s, pretok_encode_cpt(v->byte_cpt[b], s));
            v->byte_sym[b] = (int32_t)i;
            continue;
        }
        if (b < 128) {
            s[0] = (char)b;
            v->char_tok[b] = find_token(v, s, 1);
        }
        snprintf(s, sizeof s, "<0x%02X>", b);
        int32_t id = find_token(v, s, 6);
        if (id == TOK_NONE) {
            s[0] = (char)b;
            id = find_token(v, s, 1);
        }
        v->byte_tok[b] = id;
    }
}

static int load_kind(tok_vocab *v, const gguf_file *f, llmq_err *err)
{
    gguf_str model, pre;
    int rc = gguf_get_str(f, K_MODEL, &model, err);
    if (rc < 0)
        return -1;
    if (rc > 0)
        return llmq_errf(err, "%s is missing: the file has no tokenizer", K_MODEL);
    if (gguf_str_eq(model, "llama")) {
        v->kind = KIND_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
        return 0;
    }
    if (!gguf_str_eq(model, "gpt2"))
        return llmq_errf(err, "%s = '%.*s' is not supported (llama, gpt2)", K_MODEL,
                         (int)(model.len > 64 ? 64 : model.len), model.ptr);
    v->kind = KIND_BPE;
    rc = gguf_get_str(f, K_PRE, &pre, err);
    if (rc < 0)
        return -1;
    v->pre = pretok_find(rc > 0 ? NULL : pre.ptr, rc > 0 ? 0 : (size_t)pre.len);
    if (!v->pre)
        return llmq_errf(err, "%s = '%.*s' is not a known pre-tokenizer (known: %s)", K_PRE,
                         (int)(pre.len > 64 ? 64 : pre.len), pre.ptr, pretok_known_names());
    v->bos = 11, v->eos = 11; /* llama.cpp's defaults for gpt2 vocabularies */
    v->add_bos = pretok_default_add_bos(v->pre);
    return 0;
}

int tok_load(tok_vocab **out, const gguf_file *f, llmq_err *err)
{
    *out = NULL;
    tok_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return llmq_errf(err, "out of memory");
    v->eot = v->eom = v->sep = v->pad = v->unk = TOK_NONE;
    int rc = load_kind(v, f, err);
    if (rc == 0)
        rc = load_tokens(v, f, err);
    if (rc == 0)
        rc = load_scores(v, f, err);
    if (rc == 0)
        rc = load_types(v, f, err);
    if (rc == 0 && v->kind == KIND_BPE)
        rc = load_merges(v, f, err);
    if (rc == 0)
        rc = load_specials(v, f, err);
    if (rc == 0)
        rc = mark_named_tokens(v, err);
    if (rc == 0)
        rc = collect_specials(v, err);
    if (rc == 0) {
        apply_model_strips(v, f);
        build_byte_tables(v);
        rc = build_pieces(v, err);
    }
    if (rc < 0) {
        llmq_err_prefix(err, "tokenizer of %s", gguf_path(f));
        tok_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- encoding ---- */

typedef struct idvec {
    int32_t *v;
    size_t n, cap;
} idvec;

static int ids_push(idvec *o, int32_t id)
{
    if (grow_reserve(&o->v, &o->cap, o->n + 1, sizeof *o->v) < 0)
        return -1;
    o->v[o->n++] = id;
    return 0;
}

/* A run of text, or a special token found in it. */
typedef struct frag {
    int32_t id; /* TOK_NONE: text */
    size_t off, len;
} frag;

typedef struct fragvec {
    frag *v;
    size_t n, cap;
} fragvec;

static int frag_push(fragvec *o, int32_t id, size_t off, size_t len)
{
    if (grow_reserve(&o->v, &o->cap, o->n + 1, sizeof *o->v) < 0)
        return -1;
    o->v[o->n++] = (frag){id, off, len};
    return 0;
}

static bool is_c_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Where control and unknown tokens written in the text are taken as those
 * tokens: sorted, disjoint byte ranges of the text.  NULL: everywhere. */
typedef struct ranges {
    const strspan *v;
    size_t n;
} ranges;

/* Whether text[at, at + len) lies inside one of the ranges. */
static bool in_ranges(const ranges *r, size_t at, size_t len)
{
    size_t lo = 0, hi = r->n; /* the first range that starts after `at` */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->v[mid].off <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && at + len <= (size_t)r->v[lo - 1].off + r->v[lo - 1].len;
}

/* Cuts one text fragment at every occurrence of special token id that
 * `where` allows (NULL: every one); the others stay text. */
static int split_at_special(const tok_vocab *v, const char *text, frag fr, int32_t id,
                            const ranges *where, fragvec *out)
{
    size_t slen;
    const char *s = strset_str(&v->strs, (size_t)id, &slen);
    uint16_t a = v->attr[id];
    size_t off = fr.off, end = fr.off + fr.len, from = off;
    while (off < end) {
        const char *m = memmem(text + from, end - from, s, slen);
        if (!m)
            return frag_push(out, TOK_NONE, off, end - off);
        size_t at = (size_t)(m - text), left = at - off;
        if (where && !in_ranges(where, at, slen)) {
            from = at + 1;
            continue;
        }
        if (a & A_LSTRIP)
            while (left > 0 && is_c_space(text[off + left - 1]))
                left--;
        if ((left > 0 && frag_push(out, TOK_NONE, off, left) < 0) || frag_push(out, id, 0, 0) < 0)
            return -1;
        off = at + slen;
        if (a & A_RSTRIP)
            while (off < end && is_c_space(text[off]))
                off++;
        from = off;
    }
    return 0;
}

/* llama.cpp's tokenizer_st_partition: special tokens, longest first, cut the
 * text into fragments; user-defined ones wherever they are, control and
 * unknown ones where `controls` allows (NULL: everywhere). */
static int partition(const tok_vocab *v, const char *text, size_t len, const ranges *controls,
                     fragvec *frags)
{
    fragvec next = {0};
    if (len > 0 && frag_push(frags, TOK_NONE, 0, len) < 0)
        return -1;
    for (size_t k = 0; k < v->n_specials && len > 0; k++) {
        int32_t id = v->specials[k];
        size_t slen;
        const char *s = strset_str(&v->strs, (size_t)id, &slen);
        const ranges *where = (v->attr[id] & (A_CONTROL | A_UNKNOWN)) ? controls : NULL;
        if ((where && where->n == 0) || !memmem(text, len, s, slen))
            continue;
        next.n = 0;
        for (size_t i = 0; i < frags->n; i++) {
            int rc = frags->v[i].id != TOK_NONE
                         ? frag_push(&next, frags->v[i].id, 0, 0)
                         : split_at_special(v, text, frags->v[i], id, where, &next);
            if (rc < 0) {
                free(next.v);
                return -1;
            }
        }
        fragvec t = *frags;
        *frags = next;
        next = t;
    }
    free(next.v);
    return 0;
}

/* The merge machinery both algorithms share: symbols in a linked list over a
 * byte buffer, and a heap of candidate merges of neighbours. */
typedef struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes in the session buffer; n = 0: merged away */
    int32_t id;      /* token (SPM) or string index (BPE) of the text, or TOK_NONE */
} sym;

typedef struct bigram {
    uint64_t key; /* priority << 32 | left: smaller first, ties to the left */
    int32_t right;
    uint32_t size;
    int32_t result;
} bigram;

typedef struct session {
    const tok_vocab *v;
    bytebuf buf;
    sym *syms;
    size_t n_syms, cap_syms;
    bigram *heap;
    size_t n_heap, cap_heap;
    idvec *out;
} session;

static bool before(const bigram *a, const bigram *b)
{
    return a->key < b->key;
}

static int32_t bigram_left(const bigram *b)
{
    return (int32_t)(uint32_t)b->key;
}

static int heap_push(session *s, bigram b)
{
    if (grow_reserve(&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap) < 0)
        return -1;
    size_t i = s->n_heap++;
    while (i > 0 && before(&b, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = b;
    return 0;
}

static bigram heap_pop(session *s)
{
    bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

static int sym_push(session *s, uint32_t off, uint32_t n, int32_t id)
{
    if (grow_reserve(&s->syms, &s->cap_syms, s->n_syms + 1, sizeof *s->syms) < 0)
        return -1;
    int32_t i = (int32_t)s->n_syms++;
    s->syms[i] = (sym){i - 1, -1, off, n, id};
    if (i > 0)
        s->syms[i - 1].next = i;
    return 0;
}

/* Queues the merge of neighbours left and right if the vocabulary has one. */
static int try_pair(session *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const tok_vocab *v = s->v;
    const sym *l = &s->syms[left], *r = &s->syms[right];
    bigram b = {0, right, l->n + r->n, TOK_NONE};
    uint32_t prio;
    if (v->kind == KIND_SPM) {
        if (b.size > v->max_token_len)
            return 0;
        b.result = find_token(v, s->buf.p + l->off, b.size);
        if (b.result == TOK_NONE)
            return 0;
        prio = v->score_rank[b.result];
    } else {
        if (l->id < 0 || r->id < 0)
            return 0;
        const merge_slot *m = merge_find(&v->merges, (uint32_t)l->id, (uint32_t)r->id);
        if (!m)
            return 0;
        prio = m->rank;
        b.result = (int32_t)m->result;
    }
    b.key = (uint64_t)prio << 32 | (uint32_t)left;
    return heap_push(s, b);
}

static int merge_all(session *s)
{
    s->n_heap = 0;
    for (size_t i = 1; i < s->n_syms; i++)
        if (try_pair(s, (int32_t)i - 1, (int32_t)i) < 0)
            return -1;
    while (s->n_heap > 0) {
        bigram b = heap_pop(s);
        int32_t left = bigram_left(&b);
        sym *l = &s->syms[left], *r = &s->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* one side changed since this was queued */
        l->n += r->n;
        r->n = 0;
        l->id = b.result;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = left;
        if (try_pair(s, l->prev, left) < 0 || try_pair(s, left, l->next) < 0)
            return -1;
    }
    return 0;
}

/* A symbol SentencePiece has no token for: its bytes, else one unknown. */
static int spm_fallback(session *s, const sym *y, llmq_err *err)
{
    const tok_vocab *v = s->v;
    const unsigned char *p = (const unsigned char *)s->buf.p + y->off;
    bool all = true;
    for (uint32_t i = 0; i < y->n; i++)
        all = all && v->byte_tok[p[i]] != TOK_NONE;
    if (all) {
        for (uint32_t i = 0; i < y->n; i++)
            if (ids_push(s->out, v->byte_tok[p[i]]) < 0)
                return llmq_errf(err, "out of memory");
        return 0;
    }
    if (v->unk == TOK_NONE)
        return llmq_errf(err, "no token for the character '%.*s' (no byte token, no unknown token)",
                         (int)y->n, (const char *)p);
    return ids_push(s->out, v->unk) < 0 ? llmq_errf(err, "out of memory") : 0;
}

/* SentencePiece merges one whole text run at a time, which for long texts
 * makes a heap too large for the caches.  A run is cut into chunks of about
 * SPM_CHUNK bytes where no token of the vocabulary spans the cut: every
 * merged symbol is a token, so no merge can cross such a cut, and the chunks
 * merge exactly as the whole would. */
#define SPM_CHUNK 4096
#define SPM_CUT_TRIES 16

/* True when no token's text occurs in buf[0..n) across position cut.
 * Shorter spans first: a cut that fails usually fails on a short token. */
static bool spm_cut_ok(const tok_vocab *v, const char *buf, size_t n, size_t cut)
{
    for (size_t len = 2; len <= v->max_token_len; len++)
        for (size_t start = cut >= len - 1 ? cut - (len - 1) : 0; start < cut; start++)
            if (start + len <= n && find_token(v, buf + start, len) != TOK_NONE)
                return false;
    return true;
}

static size_t utf8_len_lead(unsigned char c)
{
    static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k_len[c >> 4];
}

/* The length of the symbol (a UTF-8 character, unchecked) at buf[off]. */
static size_t spm_sym_len(const char *buf, size_t n, size_t off)
{
    size_t k = utf8_len_lead((unsigned char)buf[off]);
    return k < n - off ? k : n - off;
}

/* Where the chunk that starts at `start` ends: a safe cut, or n. */
static size_t spm_chunk_end(const tok_vocab *v, const char *buf, size_t n, size_t start)
{
    size_t pos = start, attempt_at = start + SPM_CHUNK;
    int tries = 0;
    while (pos < n) {
        pos += spm_sym_len(buf, n, pos);
        /* Cuts are tried before a space, where tokens usually begin. */
        if (pos < attempt_at || n - pos < SPACE_ESC_LEN ||
            memcmp(buf + pos, SPACE_ESC, SPACE_ESC_LEN) != 0)
            continue;
        if (spm_cut_ok(v, buf, n, pos))
            return pos;
        if (++tries == SPM_CUT_TRIES) { /* tokens span these spaces: look further on */
            tries = 0;
            attempt_at = pos + SPM_CHUNK;
        }
    }
    return n;
}

static int spm_chunk(session *s, size_t start, size_t end, llmq_err *err)
{
    s->n_syms = 0;
    for (size_t off = start; off < end;) {
        size_t n = spm_sym_len(s->buf.p, end, off);
        unsigned char c = (unsigned char)s->buf.p[off];
        int32_t id = c < 128 ? s->v->char_tok[c] : find_token(s->v, s->buf.p + off, n);
        if (sym_push(s, (uint32_t)off, (uint32_t)n, id) < 0)
            return llmq_errf(err, "out of memory");
        off += n;
    }
    if (merge_all(s) < 0)
        return llmq_errf(err, "out of memory");
    for (int32_t i = s->n_syms ? 0 : -1; i >= 0; i = s->syms[i].next) {
        const sym *y = &s->syms[i];
        if (y->id != TOK_NONE) {
            if (ids_push(s->out, y->id) < 0)
                return llmq_errf(err, "out of memory");
        } else if (spm_fallback(s, y, err) < 0) {
            return -1;
        }
    }
    return 0;
}

/* SentencePiece over one text fragment: escape spaces, merge, emit. */
static int spm_fragment(session *s, const char *text, size_t len, bool prefix, llmq_err *err)
{
    s->buf.n = 0;
    int rc = prefix ? buf_put(&s->buf, SPACE_ESC, SPACE_ESC_LEN) : 0;
    for (size_t i = 0; i < len && rc == 0; i++)
        rc = text[i] == ' ' ? buf_put(&s->buf, SPACE_ESC, SPACE_ESC_LEN)
                            : buf_put(&s->buf, text + i, 1);
    if (rc < 0 || s->buf.n > UINT32_MAX / 2)
        return llmq_errf(err, "out of memory (or fragment too long) tokenizing %zu bytes", len);
    for (size_t start = 0; start < s->buf.n;) {
        size_t end = spm_chunk_end(s->v, s->buf.p, s->buf.n, start);
        if (spm_chunk(s, start, end, err) < 0)
            return -1;
        start = end;
    }
    return 0;
}

/* Byte-level BPE over one word: cpts[0..n) to printable characters, merge. */
static int bpe_word(session *s, const uint32_t *cpts, size_t n)
{
    const tok_vocab *v = s->v;
    s->buf.n = 0;
    s->n_syms = 0;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t nu = pretok_encode_cpt(cpts[i], u);
        for (size_t k = 0; k < nu; k++) {
            unsigned char b = (unsigned char)u[k];
            char c[4];
            size_t nc = pretok_encode_cpt(v->byte_cpt[b], c);
            if (sym_push(s, (uint32_t)s->buf.n, (uint32_t)nc, v->byte_sym[b]) < 0 ||
                buf_put(&s->buf, c, nc) < 0)
                return -1;
        }
    }
    if (pretok_ignore_merges(v->pre)) {
        int32_t whole = find_token(v, s->buf.p, s->buf.n);
        if (whole != TOK_NONE)
            return ids_push(s->out, whole);
    }
    if (merge_all(s) < 0)
        return -1;
    for (int32_t i = s->n_syms ? 0 : -1; i >= 0; i = s->syms[i].next) {
        const sym *y = &s->syms[i];
        if (y->id >= 0 && (uint32_t)y->id < v->n) {
            if (ids_push(s->out, y->id) < 0)
                return -1;
            continue;
        }
        /* Merged into a string that is not a token: llama.cpp emits the
         * single bytes of the text that are tokens, and drops the rest. */
        for (uint32_t k = 0; k < y->n; k++) {
            int32_t t = find_token(v, s->buf.p + y->off + k, 1);
            if (t != TOK_NONE && ids_push(s->out, t) < 0)
                return -1;
        }
    }
    return 0;
}

static int bpe_fragment(session *s, const char *text, size_t len, llmq_err *err)
{
    uint32_t *cpts = NULL;
    size_t n, *lens = NULL, n_words;
    if (pretok_decode(text, len, &cpts, &n, err) < 0)
        return -1;
    if (pretok_split(s->v->pre, cpts, n, &lens, &n_words, err) < 0) {
        free(cpts);
        return -1;
    }
    int rc = 0;
    for (size_t w = 0, start = 0; w < n_words && rc == 0; start += lens[w++])
        rc = bpe_word(s, cpts + start, lens[w]);
    free(cpts);
    free(lens);
    return rc < 0 ? llmq_errf(err, "out of memory tokenizing %zu bytes", len) : 0;
}

static int encode_fragments(session *s, const char *text, const fragvec *frags, llmq_err *err)
{
    bool prev_special = true; /* SentencePiece prefixes a space to the first run */
    for (size_t i = 0; i < frags->n; i++) {
        const frag *fr = &frags->v[i];
        int rc;
        if (fr->id != TOK_NONE)
            rc = ids_push(s->out, fr->id) < 0 ? llmq_errf(err, "out of memory") : 0;
        else if (s->v->kind == KIND_SPM)
            rc = spm_fragment(s, text + fr->off, fr->len, s->v->add_space_prefix && prev_special,
                              err);
        else
            rc = bpe_fragment(s, text + fr->off, fr->len, err);
        if (rc < 0)
            return -1;
        prev_special = fr->id != TOK_NONE;
    }
    return 0;
}

static int encode(const tok_vocab *v, const char *text, size_t len, bool add_bos,
                  const ranges *controls, int32_t **ids, size_t *n, llmq_err *err)
{
    idvec out = {0};
    fragvec frags = {0};
    session s = {.v = v, .out = &out};
    int rc = 0;
    *ids = NULL;
    *n = 0;
    if (add_bos && v->bos == TOK_NONE)
        rc = llmq_errf(err, "BOS requested but the vocabulary has no BOS token");
    else if (add_bos && ids_push(&out, v->bos) < 0)
        rc = llmq_errf(err, "out of memory");
    if (rc == 0 && partition(v, text, len, controls, &frags) < 0)
        rc = llmq_errf(err, "out of memory finding special tokens in %zu bytes", len);
    if (rc == 0)
        rc = encode_fragments(&s, text, &frags, err);
    free(frags.v);
    free(s.buf.p);
    free(s.syms);
    free(s.heap);
    if (rc < 0) {
        free(out.v);
        return llmq_err_prefix(err, "tokenize");
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
               int32_t **ids, size_t *n, llmq_err *err)
{
    static const ranges nowhere = {NULL, 0};
    return encode(v, text, len, add_bos, parse_special ? NULL : &nowhere, ids, n, err);
}

/* The segments that parse control tokens, runs of them merged, as ranges. */
static int parsed_ranges(const tok_segment *segs, size_t n_segs, size_t len, strspan **out,
                         ranges *r, llmq_err *err)
{
    size_t at = 0, cap = 0;
    *out = NULL;
    *r = (ranges){NULL, 0};
    for (size_t i = 0; i < n_segs; at += segs[i++].len) {
        if (segs[i].len > len - at)
            return llmq_errc(err, LLMQ_ERR_INVALID,
                             "tokenize: segment %zu ends past the text's %zu bytes", i, len);
        if (!segs[i].parse_special || segs[i].len == 0)
            continue;
        if (r->n > 0 && (size_t)(*out)[r->n - 1].off + (*out)[r->n - 1].len == at) {
            (*out)[r->n - 1].len += (uint32_t)segs[i].len;
            continue;
        }
        if (grow_reserve(out, &cap, r->n + 1, sizeof **out) < 0)
            return llmq_errc(err, LLMQ_ERR_NO_ROOM, "tokenize: out of memory");
        (*out)[r->n++] = (strspan){(uint32_t)at, (uint32_t)segs[i].len};
        r->v = *out;
    }
    if (at != len)
        return llmq_errc(err, LLMQ_ERR_INVALID,
                         "tokenize: the segments cover %zu of the text's %zu bytes", at, len);
    return 0;
}

int tok_encode_segments(const tok_vocab *v, const char *text, size_t len, const tok_segment *segs,
                        size_t n_segs, bool add_bos, int32_t **ids, size_t *n, llmq_err *err)
{
    *ids = NULL;
    *n = 0;
    if (len > UINT32_MAX)
        return llmq_errc(err, LLMQ_ERR_INVALID, "tokenize: %zu bytes of segmented text, at most %u",
                         len, UINT32_MAX);
    strspan *spans;
    ranges controls;
    int rc = parsed_ranges(segs, n_segs, len, &spans, &controls, err);
    if (rc == 0)
        rc = encode(v, text, len, add_bos, &controls, ids, n, err);
    free(spans);
    return rc;
}

/* ---- decoding ---- */

const char *tok_piece(const tok_vocab *v, int32_t id, bool special, size_t *len)
{
    if (!valid_id(v, id))
        return NULL;
    if (!special && (v->attr[id] & (A_CONTROL | A_UNKNOWN))) {
        *len = 0;
        return v->pieces ? v->pieces : "";
    }
    *len = v->piece_len[id];
    return v->pieces + v->piece_off[id];
}

size_t tok_max_piece(const tok_vocab *v)
{
    return v->max_piece;
}

/* The piece of id as detokenization emits it: the first token of a
 * SentencePiece text loses the space its encoding prefixed. */
static const char *emitted_piece(const tok_vocab *v, int32_t id, unsigned flags, bool first,
                                 size_t *len, llmq_err *err)
{
    const char *p = tok_piece(v, id, flags & TOK_SPECIAL, len);
    if (!p) {
        llmq_errf(err, "token id %" PRId32 " is out of range (vocabulary of %" PRIu32 ")", id,
                  v->n);
        return NULL;
    }
    if (first && (flags & TOK_STRIP_SPACE) && v->add_space_prefix && *len > 0 && p[0] == ' ') {
        p++;
        (*len)--;
    }
    return p;
}

int tok_detokenize(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char **text,
                   size_t *len, llmq_err *err)
{
    bytebuf b = {0};
    *text = NULL;
    if (buf_put(&b, "", 0) < 0)
        return llmq_errf(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = emitted_piece(v, ids[i], flags, i == 0, &pl, err);
        if (!p || buf_put(&b, p, pl) < 0) {
            free(b.p);
            return p ? llmq_errf(err, "out of memory") : llmq_err_prefix(err, "detokenize");
        }
    }
    b.p[b.n] = 0;
    *text = b.p;
    *len = b.n;
    return 0;
}

struct tok_stream {
    const tok_vocab *v;
    unsigned flags;
    bool started;
    size_t held;  /* bytes of an incomplete character kept from the last push */
    size_t ready; /* bytes handed out by the last push, before the held ones */
    char buf[];   /* held bytes + one piece */
};

int tok_stream_new(tok_stream **out, const tok_vocab *v, unsigned flags, llmq_err *err)
{
    tok_stream *s = calloc(1, sizeof *s + v->max_piece + 8);
    *out = s;
    if (!s)
        return llmq_errf(err, "out of memory");
    s->v = v;
    s->flags = flags;
    return 0;
}

void tok_stream_free(tok_stream *s)
{
    free(s);
}

static bool utf8_lead(unsigned char c, size_t *need)
{
    *need = c >= 0xF0 && c <= 0xF4   ? 4
            : c >= 0xE0 && c <= 0xEF ? 3
            : c >= 0xC2 && c <= 0xDF ? 2
                                     : 0;
    return *need > 0;
}

/* Bytes at the end of buf[0..n) that start a character still missing bytes. */
static size_t incomplete_tail(const char *buf, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)buf[n - back];
        size_t need;
        if ((c & 0xC0) == 0x80)
            continue;
        return utf8_lead(c, &need) && need > back ? back : 0;
    }
    return 0;
}

int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len, llmq_err *err)
{
    size_t pl;
    const char *p = emitted_piece(s->v, id, s->flags, !s->started, &pl, err);
    if (!p)
        return llmq_err_prefix(err, "detokenize stream");
    s->started = true;
    memmove(s->buf, s->buf + s->ready, s->held);
    memcpy(s->buf + s->held, p, pl);
    size_t n = s->held + pl;
    s->held = incomplete_tail(s->buf, n);
    s->ready = n - s->held;
    *text = s->buf;
    *len = s->ready;
    return 0;
}

void tok_stream_flush(tok_stream *s, const char **text, size_t *len)
{
    memmove(s->buf, s->buf + s->ready, s->held);
    *text = s->buf;
    *len = s->held;
    s->held = s->ready = 0;
    s->started = false;
}
