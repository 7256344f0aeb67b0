#!/bin/sh
# Bootstraps the build system from configure.ac and Makefile.am.
set -e
cd "$(dirname "$0")"
# Several builds may bootstrap the same tree at once: take turns.
exec 9>"${TMPDIR:-/tmp}/llmq-autogen.lock"
flock 9 2>/dev/null || true
autoreconf -fi
