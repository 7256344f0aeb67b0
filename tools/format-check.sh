#!/bin/sh
# format-check: are the C and CUDA lines changed since BASE formatted as
# .clang-format says?
#
# Usage: tools/format-check.sh [BASE]   (BASE: default origin/main, else main)
#
# Only the lines that differ between the working tree and the merge base of
# BASE and HEAD are checked (git clang-format), so touching a file never
# asks for the lines around the change to be reformatted.  Lists the files
# whose changed lines clang-format would change and exits 1; exits 0 when
# there are none, 2 when it cannot run.  `git clang-format MERGE_BASE`
# applies the changes.  CLANG_FORMAT names the clang-format binary
# (default clang-format; the .clang-format is written for version 14).
set -u

fail() {
    echo "format-check: $*" >&2
    exit 2
}

top=$(git rev-parse --show-toplevel 2>/dev/null) || fail "not in a git work tree"
cd "$top" || fail "cannot enter $top"
base=${1:-}
if [ -z "$base" ]; then
    for candidate in origin/main main; do
        if git rev-parse -q --verify "$candidate^{commit}" >/dev/null; then
            base=$candidate
            break
        fi
    done
    [ -n "$base" ] || fail "neither origin/main nor main exists: name the base"
fi
git rev-parse -q --verify "$base^{commit}" >/dev/null || fail "no commit named $base"
since=$(git merge-base "$base" HEAD) || fail "no merge base of $base and HEAD"
binary=${CLANG_FORMAT:-clang-format}
command -v "$binary" >/dev/null || fail "$binary is not on PATH"

files=$(git diff --name-only --diff-filter=ACMR "$since" -- '*.c' '*.h' '*.cu' '*.cuh')
bad=""
for f in $files; do
    out=$(git clang-format --binary "$binary" --extensions c,h,cu,cuh --diff "$since" -- "$f") ||
        fail "git clang-format failed on $f"
    case $out in
    diff*) bad="$bad $f" ;;
    esac
done
if [ -n "$bad" ]; then
    echo "format-check: lines changed since $base are not formatted as .clang-format says in:"
    for f in $bad; do
        echo "  $f"
    done
    echo "(see them: git clang-format --diff $since; apply: git clang-format $since)"
    exit 1
fi
echo "format-check: every changed C and CUDA line since $base is formatted"
exit 0
