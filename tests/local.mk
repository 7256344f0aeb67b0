# tests: rules are added as the room grows

# ---- GGUF reader (model/gguf.c) ----
check_PROGRAMS += tests/unit/test-gguf
TESTS += tests/unit/test-gguf
tests_unit_test_gguf_SOURCES = tests/unit/test-gguf.c tests/unit/check.h
tests_unit_test_gguf_LDADD = $(LLMQ_MODEL_LIBS)

FUZZ_TARGETS += tests/fuzz/fuzz-gguf
EXTRA_DIST += tests/fuzz/fuzz-gguf.c tests/fuzz/corpus-gguf
FUZZ_GGUF_SRCS = $(top_srcdir)/tests/fuzz/fuzz-gguf.c $(top_srcdir)/common/err.c \
	$(top_srcdir)/common/grow.c \
	$(top_srcdir)/kernels/quant.c $(top_srcdir)/model/gguf.c
tests/fuzz/fuzz-gguf: $(FUZZ_GGUF_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_GEN)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_GGUF_SRCS) -lm
CLEANFILES += tests/fuzz/fuzz-gguf
# ---- end GGUF reader ----

# ---- sampler (engine/sampler.c) ----
check_PROGRAMS += tests/unit/test-sampler
TESTS += tests/unit/test-sampler
tests_unit_test_sampler_SOURCES = tests/unit/test-sampler.c tests/unit/check.h
tests_unit_test_sampler_LDADD = engine/libllmq_engine.a common/libllmq_common.a -lm
# ---- end sampler ----

# ---- grammar-constrained decoding (engine/grammar.c, jsonschema.c, tokenmask.c) ----
check_PROGRAMS += tests/unit/test-jsonschema
TESTS += tests/unit/test-jsonschema
tests_unit_test_jsonschema_SOURCES = tests/unit/test-jsonschema.c tests/unit/check.h
tests_unit_test_jsonschema_LDADD = engine/libllmq_engine.a common/libllmq_common.a -lm
check_PROGRAMS += tests/unit/test-grammar
TESTS += tests/unit/test-grammar
tests_unit_test_grammar_SOURCES = tests/unit/test-grammar.c tests/unit/check.h
tests_unit_test_grammar_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)
check_PROGRAMS += tests/unit/test-engine-grammar
TESTS += tests/unit/test-engine-grammar
tests_unit_test_engine_grammar_SOURCES = tests/unit/test-engine-grammar.c tests/unit/check.h \
	tests/unit/model_fixture.h
tests_unit_test_engine_grammar_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)
# llmq-run --json-schema: 1,000 sampled outputs over tests/data/schemas, judged by
# Python's jsonschema (python3-jsonschema)
TESTS += tests/integration/test-structured-outputs.sh
EXTRA_DIST += tests/integration/test-structured-outputs.sh

FUZZ_TARGETS += tests/fuzz/fuzz-jsonschema
EXTRA_DIST += tests/fuzz/fuzz-jsonschema.c tests/fuzz/corpus-jsonschema
FUZZ_JSONSCHEMA_SRCS = $(top_srcdir)/tests/fuzz/fuzz-jsonschema.c \
	$(top_srcdir)/engine/jsonschema.c $(top_srcdir)/engine/grammar.c \
	$(top_srcdir)/engine/tokenmask.c $(top_srcdir)/common/json.c $(top_srcdir)/common/utf8.c \
	$(top_srcdir)/common/err.c $(top_srcdir)/model/tokenizer.c $(top_srcdir)/model/pretok.c \
	$(top_srcdir)/model/gguf.c $(top_srcdir)/kernels/quant.c
tests/fuzz/fuzz-jsonschema: $(FUZZ_JSONSCHEMA_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_GEN)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_JSONSCHEMA_SRCS) $(UTF8PROC_LIBS) -lm
CLEANFILES += tests/fuzz/fuzz-jsonschema
# ---- end grammar-constrained decoding ----

# ---- proto: wire protocol (proto/wire.c) ----
check_PROGRAMS += tests/unit/test-wire
TESTS += tests/unit/test-wire
tests_unit_test_wire_SOURCES = tests/unit/test-wire.c tests/unit/check.h
tests_unit_test_wire_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
tests_unit_test_wire_LDADD = $(LLMQ_PROTO_LIBS)
# a client's CURVE key files (proto/curve.c)
check_PROGRAMS += tests/unit/test-curve
TESTS += tests/unit/test-curve
tests_unit_test_curve_SOURCES = tests/unit/test-curve.c tests/unit/check.h
tests_unit_test_curve_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS)
tests_unit_test_curve_LDADD = $(LLMQ_PROTO_LIBS) $(ZMQ_LIBS)
# ---- end proto: wire ----

# ---- CPU engine parity with llama.cpp (model/, engine/, kernels/cpu) ----
check_PROGRAMS += tests/unit/test-parity
TESTS += tests/unit/test-parity
tests_unit_test_parity_SOURCES = tests/unit/test-parity.c tests/unit/check.h
tests_unit_test_parity_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)

# The synthetic model of each architecture that tests/data/reference has
# llama.cpp's outputs for: written by llmq-mkmodel at check time (same seed,
# same bytes; test-parity checks them against the files the references were
# made from) rather than committed.
SYNTH_MODELS = tests/synth/synth-llama3-q4km.gguf tests/synth/synth-qwen2-q4km.gguf \
	tests/synth/synth-phi3-q4km.gguf tests/synth/synth-llama3-bpe-q8.gguf \
	tests/synth/synth-qwen2-vocab-q8.gguf tests/synth/synth-llama3-f32.gguf \
	tests/synth/synth-qwen2-f32.gguf tests/synth/synth-phi3-f32.gguf
check_DATA = $(SYNTH_MODELS)
CLEANFILES += $(SYNTH_MODELS) $(SYNTH_MODELS:=.log)
SYNTH_GEN = $(AM_V_GEN)$(MKDIR_P) tests/synth && tools/llmq-mkmodel$(EXEEXT) --threads 1 \
	--layers 2 --ctx 256 -o $@
SYNTH_LOG = >$@.log 2>&1 || { cat $@.log >&2; exit 1; }
SYNTH_SMALL_VOCAB = $(top_srcdir)/tests/data/models/stories260K.gguf
tests/synth/synth-llama3-q4km.gguf: tools/llmq-mkmodel$(EXEEXT) $(SYNTH_SMALL_VOCAB)
	$(SYNTH_GEN) --arch llama3 --vocab $(SYNTH_SMALL_VOCAB) --dim 256 --heads 4 --kv-heads 2 \
	--ff 512 --mix q4_k_m --seed 31 $(SYNTH_LOG)
tests/synth/synth-qwen2-q4km.gguf: tools/llmq-mkmodel$(EXEEXT) $(SYNTH_SMALL_VOCAB)
	$(SYNTH_GEN) --arch qwen2 --tied --vocab $(SYNTH_SMALL_VOCAB) --dim 256 --heads 4 \
	--kv-heads 2 --ff 768 --mix q4_k_m --seed 32 $(SYNTH_LOG)
tests/synth/synth-phi3-q4km.gguf: tools/llmq-mkmodel$(EXEEXT) $(SYNTH_SMALL_VOCAB)
	$(SYNTH_GEN) --arch phi3 --vocab $(SYNTH_SMALL_VOCAB) --dim 256 --heads 4 --kv-heads 4 \
	--ff 512 --mix q4_k_m --seed 33 $(SYNTH_LOG)
tests/synth/synth-llama3-bpe-q8.gguf: tools/llmq-mkmodel$(EXEEXT) \
		$(top_srcdir)/tests/data/vocab/ggml-vocab-llama-bpe.gguf
	$(SYNTH_GEN) --arch llama3 --tied --vocab $(top_srcdir)/tests/data/vocab/ggml-vocab-llama-bpe.gguf \
	--dim 32 --heads 2 --kv-heads 1 --ff 64 --mix q8_0 --seed 34 $(SYNTH_LOG)
tests/synth/synth-qwen2-vocab-q8.gguf: tools/llmq-mkmodel$(EXEEXT) \
		$(top_srcdir)/tests/data/vocab/ggml-vocab-qwen2.gguf
	$(SYNTH_GEN) --arch qwen2 --tied --vocab $(top_srcdir)/tests/data/vocab/ggml-vocab-qwen2.gguf \
	--dim 32 --heads 2 --kv-heads 1 --ff 64 --mix q8_0 --seed 35 $(SYNTH_LOG)
tests/synth/synth-llama3-f32.gguf: tools/llmq-mkmodel$(EXEEXT) $(SYNTH_SMALL_VOCAB)
	$(SYNTH_GEN) --arch llama3 --vocab $(SYNTH_SMALL_VOCAB) --dim 128 --heads 4 --kv-heads 2 \
	--ff 256 --mix f32 --seed 36 $(SYNTH_LOG)
tests/synth/synth-qwen2-f32.gguf: tools/llmq-mkmodel$(EXEEXT) $(SYNTH_SMALL_VOCAB)
	$(SYNTH_GEN) --arch qwen2 --vocab $(SYNTH_SMALL_VOCAB) --dim 128 --heads 4 --kv-heads 2 \
	--ff 256 --mix f32 --seed 37 $(SYNTH_LOG)
tests/synth/synth-phi3-f32.gguf: tools/llmq-mkmodel$(EXEEXT) $(SYNTH_SMALL_VOCAB)
	$(SYNTH_GEN) --arch phi3 --vocab $(SYNTH_SMALL_VOCAB) --dim 128 --heads 4 --kv-heads 2 \
	--ff 256 --mix f32 --seed 38 $(SYNTH_LOG)
# ---- end CPU engine parity ----

# ---- common: errors with a code (common/err.c) ----
check_PROGRAMS += tests/unit/test-err
TESTS += tests/unit/test-err
tests_unit_test_err_SOURCES = tests/unit/test-err.c tests/unit/check.h
tests_unit_test_err_LDADD = common/libllmq_common.a
# ---- end common: errors ----

# ---- model_load: architectures and refusals (model/model.c) ----
check_PROGRAMS += tests/unit/test-model
TESTS += tests/unit/test-model
tests_unit_test_model_SOURCES = tests/unit/test-model.c tests/unit/check.h \
	model/gguf_writer.c model/gguf_writer.h
tests_unit_test_model_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end model_load ----

# ---- common: JSON reader (common/json.c) ----
check_PROGRAMS += tests/unit/test-json
TESTS += tests/unit/test-json
tests_unit_test_json_SOURCES = tests/unit/test-json.c tests/unit/check.h
tests_unit_test_json_LDADD = common/libllmq_common.a
# ---- end common: JSON ----

# ---- common: invariant assertions (common/check.c) ----
check_PROGRAMS += tests/unit/test-check
TESTS += tests/unit/test-check
tests_unit_test_check_SOURCES = tests/unit/test-check.c tests/unit/check.h
tests_unit_test_check_LDADD = common/libllmq_common.a
# ---- end common: invariant assertions ----

# ---- tools/format-check.sh (.clang-format), on a scratch git repository ----
TESTS += tests/unit/test-format-check.sh
EXTRA_DIST += tests/unit/test-format-check.sh tools/format-check.sh .clang-format \
	broker/.clang-format
# ---- end tools/format-check.sh ----

# ---- the backend seam: GPUs, the backend chosen, a KV block's bytes (kernels/select.c, cpu) ----
check_PROGRAMS += tests/unit/test-backend
TESTS += tests/unit/test-backend
tests_unit_test_backend_SOURCES = tests/unit/test-backend.c tests/unit/check.h
tests_unit_test_backend_LDADD = $(LLMQ_BACKEND_LIBS) $(LLMQ_MODEL_LIBS)
# ---- end the backend seam ----

# ---- common: growable arrays, the log line, the command-line table ----
LLMQ_COMMON_TESTS = tests/unit/test-grow tests/unit/test-log tests/unit/test-cli
check_PROGRAMS += $(LLMQ_COMMON_TESTS)
TESTS += $(LLMQ_COMMON_TESTS)
tests_unit_test_grow_SOURCES = tests/unit/test-grow.c tests/unit/check.h
tests_unit_test_log_SOURCES = tests/unit/test-log.c tests/unit/check.h
tests_unit_test_cli_SOURCES = tests/unit/test-cli.c tests/unit/check.h
tests_unit_test_grow_LDADD = common/libllmq_common.a
tests_unit_test_log_LDADD = common/libllmq_common.a
tests_unit_test_cli_LDADD = common/libllmq_common.a
# ---- end common: growable arrays, the log line, the command-line table ----

# ---- tensor types (kernels/quant.c) ----
check_PROGRAMS += tests/unit/test-quant
TESTS += tests/unit/test-quant
tests_unit_test_quant_SOURCES = tests/unit/test-quant.c tests/unit/check.h
tests_unit_test_quant_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end tensor types ----

# ---- llmq-mkmodel round trip (tools/llmq-mkmodel.c) ----
check_PROGRAMS += tests/unit/test-mkmodel
TESTS += tests/unit/test-mkmodel
tests_unit_test_mkmodel_SOURCES = tests/unit/test-mkmodel.c tests/unit/check.h
tests_unit_test_mkmodel_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end llmq-mkmodel round trip ----

# ---- llmq-submit input and output lines (tools/jobfile.c) ----
check_PROGRAMS += tests/unit/test-jobfile
TESTS += tests/unit/test-jobfile
tests_unit_test_jobfile_SOURCES = tests/unit/test-jobfile.c tests/unit/check.h \
	tools/jobfile.c tools/jobfile.h tools/openai.c tools/openai.h
tests_unit_test_jobfile_LDADD = proto/libllmq.la engine/libllmq_engine.a common/libllmq_common.a \
	-lm
# ---- end llmq-submit input and output ----

# ---- tokenizer (model/tokenizer.c, pretok.c; tools/llmq-run) ----
check_PROGRAMS += tests/unit/test-tokenizer
TESTS += tests/unit/test-tokenizer tests/unit/test-cli-tokenize.sh
tests_unit_test_tokenizer_SOURCES = tests/unit/test-tokenizer.c tests/unit/check.h
tests_unit_test_tokenizer_LDADD = $(LLMQ_MODEL_LIBS)
EXTRA_DIST += tests/unit/test-cli-tokenize.sh

FUZZ_TARGETS += tests/fuzz/fuzz-tokenizer
EXTRA_DIST += tests/fuzz/fuzz-tokenizer.c
FUZZ_TOKENIZER_SRCS = $(top_srcdir)/tests/fuzz/fuzz-tokenizer.c \
	$(top_srcdir)/model/tokenizer.c $(top_srcdir)/model/pretok.c \
	$(top_srcdir)/model/gguf.c $(top_srcdir)/kernels/quant.c \
	$(top_srcdir)/common/err.c $(top_srcdir)/common/grow.c $(top_srcdir)/common/utf8.c
tests/fuzz/fuzz-tokenizer: $(FUZZ_TOKENIZER_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_GEN)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_TOKENIZER_SRCS) $(UTF8PROC_LIBS) -lm
CLEANFILES += tests/fuzz/fuzz-tokenizer
# ---- end tokenizer ----

# ---- chat templates (model/chat.c, model/jinja.c) ----
check_PROGRAMS += tests/unit/test-chat
TESTS += tests/unit/test-chat
tests_unit_test_chat_SOURCES = tests/unit/test-chat.c tests/unit/check.h \
	model/gguf_writer.c model/gguf_writer.h
tests_unit_test_chat_LDADD = $(LLMQ_MODEL_LIBS)
# llmq-run --messages, --render-only, --chat-template (tools/llmq-run.c)
TESTS += tests/unit/test-cli-chat.sh
EXTRA_DIST += tests/unit/test-cli-chat.sh
# A chat batch in OpenAI's format through llmq-submit, a broker and a worker on
# the synthetic qwen2 model (tools, broker/, worker/)
TESTS += tests/integration/test-chat-e2e.sh
EXTRA_DIST += tests/integration/test-chat-e2e.sh

FUZZ_TARGETS += tests/fuzz/fuzz-jinja
EXTRA_DIST += tests/fuzz/fuzz-jinja.c tests/fuzz/corpus-jinja tests/fuzz/jinja.dict
FUZZ_JINJA_SRCS = $(top_srcdir)/tests/fuzz/fuzz-jinja.c $(top_srcdir)/model/jinja.c \
	$(top_srcdir)/common/json.c $(top_srcdir)/common/err.c $(top_srcdir)/common/utf8.c
tests/fuzz/fuzz-jinja: $(FUZZ_JINJA_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_GEN)$(FUZZ_CC) $(FUZZ_FLAGS) $(UTF8PROC_CFLAGS) -o $@ $(FUZZ_JINJA_SRCS) $(UTF8PROC_LIBS) -lm
CLEANFILES += tests/fuzz/fuzz-jinja
# ---- end chat templates ----

# ---- proto: wire decoding fuzz target (make fuzz) ----
FUZZ_TARGETS += tests/fuzz/fuzz-wire
EXTRA_DIST += tests/fuzz/fuzz-wire.c tests/fuzz/corpus-wire tests/fuzz/wire.dict \
	tests/fuzz/gen-corpus-wire.py
FUZZ_WIRE_SRCS = $(top_srcdir)/tests/fuzz/fuzz-wire.c $(top_srcdir)/proto/wire.c \
	$(top_srcdir)/proto/job_params.c \
	$(top_srcdir)/common/err.c $(top_srcdir)/common/utf8.c $(top_srcdir)/common/json.c \
	$(top_srcdir)/common/grow.c
tests/fuzz/fuzz-wire: $(FUZZ_WIRE_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_GEN)$(FUZZ_CC) $(FUZZ_FLAGS) $(MSGPACK_CFLAGS) -o $@ $(FUZZ_WIRE_SRCS) $(MSGPACK_LIBS)
CLEANFILES += tests/fuzz/fuzz-wire
# ---- end proto: wire fuzz ----

# ---- proto: client library, llmq-submit and the Python client against a real broker ----
check_PROGRAMS += tests/integration/test-client
TESTS += tests/integration/test-client
tests_integration_test_client_SOURCES = tests/integration/test-client.c $(LLMQ_HARNESS)
tests_integration_test_client_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
tests_integration_test_client_LDADD = proto/libllmq.la $(LLMQ_HARNESS_LIBS) -lm
# ---- end proto: clients against a broker ----

# ---- worker: its parts, and end to end with real brokers, llmq-worker processes and SQLite ----
LLMQ_FLEET = tests/integration/fleet.c tests/integration/fleet.h $(LLMQ_HARNESS)
check_PROGRAMS += tests/integration/test-e2e
TESTS += tests/integration/test-e2e
tests_integration_test_e2e_SOURCES = tests/integration/test-e2e.c $(LLMQ_FLEET)
tests_integration_test_e2e_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
tests_integration_test_e2e_LDADD = proto/libllmq.la $(LLMQ_HARNESS_LIBS)
check_PROGRAMS += tests/integration/test-identity
TESTS += tests/integration/test-identity
tests_integration_test_identity_SOURCES = tests/integration/test-identity.c $(LLMQ_FLEET)
tests_integration_test_identity_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
tests_integration_test_identity_LDADD = proto/libllmq.la $(LLMQ_HARNESS_LIBS)
check_PROGRAMS += tests/integration/test-worker
TESTS += tests/integration/test-worker
tests_integration_test_worker_SOURCES = tests/integration/test-worker.c $(LLMQ_FLEET)
tests_integration_test_worker_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
tests_integration_test_worker_LDADD = proto/libllmq.la $(LLMQ_HARNESS_LIBS)
check_PROGRAMS += tests/unit/test-worker-parts
TESTS += tests/unit/test-worker-parts
tests_unit_test_worker_parts_SOURCES = tests/unit/test-worker-parts.c tests/unit/check.h
tests_unit_test_worker_parts_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
tests_unit_test_worker_parts_LDADD = $(LLMQ_WORKER_LIBS)
# ---- end worker ----

# ---- engine scheduling rules and the KV pool (engine/engine.c, engine/kvpool.c) ----
check_PROGRAMS += tests/unit/test-kvpool
TESTS += tests/unit/test-kvpool
tests_unit_test_kvpool_SOURCES = tests/unit/test-kvpool.c tests/unit/check.h
tests_unit_test_kvpool_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)

check_PROGRAMS += tests/unit/test-engine
TESTS += tests/unit/test-engine
tests_unit_test_engine_SOURCES = tests/unit/test-engine.c tests/unit/check.h \
	tests/unit/model_fixture.h
tests_unit_test_engine_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)
# the engine's half of sampling on the device (a CPU backend with the ops)
check_PROGRAMS += tests/unit/test-engine-draw
TESTS += tests/unit/test-engine-draw
tests_unit_test_engine_draw_SOURCES = tests/unit/test-engine-draw.c tests/unit/check.h
tests_unit_test_engine_draw_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)
# llmq-run --bench (its table, JSON and step accounting: tools/run_engine.c),
# --batch and --parallel, each with its own default (tools/llmq-run.c)
TESTS += tests/unit/test-cli-run.sh
EXTRA_DIST += tests/unit/test-cli-run.sh
# ---- end engine scheduling rules ----

# ---- llmq-stats: reports on a store-written database, CLI, plot (tools/stats/) ----
check_PROGRAMS += tests/unit/test-stats
TESTS += tests/unit/test-stats
tests_unit_test_stats_SOURCES = tests/unit/test-stats.c tests/unit/check.h
tests_unit_test_stats_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_stats_LDADD = tools/libllmq_stats.a $(LLMQ_BROKER_LIBS) -lm

# On a real run (broker, two workers, llmq-submit); and the client guide's
# examples in C, Python and Node.js against a broker and workers.
TESTS += tests/integration/test-stats-run.sh tests/integration/test-examples.sh
EXTRA_DIST += tests/unit/check.sh tests/integration/env.sh tests/integration/test-stats-run.sh \
	tests/integration/test-examples.sh
# Cached prompt tokens per result and the prefix hit rate in llmq-stats, on a
# worker with its prefix cache and one without
TESTS += tests/integration/test-prefix-stats.sh
EXTRA_DIST += tests/integration/test-prefix-stats.sh
TESTS += tests/integration/test-kv-cache.sh
EXTRA_DIST += tests/integration/test-kv-cache.sh
# The broker starts while another process holds a read lock on its database.
TESTS += tests/integration/test-db-reader.sh
EXTRA_DIST += tests/integration/test-db-reader.sh
# The Python client: requests of its own between a wait's results
TESTS += tests/integration/test-client-python.sh
EXTRA_DIST += tests/integration/test-client-python.sh
# llmq-submit and a batch larger than the broker's --max-queued
TESTS += tests/integration/test-submit-queue.sh
EXTRA_DIST += tests/integration/test-submit-queue.sh
# A broker start that fails once its database is open: what it leaves
TESTS += tests/integration/test-broker-start.sh
EXTRA_DIST += tests/integration/test-broker-start.sh
# The README's demo (tools/demo.sh) on a small batch, and what it leaves
TESTS += tests/integration/test-demo.sh
EXTRA_DIST += tests/integration/test-demo.sh
# An OpenAI batch file as users have it (issue 19), through a broker and two
# workers; its generator makes the 200-line file too (docs/OPENAI.md).
TESTS += tests/integration/test-openai-batch.sh
EXTRA_DIST += tests/integration/test-openai-batch.sh tests/integration/gen-openai-batch.py \
	tests/integration/check-openai-batch.py
# test-examples installs the Node.js example's packages here, once.
clean-local: clean-node-example
clean-node-example:
	-rm -rf tests/integration/node-example
.PHONY: clean-node-example
check_PROGRAMS += docs/examples/client
docs_examples_client_SOURCES = docs/examples/client.c
docs_examples_client_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/proto
docs_examples_client_LDADD = proto/libllmq.la

# Every program's --help and man page (man/) name every flag it accepts.
TESTS += tests/unit/test-help.sh
EXTRA_DIST += tests/unit/test-help.sh
# ---- end llmq-stats ----

# ---- CPU dot kernels: SIMD bit-identical to the reference (kernels/cpu/dot*.c) ----
check_PROGRAMS += tests/unit/test-dot
TESTS += tests/unit/test-dot
tests_unit_test_dot_SOURCES = tests/unit/test-dot.c tests/unit/check.h
tests_unit_test_dot_LDADD = kernels/libllmq_kernels.a common/libllmq_common.a -lm
check_PROGRAMS += tests/unit/test-cpu-kernels
TESTS += tests/unit/test-cpu-kernels
tests_unit_test_cpu_kernels_SOURCES = tests/unit/test-cpu-kernels.c tests/unit/check.h
tests_unit_test_cpu_kernels_LDADD = $(LLMQ_MODEL_LIBS)
check_PROGRAMS += tests/unit/test-kv8
TESTS += tests/unit/test-kv8
tests_unit_test_kv8_SOURCES = tests/unit/test-kv8.c tests/unit/check.h tests/unit/model_fixture.h
tests_unit_test_kv8_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)
check_PROGRAMS += tests/unit/test-threadpool
TESTS += tests/unit/test-threadpool
tests_unit_test_threadpool_SOURCES = tests/unit/test-threadpool.c tests/unit/check.h
tests_unit_test_threadpool_LDADD = kernels/libllmq_kernels.a common/libllmq_common.a
# ---- end CPU dot kernels ----

# ---- CUDA backend parity (tests/gpu; needs a GPU, so not in TESTS: tests/gpu/run.sh) ----
if HAVE_CUDA
noinst_PROGRAMS += tests/gpu/gpu-parity
tests_gpu_gpu_parity_SOURCES = tests/gpu/gpu-parity.c
tests_gpu_gpu_parity_LDADD = engine/libllmq_engine.a $(LLMQ_CUDA_LIBS) $(LLMQ_MODEL_LIBS)
# The tensor-core arithmetic the batch-invariant matmuls rest on (docs/perf/05).
noinst_PROGRAMS += tests/gpu/gpu-mma-numerics
tests_gpu_gpu_mma_numerics_SOURCES = tests/gpu/gpu-mma-numerics.cu tests/gpu/check_cuda.h
tests_gpu_gpu_mma_numerics_LDADD = $(LLMQ_CUDA_LIBS)
# Whether kernels overlap their predecessor (PDL) here, and what a launch costs.
noinst_PROGRAMS += tests/gpu/gpu-pdl-probe
tests_gpu_gpu_pdl_probe_SOURCES = tests/gpu/gpu-pdl-probe.cu tests/gpu/check_cuda.h
tests_gpu_gpu_pdl_probe_LDADD = $(LLMQ_CUDA_LIBS)
endif
EXTRA_DIST += tests/gpu/run.sh tests/gpu/gpus.sh
# ---- end CUDA backend parity ----

# ---- scale-out: CURVE, remote workers in a network namespace, model routing ----
TESTS += tests/integration/test-scale.sh
EXTRA_DIST += tests/integration/test-scale.sh
# A real file system filling up: a tmpfs in a namespace of its own (skipped
# where unprivileged user namespaces are not allowed).
TESTS += tests/integration/test-disk-full.sh
EXTRA_DIST += tests/integration/test-disk-full.sh
# ---- end scale-out ----

# ---- llmq-worker --gpus: the supervisor (worker/supervisor.c) and its flags ----
check_PROGRAMS += tests/unit/test-supervisor
TESTS += tests/unit/test-supervisor tests/unit/test-worker-gpus.sh
tests_unit_test_supervisor_SOURCES = tests/unit/test-supervisor.c tests/unit/check.h
tests_unit_test_supervisor_LDADD = $(LLMQ_WORKER_LIBS)
EXTRA_DIST += tests/unit/test-worker-gpus.sh
# ---- end llmq-worker --gpus ----

# ---- recovery: clients across broker restarts, and the fault-injection loop ----
# llmq-submit and the Python client across kill -9 and SIGTERM of the broker
TESTS += tests/integration/test-recovery.sh
EXTRA_DIST += tests/integration/test-recovery.sh
# kill -9 and SIGSTOP of the broker and of workers while a batch runs: four
# rounds of tests/faults.py, whose long run is by hand (-n 200)
TESTS += tests/integration/test-faults.sh
EXTRA_DIST += tests/integration/test-faults.sh tests/faults.py
# ---- end recovery ----
