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
 * Layout invariants: a CTA computes a BM x BN tile of out with BM*BN/64
 * threads; warp (wm, wn) owns rows 32wm..+32 and columns 64wn..+64 (2 x 8
 * mma tiles).  The k loop walks GEMM_BK = 64 values: a k-quant quarter
 * super-block, two q8_0 blocks.  A tile task (row n, half h) dequantizes 32
 * weights: for k-quants the 16 low nibbles of chunk 2j+h (columns 16h..+16)
 * and its 16 high nibbles (columns 32+16h..+16); for the others columns
 * 32h..+32.  A is copied with cp.async (rows >= M zero-filled; its f16 rows
 * are zero-padded to a multiple of 64 columns); W is loaded to registers
 * one k tile ahead and dequantized into shared memory after the mma of the
 * current tile.
 *
 * Small M (decode batches of 9..128 rows) has too few tiles to fill the
 * SMs: the k loop is then split over S CTAs (blockIdx.z) that write f32
 * partial tiles, summed in split order by a second kernel.  S depends on N
 * and K alone, so rows agree bit for bit across all split batch sizes.
 *
 * Shared memory ledger: 2 stages x (BM + BN) rows x 72 halves (64 + 8 of
 * padding, so the 8 row addresses of an ldmatrix fall in distinct bank
 * quads: a 144-byte stride is 36 words, 4 banks apart) = 73,728 B at
 * 128 x 128, 55,296 B at 64 x 128.
 *
 * Roofline (7B, M = 512): 4096 x 4096 x 512 is 17.2 GFLOP, 26 us at the
 * ~660 TFLOP/s that mma.sync f16 can reach; 11008-wide, 46 GFLOP, 70 us.
 * The weights (9.4 / 25.4 MB) come from L2 after the first M tile.
 * Measured on the H200: 117 us and 258 us (146 and 179 TFLOP/s), with 8
 * warps per SM issuing (docs/perf/02).
 *
 * Each output's k order is fixed (tile by tile, 16 at a time), so without a
 * split a row's result does not depend on M, the tile shape or its
 * neighbours; with one it depends on S, not on the neighbours. */
#include "kernels/cuda/blocks.cuh"

#include <algorithm>

#define LDS (GEMM_BK + 8)
static_assert(GEMM_BK * 4 == QK_K && GEMM_BK == 2 * QK8_0,
              "a k tile is a quarter of a k-quant super-block, two q8_0 blocks (fetch, dequant)");

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

static __device__ __forceinline__ void store8(__half *dst, const float *v)
{
    uint4 u;
    u.x = pack_half2(v[0], v[1]);
    u.y = pack_half2(v[2], v[3]);
    u.z = pack_half2(v[4], v[5]);
    u.w = pack_half2(v[6], v[7]);
    *(uint4 *)dst = u;
}

/* 16 values: byte b of word i gives column 4i + b, via nibble(word, b). */
template <typename F>
static __device__ __forceinline__ void store16(__half *dst, const uint4 &q, F value)
{
    const uint32_t word[4] = {q.x, q.y, q.z, q.w};
    float v[16];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int b = 0; b < 4; b++)
            v[4 * i + b] = value(word[i], i, b);
    store8(dst, v);
    store8(dst + 8, v + 8);
}

/* A q4_K/q5_K task: sub-blocks 2j (low nibbles) and 2j + 1 (high), each
 * scaled and shifted by its min; fifth(i, b, s) adds the fifth bit of byte
 * b of word i to sub-block 2j + s (0 for q4_K). */
template <typename F>
static __device__ __forceinline__ void dequant_k4(const uint4 &hdr, const uint4 &qs, int kt, int h,
                                                  __half *row, F fifth)
{
    const int j = kt % 4;
    const float d = __half2float(__ushort_as_half((unsigned short)(hdr.x & 0xffffu)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(hdr.x >> 16)));
    int sc0, m0, sc1, m1;
    k4_scale_min(2 * j, hdr.y, hdr.z, hdr.w, &sc0, &m0);
    k4_scale_min(2 * j + 1, hdr.y, hdr.z, hdr.w, &sc1, &m1);
    const float d0 = d * (float)sc0, n0 = dmin * (float)m0;
    const float d1 = d * (float)sc1, n1 = dmin * (float)m1;
    store16(row + 16 * h, qs, [&](uint32_t w, int i, int b) {
        return d0 * (float)(((w >> (8 * b)) & 15) | fifth(i, b, 0)) - n0;
    });
    store16(row + 32 + 16 * h, qs, [&](uint32_t w, int i, int b) {
        return d1 * (float)(((w >> (8 * b + 4)) & 15) | fifth(i, b, 1)) - n1;
    });
}

static __device__ __forceinline__ void dequant(const chunk_q4k &f, int kt, int h, __half *row)
{
    dequant_k4(f.hdr, f.qs, kt, h, row, [](int, int, int) { return 0u; });
}

static __device__ __forceinline__ void dequant(const chunk_q5k &f, int kt, int h, __half *row)
{
    const uint32_t qh[4] = {f.qh.x, f.qh.y, f.qh.z, f.qh.w};
    const int bit = 2 * (kt % 4);
    dequant_k4(f.hdr, f.qs, kt, h, row, [&](int i, int b, int s) {
        return ((qh[i] >> (8 * b + bit + s)) & 1u) << 4;
    });
}

static __device__ __forceinline__ void dequant(const chunk_q6k &f, int, int h, __half *row)
{
    const float d0 = f.d * (float)(int8_t)(f.sc >> (8 * h));
    const float d1 = f.d * (float)(int8_t)(f.sc >> (16 + 8 * h));
    const uint32_t qlo = f.qh.x, qhi = f.qh.y;
    store16(row + 16 * h, f.ql, [&](uint32_t w, int i, int b) {
        const int q = (int)(((w >> (8 * b)) & 15) | (((qlo >> (8 * b + 2 * i)) & 3) << 4));
        return d0 * (float)(q - 32);
    });
    store16(row + 32 + 16 * h, f.ql, [&](uint32_t w, int i, int b) {
        const int q = (int)(((w >> (8 * b + 4)) & 15) | (((qhi >> (8 * b + 2 * i)) & 3) << 4));
        return d1 * (float)(q - 32);
    });
}

static __device__ __forceinline__ void dequant(const frag_q8 &f, int, int h, __half *row)
{
    auto value = [&](uint32_t w, int, int b) { return f.d * (float)(int8_t)(w >> (8 * b)); };
    store16(row + 32 * h, f.q0, value);
    store16(row + 32 * h + 16, f.q1, value);
}

template <int T>
static __device__ __forceinline__ void dequant_raw(const frag_raw &f, int h, __half *row)
{
    if constexpr (T == QUANT_F16) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            *(uint4 *)(row + 32 * h + 8 * i) = f.v[i];
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = f.v[2 * i], b = f.v[2 * i + 1];
            const float v[8] = {__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z),
                                __uint_as_float(a.w), __uint_as_float(b.x), __uint_as_float(b.y),
                                __uint_as_float(b.z), __uint_as_float(b.w)};
            store8(row + 32 * h + 8 * i, v);
        }
    }
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
                                                   int h, __half *row)
{
    if constexpr (T == QUANT_F16 || T == QUANT_F32)
        dequant_raw<T>(f, h, row);
    else
        dequant(f, kt, h, row);
}

/* part == NULL: out (+)= the tile over all of k.  Otherwise CTA z sums k
 * tiles [z * kt_per, (z + 1) * kt_per) into part + z * m * n. */
template <int T, int BM, int BN>
__global__ void __launch_bounds__(BM * BN / 64)
gemm_kernel(be_weight w, const __half *a, int64_t lda, int m, float *out, bool accumulate,
            int kt_per, float *part)
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
            dequant_any<T>(f[t], kt, task % 2, sb + (buf * BN + task / 2) * LDS);
        }
    };

    float acc[2][8][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

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
                    *o = add ? *o + acc[mi][ni][e] : acc[mi][ni][e];
                }
            }
}

/* out (+)= the splits' partial sums, added in split order. */
__global__ void split_sum_kernel(const float *part, int splits, int64_t n, float *out,
                                 bool accumulate)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = part[i];
        for (int s = 1; s < splits; s++)
            v += part[(int64_t)s * n + i];
        out[i] = accumulate ? out[i] + v : v;
    }
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

template <int T, int BM, int BN>
static void launch_tile(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                        bool accumulate, int splits)
{
    const cuda_actq *aq = (const cuda_actq *)in->q;
    const int64_t lda = act_f16_stride(in->cols), m = in->rows, n = w->rows;
    const int nk = (int)(lda / GEMM_BK), kt_per = (nk + splits - 1) / splits;
    splits = (nk + kt_per - 1) / kt_per; /* no empty split */
    float *part = NULL;
    if (splits > 1 && !(part = cuda_scratch(cb, "matmul", (size_t)splits * m * n * sizeof(float))))
        return;
    dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM), (unsigned)splits);
    gemm_kernel<T, BM, BN><<<grid, BM * BN / 64, gemm_smem<BM, BN>(), cb->stream>>>(
        *w, aq->h, lda, (int)m, out, accumulate, kt_per, part);
    if (part)
        split_sum_kernel<<<(unsigned)std::min<int64_t>((m * n + 255) / 256, 4 * cb->n_sm), 256,
                           0, cb->stream>>>(part, splits, m * n, out, accumulate);
}

/* The largest tile that still gives every SM a CTA; when even 64 x 128
 * tiles are too few, the k loop is split into S parts, S set so that one
 * M tile makes about two CTAs per SM (at most 8 parts of at least 4 k
 * tiles each). */
template <int T>
static void launch_type(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                        bool accumulate)
{
    const int64_t m = in->rows, n = w->rows;
    auto ctas = [&](int bm, int bn) { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn); };
    if (ctas(128, 128) >= cb->n_sm) {
        launch_tile<T, 128, 128>(cb, w, in, out, accumulate, 1);
        return;
    }
    const int64_t n_tiles = (n + 127) / 128, nk = act_f16_stride(in->cols) / GEMM_BK;
    int64_t splits = ctas(64, 128) >= cb->n_sm ? 1 : (2 * cb->n_sm + n_tiles - 1) / n_tiles;
    splits = std::max<int64_t>(1, std::min<int64_t>(splits, std::min<int64_t>(8, nk / 4)));
    launch_tile<T, 64, 128>(cb, w, in, out, accumulate, (int)splits);
}

void launch_gemm(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                 bool accumulate)
{
    const bool known = with_weight_type(w->type, [&](auto t) {
        launch_type<decltype(t)::value>(cb, w, in, out, accumulate);
    });
    if (!known) {
        cuda_fail(cb, "matmul: type %s", quant_type_name(w->type));
        return;
    }
    cuda_check_launch(cb, "matmul (gemm)");
}
