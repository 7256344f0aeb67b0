# ---- proto: wire protocol (wire.c), shared by broker, worker and clients ----
noinst_LIBRARIES += proto/libllmq_proto.a
proto_libllmq_proto_a_SOURCES = proto/wire.c proto/wire.h
proto_libllmq_proto_a_CFLAGS = $(AM_CFLAGS) $(MSGPACK_CFLAGS)
# Link order: proto needs common.
LLMQ_PROTO_LIBS = proto/libllmq_proto.a common/libllmq_common.a $(MSGPACK_LIBS)
EXTRA_DIST += docs/PROTOCOL.md
