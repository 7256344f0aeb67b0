/* sampling: token choices made on the GPU, so that a decode step copies back
 * token ids instead of logits (64 rows of a 32,000-token vocabulary are
 * 8 MB of logits, a few ms through PCIe and a CPU scan; the ids are 256 B).
 *
 * argmax: one CTA of 1024 threads per row.  Each thread scans a strided
 * share of the row in index order, so a later equal value never replaces an
 * earlier one; the shares are merged by (value, lower index), which gives
 * the row's first maximum whatever the merge order: the same token as the
 * CPU sampler's greedy path, alone or in any batch.  NaNs never compare
 * greater; a row of NaNs gives token 0 (as the CPU backend).
 *
 * Roofline: one read of the logits, 128 KB per row at 7B; 64 rows are
 * ~2 us of HBM time, so the kernel is a launch.
 *
 * sample: every other sampled row (temperature alone, top-p, min-p, their
 * mix, any penalties, temperature 0 with penalties, a top-k the candidates
 * cannot serve, up to EDGE_MAX; each of them under a grammar's mask, whose
 * refused tokens read as -inf), so that no decode step copies a logit row.
 * The choice is the draw on the GPU (design b): a candidate list (design a)
 * is the whole vocabulary for the commonest setting, temperature alone
 * (OpenAI's default), and top-p's nucleus at a flat distribution is
 * thousands of tokens.  The host draws u = sampler_uniform(seed, step) and
 * counts the penalty window into (token, count) pairs; one CTA per row then
 * does engine/sampler.c's chain:
 *   penalties in place (the sampler's float formula, unfused: the same
 *     bits), the old logits saved and put back at the end;
 *   the first maximum and a NaN check (a NaN row goes back to the host);
 *   top-k: top_k's radix select and gather (select_best), sorted, then
 *     top-p over the k by a scan of their own mass (top_p_sorted's rule);
 *   top-p without top-k: the row's softmax sum and a coarse histogram of
 *     its mass by the sampler's buckets in one pass, the edge bucket
 *     bounded by it, the mass ahead of that bucket summed, its tokens
 *     gathered, sorted and scanned (more than EDGE_MAX of them: the edge's
 *     key bisected by exact sums, a tie group walked token by token): the
 *     shortest prefix (value desc, id asc) with mass >= top_p * sum;
 *   min-p: logit >= max + logf(min_p) (logf taken on the host);
 *   the draw: weights exp(x / t - max / t) over the survivors, each thread
 *     a contiguous run of ids, runs joined by a scan; the first survivor in
 *     id order whose cumulative weight exceeds u * total.
 * Per step: one launch; up 56 B per row plus 8 B per penalty pair (and a
 * constrained row's mask, n / 8 bytes: 4 KB at a 32k vocabulary), down 8 B
 * per row (token and its raw logit, for logprobs), against 128 KB per row
 * (512 KB at a 128k vocabulary) and a CPU scan before.  Work per row: 3
 * reads of the row without top-p, 6 with (L2-resident after the first),
 * about 20 more for a nucleus edge of more than EDGE_MAX tokens, 5 for a
 * top-k.
 *
 * Batch invariance: every sum has a shape fixed by n (strided or run
 * shares per thread, butterflies and scans of fixed width), the coarse
 * histogram is exact integer arithmetic, and a CTA reads only its row: a
 * row's token is a function of its logits, parameters and u alone.
 *
 * Bounds against the CPU sampler on the same logits: the truncation sets
 * and the draw are the sampler's; only the rounding of the sums differs:
 * the softmax terms are exp in double rounded to float, which glibc's
 * expf matches but for ~1e-4 of arguments (one float ulp, 6e-8 relative),
 * and the double sums (n terms) are grouped otherwise (~n * 2^-53
 * relative).  A token can differ only where u * total, or top_p * sum,
 * falls within that of a cumulative boundary: measured by gpu-parity as
 * a count of differing draws (expected 0 in 10^4).  A row alone and in a
 * batch of any size: bit-identical.
 *
 * log_norm: the log-softmax normalizer per row, so that logprobs need the
 * chosen token's logit (from sample's output, top_k's candidates or the
 * argmax's max) and top_k's candidates, never the row.  exp and log in
 * double; the sum's grouping differs from the CPU's by ~n * 2^-53, so a
 * logprob (a float) is the CPU's or one float ulp from it. */
#include "kernels/cuda/cuda_internal.h"

#include <limits.h>
#include <math.h>

#define ARGMAX_THREADS 1024

/* Does (v, i) come before (best, at) in the order "larger value, then lower index"? */
static __device__ __forceinline__ bool argmax_before(float v, int i, float best, int at)
{
    return v > best || (v == best && i < at);
}

/* The warp's first maximum, in every lane. */
static __device__ __forceinline__ void warp_argmax(float &best, int &at)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, at, o);
        if (argmax_before(ov, oi, best, at)) {
            best = ov;
            at = oi;
        }
    }
}

__global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_kernel(const float *x, int32_t n, int32_t *out)
{
    __shared__ float s_best[ARGMAX_THREADS / 32];
    __shared__ int s_at[ARGMAX_THREADS / 32];
    const float *row = x + (int64_t)blockIdx.x * n;
    float best = -INFINITY;
    int at = INT_MAX; /* no candidate yet: any non-NaN value, even -inf, comes first */
    for (int i = threadIdx.x; i < n; i += ARGMAX_THREADS) {
        const float v = row[i];
        if (argmax_before(v, i, best, at)) {
            best = v;
            at = i;
        }
    }
    warp_argmax(best, at);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        s_best[warp] = best;
        s_at[warp] = at;
    }
    __syncthreads();
    if (warp != 0)
        return;
    best = s_best[lane];
    at = s_at[lane];
    warp_argmax(best, at);
    if (lane == 0)
        out[blockIdx.x] = at == INT_MAX ? 0 : at;
}

void launch_argmax(cuda_backend *cb, const float *x, int32_t rows, int32_t n, int32_t *out)
{
    argmax_kernel<<<rows, ARGMAX_THREADS, 0, cb->stream>>>(x, n, out);
    cuda_check_launch(cb, "argmax");
}

/* ---- top_k: a sampled row's candidates ---- */

/* top_k: one CTA of 1024 threads per row, exact under common/topk.h's order
 * (larger value, then lower id).  Values become 32-bit keys whose unsigned
 * order is the float order (-0 taken as +0, which the float compare calls
 * equal); a radix select of four 8-bit passes finds the key T of the k-th
 * best and how many of the keys equal to T it takes; a pass in id order
 * then gathers every key above T and the lowest ids at T (block-wide ranks
 * from ballots), and a bitonic sort in shared memory puts them best first.
 * Histograms count with one atomic per group of lanes sharing a bin
 * (__match_any_sync): logits share their top bits, so plain atomics would
 * serialize on one bin.  A row holding a NaN is flagged with id -1.
 * Shared memory: 256 bins + 256 candidates (value, id) + 32 warp counts,
 * ~3.2 KB.  Cost: five reads of the row (128 KB at 7B) per CTA, from L2
 * after the first. */

#define TOPK_THREADS 1024
#define TOPK_WARPS (TOPK_THREADS / 32)

static __device__ __forceinline__ uint32_t order_key(float v)
{
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ __forceinline__ bool topk_before(float va, int ia, float vb, int ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* Adds 1 to h[bin] for every active lane: one atomic per distinct bin of
 * the warp.  Every lane of the warp calls it. */
static __device__ __forceinline__ void hist_add(int *h, unsigned bin, bool active)
{
    const unsigned act = __ballot_sync(0xffffffffu, active);
    if (!active)
        return;
    const unsigned peers = __match_any_sync(act, bin);
    if ((int)(threadIdx.x % 32) == __ffs(peers) - 1)
        atomicAdd(&h[bin], __popc(peers));
}

/* This thread's rank among the block's set flags (thread order), and their
 * total.  Every thread of the block calls it. */
static __device__ int block_rank(bool flag, int *s_warp, int *total)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned b = __ballot_sync(0xffffffffu, flag);
    if (lane == 0)
        s_warp[warp] = __popc(b);
    __syncthreads();
    if (warp == 0) {
        int v = s_warp[lane]; /* TOPK_WARPS == 32 */
        for (int o = 1; o < 32; o <<= 1) {
            const int t = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o)
                v += t;
        }
        s_warp[lane] = v; /* inclusive */
    }
    __syncthreads();
    const int rank = (warp ? s_warp[warp - 1] : 0) + __popc(b & ((1u << lane) - 1));
    *total = s_warp[TOPK_WARPS - 1];
    __syncthreads(); /* s_warp is reused by the next call */
    return rank;
}

/* Bitonic sort of val/id[0..count) in shared memory, best first, padded to
 * a power of two (the arrays must have room for it) with entries worse than
 * any real one.  Every thread of the block (TOPK_THREADS) calls it; it
 * starts and ends with a barrier. */
static __device__ void sort_best_first(float *val, int *id, int count)
{
    const int tid = threadIdx.x;
    int p2 = 1;
    while (p2 < count)
        p2 <<= 1;
    __syncthreads();
    for (int i = count + tid; i < p2; i += TOPK_THREADS) {
        val[i] = -INFINITY;
        id[i] = INT_MAX;
    }
    for (int size = 2; size <= p2; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int i = tid; i < p2; i += TOPK_THREADS) {
                const int j = i ^ stride;
                if (j <= i)
                    continue;
                const bool best_first = (i & size) == 0;
                const float va = val[i], vb = val[j];
                const int ia = id[i], ib = id[j];
                if (best_first ? topk_before(vb, ib, va, ia) : topk_before(va, ia, vb, ib)) {
                    val[i] = vb;
                    id[i] = ib;
                    val[j] = va;
                    id[j] = ia;
                }
            }
        }
    __syncthreads();
}

/* The k best of row[0..n) (common/topk.h's order) into val/id[0..k), in
 * id order, unsorted: a radix select of four 8-bit passes finds the key of
 * the k-th best and how many of the keys equal to it are taken, then a
 * pass in id order gathers every key above it and the lowest ids at it.
 * Row is a float pointer or a masked_row; no NaN in the row.  Every thread
 * of the block (TOPK_THREADS) calls it. */
template <typename Row>
static __device__ void select_best(const Row &row, int n, int k, int *s_hist, int *s_warp,
                                   uint32_t *s_prefix, int *s_remaining, float *val, int *id)
{
    const int tid = threadIdx.x;
    /* Radix select: the key of the k-th best, and how many keys equal to
     * it are taken. */
    uint32_t prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (tid < 256)
            s_hist[tid] = 0;
        __syncthreads();
        for (int base = 0; base < n; base += TOPK_THREADS) {
            const int i = base + tid;
            const uint32_t key = i < n ? order_key(row[i]) : 0u;
            hist_add(s_hist, (key >> shift) & 255u, i < n && (key & mask) == prefix);
        }
        __syncthreads();
        if (tid == 0) {
            int cum = 0, b = 255;
            for (; b > 0 && cum + s_hist[b] < remaining; b--)
                cum += s_hist[b];
            *s_prefix = prefix | ((uint32_t)b << shift);
            *s_remaining = remaining - cum;
        }
        __syncthreads();
        prefix = *s_prefix;
        remaining = *s_remaining;
        mask |= 255u << shift;
    }
    const uint32_t kth = prefix;
    const int n_above = k - remaining;

    /* Gather in id order: every key above kth, the lowest ids at kth. */
    int taken_above = 0, taken_at = 0;
    for (int base = 0; base < n && (taken_above < n_above || taken_at < remaining);
         base += TOPK_THREADS) {
        const int i = base + tid;
        const uint32_t key = i < n ? order_key(row[i]) : 0u;
        const bool above = i < n && key > kth, at = i < n && key == kth;
        int total_above, total_at;
        const int r_above = block_rank(above, s_warp, &total_above);
        const int r_at = block_rank(at, s_warp, &total_at);
        if (above) {
            val[taken_above + r_above] = row[i];
            id[taken_above + r_above] = i;
        }
        if (at && taken_at + r_at < remaining) {
            val[n_above + taken_at + r_at] = row[i];
            id[n_above + taken_at + r_at] = i;
        }
        taken_above += total_above;
        taken_at += total_at;
    }
}

__global__ void __launch_bounds__(TOPK_THREADS)
    top_k_kernel(const float *x, int32_t n, int32_t k, int32_t *ids, float *vals)
{
    __shared__ int s_hist[256];
    __shared__ int s_warp[TOPK_WARPS];
    __shared__ uint32_t s_prefix;
    __shared__ int s_remaining;
    __shared__ float s_val[BE_TOP_K_MAX];
    __shared__ int s_id[BE_TOP_K_MAX];
    const float *row = x + (int64_t)blockIdx.x * n;
    const int tid = threadIdx.x;

    bool nan = false;
    for (int i = tid; i < n; i += TOPK_THREADS)
        nan = nan || isnan(row[i]);
    if (__syncthreads_or(nan)) {
        if (tid == 0)
            ids[(int64_t)blockIdx.x * k] = -1;
        return;
    }

    select_best(row, n, k, s_hist, s_warp, &s_prefix, &s_remaining, s_val, s_id);
    sort_best_first(s_val, s_id, k);
    for (int i = tid; i < k; i += TOPK_THREADS) {
        ids[(int64_t)blockIdx.x * k + i] = s_id[i];
        vals[(int64_t)blockIdx.x * k + i] = s_val[i];
    }
}

void launch_top_k(cuda_backend *cb, const float *x, int32_t rows, int32_t n, int32_t k,
                  int32_t *ids, float *vals)
{
    top_k_kernel<<<rows, TOPK_THREADS, 0, cb->stream>>>(x, n, k, ids, vals);
    cuda_check_launch(cb, "top_k");
}

/* ---- sample: the whole chain of a row without top-k (backend.h) ---- */

/* sample: one CTA of 1024 threads per row (design and bounds in the header
 * above).  Shared memory: the coarse histogram (4 KB), the nucleus edge's
 * candidates (16 KB), per-warp partials; ~21 KB. */

#define SAMPLE_THREADS TOPK_THREADS
#define SAMPLE_WARPS TOPK_WARPS
#define EDGE_MAX BE_SAMPLE_TOP_K_MAX /* candidates sorted in shared memory (top-k's too) */
#define TOP_P_BUCKETS 512            /* engine/sampler.c's buckets of distance to the max, */
#define TOP_P_SPAN 32.0f             /* over this many nats */
#define MASS_ONE 0x1p40              /* fixed-point unit of the coarse histogram */

struct sample_smem {
    union {
        unsigned long long hist[TOP_P_BUCKETS]; /* top-p's coarse mass histogram */
        int count[256];                         /* top-k's radix select */
    };
    uint32_t prefix;
    int remaining;
    float val[EDGE_MAX];
    int id[EDGE_MAX];
    double dw[SAMPLE_WARPS];
    float fw[SAMPLE_WARPS];
    int iw[SAMPLE_WARPS];
    uint32_t uw[SAMPLE_WARPS];
    int lo, hi, pick, pick_id;
};

/* A row as the sampler sees it: a token its grammar's mask refuses reads
 * as -inf (tokenmask_apply's value), the others as they are. */
struct masked_row {
    const float *x;
    const uint64_t *mask; /* NULL: none */
    __device__ __forceinline__ float operator[](int i) const
    {
        return mask && !((mask[i >> 6] >> (i & 63)) & 1) ? -INFINITY : x[i];
    }
};

/* expf as glibc rounds it nearly always: exp in double, rounded once. */
static __device__ __forceinline__ float exp_f(float d)
{
    return (float)exp((double)d);
}

/* engine/sampler.c's penalized(), its float operations unfused. */
static __device__ __forceinline__ float penalized(float l, int c, const be_sample_row &p)
{
    l = l <= 0.0f ? __fmul_rn(l, p.repeat_penalty) : __fdiv_rn(l, p.repeat_penalty);
    return __fsub_rn(l, __fadd_rn(__fmul_rn((float)c, p.frequency_penalty), p.presence_penalty));
}

/* engine/sampler.c's bucket_of. */
static __device__ __forceinline__ int bucket_of(float l, float max)
{
    const float d = __fmul_rn(__fsub_rn(max, l), (float)TOP_P_BUCKETS / TOP_P_SPAN);
    return d < (float)(TOP_P_BUCKETS - 1) ? (int)d : TOP_P_BUCKETS - 1;
}

/* The block's op-reduction of v: a butterfly in each warp, then warp 0's
 * over the warps' results -- one order for every row.  Every thread calls
 * it and gets the result. */
template <typename T, typename F>
static __device__ __forceinline__ T block_reduce(T v, T *s_warp, F op)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0)
        s_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = s_warp[lane]; /* SAMPLE_WARPS == 32 */
        for (int o = 16; o > 0; o >>= 1)
            v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0)
            s_warp[0] = v;
    }
    __syncthreads();
    v = s_warp[0];
    __syncthreads();
    return v;
}

struct add_rn {
    __device__ __forceinline__ double operator()(double a, double b) const
    {
        return __dadd_rn(a, b);
    }
};

template <typename T>
struct min_of {
    __device__ __forceinline__ T operator()(T a, T b) const
    {
        return a < b ? a : b;
    }
};

template <typename T>
struct max_of {
    __device__ __forceinline__ T operator()(T a, T b) const
    {
        return a > b ? a : b;
    }
};

struct plus_of {
    __device__ __forceinline__ int operator()(int a, int b) const
    {
        return a + b;
    }
};

static __device__ __forceinline__ double block_sum(double v, sample_smem &sm)
{
    return block_reduce(v, sm.dw, add_rn());
}

static __device__ __forceinline__ int block_min(int v, sample_smem &sm)
{
    return block_reduce(v, sm.iw, min_of<int>());
}

/* The sum of v over the threads before this one (thread order) and, in
 * *total, over all: scans in fixed shapes.  Every thread calls it. */
static __device__ double block_scan_excl(double v, sample_smem &sm, double *total)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    double incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        const double t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl = __dadd_rn(incl, t);
    }
    double excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0)
        excl = 0.0;
    if (lane == 31)
        sm.dw[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        double wi = sm.dw[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const double t = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o)
                wi = __dadd_rn(wi, t);
        }
        sm.dw[lane] = wi; /* inclusive over the warps */
    }
    __syncthreads();
    const double before = warp ? sm.dw[warp - 1] : 0.0;
    *total = sm.dw[SAMPLE_WARPS - 1];
    __syncthreads();
    return warp ? __dadd_rn(before, excl) : excl;
}

/* The block's first maximum (argmax's order) into best, at.  Every thread
 * calls it. */
static __device__ void block_argmax(float &best, int &at, sample_smem &sm)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_argmax(best, at);
    if (lane == 0) {
        sm.fw[warp] = best;
        sm.iw[warp] = at;
    }
    __syncthreads();
    best = sm.fw[lane];
    at = sm.iw[lane];
    warp_argmax(best, at);
    __syncthreads();
}

/* The mass of the tokens of buckets lo..hi whose key is >= t (> t when
 * strict): a sum in the fixed order of block_sum. */
static __device__ double mass_from(const masked_row row, int n, float max, int lo, int hi,
                                   uint32_t t, bool strict, sample_smem &sm)
{
    double part = 0.0;
    for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
        const float l = row[i];
        const int b = bucket_of(l, max);
        const uint32_t k = order_key(l);
        if (b >= lo && b <= hi && (strict ? k > t : k >= t))
            part = __dadd_rn(part, (double)exp_f(__fsub_rn(l, max)));
    }
    return block_sum(part, sm);
}

/* nucleus_edge's way when the candidates of buckets lo..hi are too many to
 * sort: the edge's key by bisection over theirs (each probe an exact sum of
 * the mass at or above it: ahead plus mass_from), then its place among the
 * tokens of that key, walked as the sampler walks a sorted run, one weight
 * at a time, the lower id first.  A tie group (rounded logits) needs no
 * probe; a continuous spread about 20. */
static __device__ void edge_by_bisection(const masked_row row, int n, float max, double need,
                                         int lo, int hi, double ahead, sample_smem &sm,
                                         float *edge_v, int *edge_id)
{
    uint32_t kmin = 0xffffffffu, kmax = 0;
    for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
        const int b = bucket_of(row[i], max);
        const uint32_t k = order_key(row[i]);
        if (b >= lo && b <= hi) {
            kmin = k < kmin ? k : kmin;
            kmax = k > kmax ? k : kmax;
        }
    }
    kmin = block_reduce(kmin, sm.uw, min_of<uint32_t>());
    kmax = block_reduce(kmax, sm.uw, max_of<uint32_t>());
    /* Mass at or above a reaches need, above z does not (the max is
     * finite, so kmax + 1 does not wrap). */
    uint32_t a = kmin, z = kmax + 1;
    while (z - a > 1) {
        const uint32_t mid = a + (z - a) / 2;
        if (__dadd_rn(ahead, mass_from(row, n, max, lo, hi, mid, false, sm)) >= need)
            a = mid;
        else
            z = mid;
    }
    const double above = __dadd_rn(ahead, mass_from(row, n, max, lo, hi, a, true, sm));
    int first = INT_MAX, count = 0;
    for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS)
        if (order_key(row[i]) == a) {
            first = min(first, i);
            count++;
        }
    first = block_min(first, sm);
    count = block_reduce(count, sm.iw, plus_of());
    if (count == 0) /* no token at the key found: rounding; keep everything */
        return;
    const float v = row[first];
    const double w = (double)exp_f(__fsub_rn(v, max));
    if (threadIdx.x == 0) {
        double cum = above;
        int j = 0;
        while (j < count - 1 && (cum = __dadd_rn(cum, w)) < need)
            j++;
        sm.pick = j;
        sm.pick_id = first;
    }
    __syncthreads();
    const int j = sm.pick;
    int taken = 0;
    for (int base = 0; base < n && taken <= j; base += SAMPLE_THREADS) {
        const int i = base + threadIdx.x;
        const bool at = i < n && order_key(row[i]) == a;
        int total;
        const int r = block_rank(at, sm.iw, &total);
        if (at && taken + r == j)
            sm.pick_id = i;
        taken += total;
    }
    __syncthreads();
    *edge_v = v;
    *edge_id = sm.pick_id;
    __syncthreads();
}

/* Over the candidates sorted best first in sm.val[0..count) (count <=
 * EDGE_MAX): the first whose cumulative weight exp(v - max), after ahead,
 * reaches need -- or, need < 0, top_p times the candidates' own total --
 * in a scan of fixed shape; INT_MAX if none does. */
static __device__ int sorted_reach(sample_smem &sm, int count, float max, double ahead, double need,
                                   float top_p)
{
    const int j0 = 2 * threadIdx.x, j1 = j0 + 1;
    const double w0 = j0 < count ? (double)exp_f(__fsub_rn(sm.val[j0], max)) : 0.0;
    const double w1 = j1 < count ? (double)exp_f(__fsub_rn(sm.val[j1], max)) : 0.0;
    double all;
    const double excl = block_scan_excl(__dadd_rn(w0, w1), sm, &all);
    if (need < 0.0)
        need = __dmul_rn((double)top_p, all);
    const double c0 = __dadd_rn(excl, w0), c1 = __dadd_rn(c0, w1);
    int hit = INT_MAX;
    if (j0 < count && __dadd_rn(ahead, c0) >= need)
        hit = j0;
    else if (j1 < count && __dadd_rn(ahead, c1) >= need)
        hit = j1;
    return block_min(hit, sm);
}

/* Top-k (1 <= k <= EDGE_MAX, k < n), then top-p over the k as the
 * sampler's top_p_sorted does (their own total, in sorted order): the last
 * survivor (value desc, id asc) into *edge_v and *edge_id. */
static __device__ void top_k_edge(const masked_row row, int n, float max, int k, float top_p,
                                  sample_smem &sm, float *edge_v, int *edge_id)
{
    select_best(row, n, k, sm.count, sm.iw, &sm.prefix, &sm.remaining, sm.val, sm.id);
    sort_best_first(sm.val, sm.id, k);
    int last = k - 1;
    if (top_p < 1.0f) {
        const int hit = sorted_reach(sm, k, max, 0.0, -1.0, top_p);
        last = hit == INT_MAX ? last : hit; /* none: rounding; the sampler keeps all k */
    }
    *edge_v = sm.val[last];
    *edge_id = sm.id[last];
    __syncthreads();
}

/* Top-p over the whole row: the last token (value desc, id asc) of the
 * shortest prefix whose mass reaches top_p of the row's, into *edge_v and
 * *edge_id.  The row's sum and a coarse histogram over engine/sampler.c's
 * buckets come from one pass (the histogram in integer units of 2^-40, so
 * that its atomics add in any order to the same value); the histogram
 * bounds the bucket holding the edge to [lo, hi], usually one bucket (its
 * truncation is under n units); the mass ahead of lo is summed exactly
 * (double, fixed order), the candidates of lo..hi are gathered in id
 * order, sorted, and scanned -- or, more than EDGE_MAX of them, bisected
 * (edge_by_bisection). */
static __device__ void nucleus_edge(const masked_row row, int n, float max, float top_p,
                                    sample_smem &sm, float *edge_v, int *edge_id)
{
    const int tid = threadIdx.x;
    for (int b = tid; b < TOP_P_BUCKETS; b += SAMPLE_THREADS)
        sm.hist[b] = 0;
    __syncthreads();
    double part = 0.0;
    for (int i = tid; i < n; i += SAMPLE_THREADS) {
        const float l = row[i], w = exp_f(__fsub_rn(l, max));
        part = __dadd_rn(part, (double)w);
        const unsigned long long q = (unsigned long long)((double)w * MASS_ONE);
        if (q)
            atomicAdd(&sm.hist[bucket_of(l, max)], q);
    }
    const double need = __dmul_rn((double)top_p, block_sum(part, sm));
    if (tid == 0) {
        /* Exact mass <= coarse + n units: slack for that, the rounding of
         * the running count to double, and (2^-30 relative) the rounding of
         * the double sums that decide the edge. */
        const double need_q = need * MASS_ONE, rel = need_q * 0x1p-30;
        const double slack = (double)n + 64.0 + rel;
        unsigned long long cum = 0;
        int lo = -1, hi = TOP_P_BUCKETS - 1;
        for (int b = 0; b < TOP_P_BUCKETS; b++) {
            cum += sm.hist[b];
            if (lo < 0 && (double)cum + slack >= need_q)
                lo = b;
            if ((double)cum >= need_q + 64.0 + rel) {
                hi = b;
                break;
            }
        }
        sm.lo = lo < 0 ? hi : lo;
        sm.hi = hi;
    }
    __syncthreads();
    const int lo = sm.lo, hi = sm.hi;
    part = 0.0;
    for (int i = tid; i < n; i += SAMPLE_THREADS) {
        const float l = row[i];
        if (bucket_of(l, max) < lo)
            part = __dadd_rn(part, (double)exp_f(__fsub_rn(l, max)));
    }
    const double ahead = block_sum(part, sm);
    int count = 0;
    for (int base = 0; base < n; base += SAMPLE_THREADS) {
        const int i = base + tid;
        const float l = i < n ? row[i] : 0.0f;
        const int b = bucket_of(l, max);
        const bool in = i < n && b >= lo && b <= hi;
        int total;
        const int r = block_rank(in, sm.iw, &total);
        if (in && count + r < EDGE_MAX) {
            sm.val[count + r] = l;
            sm.id[count + r] = i;
        }
        count += total;
    }
    if (count > EDGE_MAX) {
        edge_by_bisection(row, n, max, need, lo, hi, ahead, sm, edge_v, edge_id);
        return;
    }
    if (count == 0) /* rounding: keep everything */
        return;
    sort_best_first(sm.val, sm.id, count);
    int hit = sorted_reach(sm, count, max, ahead, need, 0.0f);
    if (hit == INT_MAX) /* rounding kept the mass short: all of them */
        hit = count - 1;
    *edge_v = sm.val[hit];
    *edge_id = sm.id[hit];
    __syncthreads();
}

/* Whether token i (logit l) survives top-p (edge) and min-p (cut). */
static __device__ __forceinline__ bool survives(float l, int i, float edge_v, int edge_id,
                                                float cut)
{
    return (topk_before(l, i, edge_v, edge_id) || i == edge_id) && l >= cut;
}

/* Truncation and the draw of a row with a finite max at a temperature > 0:
 * the first survivor in id order whose cumulative weight exceeds u * total;
 * first (the first maximum) if rounding leaves none; -1 if top-p's edge is
 * too wide.  Each thread takes a contiguous run of ids, so a thread's
 * running sum is in id order; the runs are joined by a fixed scan. */
static __device__ int draw_row(const masked_row row, int n, const be_sample_row &p, float max,
                               int first, sample_smem &sm)
{
    float edge_v = -INFINITY;
    int edge_id = INT_MAX; /* keeps every token */
    if (p.top_k > 0 && p.top_k < n)
        top_k_edge(row, n, max, p.top_k, p.top_p, sm, &edge_v, &edge_id);
    else if (p.top_p < 1.0f)
        nucleus_edge(row, n, max, p.top_p, sm, &edge_v, &edge_id);
    const float cut = __fadd_rn(max, p.log_min_p), t = p.temperature;
    const float x_max = __fdiv_rn(max, t);
    const int run = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int lo = min(n, (int)threadIdx.x * run), hi = min(n, lo + run);
    double local = 0.0;
    for (int i = lo; i < hi; i++) {
        const float l = row[i];
        if (survives(l, i, edge_v, edge_id, cut))
            local = __dadd_rn(local, (double)exp_f(__fsub_rn(__fdiv_rn(l, t), x_max)));
    }
    double total;
    const double before = block_scan_excl(local, sm, &total);
    const double target = __dmul_rn(p.u, total);
    int found = INT_MAX;
    local = 0.0;
    for (int i = lo; i < hi && found == INT_MAX; i++) {
        const float l = row[i];
        if (!survives(l, i, edge_v, edge_id, cut))
            continue;
        local = __dadd_rn(local, (double)exp_f(__fsub_rn(__fdiv_rn(l, t), x_max)));
        if (__dadd_rn(before, local) > target)
            found = i;
    }
    found = block_min(found, sm);
    return found == INT_MAX ? first : found;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(float *x, int32_t n, const be_sample_row *rows, const int32_t *pen, float *save,
                  const uint64_t *mask, be_sample_out *out)
{
    __shared__ sample_smem sm;
    const be_sample_row &p = rows[blockIdx.x]; /* read where used: registers are short */
    float *row = x + (int64_t)p.row * n;
    const int64_t words = (n + 63) / 64;
    const masked_row view = {row, p.mask >= 0 ? mask + p.mask * words : NULL};
    const int tid = threadIdx.x;

    /* The pairs name distinct tokens: no two threads write one logit. */
    for (int j = tid; j < p.n_pen; j += SAMPLE_THREADS) {
        const int at = p.pen_first + j, id = pen[2 * at];
        const float l = row[id];
        save[at] = l;
        row[id] = penalized(l, pen[2 * at + 1], p);
    }
    __syncthreads();

    bool nan = false;
    float best = -INFINITY;
    int at = INT_MAX;
    for (int i = tid; i < n; i += SAMPLE_THREADS) {
        const float v = view[i];
        nan = nan || isnan(v);
        if (argmax_before(v, i, best, at)) {
            best = v;
            at = i;
        }
    }
    nan = __syncthreads_or(nan);
    block_argmax(best, at, sm);
    const int first = at == INT_MAX ? 0 : at;
    int token;
    if (nan) /* the host's sampler knows what a NaN does to each step */
        token = -1;
    else if (!(p.temperature > 0.0f) || !isfinite(best))
        token = first;
    else
        token = draw_row(view, n, p, best, first, sm);

    __syncthreads();
    for (int j = tid; j < p.n_pen; j += SAMPLE_THREADS) {
        const int at2 = p.pen_first + j;
        row[pen[2 * at2]] = save[at2];
    }
    __syncthreads();
    if (tid == 0)
        out[blockIdx.x] = be_sample_out{token, token >= 0 ? row[token] : NAN};
}

void launch_sample(cuda_backend *cb, float *x, int32_t n, const be_sample_row *rows, int32_t n_rows,
                   const int32_t *pen, float *save, const uint64_t *mask, be_sample_out *out)
{
    sample_kernel<<<n_rows, SAMPLE_THREADS, 0, cb->stream>>>(x, n, rows, pen, save, mask, out);
    cuda_check_launch(cb, "sample");
}

/* ---- log_norm: the log-softmax normalizer of each row (backend.h) ---- */

/* One CTA of 1024 threads per row: the max (exact in any order), then the
 * sum of exp(x - max) in double, each thread over a strided share in index
 * order, the shares joined in a fixed order. */
__global__ void __launch_bounds__(SAMPLE_THREADS)
    log_norm_kernel(const float *x, int32_t n, double *out)
{
    __shared__ sample_smem sm;
    const float *row = x + (int64_t)blockIdx.x * n;
    const int tid = threadIdx.x;
    float best = -INFINITY;
    int at = INT_MAX;
    for (int i = tid; i < n; i += SAMPLE_THREADS) {
        const float v = row[i]; /* NaN never comes first: it counts as -inf */
        if (argmax_before(v, i, best, at)) {
            best = v;
            at = i;
        }
    }
    block_argmax(best, at, sm);
    double part = 0.0;
    for (int i = tid; best > -INFINITY && i < n; i += SAMPLE_THREADS) {
        const float v = row[i];
        if (!isnan(v))
            part = __dadd_rn(part, exp(__dsub_rn((double)v, (double)best)));
    }
    const double sum = block_sum(part, sm);
    if (tid == 0) {
        out[2 * (int64_t)blockIdx.x] = best;
        out[2 * (int64_t)blockIdx.x + 1] = best > -INFINITY ? __dadd_rn((double)best, log(sum))
                                                            : INFINITY;
    }
}

void launch_log_norm(cuda_backend *cb, const float *x, int32_t rows, int32_t n, double *out)
{
    log_norm_kernel<<<rows, SAMPLE_THREADS, 0, cb->stream>>>(x, n, out);
    cuda_check_launch(cb, "log_norm");
}
