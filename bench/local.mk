# bench: rules are added as the room grows

# ---- tokenizer throughput (bench/bench-tokenizer.c) ----
noinst_PROGRAMS += bench/bench-tokenizer
bench_bench_tokenizer_SOURCES = bench/bench-tokenizer.c
bench_bench_tokenizer_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end tokenizer throughput ----
