# man: the manual pages, and the documents they refer to, installed by
# `make install` (man pages under $(mandir), documents under $(docdir)).
dist_man_MANS = \
	man/llmq.7 \
	man/llmq-broker.1 \
	man/llmq-worker.1 \
	man/llmq-submit.1 \
	man/llmq-stats.1 \
	man/llmq-run.1 \
	man/llmq-mkmodel.1 \
	man/llmq-keygen.1

# The documents the man pages refer to (distributed by EXTRA_DIST in Makefile.am).
doc_DATA = docs/ARCHITECTURE.md docs/PROTOCOL.md docs/SCHEMA.md docs/OPERATIONS.md \
	docs/CLIENTS.md docs/OPENAI.md
