/* blocks: a 16-byte chunk of a k-quant weight row as the GEMM reads it from
 * the device layouts (cuda_internal.h).
 *
 * Chunk (j, h) of super-block sb (j 0..3, h 0..1) is 16 bytes of the main
 * plane, chunk 2j + h of the block: the nibbles of values 64j + 16h +
 * [0,16) (low, sub-block 2j) and the same + 32 (high, sub-block 2j + 1).
 * A chunk struct is what one thread needs to turn those 32 values into
 * numbers: the block's header (d, dmin, the packed scales and mins) and the
 * nibbles; for q5_K the fifth bits of the same values, for q6_K its
 * repacked high bits, the four scales of the values and d.  The GEMM's k
 * tile kt is j = kt % 4 of super-block kt / 4 (both halves).  mmv (decode)
 * reads the same bytes in 8-byte pieces per lane, the shape its B fragments
 * need (numerics.cuh says which values form a step); q8_0 and float rows
 * are read by the GEMM itself. */
#ifndef LLMQ_KERNELS_CUDA_BLOCKS_CUH
#define LLMQ_KERNELS_CUDA_BLOCKS_CUH

#include <stddef.h>

#include "kernels/cuda/cuda_internal.h"

/* Tables of one-line structs, laid out by hand: */
/* clang-format off */
struct chunk_q4k { uint4 hdr, qs; };
struct chunk_q5k { uint4 hdr, qh, qs; };
struct chunk_q6k { uint4 ql; uint2 qh; uint32_t sc; float d; };

/* The chunk struct of a k-quant type. */
template <int T> struct kquant_chunk;
template <> struct kquant_chunk<QUANT_Q4_K> { typedef chunk_q4k type; };
template <> struct kquant_chunk<QUANT_Q5_K> { typedef chunk_q5k type; };
template <> struct kquant_chunk<QUANT_Q6_K> { typedef chunk_q6k type; };
/* clang-format on */

static __device__ __forceinline__ void load_chunk(const be_weight &w, int64_t row, int sb, int j,
                                                  int h, chunk_q4k *f)
{
    const uint8_t *blk = w.q + (row * w.nb + sb) * sizeof(block_q4_K);
    f->hdr = __ldg((const uint4 *)blk);
    f->qs = __ldg((const uint4 *)(blk + offsetof(block_q4_K, qs) + 16 * (2 * j + h)));
}

/* q5_K: the fifth bits of the chunk's 16 quant bytes are the 16 qh bytes at
 * the same offset within their 32-byte group. */
static __device__ __forceinline__ void load_chunk(const be_weight &w, int64_t row, int sb, int j,
                                                  int h, chunk_q5k *f)
{
    const uint8_t *blk = w.q + (row * w.nb + sb) * sizeof(block_q5_K);
    f->hdr = __ldg((const uint4 *)blk);
    f->qh = __ldg((const uint4 *)(blk + offsetof(block_q5_K, qh) + 16 * h));
    f->qs = __ldg((const uint4 *)(blk + offsetof(block_q5_K, qs) + 16 * (2 * j + h)));
}

static __device__ __forceinline__ void load_chunk(const be_weight &w, int64_t row, int sb, int j,
                                                  int h, chunk_q6k *f)
{
    const int64_t b = row * w.nb + sb;
    const int c = 2 * j + h;
    f->ql = __ldg((const uint4 *)(w.q + b * 128 + 16 * c));
    f->qh = __ldg((const uint2 *)(w.qh + b * 64 + 8 * c));
    f->sc = __ldg((const uint32_t *)(w.sc + b * 16 + 4 * j));
    f->d = __half2float(w.d[b]);
}

#endif
