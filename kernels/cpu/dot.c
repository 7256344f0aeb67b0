#include "kernels/cpu/dot.h"

/* The numerics name every fused multiply-add (fmaf, _fmadd_); clang would
 * otherwise fuse a * b + c by itself (GCC does not in ISO C mode). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* The hot loops are compiled for several x86-64 levels and picked at load
 * time; every clone performs the same operations in the same order, and
 * fmaf is correctly rounded everywhere, so the clones agree bit for bit.
 * Not under ThreadSanitizer: the clones' resolvers run before its runtime
 * is set up, and crash. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define DOT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DOT_CLONES
#endif

#define LANES 16

dot_act dot_act_for(quant_type t)
{
    switch (t) {
    case QUANT_Q8_0: return DOT_ACT_Q8_0;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K: return DOT_ACT_Q8_K;
    default: return DOT_ACT_F32;
    }
}

DOT_CLONES
void dot_quantize_q8_0(const float *x, int64_t n, int8_t *q, float *d, int16_t *s32)
{
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int l = 0; l < QK8_0; l++)
            amax = fmaxf(amax, fabsf(xb[l]));
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int l = 0; l < QK8_0; l++) {
            q[b * QK8_0 + l] = (int8_t)roundf(xb[l] * id);
            sum += q[b * QK8_0 + l];
        }
        s32[b] = (int16_t)sum;
        /* llama.cpp stores this scale as f16 */
        d[b] = quant_f16_to_f32(quant_f32_to_f16(db));
    }
}

/* Round to nearest, ties to even, as ggml's nearest_int (|f| < 2^22). */
static inline int nearest_int(float f)
{
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void dot_quantize_q8_K(const float *x, int64_t n, int8_t *q, float *d, int16_t *s16,
                       int16_t *s32)
{
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *xb = x + b * QK_K;
        int8_t *qb = q + b * QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(qb, 0, QK_K);
            memset(s16 + b * (QK_K / 16), 0, (QK_K / 16) * sizeof *s16);
            memset(s32 + b * (QK_K / 32), 0, (QK_K / 32) * sizeof *s32);
            continue;
        }
        /* The largest magnitude maps to -127 exactly (ggml's choice). */
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * xb[j]);
            qb[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t sum = 0;
            for (int l = 0; l < 16; l++)
                sum += qb[g * 16 + l];
            s16[b * (QK_K / 16) + g] = (int16_t)sum;
        }
        for (int g = 0; g < QK_K / 32; g++)
            s32[b * (QK_K / 32) + g] =
                (int16_t)(s16[b * (QK_K / 16) + 2 * g] + s16[b * (QK_K / 16) + 2 * g + 1]);
        d[b] = 1.0f / iscale;
    }
}

/* ---- float weights: LANES independent partial sums, then a fixed tree ---- */

static float reduce_lanes(const float *acc)
{
    float t[LANES / 2];
    for (int i = 0; i < LANES / 2; i++)
        t[i] = acc[i] + acc[i + LANES / 2];
    for (int w = LANES / 4; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            t[i] = t[i] + t[i + w];
    return t[0];
}

DOT_CLONES
static float dot_f32(const float *w, const float *x, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] = fmaf(w[i + l], x[i + l], acc[l]);
    for (int l = 0; i < n; i++, l++)
        acc[l] = fmaf(w[i], x[i], acc[l]);
    return reduce_lanes(acc);
}

DOT_CLONES
static float dot_f16(const quant_f16 *w, const float *x, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] = fmaf(quant_f16_to_f32(w[i + l]), x[i + l], acc[l]);
    for (int l = 0; i < n; i++, l++)
        acc[l] = fmaf(quant_f16_to_f32(w[i]), x[i], acc[l]);
    return reduce_lanes(acc);
}

DOT_CLONES
static float dot_bf16(const quant_bf16 *w, const float *x, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] = fmaf(quant_bf16_to_f32(w[i + l]), x[i + l], acc[l]);
    for (int l = 0; i < n; i++, l++)
        acc[l] = fmaf(quant_bf16_to_f32(w[i]), x[i], acc[l]);
    return reduce_lanes(acc);
}

float dot_row_f32(quant_type t, const void *w, const float *x, int64_t n)
{
    switch (t) {
    case QUANT_F32: return dot_f32(w, x, n);
    case QUANT_F16: return dot_f16(w, x, n);
    case QUANT_BF16: return dot_bf16(w, x, n);
    default: return NAN; /* callers route quantized types to dot_row_q8 */
    }
}

DOT_CLONES
void dot_wsum(int nh, const float *w, size_t w_stride, const void *v, size_t v_row_bytes, int np,
              quant_type t, int64_t n, float *acc)
{
    for (int p = 0; p < np; p++) {
        const uint8_t *vp = (const uint8_t *)v + (size_t)p * v_row_bytes;
        for (int h = 0; h < nh; h++) {
            const float wp = w[(size_t)h * w_stride + p];
            float *o = acc + h * n;
            if (t == QUANT_F16)
                for (int64_t i = 0; i < n; i++)
                    o[i] = fmaf(wp, quant_f16_to_f32(((const quant_f16 *)vp)[i]), o[i]);
            else
                for (int64_t i = 0; i < n; i++)
                    o[i] = fmaf(wp, ((const float *)vp)[i], o[i]);
        }
    }
}

/* ---- quantized weights against q8 activations ---- */

DOT_CLONES
static float dot_q8_0(const block_q8_0 *w, const dot_q8_row *x, int64_t n)
{
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const int8_t *xq = x->q + b * QK8_0;
        int32_t s = 0;
        for (int l = 0; l < QK8_0; l++)
            s += (int32_t)w[b].qs[l] * xq[l];
        acc += (float)s * (quant_f16_to_f32(w[b].d) * x->d[b]);
    }
    return acc;
}

/* For k-quants every product inside a super-block is an exact integer; the
 * block contributes d*yd*sum(scale*dot) - dmin*yd*sum(min*bsum). */
DOT_CLONES
static float dot_q4_K(const block_q4_K *w, const dot_q8_row *x, int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = w[i].qs;
        const int8_t *xq = x->q + i * QK_K;
        const int16_t *bs = x->s16 + i * (QK_K / 16);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 64; j++) {
            const int8_t *x0 = xq + 64 * j, *x1 = x0 + 32;
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (int32_t)(q[l] & 0xF) * x0[l];
                s1 += (int32_t)(q[l] >> 4) * x1[l];
            }
            uint8_t sc0, m0, sc1, m1;
            quant_get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            quant_get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            isum += sc0 * s0 + sc1 * s1;
            msum += m0 * (bs[4 * j] + bs[4 * j + 1]) + m1 * (bs[4 * j + 2] + bs[4 * j + 3]);
            q += 32;
        }
        const float yd = x->d[i];
        acc += quant_f16_to_f32(w[i].d) * yd * (float)isum;
        acc -= quant_f16_to_f32(w[i].dmin) * yd * (float)msum;
    }
    return acc;
}

DOT_CLONES
static float dot_q5_K(const block_q5_K *w, const dot_q8_row *x, int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = w[i].qs;
        const uint8_t *qh = w[i].qh;
        const int8_t *xq = x->q + i * QK_K;
        const int16_t *bs = x->s16 + i * (QK_K / 16);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 64; j++) {
            const int8_t *x0 = xq + 64 * j, *x1 = x0 + 32;
            const uint8_t u1 = (uint8_t)(1u << (2 * j)), u2 = (uint8_t)(2u << (2 * j));
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (int32_t)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) * x0[l];
                s1 += (int32_t)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) * x1[l];
            }
            uint8_t sc0, m0, sc1, m1;
            quant_get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            quant_get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            isum += sc0 * s0 + sc1 * s1;
            msum += m0 * (bs[4 * j] + bs[4 * j + 1]) + m1 * (bs[4 * j + 2] + bs[4 * j + 3]);
            ql += 32;
        }
        const float yd = x->d[i];
        acc += quant_f16_to_f32(w[i].d) * yd * (float)isum;
        acc -= quant_f16_to_f32(w[i].dmin) * yd * (float)msum;
    }
    return acc;
}

/* q6_K stores each 128-element half as four 32-element parts: part p takes
 * the low (p < 2) or high nibble of ql[l + 32*(p&1)] and bits 2p..2p+1 of
 * qh[l]; scales are per 16 elements. */
DOT_CLONES
static float dot_q6_K(const block_q6_K *w, const dot_q8_row *x, int64_t n)
{
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h;
            const uint8_t *qh = w[i].qh + 32 * h;
            const int8_t *sc = w[i].scales + 8 * h;
            for (int p = 0; p < 4; p++) {
                const int8_t *xb = x->q + i * QK_K + h * 128 + p * 32;
                const uint8_t *lo = ql + 32 * (p & 1);
                const int shift_l = (p >> 1) * 4, shift_h = 2 * p;
                int32_t s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) {
                    int q = (int)(((lo[l] >> shift_l) & 0xF) | (((qh[l] >> shift_h) & 3) << 4)) - 32;
                    s0 += q * xb[l];
                }
                for (int l = 16; l < 32; l++) {
                    int q = (int)(((lo[l] >> shift_l) & 0xF) | (((qh[l] >> shift_h) & 3) << 4)) - 32;
                    s1 += q * xb[l];
                }
                isum += sc[2 * p] * s0 + sc[2 * p + 1] * s1;
            }
        }
        acc += quant_f16_to_f32(w[i].d) * x->d[i] * (float)isum;
    }
    return acc;
}

float dot_row_q8(quant_type t, const void *w, const dot_q8_row *x, int64_t n)
{
    switch (t) {
    case QUANT_Q8_0: return dot_q8_0(w, x, n);
    case QUANT_Q4_K: return dot_q4_K(w, x, n);
    case QUANT_Q5_K: return dot_q5_K(w, x, n);
    case QUANT_Q6_K: return dot_q6_K(w, x, n);
    default: return NAN;
    }
}

/* ---- exp, silu, softmax, sum of squares ---- */

/* glibc's __exp2f_data: tab[i] = bits(2^(i/32)) - (i << 47). */
const uint64_t dot_exp_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

DOT_CLONES
float dot_expf(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (((u >> 20) & 0x7ff) >= 0x42b) { /* |x| >= 88, inf or NaN */
        if (u == 0xff800000u)
            return 0.0f;
        if (((u >> 20) & 0x7ff) >= 0x7f8)
            return x + x;
        if (x > DOT_EXP_OVER)
            return INFINITY;
        if (x < DOT_EXP_UNDER)
            return 0.0f;
        if (x < DOT_EXP_TINY)
            return 0x1p-149f;
    }
    /* x * 32/ln2 = k + r, exp(x) = 2^(k/32) * 2^(r/32), fused as glibc's build fuses */
    const double xd = x;
    const double kds = fma(DOT_EXP_INVLN2N, xd, DOT_EXP_SHIFT);
    uint64_t ki;
    memcpy(&ki, &kds, sizeof ki);
    const double kd = kds - DOT_EXP_SHIFT;
    const double r = fma(DOT_EXP_INVLN2N, xd, -kd);
    const double z = fma(r, DOT_EXP_C0, DOT_EXP_C1);
    const uint64_t t = dot_exp_tab[ki % 32] + (ki << 47);
    double s;
    memcpy(&s, &t, sizeof s);
    const double r2 = r * r;
    double y = fma(r, DOT_EXP_C2, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}

DOT_CLONES
void dot_silu_mul(const float *g, const float *u, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = g[i] / (1.0f + dot_expf(-g[i])) * u[i];
}

static double tree8(const double *l)
{
    double t[4];
    for (int i = 0; i < 4; i++)
        t[i] = l[i] + l[i + 4];
    t[0] += t[2];
    t[1] += t[3];
    return t[0] + t[1];
}

DOT_CLONES
void dot_softmax(float *s, int64_t n, float scale)
{
    float mx = -INFINITY;
    for (int64_t p = 0; p < n; p++) {
        s[p] *= scale;
        mx = s[p] > mx ? s[p] : mx;
    }
    double lane[8] = {0};
    for (int64_t p = 0; p < n; p++) {
        s[p] = dot_expf(s[p] - mx);
        lane[p % 8] += s[p];
    }
    const float inv = (float)(1.0 / tree8(lane));
    for (int64_t p = 0; p < n; p++)
        s[p] *= inv;
}

DOT_CLONES
double dot_sumsq(const float *x, int64_t n)
{
    double lane[8] = {0};
    for (int64_t i = 0; i < n; i++)
        lane[i % 8] += (double)(x[i] * x[i]);
    return tree8(lane);
}

dot_q8_row dot_act_row(const dot_q8_act *a, dot_act kind, int64_t row)
{
    const int64_t per_d = kind == DOT_ACT_Q8_0 ? QK8_0 : QK_K;
    return (dot_q8_row){.q = a->q + row * a->cols, .d = a->d + row * (a->cols / per_d),
                        .s16 = a->s16 + row * (a->cols / 16)};
}

/* ---- packing ---- */

static size_t pack_block_bytes(quant_type t)
{
    switch (t) {
    case QUANT_Q4_K: return sizeof(dot_pack_q4_K);
    case QUANT_Q6_K: return sizeof(dot_pack_q6_K);
    case QUANT_Q8_0: return sizeof(dot_pack_q8_0);
    default: return 0;
    }
}

size_t dot_pack_group_bytes(quant_type t, int64_t cols)
{
    return pack_block_bytes(t) * (size_t)(cols / (int64_t)quant_block_elems(t));
}

size_t dot_pack_bytes(quant_type t, int64_t rows, int64_t cols)
{
    const size_t groups = (size_t)((rows + DOT_GROUP - 1) / DOT_GROUP);
    return groups * dot_pack_group_bytes(t, cols);
}

/* Row r's values 0..31 of sub-block j of a q4_K super-block. */
static void q4_K_sub_block(const block_q4_K *b, int j, uint8_t v[32])
{
    const uint8_t *q = b->qs + 32 * (j / 2);
    for (int l = 0; l < 32; l++)
        v[l] = j % 2 ? q[l] >> 4 : q[l] & 0xF;
}

static void pack_q4_K(const block_q4_K *b, int r, dot_pack_q4_K *p)
{
    p->d[r] = quant_f16_to_f32(b->d);
    p->dmin[r] = quant_f16_to_f32(b->dmin);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m, v[32];
        quant_get_scale_min_k4(j, b->scales, &sc, &m);
        p->sc[j][r] = sc;
        p->m[j / 2][r][j % 2] = m;
        q4_K_sub_block(b, j, v);
        for (int l = 0; l < 4; l++)
            for (int i = 0; i < 4; i++)
                p->qs[j][l][4 * r + i] = (uint8_t)(v[8 * l + i] | v[8 * l + 4 + i] << 4);
    }
}

static void pack_q6_K(const block_q6_K *b, int r, dot_pack_q6_K *p)
{
    p->d[r] = quant_f16_to_f32(b->d);
    for (int g = 0; g < 16; g++) {
        p->sc[g][r] = b->scales[g];
        p->scp[g / 2][r][g % 2] = b->scales[g];
    }
    /* value 128h + 32p + l: nibble p/2 of ql[64h + 32(p%2) + l], bits 2p of qh[32h + l] */
    for (int v = 0; v < QK_K; v++) {
        const int h = v / 128, part = v % 128 / 32, l = v % 32;
        const int lo = (b->ql[64 * h + 32 * (part % 2) + l] >> (4 * (part / 2))) & 0xF;
        const int hi = (b->qh[32 * h + l] >> (2 * part)) & 3;
        p->q[v / 4][4 * r + v % 4] = (uint8_t)(lo | hi << 4);
    }
}

static void pack_q8_0(const block_q8_0 *b, int r, dot_pack_q8_0 *p)
{
    p->d[r] = quant_f16_to_f32(b->d);
    for (int v = 0; v < QK8_0; v++)
        p->q[v / 4][4 * r + v % 4] = (uint8_t)(b->qs[v] + 128);
}

void dot_pack(quant_type t, const uint8_t *w, size_t row_bytes, int64_t rows, int64_t cols,
              void *dst)
{
    const size_t bb = pack_block_bytes(t), src_bb = quant_block_bytes(t);
    const int64_t nb = cols / (int64_t)quant_block_elems(t);
    uint8_t *out = dst;
    memset(dst, 0, dot_pack_bytes(t, rows, cols));
    for (int64_t n = 0; n < rows; n++) {
        const int r = (int)(n % DOT_GROUP);
        uint8_t *group = out + (size_t)(n / DOT_GROUP) * nb * bb;
        for (int64_t i = 0; i < nb; i++) {
            const void *src = w + n * row_bytes + i * src_bb;
            void *p = group + i * bb;
            if (t == QUANT_Q4_K)
                pack_q4_K(src, r, p);
            else if (t == QUANT_Q6_K)
                pack_q6_K(src, r, p);
            else
                pack_q8_0(src, r, p);
        }
    }
}

/* ---- kernel sets ---- */

const dot_kernels dot_kernels_generic = {
    .name = "generic",
    .wsum = dot_wsum,
    .quantize_q8_K = dot_quantize_q8_K,
    .silu_mul = dot_silu_mul,
    .softmax = dot_softmax,
    .sumsq = dot_sumsq,
};

#if defined(__x86_64__) && defined(__GNUC__)
static bool runs_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

/* F16C predates AVX2 (every AVX2 CPU has it), and clang cannot ask for it. */
static bool runs_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

const dot_kernels *dot_kernels_by_name(const char *name)
{
    if (strcmp(name, "generic") == 0)
        return &dot_kernels_generic;
#if defined(__x86_64__) && defined(__GNUC__)
    if (strcmp(name, "avx2") == 0 && runs_avx2())
        return &dot_kernels_avx2;
    if (strcmp(name, "avx512") == 0 && runs_avx512())
        return &dot_kernels_avx512;
#endif
    return NULL;
}

const dot_kernels *dot_kernels_best(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (runs_avx512())
        return &dot_kernels_avx512;
    if (runs_avx2())
        return &dot_kernels_avx2;
#endif
    return &dot_kernels_generic;
}

dot_q8_tile_fn dot_kernels_q8_tile(const dot_kernels *k, quant_type t)
{
    switch (t) {
    case QUANT_Q4_K: return k->q4_K;
    case QUANT_Q6_K: return k->q6_K;
    case QUANT_Q8_0: return k->q8_0;
    default: return NULL;
    }
}

dot_f_tile_fn dot_kernels_f_tile(const dot_kernels *k, quant_type t)
{
    switch (t) {
    case QUANT_F32: return k->f32;
    case QUANT_F16: return k->f16;
    default: return NULL;
    }
}
