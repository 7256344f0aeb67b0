/* gpu-mma-numerics: the properties of the H200's f16 tensor-core arithmetic that
 * a batch-invariant matmul design would rest on, measured rather than
 * assumed (sm_90a; run on the GPU machine, see tests/gpu/run.sh).
 *
 * Every case accumulates a K = 4096 dot product in f32 through a chain of
 * k16 matrix instructions, in the same k order, and compares outputs bit
 * for bit:
 *   neighbours   mma.sync m16n8k16: an output D[i][j] against the same one
 *                with every other row of A replaced (does a row's result
 *                depend on the rows beside it in the tile?)
 *   swap         mma.sync with A = activations, B = weights against A =
 *                weights, B = activations (D transposed)
 *   perm16       k permuted within each k16 step, in A and B alike
 *   wgmma-w      wgmma m64n8k16, A = weights (registers), B = activations
 *                (shared memory), against mma.sync
 *   wgmma-a      wgmma m64n8k16, A = activations, B = weights, against
 *                mma.sync
 *   wgmma-ss     wgmma m64n128k16 with A (64 activation rows) and B (128
 *                weight rows) both in shared memory, in the 128-byte-swizzled
 *                layout and with the descriptors of the wgmma GEMM
 *                (kernels/cuda/sm90.cuh), against mma.sync on its first
 *                16 x 8 outputs and against f64 on all of them
 * and the wgmma results against an f64 reference on the host (to show the
 * descriptors are right before comparing bits).  Inputs are random f16 over
 * 2^-8 .. 2^4 with random signs: wide exponents expose alignment and
 * rounding differences that tame data would hide.  Prints a table; exit 0
 * when it ran (the table is the result), 1 on a CUDA error. */
#include "kernels/cuda/sm90.cuh"

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/check_cuda.h"

#define K 4096
#define TRIALS 8

__device__ __forceinline__ uint32_t pack(__half lo, __half hi)
{
    return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
}

__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The k index a step's position p (0..15) reads: identity, or a fixed
 * permutation within the k16 step. */
__device__ __host__ __forceinline__ int kperm(int p, bool permute)
{
    return permute ? (p * 7 + 3) % 16 : p;
}

/* D (16 x 8, row-major) = A (16 x K, row-major) . B^T, B (8 x K, row-major). */
__global__ void mma_chain(const __half *a, const __half *b, bool permute, float *d)
{
    const int lane = threadIdx.x, g = lane / 4, c = lane % 4;
    float acc[4] = {0, 0, 0, 0};
    for (int k0 = 0; k0 < K; k0 += 16) {
        auto A = [&](int r, int p) { return a[r * K + k0 + kperm(p, permute)]; };
        auto B = [&](int n, int p) { return b[n * K + k0 + kperm(p, permute)]; };
        const uint32_t af[4] = {
            pack(A(g, 2 * c), A(g, 2 * c + 1)), pack(A(g + 8, 2 * c), A(g + 8, 2 * c + 1)),
            pack(A(g, 2 * c + 8), A(g, 2 * c + 9)), pack(A(g + 8, 2 * c + 8), A(g + 8, 2 * c + 9))};
        mma16816(acc, af, pack(B(g, 2 * c), B(g, 2 * c + 1)),
                 pack(B(g, 2 * c + 8), B(g, 2 * c + 9)));
    }
    d[g * 8 + 2 * c] = acc[0];
    d[g * 8 + 2 * c + 1] = acc[1];
    d[(g + 8) * 8 + 2 * c] = acc[2];
    d[(g + 8) * 8 + 2 * c + 1] = acc[3];
}

/* wgmma m64n8k16: D (64 x 8) = A (64 x K, registers) . B^T, B (8 x K) staged
 * per k16 step in shared memory as two 8 x 8 core matrices (k 0-7, k 8-15),
 * 128 bytes apart, no swizzle.  lbo / sbo: the descriptor's two offsets, in
 * bytes; the run tries both readings of which one steps along k. */
__global__ void wgmma_chain(const __half *a, const __half *b, uint32_t lbo, uint32_t sbo, float *d)
{
    __shared__ __align__(128) __half sb[2 * 64];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int r0 = 16 * warp;
    float acc[4] = {0, 0, 0, 0};
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(sb);
    const uint64_t desc = (uint64_t)((base >> 4) & 0x3fff) |
                          ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
                          ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
    for (int k0 = 0; k0 < K; k0 += 16) {
        /* core matrix h: row n holds b[n][k0 + 8h .. +8] */
        if (tid < 128) {
            const int h = tid / 64, n = (tid / 8) % 8, e = tid % 8;
            sb[h * 64 + n * 8 + e] = b[n * K + k0 + 8 * h + e];
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        auto A = [&](int r, int p) { return a[(r0 + r) * K + k0 + p]; };
        const uint32_t a0 = pack(A(g, 2 * c), A(g, 2 * c + 1)),
                       a1 = pack(A(g + 8, 2 * c), A(g + 8, 2 * c + 1)),
                       a2 = pack(A(g, 2 * c + 8), A(g, 2 * c + 9)),
                       a3 = pack(A(g + 8, 2 * c + 8), A(g + 8, 2 * c + 9));
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        __syncthreads();
    }
    d[(r0 + g) * 8 + 2 * c] = acc[0];
    d[(r0 + g) * 8 + 2 * c + 1] = acc[1];
    d[(r0 + g + 8) * 8 + 2 * c] = acc[2];
    d[(r0 + g + 8) * 8 + 2 * c + 1] = acc[3];
}

/* D (64 x 128, row-major) = A (64 x K) . B^T (B 128 x K), a k tile of 64 at
 * a time staged in one 24 KB buffer as the GEMM stages it: A rows 0..63,
 * then B's 128 rows, unit u of row r at sm90_unit_off(r, u) (B's rows r - 64
 * of a tile 8 KB in: 64 is a multiple of 8, so their swizzle is the same);
 * four k16 steps per tile through sm90_desc, one warpgroup. */
__global__ void wgmma_ss_chain(const __half *a, const __half *b, float *d)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ __align__(1024) unsigned char raw[(64 + 128) * SM90_ROW_BYTES + 1024];
    unsigned char *sm = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
    const uint32_t base = smem_addr(sm), b_off = 64 * SM90_ROW_BYTES;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    float acc[64];
#pragma unroll
    for (int j = 0; j < 64; j++)
        acc[j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 64) {
        for (int i = tid; i < (64 + 128) * 8; i += 128) {
            const int r = i / 8, u = i % 8;
            const __half *src = r < 64 ? a + (size_t)r * K : b + (size_t)(r - 64) * K;
            *(uint4 *)(sm + sm90_unit_off(r, u)) = *(const uint4 *)(src + k0 + 8 * u);
        }
        sm90_fence_proxy_async();
        __syncthreads();
        sm90_wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; s++)
            sm90_wgmma_m64n128k16(acc, sm90_desc(base + 32 * s), sm90_desc(base + b_off + 32 * s));
        sm90_wgmma_commit();
        sm90_wgmma_wait<0>();
        sm90_fence_acc(acc);
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 64; j++) {
        const int row = 16 * warp + lane / 4 + 8 * ((j / 2) % 2);
        const int col = 8 * (j / 4) + 2 * (lane % 4) + j % 2;
        d[row * 128 + col] = acc[j];
    }
#endif
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static __half random_half(void)
{
    const float mant = 1.0f + (float)(rnd() % 1024) / 1024.0f;
    const int e = (int)(rnd() % 13) - 8;
    return __float2half(ldexpf(rnd() % 2 ? mant : -mant, e));
}

static void fill(__half *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = random_half();
}

static __half *to_device(const __half *h, size_t n)
{
    __half *d;
    CHECK_CUDA(cudaMalloc(&d, n * sizeof *d));
    CHECK_CUDA(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

/* Runs a chain on device copies of a (rows x K) and b (8 x K); d gets
 * out_rows x 8 floats. */
static void run_mma(const __half *a, const __half *b, bool permute, float *d)
{
    __half *da = to_device(a, 16 * (size_t)K), *db = to_device(b, 8 * (size_t)K);
    float *dd;
    CHECK_CUDA(cudaMalloc(&dd, 16 * 8 * sizeof *dd));
    mma_chain<<<1, 32>>>(da, db, permute, dd);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(d, dd, 16 * 8 * sizeof *d, cudaMemcpyDeviceToHost));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
}

static void run_wgmma(const __half *a, const __half *b, uint32_t lbo, uint32_t sbo, float *d)
{
    __half *da = to_device(a, 64 * (size_t)K), *db = to_device(b, 8 * (size_t)K);
    float *dd;
    CHECK_CUDA(cudaMalloc(&dd, 64 * 8 * sizeof *dd));
    wgmma_chain<<<1, 128>>>(da, db, lbo, sbo, dd);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(d, dd, 64 * 8 * sizeof *d, cudaMemcpyDeviceToHost));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
}

static void run_wgmma_ss(const __half *a, const __half *b, float *d)
{
    __half *da = to_device(a, 64 * (size_t)K), *db = to_device(b, 128 * (size_t)K);
    float *dd;
    CHECK_CUDA(cudaMalloc(&dd, 64 * 128 * sizeof *dd));
    wgmma_ss_chain<<<1, 128>>>(da, db, dd);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(d, dd, 64 * 128 * sizeof *d, cudaMemcpyDeviceToHost));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
}

static double ref_dot(const __half *x, const __half *y)
{
    double s = 0;
    for (int k = 0; k < K; k++)
        s += (double)__half2float(x[k]) * (double)__half2float(y[k]);
    return s;
}

static int same_bits(float x, float y)
{
    uint32_t a, b;
    memcpy(&a, &x, 4);
    memcpy(&b, &y, 4);
    return a == b;
}

typedef struct tally {
    const char *name;
    long compared, differ;
    double worst_rel; /* against f64 where that is the comparison */
} tally;

int main(void)
{
    tally t[] = {{"neighbours (mma.sync, other rows of A changed)", 0, 0, 0},
                 {"swap (mma.sync A=act,B=w vs A=w,B=act)", 0, 0, 0},
                 {"perm16 (k permuted within each k16 step)", 0, 0, 0},
                 {"wgmma-w A=w (regs), B=act (smem) vs mma.sync", 0, 0, 0},
                 {"wgmma-a A=act (regs), B=w (smem) vs mma.sync", 0, 0, 0},
                 {"wgmma vs f64 (descriptor check, rel. error)", 0, 0, 0},
                 {"mma.sync vs f64 (rel. error)", 0, 0, 0},
                 {"wgmma-ss m64n128k16, the GEMM's swizzled smem, vs mma.sync", 0, 0, 0},
                 {"wgmma-ss vs f64 (swizzle and descriptor check, rel. error)", 0, 0, 0}};
    static __half act[64 * K], act2[64 * K], w[64 * K], wpad[16 * K], w128[128 * K];
    static float d1[16 * 8], d2[16 * 8], d3[16 * 8], dw[64 * 8], dss[64 * 128];
    uint32_t lbo = 128, sbo = 256;
    for (int trial = 0; trial < TRIALS; trial++) {
        rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)(trial + 1);
        fill(act, 64 * (size_t)K);
        fill(w, 64 * (size_t)K);
        /* baseline: A = 16 activation rows, B = 8 weight rows */
        run_mma(act, w, false, d1);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                const double r = ref_dot(act + (size_t)i * K, w + (size_t)j * K);
                const double e = fabs(d1[i * 8 + j] - r) / fmax(fabs(r), 1e-30);
                t[6].compared++;
                t[6].worst_rel = fmax(t[6].worst_rel, e);
            }
        /* neighbours: rows 1..15 replaced */
        memcpy(act2, act, sizeof act);
        fill(act2 + K, 15 * (size_t)K);
        run_mma(act2, w, false, d2);
        for (int j = 0; j < 8; j++) {
            t[0].compared++;
            t[0].differ += !same_bits(d1[j], d2[j]);
        }
        /* swap: A = weights (8 real rows, then 8 more), B = the first 8 activation rows */
        memcpy(wpad, w, 16 * (size_t)K * sizeof *w);
        run_mma(wpad, act, false, d3);
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) {
                t[1].compared++;
                t[1].differ += !same_bits(d1[i * 8 + j], d3[j * 8 + i]);
            }
        /* perm16 */
        run_mma(act, w, true, d2);
        for (int i = 0; i < 16 * 8; i++) {
            t[2].compared++;
            t[2].differ += !same_bits(d1[i], d2[i]);
        }
        /* wgmma, A = weights (64 rows), B = activations 0..7; on the first
         * trial find the descriptor reading that computes the product */
        for (int attempt = 0; attempt < 2; attempt++) {
            run_wgmma(w, act, lbo, sbo, dw);
            double worst = 0;
            for (int f = 0; f < 8; f++)
                for (int tk = 0; tk < 8; tk++) {
                    const double r = ref_dot(w + (size_t)f * K, act + (size_t)tk * K);
                    worst = fmax(worst, fabs(dw[f * 8 + tk] - r) / fmax(fabs(r), 1e-30));
                }
            if (worst < 1e-3 || trial > 0 || attempt == 1) {
                t[5].compared += 64;
                t[5].worst_rel = fmax(t[5].worst_rel, worst);
                break;
            }
            printf("# descriptor lbo %u sbo %u: rel. error %.2e, trying them swapped\n", lbo, sbo,
                   worst);
            const uint32_t x = lbo;
            lbo = sbo;
            sbo = x;
        }
        for (int f = 0; f < 8; f++)
            for (int tk = 0; tk < 8; tk++) {
                t[3].compared++;
                t[3].differ += !same_bits(dw[f * 8 + tk], d1[tk * 8 + f]);
            }
        /* wgmma, A = activations (64 rows), B = weights 0..7 */
        run_wgmma(act, w, lbo, sbo, dw);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                t[4].compared++;
                t[4].differ += !same_bits(dw[i * 8 + j], d1[i * 8 + j]);
            }
        /* wgmma-ss: B = the 64 weight rows, then 64 more */
        memcpy(w128, w, sizeof w);
        fill(w128 + 64 * (size_t)K, 64 * (size_t)K);
        run_wgmma_ss(act, w128, dss);
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                t[7].compared++;
                t[7].differ += !same_bits(dss[i * 128 + j], d1[i * 8 + j]);
            }
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 128; j++) {
                const double r = ref_dot(act + (size_t)i * K, w128 + (size_t)j * K);
                t[8].compared++;
                t[8].worst_rel = fmax(t[8].worst_rel,
                                      fabs(dss[i * 128 + j] - r) / fmax(fabs(r), 1e-30));
            }
    }
    printf("| case | outputs compared | bit differences | worst rel. error |\n| --- | --- | --- | "
           "--- |\n");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        printf("| %s | %ld | %ld | %.2e |\n", t[i].name, t[i].compared, t[i].differ,
               t[i].worst_rel);
    printf("# wgmma descriptor: lbo %u, sbo %u (bytes)\n", lbo, sbo);
    return 0;
}
