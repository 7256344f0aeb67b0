# tests: rules are added as the room grows

# ---- GGUF reader (worker/model/gguf.c) ----
check_PROGRAMS += tests/unit/test-gguf
TESTS += tests/unit/test-gguf
tests_unit_test_gguf_SOURCES = tests/unit/test-gguf.c tests/unit/check.h
tests_unit_test_gguf_LDADD = $(LLMQ_MODEL_LIBS)

FUZZ_TARGETS += tests/fuzz/fuzz-gguf
EXTRA_DIST += tests/fuzz/fuzz-gguf.c tests/fuzz/corpus-gguf
FUZZ_GGUF_SRCS = $(top_srcdir)/tests/fuzz/fuzz-gguf.c $(top_srcdir)/common/err.c \
	$(top_srcdir)/kernels/quant.c $(top_srcdir)/worker/model/gguf.c
tests/fuzz/fuzz-gguf: $(FUZZ_GGUF_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_GEN)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_GGUF_SRCS) -lm
CLEANFILES += tests/fuzz/fuzz-gguf
# ---- end GGUF reader ----
