/* gemm_sm90: the GEMM (prefill, decode batches beyond mmv) on Hopper's
 * wgmma (sm_90a), out (M x N) = A (M x K, the f16 step-ordered activation
 * copy) . W^T (N x K, any weight type), for M >= GEMM_SM90_MIN_ROWS;
 * gemm.cu's mma.sync kernel takes the rest, and all of it when
 * LLMQ_GEMM_SM90=0 (cuda_backend.cu reads it once).
 *
 * Same bits as gemm.cu and mmv.cu (numerics.cuh): per output, the k16 steps
 * of a chunk of MM_CHUNK k chained through the tensor cores from +0, in step
 * order (wgmma k16 step s of a k tile reads the tile's columns 16s..+16,
 * which are step s: the activation copy and the weight tile (dequant.cuh)
 * are both in step order), each chunk's acc added to tot (from +0) in chunk
 * order.  gpu-mma-numerics measured that a k16 step gives the same bits
 * under wgmma as under mma.sync.
 *
 * Warp specialization: a CTA is SM90_NP + NC warpgroups for a BM = 64 NC by
 * BN = 128 tile.  The first SM90_NP produce: for each k tile (GEMM_BK = 64
 * k) they copy the BM x 64 activation tile with cp.async and dequantize the
 * 128 x 64 weight tile (dequant.cuh's 256 tasks of 32 weights, fetched into
 * registers one k tile ahead) into a stage of shared memory.  The NC others
 * consume: each owns 64 rows and runs 4 wgmma m64n128k16 per k tile on
 * them, acc in registers, tot in shared memory (folded once a chunk).
 * SM90_STAGES stages ring between them through two mbarriers each: `full`
 * (every producer thread arrives once its writes to the stage are done and
 * fenced for the async proxy), `empty` (every consumer thread arrives once
 * the wgmma that read the stage completed).  A producer thread arrives on
 * tile i's `full` one tile late, after issuing tile i + 1's copies, so that
 * waiting for tile i's cp.async costs nothing.
 *
 * Layout: a stage is {A: BM rows, B: 128 rows} of 128 bytes (64 f16 of k),
 * 16-byte unit u of row r at unit u ^ (r % 8) (the 128-byte swizzle:
 * sm90_unit_off), 1024-byte aligned; wgmma reads it through sm90_desc.
 * Shared memory: 4 stages of 24 or 32 KB (NC 1, 2) or 3 of 40 KB (NC 3)
 * and 32 KB of tot per consumer: 129, 193 or 217 KB, one CTA per SM.
 *
 * Small grids split k by chunks as gemm.cu does (one CTA per chunk,
 * partials folded in chunk order by split_sum). */
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/sm90.cuh"

#include <algorithm>

#define SM90_BN 128
/* Stages: 4, 3 for 192-row tiles (3 x 40 KB + 3 x 32 KB of tot fits the
 * 227 KB a CTA may have; 4 would not). */
#define SM90_STAGES(NC) ((NC) == 3 ? 3 : 4)
/* Producer warpgroups: two, so that dequantizing a weight tile (~115
 * instructions a task, 256 tasks; docs/perf/07) keeps pace with the
 * consumers' wgmma.  With two consumers that is 512 threads, 128 registers
 * each: the consumers keep acc in registers and tot in shared memory (with
 * both in registers they need ~150, and setmaxnreg did not lift ptxas's
 * cap). */
#define SM90_NP 2
/* k tiles of weights a producer thread holds in registers ahead of the one
 * it dequantizes: 5 for q4_K and q6_K (8 registers a task), 3 for q5_K and
 * q8_0 (9-12: at 5 their 192-row kernels spill), 1 for f16/f32 (32).
 * Checkpoint 1 measured ~1.4 us a k tile with 1 ahead, far above the
 * dequant's instruction count: the loads' latency, which more tiles in
 * flight hide.  At 3 ahead, ncu of the 64-row q4_K GEMM still put two of
 * its three largest stall sites on the dequant's shifts waiting for the
 * fetched weights; 5 ahead made pp512 +1.6% (docs/perf/12). */
#define SM90_AHEAD(frag_bytes) ((frag_bytes) <= 32 ? 5 : (frag_bytes) <= 48 ? 3 : 1)
/* One stage: the activation tile (64 NC rows) and the weight tile. */
#define SM90_STAGE_BYTES(NC) ((64 * (NC) + SM90_BN) * SM90_ROW_BYTES)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Warpgroups 0..NP-1 (PT = 128 NP threads): stage the k tiles [kt0, kt0 +
 * nk) in order.  Thread p copies unit p % 8 of activation rows (p + PT q) / 8
 * and dequantizes weight tasks p + PT t (row task / 2, half task % 2). */
template <int T, int NP, int NC>
static __device__ __forceinline__ void sm90_produce(const be_weight &w, const __half *a,
                                                    int64_t lda, int m, int64_t m0, int64_t n0,
                                                    int kt0, int nk, unsigned char *smem,
                                                    uint64_t *full, uint64_t *empty)
{
    constexpr int BM = 64 * NC, A_BYTES = BM * SM90_ROW_BYTES, PT = 128 * NP;
    constexpr int STAGE = SM90_STAGE_BYTES(NC), S = SM90_STAGES(NC);
    constexpr int TASKS = 2 * SM90_BN / PT, COPIES = BM * 8 / PT;
    static_assert(TASKS * PT == 2 * SM90_BN && COPIES * PT == BM * 8, "whole tasks per thread");
    typedef typename frag_of<T>::type frag;
    const int p = threadIdx.x;
    /* the thread's activation rows, fixed over k (NULL: a row >= m, zeros) */
    const __half *row[COPIES];
    uint32_t dst[COPIES];
#pragma unroll
    for (int q = 0; q < COPIES; q++) {
        const int r = (p + PT * q) / 8, u = p % 8;
        row[q] = m0 + r < m ? a + (m0 + r) * lda + 8 * u : NULL;
        dst[q] = sm90_unit_off(r, u);
    }
    auto fetch = [&](int kt, frag *f) {
#pragma unroll
        for (int t = 0; t < TASKS; t++) {
            const int task = p + PT * t;
            const int64_t n = n0 + task / 2 < w.rows ? n0 + task / 2 : w.rows - 1;
            fetch_any<T>(w, n, kt, task % 2, &f[t]);
        }
    };
    /* f[d] holds tile i's weights for i % D == d, fetched D tiles ahead; the
     * loop is unrolled by D so that d is a constant (registers) */
    constexpr int D = SM90_AHEAD(sizeof(frag));
    frag f[D][TASKS];
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < nk)
            fetch(kt0 + d, f[d]);
    pdl_wait(); /* the weights are constant; the activations are the predecessor's */
    for (int i0 = 0; i0 < nk; i0 += D)
#pragma unroll
        for (int d = 0; d < D; d++) {
            const int i = i0 + d, s = i % S, kt = kt0 + i;
            if (i >= nk)
                break;
            unsigned char *st = smem + s * STAGE;
            if (i >= S)
                sm90_mbar_wait(&empty[s], (unsigned)(i / S - 1) & 1);
#pragma unroll
            for (int q = 0; q < COPIES; q++)
                cp_async16(st + dst[q], row[q] ? row[q] + (int64_t)kt * GEMM_BK : a,
                           row[q] ? 16 : 0);
            cp_async_commit();
            __half *sb = (__half *)(st + A_BYTES);
#pragma unroll
            for (int t = 0; t < TASKS; t++) {
                const int task = p + PT * t, r = task / 2;
                dequant_any<T>(f[d][t], kt, task % 2, tile_row{sb + r * GEMM_BK, r & 7});
            }
            if (i + D < nk)
                fetch(kt + D, f[d]);
            if (i > 0) {
                cp_async_wait<1>(); /* tile i - 1's activations */
                sm90_fence_proxy_async();
                sm90_mbar_arrive(&full[(i - 1) % S]);
            }
        }
    cp_async_wait<0>();
    sm90_fence_proxy_async();
    sm90_mbar_arrive(&full[(nk - 1) % S]);
}

/* Consumer warpgroup c: rows 64c..64c+63 of the tile over the same k tiles.
 * tot (this thread's 64 sums, tot[128 j] for register j: a word of its own
 * in each row of the warpgroup's 32 KB, so no two threads share a bank)
 * gets the chunks' chains in chunk order, from +0. */
template <int NC>
static __device__ __forceinline__ void sm90_consume(int c, int kt0, int nk, unsigned char *smem,
                                                    uint64_t *full, uint64_t *empty, float *tot)
{
    constexpr int A_BYTES = 64 * NC * SM90_ROW_BYTES, STAGE = SM90_STAGE_BYTES(NC);
    constexpr int S = SM90_STAGES(NC);
    float acc[64];
#pragma unroll
    for (int j = 0; j < 64; j++) {
        acc[j] = 0.0f;
        tot[128 * j] = 0.0f;
    }
    int pending = -1; /* a tile whose stage is read but not yet released */
    for (int i = 0; i < nk; i++) {
        const int s = i % S, kt = kt0 + i;
        sm90_mbar_wait(&full[s], (unsigned)(i / S) & 1);
        const uint32_t sa = smem_addr(smem + s * STAGE) + c * 64 * SM90_ROW_BYTES;
        const uint32_t sb = smem_addr(smem + s * STAGE + A_BYTES);
        sm90_wgmma_fence();
#pragma unroll
        for (int step = 0; step < GEMM_BK / 16; step++)
            sm90_wgmma_m64n128k16(acc, sm90_desc(sa + 32 * step), sm90_desc(sb + 32 * step));
        sm90_wgmma_commit();
        if ((kt + 1) % GEMM_CHUNK_KT == 0 || i + 1 == nk) {
            sm90_wgmma_wait<0>();
            sm90_fence_acc(acc);
            if (pending >= 0)
                sm90_mbar_arrive(&empty[pending % S]);
            sm90_mbar_arrive(&empty[s]);
            pending = -1;
#pragma unroll
            for (int j = 0; j < 64; j++) {
                tot[128 * j] += acc[j];
                acc[j] = 0.0f;
            }
        } else {
            sm90_wgmma_wait<1>(); /* the tile before this one */
            if (pending >= 0)
                sm90_mbar_arrive(&empty[pending % S]);
            pending = i;
        }
    }
    /* a no-op (the last tile ends a chunk), which ptxas cannot see */
    sm90_wgmma_wait<0>();
    sm90_fence_acc(acc);
}

/* The wgmma accumulator layout: register j of thread (warp v, lane l) is
 * row 16v + l/4 + 8 ((j/2) % 2), column 8 (j/4) + 2 (l%4) + j%2 of the
 * consumer's 64 x 128 block; a pair (j even, j + 1) is two adjacent
 * columns, stored as one float2 where both are in range and aligned (n
 * even).  The compiler may not move a load past a store to dst (it may
 * alias for all it knows): a load after each pair's store cost one L2 round
 * trip per pair (docs/perf/13 and 14: the residual-adding 4096 x 4096 GEMM
 * 9 us over its twin, the biased q, k, v 3 us), so both epilogues load
 * before they store.  sm90_acc_row and sm90_acc_col: the row and column of
 * this thread's pair j within the block. */
static __device__ __forceinline__ int sm90_acc_row(int j)
{
    return 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4 + 8 * ((j / 2) % 2);
}
static __device__ __forceinline__ int sm90_acc_col(int j)
{
    return 8 * (j / 4) + 2 * (threadIdx.x % 4);
}

/* dst = tot (+ bias): the thread's 32 biases loaded first, then its 32
 * pairs stored, unrolled (the fastest of the plain epilogues, docs/perf/14). */
static __device__ __forceinline__ void sm90_store_plain(const float *tot, int64_t r0, int64_t n0,
                                                        int m, int64_t n, float *dst,
                                                        const float *bias)
{
    const bool pairs = n % 2 == 0;
    float bc[32]; /* [column pair j / 4][2] */
#pragma unroll
    for (int q = 0; q < 16; q++) {
        const int64_t col = n0 + sm90_acc_col(4 * q);
        bc[2 * q] = bias && col < n ? bias[col] : 0.0f;
        bc[2 * q + 1] = bias && col + 1 < n ? bias[col + 1] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 64; j += 2) {
        const int64_t row = r0 + sm90_acc_row(j), col = n0 + sm90_acc_col(j);
        if (row >= m || col >= n)
            continue;
        float *o = dst + row * n + col;
        const float y0 = gemm_final_of(tot[128 * j], bias != NULL, bc[2 * (j / 4)], 0.0f, false);
        const float y1 = gemm_final_of(tot[128 * (j + 1)], bias != NULL, bc[2 * (j / 4) + 1], 0.0f,
                                       false);
        if (pairs) {
            *(float2 *)o = make_float2(y0, y1);
        } else {
            o[0] = y0;
            if (col + 1 < n)
                o[1] = y1;
        }
    }
}

/* dst += tot (+ bias), eight pairs at a time: their residuals and biases
 * loaded before the first of their stores.  Rolled: unrolled, the four
 * batches' code (94 against 56 KB of the q4_K kernel) measured slower
 * everywhere (docs/perf/13). */
static __device__ __forceinline__ void sm90_store_adding(const float *tot, int64_t r0, int64_t n0,
                                                         int m, int64_t n, float *dst,
                                                         const float *bias)
{
    constexpr int BATCH = 8; /* pairs whose loads are in flight together */
    const bool pairs = n % 2 == 0;
#pragma unroll 1
    for (int j0 = 0; j0 < 64; j0 += 2 * BATCH) {
        float2 x[BATCH], b[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int64_t row = r0 + sm90_acc_row(j0 + 2 * i), col = n0 + sm90_acc_col(j0 + 2 * i);
            x[i] = b[i] = make_float2(0.0f, 0.0f);
            if (row >= m || col >= n)
                continue;
            const float *o = dst + row * n + col;
            const bool second = col + 1 < n;
            x[i] = pairs ? *(const float2 *)o : make_float2(o[0], second ? o[1] : 0.0f);
            if (bias) /* 4-byte loads: a bias need not be 8-aligned */
                b[i] = make_float2(bias[col], second ? bias[col + 1] : 0.0f);
        }
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int j = j0 + 2 * i;
            const int64_t row = r0 + sm90_acc_row(j), col = n0 + sm90_acc_col(j);
            if (row >= m || col >= n)
                continue;
            float *o = dst + row * n + col;
            const float y0 = gemm_final_of(tot[128 * j], bias != NULL, b[i].x, x[i].x, true);
            const float y1 = gemm_final_of(tot[128 * (j + 1)], bias != NULL, b[i].y, x[i].y, true);
            if (pairs) {
                *(float2 *)o = make_float2(y0, y1);
            } else {
                o[0] = y0;
                if (col + 1 < n)
                    o[1] = y1;
            }
        }
    }
}

/* The consumer's 64 x 128 block at (r0, n0) of dst (m x n): tot (as
 * sm90_consume leaves it) + bias, added to dst when add. */
static __device__ __forceinline__ void sm90_store(const float *tot, int64_t r0, int64_t n0, int m,
                                                  int64_t n, float *dst, const float *bias,
                                                  bool add)
{
    if (add)
        sm90_store_adding(tot, r0, n0, m, n, dst, bias);
    else
        sm90_store_plain(tot, r0, n0, m, n, dst, bias);
}
#endif

/* part == NULL: out (+)= the tile over all of k.  Otherwise CTA z sums k
 * tiles [z * kt_per, (z + 1) * kt_per) into part + z * m * n. */
template <int T, int NP, int NC>
__global__ void __launch_bounds__(128 * (NP + NC), 1)
    gemm_sm90_kernel(be_weight w, const __half *a, int64_t lda, int m, float *out,
                     const float *bias, bool accumulate, int kt_per, float *part)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    /* launched by cuda_launch (the rule of cuda_internal.h): the producers'
     * first weight tiles and the barriers' setup go before the wait
     * (sm90_produce), so that they overlap the predecessor's tail */
    pdl_launch_next();
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    constexpr int S = SM90_STAGES(NC);
    __shared__ uint64_t full[S], empty[S];
    /* the swizzle pattern and the descriptors need 1024-byte aligned stages */
    unsigned char *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    /* the role as a warp-uniform value (a shuffle), so that ptxas sees the
     * consumers' wgmma outside any divergent path */
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int64_t m0 = (int64_t)blockIdx.y * 64 * NC, n0 = (int64_t)blockIdx.x * SM90_BN;
    const int kt0 = (int)blockIdx.z * kt_per;
    const int nk = min((int)(lda / GEMM_BK), kt0 + kt_per) - kt0;
    if (tid == 0)
        for (int s = 0; s < S; s++) {
            sm90_mbar_init(&full[s], 128 * NP);
            sm90_mbar_init(&empty[s], 128 * NC);
        }
    __syncthreads();
    if (wg < NP) {
        sm90_produce<T, NP, NC>(w, a, lda, m, m0, n0, kt0, nk, smem, full, empty);
    } else {
        pdl_wait();
        const int c = wg - NP;
        float *tot = (float *)(smem + S * SM90_STAGE_BYTES(NC)) + c * 64 * 128 + tid % 128;
        sm90_consume<NC>(c, kt0, nk, smem, full, empty, tot);
        float *dst = part ? part + (int64_t)blockIdx.z * m * w.rows : out;
        sm90_store(tot, m0 + 64 * c, n0, m, w.rows, dst, part ? NULL : bias,
                   part ? false : accumulate);
    }
#endif
}

/* The stages, then each consumer's 64 x 128 sums (tot), + alignment slack. */
template <int NC>
static constexpr size_t sm90_smem(void)
{
    return (size_t)SM90_STAGES(NC) * SM90_STAGE_BYTES(NC) + (size_t)NC * 64 * 128 * sizeof(float) +
           1024;
}

template <int T, int NC>
static cudaError_t sm90_configure_one(void)
{
    return cudaFuncSetAttribute(gemm_sm90_kernel<T, SM90_NP, NC>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm90_smem<NC>());
}

cudaError_t gemm_sm90_configure(void)
{
    cudaError_t e = cudaSuccess;
    for_each_weight_type([&](auto t) {
        if (e == cudaSuccess)
            e = sm90_configure_one<decltype(t)::value, 1>();
        if (e == cudaSuccess)
            e = sm90_configure_one<decltype(t)::value, 2>();
        if (e == cudaSuccess)
            e = sm90_configure_one<decltype(t)::value, 3>();
    });
    return e;
}

bool gemm_sm90_enabled(void)
{
#ifdef LLMQ_CUDA_SM90A
    return cuda_env_allows("LLMQ_GEMM_SM90");
#else
    return false;
#endif
}

template <int T, int NC>
static void sm90_launch_tile(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                             const float *bias, bool accumulate, bool split)
{
    const int64_t m = in->rows, n = w->rows;
    gemm_split g;
    if (!gemm_split_plan(cb, w, in, split, &g))
        return;
    dim3 grid((unsigned)((n + SM90_BN - 1) / SM90_BN), (unsigned)((m + 64 * NC - 1) / (64 * NC)),
              (unsigned)g.splits);
    cuda_launch(cb, gemm_sm90_kernel<T, SM90_NP, NC>, grid, 128 * (SM90_NP + NC), sm90_smem<NC>(),
                *w, ((const cuda_actq *)in->q)->h, g.lda, (int)m, out, bias, accumulate, g.kt_per,
                g.part);
    if (g.part)
        launch_split_sum(cb, g.part, g.splits, m, n, bias, out, accumulate);
}

/* A grid: 64 NC-row tiles (NC 1-3), k split by chunks or not. */
struct sm90_plan {
    int nc;
    bool split;
};

/* Bytes a split's fold moves (the partials written by the GEMM, read and
 * summed into out by split_sum) in the time of one k tile: ~3 TB/s x the
 * 0.83 us a k tile took at checkpoint 2 (docs/perf/07). */
#define SM90_FOLD_BYTES_PER_KTILE 2500000

/* The grid of least time, counted in tenths of a k tile's time: waves (CTAs
 * over SMs, one CTA an SM) x k tiles a CTA, plus a split's fold.  A k tile
 * costs about the same at 64 and 128 rows (the producers' dequantization of
 * the weight tile is the bound: checkpoints 1 and 2), a tenth more at 192
 * (two more cp.async a producer thread, 1.5 M MAC for the consumers), so
 * taller tiles win whenever M fills them without adding a wave.  Ties go to
 * the shorter tile, then to no split.  Speed only: every plan gives the same
 * bits. */
static sm90_plan sm90_choose(int64_t m, int64_t n, int64_t kt, int n_sm)
{
    const int64_t n_tiles = (n + SM90_BN - 1) / SM90_BN, chunks = mm_chunks(kt * GEMM_BK);
    auto cost = [&](int nc, bool split) {
        const int64_t ctas = (m + 64 * nc - 1) / (64 * nc) * n_tiles * (split ? chunks : 1);
        const int64_t per = split ? std::min<int64_t>(kt, GEMM_CHUNK_KT) : kt;
        const int64_t fold = split ? (2 * chunks + 1) * m * n * 4 * 10 / SM90_FOLD_BYTES_PER_KTILE
                                   : 0;
        return (ctas + n_sm - 1) / n_sm * per * (nc == 3 ? 11 : 10) + fold;
    };
    sm90_plan best = {0, false};
    int64_t best_cost = 0;
    const int nc_lo = m <= 64 ? 1 : 2, nc_hi = m <= 64 ? 1 : 3;
    for (int nc = nc_lo; nc <= nc_hi; nc++)
        for (int split = 0; split <= (chunks > 1); split++) {
            const int64_t c = cost(nc, split);
            if (best.nc == 0 || c < best_cost) {
                best = {nc, split != 0};
                best_cost = c;
            }
        }
    return best;
}

void launch_gemm_sm90(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                      const float *bias, bool accumulate)
{
    const sm90_plan plan = sm90_choose(in->rows, w->rows, act_f16_stride(in->cols) / GEMM_BK,
                                       cb->n_sm);
    const bool known = with_weight_type(w->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if (plan.nc == 3)
            sm90_launch_tile<T, 3>(cb, w, in, out, bias, accumulate, plan.split);
        else if (plan.nc == 2)
            sm90_launch_tile<T, 2>(cb, w, in, out, bias, accumulate, plan.split);
        else
            sm90_launch_tile<T, 1>(cb, w, in, out, bias, accumulate, plan.split);
    });
    if (!known)
        cuda_fail(cb, "matmul: type %s", quant_type_name(w->type));
}
