# tools: rules are added as the room grows

# ---- llmq-mkmodel (tools/llmq-mkmodel.c, worker/model/gguf_writer.c) ----
bin_PROGRAMS += tools/llmq-mkmodel
tools_llmq_mkmodel_SOURCES = tools/llmq-mkmodel.c \
	worker/model/gguf_writer.c worker/model/gguf_writer.h
tools_llmq_mkmodel_LDADD = $(LLMQ_MODEL_LIBS)
# ---- end llmq-mkmodel ----

# ---- llmq-submit (tools/llmq-submit.c, tools/jobfile.c) ----
bin_PROGRAMS += tools/llmq-submit
tools_llmq_submit_SOURCES = tools/llmq-submit.c tools/jobfile.c tools/jobfile.h
tools_llmq_submit_LDADD = proto/libllmq.la common/libllmq_common.a -lm
# ---- end llmq-submit ----

# ---- llmq-run (tools/llmq-run.c) ----
bin_PROGRAMS += tools/llmq-run
tools_llmq_run_SOURCES = tools/llmq-run.c tools/run_engine.c tools/run_engine.h
tools_llmq_run_LDADD = worker/libllmq_engine.a $(LLMQ_MODEL_LIBS)
# ---- end llmq-run ----

# ---- demo (tools/demo.sh, run by tools/dev.sh demo) ----
EXTRA_DIST += tools/demo.sh
# ---- end demo ----
