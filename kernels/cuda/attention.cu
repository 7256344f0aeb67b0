/* attention: causal attention of each batch row over its sequence's paged
 * f16 KV cache.
 *
 * The tensor-core kernel (head dims 16, 32, 64, 96 for Phi-3-mini, 128) is
 * flash attention with mma.sync m16n8k16: a CTA of 4 warps takes one query
 * tile (the rows of one sequence whose positions fall in one 64-aligned
 * window: a decode row is a tile of 1, a 512-row prompt chunk 8 tiles of 64)
 * for one head, and streams the sequence's keys and values in tiles of 64
 * through shared memory (cp.async, two stages, block table lookups per key),
 * keeping an online softmax in registers (S = Q K^T, P in f16, O += P V, f32
 * sums).
 * The grid has one CTA per (row, head); a CTA whose row does not start a
 * tile exits at once, so no host-side plan is needed.
 *
 * Layout invariants: warp w owns query rows 16w..16w+15 of the tile; S is
 * 16 x 64 per warp (8 mma n-tiles), O is 16 x D.  The S accumulator of two
 * adjacent n-tiles is exactly the f16 A fragment of one k16 step of P V.
 * Keys past the last row's position are zero-filled and masked; padding
 * query rows copy the last row's position, so no row's max is ever -inf.
 * A warp whose 16 rows are all padding (3 of 4 in a decode tile) only
 * helps load the tiles: the tensor cores and shared memory serve the rows
 * that exist.
 *
 * Shared memory ledger: Q, 2 x K, 2 x V tiles of 64 rows x (D + 8) halves
 * (the 8 halves of padding put ldmatrix's 8 row addresses on distinct bank
 * quads) = 5 x 64 x (D + 8) x 2 B: 87,040 B at D = 128, 66,560 B at D = 96,
 * 46,080 B at D = 64.
 *
 * Roofline: decode reads each cached key and value once per (row, head):
 * 0.5 MB per token of context at 7B (32 heads x 128 x 2 x 2 B), so B = 64
 * sequences at 576 tokens read 18.9 GB, 4.5 ms at 4.24 TB/s (measured: 60%
 * of that, 2 CTAs of 4 warps per SM, docs/perf/02).  Prefill of
 * 512 rows is 2.1 GFLOP per layer of causal QK^T + PV, a few us on tensor
 * cores; it is bound by the KV tile loads (each tile read by up to 8 query
 * tiles, from L2).
 *
 * Decode rows (generated tokens: be_attn_batch.decode_rows_dev) of head dims
 * 64 and 128 take a split-KV kernel instead (flash-decoding); since the
 * engine marks a row as decode or prompt from its job alone, every row is
 * computed by one kernel whatever its batch (kernels/backend.h).  The
 * tile kernel gives such a row one CTA per head, of whose 4 warps 1 computes,
 * and fits 2 CTAs per SM, so 64 rows x 576 keys ran at 60% of bandwidth
 * (docs/perf/02).  Here a CTA of 4 warps takes DEC_KEYS keys of one row
 * for HG query heads sharing a KV head: 16-byte loads, D/8 lanes per key,
 * scores in f32 (q pre-scaled to log2 units), softmax of the split, P V with
 * the same lanes; splits write (o, max, sum) partials that a second kernel
 * merges in split order.  A row's splits depend only on its own length, so
 * its result is the same in any batch.  Shared memory: q, p and the 4 warps'
 * o: (HG x (D + DEC_KEYS) + 4 x HG x D) x 4 B = 10.5 KB at D 128, HG 4;
 * 128 threads, so ~16 CTAs per SM keep ~100 KB of loads in flight.
 *
 * Other head dims (8 in the smallest test model) take a plain kernel: one
 * warp per (row, head), scores in shared memory, as the CPU computes them. */
#include "kernels/cuda/cuda_internal.h"

#include <math.h>

#define ATT_TILE 64
#define ATT_THREADS 128

struct attn_args {
    const __half *kc, *vc; /* this layer's cache */
    int32_t kv_dim, block_size, max_blocks, n_rows, n_head, group, head_dim;
    const float *q;
    const int32_t *row_seq, *pos, *btab;
    float *out;
    const int32_t *first_gen; /* decode rows are the decode kernel's; NULL: none */
};

/* Is row x a generated token (a decode row), left to the decode kernel? */
static __device__ __forceinline__ bool row_decode(const attn_args &p, int x)
{
    return p.first_gen && p.pos[x] >= p.first_gen[p.row_seq[x]];
}

template <int D>
static constexpr size_t tc_smem(void)
{
    return (size_t)5 * ATT_TILE * (D + 8) * sizeof(__half);
}

template <int D>
__global__ void __launch_bounds__(ATT_THREADS) attn_tc_kernel(attn_args p, float scale_log2)
{
    constexpr int LD = D + 8, CH = D / 8; /* 16-byte chunks per row */
    extern __shared__ __align__(16) unsigned char smem[];
    __half *sq = (__half *)smem;
    __half *sk = sq + ATT_TILE * LD;     /* [2][64][LD] */
    __half *sv = sk + 2 * ATT_TILE * LD; /* [2][64][LD] */
    pdl_begin();
    const int x = blockIdx.x, h = blockIdx.y;
    const int seq = p.row_seq[x], p0 = p.pos[x];
    if (x > 0 && p.row_seq[x - 1] == seq && p0 % ATT_TILE != 0)
        return; /* not the first row of its tile */
    if (row_decode(p, x))
        return;
    /* a sequence's prompt rows precede its decode rows: the tile ends at the first */
    int nq = 1;
    while (nq < ATT_TILE && x + nq < p.n_rows && p.row_seq[x + nq] == seq &&
           p.pos[x + nq] % ATT_TILE != 0 && !row_decode(p, x + nq))
        nq++;
    const int p_last = p.pos[x + nq - 1], n_keys = p_last + 1;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int hk = h / p.group;
    const int32_t *blocks = p.btab + (int64_t)seq * p.max_blocks;

    auto load_kv = [&](int kt, int buf) {
        for (int i = tid; i < ATT_TILE * CH; i += ATT_THREADS) {
            const int key = i / CH, c = i % CH, kp = kt * ATT_TILE + key;
            const bool ok = kp < n_keys;
            int64_t off = 0;
            if (ok)
                off = ((int64_t)blocks[kp / p.block_size] * p.block_size + kp % p.block_size) *
                          p.kv_dim + (int64_t)hk * D + 8 * c;
            const int dst = (buf * ATT_TILE + key) * LD + 8 * c;
            cp_async16(sk + dst, p.kc + off, ok ? 16 : 0);
            cp_async16(sv + dst, p.vc + off, ok ? 16 : 0);
        }
        cp_async_commit();
    };
    load_kv(0, 0);

    /* Q tile in f16; rows past nq are zero. */
    for (int i = tid; i < ATT_TILE * D / 4; i += ATT_THREADS) {
        const int r = i / (D / 4), c = (i % (D / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nq)
            v = *(const float4 *)(p.q + ((int64_t)(x + r) * p.n_head + h) * D + c);
        uint2 u;
        u.x = pack_half2(v.x, v.y);
        u.y = pack_half2(v.z, v.w);
        *(uint2 *)(sq + r * LD + c) = u;
    }
    __syncthreads();
    const bool active = warp * 16 < nq;
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        if (active)
            ldmatrix_x4(qf[ks], sq + (warp * 16 + lane % 16) * LD + ks * 16 + (lane / 16) * 8);

    const int g = lane / 4, t4 = lane % 4;
    int rpos[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = warp * 16 + g + 8 * r;
        rpos[r] = i < nq ? p.pos[x + i] : p_last;
    }
    float o[D / 8][4], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[i][e] = 0.0f;

    const int n_tiles = (n_keys + ATT_TILE - 1) / ATT_TILE;
    for (int kt = 0; kt < n_tiles; kt++) {
        const int buf = kt % 2;
        if (kt + 1 < n_tiles)
            load_kv(kt + 1, buf ^ 1);
        else
            cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (active) { /* every warp reaches both barriers of the loop */
            const __half *tk = sk + buf * ATT_TILE * LD, *tv = sv + buf * ATT_TILE * LD;

            float s[8][4];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[i][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
                for (int pr = 0; pr < 4; pr++) {
                    uint32_t r[4];
                    ldmatrix_x4(r, tk + (pr * 16 + lane % 8 + (lane / 16) * 8) * LD + ks * 16 +
                                       ((lane / 8) % 2) * 8);
                    mma_f16(s[2 * pr], qf[ks], r[0], r[1]);
                    mma_f16(s[2 * pr + 1], qf[ks], r[2], r[3]);
                }

            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kt * ATT_TILE + i * 8 + 2 * t4 + e % 2;
                    const float v = key <= rpos[e / 2] ? s[i][e] * scale_log2 : -INFINITY;
                    s[i][e] = v;
                    mx[e / 2] = fmaxf(mx[e / 2], v);
                }
            float corr[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                const float m_new = fmaxf(mrow[r], mx[r]);
                corr[r] = exp2f(mrow[r] - m_new);
                mrow[r] = m_new;
                lrow[r] *= corr[r];
            }
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float pe = exp2f(s[i][e] - mrow[e / 2]);
                    s[i][e] = pe;
                    lrow[e / 2] += pe;
                }
#pragma unroll
            for (int i = 0; i < D / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[i][e] *= corr[e / 2];

#pragma unroll
            for (int kk = 0; kk < ATT_TILE / 16; kk++) {
                const uint32_t pa[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                                        pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                        pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                        pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t r[4];
                    ldmatrix_x4_trans(r, tv + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD +
                                             dp * 16 + (lane / 16) * 8);
                    mma_f16(o[2 * dp], pa, r[0], r[1]);
                    mma_f16(o[2 * dp + 1], pa, r[2], r[3]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = warp * 16 + g + 8 * r;
        if (i >= nq)
            continue;
        const float inv = 1.0f / lrow[r];
        float *dst = p.out + ((int64_t)(x + i) * p.n_head + h) * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *(float2 *)(dst + dt * 8 + 2 * t4) =
                make_float2(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
}

/* ---- decode rows: split-KV ---- */

#define DEC_KEYS 128
#define DEC_WARPS 4
#define DEC_THREADS (32 * DEC_WARPS)

/* Keys of row x's cache in splits of DEC_KEYS, a function of the row alone. */
static __device__ __forceinline__ int dec_splits(int n_keys)
{
    return (n_keys + DEC_KEYS - 1) / DEC_KEYS;
}

/* One split of decode row x = rows[z] for HG query heads of one KV head.
 * With one split the row's output is written; otherwise the partial record
 * [o (D floats, unnormalized), max (log2 units), sum] at
 * part[((z * n_head + h) * max_split + split) * (D + 2)]. */
template <int D, int HG>
__global__ void __launch_bounds__(DEC_THREADS)
    attn_decode_kernel(attn_args p, const int32_t *rows, float scale_log2, float *part,
                       int max_split)
{
    constexpr int LPK = D / 8;                           /* lanes per key, 8 halves each */
    constexpr int KPI = 32 / LPK;                        /* keys per warp per step */
    constexpr int STEPS = DEC_KEYS / (DEC_WARPS * KPI);  /* steps per warp */
    constexpr int BATCH = STEPS < 8 ? STEPS : 8;         /* steps whose loads fly together */
    __shared__ float s_q[HG][D];
    __shared__ float s_p[HG][DEC_KEYS];
    __shared__ float s_o[DEC_WARPS][HG][D];
    __shared__ float s_ml[HG][2];

    pdl_begin();
    const int split = blockIdx.x, h0 = blockIdx.y * HG, x = rows[blockIdx.z];
    const int n_keys = p.pos[x] + 1, k0 = split * DEC_KEYS;
    if (k0 >= n_keys)
        return;
    const int nk = min(DEC_KEYS, n_keys - k0);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int sub = lane / LPK, cl = lane % LPK;
    const int32_t *blocks = p.btab + (int64_t)p.row_seq[x] * p.max_blocks;
    const int64_t head_off = (int64_t)(h0 / p.group) * D + cl * 8;

    for (int i = tid; i < HG * D; i += DEC_THREADS)
        s_q[i / D][i % D] = p.q[((int64_t)x * p.n_head + h0) * D + i] * scale_log2;
    __syncthreads();
    float qr[HG][8];
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            qr[g][j] = s_q[g][cl * 8 + j];

    /* Each warp takes keys (step * DEC_WARPS + warp) * KPI + sub.  The loads
     * of BATCH steps are issued before any of their math (block table
     * entries first, then the 16-byte chunks), so a warp has BATCH chunks in
     * flight: with few rows in the batch there are few CTAs to hide the
     * latency behind. */
    auto load_batch = [&](const __half *cache, int st0, uint4 raw[BATCH]) {
        int64_t at[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int kp = k0 + min((st0 + i) * DEC_WARPS * KPI + warp * KPI + sub, nk - 1);
            at[i] = (int64_t)blocks[kp / p.block_size] * p.block_size + kp % p.block_size;
        }
#pragma unroll
        for (int i = 0; i < BATCH; i++)
            raw[i] = __ldg((const uint4 *)(cache + at[i] * p.kv_dim + head_off));
    };

    /* Scores: each key's LPK lanes dot 8 dims each, then sum by shuffles.
     * Keys past nk load key nk - 1 again and are not stored. */
    for (int st0 = 0; st0 < STEPS; st0 += BATCH) {
        uint4 raw[BATCH];
        load_batch(p.kc, st0, raw);
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int k = ((st0 + i) * DEC_WARPS + warp) * KPI + sub;
            const __half2 *h2 = (const __half2 *)&raw[i];
            float acc[HG];
#pragma unroll
            for (int g = 0; g < HG; g++)
                acc[g] = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __half22float2(h2[j]);
#pragma unroll
                for (int g = 0; g < HG; g++)
                    acc[g] = fmaf(qr[g][2 * j + 1], f.y, fmaf(qr[g][2 * j], f.x, acc[g]));
            }
#pragma unroll
            for (int g = 0; g < HG; g++)
#pragma unroll
                for (int o = LPK / 2; o > 0; o >>= 1)
                    acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], o);
            if (cl == 0 && k < nk)
#pragma unroll
                for (int g = 0; g < HG; g++)
                    s_p[g][k] = acc[g];
        }
    }
    __syncthreads();

    /* Softmax of the split: warp g takes head g. */
    if (warp < HG) {
        float mx = -INFINITY, sum = 0.0f;
        for (int k = lane; k < nk; k += 32)
            mx = fmaxf(mx, s_p[warp][k]);
        for (int o = 16; o > 0; o >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        for (int k = lane; k < nk; k += 32) {
            const float e = exp2f(s_p[warp][k] - mx);
            s_p[warp][k] = e;
            sum += e;
        }
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) {
            s_ml[warp][0] = mx;
            s_ml[warp][1] = sum;
        }
    }
    __syncthreads();

    /* O = P V over the same keys and lanes (a key past nk weighs 0), then
     * over the KPI keys of a step and over the warps, in a fixed order. */
    float o[HG][8];
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[g][j] = 0.0f;
    for (int st0 = 0; st0 < STEPS; st0 += BATCH) {
        uint4 raw[BATCH];
        load_batch(p.vc, st0, raw);
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int k = ((st0 + i) * DEC_WARPS + warp) * KPI + sub;
            if (k >= nk)
                continue;
            const __half2 *h2 = (const __half2 *)&raw[i];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __half22float2(h2[j]);
#pragma unroll
                for (int g = 0; g < HG; g++) {
                    const float pk = s_p[g][k];
                    o[g][2 * j] = fmaf(pk, f.x, o[g][2 * j]);
                    o[g][2 * j + 1] = fmaf(pk, f.y, o[g][2 * j + 1]);
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int off = LPK; off < 32; off <<= 1)
                o[g][j] += __shfl_xor_sync(0xffffffffu, o[g][j], off);
    if (sub == 0)
#pragma unroll
        for (int g = 0; g < HG; g++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                s_o[warp][g][cl * 8 + j] = o[g][j];
    __syncthreads();

    const bool whole = dec_splits(n_keys) == 1;
    for (int i = tid; i < HG * D; i += DEC_THREADS) {
        const int g = i / D, d = i % D;
        float v = s_o[0][g][d];
#pragma unroll
        for (int w = 1; w < DEC_WARPS; w++)
            v += s_o[w][g][d];
        if (whole)
            p.out[((int64_t)x * p.n_head + h0 + g) * D + d] = v / s_ml[g][1];
        else
            part[(((int64_t)blockIdx.z * p.n_head + h0 + g) * max_split + split) * (D + 2) + d] = v;
    }
    if (!whole && tid < HG) {
        float *rec =
            part + (((int64_t)blockIdx.z * p.n_head + h0 + tid) * max_split + split) * (D + 2);
        rec[D] = s_ml[tid][0];
        rec[D + 1] = s_ml[tid][1];
    }
}

/* Merges a decode row's split partials for one head, in split order; a
 * thread per dim. */
template <int D>
__global__ void __launch_bounds__(D)
    attn_decode_merge_kernel(attn_args p, const int32_t *rows, const float *part, int max_split)
{
    pdl_begin();
    const int x = rows[blockIdx.x], h = blockIdx.y, d = threadIdx.x;
    const int n_split = dec_splits(p.pos[x] + 1);
    if (n_split == 1)
        return;
    const float *rec = part + ((int64_t)blockIdx.x * p.n_head + h) * max_split * (D + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_split; s++)
        mx = fmaxf(mx, rec[s * (D + 2) + D]);
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float w = exp2f(rec[s * (D + 2) + D] - mx);
        num = fmaf(rec[s * (D + 2) + d], w, num);
        den = fmaf(rec[s * (D + 2) + D + 1], w, den);
    }
    p.out[((int64_t)x * p.n_head + h) * D + d] = num / den;
}

template <int D, int HG>
static void launch_decode_hg(cuda_backend *cb, const attn_args &a, const be_attn_batch *b,
                             float scale_log2)
{
    const int max_split = (b->max_seq_len + DEC_KEYS - 1) / DEC_KEYS;
    float *part = NULL;
    if (max_split > 1 && !(part = cuda_scratch(cb, "attention",
                                               (size_t)b->n_decode * a.n_head * max_split *
                                                   (D + 2) * sizeof(float))))
        return;
    dim3 grid(max_split, a.n_head / HG, b->n_decode);
    cuda_launch(cb, attn_decode_kernel<D, HG>, grid, DEC_THREADS, 0, a, b->decode_rows_dev,
                scale_log2, part, max_split);
    if (max_split > 1)
        cuda_launch(cb, attn_decode_merge_kernel<D>, dim3(b->n_decode, a.n_head), D, 0, a,
                    b->decode_rows_dev, part, max_split);
}

/* Query heads per CTA: as many of a KV head's group as fit the registers (4). */
template <int D>
static void launch_decode(cuda_backend *cb, const attn_args &a, const be_attn_batch *b,
                          float scale_log2)
{
    if (a.group % 4 == 0)
        launch_decode_hg<D, 4>(cb, a, b, scale_log2);
    else if (a.group % 2 == 0)
        launch_decode_hg<D, 2>(cb, a, b, scale_log2);
    else
        launch_decode_hg<D, 1>(cb, a, b, scale_log2);
}

/* Any head dim: one warp per (row, head), as the CPU backend computes it. */
__global__ void attn_plain_kernel(attn_args p, float scale)
{
    extern __shared__ float scores[];
    pdl_begin();
    const int x = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, D = p.head_dim;
    const int n = p.pos[x] + 1, hk = h / p.group;
    const int32_t *blocks = p.btab + (int64_t)p.row_seq[x] * p.max_blocks;
    const float *q = p.q + ((int64_t)x * p.n_head + h) * D;
    auto at = [&](int kp) {
        return ((int64_t)blocks[kp / p.block_size] * p.block_size + kp % p.block_size) * p.kv_dim +
               (int64_t)hk * D;
    };
    float mx = -INFINITY;
    for (int kp = lane; kp < n; kp += 32) {
        const __half *k = p.kc + at(kp);
        float s = 0.0f;
        for (int i = 0; i < D; i++)
            s = __fadd_rn(s, __fmul_rn(q[i], __half2float(k[i])));
        scores[kp] = s * scale;
        mx = fmaxf(mx, scores[kp]);
    }
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0.0;
    for (int kp = lane; kp < n; kp += 32) {
        scores[kp] = expf(scores[kp] - mx);
        sum += scores[kp];
    }
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    __syncwarp();
    const float inv = (float)(1.0 / sum);
    for (int i = lane; i < D; i += 32) {
        float acc = 0.0f;
        for (int kp = 0; kp < n; kp++)
            acc = __fadd_rn(acc, __fmul_rn(scores[kp] * inv, __half2float(p.vc[at(kp) + i])));
        p.out[((int64_t)x * p.n_head + h) * D + i] = acc;
    }
}

#define PLAIN_MAX_SMEM (200 * 1024)

cudaError_t attention_configure(void)
{
    cudaError_t e = cudaFuncSetAttribute(attn_tc_kernel<128>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)tc_smem<128>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_tc_kernel<96>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)tc_smem<96>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_tc_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)tc_smem<64>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_plain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 PLAIN_MAX_SMEM);
    return e;
}

void launch_attention(cuda_backend *cb, const be_kv *kv, int32_t layer, const float *q,
                      const be_attn_batch *b, const be_attn_shape *sh, float *out)
{
    const int D = sh->head_dim;
    if (sh->n_head_kv * D != kv->kv_dim || sh->n_head % sh->n_head_kv != 0) {
        cuda_fail(cb, "attention: %d heads (%d kv) of %d do not fit a KV row of %d", sh->n_head,
                  sh->n_head_kv, D, kv->kv_dim);
        return;
    }
    const int64_t layer_off = (int64_t)layer * kv->n_blocks * kv->block_size * kv->kv_dim;
    const bool decode = (D == 64 || D == 128) && b->n_decode > 0;
    attn_args a = {kv->k + layer_off,
                   kv->v + layer_off,
                   kv->kv_dim,
                   kv->block_size,
                   b->max_blocks,
                   b->n_rows,
                   sh->n_head,
                   sh->n_head / sh->n_head_kv,
                   D,
                   q,
                   b->row_seq_dev,
                   b->row_pos_dev,
                   b->block_table_dev,
                   out,
                   decode ? b->first_generated_dev : NULL};
    const float scale = 1.0f / sqrtf((float)D);
    const float scale_log2 = scale * 1.4426950408889634f;
    if (decode) {
        if (D == 64)
            launch_decode<64>(cb, a, b, scale_log2);
        else
            launch_decode<128>(cb, a, b, scale_log2);
        cuda_check_launch(cb, "attention (decode rows)");
        if (b->n_decode == b->n_rows)
            return;
    }
    dim3 grid(b->n_rows, sh->n_head);
    auto tc = [&](auto d) {
        constexpr int DD = decltype(d)::value;
        cuda_launch(cb, attn_tc_kernel<DD>, grid, ATT_THREADS, tc_smem<DD>(), a, scale_log2);
    };
    switch (D) {
    case 16: tc(std::integral_constant<int, 16>{}); break;
    case 32: tc(std::integral_constant<int, 32>{}); break;
    case 64: tc(std::integral_constant<int, 64>{}); break;
    case 96: tc(std::integral_constant<int, 96>{}); break;
    case 128: tc(std::integral_constant<int, 128>{}); break;
    default: {
        /* 16 bytes of slack: ptxas merges the guarded loads of the last
         * scores into one wider load that may reach past the last one. */
        const size_t smem = (size_t)b->max_seq_len * sizeof(float) + 16;
        if (smem > PLAIN_MAX_SMEM) {
            cuda_fail(cb, "attention: head dim %d takes the plain kernel, which holds at most "
                          "%d positions (%d asked)", D, PLAIN_MAX_SMEM / 4, b->max_seq_len);
            return;
        }
        cuda_launch(cb, attn_plain_kernel, grid, 32, smem, a, scale);
    }
    }
    cuda_check_launch(cb, "attention");
}
