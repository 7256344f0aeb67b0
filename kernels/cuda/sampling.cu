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
