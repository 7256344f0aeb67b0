# bench: rules are added as the room grows

# ---- tokenizer throughput (bench/bench-tokenizer.c) ----
noinst_PROGRAMS += bench/bench-tokenizer
bench_bench_tokenizer_SOURCES = bench/bench-tokenizer.c
bench_bench_tokenizer_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end tokenizer throughput ----

# ---- grammar-constrained decoding on the host (bench/bench-grammar.c) ----
noinst_PROGRAMS += bench/bench-grammar
bench_bench_grammar_SOURCES = bench/bench-grammar.c
bench_bench_grammar_LDADD = engine/libllmq_engine.a $(LLMQ_MODEL_LIBS)
# ---- end grammar-constrained decoding ----

# ---- each sampler setting's cost per decode step (bench/bench-sampling.c; bench/cuda.sh) ----
noinst_PROGRAMS += bench/bench-sampling
bench_bench_sampling_SOURCES = bench/bench-sampling.c
bench_bench_sampling_LDADD = engine/libllmq_engine.a $(LLMQ_BACKEND_LIBS) $(LLMQ_MODEL_LIBS)
# ---- end sampler settings ----

# ---- broker throughput (bench/bench-broker.c) ----
noinst_PROGRAMS += bench/bench-broker
bench_bench_broker_SOURCES = bench/bench-broker.c $(LLMQ_HARNESS)
bench_bench_broker_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
bench_bench_broker_LDADD = $(LLMQ_HARNESS_LIBS)
EXTRA_DIST += bench/bench-e2e.sh
# ---- end broker throughput ----

# ---- CUDA ops against the roofline (bench/bench-cuda-ops.c; bench/cuda.sh) ----
if HAVE_CUDA
noinst_PROGRAMS += bench/bench-cuda-ops
bench_bench_cuda_ops_SOURCES = bench/bench-cuda-ops.c
bench_bench_cuda_ops_LDADD = $(LLMQ_CUDA_LIBS) $(LLMQ_MODEL_LIBS)
endif
EXTRA_DIST += bench/cuda.sh
# cuBLAS's fp16 rate at the same shapes (torch on the GPU machine), and
# where a kernel's warps stall (an ncu source page, docs/perf/10)
EXTRA_DIST += bench/cublas-gemm.py bench/ncu-stalls.py bench/ncu-times.py
# variants of the tree (docs/perf/next's patches) built here for one A/B device run
EXTRA_DIST += bench/ab-variants.sh
# ---- end CUDA ops ----

# ---- fleet and multi-GPU scaling (bench/bench-fleet.sh, bench/scale-gpus.sh) ----
EXTRA_DIST += bench/bench-fleet.sh bench/scale-gpus.sh bench/gpu-e2e.sh bench/lib.sh
# ---- end fleet and multi-GPU scaling ----
