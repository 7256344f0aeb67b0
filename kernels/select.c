#include "config.h"

#include "kernels/select.h"

#include <stdio.h>

#ifdef LLMQ_HAVE_CUDA
#include "kernels/cuda/devices.h"
#endif

int backend_select(backend **out, const backend_request *req, int *gpu_used, char *fallback,
                   size_t fallback_size, llmq_err *err)
{
    fallback[0] = '\0';
#ifdef LLMQ_HAVE_CUDA
    if (!req->cpu_only) {
        *gpu_used = req->gpu < 0 ? 0 : req->gpu;
        if (backend_cuda_create(out, *gpu_used, err) == 0)
            return 0;
        if (req->gpu >= 0)
            return -1;
        snprintf(fallback, fallback_size, "%s", err->msg);
    }
#else
    if (!req->cpu_only && req->gpu >= 0)
        return llmq_errf(err, "GPU %d: built without CUDA", req->gpu);
#endif
    *gpu_used = -1;
    return backend_cpu_create(out, req->threads, err);
}

bool backend_gpus_built(void)
{
#ifdef LLMQ_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int backend_gpu_count(llmq_err *err)
{
#ifdef LLMQ_HAVE_CUDA
    return cuda_device_count(err);
#else
    (void)err;
    return 0;
#endif
}

int backend_gpu_info(int index, char *name, size_t name_len, char *uuid, size_t uuid_len,
                     llmq_err *err)
{
#ifdef LLMQ_HAVE_CUDA
    return cuda_device_info(index, name, name_len, uuid, uuid_len, err);
#else
    (void)name, (void)name_len, (void)uuid, (void)uuid_len;
    return llmq_errf(err, "GPU %d: built without CUDA", index);
#endif
}
