noinst_LIBRARIES += kernels/libllmq_kernels.a
kernels_libllmq_kernels_a_SOURCES = \
	kernels/quant.c kernels/quant.h
