/* sm90: the Hopper (sm_90a) primitives of the wgmma GEMM (gemm_sm90.cu),
 * in one place so that tests/gpu/gpu-mma-numerics checks the same layout
 * and descriptor the GEMM uses: the 128-byte-swizzled K-major tile
 * (sm90_unit_off) and its wgmma descriptor (sm90_desc), mbarriers, the
 * generic-to-async proxy fence, and wgmma m64n128k16 with its fence, commit
 * and wait.  Device code that uses them must be compiled for sm_90a
 * (__CUDA_ARCH_FEAT_SM90_ALL); defining them costs nothing elsewhere. */
#ifndef LLMQ_KERNELS_CUDA_SM90_CUH
#define LLMQ_KERNELS_CUDA_SM90_CUH

#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

#define SM90_ROW_BYTES (GEMM_BK * 2)
static_assert(SM90_ROW_BYTES == 128, "a k tile row is one 128-byte swizzle row");

/* Byte offset of 16-byte unit u (k positions 8u..8u+7) of row r in a
 * 128-byte-swizzled tile (what cp.async and dequant.cuh's tile_row write). */
static __device__ __forceinline__ uint32_t sm90_unit_off(int r, int u)
{
    return (uint32_t)(r * SM90_ROW_BYTES + ((u ^ (r & 7)) << 4));
}

/* The wgmma descriptor of a K-major operand in that layout, starting at
 * shared address `start`: the start (bits 0-13, in 16-byte units), the
 * leading byte offset (unused by swizzled K-major layouts: 1), the stride
 * byte offset between 8-row groups (1024 bytes), base offset 0 (the tile is
 * 1024-byte aligned) and the 128-byte swizzle mode (1 in bits 62-63).  k16
 * step s of a tile starts at row 0 + 32 s bytes: the swizzle is a function
 * of the address bits, so stepping along k within a row is a plain add. */
static __device__ __forceinline__ uint64_t sm90_desc(uint32_t start)
{
    return (uint64_t)((start & 0x3ffff) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}

static __device__ __forceinline__ void sm90_mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
                 : "memory");
}

static __device__ __forceinline__ void sm90_mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

/* Until the phase of parity `parity` of bar has completed.  A lost arrival
 * (a bug) would hang the GPU with no error; after 2^28 polls (seconds: each
 * try_wait suspends the thread a while) the kernel traps instead, so the
 * launch fails and the backend reports it. */
static __device__ __forceinline__ void sm90_mbar_wait(uint64_t *bar, unsigned parity)
{
    uint32_t done;
    for (uint32_t polls = 0;; polls++) {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
        if (done)
            return;
        if (polls == 1u << 28)
            __trap();
    }
}

/* This thread's shared-memory writes become visible to the tensor cores
 * (the async proxy) once a barrier orders them before the wgmma. */
static __device__ __forceinline__ void sm90_fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

static __device__ __forceinline__ void sm90_wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void sm90_wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void sm90_wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving reads or writes of the accumulators across
 * a wgmma wait (it does not know that wgmma writes them asynchronously). */
static __device__ __forceinline__ void sm90_fence_acc(float (&d)[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 x 128 f32, the warpgroup's fragment layout) += A (64 x 16) . B^T
 * (B 128 x 16), both K-major in shared memory (descriptors da, db). */
/* 64 accumulator operands, laid out by hand: */
/* clang-format off */
static __device__ __forceinline__ void sm90_wgmma_m64n128k16(float (&d)[64], uint64_t da,
                                                             uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, "
                 "%8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, "
                 "%24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, 1, 1, 1, 0, 0;\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db));
}
/* clang-format on */

#endif
