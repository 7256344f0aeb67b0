/* gemm_sm90: the prefill matmul on Hopper's wgmma (sm_90a), out (M x N) =
 * A (M x K, the f16 step-ordered activation copy) . W^T (N x K, any weight
 * type), for M >= GEMM_SM90_MIN_ROWS; gemm.cu's mma.sync kernel takes the
 * rest, and all of it when LLMQ_GEMM_SM90=0 (cuda_backend.cu reads it once).
 *
 * Same bits as gemm.cu and mmv.cu (numerics.cuh): per output, the k16 steps
 * of a chunk of MM_CHUNK k chained through the tensor cores from +0, in step
 * order (wgmma k16 step s of a k tile reads the tile's columns 16s..+16,
 * which are step s: the activation copy and the weight tile (dequant.cuh)
 * are both in step order), each chunk's acc added to tot (from +0) in chunk
 * order.  gpu-mma-numerics measured that a k16 step gives the same bits
 * under wgmma as under mma.sync.
 *
 * Warp specialization: a CTA is 1 + NC warpgroups for a BM = 64 NC by
 * BN = 128 tile.  Warpgroup 0 produces: for each k tile (GEMM_BK = 64 k) it
 * copies the BM x 64 activation tile with cp.async and dequantizes the 128 x
 * 64 weight tile (dequant.cuh's tasks, two per thread, fetched into
 * registers one k tile ahead) into a stage of shared memory.  Warpgroups
 * 1..NC consume: each owns 64 rows and runs 4 wgmma m64n128k16 per k tile
 * on its rows.  SM90_STAGES stages ring between them through two mbarriers
 * each: `full` (the 128 producer threads arrive once their writes to the
 * stage are done and fenced for the async proxy), `empty` (every consumer
 * thread arrives once the wgmma that read the stage completed).  A
 * producer thread arrives on tile i's `full` one tile late, after issuing
 * tile i + 1's copies, so that waiting for tile i's cp.async costs nothing.
 *
 * Layout: a stage is {A: BM rows, B: 128 rows} of 128 bytes (64 f16 of k),
 * 16-byte unit u of row r at unit u ^ (r % 8) (the 128-byte swizzle:
 * sm90_unit_off), 1024-byte aligned; wgmma reads it through sm90_desc.
 *
 * Small grids split k by chunks as gemm.cu does (one CTA per chunk,
 * partials folded in chunk order by split_sum). */
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/sm90.cuh"

#include <stdlib.h>
#include <string.h>

#define SM90_BN 128
#define SM90_STAGES 4
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Warpgroup 0: stages the k tiles [kt0, kt0 + nk) in order. */
template <int T, int NC>
static __device__ __forceinline__ void sm90_produce(const be_weight &w, const __half *a,
                                                    int64_t lda, int m, int64_t m0, int64_t n0,
                                                    int kt0, int nk, unsigned char *smem,
                                                    uint64_t *full, uint64_t *empty)
{
    constexpr int BM = 64 * NC, A_BYTES = BM * SM90_ROW_BYTES;
    constexpr int STAGE = A_BYTES + SM90_BN * SM90_ROW_BYTES;
    typedef typename frag_of<T>::type frag;
    const int p = threadIdx.x; /* 0..127 */
    auto fetch = [&](int kt, frag *f) {
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int task = p + 128 * t;
            const int64_t n = n0 + task / 2 < w.rows ? n0 + task / 2 : w.rows - 1;
            fetch_any<T>(w, n, kt, task % 2, &f[t]);
        }
    };
    frag f[2], g[2];
    fetch(kt0, f);
    for (int i = 0; i < nk; i++) {
        const int s = i % SM90_STAGES, kt = kt0 + i;
        unsigned char *st = smem + s * STAGE;
        if (i >= SM90_STAGES)
            sm90_mbar_wait(&empty[s], (unsigned)(i / SM90_STAGES - 1) & 1);
#pragma unroll
        for (int q = 0; q < BM * 8 / 128; q++) {
            const int r = (p + 128 * q) / 8, u = p % 8;
            const bool ok = m0 + r < m;
            const __half *src = ok ? a + (m0 + r) * lda + (int64_t)kt * GEMM_BK + 8 * u : a;
            cp_async16(st + sm90_unit_off(r, u), src, ok ? 16 : 0);
        }
        cp_async_commit();
        if (i + 1 < nk)
            fetch(kt + 1, g);
        __half *sb = (__half *)(st + A_BYTES);
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int task = p + 128 * t, r = task / 2;
            dequant_any<T>(f[t], kt, task % 2, tile_row{sb + r * GEMM_BK, r & 7});
        }
        if (i > 0) {
            cp_async_wait<1>(); /* tile i - 1's activations */
            sm90_fence_proxy_async();
            sm90_mbar_arrive(&full[(i - 1) % SM90_STAGES]);
        }
        f[0] = g[0];
        f[1] = g[1];
    }
    cp_async_wait<0>();
    sm90_fence_proxy_async();
    sm90_mbar_arrive(&full[(nk - 1) % SM90_STAGES]);
}

/* Warpgroup 1 + c: rows 64c..64c+63 of the tile over the same k tiles;
 * tot gets the chunks' chains in chunk order. */
template <int NC>
static __device__ __forceinline__ void sm90_consume(int c, int kt0, int nk, unsigned char *smem,
                                                    uint64_t *full, uint64_t *empty,
                                                    float (&tot)[64])
{
    constexpr int BM = 64 * NC, A_BYTES = BM * SM90_ROW_BYTES;
    constexpr int STAGE = A_BYTES + SM90_BN * SM90_ROW_BYTES;
    float acc[64];
#pragma unroll
    for (int j = 0; j < 64; j++)
        acc[j] = tot[j] = 0.0f;
    int pending = -1; /* a tile whose stage is read but not yet released */
    for (int i = 0; i < nk; i++) {
        const int s = i % SM90_STAGES, kt = kt0 + i;
        sm90_mbar_wait(&full[s], (unsigned)(i / SM90_STAGES) & 1);
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
                sm90_mbar_arrive(&empty[pending % SM90_STAGES]);
            sm90_mbar_arrive(&empty[s]);
            pending = -1;
#pragma unroll
            for (int j = 0; j < 64; j++) {
                tot[j] += acc[j];
                acc[j] = 0.0f;
            }
        } else {
            sm90_wgmma_wait<1>(); /* the tile before this one */
            if (pending >= 0)
                sm90_mbar_arrive(&empty[pending % SM90_STAGES]);
            pending = i;
        }
    }
    /* a no-op (the last tile ends a chunk), which ptxas cannot see */
    sm90_wgmma_wait<0>();
    sm90_fence_acc(acc);
}
#endif

/* part == NULL: out (+)= the tile over all of k.  Otherwise CTA z sums k
 * tiles [z * kt_per, (z + 1) * kt_per) into part + z * m * n. */
template <int T, int NC>
__global__ void __launch_bounds__(128 * (NC + 1), 1)
    gemm_sm90_kernel(be_weight w, const __half *a, int64_t lda, int m, float *out, bool accumulate,
                     int kt_per, float *part)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ uint64_t full[SM90_STAGES], empty[SM90_STAGES];
    /* the swizzle pattern and the descriptors need 1024-byte aligned stages */
    unsigned char *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    /* the role as a warp-uniform value (a shuffle), so that ptxas sees the
     * consumers' wgmma outside any divergent path */
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int64_t m0 = (int64_t)blockIdx.y * 64 * NC, n0 = (int64_t)blockIdx.x * SM90_BN;
    const int kt0 = (int)blockIdx.z * kt_per;
    const int nk = min((int)(lda / GEMM_BK), kt0 + kt_per) - kt0;
    if (tid == 0)
        for (int s = 0; s < SM90_STAGES; s++) {
            sm90_mbar_init(&full[s], 128);
            sm90_mbar_init(&empty[s], 128 * NC);
        }
    __syncthreads();
    if (wg == 0) {
        sm90_produce<T, NC>(w, a, lda, m, m0, n0, kt0, nk, smem, full, empty);
        return;
    }
    float tot[64];
    sm90_consume<NC>(wg - 1, kt0, nk, smem, full, empty, tot);

    /* the wgmma accumulator layout: register j of thread (warp v, lane l)
     * is row 16v + l/4 + 8 ((j/2) % 2), column 8 (j/4) + 2 (l%4) + j%2; a
     * pair (j even, j + 1) is two adjacent columns, stored as one float2
     * where both are in range and aligned (n even) */
    const int v = (tid / 32) % 4, lane = tid % 32;
    const int64_t n = w.rows;
    float *dst = part ? part + (int64_t)blockIdx.z * m * n : out;
    const bool add = part ? false : accumulate, pairs = n % 2 == 0;
#pragma unroll
    for (int j = 0; j < 64; j += 2) {
        const int64_t row = m0 + 64 * (wg - 1) + 16 * v + lane / 4 + 8 * ((j / 2) % 2);
        const int64_t col = n0 + 8 * (j / 4) + 2 * (lane % 4);
        if (row >= m || col >= n)
            continue;
        float *o = dst + row * n + col;
        if (pairs) {
            float2 y = make_float2(tot[j], tot[j + 1]);
            if (add) {
                const float2 x = *(const float2 *)o;
                y = make_float2(x.x + y.x, x.y + y.y);
            }
            *(float2 *)o = y;
        } else {
            o[0] = add ? o[0] + tot[j] : tot[j];
            if (col + 1 < n)
                o[1] = add ? o[1] + tot[j + 1] : tot[j + 1];
        }
    }
#endif
}

template <int NC>
static constexpr size_t sm90_smem(void)
{
    return (size_t)SM90_STAGES * (64 * NC + SM90_BN) * SM90_ROW_BYTES + 1024; /* + alignment */
}

template <int T, int NC>
static cudaError_t sm90_configure_one(void)
{
    return cudaFuncSetAttribute(gemm_sm90_kernel<T, NC>,
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
    });
    return e;
}

bool gemm_sm90_enabled(void)
{
#ifdef LLMQ_CUDA_SM90A
    const char *v = getenv("LLMQ_GEMM_SM90");
    return !v || strcmp(v, "0") != 0;
#else
    return false;
#endif
}

template <int T, int NC>
static void sm90_launch_tile(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                             bool accumulate, bool split)
{
    const cuda_actq *aq = (const cuda_actq *)in->q;
    const int64_t lda = act_f16_stride(in->cols), m = in->rows, n = w->rows;
    const int splits = split ? (int)mm_chunks(lda) : 1;
    const int kt_per = split ? GEMM_CHUNK_KT : (int)(lda / GEMM_BK);
    float *part = NULL;
    if (splits > 1 && !(part = cuda_scratch(cb, "matmul", (size_t)splits * m * n * sizeof(float))))
        return;
    dim3 grid((unsigned)((n + SM90_BN - 1) / SM90_BN), (unsigned)((m + 64 * NC - 1) / (64 * NC)),
              (unsigned)splits);
    gemm_sm90_kernel<T, NC><<<grid, 128 * (NC + 1), sm90_smem<NC>(), cb->stream>>>(
        *w, aq->h, lda, (int)m, out, accumulate, kt_per, part);
    if (part)
        launch_split_sum(cb, part, splits, m * n, out, accumulate);
}

/* 128-row tiles (two consumers) when they give at least half the SMs a CTA
 * (one wave of them is no slower than two of 64-row tiles); else 64-row
 * tiles, split by chunks when even those leave half the SMs idle.  Speed
 * only: every choice gives the same bits. */
void launch_gemm_sm90(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                      bool accumulate)
{
    const int64_t m = in->rows, n = w->rows;
    auto ctas = [&](int bm) { return ((m + bm - 1) / bm) * ((n + SM90_BN - 1) / SM90_BN); };
    const bool known = with_weight_type(w->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if (2 * ctas(128) >= cb->n_sm)
            sm90_launch_tile<T, 2>(cb, w, in, out, accumulate, false);
        else
            sm90_launch_tile<T, 1>(cb, w, in, out, accumulate, 2 * ctas(64) <= cb->n_sm);
    });
    if (!known)
        cuda_fail(cb, "matmul: type %s", quant_type_name(w->type));
}
