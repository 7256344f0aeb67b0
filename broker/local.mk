# broker: llmq-broker, its SQLite store, and their tests.
noinst_LIBRARIES += broker/libllmq_broker.a
broker_libllmq_broker_a_SOURCES = \
	broker/store.c broker/store.h broker/schema.sql.h \
	broker/lpblob.c broker/lpblob.h \
	broker/checkpointer.c broker/checkpointer.h \
	broker/net.c broker/net.h \
	broker/pool.c broker/pool.h \
	broker/waiters.c broker/waiters.h \
	broker/broker.c broker/broker.h broker/broker_priv.h \
	broker/on_client.c broker/on_worker.c \
	broker/zap.c broker/zap.h
broker_libllmq_broker_a_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS) $(ZMQ_CFLAGS) $(MSGPACK_CFLAGS)

# Link order: broker needs proto needs common.
LLMQ_BROKER_LIBS = broker/libllmq_broker.a $(LLMQ_PROTO_LIBS) $(SQLITE_LIBS) $(ZMQ_LIBS) $(LLMQ_PTHREAD)

bin_PROGRAMS += broker/llmq-broker
broker_llmq_broker_SOURCES = broker/main.c
broker_llmq_broker_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS) $(ZMQ_CFLAGS)
broker_llmq_broker_LDADD = $(LLMQ_BROKER_LIBS)

check_PROGRAMS += tests/unit/test-store
TESTS += tests/unit/test-store
tests_unit_test_store_SOURCES = tests/unit/test-store.c tests/unit/check.h \
	tests/unit/sql_read.c tests/unit/sql_read.h
tests_unit_test_store_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_store_LDADD = $(LLMQ_BROKER_LIBS)

# Integration tests: a real llmq-broker on ipc:// endpoints in a temp dir.
LLMQ_HARNESS = tests/integration/harness.c tests/integration/harness.h tests/unit/check.h \
	tests/unit/sql_read.c tests/unit/sql_read.h
LLMQ_HARNESS_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(MSGPACK_CFLAGS) $(SQLITE_CFLAGS)
LLMQ_HARNESS_LIBS = $(LLMQ_PROTO_LIBS) $(ZMQ_LIBS) $(SQLITE_LIBS)

check_PROGRAMS += tests/integration/test-broker
TESTS += tests/integration/test-broker
tests_integration_test_broker_SOURCES = tests/integration/test-broker.c $(LLMQ_HARNESS)
tests_integration_test_broker_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
tests_integration_test_broker_LDADD = $(LLMQ_HARNESS_LIBS)

check_PROGRAMS += tests/integration/test-broker-workers
TESTS += tests/integration/test-broker-workers
tests_integration_test_broker_workers_SOURCES = tests/integration/test-broker-workers.c $(LLMQ_HARNESS)
tests_integration_test_broker_workers_CFLAGS = $(LLMQ_HARNESS_CFLAGS)
tests_integration_test_broker_workers_LDADD = $(LLMQ_HARNESS_LIBS)
