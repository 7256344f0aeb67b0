/* quant: type table, fp16/bf16 conversions and row dequantizers.
 *
 * The dequantizers follow ggml's reference definitions (ggml-quants.c:
 * dequantize_row_q8_0, _q4_K, _q5_K, _q6_K) operation for operation, so the
 * f32 results are bit-identical: the products and differences are separate
 * f32 operations (the build is ISO C, so GCC does not contract them into
 * FMAs).  Inner loops are plain fixed-count loops the compiler vectorizes. */
#include "kernels/quant.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

typedef struct type_info {
    const char *name;
    uint16_t block_elems;
    uint16_t block_bytes;
    bool supported;
} type_info;

/* Indexed by ggml type id.  Ids ggml retired (4, 5, 31-33, 36-38) stay NULL;
 * the i-quants and integer types are named only so errors can say which type
 * a file holds. */
static const type_info TYPES[] = {
    [QUANT_F32] = {"f32", 1, 4, true},
    [QUANT_F16] = {"f16", 1, 2, true},
    [QUANT_Q4_0] = {"q4_0", 32, 18, false},
    [QUANT_Q4_1] = {"q4_1", 32, 20, false},
    [QUANT_Q5_0] = {"q5_0", 32, 22, false},
    [QUANT_Q5_1] = {"q5_1", 32, 24, false},
    [QUANT_Q8_0] = {"q8_0", QK8_0, sizeof(block_q8_0), true},
    [QUANT_Q8_1] = {"q8_1", 32, 36, false},
    [QUANT_Q2_K] = {"q2_K", QK_K, 84, false},
    [QUANT_Q3_K] = {"q3_K", QK_K, 110, false},
    [QUANT_Q4_K] = {"q4_K", QK_K, sizeof(block_q4_K), true},
    [QUANT_Q5_K] = {"q5_K", QK_K, sizeof(block_q5_K), true},
    [QUANT_Q6_K] = {"q6_K", QK_K, sizeof(block_q6_K), true},
    [QUANT_Q8_K] = {"q8_K", QK_K, 292, false},
    [16] = {"iq2_xxs", 0, 0, false},
    [17] = {"iq2_xs", 0, 0, false},
    [18] = {"iq3_xxs", 0, 0, false},
    [19] = {"iq1_s", 0, 0, false},
    [20] = {"iq4_nl", 0, 0, false},
    [21] = {"iq3_s", 0, 0, false},
    [22] = {"iq2_s", 0, 0, false},
    [23] = {"iq4_xs", 0, 0, false},
    [24] = {"i8", 0, 0, false},
    [25] = {"i16", 0, 0, false},
    [26] = {"i32", 0, 0, false},
    [27] = {"i64", 0, 0, false},
    [28] = {"f64", 0, 0, false},
    [29] = {"iq1_m", 0, 0, false},
    [QUANT_BF16] = {"bf16", 1, 2, true},
    [34] = {"tq1_0", 0, 0, false},
    [35] = {"tq2_0", 0, 0, false},
    [39] = {"mxfp4", 0, 0, false},
};

#define N_TYPES (sizeof(TYPES) / sizeof(TYPES[0]))

static const type_info *info(quant_type t)
{
    if ((unsigned)t >= N_TYPES || !TYPES[t].name)
        return NULL;
    return &TYPES[t];
}

const char *quant_type_name(quant_type t)
{
    const type_info *ti = info(t);
    return ti ? ti->name : NULL;
}

bool quant_type_supported(quant_type t)
{
    const type_info *ti = info(t);
    return ti && ti->supported;
}

size_t quant_block_elems(quant_type t)
{
    const type_info *ti = info(t);
    return ti ? ti->block_elems : 0;
}

size_t quant_block_bytes(quant_type t)
{
    const type_info *ti = info(t);
    return ti ? ti->block_bytes : 0;
}

int quant_row_bytes(quant_type t, uint64_t n, uint64_t *bytes, llmq_err *err)
{
    const type_info *ti = info(t);
    if (!ti)
        return llmq_errf(err, "tensor type %u is unknown", (unsigned)t);
    if (!ti->supported)
        return llmq_errf(err,
                         "tensor type %s is not supported (supported: f32, f16, bf16, q8_0, "
                         "q4_K, q5_K, q6_K)",
                         ti->name);
    if (n % ti->block_elems)
        return llmq_errf(err, "a %s row of %" PRIu64 " elements is not a whole number of %u-element blocks",
                         ti->name, n, (unsigned)ti->block_elems);
    uint64_t blocks = n / ti->block_elems;
    if (blocks > UINT64_MAX / ti->block_bytes)
        return llmq_errf(err, "a %s row of %" PRIu64 " elements overflows 64-bit sizes", ti->name, n);
    *bytes = blocks * ti->block_bytes;
    return 0;
}

/* ---- scalar conversions ---- */

quant_f16 quant_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet it, keep the sign and top payload bits */
        return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x03ffu);
    if (ax >= 0x477ff000u) /* >= 65520, halfway above the largest half: rounds to inf */
        return sign | 0x7c00u;
    if (ax >= 0x38800000u) { /* normal half (>= 2^-14) */
        ax += 0x0fffu + ((ax >> 13) & 1u); /* round to nearest, ties to even */
        return sign | (uint16_t)((ax - ((127u - 15u) << 23)) >> 13);
    }
    if (ax <= 0x33000000u) /* <= 2^-25: zero (2^-25 itself is a tie to even 0) */
        return sign;
    /* Subnormal half: round m * 2^(e-150) to a multiple of 2^-24. */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x007fffffu) | 0x00800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return sign | (uint16_t)q;
}

void quant_get_scale_min_k4(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
        *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

void quant_pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[K_SCALE_SIZE])
{
    /* Bytes 0-3 and 4-7 hold scales and mins 0-3 in their low 6 bits and the
     * top 2 bits of scales and mins 4-7 above them; bytes 8-11 hold the low
     * nibbles of scale and min 4-7. */
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
}

/* ---- row dequantizers ---- */

static void dequant_f32(const float *restrict x, float *restrict y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof *y);
}

/* 16-bit float rows go in fixed chunks of 32: at -O2 GCC only vectorizes
 * loops whose trip count needs no epilogue.  Inlined with a constant cvt. */
static inline void dequant_16bit(const uint16_t *restrict x, float *restrict y, int64_t n,
                                 float (*cvt)(uint16_t))
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 32; k++)
            y[i + k] = cvt(x[i + k]);
    for (; i < n; i++)
        y[i] = cvt(x[i]);
}

static void dequant_q8_0(const block_q8_0 *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

/* Scales and mins of sub-blocks 2j and 2j+1 of a q4_K/q5_K block, which
 * share 32 bytes of quants (low and high nibbles). */
static inline void k4_pair(const uint8_t *scales, float d, float min, int j, float *d1, float *m1,
                           float *d2, float *m2)
{
    uint8_t sc, m;
    quant_get_scale_min_k4(2 * j, scales, &sc, &m);
    *d1 = d * sc;
    *m1 = min * m;
    quant_get_scale_min_k4(2 * j + 1, scales, &sc, &m);
    *d2 = d * sc;
    *m2 = min * m;
}

static void dequant_q4_K(const block_q4_K *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = quant_f16_to_f32(x[i].d);
        const float min = quant_f16_to_f32(x[i].dmin);
        for (int j = 0; j < QK_K / 64; j++) {
            float d1, m1, d2, m2;
            k4_pair(x[i].scales, d, min, j, &d1, &m1, &d2, &m2);
            for (int l = 0; l < 32; l++)
                y[l] = d1 * (q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                y[32 + l] = d2 * (q[l] >> 4) - m2;
            q += 32;
            y += 64;
        }
    }
}

static void dequant_q5_K(const block_q5_K *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = quant_f16_to_f32(x[i].d);
        const float min = quant_f16_to_f32(x[i].dmin);
        /* Sub-block 2j takes its fifth bit from bit 2j of qh, 2j+1 from bit 2j+1. */
        for (int j = 0; j < QK_K / 64; j++) {
            float d1, m1, d2, m2;
            k4_pair(x[i].scales, d, min, j, &d1, &m1, &d2, &m2);
            const uint8_t u1 = (uint8_t)(1u << (2 * j)), u2 = (uint8_t)(2u << (2 * j));
            for (int l = 0; l < 32; l++)
                y[l] = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                y[32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            y += 64;
        }
    }
}

static void dequant_q6_K(const block_q6_K *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        /* Each half of 128 weights: ql[0..63] holds the low nibbles of four
         * 32-weight quarters (low/high nibble of the first/second 32 bytes),
         * qh[0..31] their high two bits at shifts 0, 2, 4, 6. */
        for (int h = 0; h < QK_K / 128; h++) {
            /* ggml evaluates d * sc[is] * q as (d * sc[is]) * q: hoisting the
             * first product out of the loop is the same arithmetic. */
            float ds[8];
            for (int k = 0; k < 8; k++)
                ds[k] = d * sc[k];
            for (int is = 0; is < 2; is++) { /* scale index l / 16, hoisted */
                for (int l = 16 * is; l < 16 * is + 16; l++) {
                    const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = ds[is + 0] * q1;
                    y[l + 32] = ds[is + 2] * q2;
                    y[l + 64] = ds[is + 4] * q3;
                    y[l + 96] = ds[is + 6] * q4;
                }
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void quant_dequantize_row(quant_type t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case QUANT_F32: dequant_f32(src, dst, n); return;
    case QUANT_F16: dequant_16bit(src, dst, n, quant_f16_to_f32); return;
    case QUANT_BF16: dequant_16bit(src, dst, n, quant_bf16_to_f32); return;
    case QUANT_Q8_0: dequant_q8_0(src, dst, n); return;
    case QUANT_Q4_K: dequant_q4_K(src, dst, n); return;
    case QUANT_Q5_K: dequant_q5_K(src, dst, n); return;
    case QUANT_Q6_K: dequant_q6_K(src, dst, n); return;
    default:
        /* Contract violation (callers check quant_type_supported): make it
         * visible in the numbers rather than reading src with a wrong layout. */
        for (int64_t i = 0; i < n; i++)
            dst[i] = NAN;
        return;
    }
}

/* ---- quantizers ---- */

/* ggml's quantize_row_q8_0_ref for one block. */
static void quantize_block_q8_0(const float *restrict x, block_q8_0 *restrict y)
{
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) {
        const float v = fabsf(x[j]);
        amax = amax > v ? amax : v;
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y->d = quant_f32_to_f16(d);
    for (int j = 0; j < QK8_0; j++) {
        const float r = roundf(x[j] * id);
        /* Finite input always gives |r| <= 127; the clamp only keeps
         * NaN/inf input from being an undefined conversion. */
        y->qs[j] = (int8_t)(r >= -127.0f && r <= 127.0f ? r : r > 0 ? 127 : r < 0 ? -127 : 0);
    }
}

void quant_quantize_row_q8_0(const float *restrict x, block_q8_0 *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++)
        quantize_block_q8_0(x + i * QK8_0, y + i);
}

void quant_quantize_kv_q8_0(const float *restrict x, block_q8_0 *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++) {
        quantize_block_q8_0(x + i * QK8_0, y + i);
        bool finite = true;
        for (int j = 0; j < QK8_0; j++)
            finite = finite && isfinite(x[i * QK8_0 + j]);
        if (!finite)
            y[i].d = quant_f32_to_f16(NAN);
    }
}
