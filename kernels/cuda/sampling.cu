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
 * ~2 us of HBM time, so the kernel is a launch. */
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
            s_prefix = prefix | ((uint32_t)b << shift);
            s_remaining = remaining - cum;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
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
            s_val[taken_above + r_above] = row[i];
            s_id[taken_above + r_above] = i;
        }
        if (at && taken_at + r_at < remaining) {
            s_val[n_above + taken_at + r_at] = row[i];
            s_id[n_above + taken_at + r_at] = i;
        }
        taken_above += total_above;
        taken_at += total_at;
    }

    /* Bitonic sort, best first, padded to a power of two with entries worse
     * than any real one. */
    int p2 = 1;
    while (p2 < k)
        p2 <<= 1;
    for (int i = k + tid; i < p2; i += TOPK_THREADS) {
        s_val[i] = -INFINITY;
        s_id[i] = INT_MAX;
    }
    for (int size = 2; size <= p2; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int i = tid; i < p2; i += TOPK_THREADS) {
                const int j = i ^ stride;
                if (j <= i)
                    continue;
                const bool best_first = (i & size) == 0;
                const float va = s_val[i], vb = s_val[j];
                const int ia = s_id[i], ib = s_id[j];
                if (best_first ? topk_before(vb, ib, va, ia) : topk_before(va, ia, vb, ib)) {
                    s_val[i] = vb;
                    s_id[i] = ib;
                    s_val[j] = va;
                    s_id[j] = ia;
                }
            }
        }
    __syncthreads();
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
