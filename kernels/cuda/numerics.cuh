/* numerics: the one definition of what a CUDA matmul computes, so that a
 * row's result is the same bits whatever kernel, tile shape, split or batch
 * computes it (the batch-invariance rule of kernels/backend.h; the design
 * and its measurements: docs/perf/05).
 *
 * out[r][n] = y, or out[r][n] + y when accumulating, where
 *   y   = p_0 + p_1 + ... + p_{C-1}   (f32, added in chunk order to +0:
 *                                      y = 0, then y += p_c)
 *   p_c = the chunk's k16 steps chained through the f16 tensor cores in
 *         step order, from +0: acc = mma(a_step, w_step, acc) (f32 accumulate)
 * over chunks of MM_CHUNK values of k (C = ceil(k / MM_CHUNK)), each step one
 * fixed set of 16 k (below), a the activation rounded to f16 (to nearest)
 * and w the weight's f16 value as the dequant functions below define it.
 *
 * What the hardware guarantees, measured (tests/gpu/gpu-mma-numerics, r11):
 * a k16 step's result for one output depends only on that output's 16
 * (a, w) pairs and its accumulator: not on their order within the step, the
 * other rows or columns of the tile, which operand is A, or whether the
 * instruction is mma.sync or wgmma.  So a kernel may tile, place operands
 * and order k within a step as it likes; what it may not change is which 16
 * k form a step, the order of the steps, the chunk boundaries and the fold.
 * The chunks exist for decode: one chain per output over all of k would be
 * 256-688 dependent steps, longer than reading the weights takes; chunks let
 * a 1-row matmul run its chains side by side (kernels/cuda/mmv.cu) and cost
 * the GEMM one more accumulator (kernels/cuda/gemm.cu).
 *
 * Step sets: in each 64-value group of k (a k-quant quarter super-block, two
 * q8_0 blocks), k = 32h + 8c + 4t + i (h, t in 0..1; c, i in 0..3) belongs
 * to step 2h + t of the group.  They are what a thread holding the 8 quant
 * bytes at 8c of a 32-byte half sees: its words t = 0, 1, each word's low
 * nibbles (h = 0) or high nibbles (h = 1).  The f16 activation copy is kept
 * in step order (act_step_pos), so that both kernels read a step's 16 values
 * as one contiguous run.  Within a run of 4 (one thread's share of a step)
 * the values are stored i = 0, 2, 1, 3: the pairs the byte-to-half2 trick
 * below yields, so a thread's two B-fragment words are two plain loads. */
#ifndef LLMQ_KERNELS_CUDA_NUMERICS_CUH
#define LLMQ_KERNELS_CUDA_NUMERICS_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

/* Values of k per chunk: 16 k tiles of 64, 64 k16 steps. */
#define MM_CHUNK 1024
#define MM_GROUP 64

static __host__ __device__ __forceinline__ int64_t mm_chunks(int64_t k)
{
    return (k + MM_CHUNK - 1) / MM_CHUNK;
}

/* Where value k (0..63) of a 64-value group sits in the step-ordered copy. */
static __host__ __device__ __forceinline__ int act_step_pos(int k)
{
    const int h = k >> 5, c = (k >> 3) & 3, t = (k >> 2) & 1, i = k & 3;
    return 16 * (2 * h + t) + 4 * c + ((i & 1) << 1 | i >> 1);
}

/* ---- bytes to f16: the exact part ---- */

/* The 4 bytes of w as halves (b0, b2) and (b1, b3), minus `bias`: each byte
 * lands in the mantissa of 1024.0 (0x6400, whose ulp is 1), so x = 1024 + b
 * exactly, and x - bias is exact for the biases used (1024 + offset).  One
 * byte permute a pair puts the bytes under the exponent bytes 0x64, where
 * masks and ors took two or three instructions (the compiler kept the or's
 * constant as an immediate: docs/perf/10). */
static __device__ __forceinline__ void bytes_to_half2(uint32_t w, __half2 bias, __half2 *even,
                                                      __half2 *odd)
{
    const uint32_t e = __byte_perm(w, 0x64646464u, 0x4240), o = __byte_perm(w, 0x64646464u, 0x4341);
    *even = __hsub2(*(const __half2 *)&e, bias);
    *odd = __hsub2(*(const __half2 *)&o, bias);
}

static __device__ __forceinline__ __half2 half2_of(float v)
{
    return __float2half2_rn(v);
}

/* A non-negative integer below 1024 as an exact half, by the same trick
 * (an integer conversion instruction runs at a quarter of the rate). */
static __device__ __forceinline__ __half small_int_half(int v)
{
    return __hsub(__ushort_as_half((unsigned short)(0x6400 | v)), __ushort_as_half(0x6400));
}

/* ---- the weights' f16 values, per type ---- */

/* q4_K / q5_K sub-block j (0..7): scale d * sc and negated min
 * -(dmin * m), each one f16 product of the block's f16 d / dmin and the
 * 6-bit integers (k4_scale_min), broadcast to both halves. */
struct k4_sub {
    __half2 scale, negmin;
};

static __device__ __forceinline__ k4_sub k4_sub_at(const uint4 &hdr, int j)
{
    int sc, m;
    k4_scale_min(j, hdr.y, hdr.z, hdr.w, &sc, &m);
    const __half d = __ushort_as_half((unsigned short)(hdr.x & 0xffffu));
    const __half dmin = __ushort_as_half((unsigned short)(hdr.x >> 16));
    return {__half2half2(__hmul_rn(d, small_int_half(sc))),
            __half2half2(__hneg(__hmul_rn(dmin, small_int_half(m))))};
}

/* A k-quant value pair q (0..63 as halves) with its sub-block's terms. */
static __device__ __forceinline__ __half2 k4_value(__half2 q, const k4_sub &s)
{
    return __hfma2(q, s.scale, s.negmin);
}

/* q6_K: scale d * sc (f16 product, sc the block's int8 for 16 values) and
 * value (q - 32) * scale. */
static __device__ __forceinline__ __half2 q6_scale(__half d, int8_t sc)
{
    const __half s = __hsub(small_int_half((int)sc + 128), __ushort_as_half(0x5800)); /* 128 */
    return __half2half2(__hmul_rn(d, s));
}

static __device__ __forceinline__ __half2 q6_value(__half2 q_minus_32, __half2 scale)
{
    return __hmul2_rn(q_minus_32, scale);
}

/* q8_0: value q * d. */
static __device__ __forceinline__ __half2 q8_value(__half2 q, __half2 d)
{
    return __hmul2_rn(q, d);
}

/* Bias for bytes_to_half2 per type: k-quant values 0..63, q6_K centred on
 * 32, q8_0's int8 xored with 0x80 (so 0..255 is q + 128). */
#define MM_BIAS_UNSIGNED 1024.0f
#define MM_BIAS_Q6 1056.0f
#define MM_BIAS_Q8 1152.0f

/* The 4 values of one word of a k-quant nibble plane for step half h (0:
 * low nibbles, 1: high), plus their fifth/sixth bits already shifted to bit
 * 4 of each byte (`high`, 0 for q4_K): bytes 0..63 for bytes_to_half2. */
static __device__ __forceinline__ uint32_t kq_bytes(uint32_t nibbles, int h, uint32_t high)
{
    return ((h ? nibbles >> 4 : nibbles) & 0x0f0f0f0fu) | high;
}

#endif
