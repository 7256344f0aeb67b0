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

# --version names the git commit of the build (tools/commit-stamp.sh): the
# header is remade by every make and rewritten only when the commit changes,
# so only cli.c is rebuilt then.  A tarball records the commit in .commit.
BUILT_SOURCES += common/commit.h
DISTCLEANFILES += common/commit.h
EXTRA_DIST += tools/commit-stamp.sh
common/commit.h: common-commit-stamp
	@$(MKDIR_P) common
	@$(SHELL) $(top_srcdir)/tools/commit-stamp.sh $(top_srcdir) common/commit.h
common-commit-stamp:
.PHONY: common-commit-stamp
dist-hook:
	$(SHELL) $(top_srcdir)/tools/commit-stamp.sh $(top_srcdir) >$(distdir)/.commit
