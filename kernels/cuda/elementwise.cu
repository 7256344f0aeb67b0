/* elementwise: the row-wise ops (embed, gather, rmsnorm, swiglu, rope,
 * kv_write) and the activations' f16 copy for the matmuls.  (Biases are
 * added in the matmuls' epilogues: mmv.cu, gemm.cu, gemm_sm90.cu.)
 *
 * Layout invariants: the row producers (rmsnorm, swiglu, the f16 copy) use
 * blocks of 1024 threads; element e of a row is handled by thread e % 1024
 * (of the CTA's slice).  rmsnorm takes one block per row (it needs the
 * row's sum first); swiglu and the copy one block per 1024-wide slice of a
 * row, or per ELEM_BATCH slices where rows are many, so a single decode row
 * still spreads over many SMs.  The f16 copy is written up to its padded
 * width and not one element further (rows are adjacent in that buffer).
 * Shared memory: 32 doubles for the rmsnorm sum.  rope: a thread per pair
 * of 1 or ELEM_BATCH heads; kv_write: 8 values a thread (f16), a value of 1
 * or ELEM_BATCH blocks (q8_0); embed, gather: 256 threads per row.
 *
 * Exactness: the arithmetic mirrors the CPU backend operation for operation
 * with the rounding intrinsics (__fmul_rn, ...), so that contraction into
 * FMA cannot change a result: embed, gather, kv_write and rmsnorm (whose sum
 * of squares is in double, as the CPU's) match the CPU to the bit or to the
 * last place; rope and swiglu differ only where CUDA's sinf/cosf/expf round
 * differently from glibc's (an ulp or two).
 *
 * Roofline: these ops move a few MB per step (a 4096-wide row is 16 KB), so
 * they are bound by launch latency and DRAM round trips, not bandwidth;
 * writing the matmuls' f16 copy in rmsnorm's and swiglu's epilogue saves a
 * launch and a re-read per matmul input. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/numerics.cuh"

#define ROW_THREADS 256
#define PROD_THREADS 1024

/* ---- embed: dequantize rows of a table, bit-exact with quant.c ---- */

template <int T>
static __device__ __forceinline__ float dequant_one(const be_weight &w, int64_t row, int64_t k)
{
    if constexpr (T == QUANT_F32) {
        return ((const float *)w.q)[row * w.cols + k];
    } else if constexpr (T == QUANT_F16) {
        return __half2float(((const __half *)w.q)[row * w.cols + k]);
    } else if constexpr (T == QUANT_Q8_0) {
        const int64_t b = row * w.nb + k / 32;
        return __fmul_rn((float)(int8_t)w.q[b * 32 + k % 32], __half2float(w.d[b]));
    } else if constexpr (T == QUANT_Q4_K || T == QUANT_Q5_K) {
        constexpr size_t bytes = T == QUANT_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K);
        constexpr int qs = T == QUANT_Q4_K ? 16 : 48; /* q5_K: qh[32] comes first */
        const uint8_t *blk = w.q + (row * w.nb + k / QK_K) * bytes;
        const int i = (int)(k % QK_K), j = i / 64, hi = (i % 64) / 32, l = i % 32;
        const uint32_t *s = (const uint32_t *)(blk + 4);
        int sc, m;
        k4_scale_min(2 * j + hi, s[0], s[1], s[2], &sc, &m);
        const float d1 = __fmul_rn(__half2float(((const __half *)blk)[0]), (float)sc);
        const float m1 = __fmul_rn(__half2float(((const __half *)blk)[1]), (float)m);
        const uint8_t qb = blk[qs + 32 * j + l];
        int q = hi ? qb >> 4 : qb & 15;
        if (T == QUANT_Q5_K)
            q += (blk[16 + l] >> (2 * j + hi) & 1) << 4;
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    } else {
        /* A type of CUDA_WEIGHT_TYPES without a branch here stops the build. */
        static_assert(T == QUANT_Q6_K, "dequant_one: no dequantizer for this weight type");
        const int64_t b = row * w.nb + k / QK_K;
        const int i = (int)(k % QK_K);
        const float ds = __fmul_rn(__half2float(w.d[b]), (float)w.sc[b * 16 + i / 16]);
        return __fmul_rn(ds, (float)(q6_value(w.q, w.qh, b, i) - 32));
    }
}

template <int T>
__global__ void embed_kernel(be_weight w, const int32_t *ids, float *out)
{
    pdl_begin();
    const int64_t r = blockIdx.x, row = ids[r];
    for (int64_t k = threadIdx.x; k < w.cols; k += blockDim.x)
        out[r * w.cols + k] = dequant_one<T>(w, row, k);
}

void launch_embed(cuda_backend *cb, const be_weight *w, const int32_t *ids, int32_t n, float *out)
{
    dim3 grid(n), block(ROW_THREADS);
    const bool known = with_weight_type(w->type, [&](auto t) {
        cuda_launch(cb, embed_kernel<decltype(t)::value>, grid, block, 0, *w, ids, out);
    });
    if (!known) {
        cuda_fail(cb, "embed: type %s", quant_type_name(w->type));
        return;
    }
    cuda_check_launch(cb, "embed");
}

/* ---- gather ---- */

__global__ void gather_kernel(const float *x, const int32_t *idx, int32_t dim, float *out)
{
    pdl_begin();
    const int64_t r = blockIdx.x, src = idx[r];
    for (int32_t e = threadIdx.x; e < dim; e += blockDim.x)
        out[r * dim + e] = x[src * dim + e];
}

void launch_gather_rows(cuda_backend *cb, const float *x, const int32_t *idx, int32_t n,
                        int32_t dim, float *out)
{
    cuda_launch(cb, gather_kernel, n, ROW_THREADS, 0, x, idx, dim, out);
    cuda_check_launch(cb, "gather_rows");
}

/* ---- row producers with the f16 copy as epilogue ---- */

enum row_mode { ROW_COPY, ROW_NORM, ROW_SWIGLU };

/* The CPU's rmsnorm scale: sum of float squares in double. */
static __device__ float rms_scale(const float *x, int32_t dim, float eps)
{
    __shared__ double part[PROD_THREADS / 32];
    double s = 0.0;
    for (int32_t e = threadIdx.x; e < dim; e += PROD_THREADS)
        s += (double)__fmul_rn(x[e], x[e]);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = s;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < PROD_THREADS / 32; i++)
        t += part[i];
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(t / dim), eps)));
}

/* Values a thread of rmsnorm, swiglu, the copy, rope or the q8_0 KV write
 * takes (slices of a row, heads, blocks: the kernels' B), all its loads out
 * before its first store: the compiler may not move a load past a store to
 * an output (it may alias an input for all it knows), so one value at a
 * time left each thread one load in flight, 8-16 KB an SM (swiglu's 512 x
 * 11008 40 us, 47% of the bandwidth: docs/perf/13's kernel times).  Where
 * B = ELEM_BATCH would leave an SM without a CTA, B = 1: a decode
 * step's few rows need their CTAs spread over the SMs more than loads in
 * flight (batched at one row, tg128 fell 1.8%: docs/perf/14).  rmsnorm's
 * one CTA a row walks the row whichever B, and always batches. */
#define ELEM_BATCH 4

/* A row's CTAs along y for a kernel that takes per_row of them at B = 1:
 * per_row / ELEM_BATCH rounded up, and *batch, where rows of those still
 * give every SM a CTA; else per_row. */
static int32_t elem_ctas(const cuda_backend *cb, int32_t rows, int32_t per_row, bool *batch)
{
    const int32_t batched = (per_row + ELEM_BATCH - 1) / ELEM_BATCH;
    *batch = (int64_t)rows * batched >= cb->n_sm;
    return *batch ? batched : per_row;
}

/* Row r (blockIdx.x): y = f(x[, aux]) written to y (unless ROW_COPY) and to
 * the matmuls' f16 copy, in step order (numerics.cuh), padded with zeros to
 * hstride.  ROW_NORM walks the whole row, B slices of 1024 at a time; the
 * others the B slices from blockIdx.y * B (whole numbers of 64-value step
 * groups).  Each value's arithmetic is the same whichever slices a CTA
 * takes. */
template <int MODE, int B>
__global__ void __launch_bounds__(PROD_THREADS, 2) /* two CTAs an SM: 32 registers */
    row_kernel(const float *x, const float *aux, float eps, int32_t dim, float *y, __half *h,
               int32_t hstride)
{
    pdl_begin();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * dim;
    const float *ar = aux ? aux + (MODE == ROW_SWIGLU ? r * dim : 0) : NULL;
    const float scale = MODE == ROW_NORM ? rms_scale(xr, dim, eps) : 1.0f;
    constexpr int32_t SPAN = B * PROD_THREADS;
    const int32_t first = MODE == ROW_NORM ? 0 : (int32_t)blockIdx.y * SPAN;
    const int32_t end = MODE == ROW_NORM ? hstride : min(hstride, first + SPAN);
    for (int32_t base = first; base < end; base += SPAN) {
        float xv[B], av[B];
#pragma unroll
        for (int i = 0; i < B; i++) {
            const int32_t e = base + i * PROD_THREADS + (int32_t)threadIdx.x;
            xv[i] = av[i] = 0.0f;
            if (e < dim) {
                xv[i] = xr[e];
                if (MODE != ROW_COPY)
                    av[i] = ar[e];
            }
        }
#pragma unroll
        for (int i = 0; i < B; i++) {
            const int32_t e = base + i * PROD_THREADS + (int32_t)threadIdx.x;
            if (base + i * PROD_THREADS >= end)
                break;
            float v = 0.0f;
            if (e < dim) {
                v = xv[i];
                if (MODE == ROW_NORM)
                    v = __fmul_rn(__fmul_rn(v, scale), av[i]);
                else if (MODE == ROW_SWIGLU)
                    v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), av[i]);
                if (MODE != ROW_COPY)
                    y[r * dim + e] = v;
            }
            if (e < hstride)
                h[r * hstride + (e & ~(MM_GROUP - 1)) + act_step_pos(e & (MM_GROUP - 1))] =
                    __float2half_rn(v);
        }
    }
}

template <int MODE>
static void launch_rows(cuda_backend *cb, const float *x, const float *aux, float eps, int32_t rows,
                        int32_t dim, be_act *a)
{
    cuda_actq *aq = (cuda_actq *)a->q;
    const int32_t hs = (int32_t)act_f16_stride(dim);
    float *y = MODE == ROW_COPY ? NULL : a->x;
    bool batch = true;
    const dim3 grid(
        rows,
        MODE == ROW_NORM ? 1 : elem_ctas(cb, rows, (hs + PROD_THREADS - 1) / PROD_THREADS, &batch));
    /* (rmsnorm always batches: no row_kernel<ROW_NORM, 1> is built) */
    constexpr int B1 = MODE == ROW_NORM ? ELEM_BATCH : 1;
    cuda_launch(cb, batch ? row_kernel<MODE, ELEM_BATCH> : row_kernel<MODE, B1>, grid, PROD_THREADS,
                0, x, aux, eps, dim, y, aq->h, hs);
    a->rows = rows;
    a->cols = dim;
    a->q_valid = true;
}

void launch_rmsnorm(cuda_backend *cb, const float *x, const float *w, float eps, int32_t rows,
                    int32_t dim, be_act *a)
{
    launch_rows<ROW_NORM>(cb, x, w, eps, rows, dim, a);
    cuda_check_launch(cb, "rmsnorm");
}

void launch_swiglu(cuda_backend *cb, const float *g, const float *u, int32_t rows, int32_t n,
                   be_act *a)
{
    launch_rows<ROW_SWIGLU>(cb, g, u, 0.0f, rows, n, a);
    cuda_check_launch(cb, "swiglu");
}

void launch_act_quantize(cuda_backend *cb, be_act *a)
{
    launch_rows<ROW_COPY>(cb, a->x, NULL, 0.0f, a->rows, a->cols, a);
    cuda_check_launch(cb, "quantize activations");
}

/* ---- rope: theta by repeated products as the CPU; pair i is values
 * step*i and step*i + offset (adjacent pairs: 2, 1; halves: 1, n_dims/2).
 * A thread per pair of B heads of one row (heads ty, ty + blockDim.y, ...
 * of its CTA's), whose theta chain (i dependent products) and sines serve
 * them all: its 2 x B loads go out together, and their
 * stores overlap every other thread's.  A CTA per row with threads looping
 * over the pairs, as before round 09, paid a DRAM round trip per pair in
 * series (the store of one pair may alias the next one's load): 17 us a
 * decode row at 7B under ncu, for 4,096 pairs (docs/perf/09); a thread per
 * (pair, head) left one pair's loads in flight a thread and recomputed the
 * chain for every head (17.8 us a layer at 512 rows, docs/perf/13). ---- */

template <int B>
__global__ void rope_kernel(float *q, float *k, const int32_t *pos, int32_t n_head,
                            int32_t n_head_kv, int32_t hd, int32_t step, int32_t offset,
                            float theta_scale, const float *factors)
{
    pdl_begin();
    const int64_t r = blockIdx.x;
    const int32_t i = threadIdx.x, heads = n_head + n_head_kv;
    const int32_t head0 = (int32_t)(blockIdx.y * blockDim.y * B + threadIdx.y);
    if (head0 >= heads)
        return;
    float *a[B], x0[B], x1[B];
#pragma unroll
    for (int j = 0; j < B; j++) {
        const int32_t head = head0 + j * (int32_t)blockDim.y;
        a[j] = NULL;
        if (head < heads) {
            float *x = head < n_head ? q + (r * n_head + head) * hd
                                     : k + (r * n_head_kv + (head - n_head)) * hd;
            a[j] = x + step * i;
            x0[j] = a[j][0];
            x1[j] = a[j][offset];
        }
    }
    float theta = (float)pos[r];
    for (int32_t j = 0; j < i; j++)
        theta = __fmul_rn(theta, theta_scale);
    if (factors)
        theta = __fdiv_rn(theta, factors[i]);
    const float c = cosf(theta), s = sinf(theta);
#pragma unroll
    for (int j = 0; j < B; j++)
        if (a[j]) {
            a[j][0] = __fsub_rn(__fmul_rn(x0[j], c), __fmul_rn(x1[j], s));
            a[j][offset] = __fadd_rn(__fmul_rn(x0[j], s), __fmul_rn(x1[j], c));
        }
}

void launch_rope(cuda_backend *cb, float *q, float *k, const int32_t *pos, int32_t rows,
                 const be_attn_shape *sh, const be_rope *rope, float theta_scale)
{
    const bool halves = rope->mode == BE_ROPE_HALVES;
    const int32_t pairs = rope->n_dims / 2, heads = sh->n_head + sh->n_head_kv;
    if (rows > 0 && pairs > 0) {
        /* pairs <= 128 (head dims <= 256), so a CTA holds at least 2 B
         * heads */
        const int32_t per_cta = pairs < ROW_THREADS ? ROW_THREADS / pairs : 1;
        bool batch;
        const dim3 grid(rows, elem_ctas(cb, rows, (heads + per_cta - 1) / per_cta, &batch));
        cuda_launch(cb, batch ? rope_kernel<ELEM_BATCH> : rope_kernel<1>, grid,
                    dim3(pairs, per_cta), 0, q, k, pos, sh->n_head, sh->n_head_kv, sh->head_dim,
                    halves ? 1 : 2, halves ? rope->n_dims / 2 : 1, theta_scale, rope->factors_dev);
    }
    cuda_check_launch(cb, "rope");
}

/* ---- kv_write: f32 rows into the cache at their slots.  f16: each thread
 * converts 8 values of k and of v with 16-byte loads and stores, so a
 * 4096-wide decode row is one round trip of 512 threads instead of 16 in
 * series (17 ... 14 us under ncu before, docs/perf/09); rows of a width
 * that is not a multiple of 8 take one value a thread.  q8_0: a thread per
 * value of 1 or ELEM_BATCH blocks, a warp per block. ---- */

#define KV_VEC 8

__global__ void kv_write_kernel(__half *__restrict__ kc, __half *__restrict__ vc, int64_t layer_off,
                                int32_t kv_dim, const float *__restrict__ k,
                                const float *__restrict__ v, const int32_t *slot)
{
    pdl_begin();
    const int64_t r = blockIdx.x;
    const int64_t dst = layer_off + (int64_t)slot[r] * kv_dim;
    const int32_t e = (int32_t)(blockIdx.y * blockDim.x + threadIdx.x) * KV_VEC;
    if (kv_dim % KV_VEC == 0) {
        if (e >= kv_dim)
            return;
        const float4 *ks = (const float4 *)(k + r * kv_dim + e),
                     *vs = (const float4 *)(v + r * kv_dim + e);
        const float4 k0 = ks[0], k1 = ks[1], v0 = vs[0], v1 = vs[1];
        const uint4 kh = {pack_half2(k0.x, k0.y), pack_half2(k0.z, k0.w), pack_half2(k1.x, k1.y),
                          pack_half2(k1.z, k1.w)};
        const uint4 vh = {pack_half2(v0.x, v0.y), pack_half2(v0.z, v0.w), pack_half2(v1.x, v1.y),
                          pack_half2(v1.z, v1.w)};
        *(uint4 *)(kc + dst + e) = kh;
        *(uint4 *)(vc + dst + e) = vh;
        return;
    }
    for (int32_t i = e; i < min(kv_dim, e + KV_VEC); i++) {
        kc[dst + i] = __float2half_rn(k[r * kv_dim + i]);
        vc[dst + i] = __float2half_rn(v[r * kv_dim + i]);
    }
}

/* Value x of a 32-value block held by the warp's lane of the same index,
 * quantized as the CPU's quant_quantize_kv_q8_0 (bit for bit: the max is
 * exact in any order and the divisions are IEEE), the scale stored by lane
 * 0. */
static __device__ __forceinline__ void kv_q8_put(float x, int8_t *q, __half *d)
{
    float amax = fabsf(x);
    const bool finite = __all_sync(0xffffffffu, isfinite(x));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    const float r = roundf(x * id);
    *q = (int8_t)(r >= -127.0f && r <= 127.0f ? r : r > 0.0f ? 127.0f : r < 0.0f ? -127.0f : 0.0f);
    if (threadIdx.x % 32 == 0)
        *d = __float2half_rn(finite ? db : NAN);
}

/* A thread per value of B blocks, a warp per block: grid (rows, kv_dim /
 * (B x ROW_THREADS) rounded up), so that a decode step's one row is CTAs
 * of one pass instead of one CTA looping over the row's blocks one
 * reduction at a time.  A thread's 2 B loads go out before its first
 * reduction (one a thread left 16 KB an SM in flight: 16.6 us a layer at
 * 512 rows, 1.5 TB/s, docs/perf/13). */
template <int B>
__global__ void kv_write_q8_kernel(int8_t *kc, int8_t *vc, __half *ks, __half *vs,
                                   int64_t layer_off, int32_t kv_dim, const float *k,
                                   const float *v, const int32_t *slot)
{
    pdl_begin();
    const int64_t r = blockIdx.x;
    const int32_t e0 = blockIdx.y * B * blockDim.x + threadIdx.x;
    if (e0 >= kv_dim) /* kv_dim % 32 == 0: whole warps leave */
        return;
    const int64_t dst = layer_off + (int64_t)slot[r] * kv_dim;
    float kx[B], vx[B];
#pragma unroll
    for (int j = 0; j < B; j++) {
        const int32_t e = e0 + j * (int32_t)blockDim.x;
        kx[j] = vx[j] = 0.0f;
        if (e < kv_dim) {
            kx[j] = k[r * kv_dim + e];
            vx[j] = v[r * kv_dim + e];
        }
    }
#pragma unroll
    for (int j = 0; j < B; j++) {
        const int32_t e = e0 + j * (int32_t)blockDim.x;
        if (e >= kv_dim) /* the same for the warp's 32 lanes */
            break;
        kv_q8_put(kx[j], kc + dst + e, ks + (dst + e) / QK8_0);
        kv_q8_put(vx[j], vc + dst + e, vs + (dst + e) / QK8_0);
    }
}

void launch_kv_write(cuda_backend *cb, be_kv *kv, int32_t layer, const float *k, const float *v,
                     const int32_t *slot, int32_t rows)
{
    static_assert(ROW_THREADS % 32 == 0, "kv_write_q8_kernel: whole warps per block");
    const int64_t layer_off = (int64_t)layer * kv->n_blocks * kv->block_size * kv->kv_dim;
    if (rows > 0 && kv->type == BE_KV_Q8_0) {
        bool batch;
        const dim3 grid(rows,
                        elem_ctas(cb, rows, (kv->kv_dim + ROW_THREADS - 1) / ROW_THREADS, &batch));
        cuda_launch(cb, batch ? kv_write_q8_kernel<ELEM_BATCH> : kv_write_q8_kernel<1>, grid,
                    ROW_THREADS, 0, (int8_t *)kv->k, (int8_t *)kv->v, kv->ks, kv->vs, layer_off,
                    kv->kv_dim, k, v, slot);
    } else if (rows > 0) {
        const int32_t threads = (kv->kv_dim + KV_VEC - 1) / KV_VEC;
        const dim3 grid(rows, (threads + ROW_THREADS - 1) / ROW_THREADS);
        cuda_launch(cb, kv_write_kernel, grid, ROW_THREADS, 0, (__half *)kv->k, (__half *)kv->v,
                    layer_off, kv->kv_dim, k, v, slot);
    }
    cuda_check_launch(cb, "kv_write");
}
