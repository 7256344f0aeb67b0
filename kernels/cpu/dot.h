/* dot: the CPU's inner products between weight rows and activation rows.
 *
 * Quantized weights meet activations quantized to 8 bits exactly as
 * llama.cpp's CPU path does (q8_0 for q8_0 weights, q8_K for k-quants), so
 * the integer products are exact: the only rounding is in the few float
 * multiplies per block, and the engine's logits track llama.cpp's to float
 * rounding.  Float weights meet the f32 activations.
 *
 * Two implementations of every product:
 *  - the reference (dot_row_f32, dot_row_q8): portable C over the GGUF rows,
 *    the definition of the numerics and the fallback on any machine;
 *  - SIMD kernels (dot_kernels, picked once by dot_kernels_best): for x86-64
 *    with AVX2+FMA, or AVX-512 with VNNI.  They compute the same float
 *    operations in the same order per (weight row, activation row) pair as
 *    the reference (integer sums are exact in any order), so their results
 *    are bit-identical to it (tests/unit/test-dot.c pins that).
 * Each pair is reduced in one fixed order, so its result never depends on
 * the rest of the batch or on how the work is tiled.
 *
 * The quantized SIMD kernels read weights repacked by dot_pack: rows
 * interleaved in groups of DOT_GROUP, one vector lane per weight row, so
 * a kernel computes a whole group against several activation rows with no
 * horizontal sums.  The layouts below are private to dot*.c. */
#ifndef LLMQ_KERNELS_CPU_DOT_H
#define LLMQ_KERNELS_CPU_DOT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

/* How a weight type wants its activations. */
typedef enum dot_act {
    DOT_ACT_F32,  /* f32, f16, bf16 weights */
    DOT_ACT_Q8_0, /* q8_0 weights: llama.cpp's q8_0, a scale per 32 values */
    DOT_ACT_Q8_K, /* k-quants: llama.cpp's q8_K, a scale per 256 and sums per 16 */
} dot_act;

dot_act dot_act_for(quant_type t);

/* Quantized activation rows, row-major with `cols` values each: q holds the
 * values; d a scale per block (32 for q8_0, 256 for q8_K); s16 (q8_K only)
 * the sum of every 16 values, s32 the sum of every 32 (what the SIMD
 * kernels fold the weights' offsets and mins with). */
typedef struct dot_q8_act {
    int8_t *q;
    float *d;
    int16_t *s16;
    int16_t *s32;
    int64_t cols;
} dot_q8_act;

/* One row of a dot_q8_act, for the reference. */
typedef struct dot_q8_row {
    const int8_t *q;
    const float *d;
    const int16_t *s16;
} dot_q8_row;

dot_q8_row dot_act_row(const dot_q8_act *a, dot_act kind, int64_t row);

/* llama.cpp's reference quantizers (n a multiple of 32, resp. 256).
 * s32 gets n/32 sums; s16 (q8_K) n/16 sums. */
void dot_quantize_q8_0(const float *x, int64_t n, int8_t *q, float *d, int16_t *s32);
void dot_quantize_q8_K(const float *x, int64_t n, int8_t *q, float *d, int16_t *s16,
                       int16_t *s32);

/* Reference dot of weight row `w` (type t, n elements) with an activation row. */
float dot_row_f32(quant_type t, const void *w, const float *x, int64_t n);
float dot_row_q8(quant_type t, const void *w, const dot_q8_row *x, int64_t n);

/* Weighted sums of np rows (attention's V): for p = 0 .. np-1 in order,
 * acc[h * n + i] = fmaf(w[h * w_stride + p], v_p[i], acc[h * n + i]) for
 * h < nh, i < n, where v_p = v + p * v_row_bytes holds f32 or f16 values
 * (t).  Each element is its own chain of fmaf in position order, so any
 * vector width gives the same bits. */
void dot_wsum(int nh, const float *w, size_t w_stride, const void *v, size_t v_row_bytes, int np,
              quant_type t, int64_t n, float *acc);

/* ---- the backend's other vector loops ---- */

/* expf as glibc 2.27+ computes it (a 32-entry table of 2^(i/32) and a cubic
 * in double), bit for bit, in portable C: so every kernel set and every
 * libm give the same exponentials. */
float dot_expf(float x);
/* Its constants, shared with the SIMD versions. */
extern const uint64_t dot_exp_tab[32];
#define DOT_EXP_INVLN2N 0x1.71547652b82fep+5 /* 32 / ln 2 */
#define DOT_EXP_SHIFT 0x1.8p+52
#define DOT_EXP_C0 0x1.c6af84b912394p-20
#define DOT_EXP_C1 0x1.ebfce50fac4f3p-13
#define DOT_EXP_C2 0x1.62e42ff0c52d6p-6
#define DOT_EXP_OVER 0x1.62e42ep6f   /* above: inf */
#define DOT_EXP_UNDER -0x1.9fe368p6f /* below: 0 */
#define DOT_EXP_TINY -0x1.9d1d9ep6f  /* below (down to UNDER): 2^-149 */
/* o[i] = g[i] / (1 + dot_expf(-g[i])) * u[i] (silu(g) * u). */
void dot_silu_mul(const float *g, const float *u, float *o, int64_t n);
/* s = s * scale, then s = exp(s - max s) / sum, in place; the sum in
 * double over 8 lanes (element i into lane i % 8) and then a fixed tree. */
void dot_softmax(float *s, int64_t n, float scale);
/* Sum of the squares (float) of x, in double over 8 lanes and a fixed tree. */
double dot_sumsq(const float *x, int64_t n);

/* ---- packed weights ---- */

#define DOT_GROUP 16

/* One group of 16 q4_K rows, one super-block: byte 4r+i of qs[j][l] holds
 * value 8l+i (low nibble) and 8l+4+i (high nibble) of sub-block j of row r;
 * m[k][r] the mins of sub-blocks 2k and 2k+1. */
typedef struct dot_pack_q4_K {
    float d[DOT_GROUP], dmin[DOT_GROUP];
    uint8_t sc[8][DOT_GROUP];
    uint8_t m[4][DOT_GROUP][2];
    uint8_t qs[8][4][64];
} dot_pack_q4_K;

/* q6_K: byte 4r+i of q[c] is value 4c+i (0..63, i.e. +32) of row r; sc[g]
 * the scale of 16-value group g, scp[k] the scales of groups 2k, 2k+1. */
typedef struct dot_pack_q6_K {
    float d[DOT_GROUP];
    int8_t sc[16][DOT_GROUP];
    int8_t scp[8][DOT_GROUP][2];
    uint8_t q[64][64];
} dot_pack_q6_K;

/* q8_0, one 32-value block: byte 4r+i of q[c] is value 4c+i of row r + 128. */
typedef struct dot_pack_q8_0 {
    float d[DOT_GROUP];
    uint8_t q[8][64];
} dot_pack_q8_0;

/* Bytes dot_pack writes for a rows x cols matrix of type t, or 0 when the
 * type has no packed form. */
size_t dot_pack_bytes(quant_type t, int64_t rows, int64_t cols);
/* Pack rows x cols of type t (rows of row_bytes at w) into dst; the last
 * group is padded with zero rows. */
void dot_pack(quant_type t, const uint8_t *w, size_t row_bytes, int64_t rows, int64_t cols,
              void *dst);
/* Bytes of one packed group (all cols). */
size_t dot_pack_group_bytes(quant_type t, int64_t cols);

/* ---- SIMD kernels ---- */

/* out[x * ostride + r] = weight row r (of the DOT_GROUP in `group`) . row
 * x0 + x of `a`, for x < nx; with accumulate, out[...] = out[...] + that. */
typedef void (*dot_q8_tile_fn)(const void *group, const dot_q8_act *a, int64_t x0, int nx,
                               float *out, int64_t ostride, int accumulate);
/* out[x * ostride + r] (+)= weight row r . x row x, for r < nw (<= 4),
 * x < nx; rows are row_bytes apart, x rows x_stride floats apart. */
typedef void (*dot_f_tile_fn)(const void *w, size_t row_bytes, int nw, const float *x,
                              int64_t x_stride, int nx, int64_t cols, float *out,
                              int64_t ostride, int accumulate);

typedef struct dot_kernels {
    const char *name;
    /* NULL where a type has no kernel: the caller uses the reference. */
    dot_q8_tile_fn q4_K, q6_K, q8_0;
    dot_f_tile_fn f32, f16;
    void (*wsum)(int nh, const float *w, size_t w_stride, const void *v, size_t v_row_bytes,
                 int np, quant_type t, int64_t n, float *acc);
    void (*quantize_q8_K)(const float *x, int64_t n, int8_t *q, float *d, int16_t *s16,
                          int16_t *s32);
    void (*silu_mul)(const float *g, const float *u, float *o, int64_t n);
    void (*softmax)(float *s, int64_t n, float scale);
    double (*sumsq)(const float *x, int64_t n);
} dot_kernels;

/* The reference alone (every kernel NULL, the reference quantizer). */
extern const dot_kernels dot_kernels_generic;
#if defined(__x86_64__) && defined(__GNUC__)
extern const dot_kernels dot_kernels_avx2;   /* needs AVX2, FMA, F16C */
extern const dot_kernels dot_kernels_avx512; /* needs AVX-512 F/BW/VL/DQ/VNNI */
#endif

/* The fastest set this CPU runs. */
const dot_kernels *dot_kernels_best(void);
/* The set named name ("generic", "avx2", "avx512") if this CPU runs it, else NULL. */
const dot_kernels *dot_kernels_by_name(const char *name);

dot_q8_tile_fn dot_kernels_q8_tile(const dot_kernels *k, quant_type t);
dot_f_tile_fn dot_kernels_f_tile(const dot_kernels *k, quant_type t);

#endif
