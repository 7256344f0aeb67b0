/* select: the backends a build has, the GPUs it can see, and the backend a
 * program's command line asks for -- one rule for llmq-run and
 * llmq-worker, and the one place outside kernels/cuda that knows whether
 * CUDA is built in.
 *
 * backend_select: cpu_only: the CPU.  gpu >= 0: CUDA device gpu, or an
 * error (also in a build without CUDA: a GPU asked for by number is never
 * replaced by the CPU).  Neither: the first GPU when there is one, else the
 * CPU, so that a CUDA build still serves on a machine without a GPU -- and
 * says so through *fallback.
 *
 * GPUs are numbered as the runtime numbers them, so CUDA_VISIBLE_DEVICES
 * is respected: 0 is the first visible device.  No state is kept. */
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

/* Whether this build has a GPU backend at all (configure found CUDA). */
bool backend_gpus_built(void);

/* The number of visible GPUs: 0 without a GPU backend, a device or a
 * driver; -1 when asking fails. */
int backend_gpu_count(llmq_err *err);

/* GPU index's name ("NVIDIA H200") and UUID as nvidia-smi prints it
 * ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), each cut to fit its buffer
 * and NUL-terminated: what names a physical GPU whatever its index.  0, or
 * -1 for an index that is not visible (any, without a GPU backend). */
int backend_gpu_info(int index, char *name, size_t name_len, char *uuid, size_t uuid_len,
                     llmq_err *err);

#endif
