#!/bin/sh
# soak: the whole test suite N times in a row, on a quiet machine or under a
# CPU load of its own, to show that no test depends on the machine's speed.
#
#   tests/soak.sh [-n N] [-l HOGS] [BUILD_DIR]
#
# -n N      runs (default 5)
# -l HOGS   start HOGS busy loops (one per core: `nproc`) for the whole soak,
#           so every test runs on a loaded machine (default 0: quiet)
# BUILD_DIR a configured build tree (default build/)
#
# Prints one line per run and a tally; exits 1 when any run failed (its
# test-suite.log is kept as soak-RUN.log in the build tree).
set -u
runs=5 hogs=0
while getopts n:l: opt; do
    case $opt in
    n) runs=$OPTARG ;;
    l) hogs=$OPTARG ;;
    *) echo "usage: $0 [-n N] [-l HOGS] [BUILD_DIR]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ "$hogs" = all ] && hogs=$(nproc)
build=${1:-$(dirname "$0")/../build}
cd "$build" || exit 2

hog_pids=""
i=0
while [ "$i" -lt "$hogs" ]; do
    sh -c 'while :; do :; done' &
    hog_pids="$hog_pids $!"
    i=$((i + 1))
done
trap 'kill $hog_pids 2>/dev/null' EXIT INT TERM

green=0 run=1
while [ "$run" -le "$runs" ]; do
    start=$(date +%s)
    if make -s -j"$(nproc)" check > /dev/null 2>&1; then
        result=green
        green=$((green + 1))
    else
        result="FAILED: $(grep -lE '^:test-result: (FAIL|ERROR)' $(find . -name '*.trs') | tr '\n' ' ')"
        cp test-suite.log "soak-$run.log"
    fi
    echo "run $run of $runs ($hogs busy loops): $result in $(($(date +%s) - start)) s"
    run=$((run + 1))
done
echo "$green of $runs runs green"
[ "$green" -eq "$runs" ]
