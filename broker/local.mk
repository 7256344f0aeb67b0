# broker: llmq-broker and its SQLite store.
noinst_LIBRARIES += broker/libllmq_broker.a
broker_libllmq_broker_a_SOURCES = \
	broker/store.c broker/store.h broker/schema.sql.h
broker_libllmq_broker_a_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS)

LLMQ_BROKER_LIBS = broker/libllmq_broker.a common/libllmq_common.a $(SQLITE_LIBS)

check_PROGRAMS += tests/unit/test-store
TESTS += tests/unit/test-store
tests_unit_test_store_SOURCES = tests/unit/test-store.c tests/unit/check.h
tests_unit_test_store_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS)
tests_unit_test_store_LDADD = $(LLMQ_BROKER_LIBS)
