#!/bin/sh
# commit-stamp: the git commit a build is made from, for --version.
#
#   tools/commit-stamp.sh SRCDIR OUT.h   writes OUT.h (#define LLMQ_COMMIT "...")
#                                         only when its text changes, so that
#                                         an unchanged commit rebuilds nothing
#   tools/commit-stamp.sh SRCDIR         prints the commit (make dist records
#                                         it in the tarball as .commit)
#
# The commit is SRCDIR's HEAD, with -dirty when tracked files differ from
# it, when SRCDIR is the top of a git checkout; else what SRCDIR/.commit
# says (a release tarball); else empty (--version then names no commit).
# A tarball unpacked inside another checkout (make distcheck) is not taken
# for that checkout.
srcdir=$1
out=$2

commit=
top=$(git -C "$srcdir" rev-parse --show-toplevel 2>/dev/null)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$srcdir" && pwd -P)" ]; then
    commit=$(git -C "$srcdir" rev-parse --short=12 HEAD 2>/dev/null)
    if [ -n "$commit" ] && ! git -C "$srcdir" diff --quiet HEAD -- 2>/dev/null; then
        commit=$commit-dirty
    fi
elif [ -f "$srcdir/.commit" ]; then
    commit=$(tr -cd '0-9a-z-' <"$srcdir/.commit")
fi

if [ -z "$out" ]; then
    echo "$commit"
    exit 0
fi
line="#define LLMQ_COMMIT \"$commit\""
if [ ! -f "$out" ] || [ "$(cat "$out")" != "$line" ]; then
    echo "$line" >"$out.tmp" && mv "$out.tmp" "$out"
fi
