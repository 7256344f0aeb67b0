/* quant: the tensor element types of GGUF files and their block layouts.
 *
 * Layouts are byte-for-byte those of llama.cpp's ggml (QK_K = 256): a row of
 * n elements is n / block_elems blocks of block_bytes each, no padding.
 * Dequantization reproduces ggml's reference definition bit for bit (same
 * operations in the same order, f32 arithmetic).  The CPU engine's matmuls and
 * the CUDA kernels both read these structs; llmq-mkmodel writes them. */
#ifndef LLMQ_KERNELS_QUANT_H
#define LLMQ_KERNELS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"

/* ggml's type ids, as stored in GGUF tensor infos. */
typedef enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_BF16 = 30,
    QUANT_TYPE_LIMIT = 64, /* ids at or above this are never valid */
} quant_type;

#define QK_K 256
#define QK8_0 32
#define K_SCALE_SIZE 12

typedef uint16_t quant_f16;  /* IEEE half, stored as bits */
typedef uint16_t quant_bf16; /* bfloat16, stored as bits */

typedef struct {
    quant_f16 d;
    int8_t qs[QK8_0];
} block_q8_0; /* 34 bytes */

typedef struct {
    quant_f16 d;    /* super-block scale for the quantized scales */
    quant_f16 dmin; /* super-block scale for the quantized mins */
    uint8_t scales[K_SCALE_SIZE]; /* 8 scales and 8 mins, 6 bits each */
    uint8_t qs[QK_K / 2];         /* 4-bit quants */
} block_q4_K; /* 144 bytes */

typedef struct {
    quant_f16 d;
    quant_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8]; /* high bit of each quant */
    uint8_t qs[QK_K / 2]; /* low 4 bits */
} block_q5_K; /* 176 bytes */

typedef struct {
    uint8_t ql[QK_K / 2];     /* low 4 bits */
    uint8_t qh[QK_K / 4];     /* high 2 bits */
    int8_t scales[QK_K / 16]; /* 16 scales, 8 bits */
    quant_f16 d;
} block_q6_K; /* 210 bytes */

_Static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K layout");

/* Name as ggml prints it ("q4_K"), or NULL for an id ggml does not define. */
const char *quant_type_name(quant_type t);

/* True when llmq can dequantize and compute with the type. */
bool quant_type_supported(quant_type t);

/* Elements per block (1 for float types) and bytes per block; 0 if unknown. */
size_t quant_block_elems(quant_type t);
size_t quant_block_bytes(quant_type t);

/* Bytes of a row of n elements.  Fails (naming the type) if the type is not
 * supported or n is not a multiple of its block size. */
int quant_row_bytes(quant_type t, uint64_t n, uint64_t *bytes, llmq_err *err);

/* Dequantize one row of n elements (n a multiple of the block size). */
void quant_dequantize_row(quant_type t, const void *src, float *dst, int64_t n);

/* Quantize one row of n (a multiple of 32) finite floats to q8_0 as ggml's
 * reference quantizer does: per block d = amax / 127, q = roundf(x / d). */
void quant_quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n);
/* The same for a KV cache row, except that a block holding a NaN or an
 * infinity gets a NaN scale: its values read back as NaN, as an f16 cache
 * keeps them, so that the NaN checks downstream still see a bad row. */
void quant_quantize_kv_q8_0(const float *x, block_q8_0 *y, int64_t n);

/* Scalar conversions, exact as ggml's (round to nearest even, NaN kept).
 * The decoders are inline and branch-free so that callers' loops over
 * weights vectorize. */
quant_f16 quant_f32_to_f16(float f);

static inline float quant_f16_to_f32(quant_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu; /* exponent and mantissa */
    float sub = (float)(int32_t)em * 0x1p-24f; /* subnormals and zero: em * 2^-24, exact */
    uint32_t small;
    memcpy(&small, &sub, sizeof small);
    uint32_t normal = (em << 13) + ((127u - 15u) << 23);
    uint32_t infnan = (em << 13) | 0x7f800000u;
    uint32_t is_small = 0u - (uint32_t)(em < 0x0400u);
    uint32_t is_infnan = 0u - (uint32_t)(em >= 0x7c00u);
    uint32_t bits = sign | (small & is_small) | (infnan & is_infnan) |
                    (normal & ~(is_small | is_infnan));
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float quant_bf16_to_f32(quant_bf16 h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Unpack the j-th (0..7) 6-bit scale and min of a q4_K/q5_K super-block. */
void quant_get_scale_min_k4(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);
/* The inverse: pack 8 scales and 8 mins (each 0..63) into the 12 bytes. */
void quant_pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[K_SCALE_SIZE]);

#endif
