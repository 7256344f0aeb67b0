/* gemm: the prefill matmul, out (M x N) = A (M x K, f16) . W^T (N x K,
 * quantized), on f16 tensor cores (mma.sync m16n8k16, f32 accumulate).
 *
 * Why f16 and not int8 MMQ first: one mma type serves every weight type
 * (q4_K, q5_K, q6_K, q8_0, f16, f32 dequantize into the same f16 tile), the
 * q4_K mins need no second rescale term, activations keep 11 bits instead
 * of 8, and the dequantization costs ~3 ALU instructions per weight per
 * BM activation rows (64-128), small beside the mma work.  The int8 path
 * (2x the mma rate) waits until the tile pipeline, not the mma rate, stops
 * being the limit (docs/perf/02).
 *
 * What it computes is numerics.cuh's definition, the same bits as mmv.cu
 * gives a row at any batch size: k16 steps of fixed k sets, chained per
 * chunk of MM_CHUNK values, chunks added in order.
 *
 * Layout invariants: a CTA computes a BM x BN tile of out with BM*BN/64
 * threads; warp (wm, wn) owns rows 32wm..+32 and columns 64wn..+64 (2 x 8
 * mma tiles).  The k loop walks GEMM_BK = 64 values: a k-quant quarter
 * super-block, two q8_0 blocks, one step group.  A tile task (row n, half h)
 * dequantizes 32 weights (for k-quants the 16 quant bytes at 16h of the
 * group's 32, both nibbles; for the others k = 32h..+32) into the tile row
 * at their step-ordered positions, so that column j of the weight tile and
 * of the activation tile (a copy of the step-ordered f16 rows, rows >= M
 * zero-filled, zero-padded to a multiple of 64 columns) hold the same k,
 * and ldmatrix's k16 columns 16s.. are step s.  A is copied with cp.async;
 * W is loaded to registers one k tile ahead and dequantized into shared
 * memory after the mma of the current tile.  acc chains the current chunk;
 * at a chunk's end it is added to tot (from +0, in chunk order).
 *
 * Small M (decode batches too large for mmv) has too few tiles to fill the
 * SMs: the k loop is then split into one CTA per chunk (blockIdx.z), each
 * writing its chunk's partial tile, which a second kernel folds in chunk
 * order: the same sum, so the split is a choice of speed only.
 *
 * Shared memory ledger: 2 stages x (BM + BN) rows x 72 halves (64 + 8 of
 * padding, so the 8 row addresses of an ldmatrix fall in distinct bank
 * quads: a 144-byte stride is 36 words, 4 banks apart) = 73,728 B at
 * 128 x 128, 55,296 B at 64 x 128.
 *
 * Roofline (7B, M = 512): 4096 x 4096 x 512 is 17.2 GFLOP, 26 us at the
 * ~660 TFLOP/s that mma.sync f16 can reach; 11008-wide, 46 GFLOP, 70 us.
 * The weights (9.4 / 25.4 MB) come from L2 after the first M tile.
 * Measured on the H200 before the fold: 117 us and 258 us (146 and 179
 * TFLOP/s), with 8 warps per SM issuing (docs/perf/02). */
#include "kernels/cuda/dequant.cuh"

#include <algorithm>

#define LDS (GEMM_BK + 8)

/* part == NULL: out (+)= the tile over all of k.  Otherwise CTA z sums k
 * tiles [z * kt_per, (z + 1) * kt_per) into part + z * m * n. */
template <int T, int BM, int BN>
__global__ void __launch_bounds__(BM *BN / 64)
    gemm_kernel(be_weight w, const __half *a, int64_t lda, int m, float *out, const float *bias,
                bool accumulate, int kt_per, float *part)
{
    constexpr int NT = BM * BN / 64, TB = 2 * BN / NT; /* W tasks per thread */
    typedef typename frag_of<T>::type frag;
    extern __shared__ __align__(16) unsigned char smem[];
    __half *sa = (__half *)smem;        /* [2][BM][LDS] */
    __half *sb = sa + 2 * BM * LDS;     /* [2][BN][LDS] */
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp % (BM / 32), wn = warp / (BM / 32);
    const int64_t n_total = w.rows;
    const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
    const int kt0 = (int)blockIdx.z * kt_per;
    const int kt1 = min((int)(lda / GEMM_BK), kt0 + kt_per);

    auto load_a = [&](int kt, int buf) {
        for (int i = tid; i < BM * 8; i += NT) {
            const int r = i / 8, c = i % 8;
            const bool ok = m0 + r < m;
            const __half *src = ok ? a + (m0 + r) * lda + (int64_t)kt * GEMM_BK + 8 * c : a;
            cp_async16(sa + (buf * BM + r) * LDS + 8 * c, src, ok ? 16 : 0);
        }
        cp_async_commit();
    };
    frag f[TB];
    auto fetch_b = [&](int kt) {
#pragma unroll
        for (int t = 0; t < TB; t++) {
            const int task = tid + t * NT;
            const int64_t n = n0 + task / 2 < n_total ? n0 + task / 2 : n_total - 1;
            fetch_any<T>(w, n, kt, task % 2, &f[t]);
        }
    };
    auto store_b = [&](int kt, int buf) {
#pragma unroll
        for (int t = 0; t < TB; t++) {
            const int task = tid + t * NT;
            dequant_any<T>(f[t], kt, task % 2, tile_row{sb + (buf * BN + task / 2) * LDS, 0});
        }
    };

    /* acc: the current chunk's chain; tot: the chunks before it, folded in
     * chunk order (numerics.cuh) */
    float acc[2][8][4], tot[2][8][4];
    auto each = [&](auto f) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    f(i, j, e);
    };
    each([&](int i, int j, int e) { acc[i][j][e] = tot[i][j][e] = 0.0f; });

    load_a(kt0, 0);
    fetch_b(kt0);
    store_b(kt0, 0);
    for (int kt = kt0; kt < kt1; kt++) {
        const int buf = (kt - kt0) % 2;
        const bool more = kt + 1 < kt1;
        if (more) {
            load_a(kt + 1, buf ^ 1);
            fetch_b(kt + 1);
        } else {
            cp_async_commit(); /* an empty group keeps the wait count uniform */
        }
        cp_async_wait<1>();
        __syncthreads();
        const __half *ta = sa + buf * BM * LDS, *tb = sb + buf * BN * LDS;
#pragma unroll
        for (int ks = 0; ks < GEMM_BK / 16; ks++) {
            uint32_t af[2][4], bf[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
                ldmatrix_x4(af[mi], ta + (wm * 32 + mi * 16 + lane % 16) * LDS + ks * 16 +
                                        (lane / 16) * 8);
#pragma unroll
            for (int p = 0; p < 4; p++) {
                uint32_t r[4];
                ldmatrix_x4(r, tb + (wn * 64 + p * 16 + lane % 8 + (lane / 16) * 8) * LDS +
                                   ks * 16 + ((lane / 8) % 2) * 8);
                bf[2 * p][0] = r[0];
                bf[2 * p][1] = r[1];
                bf[2 * p + 1][0] = r[2];
                bf[2 * p + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < 8; ni++)
                    mma_f16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
        if ((kt + 1) % GEMM_CHUNK_KT == 0 || !more)
            each([&](int i, int j, int e) {
                tot[i][j][e] += acc[i][j][e];
                acc[i][j][e] = 0.0f;
            });
        if (more)
            store_b(kt + 1, buf ^ 1);
        __syncthreads();
    }

    const int g = lane / 4, t4 = lane % 4;
    float *dst = part ? part + (int64_t)blockIdx.z * m * n_total : out;
    const bool add = part ? false : accumulate;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 8; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t row = m0 + wm * 32 + mi * 16 + g + (e / 2) * 8;
                const int64_t col = n0 + wn * 64 + ni * 8 + 2 * t4 + e % 2;
                if (row < m && col < n_total) {
                    float *o = dst + row * n_total + col;
                    *o = part ? tot[mi][ni][e] : gemm_final(tot[mi][ni][e], bias, col, o, add);
                }
            }
}

/* out (+)= the splits' partial sums, added in split order, + bias.  A
 * thread per value, its splits' loads unrolled: a grid-stride loop of at
 * most 4 CTAs an SM left each further value's loads behind the store of the
 * one before (they may alias for all the compiler knows), 8 round trips in
 * series at 256 rows x 4096. */
__global__ void split_sum_kernel(const float *part, int splits, int64_t n, int64_t cols,
                                 const float *bias, float *out, bool accumulate)
{
    pdl_begin(); /* launched by cuda_launch: the rule of cuda_internal.h */
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = 0.0f;
#pragma unroll 4
    for (int s = 0; s < splits; s++)
        v += part[(int64_t)s * n + i];
    out[i] = gemm_final(v, bias, i % cols, out + i, accumulate);
}

void launch_split_sum(cuda_backend *cb, const float *part, int splits, int64_t rows, int64_t cols,
                      const float *bias, float *out, bool accumulate)
{
    const int64_t n = rows * cols;
    cuda_launch(cb, split_sum_kernel, (unsigned)((n + 255) / 256), 256, 0, part, splits, n, cols,
                bias, out, accumulate);
}

template <int BM, int BN>
static constexpr size_t gemm_smem(void)
{
    return (size_t)2 * (BM + BN) * LDS * sizeof(__half);
}

template <int T, int BM, int BN>
static cudaError_t configure_one(void)
{
    return cudaFuncSetAttribute(gemm_kernel<T, BM, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)gemm_smem<BM, BN>());
}

template <int T>
static cudaError_t configure_type(void)
{
    cudaError_t e = configure_one<T, 128, 128>();
    if (e == cudaSuccess)
        e = configure_one<T, 64, 128>();
    return e;
}

cudaError_t gemm_configure(void)
{
    cudaError_t e = cudaSuccess;
    for_each_weight_type([&](auto t) {
        if (e == cudaSuccess)
            e = configure_type<decltype(t)::value>();
    });
    return e;
}

/* splits 1: every chunk in one CTA, folded in registers; otherwise one CTA
 * per chunk (blockIdx.z), whose partials split_sum_kernel folds in the same
 * order: both are numerics.cuh's sum. */
bool gemm_split_plan(cuda_backend *cb, const be_weight *w, const be_act *in, bool split,
                     gemm_split *g)
{
    const int64_t lda = act_f16_stride(in->cols);
    g->lda = lda;
    g->splits = split ? (int)mm_chunks(lda) : 1;
    g->kt_per = split ? GEMM_CHUNK_KT : (int)(lda / GEMM_BK);
    g->part = NULL;
    const size_t bytes = (size_t)g->splits * in->rows * w->rows * sizeof(float);
    return g->splits == 1 || (g->part = cuda_scratch(cb, "matmul", bytes)) != NULL;
}

template <int T, int BM, int BN>
static void launch_tile(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                        const float *bias, bool accumulate, bool split)
{
    const int64_t m = in->rows, n = w->rows;
    gemm_split g;
    if (!gemm_split_plan(cb, w, in, split, &g))
        return;
    dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM), (unsigned)g.splits);
    gemm_kernel<T, BM, BN><<<grid, BM * BN / 64, gemm_smem<BM, BN>(), cb->stream>>>(
        *w, ((const cuda_actq *)in->q)->h, g.lda, (int)m, out, bias, accumulate, g.kt_per, g.part);
    if (g.part)
        launch_split_sum(cb, g.part, g.splits, m, n, bias, out, accumulate);
}

/* The largest tile that still gives every SM a CTA; when even 64 x 128
 * tiles are too few, one CTA per chunk of k.  Only speed depends on the
 * choice, never a result. */
template <int T>
static void launch_type(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                        const float *bias, bool accumulate)
{
    const int64_t m = in->rows, n = w->rows;
    auto ctas = [&](int bm, int bn) { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn); };
    if (ctas(128, 128) >= cb->n_sm)
        launch_tile<T, 128, 128>(cb, w, in, out, bias, accumulate, false);
    else
        launch_tile<T, 64, 128>(cb, w, in, out, bias, accumulate, ctas(64, 128) < cb->n_sm);
}

void launch_gemm(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                 const float *bias, bool accumulate)
{
    if (cb->gemm_sm90 && in->rows >= GEMM_SM90_MIN_ROWS) {
        launch_gemm_sm90(cb, w, in, out, bias, accumulate);
        cuda_check_launch(cb, "matmul (gemm_sm90)");
        return;
    }
    const bool known = with_weight_type(w->type, [&](auto t) {
        launch_type<decltype(t)::value>(cb, w, in, out, bias, accumulate);
    });
    if (!known) {
        cuda_fail(cb, "matmul: type %s", quant_type_name(w->type));
        return;
    }
    cuda_check_launch(cb, "matmul (gemm)");
}
