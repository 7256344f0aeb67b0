/* gpu-pdl-probe: does programmatic dependent launch (cuda_internal.h's
 * cuda_launch, pdl_launch_next, pdl_wait) overlap a kernel with its
 * predecessor on this GPU and driver, in a plain stream and in a CUDA graph
 * recorded from one (as graphs.cu records decode steps), and what does a
 * launch cost in a chain of small kernels, with and without it?  Measured
 * rather than assumed (run on the GPU machine, see tests/gpu/run.sh).
 *
 *   overlap   a one-CTA kernel spins 20 us; the next kernel reads the
 *             global timer before and after its pdl_wait.  With PDL it
 *             starts before the spinner ends and leaves the wait after it
 *             (the ordering the rule relies on); without, it starts after.
 *   chain     1,000 dependent one-CTA kernels (each adds 1 to a counter
 *             after its wait), as one graph: microseconds per kernel, and
 *             the counter checked (every increment happened, in order).
 *
 * Prints a table; exit 0 when it ran and the orderings held, 1 otherwise. */
#include "kernels/cuda/cuda_internal.h"
#include "tests/gpu/check_cuda.h"

#include <stdio.h>
#include <stdlib.h>

#define SPIN_NS 20000
#define CHAIN 1000

static __device__ __forceinline__ uint64_t now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* t[0]: when the spinner ended. */
__global__ void spin_kernel(uint64_t *t)
{
    pdl_launch_next();
    pdl_wait();
    const uint64_t t0 = now_ns();
    while (now_ns() - t0 < SPIN_NS) {
    }
    t[0] = now_ns();
}

/* t[1]: when this kernel started, t[2]: when its wait returned. */
__global__ void probe_kernel(uint64_t *t)
{
    const uint64_t start = now_ns();
    pdl_launch_next();
    pdl_wait();
    t[1] = start;
    t[2] = now_ns();
}

__global__ void step_kernel(unsigned *counter, unsigned expect, unsigned *bad)
{
    pdl_launch_next();
    pdl_wait();
    if (*counter != expect)
        *bad += 1;
    *counter = expect + 1;
}

static cuda_backend stream_of(cudaStream_t s, bool pdl)
{
    cuda_backend cb = {};
    cb.stream = s;
    cb.pdl_on = pdl;
    return cb;
}

/* One spinner + probe; returns whether the wait kept the order. */
static bool overlap(cudaStream_t s, bool pdl, bool graph, uint64_t *dt, double *lead_us)
{
    cuda_backend cb = stream_of(s, pdl);
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    CHECK_CUDA(cudaMemsetAsync(dt, 0, 3 * sizeof *dt, s));
    if (graph)
        CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cuda_launch(&cb, spin_kernel, 1, 32, 0, dt);
    cuda_launch(&cb, probe_kernel, 1, 32, 0, dt);
    CHECK_CUDA(cudaGetLastError());
    if (graph) {
        CHECK_CUDA(cudaStreamEndCapture(s, &g));
        CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
        CHECK_CUDA(cudaGraphLaunch(ge, s));
    }
    uint64_t t[3];
    CHECK_CUDA(cudaMemcpyAsync(t, dt, sizeof t, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    if (graph) {
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    *lead_us = ((double)t[0] - (double)t[1]) / 1000.0; /* > 0: started before the spinner ended */
    return t[2] >= t[0];
}

static double chain_us(cudaStream_t s, bool pdl, unsigned *dc, bool *ordered)
{
    cuda_backend cb = stream_of(s, pdl);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK_CUDA(cudaMemsetAsync(dc, 0, 2 * sizeof *dc, s));
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (unsigned i = 0; i < CHAIN; i++)
        cuda_launch(&cb, step_kernel, 1, 32, 0, dc, i, dc + 1);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    CHECK_CUDA(cudaGraphLaunch(ge, s)); /* warm-up */
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int rep = 0; rep < 5; rep++) {
        CHECK_CUDA(cudaMemsetAsync(dc, 0, 2 * sizeof *dc, s));
        CHECK_CUDA(cudaEventRecord(e0, s));
        CHECK_CUDA(cudaGraphLaunch(ge, s));
        CHECK_CUDA(cudaEventRecord(e1, s));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float ms;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        best = ms < best ? ms : best;
    }
    unsigned h[2];
    CHECK_CUDA(cudaMemcpy(h, dc, sizeof h, cudaMemcpyDeviceToHost));
    *ordered = h[0] == CHAIN && h[1] == 0;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return 1000.0 * best / CHAIN;
}

int main(void)
{
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint64_t *dt;
    unsigned *dc;
    CHECK_CUDA(cudaMalloc(&dt, 3 * sizeof *dt));
    CHECK_CUDA(cudaMalloc(&dc, 2 * sizeof *dc));
    bool all = true;
    printf("| case | PDL | result | order kept |\n| --- | --- | --- | --- |\n");
    for (int graph = 0; graph < 2; graph++)
        for (int pdl = 0; pdl < 2; pdl++) {
            double lead;
            const bool ok = overlap(s, pdl, graph, dt, &lead);
            printf("| overlap, %s | %s | probe started %.1f us %s the spinner ended | %s |\n",
                   graph ? "graph" : "stream", pdl ? "on" : "off", lead < 0 ? -lead : lead,
                   lead > 0 ? "before" : "after", ok ? "yes" : "NO");
            all = all && ok;
        }
    for (int pdl = 0; pdl < 2; pdl++) {
        bool ordered;
        const double us = chain_us(s, pdl, dc, &ordered);
        printf("| chain of %d kernels, graph | %s | %.2f us a kernel | %s |\n", CHAIN,
               pdl ? "on" : "off", us, ordered ? "yes" : "NO");
        all = all && ordered;
    }
    cudaFree(dt);
    cudaFree(dc);
    cudaStreamDestroy(s);
    return all ? 0 : 1;
}
