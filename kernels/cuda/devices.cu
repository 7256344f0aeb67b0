#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "kernels/cuda/devices.h"
}

int cuda_device_count(llmq_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    /* No device and no driver are the same answer to "which GPUs are
     * there": none.  Clear the sticky error so a later call starts clean. */
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        return 0;
    }
    if (e != cudaSuccess)
        return llmq_errf(err, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return n;
}

int cuda_device_info(int index, char *name, size_t name_len, char *uuid, size_t uuid_len,
                     llmq_err *err)
{
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess)
        return llmq_errf(err, "GPU %d: cudaGetDeviceProperties: %s", index,
                         cudaGetErrorString(e));
    snprintf(name, name_len, "%s", prop.name);
    const unsigned char *b = (const unsigned char *)prop.uuid.bytes;
    snprintf(uuid, uuid_len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return 0;
}
