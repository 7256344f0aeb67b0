# ---- llmq-worker (worker/main.c over libllmq_worker: link, session, jobs, jobconv, ...) ----
noinst_LIBRARIES += worker/libllmq_worker.a
worker_libllmq_worker_a_SOURCES = \
	worker/link.c worker/link.h \
	worker/session.c worker/session.h \
	worker/jobs.c worker/jobs.h \
	worker/jobconv.c worker/jobconv.h \
	worker/formats.c worker/formats.h \
	worker/identity.c worker/identity.h \
	worker/supervisor.c worker/supervisor.h \
	worker/text.c worker/text.h
worker_libllmq_worker_a_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(MSGPACK_CFLAGS)

# Link order: worker needs engine needs model needs kernels needs common; proto
# for the wire.  LLMQ_BACKEND_LIBS (kernels/local.mk) has no CUDA in a build without it.
LLMQ_WORKER_LIBS = worker/libllmq_worker.a engine/libllmq_engine.a $(LLMQ_BACKEND_LIBS) \
	$(LLMQ_MODEL_LIBS) $(LLMQ_PROTO_LIBS) $(ZMQ_LIBS)

bin_PROGRAMS += worker/llmq-worker
worker_llmq_worker_SOURCES = worker/main.c
worker_llmq_worker_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS)
worker_llmq_worker_LDADD = $(LLMQ_WORKER_LIBS)
# ---- end llmq-worker ----
