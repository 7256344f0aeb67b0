# ---- proto: wire protocol (wire.c), shared by broker, worker and clients ----
noinst_LIBRARIES += proto/libllmq_proto.a
proto_libllmq_proto_a_SOURCES = proto/wire.c proto/wire.h proto/job_params.c proto/job_params.h \
	proto/curve.c proto/curve.h
proto_libllmq_proto_a_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS) $(ZMQ_CFLAGS)
# Link order: proto needs common.
LLMQ_PROTO_LIBS = proto/libllmq_proto.a common/libllmq_common.a $(MSGPACK_LIBS)

# ---- proto: the installed client library (llmq.h, libllmq, llmq.pc) ----
# It carries its own copies of the wire and common objects so that it has no
# uninstalled dependencies; only the public API is exported.
lib_LTLIBRARIES += proto/libllmq.la
proto_libllmq_la_SOURCES = proto/client.c proto/llmq.h proto/wire.c proto/wire.h \
	proto/idset.c proto/idset.h \
	proto/job_params.c proto/job_params.h \
	proto/curve.c proto/curve.h \
	common/err.c common/err.h common/utf8.c common/utf8.h \
	common/json.c common/json.h common/grow.c common/grow.h \
	common/clock.c common/clock.h
proto_libllmq_la_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(MSGPACK_CFLAGS)
proto_libllmq_la_LIBADD = $(ZMQ_LIBS) $(MSGPACK_LIBS)
proto_libllmq_la_LDFLAGS = -version-info 1:0:1 \
	-export-symbols-regex '^llmq_(connect|connect_curve|curve_load|set_timeout|set_wait_lease|close|job_init|job_check|submit|wait_begin|wait_next|wait_summary|wait_get_health|wait_free|get_status|cancel|status_free|get_stats|stats_free|code_name|state_name)$$'
include_HEADERS += proto/llmq.h
pkgconfigdir = $(libdir)/pkgconfig
pkgconfig_DATA = proto/llmq.pc
EXTRA_DIST += proto/python/llmq_client.py
