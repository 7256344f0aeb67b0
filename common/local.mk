noinst_LIBRARIES += common/libllmq_common.a
common_libllmq_common_a_SOURCES = \
	common/err.c common/err.h \
	common/check.c common/check.h \
	common/utf8.c common/utf8.h \
	common/json.c common/json.h \
	common/file.c common/file.h \
	common/cli.c common/cli.h \
	common/clock.c common/clock.h \
	common/grow.c common/grow.h \
	common/log.c common/log.h \
	common/topk.c common/topk.h
