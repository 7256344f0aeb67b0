# tools: rules are added as the room grows

# ---- llmq-mkmodel (tools/llmq-mkmodel.c, model/gguf_writer.c) ----
bin_PROGRAMS += tools/llmq-mkmodel
tools_llmq_mkmodel_SOURCES = tools/llmq-mkmodel.c \
	model/gguf_writer.c model/gguf_writer.h
tools_llmq_mkmodel_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end llmq-mkmodel ----

# ---- llmq-submit (tools/llmq-submit.c, tools/jobfile.c) ----
bin_PROGRAMS += tools/llmq-submit
tools_llmq_submit_SOURCES = tools/llmq-submit.c tools/jobfile.c tools/jobfile.h \
	tools/openai.c tools/openai.h
# The engine's schema compiler (engine/jsonschema, engine/grammar: common/
# only), so that a schema llmq cannot enforce fails its line before submit.
tools_llmq_submit_LDADD = proto/libllmq.la engine/libllmq_engine.a common/libllmq_common.a -lm
# ---- end llmq-submit ----

# ---- llmq-run (tools/llmq-run.c) ----
bin_PROGRAMS += tools/llmq-run
tools_llmq_run_SOURCES = tools/llmq-run.c tools/run_engine.c tools/run_engine.h
tools_llmq_run_LDADD = engine/libllmq_engine.a $(LLMQ_BACKEND_LIBS) proto/libllmq_proto.a \
	$(LLMQ_MODEL_LIBS)
# ---- end llmq-run ----

# ---- llmq-stats (tools/llmq-stats.c, tools/stats/) ----
bin_PROGRAMS += tools/llmq-stats
noinst_LIBRARIES += tools/libllmq_stats.a
tools_libllmq_stats_a_SOURCES = \
	tools/stats/table.c tools/stats/table.h \
	tools/stats/when.c tools/stats/when.h \
	tools/stats/scale.c tools/stats/scale.h \
	tools/stats/report.c tools/stats/report.h \
	tools/stats/svg.c tools/stats/svg.h \
	tools/stats/plot.c tools/stats/plot.h
tools_libllmq_stats_a_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS)
LLMQ_STATS_LIBS = tools/libllmq_stats.a common/libllmq_common.a $(SQLITE_LIBS) -lm
tools_llmq_stats_SOURCES = tools/llmq-stats.c
tools_llmq_stats_LDADD = $(LLMQ_STATS_LIBS)
# ---- end llmq-stats ----

# ---- demo (tools/demo.sh, run by tools/dev.sh demo) ----
EXTRA_DIST += tools/demo.sh
# ---- end demo ----

# ---- llmq-keygen (tools/llmq-keygen.c) ----
bin_PROGRAMS += tools/llmq-keygen
tools_llmq_keygen_SOURCES = tools/llmq-keygen.c
tools_llmq_keygen_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS)
tools_llmq_keygen_LDADD = $(LLMQ_PROTO_LIBS) $(ZMQ_LIBS)
# ---- end llmq-keygen ----
