noinst_LIBRARIES += worker/libllmq_model.a
worker_libllmq_model_a_SOURCES = \
	worker/model/gguf.c worker/model/gguf.h

# Link order: model needs kernels needs common.
LLMQ_MODEL_LIBS = worker/libllmq_model.a kernels/libllmq_kernels.a common/libllmq_common.a -lm

noinst_LIBRARIES += worker/libllmq_engine.a
worker_libllmq_engine_a_SOURCES = \
	worker/engine/sampler.c worker/engine/sampler.h
