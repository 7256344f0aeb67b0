/* devices: the CUDA devices this process can see, for choosing and naming
 * GPUs; programs ask through kernels/select.h (backend_gpu_count,
 * backend_gpu_info), which is the only includer.
 *
 * Indices are the runtime's, so CUDA_VISIBLE_DEVICES is respected: index 0
 * is the first visible device.  No state is kept; callable from C and from
 * CUDA C++.  A machine without a device (or without a driver) counts 0. */
#ifndef LLMQ_KERNELS_CUDA_DEVICES_H
#define LLMQ_KERNELS_CUDA_DEVICES_H

#include <stddef.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The number of visible devices (0 when there is none), or -1. */
int cuda_device_count(llmq_err *err);

/* Device index's name ("NVIDIA H200") and UUID as nvidia-smi prints it
 * ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), each cut to fit its buffer
 * and NUL-terminated.  0, or -1 for an index that is not visible. */
int cuda_device_info(int index, char *name, size_t name_len, char *uuid, size_t uuid_len,
                     llmq_err *err);

#ifdef __cplusplus
}
#endif

#endif
