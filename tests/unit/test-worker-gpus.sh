#!/bin/sh
# test-worker-gpus: llmq-worker --gpus's argument errors, in either build.
#
# Pins: --gpus with --cpu or --gpu is bad usage (exit 2) with a message
# naming the conflict; without CUDA, --gpus is bad usage that says so; with
# CUDA, a repeated index is bad usage and an index beyond the visible GPUs
# fails (exit 1) naming it.  No child is ever started here.

if [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_BUILDDIR and LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
. "$LLMQ_SRCDIR/tests/unit/check.sh"
W=$LLMQ_BUILDDIR/worker/llmq-worker
ERR=$(mktemp) || exit 99
trap 'rm -f "$ERR"' EXIT

# expect STATUS TEXT WHAT ARGS...: llmq-worker ARGS exits STATUS, TEXT in stderr.
expect() {
    want=$1 text=$2 what=$3
    shift 3
    "$W" -m /nonexistent.gguf "$@" 2>"$ERR" >/dev/null
    got=$?
    [ "$got" -eq "$want" ] && grep -q -- "$text" "$ERR"
    check $? "$what (exit $got: $(head -n 1 "$ERR"))"
}

expect 2 "excludes --gpu and --cpu" "--gpus with --cpu is bad usage" --gpus 0 --cpu
expect 2 "excludes --gpu and --cpu" "--gpus with --gpu is bad usage" --gpus 0 --gpu 1
if grep -q 'define LLMQ_HAVE_CUDA 1' "$LLMQ_BUILDDIR/config.h"; then
    expect 2 "GPU 0 is named twice" "a repeated GPU is bad usage" --gpus 0,0
    expect 2 "--gpus: must not be empty" "an empty --gpus is bad usage" --gpus ''
    expect 1 "GPU 1023 is not visible" "an index beyond the visible GPUs is named" --gpus 1023
else
    expect 2 "built without CUDA" "--gpus without CUDA is bad usage that says why" --gpus all
fi
check_done
