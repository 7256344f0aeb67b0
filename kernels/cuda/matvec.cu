/* matvec: the decode matmul, out (R x n) = act (R x k) . W^T for R <= 8.
 *
 * Layout invariants: a warp owns NW consecutive weight rows; its lanes walk
 * the row in 16-byte chunks of the main quant plane (lane, lane + 32, ...),
 * so a warp's loads of one row are contiguous and every load is 16 bytes.
 * A q4_K/q5_K/q6_K chunk c (0..7) of a 256-block holds the nibbles of values
 * 64(c/2) + 16(c%2) + [0,16) (low) and the same + 32 (high): the matching
 * q8_1 activations are two 16-byte loads, in blocks 2(c/2) and 2(c/2) + 1.
 * A q8_0 chunk is half a 32-block; f16/f32 chunks meet the f32 rows.
 * Integer products are exact (dp4a); each chunk adds its float terms to a
 * per-lane sum in chunk order, then a fixed butterfly reduces the warp, so
 * a row's result never depends on R, NW or which other rows are present.
 * Shared memory: none (activations are re-read through L1: a 4096-wide
 * q8_1 row is 4.5 KB).
 *
 * Groups: at 1-2 activation rows, up to MV_GROUP_MAX quantized weights of
 * one type and width that read the same activations (q and k; gate and up)
 * run as one launch, their blocks end to end, each row computed exactly as
 * alone.  One launch instead of two or three, and a 4096-row matvec's 0.78
 * of a wave no longer ends with most SMs idle: the next weight fills them.
 * At 4-8 rows a launch is long enough that its tail matters less.
 *
 * Roofline (batch 1, 7B q4_K): 4096 x 4096 reads 9.4 MB, 2.2 us at the
 * 4.24 TB/s copy bandwidth; 11008 x 4096 reads 25.4 MB, 6.0 us.  At R = 8
 * a 16-byte q4_K chunk costs 64 dp4a: still below the issue rate that the
 * weight stream leaves per SM.  Measured on the H200 at one row: 7.4 us
 * (30%) and 14.4 us (42%); the 32000-row output 36 us (70%): too few warps
 * hold loads on the smaller shapes (docs/perf/02). */
#include "kernels/cuda/blocks.cuh"

#include <stdint.h>

#define MV_WARPS 4
#define MV_NW 2 /* weight rows per warp: the activation loads serve both */
#define MV_U 2  /* chunks per lane in flight before the first use (4 measured
                 * slower for q6_K: docs/perf/01) */
/* Resident blocks per SM asked of ptxas at 1-2 rows: left alone it gives the
 * 1-row q4_K kernel 95 registers (5 blocks, 20 warps per SM), and 109 to
 * its group variant (4 blocks); asked for 6 it fits both in <= 80 without
 * spilling, and warps holding loads are what bounds these shapes (02).
 * q5_K's fifth bits need more: 6 blocks spill 104 bytes, 5 none. */
#define MV_MIN_BLOCKS(T, R) \
    ((R) == 1 ? ((T) == QUANT_Q5_K ? 5 : 6) : (R) == 2 ? 4 : (R) == 4 ? 3 : 2)

static __device__ __forceinline__ int dot4x4(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint4 x)
{
    int s = __dp4a((int)a0, (int)x.x, 0);
    s = __dp4a((int)a1, (int)x.y, s);
    s = __dp4a((int)a2, (int)x.z, s);
    return __dp4a((int)a3, (int)x.w, s);
}

/* The raw bytes one lane needs for one chunk of one weight row: the
 * k-quants' chunks (blocks.cuh), or half a q8_0 block. */
/* Tables of one-line structs, laid out by hand: */
/* clang-format off */
struct chunk_q8 { uint4 qs; float d; };

template <int T> struct chunk_of : kquant_chunk<T> {};
template <> struct chunk_of<QUANT_Q8_0> { typedef chunk_q8 type; };
/* clang-format on */

/* Chunk cc of a row: chunk cc % 8 of super-block cc / 8 (blocks.cuh). */
template <typename C>
static __device__ __forceinline__ void load_chunk(const be_weight &w, int64_t row, int cc, C *f)
{
    load_chunk(w, row, cc / 8, (cc % 8) / 2, cc % 2, f);
}

static __device__ __forceinline__ void load_chunk(const be_weight &w, int64_t row, int cc,
                                                  chunk_q8 *f)
{
    const int64_t b = row * w.nb + cc / 2;
    f->qs = __ldg((const uint4 *)(w.q + b * 32 + 16 * (cc % 2)));
    f->d = __half2float(w.d[b]);
}

/* The activation bytes of chunk cc of one activation row. */
struct act_chunk { uint4 x0, x1; float2 ds0, ds1; };

template <int T>
static __device__ __forceinline__ act_chunk load_act(const int8_t *aq, const float2 *ads, int cc)
{
    act_chunk a;
    if (T == QUANT_Q8_0) {
        a.x0 = __ldg((const uint4 *)(aq + 16 * cc));
        a.ds0 = __ldg(ads + cc / 2);
        a.x1 = a.x0;
        a.ds1 = a.ds0;
    } else {
        const int c = cc % 8, off = (cc / 8) * QK_K + 64 * (c / 2) + 16 * (c % 2);
        a.x0 = __ldg((const uint4 *)(aq + off));
        a.x1 = __ldg((const uint4 *)(aq + off + 32));
        a.ds0 = __ldg(ads + (cc / 8) * 8 + 2 * (c / 2));
        a.ds1 = __ldg(ads + (cc / 8) * 8 + 2 * (c / 2) + 1);
    }
    return a;
}

/* Per-chunk weight terms that do not depend on the activation row. */
struct chunk_terms { float f0, f1, g0, g1; uint4 lo, hi; };

/* The scale and min terms of a q4_K/q5_K chunk (header hdr). */
static __device__ __forceinline__ chunk_terms k4_terms(const uint4 &hdr, int cc)
{
    chunk_terms t;
    const int j = (cc % 8) / 2;
    const float d = __half2float(__ushort_as_half((unsigned short)(hdr.x & 0xffffu)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(hdr.x >> 16)));
    int sc0, m0, sc1, m1;
    k4_scale_min(2 * j, hdr.y, hdr.z, hdr.w, &sc0, &m0);
    k4_scale_min(2 * j + 1, hdr.y, hdr.z, hdr.w, &sc1, &m1);
    t.f0 = d * (float)sc0;
    t.f1 = d * (float)sc1;
    /* The min term needs the whole 32-block's sum: the even chunk adds it. */
    const bool even = cc % 2 == 0;
    t.g0 = even ? dmin * (float)m0 : 0.0f;
    t.g1 = even ? dmin * (float)m1 : 0.0f;
    return t;
}

static __device__ __forceinline__ chunk_terms terms(const chunk_q4k &f, int cc)
{
    chunk_terms t = k4_terms(f.hdr, cc);
    const uint32_t m = 0x0f0f0f0fu;
    t.lo = make_uint4(f.qs.x & m, f.qs.y & m, f.qs.z & m, f.qs.w & m);
    t.hi = make_uint4((f.qs.x >> 4) & m, (f.qs.y >> 4) & m, (f.qs.z >> 4) & m, (f.qs.w >> 4) & m);
    return t;
}

/* Four 5-bit quants: nibbles of qs at bit `nib`, fifth bits of qh at bit b. */
static __device__ __forceinline__ uint32_t q5_word(uint32_t qs, uint32_t qh, int nib, int b)
{
    return ((qs >> nib) & 0x0f0f0f0fu) | (((qh >> b) & 0x01010101u) << 4);
}

static __device__ __forceinline__ chunk_terms terms(const chunk_q5k &f, int cc)
{
    chunk_terms t = k4_terms(f.hdr, cc);
    const int b = 2 * ((cc % 8) / 2); /* sub-block 2j's bit; 2j + 1's is next */
    t.lo = make_uint4(q5_word(f.qs.x, f.qh.x, 0, b), q5_word(f.qs.y, f.qh.y, 0, b),
                      q5_word(f.qs.z, f.qh.z, 0, b), q5_word(f.qs.w, f.qh.w, 0, b));
    t.hi = make_uint4(q5_word(f.qs.x, f.qh.x, 4, b + 1), q5_word(f.qs.y, f.qh.y, 4, b + 1),
                      q5_word(f.qs.z, f.qh.z, 4, b + 1), q5_word(f.qs.w, f.qh.w, 4, b + 1));
    return t;
}

static __device__ __forceinline__ uint32_t q6_word(uint32_t ql, uint32_t qh, int i)
{
    return __vsub4((ql & 0x0f0f0f0fu) | (((qh >> (2 * i)) & 0x03030303u) << 4), 0x20202020u);
}

static __device__ __forceinline__ chunk_terms terms(const chunk_q6k &f, int cc)
{
    chunk_terms t;
    const int h = cc % 2;
    t.f0 = f.d * (float)(int8_t)(f.sc >> (8 * h));
    t.f1 = f.d * (float)(int8_t)(f.sc >> (16 + 8 * h));
    t.g0 = t.g1 = 0.0f;
    t.lo = make_uint4(q6_word(f.ql.x, f.qh.x, 0), q6_word(f.ql.y, f.qh.x, 1),
                      q6_word(f.ql.z, f.qh.x, 2), q6_word(f.ql.w, f.qh.x, 3));
    t.hi = make_uint4(q6_word(f.ql.x >> 4, f.qh.y, 0), q6_word(f.ql.y >> 4, f.qh.y, 1),
                      q6_word(f.ql.z >> 4, f.qh.y, 2), q6_word(f.ql.w >> 4, f.qh.y, 3));
    return t;
}

static __device__ __forceinline__ chunk_terms terms(const chunk_q8 &f, int)
{
    chunk_terms t;
    t.f0 = f.d;
    t.f1 = t.g0 = t.g1 = 0.0f;
    t.lo = f.qs;
    t.hi = make_uint4(0, 0, 0, 0);
    return t;
}

template <int T>
static __device__ __forceinline__ float chunk_dot(const chunk_terms &t, const act_chunk &a)
{
    const int i0 = dot4x4(t.lo.x, t.lo.y, t.lo.z, t.lo.w, a.x0);
    if (T == QUANT_Q8_0)
        return t.f0 * (a.ds0.x * (float)i0);
    const int i1 = dot4x4(t.hi.x, t.hi.y, t.hi.z, t.hi.w, a.x1);
    const float v = t.f0 * (a.ds0.x * (float)i0) + t.f1 * (a.ds1.x * (float)i1);
    return T == QUANT_Q4_K || T == QUANT_Q5_K ? v - (t.g0 * a.ds0.y + t.g1 * a.ds1.y) : v;
}

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The first of this warp's MV_NW weight rows, block b of its weight. */
static __device__ __forceinline__ int64_t warp_row0(unsigned b)
{
    return ((int64_t)b * MV_WARPS + threadIdx.x / 32) * MV_NW;
}

/* Rows past the end are computed on a clamped copy and never stored. */
template <int R>
static __device__ __forceinline__ void store_rows(float (*acc)[R], int64_t row0, int64_t n,
                                                  int m, float *out, bool accumulate)
{
#pragma unroll
    for (int wr = 0; wr < MV_NW; wr++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float v = warp_sum(acc[wr][r]);
            if (threadIdx.x % 32 == 0 && row0 + wr < n && r < m) {
                float *o = out + (int64_t)r * n + row0 + wr;
                *o = accumulate ? *o + v : v;
            }
        }
}

/* This warp's rows of w from row0 on, against the q8_1 activations. */
template <int T, int R>
static __device__ __forceinline__ void matvec_q_rows(const be_weight &w, int64_t row0,
                                                     const int8_t *aq, const float2 *ads, int m,
                                                     float *out, bool accumulate)
{
    typedef typename chunk_of<T>::type chunk;
    const int lane = threadIdx.x % 32;
    const int64_t n = w.rows, k = w.cols;
    const int nch = (int)(T == QUANT_Q8_0 ? w.nb * 2 : w.nb * 8);
    float acc[MV_NW][R] = {};
    for (int base = lane; base < nch; base += 32 * MV_U) {
        chunk f[MV_U][MV_NW];
#pragma unroll
        for (int u = 0; u < MV_U; u++) {
            const int cc = base + 32 * u;
            if (cc < nch)
#pragma unroll
                for (int wr = 0; wr < MV_NW; wr++)
                    load_chunk(w, row0 + wr < n ? row0 + wr : n - 1, cc, &f[u][wr]);
        }
#pragma unroll
        for (int u = 0; u < MV_U; u++) {
            const int cc = base + 32 * u;
            if (cc >= nch)
                break;
            chunk_terms t[MV_NW];
#pragma unroll
            for (int wr = 0; wr < MV_NW; wr++)
                t[wr] = terms(f[u][wr], cc);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int ar = r < m ? r : m - 1;
                const act_chunk a = load_act<T>(aq + ar * k, ads + ar * (k / 32), cc);
#pragma unroll
                for (int wr = 0; wr < MV_NW; wr++)
                    acc[wr][r] += chunk_dot<T>(t[wr], a);
            }
        }
    }
    store_rows<R>(acc, row0, n, m, out, accumulate);
}

template <int T, int R>
__global__ void __launch_bounds__(MV_WARPS * 32, MV_MIN_BLOCKS(T, R))
matvec_q_kernel(be_weight w, const int8_t *aq, const float2 *ads, int m, float *out,
                bool accumulate)
{
    matvec_q_rows<T, R>(w, warp_row0(blockIdx.x), aq, ads, m, out, accumulate);
}

/* A group: blocks [first[i], first[i + 1]) work on weight i.  Selects, not
 * an indexed load, keep the group in the parameter bank. */
static_assert(MV_GROUP_MAX == 3, "matvec_q_group_kernel selects among exactly three weights");
template <int T, int R>
__global__ void __launch_bounds__(MV_WARPS * 32, MV_MIN_BLOCKS(T, R))
matvec_q_group_kernel(mv_group g, const int8_t *aq, const float2 *ads, int m, bool accumulate)
{
    const unsigned b = blockIdx.x;
    const int i = (b >= g.first[1]) + (b >= g.first[2]);
    const be_weight &w = i == 0 ? g.w[0] : i == 1 ? g.w[1] : g.w[2];
    float *out = i == 0 ? g.out[0] : i == 1 ? g.out[1] : g.out[2];
    const unsigned first = i == 0 ? 0u : i == 1 ? g.first[1] : g.first[2];
    matvec_q_rows<T, R>(w, warp_row0(b - first), aq, ads, m, out, accumulate);
}

/* f16 / f32 weights against the f32 rows: 16 bytes of weights per chunk. */
template <int T, int R>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_f_kernel(be_weight w, const float *x, int m, float *out, bool accumulate)
{
    constexpr int PER = T == QUANT_F16 ? 8 : 4; /* values per chunk */
    const int lane = threadIdx.x % 32;
    const int64_t n = w.rows, k = w.cols, row0 = warp_row0(blockIdx.x);
    const int nch = (int)(k / PER);
    float acc[MV_NW][R] = {};
    for (int cc = lane; cc < nch; cc += 32) {
        float wv[MV_NW][PER];
#pragma unroll
        for (int wr = 0; wr < MV_NW; wr++) {
            const int64_t row = row0 + wr < n ? row0 + wr : n - 1;
            const uint4 raw = __ldg((const uint4 *)(w.q + (row * k + (int64_t)cc * PER) *
                                                              (T == QUANT_F16 ? 2 : 4)));
            const uint32_t word[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if constexpr (T == QUANT_F16) {
                    wv[wr][2 * i] = __half2float(__ushort_as_half((unsigned short)(word[i] & 0xffffu)));
                    wv[wr][2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(word[i] >> 16)));
                } else {
                    wv[wr][i] = __uint_as_float(word[i]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int ar = r < m ? r : m - 1;
            const float4 *xp = (const float4 *)(x + ar * k + (int64_t)cc * PER);
            float xv[PER];
#pragma unroll
            for (int i = 0; i < PER / 4; i++) {
                const float4 q = __ldg(xp + i);
                xv[4 * i] = q.x;
                xv[4 * i + 1] = q.y;
                xv[4 * i + 2] = q.z;
                xv[4 * i + 3] = q.w;
            }
#pragma unroll
            for (int wr = 0; wr < MV_NW; wr++) {
                float s = 0.0f;
#pragma unroll
                for (int i = 0; i < PER; i++)
                    s = __fmaf_rn(wv[wr][i], xv[i], s);
                acc[wr][r] += s;
            }
        }
    }
    store_rows<R>(acc, row0, n, m, out, accumulate);
}

static unsigned mv_blocks(const be_weight *w)
{
    return (unsigned)((w->rows + MV_WARPS * MV_NW - 1) / (MV_WARPS * MV_NW));
}

template <int R>
static void launch_r(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                     bool accumulate)
{
    const cuda_actq *aq = (const cuda_actq *)in->q;
    const unsigned blocks = mv_blocks(w);
    const int m = in->rows;
    cudaStream_t s = cb->stream;
    const bool known = with_weight_type(w->type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if constexpr (T == QUANT_F16 || T == QUANT_F32)
            matvec_f_kernel<T, R><<<blocks, MV_WARPS * 32, 0, s>>>(*w, in->x, m, out, accumulate);
        else
            matvec_q_kernel<T, R><<<blocks, MV_WARPS * 32, 0, s>>>(*w, aq->qs, aq->ds, m, out,
                                                                  accumulate);
    });
    if (!known) {
        cuda_fail(cb, "matmul: type %s", quant_type_name(w->type));
        return;
    }
    cuda_check_launch(cb, "matmul (matvec)");
}

template <int R>
static void launch_group_r(cuda_backend *cb, const mv_group &g, unsigned blocks,
                           const be_act *in)
{
    const cuda_actq *aq = (const cuda_actq *)in->q;
    cudaStream_t s = cb->stream;
    bool launched = false; /* groups are of q8_1-activation types (matvec_groups) */
    with_weight_type(g.w[0].type, [&](auto t) {
        constexpr int T = decltype(t)::value;
        if constexpr (T != QUANT_F16 && T != QUANT_F32) {
            matvec_q_group_kernel<T, R><<<blocks, MV_WARPS * 32, 0, s>>>(g, aq->qs, aq->ds,
                                                                        in->rows, false);
            launched = true;
        }
    });
    if (!launched) {
        cuda_fail(cb, "matmul group: type %s", quant_type_name(g.w[0].type));
        return;
    }
    cuda_check_launch(cb, "matmul (matvec group)");
}

bool matvec_groups(const be_weight *w, const be_act *in)
{
    const bool float_weights = w->type == QUANT_F16 || w->type == QUANT_F32;
    return in->rows <= 2 && !float_weights && with_weight_type(w->type, [](auto) {});
}

void launch_matvec_group(cuda_backend *cb, int n, const be_weight *const *w, const be_act *in,
                         float *const *out)
{
    mv_group g = {};
    unsigned blocks = 0;
    for (int i = 0; i < MV_GROUP_MAX; i++) {
        g.first[i] = i < n ? blocks : UINT32_MAX;
        if (i < n) {
            g.w[i] = *w[i];
            g.out[i] = out[i];
            blocks += mv_blocks(w[i]);
        }
    }
    if (in->rows <= 1)
        launch_group_r<1>(cb, g, blocks, in);
    else
        launch_group_r<2>(cb, g, blocks, in);
}

/* R is the row count rounded up to 1, 2, 4 or 8: extra rows are clamped
 * copies (see store_rows), and results do not depend on R. */
static_assert(MV_MAX_ROWS <= 8, "launch_matvec has kernels for at most 8 rows");
void launch_matvec(cuda_backend *cb, const be_weight *w, const be_act *in, float *out,
                   bool accumulate)
{
    if (in->rows <= 1)
        launch_r<1>(cb, w, in, out, accumulate);
    else if (in->rows <= 2)
        launch_r<2>(cb, w, in, out, accumulate);
    else if (in->rows <= 4)
        launch_r<4>(cb, w, in, out, accumulate);
    else
        launch_r<8>(cb, w, in, out, accumulate);
}
