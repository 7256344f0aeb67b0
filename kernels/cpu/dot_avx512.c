/* dot's kernels for AVX-512 with VNNI (see dot.h for the contract).
 *
 * Quantized weights come packed (dot_pack): a 512-bit vector holds 4 values
 * of each of 16 weight rows, so vpdpbusd (unsigned weight bytes x signed
 * activation bytes) adds 4 products into each row's own lane and one
 * broadcast activation word feeds all 16 rows.  Every integer sum is exact
 * and each lane then runs the reference's float operations for its row, in
 * the reference's order (mul, mul, add: never fused), so the results are
 * bit-identical to dot_row_q8.  Only this file is compiled for AVX-512; the
 * build stays portable and dot_kernels_best picks it at run time. */
#include "kernels/cpu/dot.h"

/* The numerics name every fused multiply-add (fmaf, _fmadd_); clang would
 * otherwise fuse a * b + c by itself (GCC does not in ISO C mode). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

/* Activation rows per pass: each needs three accumulators in registers. */
#define NX_Q 4

INL __m512i bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

INL __m512 lane_fold(__m512 acc, __m512 d, __m512 yd, __m512i isum)
{
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, yd), _mm512_cvtepi32_ps(isum)));
}

INL void zero_ps(__m512 *v, const int n)
{
#pragma GCC unroll 8
    for (int i = 0; i < n; i++)
        v[i] = _mm512_setzero_ps();
}

INL void zero_si(__m512i *v, const int n)
{
#pragma GCC unroll 8
    for (int i = 0; i < n; i++)
        v[i] = _mm512_setzero_si512();
}

/* Row x of the results to out + x * ostride (or added to what is there). */
INL void store_rows(float *out, int64_t ostride, const __m512 *acc, const int nx, int accumulate)
{
#pragma GCC unroll 8
    for (int x = 0; x < nx; x++)
        _mm512_storeu_ps(out + x * ostride,
                         accumulate ? _mm512_add_ps(_mm512_loadu_ps(out + x * ostride), acc[x]) : acc[x]);
}

/* ---- q4_K: per sub-block j, sum 32 nibble x q8 products per row, times the
 * row's scale; the mins meet the sums of 32 activations (vpdpwssd) ---- */

INL void q4_K_rows(const dot_pack_q4_K *w, const dot_q8_act *a, int64_t x0, const int nx,
                   float *out, int64_t ostride, int accumulate)
{
    const int64_t nsb = a->cols / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int8_t *xq = a->q + x0 * a->cols;
    const float *xd = a->d + x0 * nsb;
    const int16_t *xs = a->s32 + x0 * (a->cols / 32);
    __m512 acc[NX_Q];
    zero_ps(acc, nx);
    for (int64_t i = 0; i < nsb; i++) {
        const dot_pack_q4_K *p = w + i;
        __m512i isum[NX_Q];
        zero_si(isum, nx);
        for (int j = 0; j < 8; j++) {
            __m512i s[NX_Q];
            zero_si(s, nx);
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                const __m512i v = _mm512_loadu_si512(p->qs[j][l]);
                const __m512i lo = _mm512_and_si512(v, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
                for (int x = 0; x < nx; x++) {
                    const int8_t *q = xq + x * a->cols + i * QK_K + j * 32 + l * 8;
                    s[x] = _mm512_dpbusd_epi32(s[x], lo, bcast4(q));
                    s[x] = _mm512_dpbusd_epi32(s[x], hi, bcast4(q + 4));
                }
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p->sc[j]));
#pragma GCC unroll 8
            for (int x = 0; x < nx; x++)
                isum[x] = _mm512_add_epi32(isum[x], _mm512_mullo_epi32(s[x], sc));
        }
        __m512i m16[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            m16[k] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p->m[k]));
        const __m512 d = _mm512_loadu_ps(p->d), dmin = _mm512_loadu_ps(p->dmin);
#pragma GCC unroll 8
        for (int x = 0; x < nx; x++) {
            __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                msum = _mm512_dpwssd_epi32(msum, m16[k],
                                           bcast4(xs + x * (a->cols / 32) + i * 8 + 2 * k));
            const __m512 yd = _mm512_set1_ps(xd[x * nsb + i]);
            acc[x] = lane_fold(acc[x], d, yd, isum[x]);
            acc[x] = _mm512_sub_ps(acc[x],
                                   _mm512_mul_ps(_mm512_mul_ps(dmin, yd), _mm512_cvtepi32_ps(msum)));
        }
    }
    store_rows(out, ostride, acc, nx, accumulate);
}

/* ---- q6_K: values stored +32; the -32 is folded as 32 * sum(scale * bsum16) ---- */

INL void q6_K_rows(const dot_pack_q6_K *w, const dot_q8_act *a, int64_t x0, const int nx,
                   float *out, int64_t ostride, int accumulate)
{
    const int64_t nsb = a->cols / QK_K;
    const int8_t *xq = a->q + x0 * a->cols;
    const float *xd = a->d + x0 * nsb;
    const int16_t *xs = a->s16 + x0 * (a->cols / 16);
    __m512 acc[NX_Q];
    zero_ps(acc, nx);
    for (int64_t i = 0; i < nsb; i++) {
        const dot_pack_q6_K *p = w + i;
        __m512i isum[NX_Q];
        zero_si(isum, nx);
        for (int g = 0; g < 16; g++) {
            __m512i s[NX_Q];
            zero_si(s, nx);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_loadu_si512(p->q[4 * g + c]);
#pragma GCC unroll 8
                for (int x = 0; x < nx; x++)
                    s[x] = _mm512_dpbusd_epi32(s[x], v,
                                               bcast4(xq + x * a->cols + i * QK_K + 16 * g + 4 * c));
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p->sc[g]));
#pragma GCC unroll 8
            for (int x = 0; x < nx; x++)
                isum[x] = _mm512_add_epi32(isum[x], _mm512_mullo_epi32(s[x], sc));
        }
        const __m512 d = _mm512_loadu_ps(p->d);
#pragma GCC unroll 8
        for (int x = 0; x < nx; x++) {
            __m512i corr = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                corr = _mm512_dpwssd_epi32(
                    corr, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p->scp[k])),
                    bcast4(xs + x * (a->cols / 16) + i * 16 + 2 * k));
            isum[x] = _mm512_sub_epi32(isum[x], _mm512_slli_epi32(corr, 5));
            acc[x] = lane_fold(acc[x], d, _mm512_set1_ps(xd[x * nsb + i]), isum[x]);
        }
    }
    store_rows(out, ostride, acc, nx, accumulate);
}

/* ---- q8_0: weights stored +128; the +128 comes back out as 128 * bsum32 ---- */

INL void q8_0_rows(const dot_pack_q8_0 *w, const dot_q8_act *a, int64_t x0, const int nx,
                   float *out, int64_t ostride, int accumulate)
{
    const int64_t nb = a->cols / QK8_0;
    const int8_t *xq = a->q + x0 * a->cols;
    const float *xd = a->d + x0 * nb;
    const int16_t *xs = a->s32 + x0 * nb;
    __m512 acc[NX_Q];
    zero_ps(acc, nx);
    for (int64_t b = 0; b < nb; b++) {
        const dot_pack_q8_0 *p = w + b;
        __m512i s[NX_Q];
        zero_si(s, nx);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m512i v = _mm512_loadu_si512(p->q[c]);
#pragma GCC unroll 8
            for (int x = 0; x < nx; x++)
                s[x] = _mm512_dpbusd_epi32(s[x], v, bcast4(xq + x * a->cols + b * QK8_0 + 4 * c));
        }
        const __m512 d = _mm512_loadu_ps(p->d);
#pragma GCC unroll 8
        for (int x = 0; x < nx; x++) {
            const __m512i si = _mm512_sub_epi32(s[x], _mm512_set1_epi32(128 * xs[x * nb + b]));
            const __m512 t = _mm512_mul_ps(d, _mm512_set1_ps(xd[x * nb + b]));
            acc[x] = _mm512_add_ps(acc[x], _mm512_mul_ps(_mm512_cvtepi32_ps(si), t));
        }
    }
    store_rows(out, ostride, acc, nx, accumulate);
}

#define Q8_TILE(name, rows, pack_t)                                                        \
    TGT static void name(const void *group, const dot_q8_act *a, int64_t x0, int nx,       \
                         float *out, int64_t ostride, int acc)                             \
    {                                                                                      \
        const pack_t *w = group;                                                           \
        for (; nx >= NX_Q; nx -= NX_Q, x0 += NX_Q, out += NX_Q * ostride)                  \
            rows(w, a, x0, NX_Q, out, ostride, acc);                                       \
        switch (nx) {                                                                      \
        case 3: rows(w, a, x0, 3, out, ostride, acc); break;                               \
        case 2: rows(w, a, x0, 2, out, ostride, acc); break;                               \
        case 1: rows(w, a, x0, 1, out, ostride, acc); break;                               \
        default: break;                                                                    \
        }                                                                                  \
    }

Q8_TILE(q4_K_tile, q4_K_rows, dot_pack_q4_K)
Q8_TILE(q6_K_tile, q6_K_rows, dot_pack_q6_K)
Q8_TILE(q8_0_tile, q8_0_rows, dot_pack_q8_0)

/* ---- float weights: 16 lanes per pair, the reference's fixed tree ---- */

/* Lanes i and i+8, then i+4, i+2, i+1: reduce_lanes in dot.c. */
INL float tree16(__m512 v)
{
    const __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

/* tree16 of 16 vectors at once, each level adding the same lanes as
 * tree16 but for several pairs per instruction: lane 4c + r of the result
 * is tree16(acc[c][r]). */
INL __m512 tree16x16(__m512 acc[4][4])
{
    __m512 u[8], w[4], x[2];
    /* lanes i and i+8: pairs 2m, 2m+1 into the low and high halves of u[m] */
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) {
        const __m512 a = acc[(2 * m) % 4][(2 * m) / 4], b = acc[(2 * m + 1) % 4][(2 * m + 1) / 4];
        u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    /* i and i+4: 128-bit block k of w[n] holds pair 4n + k */
#pragma GCC unroll 4
    for (int n = 0; n < 4; n++)
        w[n] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * n], u[2 * n + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * n], u[2 * n + 1], 0xDD));
    /* i and i+2 */
#pragma GCC unroll 2
    for (int m = 0; m < 2; m++)
        x[m] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * m], w[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * m], w[2 * m + 1], 0xEE));
    /* i and i+1: lane 4k + j holds pair 4j + k */
    return _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
}

INL __m512 load_w(const void *row, int64_t i, const int half, __mmask16 k)
{
    if (half)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(k, (const float *)row + i);
}

INL void f_rows(const uint8_t *w, size_t row_bytes, const int nw, const float *x,
                int64_t x_stride, const int nx, int64_t n, float *out, int64_t ostride,
                const int half, int accumulate)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int c = 0; c < nx; c++)
#pragma GCC unroll 4
        for (int r = 0; r < nw; r++)
            acc[c][r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < nw; r++)
            wv[r] = load_w(w + r * row_bytes, i, half, 0xFFFF);
#pragma GCC unroll 4
        for (int c = 0; c < nx; c++) {
            const __m512 xv = _mm512_loadu_ps(x + c * x_stride + i);
#pragma GCC unroll 4
            for (int r = 0; r < nw; r++)
                acc[c][r] = _mm512_fmadd_ps(wv[r], xv, acc[c][r]);
        }
    }
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < nw; r++)
            wv[r] = load_w(w + r * row_bytes, i, half, k);
#pragma GCC unroll 4
        for (int c = 0; c < nx; c++) {
            const __m512 xv = _mm512_maskz_loadu_ps(k, x + c * x_stride + i);
#pragma GCC unroll 4
            for (int r = 0; r < nw; r++)
                acc[c][r] = _mm512_mask3_fmadd_ps(wv[r], xv, acc[c][r], k);
        }
    }
    if (nw == 4 && nx == 4) {
        float t[16];
        _mm512_storeu_ps(t, tree16x16(acc));
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 4; r++)
                out[c * ostride + r] = accumulate ? out[c * ostride + r] + t[4 * c + r] : t[4 * c + r];
        return;
    }
#pragma GCC unroll 4
    for (int c = 0; c < nx; c++)
#pragma GCC unroll 4
        for (int r = 0; r < nw; r++)
            out[c * ostride + r] = accumulate ? out[c * ostride + r] + tree16(acc[c][r])
                                              : tree16(acc[c][r]);
}

#define F_NX(nw, half)                                                                       \
    do {                                                                                     \
        for (; nx >= 4; nx -= 4, x += 4 * x_stride, out += 4 * ostride)                      \
            f_rows(w, row_bytes, nw, x, x_stride, 4, cols, out, ostride, half, acc);         \
        if (nx == 3)                                                                         \
            f_rows(w, row_bytes, nw, x, x_stride, 3, cols, out, ostride, half, acc);         \
        else if (nx == 2)                                                                    \
            f_rows(w, row_bytes, nw, x, x_stride, 2, cols, out, ostride, half, acc);         \
        else if (nx == 1)                                                                    \
            f_rows(w, row_bytes, nw, x, x_stride, 1, cols, out, ostride, half, acc);         \
    } while (0)

#define F_TILE(name, half)                                                                   \
    TGT static void name(const void *wv, size_t row_bytes, int nw, const float *x,          \
                         int64_t x_stride, int nx, int64_t cols, float *out, int64_t ostride, \
                         int acc)                                                            \
    {                                                                                        \
        const uint8_t *w = wv;                                                               \
        switch (nw) {                                                                        \
        case 4: F_NX(4, half); break;                                                        \
        case 3: F_NX(3, half); break;                                                        \
        case 2: F_NX(2, half); break;                                                        \
        default: F_NX(1, half); break;                                                       \
        }                                                                                    \
    }

F_TILE(f32_tile, 0)
F_TILE(f16_tile, 1)

/* ---- attention's weighted sum of V rows: nh x nv vectors of sums stay in
 * registers across the rows ---- */

INL void wsum_block(const int nh, const float *w, size_t w_stride, const uint8_t *v,
                    size_t v_row_bytes, int np, const int half, int64_t n, int64_t i0,
                    const int nv, float *acc)
{
    __mmask16 k[4];
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int c = 0; c < nv; c++) {
        const int64_t left = n - i0 - 16 * c;
        k[c] = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
            a[h][c] = _mm512_maskz_loadu_ps(k[c], acc + h * n + i0 + 16 * c);
    }
    for (int p = 0; p < np; p++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nv; c++)
            vv[c] = load_w(v + (size_t)p * v_row_bytes, i0 + 16 * c, half, k[c]);
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++) {
            const __m512 wb = _mm512_set1_ps(w[(size_t)h * w_stride + p]);
#pragma GCC unroll 4
            for (int c = 0; c < nv; c++)
                a[h][c] = _mm512_fmadd_ps(wb, vv[c], a[h][c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < nv; c++)
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
            _mm512_mask_storeu_ps(acc + h * n + i0 + 16 * c, k[c], a[h][c]);
}

#define WSUM_NH(nh, nv)                                                                     \
    wsum_block(nh, w + (size_t)h0 * w_stride, w_stride, v, v_row_bytes, np, half, n, i0, nv, \
               acc + h0 * n)

#define WSUM_NV(nv)                                                                         \
    for (int h0 = 0; h0 < nh; h0 += 4) {                                                    \
        switch (nh - h0) {                                                                  \
        case 1: WSUM_NH(1, nv); break;                                                      \
        case 2: WSUM_NH(2, nv); break;                                                      \
        case 3: WSUM_NH(3, nv); break;                                                      \
        default: WSUM_NH(4, nv); break;                                                     \
        }                                                                                   \
    }

TGT static void wsum(int nh, const float *w, size_t w_stride, const void *v,
                     size_t v_row_bytes, int np, quant_type t, int64_t n, float *acc)
{
    const int half = t == QUANT_F16;
    for (int64_t i0 = 0; i0 < n; i0 += 64) {
        if (n - i0 <= 16)
            WSUM_NV(1)
        else
            WSUM_NV(4)
    }
}

/* ---- exp (dot_expf's operations, 8 doubles at a time), silu, softmax ---- */

typedef struct exp_tab {
    __m512i t[4]; /* dot_exp_tab, 8 entries per register */
} exp_tab;

INL exp_tab exp_tab_load(void)
{
    exp_tab e;
    for (int i = 0; i < 4; i++)
        e.t[i] = _mm512_loadu_si512(dot_exp_tab + 8 * i);
    return e;
}

INL __m512d exp8d(__m512d xd, const exp_tab *e)
{
    const __m512d invln2n = _mm512_set1_pd(DOT_EXP_INVLN2N), shift = _mm512_set1_pd(DOT_EXP_SHIFT);
    const __m512d kds = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, shift);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, kd);
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(DOT_EXP_C0), _mm512_set1_pd(DOT_EXP_C1));
    const __m512i lo = _mm512_permutex2var_epi64(e->t[0], ki, e->t[1]);
    const __m512i hi = _mm512_permutex2var_epi64(e->t[2], ki, e->t[3]);
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    const __m512d sc = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(DOT_EXP_C2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_mul_pd(y, sc);
}

INL __m512 exp16(__m512 x, const exp_tab *e)
{
    const __m256 lo = _mm512_cvtpd_ps(exp8d(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), e));
    const __m256 hi = _mm512_cvtpd_ps(exp8d(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), e));
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(DOT_EXP_UNDER), _CMP_LT_OQ);
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(DOT_EXP_TINY), _CMP_LT_OQ);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(DOT_EXP_OVER), _CMP_GT_OQ),
                           _mm512_set1_ps(__builtin_inff()));
    y = _mm512_mask_mov_ps(y, tiny, _mm512_set1_ps(0x1p-149f));
    y = _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
    return _mm512_mask_add_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}

INL __mmask16 tail_mask(int64_t left) { return left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1); }

TGT static void silu_mul(const float *g, const float *u, float *o, int64_t n)
{
    const exp_tab e = exp_tab_load();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 ex = exp16(_mm512_xor_ps(gv, _mm512_set1_ps(-0.0f)), &e);
        const __m512 q = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), ex));
        _mm512_mask_storeu_ps(o + i, k, _mm512_mul_ps(q, _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* The 8 double lanes' tree: lanes i and i+4, then i+2, then i+1. */
INL double tree8(__m512d l)
{
    const __m256d t4 = _mm256_add_pd(_mm512_castpd512_pd256(l), _mm512_extractf64x4_pd(l, 1));
    const __m128d t2 = _mm_add_pd(_mm256_castpd256_pd128(t4), _mm256_extractf128_pd(t4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t2, _mm_unpackhi_pd(t2, t2)));
}

/* Adds the 16 floats (as doubles) into the 8 lanes: element i into lane i % 8. */
INL __m512d add_lanes(__m512d acc, __m512 v)
{
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    return _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
}

TGT static void softmax(float *s, int64_t n, float scale)
{
    __m512 mv = _mm512_set1_ps(-__builtin_inff());
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 k = tail_mask(n - p);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + p), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(s + p, k, v);
        mv = _mm512_mask_max_ps(mv, k, v, mv);
    }
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    const exp_tab e = exp_tab_load();
    __m512d lanes = _mm512_setzero_pd();
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 k = tail_mask(n - p);
        const __m512 v = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + p), mx), &e));
        _mm512_mask_storeu_ps(s + p, k, v);
        lanes = add_lanes(lanes, v);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / tree8(lanes)));
    for (int64_t p = 0; p < n; p += 16) {
        const __mmask16 k = tail_mask(n - p);
        _mm512_mask_storeu_ps(s + p, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + p), inv));
    }
}

TGT static double sumsq(const float *x, int64_t n)
{
    __m512d lanes = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        lanes = add_lanes(lanes, _mm512_mul_ps(v, v));
    }
    return tree8(lanes);
}

/* ---- q8_K activations: dot_quantize_q8_K's operations, 16 at a time ---- */

TGT static void quantize_q8_K(const float *x, int64_t n, int8_t *q, float *d, int16_t *s16,
                              int16_t *s32)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *xb = x + b * QK_K;
        __m512 am = _mm512_setzero_ps();
        for (int c = 0; c < QK_K / 16; c++)
            am = _mm512_max_ps(am, _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * c)));
        const float amax = _mm512_reduce_max_ps(am);
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(q + b * QK_K, 0, QK_K);
            memset(s16 + b * (QK_K / 16), 0, (QK_K / 16) * sizeof *s16);
            memset(s32 + b * (QK_K / 32), 0, (QK_K / 32) * sizeof *s32);
            continue;
        }
        /* the first element of the largest magnitude, as the reference's scan */
        float max = 0.0f;
        for (int c = 0; c < QK_K / 16; c++) {
            const __mmask16 hit = _mm512_cmp_ps_mask(
                _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * c)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = xb[16 * c + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int c = 0; c < QK_K / 16; c++) {
            /* round to nearest even, as nearest_int; never below -127 */
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(xb + 16 * c)));
            v = _mm512_min_epi32(v, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(q + b * QK_K + 16 * c), _mm512_cvtsepi32_epi8(v));
            s16[b * (QK_K / 16) + c] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        for (int g = 0; g < QK_K / 32; g++)
            s32[b * (QK_K / 32) + g] =
                (int16_t)(s16[b * (QK_K / 16) + 2 * g] + s16[b * (QK_K / 16) + 2 * g + 1]);
        d[b] = 1.0f / iscale;
    }
}

const dot_kernels dot_kernels_avx512 = {
    .name = "avx512",
    .q4_K = q4_K_tile,
    .q6_K = q6_K_tile,
    .q8_0 = q8_0_tile,
    .f32 = f32_tile,
    .f16 = f16_tile,
    .wsum = wsum,
    .quantize_q8_K = quantize_q8_K,
    .silu_mul = silu_mul,
    .softmax = softmax,
    .sumsq = sumsq,
};

#endif
