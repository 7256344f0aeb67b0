/* mmv: the decode matmul, out (R x n) (+)= act (R x k) . W^T for R up to
 * MMV_MAX_ROWS, on the tensor cores, computing exactly what numerics.cuh
 * defines and gemm.cu computes for any R: a row gets the same bits alone or
 * in a batch of 512.
 *
 * Layout invariants.  The activation rows are the mma's A operand (m16
 * tiles of 16 rows; at R = 1 one row of it is real), the weights its B
 * operand: 8 weight rows a warp, so that a 4096-row matmul is 2048 warps
 * with their chains side by side.  A CTA takes 8 weight rows; its warp w
 * takes chunks w, w + WARPS, ... of k (MM_CHUNK values: 4 blocks of 256,
 * 16 k tiles, 64 steps), and the chunk partials meet in shared memory and
 * are added in chunk order.  Lane (g = lane / 4, c = lane % 4) holds weight
 * row g and, per 64-value tile of k, the 8 quant bytes at 8c of each 32-byte
 * half: its share of the tile's four steps (numerics.cuh), one 32-byte
 * sector per row and quad.  A block's bytes and scales are read once, one
 * block ahead of its math; its A fragments (activation rows g and g + 8) are
 * 8-byte loads from the step-ordered f16 copy.
 *
 * Groups: weights that read the same activations (q, k, v; gate, up) run
 * as one launch, their 8-row tiles end to end.
 *
 * Shared memory: the chunk partials, chunks x 8 x 16MT floats (MT m16 tiles,
 * MMV_MAX_ROWS / 16 of them).
 *
 * Roofline (batch 1, 7B q4_K): 4096 x 4096 reads 9.4 MB, 2.2 us at the
 * 4.24 TB/s copy bandwidth; 11008 x 4096 reads 25.4 MB, 6.0 us.  A chunk's
 * chain is 64 dependent mma, ~1 us.  Instructions per k tile and lane: ~50
 * to turn 16 quant values into f16 (bytes_to_half2 and one hfma2 a pair),
 * ~10 for the block's scales, 4 mma: docs/perf/05 counts them. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/numerics.cuh"

#include <algorithm>

#define MMV_WARPS 16 /* at most; a CTA has min(chunks, MMV_WARPS) warps */
#define MMV_ROWS 8   /* weight rows a CTA */

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

/* Block b of weight row `row`, lane quad position c. */
static __device__ __forceinline__ void mmv_load(const be_weight &w, int64_t row, int64_t b, int c,
                                                mmv_q4k *f)
{
    const uint8_t *blk = w.q + (row * w.nb + b) * sizeof(block_q4_K);
    f->hdr = __ldg((const uint4 *)blk);
#pragma unroll
    for (int q = 0; q < 4; q++)
        f->qs[q] = __ldg((const uint2 *)(blk + 16 + 32 * q + 8 * c));
}

static __device__ __forceinline__ void mmv_load(const be_weight &w, int64_t row, int64_t b, int c,
                                                mmv_q5k *f)
{
    const uint8_t *blk = w.q + (row * w.nb + b) * sizeof(block_q5_K);
    f->hdr = __ldg((const uint4 *)blk);
    f->qh = __ldg((const uint2 *)(blk + 16 + 8 * c));
#pragma unroll
    for (int q = 0; q < 4; q++)
        f->qs[q] = __ldg((const uint2 *)(blk + 48 + 32 * q + 8 * c));
}

static __device__ __forceinline__ void mmv_load(const be_weight &w, int64_t row, int64_t b, int c,
                                                mmv_q6k *f)
{
    const int64_t blk = row * w.nb + b;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        f->ql[q] = __ldg((const uint2 *)(w.q + blk * 128 + 32 * q + 8 * c));
        f->qh[q] = __ldg((const uint2 *)(w.qh + blk * 64 + 16 * q + 8 * (c / 2)));
    }
    f->sc = __ldg((const uint4 *)(w.sc + blk * 16));
    f->d = w.d[blk];
}

/* Eight q8_0 blocks; those past the row's end (rows of 32 mod 256 values)
 * read as zeros. */
static __device__ __forceinline__ void mmv_load(const be_weight &w, int64_t row, int64_t b, int c,
                                                mmv_q8 *f)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int64_t blk = 8 * b + j;
        const bool in = blk < w.nb;
        f->q[j] = in ? __ldg((const uint2 *)(w.q + (row * w.nb + blk) * 32 + 8 * c))
                     : make_uint2(0, 0);
        f->d[j] = in ? w.d[row * w.nb + blk] : __float2half(0.0f);
    }
}

/* The B-fragment words of the block's k tile q, step s = 2h + t: the f16
 * pairs (i0, i2) and (i1, i3) of the lane's 4 values (numerics.cuh). */
template <int T>
struct mmv_block {
    __half2 scale[8], bias[8]; /* per (q, h): 2q + h; bias used by k-quants only */
};

static __device__ __forceinline__ void mmv_prepare(const mmv_q4k &f, int, mmv_block<QUANT_Q4_K> *k)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const k4_sub s = k4_sub_at(f.hdr, j);
        k->scale[j] = s.scale;
        k->bias[j] = s.negmin;
    }
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q5k &f, int, mmv_block<QUANT_Q5_K> *k)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const k4_sub s = k4_sub_at(f.hdr, j);
        k->scale[j] = s.scale;
        k->bias[j] = s.negmin;
    }
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q6k &f, int c,
                                                   mmv_block<QUANT_Q6_K> *k)
{
    const uint32_t sc[4] = {f.sc.x, f.sc.y, f.sc.z, f.sc.w}; /* scale 4q + 2h + c/2 */
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = 2 * h + c / 2; /* byte of word q */
            k->scale[2 * q + h] = q6_scale(f.d, (int8_t)(sc[q] >> (8 * i)));
        }
}

static __device__ __forceinline__ void mmv_prepare(const mmv_q8 &f, int, mmv_block<QUANT_Q8_0> *k)
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        k->scale[j] = __half2half2(f.d[j]);
}

static __device__ __forceinline__ void mmv_step(const mmv_q4k &f, const mmv_block<QUANT_Q4_K> &k,
                                                int q, int s, int, __half2 *even, __half2 *odd)
{
    const int h = s >> 1, t = s & 1;
    bytes_to_half2(kq_bytes(t ? f.qs[q].y : f.qs[q].x, h, 0), half2_of(MM_BIAS_UNSIGNED), even,
                   odd);
    const k4_sub sub = {k.scale[2 * q + h], k.bias[2 * q + h]};
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
    const k4_sub sub = {k.scale[2 * q + h], k.bias[2 * q + h]};
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
    *even = q6_value(*even, k.scale[2 * q + h]);
    *odd = q6_value(*odd, k.scale[2 * q + h]);
}

static __device__ __forceinline__ void mmv_step(const mmv_q8 &f, const mmv_block<QUANT_Q8_0> &k,
                                                int q, int s, int, __half2 *even, __half2 *odd)
{
    const int h = s >> 1, t = s & 1, j = 2 * q + h;
    bytes_to_half2((t ? f.q[j].y : f.q[j].x) ^ 0x80808080u, half2_of(MM_BIAS_Q8), even, odd);
    *even = q8_value(*even, k.scale[j]);
    *odd = q8_value(*odd, k.scale[j]);
}

/* The lane's two activation rows (r and r + 8 of an m16 tile): pointers to
 * rows clamped to the last real one, so that every load is unpredicated and
 * its address a constant offset from a pointer set once, and the masks that
 * zero the rows past m. */
struct mmv_arows {
    const __half *lo, *hi;
    uint32_t lo_mask, hi_mask;
};

static __device__ __forceinline__ mmv_arows mmv_arows_of(const __half *act, int64_t lda, int m,
                                                         int r, int c)
{
    return {act + (int64_t)min(r, m - 1) * lda + 4 * c,
            act + (int64_t)min(r + 8, m - 1) * lda + 4 * c, r < m ? ~0u : 0u, r + 8 < m ? ~0u : 0u};
}

/* The A fragment for k tile kt, step s. */
static __device__ __forceinline__ void mmv_act(const mmv_arows &ar, int kt, int s, uint32_t a[4])
{
    const int64_t off = (int64_t)kt * MM_GROUP + 16 * s;
    const uint2 lo = __ldg((const uint2 *)(ar.lo + off)), hi = __ldg((const uint2 *)(ar.hi + off));
    a[0] = lo.x & ar.lo_mask;
    a[1] = hi.x & ar.hi_mask;
    a[2] = lo.y & ar.lo_mask;
    a[3] = hi.y & ar.hi_mask;
}

/* The chain of one chunk (k tiles kt0 .. kt1) for the lane's weight row and
 * MT m16 tiles of activation rows. */
template <int T, int MT>
static __device__ __forceinline__ void mmv_chunk(const be_weight &w, int64_t row, int kt0, int kt1,
                                                 const __half *act, int64_t lda, int m,
                                                 float acc[MT][4])
{
    typedef typename mmv_raw<T>::type raw;
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int j = 0; j < MT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = 0.0f;
    mmv_arows ar[MT];
#pragma unroll
    for (int j = 0; j < MT; j++)
        ar[j] = mmv_arows_of(act, lda, m, 16 * j + g, c);
    const int b0 = kt0 / 4, b1 = (kt1 + 3) / 4;
    raw cur, next;
    mmv_load(w, row, b0, c, &cur);
    for (int b = b0; b < b1; b++) {
        if (b + 1 < b1)
            mmv_load(w, row, b + 1, c, &next);
        mmv_block<T> k;
        mmv_prepare(cur, c, &k);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int kt = 4 * b + q;
            if (kt >= kt1)
                break;
#pragma unroll
            for (int s = 0; s < 4; s++) {
                __half2 bw[2];
                mmv_step(cur, k, q, s, c, &bw[0], &bw[1]);
                const uint32_t *bf = (const uint32_t *)bw;
#pragma unroll
                for (int j = 0; j < MT; j++) {
                    uint32_t a[4];
                    mmv_act(ar[j], kt, s, a);
                    mma_f16(acc[j], a, bf[0], bf[1]);
                }
            }
        }
        cur = next;
    }
}

template <int T, int MT>
__global__ void __launch_bounds__(MMV_WARPS * 32)
    mmv_kernel(mmv_group grp, const __half *act, int64_t lda, int m, bool accumulate)
{
    extern __shared__ float part[]; /* [chunk][8 weight rows][16 MT activation rows] */
    /* constant indices only: a run-time index would copy the group to local memory */
    const int i = (grp.n > 1 && blockIdx.x >= grp.first_tile[1]) +
                  (grp.n > 2 && blockIdx.x >= grp.first_tile[2]);
    const be_weight &w = i == 0 ? grp.w[0] : i == 1 ? grp.w[1] : grp.w[2];
    float *out = i == 0 ? grp.out[0] : i == 1 ? grp.out[1] : grp.out[2];
    const unsigned first = i == 0 ? 0u : i == 1 ? grp.first_tile[1] : grp.first_tile[2];
    const int64_t row0 = (int64_t)(blockIdx.x - first) * MMV_ROWS;
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, c = lane % 4;
    const int nkt = (int)(lda / MM_GROUP), chunks = (int)mm_chunks(lda);
    const int64_t row = min(row0 + g, w.rows - 1);
    constexpr int COLS = 16 * MT;
    for (int ch = warp; ch < chunks; ch += warps) {
        float acc[MT][4];
        const int kt0 = ch * (MM_CHUNK / MM_GROUP), kt1 = min(nkt, kt0 + MM_CHUNK / MM_GROUP);
        mmv_chunk<T, MT>(w, row, kt0, kt1, act, lda, m, acc);
        /* acc[j]: (activation row 16j + g (+8), weight row 2c, 2c + 1) */
        float *p = part + (size_t)ch * MMV_ROWS * COLS;
#pragma unroll
        for (int j = 0; j < MT; j++) {
            p[(2 * c) * COLS + 16 * j + g] = acc[j][0];
            p[(2 * c + 1) * COLS + 16 * j + g] = acc[j][1];
            p[(2 * c) * COLS + 16 * j + g + 8] = acc[j][2];
            p[(2 * c + 1) * COLS + 16 * j + g + 8] = acc[j][3];
        }
    }
    __syncthreads();
    for (int o = threadIdx.x; o < MMV_ROWS * m; o += blockDim.x) {
        const int r = o % MMV_ROWS, col = o / MMV_ROWS; /* weight row, activation row */
        const int64_t n = row0 + r;
        if (n >= w.rows)
            continue;
        float y = 0.0f;
        for (int ch = 0; ch < chunks; ch++)
            y += part[((size_t)ch * MMV_ROWS + r) * COLS + col];
        float *dst = out + (int64_t)col * w.rows + n;
        *dst = accumulate ? *dst + y : y;
    }
}

static int mmv_warps(int64_t lda)
{
    return (int)std::min<int64_t>(mm_chunks(lda), MMV_WARPS);
}

static size_t mmv_smem(int64_t lda, int mt)
{
    return (size_t)mm_chunks(lda) * MMV_ROWS * 16 * mt * sizeof(float);
}

bool mmv_takes(const be_weight *w, const be_act *in)
{
    const bool typed = w->type == QUANT_Q4_K || w->type == QUANT_Q5_K || w->type == QUANT_Q6_K ||
                       w->type == QUANT_Q8_0;
    return typed && in->rows <= MMV_MAX_ROWS;
}

template <int T>
static cudaError_t configure_type(void)
{
    const int limit = 227 * 1024; /* the most a block may have on sm_90 */
    cudaError_t e = cudaSuccess;
    auto one = [&](auto kernel) {
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
    };
    one(mmv_kernel<T, MMV_MAX_ROWS / 16>);
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

template <int T, int MT>
static void launch_mt(cuda_backend *cb, const mmv_group &g, unsigned tiles, const be_act *in,
                      bool accumulate)
{
    const cuda_actq *aq = (const cuda_actq *)in->q;
    const int64_t lda = act_f16_stride(in->cols);
    mmv_kernel<T, MT><<<tiles, 32 * mmv_warps(lda), mmv_smem(lda, MT), cb->stream>>>(
        g, aq->h, lda, in->rows, accumulate);
}

void launch_mmv_group(cuda_backend *cb, int n, const be_weight *const *w, const be_act *in,
                      float *const *out, bool accumulate)
{
    mmv_group g = {};
    unsigned tiles = 0;
    g.n = n;
    for (int i = 0; i < n; i++) {
        g.first_tile[i] = tiles;
        g.w[i] = *w[i];
        g.out[i] = out[i];
        tiles += (unsigned)((w[i]->rows + MMV_ROWS - 1) / MMV_ROWS);
    }
    const int rows = in->rows;
    const bool known = with_weight_type(w[0]->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if constexpr (T == QUANT_Q4_K || T == QUANT_Q5_K || T == QUANT_Q6_K || T == QUANT_Q8_0) {
            launch_mt<T, MMV_MAX_ROWS / 16>(cb, g, tiles, in, accumulate);
        }
    });
    if (!known || !mmv_takes(w[0], in)) {
        cuda_fail(cb, "matmul (mmv): type %s, %d rows", quant_type_name(w[0]->type), rows);
        return;
    }
    cuda_check_launch(cb, "matmul (mmv)");
}
