/* dequant: the GEMMs' weight tasks, fetched from the device layouts into
 * registers one k tile ahead and dequantized into a shared-memory tile row
 * (gemm.cu's mma.sync kernel and gemm_sm90.cu's wgmma kernel share them, so
 * both write numerics.cuh's f16 values at numerics.cuh's positions).
 *
 * A task (row n, half h of k tile kt) is 32 weights: for k-quants the 16
 * quant bytes at 16h of the tile's 32-byte group (both nibbles, blocks.cuh's
 * chunk (kt % 4, h) of super-block kt / 4), for q8_0 block 2kt + h, for
 * floats k = 64kt + 32h + [0, 32).  Whatever the type, the task's values land
 * in four 16-byte units of the row (positions 8u..8u+7, u = 0..7 over the
 * tile's 64 step-ordered columns); where a unit sits in shared memory is the
 * tile's business (tile_row). */
#ifndef LLMQ_KERNELS_CUDA_DEQUANT_CUH
#define LLMQ_KERNELS_CUDA_DEQUANT_CUH

#include "kernels/cuda/blocks.cuh"
#include "kernels/cuda/numerics.cuh"

static_assert(GEMM_BK * 4 == QK_K && GEMM_BK == 2 * QK8_0,
              "a k tile is a quarter of a k-quant super-block, two q8_0 blocks (fetch, dequant)");
#define GEMM_CHUNK_KT (MM_CHUNK / GEMM_BK) /* k tiles per chunk */

/* One tile row in shared memory: unit u (columns 8u..8u+7) is stored at
 * p + 8 * (u ^ swz).  gemm.cu's padded rows keep units in order (swz 0);
 * gemm_sm90.cu's 128-byte-swizzled rows xor them with the row's index mod
 * 8, the layout wgmma's descriptors read. */
struct tile_row {
    __half *p;
    int swz;
};

static __device__ __forceinline__ __half *tile_row_at(tile_row row, int pos)
{
    return row.p + 8 * ((pos >> 3) ^ row.swz);
}

/* What a thread holds of one (row, half) task for the next k tile: for a
 * k-quant, chunk (kt % 4, h) of super-block kt / 4 (blocks.cuh). */
/* Tables of one-line structs, laid out by hand: */
/* clang-format off */
struct frag_q8 { uint4 q0, q1; float d; };
struct frag_raw { uint4 v[8]; }; /* f16: 4 used, f32: 8 */

template <int T> struct frag_of : kquant_chunk<T> {};
template <> struct frag_of<QUANT_Q8_0> { typedef frag_q8 type; };
template <> struct frag_of<QUANT_F16> { typedef frag_raw type; };
template <> struct frag_of<QUANT_F32> { typedef frag_raw type; };
/* clang-format on */

static __device__ __forceinline__ void fetch_q8(const be_weight &w, int64_t n, int kt, int h,
                                                frag_q8 *f)
{
    const int64_t blk = 2 * (int64_t)kt + h;
    if (blk >= w.nb) {
        f->q0 = f->q1 = make_uint4(0, 0, 0, 0);
        f->d = 0.0f;
        return;
    }
    const uint4 *p = (const uint4 *)(w.q + (n * w.nb + blk) * 32);
    f->q0 = __ldg(p);
    f->q1 = __ldg(p + 1);
    f->d = __half2float(w.d[n * w.nb + blk]);
}

template <int T>
static __device__ __forceinline__ void fetch_raw(const be_weight &w, int64_t n, int kt, int h,
                                                 frag_raw *f)
{
    constexpr int ES = T == QUANT_F16 ? 2 : 4, NV = 32 * ES / 16; /* uint4 per task */
    const int64_t k0 = (int64_t)kt * GEMM_BK + 32 * h;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int64_t k = k0 + i * (16 / ES);
        f->v[i] = k < w.cols ? __ldg((const uint4 *)(w.q + (n * w.cols + k) * ES))
                             : make_uint4(0, 0, 0, 0);
    }
}

/* The weight tile row holds the task's values at their step-ordered
 * positions (numerics.cuh), so that its columns pair with the activation
 * tile's: a k-quant task (16 quant bytes at 16h of the 32-byte group, words
 * w[2c' + t] = bytes 8c' + 4t of the half) fills positions
 * 32hf + 16t + 8h + [0, 8) for nibble half hf and word t: two words, each as
 * (i0, i2), (i1, i3).  Every store is one whole 16-byte unit of the row
 * (positions 8u..8u+7), which the tile's layout places (tile_row). */
static __device__ __forceinline__ void store_pairs(tile_row row, int pos, __half2 e0, __half2 o0,
                                                   __half2 e1, __half2 o1)
{
    uint4 u;
    u.x = *(const uint32_t *)&e0;
    u.y = *(const uint32_t *)&o0;
    u.z = *(const uint32_t *)&e1;
    u.w = *(const uint32_t *)&o1;
    *(uint4 *)tile_row_at(row, pos) = u;
}

/* value(word bytes, hf, t) -> the word's (even, odd) f16 pairs. */
template <typename F>
static __device__ __forceinline__ void store_kquant_task(const uint4 &qs, int h, tile_row row,
                                                         F value)
{
    const uint32_t w[4] = {qs.x, qs.y, qs.z, qs.w};
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
#pragma unroll
        for (int t = 0; t < 2; t++) {
            __half2 e0, o0, e1, o1;
            value(w[t], hf, t, 0, &e0, &o0);
            value(w[2 + t], hf, t, 1, &e1, &o1);
            store_pairs(row, 32 * hf + 16 * t + 8 * h, e0, o0, e1, o1);
        }
}

/* A q4_K/q5_K task: sub-blocks 2j (low nibbles) and 2j + 1 (high), with
 * fifth(word, hf, t, c') the fifth bits at bit 4 of each byte (0 for q4_K). */
template <typename F>
static __device__ __forceinline__ void dequant_k4(const uint4 &hdr, const uint4 &qs, int kt, int h,
                                                  tile_row row, F fifth)
{
    const k4_sub sub[2] = {k4_sub_at(hdr, 2 * (kt % 4)), k4_sub_at(hdr, 2 * (kt % 4) + 1)};
    store_kquant_task(qs, h, row, [&](uint32_t w, int hf, int t, int c, __half2 *e, __half2 *o) {
        bytes_to_half2(kq_bytes(w, hf, fifth(hf, t, c)), half2_of(MM_BIAS_UNSIGNED), e, o);
        *e = k4_value(*e, sub[hf]);
        *o = k4_value(*o, sub[hf]);
    });
}

static __device__ __forceinline__ void dequant(const chunk_q4k &f, int kt, int h, tile_row row)
{
    dequant_k4(f.hdr, f.qs, kt, h, row, [](int, int, int) { return 0u; });
}

/* q5_K: the fifth bits of the task's bytes are the qh bytes at the same
 * offset within the 32-byte group, bit 2j + hf. */
static __device__ __forceinline__ void dequant(const chunk_q5k &f, int kt, int h, tile_row row)
{
    const uint32_t qh[4] = {f.qh.x, f.qh.y, f.qh.z, f.qh.w};
    const int bit = 2 * (kt % 4);
    dequant_k4(f.hdr, f.qs, kt, h, row, [&](int hf, int t, int c) {
        return ((qh[2 * c + t] >> (bit + hf)) & 0x01010101u) << 4;
    });
}

/* q6_K: the high bits of byte 8c' + 4t + i (k = 8c' + 4t + i of the chunk)
 * are bits 2(2c' + t) of qh byte 4hf + i; scale 4j + 2hf + h of the block. */
static __device__ __forceinline__ void dequant(const chunk_q6k &f, int, int h, tile_row row)
{
    const uint32_t qh[2] = {f.qh.x, f.qh.y};
    const __half d = __float2half_rn(f.d);
    const __half2 scale[2] = {q6_scale(d, (int8_t)(f.sc >> (8 * h))),
                              q6_scale(d, (int8_t)(f.sc >> (16 + 8 * h)))};
    store_kquant_task(f.ql, h, row, [&](uint32_t w, int hf, int t, int c, __half2 *e, __half2 *o) {
        const uint32_t high = ((qh[hf] >> (2 * (2 * c + t))) & 0x03030303u) << 4;
        bytes_to_half2(kq_bytes(w, hf, high), half2_of(MM_BIAS_Q6), e, o);
        *e = q6_value(*e, scale[hf]);
        *o = q6_value(*o, scale[hf]);
    });
}

/* A task of 32 values in block order (q8_0 and the floats): with c the
 * 8-value word group (k = 32h + 8c + 4t + i) and t its half, pair(c, t)
 * gives the (i0, i2), (i1, i3) pairs, and unit 32h + 16t + 8c2 of the row
 * holds those of groups 2c2 and 2c2 + 1: k = 32h + 8c + 4t + i at positions
 * 32h + 16t + 4c + [0, 4). */
template <typename F>
static __device__ __forceinline__ void store_block_task(tile_row row, int h, F pair)
{
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
        for (int c2 = 0; c2 < 2; c2++) {
            __half2 p[4];
#pragma unroll
            for (int u = 0; u < 2; u++)
                pair(2 * c2 + u, t, &p[2 * u], &p[2 * u + 1]);
            store_pairs(row, 32 * h + 16 * t + 8 * c2, p[0], p[1], p[2], p[3]);
        }
}

/* q8_0: the task is block 2kt + h; group c, half t is word 2c + t of its 32
 * bytes. */
static __device__ __forceinline__ void dequant(const frag_q8 &f, int, int h, tile_row row)
{
    const uint32_t w[8] = {f.q0.x, f.q0.y, f.q0.z, f.q0.w, f.q1.x, f.q1.y, f.q1.z, f.q1.w};
    const __half2 d = __half2half2(__float2half_rn(f.d));
    store_block_task(row, h, [&](int c, int t, __half2 *e, __half2 *o) {
        bytes_to_half2(w[2 * c + t] ^ 0x80808080u, half2_of(MM_BIAS_Q8), e, o);
        *e = q8_value(*e, d);
        *o = q8_value(*o, d);
    });
}

/* f16 / f32: the task is k = 32h + [0, 32) in natural order (v[c] the 8
 * values 8c..8c+7 as f16 words); the same positions as q8_0. */
static __device__ __forceinline__ void pair_halves(uint32_t w01, uint32_t w23, __half2 *e,
                                                   __half2 *o)
{
    const uint32_t even = __byte_perm(w01, w23, 0x5410), odd = __byte_perm(w01, w23, 0x7632);
    *e = *(const __half2 *)&even;
    *o = *(const __half2 *)&odd;
}

template <int T>
static __device__ __forceinline__ void dequant_raw(const frag_raw &f, int h, tile_row row)
{
    uint32_t v[4][4]; /* v[c][j]: f16 pairs (8c + 2j, 8c + 2j + 1) */
#pragma unroll
    for (int c = 0; c < 4; c++) {
        if constexpr (T == QUANT_F16) {
            const uint4 u = f.v[c];
            v[c][0] = u.x, v[c][1] = u.y, v[c][2] = u.z, v[c][3] = u.w;
        } else {
            const uint4 a = f.v[2 * c], b = f.v[2 * c + 1];
            const float x[8] = {__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z),
                                __uint_as_float(a.w), __uint_as_float(b.x), __uint_as_float(b.y),
                                __uint_as_float(b.z), __uint_as_float(b.w)};
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[c][j] = pack_half2(x[2 * j], x[2 * j + 1]);
        }
    }
    store_block_task(row, h, [&](int c, int t, __half2 *e, __half2 *o) {
        pair_halves(v[c][2 * t], v[c][2 * t + 1], e, o);
    });
}

template <int T>
static __device__ __forceinline__ void fetch_any(const be_weight &w, int64_t n, int kt, int h,
                                                 typename frag_of<T>::type *f)
{
    if constexpr (T == QUANT_F16 || T == QUANT_F32)
        fetch_raw<T>(w, n, kt, h, f);
    else if constexpr (T == QUANT_Q8_0)
        fetch_q8(w, n, kt, h, f);
    else
        load_chunk(w, n, kt / 4, kt % 4, h, f);
}

template <int T>
static __device__ __forceinline__ void dequant_any(const typename frag_of<T>::type &f, int kt,
                                                   int h, tile_row row)
{
    if constexpr (T == QUANT_F16 || T == QUANT_F32)
        dequant_raw<T>(f, h, row);
    else
        dequant(f, kt, h, row);
}

#endif
