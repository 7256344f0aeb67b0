/* attention: causal attention of each batch row over its sequence's paged
 * KV cache, f16 or q8_0 (every kernel is built for both: Q8 below).
 *
 * A q8_0 cache holds int8 values and an f16 scale per 32 values of a row
 * (cuda_internal.h); a value is q * d.  The int8 values become exact halves
 * by byte permutes into the mantissa of 1024 (q8x4_to_half2): an
 * int-to-float conversion runs at a quarter of the rate, and at 8
 * conversions per 8 bytes it made the decode kernel compute-bound
 * (checkpoint 1: slower than f16 at 64 and 256 sequences).
 * The decode kernel gives a lane 16 values (one 16-byte load and their
 * block's scale) where it gives it 8 f16 values, so a warp step covers
 * twice the keys with the same loads; it sums q . k over the lane's values
 * and applies the scale once, and weighs V by p * d.  (The first version
 * kept f16's 8 values a lane: as many loads in flight, each half as wide.)  The tensor-core kernel
 * copies the int8 tiles with cp.async into two stages and, once a stage has landed, turns it into
 * the f16 K and V tiles (q * d in one f16 multiply, rounded once; one f16 tile each instead of two:
 * smem 84,992 B at D = 128).  The plain kernel reads q * d in f32 as the CPU does.
 *
 * The tensor-core kernel (head dims 16, 32, 64, 96 for Phi-3-mini, 128) is
 * flash attention with mma.sync m16n8k16: a CTA of 4 warps takes one query
 * tile (the rows of one sequence whose positions fall in one 64-aligned
 * window: a decode row is a tile of 1, a 512-row prompt chunk 8 tiles of 64)
 * for one head, and streams the sequence's keys and values in tiles of 64
 * through shared memory (cp.async, two stages, block table lookups per key),
 * keeping an online softmax in registers (S = Q K^T, P in f16, O += P V, f32
 * sums).  Where a batch holds a sequence of ATT_ROWS128_KEYS keys or more,
 * D = 128 tiles are 128-aligned windows taken by 8 warps, so that each K and
 * V tile copied, and unpacked from q8_0, serves twice the queries (the 8k
 * chunk of a 7B prompt 684 -> 577 us, docs/perf/13).  The tile does not
 * change a row's bits: a warp stops at the key tile of its last row, so a
 * row meets the key tiles it meets in a 64-row tile whenever the warp's
 * rows share a 64-block of positions (every window but a chunk's unaligned
 * first one); a tile it meets beyond that is wholly masked for it, which
 * leaves its max, sum and O as they were (corr = exp2(0) = 1, p = 0,
 * O + 0 x V = O for finite V).
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
 * 46,080 B at D = 64; a 128-row Q tile adds 17,408 B at D = 128.
 *
 * Roofline: decode reads each cached key and value once per (row, head):
 * 0.5 MB per token of context at 7B (32 heads x 128 x 2 x 2 B), so B = 64
 * sequences at 576 tokens read 18.9 GB, 4.5 ms at 4.24 TB/s (measured: 60%
 * of that, 2 CTAs of 4 warps per SM, docs/perf/02); a q8_0 cache 0.27 MB a
 * token, 10.0 GB, 2.4 ms (docs/perf/08).  Prefill of
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
 * for HG query heads sharing a KV head: 16-byte loads, D/8 lanes per key
 * (D/16 for q8_0),
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

#include <limits.h>
#include <math.h>

#define ATT_TILE 64
/* Batches whose longest sequence has this many keys take 128-row query
 * tiles at D = 128 (8 warps). */
#define ATT_ROWS128_KEYS 1024

struct attn_args {
    const void *kc, *vc;   /* this layer's cached values: __half, or int8_t (q8_0) */
    const __half *ks, *vs; /* this layer's q8_0 scales, value e's at e / 32; else NULL */
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

/* Value e (an index into the layer's plane) of the cache.  A q8_0 value is
 * q * d, exact in f32 as on the CPU. */
template <bool Q8>
static __device__ __forceinline__ float kv_at(const void *plane, const __half *scales, int64_t e)
{
    if constexpr (Q8)
        return (float)((const int8_t *)plane)[e] * __half2float(scales[e / QK8_0]);
    else
        return __half2float(((const __half *)plane)[e]);
}

/* Four int8 values (the bytes of w) as exact halves, (q0, q1) and (q2, q3):
 * each byte, biased to unsigned, is put by a byte permute into the mantissa
 * of 1024.0 (0x64XX, whose ulp is 1; the trick of numerics.cuh's
 * bytes_to_half2, with the pairs in order), then 1152 = 1024 + 128 comes off
 * exactly.  Per 4 values: an xor, 2 permutes, 2 f16 subtracts, where an
 * int-to-float conversion would take 4 instructions at a quarter rate. */
static __device__ __forceinline__ void q8x4_to_half2(uint32_t w, __half2 *lo, __half2 *hi)
{
    const uint32_t x = w ^ 0x80808080u;
    const uint32_t a = __byte_perm(x, 0x64646464u, 0x5140), b = __byte_perm(x, 0x64646464u, 0x7362);
    const __half2 bias = __float2half2_rn(1152.0f);
    *lo = __hsub2(*(const __half2 *)&a, bias);
    *hi = __hsub2(*(const __half2 *)&b, bias);
}

/* A lane's values of a key, 16 bytes: 8 f16 values, or 16 q8_0 values
 * (e a multiple of 16, so within one block) and their block's scale; the
 * raw bytes, loaded before they are unpacked so that many loads fly. */
template <bool Q8>
struct kv_chunk {
    uint4 v;
};
template <>
struct kv_chunk<true> {
    uint4 v;
    __half d;
};

template <bool Q8>
static __device__ __forceinline__ kv_chunk<Q8> kv_load(const void *plane, const __half *scales,
                                                       int64_t e)
{
    kv_chunk<Q8> c;
    if constexpr (Q8) {
        c.v = __ldg((const uint4 *)((const int8_t *)plane + e));
        c.d = scales[e / QK8_0];
    } else {
        c.v = __ldg((const uint4 *)((const __half *)plane + e));
    }
    return c;
}

/* Eight int8 values times d, rounded to f16 (the tile kernel's operands):
 * q is an exact half, so the f16 product is q * d rounded once. */
static __device__ __forceinline__ uint4 q8_to_f16x8(uint2 q, __half2 d)
{
    uint32_t h[4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        __half2 lo, hi;
        q8x4_to_half2(j ? q.y : q.x, &lo, &hi);
        const __half2 a = __hmul2(lo, d), b = __hmul2(hi, d);
        h[2 * j] = *(const uint32_t *)&a;
        h[2 * j + 1] = *(const uint32_t *)&b;
    }
    return make_uint4(h[0], h[1], h[2], h[3]);
}

/* A chunk's values as f32 (VPL<Q8> of them): f16 values as they are;
 * q8_0 values as the integers q (exact), their scale in *d for the caller
 * to apply once per product (the f16 path never multiplies, so its bits are
 * what they were). */
template <bool Q8>
constexpr int kv_vpl = Q8 ? 16 : 8;

template <bool Q8>
static __device__ __forceinline__ void kv_unpack(const kv_chunk<Q8> &c, float *f, float *d)
{
    if constexpr (Q8) {
        *d = __half2float(c.d);
        const uint32_t w[4] = {c.v.x, c.v.y, c.v.z, c.v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2 lo, hi;
            q8x4_to_half2(w[j], &lo, &hi);
            const float2 a = __half22float2(lo), b = __half22float2(hi);
            f[4 * j] = a.x, f[4 * j + 1] = a.y, f[4 * j + 2] = b.x, f[4 * j + 3] = b.y;
        }
    } else {
        *d = 1.0f;
        const __half2 *h2 = (const __half2 *)&c.v;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 v = __half22float2(h2[j]);
            f[2 * j] = v.x;
            f[2 * j + 1] = v.y;
        }
    }
}

/* f16: Q (16 W rows), 2 x K, 2 x V tiles; q8_0: Q, K, V tiles and the int8
 * K and V tiles of two stages. */
template <int D, bool Q8, int W>
static constexpr size_t tc_smem(void)
{
    return Q8 ? (size_t)(16 * W + 2 * ATT_TILE) * (D + 8) * sizeof(__half) +
                    (size_t)4 * ATT_TILE * D
              : (size_t)(16 * W + 4 * ATT_TILE) * (D + 8) * sizeof(__half);
}

/* W warps, of 16 query rows each */
template <int D, bool Q8, int W>
__global__ void __launch_bounds__(32 * W) attn_tc_kernel(attn_args p, float scale_log2)
{
    constexpr int LD = D + 8, CH = D / 8;   /* 8-value chunks per row (16 bytes of f16) */
    constexpr int KT = Q8 ? 1 : 2;          /* f16 tiles of K (and of V) */
    constexpr int QR = 16 * W, NT = 32 * W; /* query rows of the tile, threads */
    static_assert(ATT_TILE * CH % NT == 0, "the unpacking's iterations divide the tile");
    extern __shared__ __align__(16) unsigned char smem[];
    __half *sq = (__half *)smem;
    __half *sk = sq + QR * LD;                        /* [KT][64][LD] */
    __half *sv = sk + KT * ATT_TILE * LD;             /* [KT][64][LD] */
    int8_t *st = (int8_t *)(sv + KT * ATT_TILE * LD); /* q8_0: [2 stages][K, V][64][D] */
    pdl_begin();
    const int x = blockIdx.x, h = blockIdx.y;
    const int seq = p.row_seq[x], p0 = p.pos[x];
    if (x > 0 && p.row_seq[x - 1] == seq && p0 % QR != 0)
        return; /* not the first row of its tile */
    if (row_decode(p, x))
        return;
    /* a sequence's prompt rows precede its decode rows: the tile ends at the first */
    int nq = 1;
    while (nq < QR && x + nq < p.n_rows && p.row_seq[x + nq] == seq && p.pos[x + nq] % QR != 0 &&
           !row_decode(p, x + nq))
        nq++;
    const int p_last = p.pos[x + nq - 1], n_keys = p_last + 1;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int hk = h / p.group;
    const int32_t *blocks = p.btab + (int64_t)seq * p.max_blocks;

    /* Value e of key kp's head row in the layer's planes. */
    auto key_at = [&](int kp, int e) {
        return ((int64_t)blocks[kp / p.block_size] * p.block_size + kp % p.block_size) * p.kv_dim +
               (int64_t)hk * D + e;
    };
    /* Tile kt into stage buf: f16 chunks of 8 values, int8 chunks of 16. */
    auto load_kv = [&](int kt, int buf) {
        constexpr int VPC = Q8 ? 16 : 8, NCH = D / VPC;
        for (int i = tid; i < ATT_TILE * NCH; i += NT) {
            const int key = i / NCH, c = i % NCH, kp = kt * ATT_TILE + key;
            const bool ok = kp < n_keys;
            const int64_t off = ok ? key_at(kp, VPC * c) : 0;
            if constexpr (Q8) {
                int8_t *dst = st + ((buf * 2) * ATT_TILE + key) * D + VPC * c;
                cp_async16(dst, (const int8_t *)p.kc + off, ok ? 16 : 0);
                cp_async16(dst + ATT_TILE * D, (const int8_t *)p.vc + off, ok ? 16 : 0);
            } else {
                const int dst = (buf * ATT_TILE + key) * LD + VPC * c;
                cp_async16(sk + dst, (const __half *)p.kc + off, ok ? 16 : 0);
                cp_async16(sv + dst, (const __half *)p.vc + off, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };
    /* q8_0: the scales of tile kt's chunks this thread unpacks, k and v per
     * chunk, zero past the last key.  They are loaded a tile ahead, into
     * registers, so that their latency hides behind the tile's mma work
     * instead of stalling the unpacking (cp.async moves 4 bytes at least,
     * and a head's scales are 2 x D / 32 bytes, not always 4-aligned).  Kept
     * as the loaded halves until the unpacking: packing the pair where they
     * were loaded waited for the loads there (ncu: 32% of the warps' samples
     * at 8,192 keys, docs/perf/10). */
    constexpr int UNPACK_IT = ATT_TILE * CH / NT;
    __half k_scale[Q8 ? UNPACK_IT : 1], v_scale[Q8 ? UNPACK_IT : 1];
    auto load_scales = [&](int kt) {
#pragma unroll
        for (int it = 0; it < UNPACK_IT; it++) {
            const int i = tid + it * NT, key = i / CH, c = i % CH;
            const int kp = kt * ATT_TILE + key;
            k_scale[it] = v_scale[it] = __float2half(0.0f);
            if (kp < n_keys) { /* loads only: nothing here waits for them */
                const int64_t e = key_at(kp, 8 * c) / QK8_0;
                k_scale[it] = p.ks[e];
                v_scale[it] = p.vs[e];
            }
        }
    };
    /* q8_0: stage buf's tile into the f16 K and V tiles (keys past the last
     * are zero, as their bytes and scales are). */
    auto unpack_kv = [&](int buf) {
#pragma unroll
        for (int it = 0; it < UNPACK_IT; it++) {
            const int i = tid + it * NT, key = i / CH, c = i % CH;
            const int8_t *src = st + ((buf * 2) * ATT_TILE + key) * D + 8 * c;
            *(uint4 *)(sk + key * LD + 8 * c) = q8_to_f16x8(*(const uint2 *)src,
                                                            __half2half2(k_scale[it]));
            *(uint4 *)(sv + key * LD + 8 * c) = q8_to_f16x8(*(const uint2 *)(src + ATT_TILE * D),
                                                            __half2half2(v_scale[it]));
        }
    };
    load_kv(0, 0);
    if constexpr (Q8)
        load_scales(0);

    /* Q tile in f16; rows past nq are zero. */
    for (int i = tid; i < QR * D / 4; i += NT) {
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
    /* The last key tile a row of this warp meets unmasked: past it every
     * score of the warp's rows is masked, so the warp skips those tiles and
     * each row meets the key tiles it would in a 64-row tile (whose rows all
     * fall in one 64-block of positions; within the 64-block the masked
     * keys' V still meets p = 0, as it always has). */
    int last_kt = INT_MAX; /* 64-row tiles: every row's block is the tile's */
    if constexpr (QR > ATT_TILE) {
        int last = 0;
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (warp * 16 + g + 8 * r < nq)
                last = max(last, rpos[r]);
        last_kt = __reduce_max_sync(0xffffffffu, last) / ATT_TILE;
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
        if constexpr (Q8) {
            unpack_kv(buf);
            if (kt + 1 < n_tiles)
                load_scales(kt + 1);
            __syncthreads();
        }
        if (active && kt <= last_kt) { /* every warp reaches every barrier of the loop */
            const __half *tk = sk + (KT - 1) * buf * ATT_TILE * LD;
            const __half *tv = sv + (KT - 1) * buf * ATT_TILE * LD;

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
template <int D, int HG, bool Q8>
__global__ void __launch_bounds__(DEC_THREADS)
    attn_decode_kernel(attn_args p, const int32_t *rows, float scale_log2, float *part,
                       int max_split)
{
    constexpr int VPL = kv_vpl<Q8>;                      /* values per lane: 16 bytes */
    constexpr int LPK = D / VPL;                         /* lanes per key */
    constexpr int KPI = 32 / LPK;                        /* keys per warp per step */
    constexpr int STEPS = DEC_KEYS / (DEC_WARPS * KPI);  /* steps per warp */
    constexpr int BATCH = STEPS < 8 ? STEPS : 8;         /* steps whose loads fly together */
    /* q8_0 at one batch of steps: V's chunks are loaded in the K pass, not
     * after the softmax's barriers, so that their latency hides under the
     * scores, the barriers and the softmax (docs/perf/12: 489 -> 445 us at
     * 256 sequences; ptxas places the loads at the K pass's end).  The
     * registers hold both for HG <= 2; the values and their math are
     * unchanged. */
    constexpr bool V_EARLY = Q8 && STEPS == BATCH && HG <= 2;
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
    const int64_t head_off = (int64_t)(h0 / p.group) * D + cl * VPL;

    for (int i = tid; i < HG * D; i += DEC_THREADS)
        s_q[i / D][i % D] = p.q[((int64_t)x * p.n_head + h0) * D + i] * scale_log2;
    __syncthreads();
    float qr[HG][VPL];
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int j = 0; j < VPL; j++)
            qr[g][j] = s_q[g][cl * VPL + j];

    /* Each warp takes keys (step * DEC_WARPS + warp) * KPI + sub.  The loads
     * of BATCH steps are issued before any of their math (block table
     * entries first, then the 16-byte chunks), so a warp has BATCH chunks in
     * flight: with few rows in the batch there are few CTAs to hide the
     * latency behind. */
    auto load_batch = [&](const void *cache, const __half *scales, int st0,
                          kv_chunk<Q8> raw[BATCH]) {
        int64_t at[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int kp = k0 + min((st0 + i) * DEC_WARPS * KPI + warp * KPI + sub, nk - 1);
            at[i] = (int64_t)blocks[kp / p.block_size] * p.block_size + kp % p.block_size;
        }
#pragma unroll
        for (int i = 0; i < BATCH; i++)
            raw[i] = kv_load<Q8>(cache, scales, at[i] * p.kv_dim + head_off);
    };

    /* Scores: each key's LPK lanes dot 8 dims each, then sum by shuffles.
     * Keys past nk load key nk - 1 again and are not stored. */
    kv_chunk<Q8> v_early[V_EARLY ? BATCH : 1];
    for (int st0 = 0; st0 < STEPS; st0 += BATCH) {
        kv_chunk<Q8> raw[BATCH];
        load_batch(p.kc, p.ks, st0, raw);
        if constexpr (V_EARLY)
            load_batch(p.vc, p.vs, st0, v_early);
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int k = ((st0 + i) * DEC_WARPS + warp) * KPI + sub;
            float f[VPL], d;
            kv_unpack<Q8>(raw[i], f, &d);
            float acc[HG];
#pragma unroll
            for (int g = 0; g < HG; g++)
                acc[g] = 0.0f;
#pragma unroll
            for (int j = 0; j < VPL / 2; j++)
#pragma unroll
                for (int g = 0; g < HG; g++)
                    acc[g] = fmaf(qr[g][2 * j + 1], f[2 * j + 1],
                                  fmaf(qr[g][2 * j], f[2 * j], acc[g]));
            if constexpr (Q8) /* a chunk is one block: its scale once */
#pragma unroll
                for (int g = 0; g < HG; g++)
                    acc[g] *= d;
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
    float o[HG][VPL];
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int j = 0; j < VPL; j++)
            o[g][j] = 0.0f;
    for (int st0 = 0; st0 < STEPS; st0 += BATCH) {
        kv_chunk<Q8> raw[BATCH];
        if constexpr (V_EARLY) {
#pragma unroll
            for (int i = 0; i < BATCH; i++)
                raw[i] = v_early[i];
        } else {
            load_batch(p.vc, p.vs, st0, raw);
        }
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            const int k = ((st0 + i) * DEC_WARPS + warp) * KPI + sub;
            if (k >= nk)
                continue;
            float f[VPL], d;
            kv_unpack<Q8>(raw[i], f, &d);
            float pk[HG]; /* q8_0: the weight times the block's scale */
#pragma unroll
            for (int g = 0; g < HG; g++)
                pk[g] = Q8 ? s_p[g][k] * d : s_p[g][k];
#pragma unroll
            for (int j = 0; j < VPL / 2; j++)
#pragma unroll
                for (int g = 0; g < HG; g++) {
                    o[g][2 * j] = fmaf(pk[g], f[2 * j], o[g][2 * j]);
                    o[g][2 * j + 1] = fmaf(pk[g], f[2 * j + 1], o[g][2 * j + 1]);
                }
        }
    }
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int j = 0; j < VPL; j++)
#pragma unroll
            for (int off = LPK; off < 32; off <<= 1)
                o[g][j] += __shfl_xor_sync(0xffffffffu, o[g][j], off);
    if (sub == 0)
#pragma unroll
        for (int g = 0; g < HG; g++)
#pragma unroll
            for (int j = 0; j < VPL; j++)
                s_o[warp][g][cl * VPL + j] = o[g][j];
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

template <int D, int HG, bool Q8>
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
    cuda_launch(cb, attn_decode_kernel<D, HG, Q8>, grid, DEC_THREADS, 0, a, b->decode_rows_dev,
                scale_log2, part, max_split);
    if (max_split > 1)
        cuda_launch(cb, attn_decode_merge_kernel<D>, dim3(b->n_decode, a.n_head), D, 0, a,
                    b->decode_rows_dev, part, max_split);
}

/* Query heads per CTA: as many of a KV head's group as fit the registers (4). */
template <int D, bool Q8>
static void launch_decode(cuda_backend *cb, const attn_args &a, const be_attn_batch *b,
                          float scale_log2)
{
    if (a.group % 4 == 0)
        launch_decode_hg<D, 4, Q8>(cb, a, b, scale_log2);
    else if (a.group % 2 == 0)
        launch_decode_hg<D, 2, Q8>(cb, a, b, scale_log2);
    else
        launch_decode_hg<D, 1, Q8>(cb, a, b, scale_log2);
}

/* Any head dim: one warp per (row, head), as the CPU backend computes it. */
template <bool Q8>
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
        const int64_t k = at(kp);
        float s = 0.0f;
        for (int i = 0; i < D; i++)
            s = __fadd_rn(s, __fmul_rn(q[i], kv_at<Q8>(p.kc, p.ks, k + i)));
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
            acc = __fadd_rn(acc, __fmul_rn(scores[kp] * inv, kv_at<Q8>(p.vc, p.vs, at(kp) + i)));
        p.out[((int64_t)x * p.n_head + h) * D + i] = acc;
    }
}

#define PLAIN_MAX_SMEM (200 * 1024)

template <bool Q8>
static cudaError_t configure_kv(void)
{
    cudaError_t e = cudaSuccess;
    auto tc = [&](auto kernel, size_t smem) {
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem);
    };
    tc(attn_tc_kernel<128, Q8, 8>, tc_smem<128, Q8, 8>());
    tc(attn_tc_kernel<128, Q8, 4>, tc_smem<128, Q8, 4>());
    tc(attn_tc_kernel<96, Q8, 4>, tc_smem<96, Q8, 4>());
    tc(attn_tc_kernel<64, Q8, 4>, tc_smem<64, Q8, 4>());
    tc(attn_plain_kernel<Q8>, PLAIN_MAX_SMEM);
    return e;
}

cudaError_t attention_configure(void)
{
    const cudaError_t e = configure_kv<false>();
    return e == cudaSuccess ? configure_kv<true>() : e;
}

/* The tensor-core kernel of W warps: its block and shared memory from the
 * same (D, Q8, W). */
template <int D, bool Q8, int W = 4>
static void launch_tc(cuda_backend *cb, dim3 grid, const attn_args &a, float scale_log2)
{
    cuda_launch(cb, attn_tc_kernel<D, Q8, W>, grid, 32 * W, tc_smem<D, Q8, W>(), a, scale_log2);
}

/* The prompt rows of a batch (all rows but the decode rows). */
template <bool Q8>
static void launch_prompt(cuda_backend *cb, const attn_args &a, const be_attn_batch *b, float scale,
                          float scale_log2)
{
    dim3 grid(b->n_rows, a.n_head);
    switch (a.head_dim) {
    case 16: launch_tc<16, Q8>(cb, grid, a, scale_log2); break;
    case 32: launch_tc<32, Q8>(cb, grid, a, scale_log2); break;
    case 64: launch_tc<64, Q8>(cb, grid, a, scale_log2); break;
    case 96: launch_tc<96, Q8>(cb, grid, a, scale_log2); break;
    case 128:
        /* many keys: 128-row tiles, each K and V tile copied (and unpacked
         * from q8_0) serving twice the queries */
        if (b->max_seq_len >= ATT_ROWS128_KEYS)
            launch_tc<128, Q8, 8>(cb, grid, a, scale_log2);
        else
            launch_tc<128, Q8>(cb, grid, a, scale_log2);
        break;
    default: {
        /* 16 bytes of slack: ptxas merges the guarded loads of the last
         * scores into one wider load that may reach past the last one. */
        const size_t smem = (size_t)b->max_seq_len * sizeof(float) + 16;
        if (smem > PLAIN_MAX_SMEM) {
            cuda_fail(cb,
                      "attention: head dim %d takes the plain kernel, which holds at most "
                      "%d positions (%d asked)",
                      a.head_dim, PLAIN_MAX_SMEM / 4, b->max_seq_len);
            return;
        }
        cuda_launch(cb, attn_plain_kernel<Q8>, grid, 32, smem, a, scale);
    }
    }
    cuda_check_launch(cb, "attention");
}

template <bool Q8>
static void launch_kv(cuda_backend *cb, const attn_args &a, const be_attn_batch *b)
{
    const float scale = 1.0f / sqrtf((float)a.head_dim);
    const float scale_log2 = scale * 1.4426950408889634f;
    if (a.first_gen) {
        if (a.head_dim == 64)
            launch_decode<64, Q8>(cb, a, b, scale_log2);
        else
            launch_decode<128, Q8>(cb, a, b, scale_log2);
        cuda_check_launch(cb, "attention (decode rows)");
        if (b->n_decode == b->n_rows)
            return;
    }
    launch_prompt<Q8>(cb, a, b, scale, scale_log2);
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
    const bool q8 = kv->type == BE_KV_Q8_0;
    const int64_t layer_off = (int64_t)layer * kv->n_blocks * kv->block_size * kv->kv_dim;
    const size_t elem = q8 ? sizeof(int8_t) : sizeof(__half);
    const bool decode = (D == 64 || D == 128) && b->n_decode > 0;
    attn_args a = {(const char *)kv->k + layer_off * elem,
                   (const char *)kv->v + layer_off * elem,
                   q8 ? kv->ks + layer_off / QK8_0 : NULL,
                   q8 ? kv->vs + layer_off / QK8_0 : NULL,
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
    if (q8)
        launch_kv<true>(cb, a, b);
    else
        launch_kv<false>(cb, a, b);
}
