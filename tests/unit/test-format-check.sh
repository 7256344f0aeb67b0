#!/bin/sh
# test-format-check: tools/format-check.sh on a scratch repository.
#
# Pins: with nothing changed since BASE it passes; a change whose lines
# follow .clang-format passes; a change with a badly formatted line fails
# (exit 1) and names that file, not the other changed one; an untouched
# badly formatted line elsewhere in a changed file is not held against the
# change; a BASE that does not exist is an error (exit 2).  Skips without
# git, clang-format or git clang-format.

if [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
for tool in git clang-format git-clang-format; do
    command -v "$tool" >/dev/null || { echo "no $tool: skipped"; exit 77; }
done
. "$LLMQ_SRCDIR/tests/unit/check.sh"
TMP=$(mktemp -d) || exit 99
trap 'rm -rf "$TMP"' EXIT
CHECKER=$LLMQ_SRCDIR/tools/format-check.sh

cd "$TMP" || exit 99
git init -q -b main . && git config user.email t@example.com && git config user.name test ||
    exit 99
cp "$LLMQ_SRCDIR/.clang-format" .
# a.c carries one line clang-format would change; no change here touches it.
printf 'int f(int x)\n{\n    return x;\n}\n\nint  g(void);\n' >a.c
printf 'int h(void)\n{\n    return 1;\n}\n' >b.c
git add . && git commit -qm base && git checkout -q -b topic || exit 99

# run WANT WHAT [BASE]: the checker exits WANT; its output is in $TMP/out.
run() {
    want=$1 what=$2
    shift 2
    "$CHECKER" "$@" >"$TMP/out" 2>&1
    got=$?
    [ "$got" -eq "$want" ]
    check $? "$what (exit $got: $(head -n 1 "$TMP/out"))"
}

run 0 "nothing changed since main: passes" main
printf '\nint k(int a, int b)\n{\n    return a + b;\n}\n' >>a.c
run 0 "a change that follows .clang-format passes, the untouched 'int  g' notwithstanding" main
printf '\nint m(int a){return a;}\n' >>b.c
run 1 "a badly formatted change fails" main
grep -q '^  b\.c$' "$TMP/out" && ! grep -q '^  a\.c$' "$TMP/out"
check $? "and names b.c, not a.c"
git add . && git commit -qm change || exit 99
run 1 "committed on a branch, it still fails against main (the default base)"
run 2 "a base that does not exist is an error" no-such-branch
check_done
