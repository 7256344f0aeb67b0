noinst_LIBRARIES += kernels/libllmq_kernels.a
kernels_libllmq_kernels_a_SOURCES = \
	kernels/quant.c kernels/quant.h kernels/backend.h \
	kernels/cpu/threadpool.c kernels/cpu/threadpool.h \
	kernels/cpu/dot.c kernels/cpu/dot.h kernels/cpu/dot_avx2.c kernels/cpu/dot_avx512.c \
	kernels/cpu/cpu_backend.c
