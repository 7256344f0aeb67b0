# tools: rules are added as the room grows

# ---- llmq-submit (tools/llmq-submit.c, tools/jobfile.c) ----
bin_PROGRAMS += tools/llmq-submit
tools_llmq_submit_SOURCES = tools/llmq-submit.c tools/jobfile.c tools/jobfile.h
tools_llmq_submit_LDADD = proto/libllmq.la common/libllmq_common.a -lm
# ---- end llmq-submit ----
