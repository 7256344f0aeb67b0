/* mmv: the decode matmul, out (R x n) (+)= act (R x k) . W^T for R up to
 * MMV_MAX_ROWS, on the tensor cores, computing exactly what numerics.cuh
 * defines and gemm.cu computes for any R: a row gets the same bits alone or
 * in a batch of 512.
 *
 * Layout invariants.  Two layouts (mmv_layout), by the number of
 * activation rows m.  m <= 8: the weights are the mma's A operand, 16
 * weight rows a warp (lane g holds rows g and g + 8), the activation rows
 * the 8 columns of B (at m = 1 one column is real); a step decodes the
 * lane's 8 values straight into its A registers and loads its B fragment
 * with one 8-byte load.  9..16 rows: the activations are A (rows g, g + 8),
 * 8 weight rows a warp as B.  A CTA takes one tile of weight rows; its warp
 * w takes chunks w, w + WARPS, ... of k (MM_CHUNK values: 4 blocks of 256,
 * 16 k tiles, 64 steps), and the chunk partials meet in shared memory and
 * are added in chunk order.  Lane (g = lane / 4, c = lane % 4) holds, per
 * 64-value tile of k, the 8 quant bytes at 8c of each 32-byte half of its
 * weight rows: its share of the tile's four steps (numerics.cuh), one
 * 32-byte sector per row and quad.  A warp's chunk of weight bytes is
 * staged in shared memory, every block of it requested at once (below,
 * "the weights' bytes, staged"); the activation fragments are 8-byte loads
 * from the step-ordered f16 copy at constant offsets from a pointer per
 * row.
 *
 * Groups: weights that read the same activations (q, k, v; gate, up) run
 * as one launch, their 8-row tiles end to end.
 *
 * Shared memory: the chunk partials, chunks x 128 floats (16 x 8 or 8 x 16
 * weight x activation rows), then each warp's staging region (9.5 KB a
 * warp for 16 rows of q4_K, 12.5 KB for q6_K: 38 KB a CTA at k = 4096,
 * 104 KB at 11008).
 *
 * Roofline (batch 1, 7B q4_K): 4096 x 4096 reads 9.4 MB, 2.2 us at the
 * 4.24 TB/s copy bandwidth; 11008 x 4096 reads 25.4 MB, 6.0 us.  A chunk's
 * chain is 64 dependent mma, ~1 us.  Instructions per step and lane (m <= 8,
 * q4_K, SASS in docs/perf/06): ~8 to turn 8 quant values into f16
 * (bytes_to_half2 and one hfma2 a pair, two rows), one load, one mma; the
 * block's scales ~40 for two rows, decoded four sub-blocks a word. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/numerics.cuh"

#include <algorithm>

static_assert(MMV_MAX_ROWS == 16, "mmv computes one m16 tile of activation rows");

#define MMV_WARPS 16 /* at most; a CTA has min(chunks, MMV_WARPS) warps */

/* What a lane reads of one block (256 values of k) of its weight row. */
struct mmv_q4k {
    uint4 hdr;
    uint2 qs[4];
};
struct mmv_q5k {
    uint4 hdr;
    uint2 qh, qs[4];
};
struct mmv_q6k {
    uint2 ql[4], qh[4];
    uint4 sc;
    __half d;
};
struct mmv_q8 {
    uint2 q[8];
    __half d[8];
};

template <int T>
struct mmv_raw;
template <>
struct mmv_raw<QUANT_Q4_K> {
    typedef mmv_q4k type;
};
template <>
struct mmv_raw<QUANT_Q5_K> {
    typedef mmv_q5k type;
};
template <>
struct mmv_raw<QUANT_Q6_K> {
    typedef mmv_q6k type;
};
template <>
struct mmv_raw<QUANT_Q8_0> {
    typedef mmv_q8 type;
};

/* ---- the weights' bytes, staged in shared memory ----
 *
 * A warp copies the bytes of its chunk (4 blocks of 256 values) of the
 * CTA's weight rows into its own region of shared memory with cp.async,
 * one commit group per block, all in flight at once, and reads them from
 * there: no registers hold loads in flight, so every block of every warp
 * is requested at the kernel's start (or, with PDL, during its
 * predecessor's tail: the weights depend on no earlier kernel), where the
 * register-fed loads of before had one block a warp in flight.  It made
 * the decode step 5% faster, not the matvec's 2x that was predicted: the
 * one-row matvec is bound by issue, 1.9 warps a scheduler, not by its
 * bytes (ncu: 9 us with every weight in L2; docs/perf/09 sections 4-6).
 *
 * Staged planes: q4_K and q5_K whole blocks (144, 176 B); q6_K its nibble
 * and high-bit planes (128 and 64 B a block; the 16 scale bytes and d are
 * read from global memory as before); q8_0 its quants, 8 blocks of 32 B a
 * 256-value block (d from global memory; blocks past the row's end are
 * zero-filled).  A plane's rows are MMV_PAD bytes further apart than its
 * bytes: a plane's row of 4 blocks is 0 or 16 words mod 32, so with 8 words
 * of pad every stride is an odd multiple of 8 words mod 32, and the 8-byte
 * loads of a quad's rows g = 0..3 fall on disjoint banks (4..7 in a second
 * wavefront, the minimum for 8-byte loads); the 16-byte pad of before left
 * 64% excess wavefronts (docs/perf/09 section 6, 10). */
#define MMV_CHUNK_BLOCKS (MM_CHUNK / QK_K) /* 4: blocks of 256 values a chunk */
#define MMV_PAD 32

template <int T>
struct mmv_planes;
template <>
struct mmv_planes<QUANT_Q4_K> {
    static constexpr int n = 1, bytes0 = sizeof(block_q4_K), bytes1 = 0;
};
template <>
struct mmv_planes<QUANT_Q5_K> {
    static constexpr int n = 1, bytes0 = sizeof(block_q5_K), bytes1 = 0;
};
template <>
struct mmv_planes<QUANT_Q6_K> {
    static constexpr int n = 2, bytes0 = 128, bytes1 = 64;
};
template <>
struct mmv_planes<QUANT_Q8_0> {
    static constexpr int n = 1, bytes0 = 8 * 32, bytes1 = 0;
};

/* A staged plane's row stride, and a warp's region for `rows` weight rows. */
template <int T>
static __host__ __device__ constexpr int mmv_stride(int plane)
{
    return (plane == 0 ? mmv_planes<T>::bytes0 : mmv_planes<T>::bytes1) * MMV_CHUNK_BLOCKS +
           MMV_PAD;
}

template <int T>
static __host__ __device__ constexpr int mmv_region(int rows)
{
    return rows * (mmv_stride<T>(0) + (mmv_planes<T>::n > 1 ? mmv_stride<T>(1) : 0));
}

/* A lane's share of the copies of a CTA's `ROWS` weight rows, worked out
 * once per kernel: piece t = lane + 32 k of plane p is 16-byte unit t %
 * per_row of row t / per_row's block, kept as its global offset at block 0
 * of the row and its staged offset in the warp's region.  Each block of a
 * chunk then costs a piece two adds and its cp.async, where recomputing the
 * division, the row clamp and the 64-bit product per piece and block made
 * the staging 1,000 of a warp's ~2,900 instructions (SASS of the q4_K
 * kernel, docs/perf/10). */
template <int T, int ROWS>
struct mmv_copies {
    static constexpr int per_row0 = mmv_planes<T>::bytes0 / 16,
                         per_row1 = mmv_planes<T>::bytes1 / 16;
    static constexpr int k0 = (ROWS * per_row0 + 31) / 32, k1 = (ROWS * per_row1 + 31) / 32;
    static constexpr int k = k0 + k1;
    int64_t src[k]; /* bytes into the plane at the row's block 0 */
    int dst[k];     /* bytes into the region; -1: the lane has no piece k */
    int sub[k];     /* q8_0: the piece's 32-value block in its 256 (0..7) */
};

/* Bytes from one block of a row to the next in plane p's global layout. */
template <int T>
static __device__ __forceinline__ int64_t mmv_block_bytes(int p)
{
    if constexpr (T == QUANT_Q8_0)
        return 8 * 32;
    return p == 0 ? mmv_planes<T>::bytes0 : mmv_planes<T>::bytes1;
}

template <int T, int ROWS>
static __device__ __forceinline__ mmv_copies<T, ROWS> mmv_plan(const be_weight &w, int64_t row0)
{
    typedef mmv_copies<T, ROWS> C;
    const int lane = threadIdx.x % 32;
    C c;
#pragma unroll
    for (int k = 0; k < C::k; k++) {
        const int p = k < C::k0 ? 0 : 1, per_row = p == 0 ? C::per_row0 : C::per_row1;
        const int t = lane + 32 * (p == 0 ? k : k - C::k0), r = t / per_row, i = t % per_row;
        const int64_t row = min(row0 + r, w.rows - 1);
        const int plane_stride = mmv_stride<T>(0) * ROWS; /* plane 1 follows plane 0's rows */
        c.dst[k] = t < ROWS * per_row ? (p == 0 ? 0 : plane_stride) + r * mmv_stride<T>(p) + 16 * i
                                      : -1;
        c.sub[k] = i / 2;
        if constexpr (T == QUANT_Q8_0)
            c.src[k] = (row * w.nb + i / 2) * 32 + 16 * (i % 2);
        else
            c.src[k] = row * w.nb * mmv_block_bytes<T>(p) + 16 * i;
    }
    return c;
}

/* Issues the copies of chunk blocks b0 .. b1 - 1 (at most 4) into region s:
 * one commit group per block, always 4 groups (empty ones past b1), so
 * that the wait before block j is cp.async.wait_group 3 - j.  q8_0 pieces
 * past the row's end (rows of 32 mod 256 values) are zero-filled. */
template <int T, int ROWS>
static __device__ __forceinline__ void mmv_stage(const be_weight &w, const mmv_copies<T, ROWS> &c,
                                                 int64_t b0, int64_t b1, uint8_t *s)
{
    typedef mmv_copies<T, ROWS> C;
#pragma unroll
    for (int j = 0; j < MMV_CHUNK_BLOCKS; j++) {
        if (b0 + j < b1) {
#pragma unroll
            for (int k = 0; k < C::k; k++) {
                const int p = k < C::k0 ? 0 : 1;
                if (c.dst[k] < 0)
                    continue;
                const uint8_t *plane = T == QUANT_Q6_K && p == 1 ? w.qh : w.q;
                const uint8_t *src = plane + c.src[k] + (b0 + j) * mmv_block_bytes<T>(p);
                int real = 16;
                if constexpr (T == QUANT_Q8_0)
                    if (8 * (b0 + j) + c.sub[k] >= w.nb) {
                        real = 0;
                        src = w.q;
                    }
                cp_async16(s + c.dst[k] + j * mmv_planes<T>::bytes0 * (p == 0) +
                               j * mmv_planes<T>::bytes1 * (p == 1),
                           src, real);
            }
        }
        cp_async_commit();
    }
}

/* Waits for block j (0..3) of the staged chunk, for the whole warp. */
static __device__ __forceinline__ void mmv_wait_block(int j)
{
    switch (j) {
    case 0: cp_async_wait<3>(); break;
    case 1: cp_async_wait<2>(); break;
    case 2: cp_async_wait<1>(); break;
    default: cp_async_wait<0>(); break;
    }
    __syncwarp();
}

/* Block j of the staged chunk for lane row rl (0..rows-1), quad position c;
 * region s holds `rows` rows. */
static __device__ __forceinline__ void mmv_load(const be_weight &, int64_t, int64_t,
                                                const uint8_t *s, int, int rl, int j, int c,
                                                mmv_q4k *f)
{
    const uint8_t *blk = s + rl * mmv_stride<QUANT_Q4_K>(0) + j * sizeof(block_q4_K);
    f->hdr = *(const uint4 *)blk;
#pragma unroll
    for (int q = 0; q < 4; q++)
        f->qs[q] = *(const uint2 *)(blk + 16 + 32 * q + 8 * c);
}

static __device__ __forceinline__ void mmv_load(const be_weight &, int64_t, int64_t,
                                                const uint8_t *s, int, int rl, int j, int c,
                                                mmv_q5k *f)
{
    const uint8_t *blk = s + rl * mmv_stride<QUANT_Q5_K>(0) + j * sizeof(block_q5_K);
    f->hdr = *(const uint4 *)blk;
    f->qh = *(const uint2 *)(blk + 16 + 8 * c);
#pragma unroll
    for (int q = 0; q < 4; q++)
        f->qs[q] = *(const uint2 *)(blk + 48 + 32 * q + 8 * c);
}

static __device__ __forceinline__ void mmv_load(const be_weight &w, int64_t row, int64_t b,
                                                const uint8_t *s, int rows, int rl, int j, int c,
                                                mmv_q6k *f)
{
    const uint8_t *ql = s + rl * mmv_stride<QUANT_Q6_K>(0) + j * 128;
    const uint8_t *qh = s + rows * mmv_stride<QUANT_Q6_K>(0) + rl * mmv_stride<QUANT_Q6_K>(1) +
                        j * 64;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        f->ql[q] = *(const uint2 *)(ql + 32 * q + 8 * c);
        f->qh[q] = *(const uint2 *)(qh + 16 * q + 8 * (c / 2));
    }
    const int64_t blk = row * w.nb + b;
    f->sc = __ldg((const uint4 *)(w.sc + blk * 16));
    f->d = w.d[blk];
}

/* Eight q8_0 blocks; those past the row's end (rows of 32 mod 256 values)
 * are zeros in the staged copy and get d = 0. */
static __device__ __forceinline__ void mmv_load(const be_weight &w, int64_t row, int64_t b,
                                                const uint8_t *s, int, int rl, int j, int c,
                                                mmv_q8 *f)
{
    const uint8_t *q = s + rl * mmv_stride<QUANT_Q8_0>(0) + j * 256;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int64_t blk = 8 * b + i;
        f->q[i] = *(const uint2 *)(q + 32 * i + 8 * c);
        f->d[i] = blk < w.nb ? w.d[row * w.nb + blk] : __float2half(0.0f);
    }
}

/* A block's scales as the lane's steps use them, decoded once per block.
 * k-quants: the 8 sub-blocks' scale d * sc and negated min -(dmin * m) in
 * pairs, as bytes_to_half2 yields them from the 6-bit integers packed four
 * to a word: pair 2w + o holds sub-blocks 4w + o and 4w + o + 2 (w: word,
 * o: odd byte).  Each half is the f16 product k4_sub_at defines (one RN
 * product per lane, the same bits in a half2 multiply), so the values are
 * those of numerics.cuh; a step selects its half by operand broadcast,
 * which costs no instruction.  q6_K: per k tile q the scales of its two
 * step halves (h = 0, 1), one pair.  q8_0: each block's d, broadcast. */
template <int T>
struct mmv_block {
    __half2 scale[4], negmin[4];
};
template <>
struct mmv_block<QUANT_Q6_K> {
    __half2 scale[4];
};
template <>
struct mmv_block<QUANT_Q8_0> {
    __half2 scale[8];
};

template <int T>
static __device__ __forceinline__ void mmv_prepare_k4(const uint4 &hdr, mmv_block<T> *k)
{
    /* ggml's get_scale_min_k4 on four sub-blocks at a time */
    const uint32_t sc_lo = hdr.y & 0x3f3f3f3fu, m_lo = hdr.z & 0x3f3f3f3fu;
    const uint32_t sc_hi = (hdr.w & 0x0f0f0f0fu) | ((hdr.y >> 2) & 0x30303030u);
    const uint32_t m_hi = ((hdr.w >> 4) & 0x0f0f0f0fu) | ((hdr.z >> 2) & 0x30303030u);
    const __half2 d = __half2half2(__ushort_as_half((unsigned short)(hdr.x & 0xffffu)));
    const __half2 dmin = __half2half2(__ushort_as_half((unsigned short)(hdr.x >> 16)));
    const __half2 bias = half2_of(MM_BIAS_UNSIGNED);
    __half2 sc[4], m[4];
    bytes_to_half2(sc_lo, bias, &sc[0], &sc[1]);
    bytes_to_half2(sc_hi, bias, &sc[2], &sc[3]);
    bytes_to_half2(m_lo, bias, &m[0], &m[1]);
    bytes_to_half2(m_hi, bias, &m[2], &m[3]);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        k->scale[i] = __hmul2_rn(d, sc[i]);
        k->negmin[i] = __hneg2(__hmul2_rn(dmin, m[i]));
    }
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q4k &f, int, mmv_block<QUANT_Q4_K> *k)
{
    mmv_prepare_k4(f.hdr, k);
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q5k &f, int, mmv_block<QUANT_Q5_K> *k)
{
    mmv_prepare_k4(f.hdr, k);
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q6k &f, int c,
                                                   mmv_block<QUANT_Q6_K> *k)
{
    /* tile q's scales are bytes c/2 (h = 0) and 2 + c/2 (h = 1) of word q:
     * the even or the odd pair of bytes_to_half2, as int8 + 128 */
    const uint32_t sc[4] = {f.sc.x, f.sc.y, f.sc.z, f.sc.w};
    const __half2 d = __half2half2(f.d);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        __half2 even, odd;
        bytes_to_half2(sc[q] ^ 0x80808080u, half2_of(MM_BIAS_Q8), &even, &odd);
        k->scale[q] = __hmul2_rn(d, c / 2 ? odd : even);
    }
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q8 &f, int, mmv_block<QUANT_Q8_0> *k)
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        k->scale[j] = __half2half2(f.d[j]);
}

/* The half of a pair a step takes, broadcast. */
static __device__ __forceinline__ __half2 mmv_half(__half2 pair, int which)
{
    return which ? __high2half2(pair) : __low2half2(pair);
}

/* A k-quant step's terms: sub-block 2q + h (mmv_block's pairs). */
template <int T>
static __device__ __forceinline__ k4_sub mmv_k4_sub(const mmv_block<T> &k, int q, int h)
{
    const int pair = 2 * (q >> 1) + h, which = q & 1;
    return {mmv_half(k.scale[pair], which), mmv_half(k.negmin[pair], which)};
}

/* The B-fragment words of the block's k tile q, step s = 2h + t: the f16
 * pairs (i0, i2) and (i1, i3) of the lane's 4 values (numerics.cuh). */
static __device__ __forceinline__ void mmv_step(const mmv_q4k &f, const mmv_block<QUANT_Q4_K> &k,
                                                int q, int s, int, __half2 *even, __half2 *odd)
{
    const int h = s >> 1, t = s & 1;
    bytes_to_half2(kq_bytes(t ? f.qs[q].y : f.qs[q].x, h, 0), half2_of(MM_BIAS_UNSIGNED), even,
                   odd);
    const k4_sub sub = mmv_k4_sub(k, q, h);
    *even = k4_value(*even, sub);
    *odd = k4_value(*odd, sub);
}

static __device__ __forceinline__ void mmv_step(const mmv_q5k &f, const mmv_block<QUANT_Q5_K> &k,
                                                int q, int s, int, __half2 *even, __half2 *odd)
{
    const int h = s >> 1, t = s & 1;
    const uint32_t fifth = (((t ? f.qh.y : f.qh.x) >> (2 * q + h)) & 0x01010101u) << 4;
    bytes_to_half2(kq_bytes(t ? f.qs[q].y : f.qs[q].x, h, fifth), half2_of(MM_BIAS_UNSIGNED), even,
                   odd);
    const k4_sub sub = mmv_k4_sub(k, q, h);
    *even = k4_value(*even, sub);
    *odd = k4_value(*odd, sub);
}

static __device__ __forceinline__ void mmv_step(const mmv_q6k &f, const mmv_block<QUANT_Q6_K> &k,
                                                int q, int s, int c, __half2 *even, __half2 *odd)
{
    const int h = s >> 1, t = s & 1;
    const uint32_t high = (((h ? f.qh[q].y : f.qh[q].x) >> (2 * (2 * (c % 2) + t))) & 0x03030303u)
                          << 4;
    bytes_to_half2(kq_bytes(t ? f.ql[q].y : f.ql[q].x, h, high), half2_of(MM_BIAS_Q6), even, odd);
    const __half2 scale = mmv_half(k.scale[q], h);
    *even = q6_value(*even, scale);
    *odd = q6_value(*odd, scale);
}

static __device__ __forceinline__ void mmv_step(const mmv_q8 &f, const mmv_block<QUANT_Q8_0> &k,
                                                int q, int s, int, __half2 *even, __half2 *odd)
{
    const int h = s >> 1, t = s & 1, j = 2 * q + h;
    bytes_to_half2((t ? f.q[j].y : f.q[j].x) ^ 0x80808080u, half2_of(MM_BIAS_Q8), even, odd);
    *even = q8_value(*even, k.scale[j]);
    *odd = q8_value(*odd, k.scale[j]);
}

/* Where a lane's activation values are: rows r and r + 8 (activations as
 * the A operand) or row r (as B), clamped to the last real row.  An mma's
 * output row (column) depends on its own A row (B column) only, and those
 * past m are never read back, so they may hold any real row: no mask. */
struct mmv_arows {
    const uint2 *lo, *hi; /* 4 halves each, at the chunk's first k tile */
};

static __device__ __forceinline__ mmv_arows mmv_arows_of(const __half *act, int64_t lda, int m,
                                                         int r, int c, int kt0)
{
    const int64_t k0 = (int64_t)kt0 * MM_GROUP + 4 * c;
    return {(const uint2 *)(act + (int64_t)min(r, m - 1) * lda + k0),
            (const uint2 *)(act + (int64_t)min(r + 8, m - 1) * lda + k0)};
}

/* The two layouts.  WA (m <= 8): the weights are the A operand, 16 weight
 * rows a warp (lane rows g and g + 8) against the activation rows as the
 * 8 columns of B; a step decodes 8 values a lane straight into the A
 * registers and loads its B fragment with one 8-byte load.  Otherwise
 * (9..16 rows) the activations are A (rows g and g + 8), 8 weight rows a
 * warp as B.  The bits are the same either way (numerics.cuh: a step's
 * result does not depend on which operand is A). */
template <bool WA>
struct mmv_layout {
    static constexpr int rows = WA ? 16 : 8; /* weight rows a CTA */
    static constexpr int cols = WA ? 8 : 16; /* activation rows of its tile */
    static constexpr int lane_rows = WA ? 2 : 1;
};

/* The chain of one chunk (k tiles kt0 .. kt1) for the lane's weight rows
 * (global rows row[], staged rows rl[] of region s), block by block as
 * the staged copies land.  Only a q8_0 row (32 values a block of 8 x 32)
 * can end inside a block. */
template <int T, bool WA>
static __device__ __forceinline__ void mmv_chunk(const be_weight &w, const int64_t *row,
                                                 const int *rl, const uint8_t *s, int kt0, int kt1,
                                                 mmv_arows ar, float acc[4])
{
    typedef typename mmv_raw<T>::type raw;
    typedef mmv_layout<WA> L;
    constexpr int R = L::lane_rows;
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int e = 0; e < 4; e++)
        acc[e] = 0.0f;
    const int b0 = kt0 / 4, b1 = (kt1 + 3) / 4;
#pragma unroll
    for (int j = 0; j < MMV_CHUNK_BLOCKS; j++) {
        if (b0 + j >= b1)
            break;
        const int tiles = T == QUANT_Q8_0 ? min(4, kt1 - 4 * (b0 + j)) : 4;
        /* m <= 8: the block's 16 B fragments (the lane's activation values,
         * 2 registers a step) are requested before its weights' wait, so
         * that their L2 round trip overlaps it; one load a step just ahead
         * of its mma left each step waiting on it (ncu, docs/perf/13: the
         * 11008-row matvec 18.9 -> 14.4 us, tg128 +9%). */
        uint2 frag[WA ? 16 : 1];
        if constexpr (WA)
#pragma unroll
            for (int i = 0; i < 16; i++)
                if (i / 4 < tiles)
                    frag[i] = __ldg(ar.lo + 4 * i);
        mmv_wait_block(j);
        raw cur[R];
        mmv_block<T> k[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            mmv_load(w, row[r], b0 + j, s, L::rows, rl[r], j, c, &cur[r]);
            mmv_prepare(cur[r], c, &k[r]);
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (q >= tiles)
                break;
#pragma unroll
            for (int st = 0; st < 4; st++) {
                const int off = 16 * q + 4 * st; /* uint2 units: 16 a tile (64 halves), 4 a step */
                __half2 v[R][2];
#pragma unroll
                for (int r = 0; r < R; r++)
                    mmv_step(cur[r], k[r], q, st, c, &v[r][0], &v[r][1]);
                if constexpr (WA) {
                    const uint2 lo = frag[4 * q + st];
                    const uint32_t a[4] = {*(const uint32_t *)&v[0][0], *(const uint32_t *)&v[1][0],
                                           *(const uint32_t *)&v[0][1],
                                           *(const uint32_t *)&v[1][1]};
                    mma_f16(acc, a, lo.x, lo.y);
                } else {
                    const uint2 lo = __ldg(ar.lo + off), hi = __ldg(ar.hi + off);
                    const uint32_t a[4] = {lo.x, hi.x, lo.y, hi.y};
                    mma_f16(acc, a, *(const uint32_t *)&v[0][0], *(const uint32_t *)&v[0][1]);
                }
            }
        }
        ar.lo += 4 * 16;
        ar.hi += 4 * 16;
    }
}

/* Asks L2 for the planes of weight rows [row0, row0 + rows) (clamped to
 * the matrix) that mmv reads from global memory rather than staging: q6_K's
 * scales and d, q8_0's d. */
template <int T>
static __device__ void mmv_prefetch_scales(const be_weight &w, int64_t row0, int rows)
{
    const int64_t n = min((int64_t)rows, w.rows - row0), first = row0 * w.nb, blocks = n * w.nb;
    if constexpr (T == QUANT_Q6_K)
        l2_prefetch(w.sc + first * 16, blocks * 16);
    if constexpr (T == QUANT_Q6_K || T == QUANT_Q8_0)
        l2_prefetch(w.d + first, blocks * sizeof(__half));
}

/* Bytes of the chunk partials (chunks x 128 floats in either layout), then
 * each warp's staging region. */
static __host__ __device__ size_t mmv_part_bytes(int chunks)
{
    return (size_t)chunks * 128 * sizeof(float);
}

template <int T, bool WA>
__global__ void __launch_bounds__(MMV_WARPS * 32)
    mmv_kernel(mmv_group grp, const __half *act, int64_t lda, int m, bool accumulate)
{
    typedef mmv_layout<WA> L;
    extern __shared__ __align__(16) unsigned char smem[];
    float *part = (float *)smem; /* [chunk][L::rows weight rows][L::cols activation rows] */
    /* constant indices only: a run-time index would copy the group to local memory */
    const int i = (grp.n > 1 && blockIdx.x >= grp.first_tile[1]) +
                  (grp.n > 2 && blockIdx.x >= grp.first_tile[2]);
    const be_weight &w = i == 0 ? grp.w[0] : i == 1 ? grp.w[1] : grp.w[2];
    float *out = i == 0 ? grp.out[0] : i == 1 ? grp.out[1] : grp.out[2];
    const float *bias = i == 0 ? grp.bias[0] : i == 1 ? grp.bias[1] : grp.bias[2];
    const unsigned first = i == 0 ? 0u : i == 1 ? grp.first_tile[1] : grp.first_tile[2];
    const int64_t row0 = (int64_t)(blockIdx.x - first) * L::rows;
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, c = lane % 4;
    const int nkt = (int)(lda / MM_GROUP), chunks = (int)mm_chunks(lda);
    const int64_t row[2] = {min(row0 + g, w.rows - 1), min(row0 + g + 8, w.rows - 1)};
    const int rl[2] = {g, g + 8};
    uint8_t *stage = smem + mmv_part_bytes(chunks) + (size_t)warp * mmv_region<T>(L::rows);
    auto chunk_tiles = [&](int ch, int *kt0, int *kt1) {
        *kt0 = ch * (MM_CHUNK / MM_GROUP);
        *kt1 = min(nkt, *kt0 + MM_CHUNK / MM_GROUP);
    };
    /* The weights need nothing of earlier kernels: the first chunk's copies
     * go out before the wait (PDL, cuda_internal.h). */
    pdl_launch_next();
    if (threadIdx.x == 0)
        mmv_prefetch_scales<T>(w, row0, L::rows);
    const mmv_copies<T, L::rows> copies = mmv_plan<T, L::rows>(w, row0);
    int kt0, kt1;
    if (warp < chunks) {
        chunk_tiles(warp, &kt0, &kt1);
        mmv_stage<T, L::rows>(w, copies, kt0 / 4, (kt1 + 3) / 4, stage);
    }
    pdl_wait();
    for (int ch = warp; ch < chunks; ch += warps) {
        float acc[4];
        chunk_tiles(ch, &kt0, &kt1);
        if (ch != warp) { /* the region is free once every lane has read it */
            __syncwarp();
            mmv_stage<T, L::rows>(w, copies, kt0 / 4, (kt1 + 3) / 4, stage);
        }
        mmv_chunk<T, WA>(w, row, rl, stage, kt0, kt1, mmv_arows_of(act, lda, m, g, c, kt0), acc);
        float *p = part + (size_t)ch * L::rows * L::cols;
        if constexpr (WA) { /* acc: (weight row g (+8), activation row 2c, 2c + 1) */
            p[g * L::cols + 2 * c] = acc[0];
            p[g * L::cols + 2 * c + 1] = acc[1];
            p[(g + 8) * L::cols + 2 * c] = acc[2];
            p[(g + 8) * L::cols + 2 * c + 1] = acc[3];
        } else { /* acc: (activation row g (+8), weight row 2c, 2c + 1) */
            p[(2 * c) * L::cols + g] = acc[0];
            p[(2 * c + 1) * L::cols + g] = acc[1];
            p[(2 * c) * L::cols + g + 8] = acc[2];
            p[(2 * c + 1) * L::cols + g + 8] = acc[3];
        }
    }
    __syncthreads();
    for (int o = threadIdx.x; o < L::rows * m; o += blockDim.x) {
        const int r = o % L::rows, col = o / L::rows; /* weight row, activation row */
        const int64_t n = row0 + r;
        if (n >= w.rows)
            continue;
        float y = 0.0f;
        for (int ch = 0; ch < chunks; ch++)
            y += part[((size_t)ch * L::rows + r) * L::cols + col];
        if (bias)
            y = __fadd_rn(y, bias[n]); /* the CPU's add after the product */
        float *dst = out + (int64_t)col * w.rows + n;
        *dst = accumulate ? *dst + y : y;
    }
}

static int mmv_warps(int64_t lda)
{
    return (int)std::min<int64_t>(mm_chunks(lda), MMV_WARPS);
}

/* The chunk partials and the warps' staging regions. */
template <int T, bool WA>
static size_t mmv_smem(int64_t lda)
{
    return mmv_part_bytes((int)mm_chunks(lda)) +
           (size_t)mmv_warps(lda) * mmv_region<T>(mmv_layout<WA>::rows);
}

#define MMV_SMEM_LIMIT (227 * 1024) /* the most a block may have on sm_90 */

/* Rows up to MMV_MAX_ROWS of the four types, while the staging fits (the
 * 16-row layout's, the larger: q6_K rows up to 55,296 values, q4_K far
 * more); a matmul mmv refuses takes the GEMM, which computes the same bits. */
bool mmv_takes(const be_weight *w, const be_act *in)
{
    if (in->rows > MMV_MAX_ROWS)
        return false;
    const int64_t lda = act_f16_stride(in->cols);
    size_t smem = 0;
    with_weight_type(w->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if constexpr (T == QUANT_Q4_K || T == QUANT_Q5_K || T == QUANT_Q6_K || T == QUANT_Q8_0)
            smem = mmv_smem<T, true>(lda);
    });
    return smem > 0 && smem <= MMV_SMEM_LIMIT;
}

template <int T>
static cudaError_t configure_type(void)
{
    const int limit = MMV_SMEM_LIMIT;
    cudaError_t e = cudaSuccess;
    auto one = [&](auto kernel) {
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
    };
    one(mmv_kernel<T, false>);
    one(mmv_kernel<T, true>);
    return e;
}

cudaError_t mmv_configure(void)
{
    cudaError_t e = configure_type<QUANT_Q4_K>();
    if (e == cudaSuccess)
        e = configure_type<QUANT_Q5_K>();
    if (e == cudaSuccess)
        e = configure_type<QUANT_Q6_K>();
    if (e == cudaSuccess)
        e = configure_type<QUANT_Q8_0>();
    return e;
}

template <int T, bool WA>
static void launch_rows(cuda_backend *cb, const mmv_group &g, unsigned tiles, const be_act *in,
                        bool accumulate)
{
    const cuda_actq *aq = (const cuda_actq *)in->q;
    const int64_t lda = act_f16_stride(in->cols);
    cuda_launch(cb, mmv_kernel<T, WA>, tiles, 32 * mmv_warps(lda), mmv_smem<T, WA>(lda), g, aq->h,
                lda, (int)in->rows, accumulate);
}

void launch_mmv_group(cuda_backend *cb, int n, const be_weight *const *w, const be_act *in,
                      float *const *out, const float *const *bias, bool accumulate)
{
    const int rows = in->rows;
    const int tile_rows = rows > 8 ? mmv_layout<false>::rows : mmv_layout<true>::rows;
    mmv_group g = {};
    unsigned tiles = 0;
    g.n = n;
    for (int i = 0; i < n; i++) {
        g.first_tile[i] = tiles;
        g.w[i] = *w[i];
        g.out[i] = out[i];
        g.bias[i] = bias ? bias[i] : NULL;
        tiles += (unsigned)((w[i]->rows + tile_rows - 1) / tile_rows);
    }
    const bool known = with_weight_type(w[0]->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if constexpr (T == QUANT_Q4_K || T == QUANT_Q5_K || T == QUANT_Q6_K || T == QUANT_Q8_0) {
            if (rows > 8)
                launch_rows<T, false>(cb, g, tiles, in, accumulate);
            else
                launch_rows<T, true>(cb, g, tiles, in, accumulate);
        }
    });
    if (!known || !mmv_takes(w[0], in)) {
        cuda_fail(cb, "matmul (mmv): type %s, %d rows", quant_type_name(w[0]->type), rows);
        return;
    }
    cuda_check_launch(cb, "matmul (mmv)");
}
