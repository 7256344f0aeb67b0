/* test-dot: every SIMD kernel set this CPU runs gives results bit-identical
 * to the reference dot products (kernels/cpu/dot.h), for every type it
 * covers, on random rows and on the extreme values that would overflow a
 * 16-bit intermediate; and a pair's result does not depend on how many
 * activation rows share the kernel call or where the pair sits in it. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/dot.h"
#include "tests/unit/check.h"

#define ROWS 37 /* two full groups of 16 and a padded one */
#define XROWS 11

/* A small deterministic generator (xorshift64*). */
static uint64_t next_u64(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static float next_f(uint64_t *s) /* [-1, 1) */
{
    return (float)((next_u64(s) >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static quant_f16 f16_of(float f) { return quant_f32_to_f16(f); }

typedef enum { FILL_RANDOM, FILL_EXTREME } fill_mode;

/* One block of type t: random bytes where every bit pattern is valid, real
 * scales where the float ones would make NaN; FILL_EXTREME takes the
 * largest magnitudes (the 16-bit pair sums' worst case). */
static void fill_block(quant_type t, uint8_t *b, uint64_t *s, fill_mode mode)
{
    const size_t bytes = quant_block_bytes(t);
    for (size_t i = 0; i < bytes; i++)
        b[i] = mode == FILL_EXTREME ? 0xFF : (uint8_t)next_u64(s);
    if (t == QUANT_Q4_K) {
        block_q4_K *q = (block_q4_K *)b;
        q->d = f16_of(0.01f + 0.001f * next_f(s));
        q->dmin = f16_of(0.02f + 0.001f * next_f(s));
    } else if (t == QUANT_Q6_K) {
        block_q6_K *q = (block_q6_K *)b;
        q->d = f16_of(0.01f + 0.001f * next_f(s));
        if (mode == FILL_EXTREME) /* all values 63 (+31 after the -32): the scales at -128 */
            memset(q->scales, 0x80, sizeof q->scales);
    } else if (t == QUANT_Q8_0) {
        block_q8_0 *q = (block_q8_0 *)b;
        q->d = f16_of(0.01f + 0.001f * next_f(s));
        if (mode == FILL_EXTREME) /* -128 everywhere */
            memset(q->qs, 0x80, sizeof q->qs);
    } else if (t == QUANT_F32) {
        float f = mode == FILL_EXTREME ? 1e30f : next_f(s);
        memcpy(b, &f, sizeof f);
    } else if (t == QUANT_F16) {
        quant_f16 h = f16_of(mode == FILL_EXTREME ? 65504.0f : next_f(s));
        memcpy(b, &h, sizeof h);
    }
}

static uint8_t *make_weights(quant_type t, int64_t cols, size_t *row_bytes, uint64_t *s,
                             fill_mode mode)
{
    const size_t nb = (size_t)cols / quant_block_elems(t);
    *row_bytes = nb * quant_block_bytes(t);
    uint8_t *w = malloc(*row_bytes * ROWS);
    for (size_t i = 0; i < nb * ROWS; i++)
        fill_block(t, w + i * quant_block_bytes(t), s, mode);
    return w;
}

/* Activations: random, or the same sign everywhere (all quantize to -127). */
static float *make_x(int64_t cols, uint64_t *s, fill_mode mode)
{
    float *x = malloc((size_t)cols * XROWS * sizeof *x);
    for (int64_t i = 0; i < cols * XROWS; i++)
        x[i] = mode == FILL_EXTREME ? 3.0f : next_f(s) * (1.0f + (float)(i % 7));
    return x;
}

static dot_q8_act quantize(dot_act kind, const float *x, int64_t cols)
{
    dot_q8_act a = {.q = malloc((size_t)cols * XROWS), .cols = cols,
                    .d = malloc((size_t)cols / 32 * XROWS * sizeof(float)),
                    .s16 = malloc((size_t)cols / 16 * XROWS * sizeof(int16_t)),
                    .s32 = malloc((size_t)cols / 32 * XROWS * sizeof(int16_t))};
    for (int r = 0; r < XROWS; r++) {
        if (kind == DOT_ACT_Q8_0)
            dot_quantize_q8_0(x + r * cols, cols, a.q + r * cols, a.d + r * (cols / 32),
                              a.s32 + r * (cols / 32));
        else
            dot_quantize_q8_K(x + r * cols, cols, a.q + r * cols, a.d + r * (cols / 256),
                              a.s16 + r * (cols / 16), a.s32 + r * (cols / 32));
    }
    return a;
}

static void free_act(dot_q8_act *a)
{
    free(a->q);
    free(a->d);
    free(a->s16);
    free(a->s32);
}

/* Reference results ref[x][n]. */
static void reference(quant_type t, const uint8_t *w, size_t row_bytes, const float *x,
                      const dot_q8_act *a, int64_t cols, float *ref)
{
    const dot_act kind = dot_act_for(t);
    for (int x_row = 0; x_row < XROWS; x_row++) {
        const dot_q8_row xr = kind != DOT_ACT_F32 ? dot_act_row(a, kind, x_row) : (dot_q8_row){0};
        for (int n = 0; n < ROWS; n++)
            ref[x_row * ROWS + n] = kind != DOT_ACT_F32
                                        ? dot_row_q8(t, w + n * row_bytes, &xr, cols)
                                        : dot_row_f32(t, w + n * row_bytes, x + x_row * cols, cols);
    }
}

/* The kernels' results for the pairs, x rows split into calls of `chunk`;
 * with init, the kernels add to init[x][n] (their accumulate mode). */
static void run_kernel(const dot_kernels *k, quant_type t, const uint8_t *w, size_t row_bytes,
                       const float *x, const dot_q8_act *a, int64_t cols, int chunk,
                       const float *init, float *got)
{
    float tile[XROWS * DOT_GROUP];
    const bool packed = dot_kernels_q8_tile(k, t) != NULL;
    const int unit = packed ? DOT_GROUP : 4;
    uint8_t *pack = NULL;
    if (packed) {
        pack = aligned_alloc(64, (dot_pack_bytes(t, ROWS, cols) + 63) / 64 * 64);
        dot_pack(t, w, row_bytes, ROWS, cols, pack);
    }
    for (int n0 = 0; n0 < ROWS; n0 += unit) {
        const int nw = ROWS - n0 < unit ? ROWS - n0 : unit;
        for (int x0 = 0; x0 < XROWS; x0 += chunk) {
            const int nx = XROWS - x0 < chunk ? XROWS - x0 : chunk;
            for (int xr = 0; xr < nx; xr++)
                for (int r = 0; r < nw; r++)
                    tile[xr * unit + r] = init ? init[(x0 + xr) * ROWS + n0 + r] : 0.0f;
            if (packed)
                dot_kernels_q8_tile(k, t)(pack + n0 / DOT_GROUP * dot_pack_group_bytes(t, cols), a,
                                          x0, nx, tile, DOT_GROUP, init != NULL);
            else
                dot_kernels_f_tile(k, t)(w + n0 * row_bytes, row_bytes, nw, x + x0 * cols, cols, nx,
                                         cols, tile, 4, init != NULL);
            for (int xr = 0; xr < nx; xr++)
                for (int r = 0; r < nw; r++)
                    got[(x0 + xr) * ROWS + n0 + r] = tile[xr * unit + r];
        }
    }
    free(pack);
}

/* Pairs whose bits differ, and the first of them. */
static int count_diff(const float *ref, const float *got, int *first)
{
    int bad = 0;
    *first = -1;
    for (int i = 0; i < XROWS * ROWS; i++)
        if (memcmp(&ref[i], &got[i], sizeof *ref) != 0) {
            if (bad++ == 0)
                *first = i;
        }
    return bad;
}

static void check_type(const dot_kernels *k, quant_type t, int64_t cols, fill_mode mode,
                       uint64_t *seed)
{
    if (!dot_kernels_q8_tile(k, t) && !dot_kernels_f_tile(k, t))
        return;
    size_t row_bytes;
    uint8_t *w = make_weights(t, cols, &row_bytes, seed, mode);
    float *x = make_x(cols, seed, mode);
    const dot_act kind = dot_act_for(t);
    dot_q8_act a = {0};
    if (kind != DOT_ACT_F32)
        a = quantize(kind, x, cols);
    float ref[XROWS * ROWS], got[XROWS * ROWS];
    reference(t, w, row_bytes, x, &a, cols, ref);
    int finite = 1;
    for (int i = 0; i < XROWS * ROWS; i++)
        finite &= isfinite(ref[i]) != 0;
    const int chunks[] = {XROWS, 1, 4};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        run_kernel(k, t, w, row_bytes, x, &a, cols, chunks[c], NULL, got);
        int first;
        const int bad = count_diff(ref, got, &first);
        CHECK(bad == 0 && finite,
              "%s %s, %d x %d pairs of %lld columns (%s values), %d activation rows per call: "
              "bit-identical to the reference",
              k->name, quant_type_name(t), ROWS, XROWS, (long long)cols,
              mode == FILL_EXTREME ? "extreme" : "random", chunks[c]);
        if (bad)
            printf("# %d pairs differ, the first %.9g where the reference has %.9g\n", bad,
                   (double)got[first], (double)ref[first]);
    }
    /* accumulating into an output: out + result, the residual add's order */
    float init[XROWS * ROWS];
    for (int i = 0; i < XROWS * ROWS; i++) {
        init[i] = next_f(seed);
        ref[i] = init[i] + ref[i];
    }
    run_kernel(k, t, w, row_bytes, x, &a, cols, 4, init, got);
    int first;
    const int bad = count_diff(ref, got, &first);
    CHECK(bad == 0, "%s %s, %lld columns (%s values), added to an output: bit-identical to "
                    "out + the reference", k->name, quant_type_name(t), (long long)cols,
          mode == FILL_EXTREME ? "extreme" : "random");
    free_act(&a);
    free(x);
    free(w);
}

/* Attention's weighted sums of V rows against dot_wsum. */
static void check_wsum(const dot_kernels *k, quant_type t, int nh, int64_t n, uint64_t *seed)
{
    enum { NP = 19, MAXN = 100, MAXH = 6 };
    const size_t elem = t == QUANT_F16 ? sizeof(quant_f16) : sizeof(float);
    const size_t row_bytes = (size_t)(MAXN + 3) * elem; /* rows wider than n, as the cache's */
    uint8_t v[NP * (MAXN + 3) * sizeof(float)];
    float w[MAXH * NP], ref[MAXH * MAXN], got[MAXH * MAXN];
    for (int p = 0; p < NP; p++)
        for (int64_t i = 0; i < MAXN + 3; i++) {
            const float f = next_f(seed);
            if (t == QUANT_F16) {
                const quant_f16 h = f16_of(f);
                memcpy(v + p * row_bytes + i * elem, &h, elem);
            } else {
                memcpy(v + p * row_bytes + i * elem, &f, elem);
            }
        }
    for (int i = 0; i < MAXH * NP; i++)
        w[i] = next_f(seed);
    for (int i = 0; i < MAXH * MAXN; i++)
        ref[i] = got[i] = next_f(seed);
    dot_wsum(nh, w, NP, v, row_bytes, NP, t, n, ref);
    k->wsum(nh, w, NP, v, row_bytes, 7, t, n, got); /* in two calls, as across cache blocks */
    k->wsum(nh, w + 7, NP, v + 7 * row_bytes, row_bytes, NP - 7, t, n, got);
    CHECK(memcmp(ref, got, (size_t)nh * n * sizeof *ref) == 0,
          "%s weighted sum of %d %s rows of %lld into %d heads: bit-identical to the reference",
          k->name, NP, quant_type_name(t), (long long)n, nh);
}

/* The vector loops beside the products: exp through silu and softmax, the
 * sum of squares, the q8_K quantizer. */
static void check_loops(const dot_kernels *k, uint64_t *seed)
{
    enum { N = 1543 };
    float g[N], u[N], ref[N], got[N];
    for (int i = 0; i < N; i++) {
        g[i] = next_f(seed) * 130.0f; /* across exp's overflow and underflow edges */
        u[i] = next_f(seed);
    }
    g[0] = __builtin_inff();
    g[1] = -__builtin_inff();
    g[2] = 103.5f; /* exp(-g) in the range glibc rounds up to 2^-149 */
    g[3] = -88.9f;
    const int64_t lens[] = {N, 1536, 172, 13};
    bool same = true;
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        dot_silu_mul(g, u, ref, lens[i]);
        k->silu_mul(g, u, got, lens[i]);
        same &= memcmp(ref, got, (size_t)lens[i] * sizeof *ref) == 0;
    }
    CHECK(same, "%s silu(g) * u over the whole exp range: bit-identical to the reference", k->name);

    same = true;
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        for (int64_t p = 0; p < lens[i]; p++)
            ref[p] = got[p] = g[(p + 4) % N] * 0.8f; /* scores spread far below the max */
        dot_softmax(ref, lens[i], 0.125f);
        k->softmax(got, lens[i], 0.125f);
        same &= memcmp(ref, got, (size_t)lens[i] * sizeof *ref) == 0;
    }
    CHECK(same, "%s softmax of 1543, 1536, 172 and 13 scores: bit-identical to the reference",
          k->name);

    same = true;
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        same &= dot_sumsq(u, lens[i]) == k->sumsq(u, lens[i]);
    CHECK(same, "%s sum of squares: identical to the reference", k->name);

    enum { NQ = 4 * QK_K };
    float x[NQ];
    for (int i = 0; i < NQ; i++)
        x[i] = next_f(seed) * (float)(1 + i % 5);
    memset(x + QK_K, 0, QK_K * sizeof *x); /* an all-zero block */
    x[2 * QK_K + 3] = -9.0f;               /* a tie of magnitudes: the first one wins */
    x[2 * QK_K + 200] = 9.0f;
    x[3 * QK_K + 7] = 0.5f / 127.0f * 3.0f; /* values that round at exactly .5 */
    int8_t q0[NQ], q1[NQ];
    float d0[NQ / QK_K], d1[NQ / QK_K];
    int16_t a0[NQ / 16], a1[NQ / 16], b0[NQ / 32], b1[NQ / 32];
    dot_quantize_q8_K(x, NQ, q0, d0, a0, b0);
    k->quantize_q8_K(x, NQ, q1, d1, a1, b1);
    CHECK(memcmp(q0, q1, sizeof q0) == 0 && memcmp(d0, d1, sizeof d0) == 0 &&
              memcmp(a0, a1, sizeof a0) == 0 && memcmp(b0, b1, sizeof b0) == 0,
          "%s q8_K quantization (with a zero block and a tie of magnitudes): identical", k->name);
}

int main(void)
{
    static const char *const sets[] = {"avx2", "avx512"};
    static const quant_type types[] = {QUANT_Q4_K, QUANT_Q6_K, QUANT_Q8_0, QUANT_F32, QUANT_F16};
    int ran = 0;
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        const dot_kernels *k = dot_kernels_by_name(sets[i]);
        if (!k) {
            printf("# %s: this CPU does not run it\n", sets[i]);
            continue;
        }
        ran++;
        uint64_t seed = 0x9E3779B97F4A7C15ull;
        for (size_t j = 0; j < sizeof types / sizeof *types; j++) {
            const quant_type t = types[j];
            const int64_t blk = (int64_t)quant_block_elems(t);
            /* float rows: a multiple of 16 and two ragged tails */
            const int64_t cols[] = {blk == 1 ? 64 : 2 * QK_K, blk == 1 ? 172 : 3 * QK_K,
                                    blk == 1 ? 13 : QK_K};
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
                check_type(k, t, cols[c], FILL_RANDOM, &seed);
            check_type(k, t, blk == 1 ? 48 : QK_K, FILL_EXTREME, &seed);
        }
        check_wsum(k, QUANT_F16, 4, 64, &seed);
        check_wsum(k, QUANT_F16, 2, 8, &seed);
        check_wsum(k, QUANT_F32, 6, 100, &seed);
        check_wsum(k, QUANT_F32, 1, 72, &seed);
        check_loops(k, &seed);
    }
#if defined(__GLIBC__) && defined(__x86_64__) && defined(__GNUC__)
    /* glibc picks its FMA build of expf where the CPU has FMA: that is the
     * one dot_expf follows operation for operation. */
    if (__builtin_cpu_supports("fma")) {
        uint32_t bad = 0, first = 0;
        for (uint32_t bits = 0; bits < 0xffffffffu - 4093u; bits += 4093u) {
            float f, e;
            memcpy(&f, &bits, sizeof f);
            const float want = expf(f), got = dot_expf(f);
            if (memcmp(&want, &got, sizeof e) != 0 && !(isnan(want) && isnan(got)) && bad++ == 0)
                first = bits;
        }
        CHECK(bad == 0, "dot_expf equals this glibc's expf on a sweep of a million floats");
        if (bad)
            printf("# %u differ, the first at bits 0x%08x\n", bad, first);
    }
#endif
    if (ran == 0) {
        printf("# no SIMD kernel set runs here: nothing to compare\n");
        return 77;
    }
    return check_done();
}
