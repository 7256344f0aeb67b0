/* test-kv8: the CPU backend's 8-bit KV cache (BE_KV_Q8_0) and the f16 one
 * kept by --kv-f16.
 *
 * Pins:
 *  - sizing: a q8_0 cache takes 34 bytes per 32 values of a token's row in
 *    each layer and plane (17/32 of f16's 2 bytes a value); rows of a width
 *    that is no multiple of 32 are refused naming the type and the width,
 *    and the engine then builds an f16 cache (engine_kv_type);
 *  - kv_write quantizes as quant_quantize_kv_q8_0 and attention reads the
 *    values back exactly: attention over a q8_0 cache is bit-identical to
 *    attention over an f32 cache holding the quantized values dequantized,
 *    for prompt and decode rows, MHA and GQA, head dims 8 (blocks spanning
 *    heads), 64 and 128;
 *  - a key holding a NaN or an infinity reads back as NaN: the rows that
 *    attend to it get NaN (the engine's checks see them, as with f16), the
 *    rows that do not are untouched;
 *  - on stories260K with the q8_0 cache, a prompt prefilled in one pass, in
 *    chunks (16 + 16 + 5, and 10 + 27), or beside another sequence's rows
 *    gives bit-identical logits on its prompt rows and on two decode steps
 *    after: attention reads the chunk's own keys from the quantized cache,
 *    so the cache holds the same bits however the prompt came in;
 *  - the f16 cache gives the bits it gave before q8_0 existed: the
 *    fingerprint (check_hash64) of those logits with BE_KV_F16 is the one
 *    this test's f16 run gives built on commit 9edd409 (the tree before the
 *    q8_0 cache). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"
#include "engine/engine.h"
#include "kernels/backend.h"
#include "model/model.h"

/* ---- sizing ---- */

static void check_sizing(backend *be)
{
    llmq_err err;
    size_t q8 = 0, f16 = 0;
    const int rc = be->ops->kv_block_bytes(be, 32, 16, 4096, BE_KV_Q8_0, &q8, &err) |
                   be->ops->kv_block_bytes(be, 32, 16, 4096, BE_KV_F16, &f16, &err);
    CHECK(rc == 0 && q8 == (size_t)2 * 32 * 16 * 4096 / 32 * 34 &&
              f16 == (size_t)2 * 32 * 16 * 4096 * 2,
          "a block of 16 tokens x 32 layers x 4096 values: q8_0 %zu bytes (34 per 32 values), "
          "f16 %zu (2 a value)",
          q8, f16);
    be_kv *kv = NULL;
    size_t bytes = 0;
    CHECK(be->ops->kv_block_bytes(be, 2, 16, 48, BE_KV_Q8_0, &bytes, &err) != 0 &&
              strstr(err.msg, "q8_0") && strstr(err.msg, "48"),
          "kv_block_bytes refuses q8_0 rows of 48 values, naming both (%s)", err.msg);
    CHECK(be->ops->kv_create(be, 2, 4, 16, 48, BE_KV_Q8_0, &kv, &err) != 0 && !kv,
          "kv_create refuses q8_0 rows of 48 values (%s)", err.msg);
    CHECK(engine_kv_type(BE_KV_Q8_0, 48) == BE_KV_F16 &&
              engine_kv_type(BE_KV_Q8_0, 64) == BE_KV_Q8_0 &&
              engine_kv_type(BE_KV_F16, 64) == BE_KV_F16,
          "the engine takes f16 where q8_0 cannot hold the rows, else what was asked");
}

/* ---- attention over the cache ---- */

enum { BS = 16, NB = 12, MAXB = 6, NSEQ = 2, MAX_ROWS = 64 };

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill(float *x, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(rng_next(s) >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* Two sequences of 70 and 45 cached tokens (blocks out of order): sequence
 * 0 has 30 prompt rows at positions 40..69, sequence 1 one decode row at 44. */
typedef struct att_case {
    be_attn_shape sh;
    float *k, *v, *q; /* rows for every cached slot (kv_dim each); query rows */
    int32_t slot[NSEQ * MAXB * BS], n_slots;
    int32_t table[NSEQ * MAXB], seq_len[NSEQ], first_gen[NSEQ];
    int32_t row_seq[MAX_ROWS], row_pos[MAX_ROWS], decode[MAX_ROWS], n_rows, n_decode;
} att_case;

static void att_case_init(att_case *c, be_attn_shape sh, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->sh = sh;
    static const int32_t len[NSEQ] = {70, 45}, first[NSEQ] = {40, 44}, gen[NSEQ] = {70, 44};
    for (int32_t b = 0; b < NSEQ * MAXB; b++)
        c->table[b] = (b * 5 + 3) % NB;
    for (int32_t s = 0; s < NSEQ; s++) {
        c->seq_len[s] = len[s];
        c->first_gen[s] = gen[s];
        for (int32_t p = 0; p < len[s]; p++)
            c->slot[c->n_slots++] = c->table[s * MAXB + p / BS] * BS + p % BS;
        for (int32_t p = first[s]; p < len[s]; p++) {
            c->row_seq[c->n_rows] = s;
            c->row_pos[c->n_rows++] = p;
        }
    }
    c->n_decode = be_attn_decode_rows(c->row_seq, c->row_pos, c->first_gen, c->n_rows, c->decode);
    const size_t kv_dim = (size_t)sh.n_head_kv * sh.head_dim;
    c->k = malloc((size_t)c->n_slots * kv_dim * sizeof(float));
    c->v = malloc((size_t)c->n_slots * kv_dim * sizeof(float));
    c->q = malloc((size_t)c->n_rows * sh.n_head * sh.head_dim * sizeof(float));
    if (c->k && c->v && c->q) {
        fill(c->k, (size_t)c->n_slots * kv_dim, &seed);
        fill(c->v, (size_t)c->n_slots * kv_dim, &seed);
        fill(c->q, (size_t)c->n_rows * sh.n_head * sh.head_dim, &seed);
    }
}

static void att_case_free(att_case *c)
{
    free(c->k);
    free(c->v);
    free(c->q);
}

/* The attention output (n_rows x n_head x head_dim) over a cache of type t
 * written with k and v; NULL if the backend refused. */
static float *attend(backend *be, const att_case *c, be_kv_type t, const float *k, const float *v)
{
    const int32_t kv_dim = c->sh.n_head_kv * c->sh.head_dim;
    llmq_err err;
    be_kv *kv = NULL;
    be_act out;
    if (be->ops->kv_create(be, 2, NB, BS, kv_dim, t, &kv, &err) != 0)
        return NULL;
    if (be->ops->act_create(be, c->n_rows, c->sh.n_head * c->sh.head_dim, &out, &err) != 0) {
        be->ops->kv_destroy(be, kv);
        return NULL;
    }
    be->ops->kv_write(be, kv, 1, k, v, c->slot, c->n_slots);
    const be_attn_batch b = {c->n_rows, NSEQ, c->row_seq,   c->row_pos, c->table,   c->seq_len,
                             MAXB,      70,   c->first_gen, c->decode,  c->n_decode};
    be->ops->attention(be, kv, 1, c->q, &b, &c->sh, &out);
    const size_t n = (size_t)c->n_rows * c->sh.n_head * c->sh.head_dim;
    float *res = malloc(n * sizeof *res);
    if (res)
        memcpy(res, out.x, n * sizeof *res);
    be->ops->act_destroy(be, &out);
    be->ops->kv_destroy(be, kv);
    return res;
}

/* x quantized as the q8_0 cache stores it, then dequantized. */
static void round_trip(const float *x, float *y, size_t rows, int32_t kv_dim)
{
    block_q8_0 blk[4096 / QK8_0];
    for (size_t r = 0; r < rows; r++) {
        quant_quantize_kv_q8_0(x + r * kv_dim, blk, kv_dim);
        quant_dequantize_row(QUANT_Q8_0, blk, y + r * kv_dim, kv_dim);
    }
}

static void check_attention(backend *be, be_attn_shape sh)
{
    att_case c;
    att_case_init(&c, sh, 0x5eed + (uint64_t)sh.head_dim * 131 + (uint64_t)sh.n_head_kv);
    const int32_t kv_dim = sh.n_head_kv * sh.head_dim;
    const size_t n_kv = (size_t)c.n_slots * kv_dim;
    float *kq = malloc(n_kv * sizeof *kq), *vq = malloc(n_kv * sizeof *vq);
    float *got = NULL, *want = NULL;
    if (c.k && c.v && c.q && kq && vq) {
        round_trip(c.k, kq, (size_t)c.n_slots, kv_dim);
        round_trip(c.v, vq, (size_t)c.n_slots, kv_dim);
        got = attend(be, &c, BE_KV_Q8_0, c.k, c.v);
        want = attend(be, &c, BE_KV_F32, kq, vq);
    }
    const size_t n = (size_t)c.n_rows * sh.n_head * sh.head_dim;
    CHECK(got && want && memcmp(got, want, n * sizeof *got) == 0,
          "%d heads (%d kv) of %d: attention over the q8_0 cache is bit-identical to attention "
          "over the dequantized values in f32 (%d prompt rows, %d decode row)",
          sh.n_head, sh.n_head_kv, sh.head_dim, c.n_rows - c.n_decode, c.n_decode);
    free(got);
    free(want);
    free(kq);
    free(vq);
    att_case_free(&c);
}

/* Key 50 of sequence 0 (its slot 50) gets a NaN, then an infinity, in head
 * 0's first block: every row of sequence 0 at position >= 50 reads NaN in
 * every query head of kv head 0, sequence 1's row reads finite values. */
static void check_non_finite(backend *be)
{
    const be_attn_shape sh = {4, 2, 64};
    const float bad[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        att_case c;
        att_case_init(&c, sh, 77);
        float *got = NULL;
        if (c.k && c.v && c.q) {
            c.k[(size_t)50 * sh.n_head_kv * sh.head_dim + 3] = bad[i];
            got = attend(be, &c, BE_KV_Q8_0, c.k, c.v);
        }
        int nan_where_read = 0, finite_elsewhere = 0, reading = 0, others = 0;
        for (int32_t r = 0; got && r < c.n_rows; r++)
            for (int32_t h = 0; h < sh.n_head; h++) {
                const float *o = got + ((size_t)r * sh.n_head + h) * sh.head_dim;
                const bool reads = c.row_seq[r] == 0 && c.row_pos[r] >= 50 &&
                                   h / (sh.n_head / sh.n_head_kv) == 0;
                reading += reads;
                others += !reads;
                nan_where_read += reads && isnan(o[0]);
                finite_elsewhere += !reads && isfinite(o[0]);
            }
        CHECK(got && reading > 0 && nan_where_read == reading && finite_elsewhere == others,
              "a cached key holding %s: the %d (row, head) pairs attending to it read NaN, the "
              "%d others stay finite",
              i ? "inf" : "NaN", reading, others);
        free(got);
        att_case_free(&c);
    }
}

/* ---- the model: one prompt however it comes in ---- */

#define PROMPT 37
#define STEPS 2
#define OTHER 11
#define MBLOCKS 8

typedef struct fwd {
    const model_fixture *fx;
    model_state *st;
    be_kv *kv;
    int32_t table[2][4]; /* per sequence: the prompt's, the other's */
} fwd;

/* Rows [first, first + n) of the prompt (sequence 0), and when `other` the
 * OTHER rows of a second sequence after them; the prompt rows' logits into
 * out (n rows). */
static int fwd_step(fwd *f, const int32_t *tokens, int32_t first, int32_t n, bool other, float *out)
{
    const model_config *c = model_get_config(f->fx->m);
    int32_t tok[PROMPT + OTHER], pos[PROMPT + OTHER], slot[PROMPT + OTHER], seq[PROMPT + OTHER],
        rows[PROMPT + OTHER], len[2] = {first + n, OTHER}, table[2 * 4];
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++, m++) {
        tok[m] = tokens[first + i];
        pos[m] = first + i;
        seq[m] = 0;
        rows[m] = m;
        slot[m] = f->table[0][pos[m] / 16] * 16 + pos[m] % 16;
    }
    for (int32_t i = 0; other && i < OTHER; i++, m++) {
        tok[m] = (int32_t)((i * 31u + 5u) % (uint32_t)c->n_vocab);
        pos[m] = i;
        seq[m] = 1;
        slot[m] = f->table[1][i / 16] * 16 + i % 16;
    }
    memcpy(table, f->table, sizeof table);
    const model_batch b = {.n_rows = m,
                           .tokens = tok,
                           .pos = pos,
                           .slot = slot,
                           .row_seq = seq,
                           .n_seqs = other ? 2 : 1,
                           .block_table = table,
                           .seq_len = len,
                           .max_blocks = 4,
                           .n_logits = n,
                           .logit_rows = rows};
    llmq_err err;
    if (model_forward(f->fx->m, f->st, f->kv, &b, out, &err) != 0) {
        printf("# forward: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* The logits of the prompt's rows and STEPS decode steps (PROMPT + STEPS
 * rows; the caller frees), its prompt fed in chunks of the sizes in `chunks`
 * (0-terminated), beside another sequence's prompt when `other`. */
static float *run_prompt(const model_fixture *fx, be_kv_type t, const int32_t *chunks, bool other)
{
    const model_config *c = model_get_config(fx->m);
    backend *be = fx->be;
    fwd f = {.fx = fx, .table = {{5, 1, 6, 2}, {0, 3, 4, 7}}};
    llmq_err err;
    float *logits = malloc((size_t)(PROMPT + STEPS) * c->n_vocab * sizeof *logits);
    int32_t tokens[PROMPT + STEPS];
    for (int32_t i = 0; i < PROMPT + STEPS; i++)
        tokens[i] = (int32_t)((i * 7919u + 13u) % (uint32_t)c->n_vocab);
    int rc = !logits ||
             be->ops->kv_create(be, c->n_layers, MBLOCKS, 16, c->n_head_kv * c->head_dim, t, &f.kv,
                                &err) != 0 ||
             model_state_create(&f.st, fx->m, PROMPT + OTHER, 2, 4, PROMPT, &err) != 0;
    int32_t done = 0;
    for (int i = 0; rc == 0 && done < PROMPT; i++) {
        const int32_t n = chunks[i] ? chunks[i] : PROMPT - done;
        rc = fwd_step(&f, tokens, done, n, other && i == 0, logits + (size_t)done * c->n_vocab);
        done += n;
    }
    for (int32_t s = 0; rc == 0 && s < STEPS; s++) {
        rc = fwd_step(&f, tokens, PROMPT + s, 1, false, logits + (size_t)(PROMPT + s) * c->n_vocab);
        /* the decode step's input is the token after the prompt */
    }
    if (f.kv)
        be->ops->kv_destroy(be, f.kv);
    model_state_free(f.st);
    if (rc != 0) {
        free(logits);
        return NULL;
    }
    return logits;
}

/* What run_prompt(BE_KV_F16, one pass) gives at commit 9edd409. */
#define F16_LOGITS_HASH 0xe200b5f5c67cd179ull

static void check_model(const model_fixture *fx)
{
    const model_config *c = model_get_config(fx->m);
    const size_t bytes = (size_t)(PROMPT + STEPS) * c->n_vocab * sizeof(float);
    static const int32_t whole[] = {0}, by16[] = {16, 16, 0}, odd[] = {10, 0};
    float *ref = run_prompt(fx, BE_KV_Q8_0, whole, false);
    CHECK(ref != NULL, "stories260K runs with a q8_0 cache");
    struct {
        const int32_t *chunks;
        bool other;
        const char *what;
    } ways[] = {{by16, false, "in chunks of 16, 16 and 5"},
                {odd, false, "in chunks of 10 and 27"},
                {whole, true, "in one pass beside another sequence's 11 rows"},
                {by16, true, "in chunks of 16, the first beside another sequence"}};
    for (size_t i = 0; ref && i < sizeof ways / sizeof ways[0]; i++) {
        float *got = run_prompt(fx, BE_KV_Q8_0, ways[i].chunks, ways[i].other);
        CHECK(got && memcmp(got, ref, bytes) == 0,
              "q8_0 cache: the prompt %s gives the logits of one pass alone, bit for bit (%d "
              "prompt rows, %d decode steps)",
              ways[i].what, PROMPT, STEPS);
        free(got);
    }
    float *f16 = run_prompt(fx, BE_KV_F16, whole, false);
    const uint64_t h = f16 ? check_hash64(f16, bytes) : 0;
    printf("# f16 cache logits: fingerprint %016llx\n", (unsigned long long)h);
    CHECK(f16 && h == F16_LOGITS_HASH,
          "the f16 cache gives the logits it gave before the q8_0 cache (fingerprint %016llx, want "
          "%016llx)",
          (unsigned long long)h, (unsigned long long)F16_LOGITS_HASH);
    CHECK(f16 && ref && memcmp(f16, ref, bytes) != 0,
          "the q8_0 and f16 caches are different caches");
    free(f16);
    free(ref);
}

int main(void)
{
    model_fixture fx;
    if (model_fixture_load(&fx) != 0)
        return 1;
    check_sizing(fx.be);
    check_attention(fx.be, (be_attn_shape){8, 8, 64});
    check_attention(fx.be, (be_attn_shape){8, 2, 128});
    check_attention(fx.be, (be_attn_shape){8, 4, 8});
    check_non_finite(fx.be);
    check_model(&fx);
    model_fixture_free(&fx);
    return check_done();
}
