#!/bin/sh
# test-help: every program's --help and man page name every flag it accepts.
#
# Pins: for each installed program, each flag of its cli table (common/cli.h,
# read from its source: long names, and short letters where it has them),
# -h/--help and --version, which cli gives every program, appears in its
# --help text and in its man page; --help exits 0; --version exits 0 and
# prints one line, "PROGRAM (llmq) VERSION, commit COMMIT", with configure's
# version and the commit of the source tree (tools/commit-stamp.sh); no
# program parses its command line any other way (no getopt left); the man
# pages and llmq(7) render without groff warnings.  A flag added to a
# program without documentation fails here.

if [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_BUILDDIR and LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
. "$LLMQ_SRCDIR/tests/unit/check.sh"
TMP=$(mktemp -d) || exit 99
trap 'rm -rf "$TMP"' EXIT

# The rows of a cli table start {"name", LETTER, VALUE-NAME: LETTER is 'x' or
# 0, VALUE-NAME a string or NULL (a switch).
q="'"
TABLE_ROW="{\"[a-z0-9-]*\", *\($q[a-zA-Z]$q\|0\), *\(\"\|NULL\)"

# Long option names of the cli table in a source file, and cli's own --help
# and --version.
long_options() {
    { grep -o "$TABLE_ROW" "$1" | sed 's/{"\([a-z0-9-]*\)".*/\1/'; echo help; echo version; } |
        sort -u
}

# Short letters of the table's rows, and cli's own -h.
short_options() {
    { grep -o "$TABLE_ROW" "$1" | sed -n "s/.*, *$q\(.\)$q,.*/\1/p"; echo h; } | sort -u
}

# documents PROGRAM SOURCE MAN: each flag in --help and in the man page.
documents() {
    prog=$1 src=$LLMQ_SRCDIR/$2 page=$LLMQ_SRCDIR/man/$3
    name=$(basename "$prog")
    "$LLMQ_BUILDDIR/$prog" --help >"$TMP/help" 2>&1
    check $? "$name --help exits 0"
    # In roff a hyphen is written \- : read the page as plain text.
    sed 's/\\-/-/g; s/\\f[BIRP]//g' "$page" >"$TMP/man"
    missing_help="" missing_man="" n=0
    for opt in $(long_options "$src"); do
        n=$((n + 1))
        grep -q -- "--$opt\\b" "$TMP/help" || missing_help="$missing_help --$opt"
        grep -q -- "--$opt\\b" "$TMP/man" || missing_man="$missing_man --$opt"
    done
    for opt in $(short_options "$src"); do
        n=$((n + 1))
        grep -q -- "-$opt\\b" "$TMP/help" || missing_help="$missing_help -$opt"
        grep -q -- "-$opt\\b" "$TMP/man" || missing_man="$missing_man -$opt"
    done
    [ "$n" -gt 2 ] && [ -z "$missing_help" ]
    check $? "$name --help names its $n flags${missing_help:+ (missing:$missing_help)}"
    [ "$n" -gt 2 ] && [ -z "$missing_man" ]
    check $? "man/$3 names its $n flags${missing_man:+ (missing:$missing_man)}"
}

documents broker/llmq-broker broker/main.c llmq-broker.1
documents worker/llmq-worker worker/main.c llmq-worker.1
documents tools/llmq-submit tools/llmq-submit.c llmq-submit.1
documents tools/llmq-stats tools/llmq-stats.c llmq-stats.1
documents tools/llmq-run tools/llmq-run.c llmq-run.1
documents tools/llmq-mkmodel tools/llmq-mkmodel.c llmq-mkmodel.1
documents tools/llmq-keygen tools/llmq-keygen.c llmq-keygen.1

# The version configure was given, and the commit as the build records it.
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$LLMQ_BUILDDIR/config.h")
commit=$(sh "$LLMQ_SRCDIR/tools/commit-stamp.sh" "$LLMQ_SRCDIR")
for prog in broker/llmq-broker worker/llmq-worker tools/llmq-run tools/llmq-submit \
    tools/llmq-stats tools/llmq-keygen tools/llmq-mkmodel; do
    name=$(basename "$prog")
    out=$("$LLMQ_BUILDDIR/$prog" --version 2>&1)
    rc=$?
    want="$name (llmq) $version${commit:+, commit $commit}"
    [ "$rc" -eq 0 ] && [ -n "$version" ] && [ "$out" = "$want" ]
    check $? "$name --version prints '$want' (got '$out', status $rc)"
done

programs=$(ls "$LLMQ_SRCDIR"/broker/*.c "$LLMQ_SRCDIR"/worker/*.c "$LLMQ_SRCDIR"/tools/*.c \
    "$LLMQ_SRCDIR"/bench/*.c)
with_getopt=$(grep -l getopt $programs | sed "s|$LLMQ_SRCDIR/||")
[ -z "$with_getopt" ]
check $? "every program reads its command line through its cli table${with_getopt:+ (getopt in: $with_getopt)}"

if command -v groff >/dev/null; then
    for page in "$LLMQ_SRCDIR"/man/*.[17]; do
        warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
        [ -z "$warnings" ]
        check $? "$(basename "$page") renders without warnings${warnings:+: $warnings}"
    done
else
    echo "skip - groff is not installed: man pages not rendered"
fi

check_done
