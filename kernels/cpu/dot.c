#include "kernels/cpu/dot.h"

#include <math.h>
#include <string.h>

/* The hot loops are compiled for several x86-64 levels and picked at load
 * time; every clone performs the same operations in the same order, and
 * fmaf is correctly rounded everywhere, so the clones agree bit for bit. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
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
void dot_quantize_q8_0(const float *x, int64_t n, int8_t *q, float *d)
{
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int l = 0; l < QK8_0; l++)
            amax = fmaxf(amax, fabsf(xb[l]));
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int l = 0; l < QK8_0; l++)
            q[b * QK8_0 + l] = (int8_t)roundf(xb[l] * id);
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

void dot_quantize_q8_K(const float *x, int64_t n, int8_t *q, float *d, int32_t *s)
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
            memset(s + b * (QK_K / 16), 0, (QK_K / 16) * sizeof *s);
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
            s[b * (QK_K / 16) + g] = sum;
        }
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
        const int32_t *bs = x->s + i * (QK_K / 16);
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
        const int32_t *bs = x->s + i * (QK_K / 16);
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
