noinst_LIBRARIES += kernels/libllmq_kernels.a
kernels_libllmq_kernels_a_SOURCES = \
	kernels/quant.c kernels/quant.h kernels/backend.h \
	kernels/cpu/threadpool.c kernels/cpu/threadpool.h \
	kernels/cpu/dot.c kernels/cpu/dot.h kernels/cpu/dot_avx2.c kernels/cpu/dot_avx512.c \
	kernels/cpu/cpu_backend.c

# ---- CUDA backend (kernels/cuda/*.cu), built when configure finds nvcc ----
if HAVE_CUDA
noinst_LIBRARIES += kernels/libllmq_cuda.a
kernels_libllmq_cuda_a_SOURCES = \
	kernels/cuda/cuda_internal.h kernels/cuda/numerics.cuh kernels/cuda/blocks.cuh \
	kernels/cuda/dequant.cuh kernels/cuda/sm90.cuh \
	kernels/cuda/cuda_backend.cu \
	kernels/cuda/elementwise.cu \
	kernels/cuda/mmv.cu \
	kernels/cuda/gemm.cu \
	kernels/cuda/gemm_sm90.cu \
	kernels/cuda/attention.cu \
	kernels/cuda/sampling.cu \
	kernels/cuda/graphs.cu \
	kernels/cuda/devices.cu kernels/cuda/devices.h
LLMQ_CUDA_LIBS = kernels/libllmq_cuda.a $(CUDA_LIBS)
else
LLMQ_CUDA_LIBS =
endif
# ---- end CUDA backend ----

# The choice of backend (kernels/select.c) calls into the CUDA library, so it
# is linked ahead of it: what a program that opens a backend adds before the
# model libraries.
noinst_LIBRARIES += kernels/libllmq_select.a
kernels_libllmq_select_a_SOURCES = kernels/select.c kernels/select.h
LLMQ_BACKEND_LIBS = kernels/libllmq_select.a $(LLMQ_CUDA_LIBS)
