/* dot's kernels for AVX2 + FMA + F16C (see dot.h for the contract).
 *
 * The packed groups of 16 weight rows are handled as two halves of 8 rows,
 * one 256-bit lane per row.  AVX2 has no vpdpbusd: vpmaddubsw multiplies
 * unsigned weight bytes by signed activation bytes into 16-bit pair sums
 * (which cannot saturate: |q4| <= 15, |q6| <= 63, |q8| <= 127 with the
 * sign trick for q8_0, and activations lie in [-127, 127]) and vpmaddwd
 * widens them to 32 bits.  The integer sums are exact and each lane then
 * runs the reference's float operations in its order, so the results are
 * bit-identical to dot_row_q8 / dot_row_f32.  Only this file is compiled for
 * AVX2; dot_kernels_best picks it at run time. */
#include "kernels/cpu/dot.h"

/* The numerics name every fused multiply-add (fmaf, _fmadd_); clang would
 * otherwise fuse a * b + c by itself (GCC does not in ISO C mode). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

#define NX_Q 3

INL __m256i bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* acc += 32-bit sums of 4 products of each lane's bytes. */
INL __m256i dot4(__m256i acc, __m256i w, __m256i x)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

/* The same for two chunks, summed in 16 bits first (no overflow: see top). */
INL __m256i dot4x2(__m256i acc, __m256i w0, __m256i x0, __m256i w1, __m256i x1)
{
    const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(t, _mm256_set1_epi16(1)));
}

INL __m256 lane_fold(__m256 acc, __m256 d, __m256 yd, __m256i isum)
{
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, yd), _mm256_cvtepi32_ps(isum)));
}

INL __m256i load8(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

INL void zero_ps(__m256 *v, const int n)
{
#pragma GCC unroll 8
    for (int i = 0; i < n; i++)
        v[i] = _mm256_setzero_ps();
}

INL void zero_si(__m256i *v, const int n)
{
#pragma GCC unroll 8
    for (int i = 0; i < n; i++)
        v[i] = _mm256_setzero_si256();
}

/* Rows 8h .. 8h+7 of result row x to out + x * ostride (or added to it). */
INL void store_half(float *out, int64_t ostride, const int h, const __m256 *acc, const int nx,
                    int accumulate)
{
#pragma GCC unroll 8
    for (int x = 0; x < nx; x++) {
        float *o = out + x * ostride + 8 * h;
        _mm256_storeu_ps(o, accumulate ? _mm256_add_ps(_mm256_loadu_ps(o), acc[x]) : acc[x]);
    }
}

/* ---- q4_K (rows 8h .. 8h+7 of the group) ---- */

INL void q4_K_half(const dot_pack_q4_K *w, const dot_q8_act *a, int64_t x0, const int nx,
                   const int h, float *out, int64_t ostride, int accumulate)
{
    const int64_t nsb = a->cols / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const int8_t *xq = a->q + x0 * a->cols;
    const float *xd = a->d + x0 * nsb;
    const int16_t *xs = a->s32 + x0 * (a->cols / 32);
    __m256 acc[NX_Q];
    zero_ps(acc, nx);
    for (int64_t i = 0; i < nsb; i++) {
        const dot_pack_q4_K *p = w + i;
        __m256i isum[NX_Q];
        zero_si(isum, nx);
        for (int j = 0; j < 8; j++) {
            __m256i s[NX_Q];
            zero_si(s, nx);
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                const __m256i v = load8(p->qs[j][l] + 32 * h);
                const __m256i lo = _mm256_and_si256(v, m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 8
                for (int x = 0; x < nx; x++) {
                    const int8_t *q = xq + x * a->cols + i * QK_K + j * 32 + l * 8;
                    s[x] = dot4x2(s[x], lo, bcast4(q), hi, bcast4(q + 4));
                }
            }
            const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p->sc[j] + 8 * h)));
#pragma GCC unroll 8
            for (int x = 0; x < nx; x++)
                isum[x] = _mm256_add_epi32(isum[x], _mm256_mullo_epi32(s[x], sc));
        }
        const __m256 d = _mm256_loadu_ps(p->d + 8 * h), dmin = _mm256_loadu_ps(p->dmin + 8 * h);
#pragma GCC unroll 8
        for (int x = 0; x < nx; x++) {
            __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i m = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p->m[k][8 * h]));
                msum = _mm256_add_epi32(
                    msum, _mm256_madd_epi16(m, bcast4(xs + x * (a->cols / 32) + i * 8 + 2 * k)));
            }
            const __m256 yd = _mm256_set1_ps(xd[x * nsb + i]);
            acc[x] = lane_fold(acc[x], d, yd, isum[x]);
            acc[x] = _mm256_sub_ps(acc[x],
                                   _mm256_mul_ps(_mm256_mul_ps(dmin, yd), _mm256_cvtepi32_ps(msum)));
        }
    }
    store_half(out, ostride, h, acc, nx, accumulate);
}

/* ---- q6_K ---- */

INL void q6_K_half(const dot_pack_q6_K *w, const dot_q8_act *a, int64_t x0, const int nx,
                   const int h, float *out, int64_t ostride, int accumulate)
{
    const int64_t nsb = a->cols / QK_K;
    const int8_t *xq = a->q + x0 * a->cols;
    const float *xd = a->d + x0 * nsb;
    const int16_t *xs = a->s16 + x0 * (a->cols / 16);
    __m256 acc[NX_Q];
    zero_ps(acc, nx);
    for (int64_t i = 0; i < nsb; i++) {
        const dot_pack_q6_K *p = w + i;
        __m256i isum[NX_Q];
        zero_si(isum, nx);
        for (int g = 0; g < 16; g++) {
            __m256i s[NX_Q];
            zero_si(s, nx);
#pragma GCC unroll 2
            for (int c = 0; c < 4; c += 2) {
                const __m256i v0 = load8(p->q[4 * g + c] + 32 * h);
                const __m256i v1 = load8(p->q[4 * g + c + 1] + 32 * h);
#pragma GCC unroll 8
                for (int x = 0; x < nx; x++) {
                    const int8_t *q = xq + x * a->cols + i * QK_K + 16 * g + 4 * c;
                    s[x] = dot4x2(s[x], v0, bcast4(q), v1, bcast4(q + 4));
                }
            }
            const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p->sc[g] + 8 * h)));
#pragma GCC unroll 8
            for (int x = 0; x < nx; x++)
                isum[x] = _mm256_add_epi32(isum[x], _mm256_mullo_epi32(s[x], sc));
        }
        const __m256 d = _mm256_loadu_ps(p->d + 8 * h);
#pragma GCC unroll 8
        for (int x = 0; x < nx; x++) {
            __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i sc2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p->scp[k][8 * h]));
                corr = _mm256_add_epi32(
                    corr, _mm256_madd_epi16(sc2, bcast4(xs + x * (a->cols / 16) + i * 16 + 2 * k)));
            }
            isum[x] = _mm256_sub_epi32(isum[x], _mm256_slli_epi32(corr, 5));
            acc[x] = lane_fold(acc[x], d, _mm256_set1_ps(xd[x * nsb + i]), isum[x]);
        }
    }
    store_half(out, ostride, h, acc, nx, accumulate);
}

/* ---- q8_0: |w| x sign(x, w), so the unsigned operand is at most 128 ---- */

INL void q8_0_half(const dot_pack_q8_0 *w, const dot_q8_act *a, int64_t x0, const int nx,
                   const int h, float *out, int64_t ostride, int accumulate)
{
    const int64_t nb = a->cols / QK8_0;
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    const int8_t *xq = a->q + x0 * a->cols;
    const float *xd = a->d + x0 * nb;
    __m256 acc[NX_Q];
    zero_ps(acc, nx);
    for (int64_t b = 0; b < nb; b++) {
        const dot_pack_q8_0 *p = w + b;
        __m256i s[NX_Q];
        zero_si(s, nx);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m256i ws = _mm256_xor_si256(load8(p->q[c] + 32 * h), bias);
            const __m256i wa = _mm256_abs_epi8(ws);
#pragma GCC unroll 8
            for (int x = 0; x < nx; x++)
                s[x] = dot4(s[x], wa, _mm256_sign_epi8(bcast4(xq + x * a->cols + b * QK8_0 + 4 * c), ws));
        }
        const __m256 d = _mm256_loadu_ps(p->d + 8 * h);
#pragma GCC unroll 8
        for (int x = 0; x < nx; x++) {
            const __m256 t = _mm256_mul_ps(d, _mm256_set1_ps(xd[x * nb + b]));
            acc[x] = _mm256_add_ps(acc[x], _mm256_mul_ps(_mm256_cvtepi32_ps(s[x]), t));
        }
    }
    store_half(out, ostride, h, acc, nx, accumulate);
}

#define Q8_TILE(name, half, pack_t)                                                        \
    TGT static void name(const void *group, const dot_q8_act *a, int64_t x0, int nx,       \
                         float *out, int64_t ostride, int acc)                             \
    {                                                                                      \
        const pack_t *w = group;                                                           \
        for (; nx >= NX_Q; nx -= NX_Q, x0 += NX_Q, out += NX_Q * ostride) {                \
            half(w, a, x0, NX_Q, 0, out, ostride, acc);                                    \
            half(w, a, x0, NX_Q, 1, out, ostride, acc);                                    \
        }                                                                                  \
        for (; nx > 0; nx--, x0++, out += ostride) {                                       \
            half(w, a, x0, 1, 0, out, ostride, acc);                                       \
            half(w, a, x0, 1, 1, out, ostride, acc);                                       \
        }                                                                                  \
    }

Q8_TILE(q4_K_tile, q4_K_half, dot_pack_q4_K)
Q8_TILE(q6_K_tile, q6_K_half, dot_pack_q6_K)
Q8_TILE(q8_0_tile, q8_0_half, dot_pack_q8_0)

/* ---- float weights: 16 lanes per pair as two vectors, the reference's tree ---- */

INL float tree16(__m256 lo, __m256 hi)
{
    const __m256 t8 = _mm256_add_ps(lo, hi);
    const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

INL __m256 load_w(const void *row, int64_t i, const int half)
{
    if (half)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    return _mm256_loadu_ps((const float *)row + i);
}

/* The last n % 16 elements, zero-padded to 16. */
INL void tail_w(const void *row, int64_t i, int64_t n, const int half, __m256 *lo, __m256 *hi)
{
    uint16_t h[16] = {0};
    float f[16] = {0};
    if (half) {
        memcpy(h, (const uint16_t *)row + i, (size_t)(n - i) * sizeof *h);
        *lo = load_w(h, 0, 1);
        *hi = load_w(h, 8, 1);
    } else {
        memcpy(f, (const float *)row + i, (size_t)(n - i) * sizeof *f);
        *lo = _mm256_loadu_ps(f);
        *hi = _mm256_loadu_ps(f + 8);
    }
}

INL void f_rows(const uint8_t *w, size_t row_bytes, const int nw, const float *x,
                int64_t x_stride, const int nx, int64_t n, float *out, int64_t ostride,
                const int half, int accumulate)
{
    __m256 acc[2][2][2];
#pragma GCC unroll 2
    for (int c = 0; c < nx; c++)
#pragma GCC unroll 2
        for (int r = 0; r < nw; r++)
            acc[c][r][0] = acc[c][r][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 wv[2][2];
#pragma GCC unroll 2
        for (int r = 0; r < nw; r++) {
            wv[r][0] = load_w(w + r * row_bytes, i, half);
            wv[r][1] = load_w(w + r * row_bytes, i + 8, half);
        }
#pragma GCC unroll 2
        for (int c = 0; c < nx; c++) {
            const __m256 x0 = _mm256_loadu_ps(x + c * x_stride + i);
            const __m256 x1 = _mm256_loadu_ps(x + c * x_stride + i + 8);
#pragma GCC unroll 2
            for (int r = 0; r < nw; r++) {
                acc[c][r][0] = _mm256_fmadd_ps(wv[r][0], x0, acc[c][r][0]);
                acc[c][r][1] = _mm256_fmadd_ps(wv[r][1], x1, acc[c][r][1]);
            }
        }
    }
    if (i < n) {
        /* Lanes past the end keep their sums exactly (a blend, not a +0 fma). */
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 k0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), lane));
        const __m256 k1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i - 8)), lane));
        __m256 wv[2][2];
#pragma GCC unroll 2
        for (int r = 0; r < nw; r++)
            tail_w(w + r * row_bytes, i, n, half, &wv[r][0], &wv[r][1]);
#pragma GCC unroll 2
        for (int c = 0; c < nx; c++) {
            __m256 x0, x1;
            tail_w(x + c * x_stride, i, n, 0, &x0, &x1);
#pragma GCC unroll 2
            for (int r = 0; r < nw; r++) {
                acc[c][r][0] = _mm256_blendv_ps(acc[c][r][0], _mm256_fmadd_ps(wv[r][0], x0, acc[c][r][0]), k0);
                acc[c][r][1] = _mm256_blendv_ps(acc[c][r][1], _mm256_fmadd_ps(wv[r][1], x1, acc[c][r][1]), k1);
            }
        }
    }
#pragma GCC unroll 2
    for (int c = 0; c < nx; c++)
#pragma GCC unroll 2
        for (int r = 0; r < nw; r++)
            out[c * ostride + r] = accumulate
                                       ? out[c * ostride + r] + tree16(acc[c][r][0], acc[c][r][1])
                                       : tree16(acc[c][r][0], acc[c][r][1]);
}

/* Pairs of weight rows x pairs of activation rows. */
#define F_TILE(name, half)                                                                   \
    TGT static void name(const void *wv, size_t row_bytes, int nw, const float *x,          \
                         int64_t x_stride, int nx, int64_t cols, float *out, int64_t ostride, \
                         int acc)                                                            \
    {                                                                                        \
        const uint8_t *w = wv;                                                               \
        for (int r = 0; r < nw; r += 2) {                                                    \
            const int two_w = r + 1 < nw;                                                    \
            int c = 0;                                                                       \
            for (; c + 2 <= nx; c += 2) {                                                    \
                if (two_w)                                                                   \
                    f_rows(w + r * row_bytes, row_bytes, 2, x + c * x_stride, x_stride, 2,   \
                           cols, out + c * ostride + r, ostride, half, acc);                      \
                else                                                                         \
                    f_rows(w + r * row_bytes, row_bytes, 1, x + c * x_stride, x_stride, 2,   \
                           cols, out + c * ostride + r, ostride, half, acc);                      \
            }                                                                                \
            if (c < nx) {                                                                    \
                if (two_w)                                                                   \
                    f_rows(w + r * row_bytes, row_bytes, 2, x + c * x_stride, x_stride, 1,   \
                           cols, out + c * ostride + r, ostride, half, acc);                      \
                else                                                                         \
                    f_rows(w + r * row_bytes, row_bytes, 1, x + c * x_stride, x_stride, 1,   \
                           cols, out + c * ostride + r, ostride, half, acc);                      \
            }                                                                                \
        }                                                                                    \
    }

F_TILE(f32_tile, 0)
F_TILE(f16_tile, 1)

/* ---- attention's weighted sum of V rows: up to 4 heads' sums of 8 values
 * stay in registers across the rows; the last n % 8 values go element by
 * element (fmaf, the same operation) ---- */

INL void wsum_block(const int nh, const float *w, size_t w_stride, const uint8_t *v,
                    size_t v_row_bytes, int np, const int half, int64_t n, int64_t i0, float *acc)
{
    __m256 a[4];
#pragma GCC unroll 4
    for (int h = 0; h < nh; h++)
        a[h] = _mm256_loadu_ps(acc + h * n + i0);
    for (int p = 0; p < np; p++) {
        const __m256 vv = load_w(v + (size_t)p * v_row_bytes, i0, half);
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
            a[h] = _mm256_fmadd_ps(_mm256_set1_ps(w[(size_t)h * w_stride + p]), vv, a[h]);
    }
#pragma GCC unroll 4
    for (int h = 0; h < nh; h++)
        _mm256_storeu_ps(acc + h * n + i0, a[h]);
}

TGT static void wsum(int nh, const float *w, size_t w_stride, const void *v,
                     size_t v_row_bytes, int np, quant_type t, int64_t n, float *acc)
{
    const int half = t == QUANT_F16;
    int64_t i0 = 0;
    for (; i0 + 8 <= n; i0 += 8)
        for (int h0 = 0; h0 < nh; h0 += 4) {
            const float *wh = w + (size_t)h0 * w_stride;
            float *ah = acc + h0 * n;
            switch (nh - h0) {
            case 1: wsum_block(1, wh, w_stride, v, v_row_bytes, np, half, n, i0, ah); break;
            case 2: wsum_block(2, wh, w_stride, v, v_row_bytes, np, half, n, i0, ah); break;
            case 3: wsum_block(3, wh, w_stride, v, v_row_bytes, np, half, n, i0, ah); break;
            default: wsum_block(4, wh, w_stride, v, v_row_bytes, np, half, n, i0, ah); break;
            }
        }
    for (int p = 0; p < np && i0 < n; p++) {
        const uint8_t *vp = (const uint8_t *)v + (size_t)p * v_row_bytes;
        for (int64_t i = i0; i < n; i++) {
            const float x = half ? quant_f16_to_f32(((const uint16_t *)vp)[i]) : ((const float *)vp)[i];
            for (int h = 0; h < nh; h++)
                acc[h * n + i] = fmaf(w[(size_t)h * w_stride + p], x, acc[h * n + i]);
        }
    }
}

/* ---- exp (dot_expf's operations, 4 doubles at a time), silu, softmax ---- */

INL __m256d exp4d(__m256d xd)
{
    const __m256d invln2n = _mm256_set1_pd(DOT_EXP_INVLN2N), shift = _mm256_set1_pd(DOT_EXP_SHIFT);
    const __m256d kds = _mm256_fmadd_pd(invln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kds);
    const __m256d kd = _mm256_sub_pd(kds, shift);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, kd);
    const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(DOT_EXP_C0), _mm256_set1_pd(DOT_EXP_C1));
    const __m256i t = _mm256_i64gather_epi64((const long long *)dot_exp_tab,
                                             _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(DOT_EXP_C2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_mul_pd(y, sc);
}

INL __m256 exp8(__m256 x)
{
    const __m128 lo = _mm256_cvtpd_ps(exp4d(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    const __m128 hi = _mm256_cvtpd_ps(exp4d(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()),
                         _mm256_cmp_ps(x, _mm256_set1_ps(DOT_EXP_OVER), _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(0x1p-149f),
                         _mm256_cmp_ps(x, _mm256_set1_ps(DOT_EXP_TINY), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x, _mm256_set1_ps(DOT_EXP_UNDER), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

TGT static void silu_mul(const float *g, const float *u, float *o, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 ex = exp8(_mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));
        const __m256 q = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), ex));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(q, _mm256_loadu_ps(u + i)));
    }
    dot_silu_mul(g + i, u + i, o + i, n - i);
}

/* 8 double lanes as two vectors: element i into lane i % 8. */
INL void add_lanes(__m256d *l0, __m256d *l1, __m256 v)
{
    *l0 = _mm256_add_pd(*l0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    *l1 = _mm256_add_pd(*l1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/* The reference's tree over lanes (l0 = lanes 0-3, l1 = 4-7) plus a scalar
 * tail continuing the lanes from element i (a multiple of 8). */
INL double tree8(__m256d l0, __m256d l1, const float *tail, int64_t n_tail, const int square)
{
    double lane[8];
    _mm256_storeu_pd(lane, l0);
    _mm256_storeu_pd(lane + 4, l1);
    for (int64_t i = 0; i < n_tail; i++)
        lane[i] += square ? (double)(tail[i] * tail[i]) : (double)tail[i];
    double t[4];
    for (int i = 0; i < 4; i++)
        t[i] = lane[i] + lane[i + 4];
    t[0] += t[2];
    t[1] += t[3];
    return t[0] + t[1];
}

TGT static void softmax(float *s, int64_t n, float scale)
{
    float mx = -__builtin_inff();
    int64_t p = 0;
    __m256 mv = _mm256_set1_ps(mx);
    for (; p + 8 <= n; p += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + p), _mm256_set1_ps(scale));
        _mm256_storeu_ps(s + p, v);
        mv = _mm256_max_ps(v, mv);
    }
    float m8[8];
    _mm256_storeu_ps(m8, mv);
    for (int i = 0; i < 8; i++)
        mx = m8[i] > mx ? m8[i] : mx;
    for (; p < n; p++) {
        s[p] *= scale;
        mx = s[p] > mx ? s[p] : mx;
    }
    __m256d l0 = _mm256_setzero_pd(), l1 = _mm256_setzero_pd();
    const __m256 mxv = _mm256_set1_ps(mx);
    for (p = 0; p + 8 <= n; p += 8) {
        const __m256 v = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + p), mxv));
        _mm256_storeu_ps(s + p, v);
        add_lanes(&l0, &l1, v);
    }
    for (int64_t i = p; i < n; i++)
        s[i] = dot_expf(s[i] - mx);
    const float inv = (float)(1.0 / tree8(l0, l1, s + p, n - p, 0));
    for (p = 0; p + 8 <= n; p += 8)
        _mm256_storeu_ps(s + p, _mm256_mul_ps(_mm256_loadu_ps(s + p), _mm256_set1_ps(inv)));
    for (; p < n; p++)
        s[p] *= inv;
}

TGT static double sumsq(const float *x, int64_t n)
{
    __m256d l0 = _mm256_setzero_pd(), l1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        add_lanes(&l0, &l1, _mm256_mul_ps(v, v));
    }
    return tree8(l0, l1, x + i, n - i, 1);
}

const dot_kernels dot_kernels_avx2 = {
    .name = "avx2",
    .q4_K = q4_K_tile,
    .q6_K = q6_K_tile,
    .q8_0 = q8_0_tile,
    .f32 = f32_tile,
    .f16 = f16_tile,
    .wsum = wsum,
    .quantize_q8_K = dot_quantize_q8_K,
    .silu_mul = silu_mul,
    .softmax = softmax,
    .sumsq = sumsq,
};

#endif
