/* check_cuda: the GPU probes' one way to fail (the .cu files of tests/gpu): a CUDA call
 * that does not return cudaSuccess prints where and what, and exits 1, so a
 * probe's table is only ever printed from calls that all succeeded. */
#ifndef LLMQ_TESTS_GPU_CHECK_CUDA_H
#define LLMQ_TESTS_GPU_CHECK_CUDA_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_CUDA(x)                                                                   \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#endif
