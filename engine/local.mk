# engine/: the scheduler, paged KV, sampler and perplexity (libllmq_engine),
# used by llmq-worker and llmq-run alike.
noinst_LIBRARIES += engine/libllmq_engine.a
engine_libllmq_engine_a_SOURCES = \
	engine/sampler.c engine/sampler.h \
	engine/kvpool.c engine/kvpool.h \
	engine/engine.c engine/engine.h \
	engine/perplexity.c engine/perplexity.h \
	engine/grammar.c engine/grammar.h \
	engine/jsonschema.c engine/jsonschema.h \
	engine/tokenmask.c engine/tokenmask.h
