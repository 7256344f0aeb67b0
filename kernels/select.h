/* select: the backend a program's command line asks for, one rule for
 * llmq-run and llmq-worker.  cpu_only: the CPU.  gpu >= 0: CUDA device gpu,
 * or an error.  Neither: the first GPU when there is one, else the CPU, so
 * that a CUDA build still serves on a machine without a GPU -- and says so
 * through *fallback (a build without CUDA asked for a GPU says so too). */
#ifndef LLMQ_KERNELS_SELECT_H
#define LLMQ_KERNELS_SELECT_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/backend.h"

typedef struct backend_request {
    bool cpu_only;
    int gpu;     /* -1: the first GPU, if any */
    int threads; /* for the CPU backend */
} backend_request;

/* *gpu_used: the CUDA device opened, -1 for the CPU.  fallback (size
 * fallback_size) gets why the CPU stands in for a GPU, "" otherwise. */
int backend_select(backend **out, const backend_request *req, int *gpu_used, char *fallback,
                   size_t fallback_size, llmq_err *err);

#endif
