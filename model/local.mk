# model/: the GGUF reader, tokenizers and the forward pass (libllmq_model);
# model/gguf_writer.c is built into llmq-mkmodel (tools/local.mk) and test-model only.
noinst_LIBRARIES += model/libllmq_model.a
model_libllmq_model_a_SOURCES = \
	model/gguf.c model/gguf.h \
	model/tokenizer.c model/tokenizer.h \
	model/pretok.c model/pretok.h \
	model/jinja.c model/jinja.h \
	model/chat.c model/chat.h \
	model/model.c model/model.h

model_libllmq_model_a_CPPFLAGS = $(AM_CPPFLAGS) $(UTF8PROC_CFLAGS)

# Link order: model needs kernels needs common.
LLMQ_MODEL_LIBS = model/libllmq_model.a kernels/libllmq_kernels.a common/libllmq_common.a -lm \
	$(UTF8PROC_LIBS)
