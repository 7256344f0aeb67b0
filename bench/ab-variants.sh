#!/bin/sh
# bench/ab-variants.sh: builds variants of the tree for one A/B device run, here on a machine
# without a GPU: main plus each variant's patches (docs/perf/next/*.patch), built one after
# another in one detached worktree whose build dir starts as a copy of BUILD (a configured
# --with-cuda build of this repo: build-gpu/), so that only the files a patch touches, or the
# previous variant touched, are rebuilt (20 s to 2 min a variant on 2 cores, where a fresh
# build takes ten).  Each variant's llmq-run, bench-cuda-ops and gpu-parity are stripped into
# OUT/NAME/; tar OUT and carry it to the device (see the round file that names the variants).
#
# usage: bench/ab-variants.sh BUILD OUT NAME:PATCH[+PATCH...] ...
#   PATCH "-" is the tree itself; paths are relative to the repo root or absolute.
#   AB_WORKTREE (default /tmp/llmq-ab) is the worktree, kept between runs.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 BUILD OUT NAME:PATCH[+PATCH...] ..." >&2; exit 2; }
BUILD=$(cd "$1" && pwd); OUT=$2; shift 2
ROOT=$(git rev-parse --show-toplevel)
WT=${AB_WORKTREE:-/tmp/llmq-ab}
HEAD=$(git -C "$ROOT" rev-parse HEAD)
[ -f "$BUILD/config.status" ] || { echo "$0: $BUILD is not a configured build dir" >&2; exit 2; }
mkdir -p "$OUT"

# Sources dated before the generated autotools files, those before the build: make then
# rebuilds only what a patch (or the last variant) touched.
old() { find . -path ./build-ab -prune -o -type f -exec touch -d '2000-01-01 00:00' {} +; }
gen() {
    for f in Makefile.in aclocal.m4 config.h.in configure m4 build-aux; do cp -a "$ROOT/$f" .; done
    find Makefile.in aclocal.m4 config.h.in configure m4 build-aux -exec touch -d '2000-01-01 00:30' {} +
}
# (a worktree whose folder went with /tmp is pruned first)
[ -d "$WT" ] || { git -C "$ROOT" worktree prune && git -C "$ROOT" worktree add -q --detach "$WT" "$HEAD"; }
cd "$WT"
git checkout -q --detach "$HEAD" && git reset -q --hard "$HEAD" && git clean -qfd -e build-ab
old; gen
if [ ! -d build-ab ]; then
    cp -a "$BUILD" build-ab
    find build-ab -type f -exec touch -d '2000-01-01 01:00' {} +
fi
# the files the last variant built here had patched (kept across runs): rebuilt as HEAD's first
touched=$(cat build-ab/.variant-touched 2>/dev/null || true)
for spec in "$@"; do
    name=${spec%%:*}; patches=${spec#*:}
    git reset -q --hard "$HEAD"
    old; gen
    [ -z "$touched" ] || touch $touched
    if [ "$patches" != "-" ]; then
        for p in $(echo "$patches" | tr '+' ' '); do
            case $p in /*) ;; *) p=$ROOT/$p ;; esac
            git apply "$p" || { echo "$name: $p does not apply" >&2; exit 1; }
        done
    fi
    touched=$(git diff --name-only)
    echo "$touched" > build-ab/.variant-touched
    (cd build-ab && nice make -s -j2 > "$OUT/build-$name.log" 2>&1) ||
        { echo "$name: build failed ($OUT/build-$name.log)" >&2; exit 1; }
    mkdir -p "$OUT/$name"
    for b in tools/llmq-run bench/bench-cuda-ops tests/gpu/gpu-parity; do
        strip -o "$OUT/$name/$(basename $b)" "build-ab/$b"
    done
    rm -f "$OUT/build-$name.log"
    echo "$(date +%T) $name: built ($patches)"
done
git reset -q --hard "$HEAD"
