/* attention: causal attention of each batch row over its sequence's paged
 * f16 KV cache.
 *
 * The tensor-core kernel (head dims 16, 32, 64, 128) is flash attention
 * with mma.sync m16n8k16: a CTA of 4 warps takes one query tile (the rows
 * of one sequence whose positions fall in one 64-aligned window: a decode
 * row is a tile of 1, a 512-row prompt chunk 8 tiles of 64) for one head,
 * and streams the sequence's keys and values in tiles of 64 through shared
 * memory (cp.async, two stages, block table lookups per key), keeping an
 * online softmax in registers (S = Q K^T, P in f16, O += P V, f32 sums).
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
 * quads) = 5 x 64 x (D + 8) x 2 B: 87,040 B at D = 128, 46,080 B at D = 64.
 *
 * Roofline: decode reads each cached key and value once per (row, head):
 * 0.5 MB per token of context at 7B (32 heads x 128 x 2 x 2 B), so B = 64
 * sequences at 576 tokens read 18.9 GB, 4.5 ms at 4.24 TB/s (measured: 60%
 * of that, 2 CTAs of 4 warps per SM, docs/perf/02).  Prefill of
 * 512 rows is 2.1 GFLOP per layer of causal QK^T + PV, a few us on tensor
 * cores; it is bound by the KV tile loads (each tile read by up to 8 query
 * tiles, from L2).
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
};

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
    const int x = blockIdx.x, h = blockIdx.y;
    const int seq = p.row_seq[x], p0 = p.pos[x];
    if (x > 0 && p.row_seq[x - 1] == seq && p0 % ATT_TILE != 0)
        return; /* not the first row of its tile */
    int nq = 1;
    while (nq < ATT_TILE && x + nq < p.n_rows && p.row_seq[x + nq] == seq &&
           p.pos[x + nq] % ATT_TILE != 0)
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

/* Any head dim: one warp per (row, head), as the CPU backend computes it. */
__global__ void attn_plain_kernel(attn_args p, float scale)
{
    extern __shared__ float scores[];
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
    attn_args a = {kv->k + layer_off, kv->v + layer_off, kv->kv_dim, kv->block_size,
                   b->max_blocks, b->n_rows, sh->n_head, sh->n_head / sh->n_head_kv, D, q,
                   b->row_seq_dev, b->row_pos_dev, b->block_table_dev, out};
    dim3 grid(b->n_rows, sh->n_head);
    const float scale = 1.0f / sqrtf((float)D);
    const float scale_log2 = scale * 1.4426950408889634f;
    cudaStream_t s = cb->stream;
    switch (D) {
    case 16: attn_tc_kernel<16><<<grid, ATT_THREADS, tc_smem<16>(), s>>>(a, scale_log2); break;
    case 32: attn_tc_kernel<32><<<grid, ATT_THREADS, tc_smem<32>(), s>>>(a, scale_log2); break;
    case 64: attn_tc_kernel<64><<<grid, ATT_THREADS, tc_smem<64>(), s>>>(a, scale_log2); break;
    case 128: attn_tc_kernel<128><<<grid, ATT_THREADS, tc_smem<128>(), s>>>(a, scale_log2); break;
    default: {
        /* 16 bytes of slack: ptxas merges the guarded loads of the last
         * scores into one wider load that may reach past the last one. */
        const size_t smem = (size_t)b->max_seq_len * sizeof(float) + 16;
        if (smem > PLAIN_MAX_SMEM) {
            cuda_fail(cb, "attention: head dim %d takes the plain kernel, which holds at most "
                          "%d positions (%d asked)", D, PLAIN_MAX_SMEM / 4, b->max_seq_len);
            return;
        }
        attn_plain_kernel<<<grid, 32, smem, s>>>(a, scale);
    }
    }
    cuda_check_launch(cb, "attention");
}
