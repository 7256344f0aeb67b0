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

#include <stdlib.h>
#include <string.h>

#define SM90_BN 128
#define SM90_STAGES 4
#define SM90_ROW_BYTES (GEMM_BK * 2)
static_assert(SM90_ROW_BYTES == 128, "a k tile row is one 128-byte swizzle row");

/* Byte offset of 16-byte unit u (k positions 8u..8u+7) of row r in a
 * 128-byte-swizzled tile (what cp.async and dequant.cuh's tile_row write). */
static __device__ __forceinline__ uint32_t sm90_unit_off(int r, int u)
{
    return (uint32_t)(r * SM90_ROW_BYTES + ((u ^ (r & 7)) << 4));
}

/* The wgmma descriptor of a K-major operand in that layout, starting at
 * shared address `start`: the start (bits 0-13, in 16-byte units), the
 * leading byte offset (unused by swizzled K-major layouts: 1), the stride
 * byte offset between 8-row groups (1024 bytes), base offset 0 (the tile is
 * 1024-byte aligned) and the 128-byte swizzle mode (1 in bits 62-63).  k16
 * step s of a tile starts at row 0 + 32 s bytes: the swizzle is a function
 * of the address bits, so stepping along k within a row is a plain add. */
static __device__ __forceinline__ uint64_t sm90_desc(uint32_t start)
{
    return (uint64_t)((start & 0x3ffff) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
                 : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

/* Until the phase of parity `parity` of bar has completed. */
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

/* This thread's shared-memory writes become visible to the tensor cores
 * (the async proxy) once a barrier orders them before the wgmma. */
static __device__ __forceinline__ void fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving reads or writes of the accumulators across
 * a wgmma wait (it does not know that wgmma writes them asynchronously). */
static __device__ __forceinline__ void fence_acc(float (&d)[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 x 128 f32, the warpgroup's fragment layout) += A (64 x 16) . B^T
 * (B 128 x 16), both K-major in shared memory (descriptors da, db). */
/* 64 accumulator operands, laid out by hand: */
/* clang-format off */
static __device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, 1, 1, 1, 0, 0;\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db));
}
/* clang-format on */

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
            mbar_wait(&empty[s], (unsigned)(i / SM90_STAGES - 1) & 1);
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
            fence_proxy_async();
            mbar_arrive(&full[(i - 1) % SM90_STAGES]);
        }
        f[0] = g[0];
        f[1] = g[1];
    }
    cp_async_wait<0>();
    fence_proxy_async();
    mbar_arrive(&full[(nk - 1) % SM90_STAGES]);
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
        mbar_wait(&full[s], (unsigned)(i / SM90_STAGES) & 1);
        const uint32_t sa = smem_addr(smem + s * STAGE) + c * 64 * SM90_ROW_BYTES;
        const uint32_t sb = smem_addr(smem + s * STAGE + A_BYTES);
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < GEMM_BK / 16; step++)
            wgmma_m64n128k16(acc, sm90_desc(sa + 32 * step), sm90_desc(sb + 32 * step));
        wgmma_commit();
        if ((kt + 1) % GEMM_CHUNK_KT == 0 || i + 1 == nk) {
            wgmma_wait<0>();
            fence_acc(acc);
            if (pending >= 0)
                mbar_arrive(&empty[pending % SM90_STAGES]);
            mbar_arrive(&empty[s]);
            pending = -1;
#pragma unroll
            for (int j = 0; j < 64; j++) {
                tot[j] += acc[j];
                acc[j] = 0.0f;
            }
        } else {
            wgmma_wait<1>(); /* the tile before this one */
            if (pending >= 0)
                mbar_arrive(&empty[pending % SM90_STAGES]);
            pending = i;
        }
    }
    /* a no-op (the last tile ends a chunk), which ptxas cannot see */
    wgmma_wait<0>();
    fence_acc(acc);
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
            mbar_init(&full[s], 128);
            mbar_init(&empty[s], 128 * NC);
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
