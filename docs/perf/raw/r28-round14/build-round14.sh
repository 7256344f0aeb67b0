#!/bin/sh
# Builds round 14's payload on a machine without a GPU (docs/perf/next/README.md):
#   final = main (with llmq-mkmodel), e1 bias preloaded, e2 epilogue batched and rolled, e3 main's
#   epilogue rolled (gemm-epilogue.md); e4 the matvec's fragments rolling (mmv-fragments-rolling.md);
#   e5 the elementwise kernels' loads batched (elementwise-batched.md); e6 the split GEMMs' fold a
#   thread per value (split-sum-per-value.md).
# usage: sh docs/perf/next/build-round14.sh [BUILD]   (BUILD: a configured CUDA build dir, build-gpu)
# then copy docs/perf/next/callU1.sh, callU2.sh and commonS.sh into .gpu-b/ and carry .gpu-b and
# .device-libs.
set -eu
B=${1:-build-gpu}; N=docs/perf/next; OUT=/tmp/round14
rm -rf "$OUT" && mkdir -p "$OUT"
make -s -C "$B" -j2 >/dev/null
bench/ab-variants.sh "$B" "$OUT" v0:- e1:$N/gemm-bias-preloaded.patch \
    e2:$N/gemm-epilogue-batched-rolled.patch e3:$N/gemm-epilogue-rolled.patch \
    e4:$N/mmv-fragments-rolling.patch e5:$N/elementwise-batched.patch \
    e6:$N/split-sum-per-value.patch
mkdir -p "$OUT/final" && cp "$OUT"/v0/* "$OUT/final/" && cp "$B/tools/llmq-mkmodel" "$OUT/final/" &&
    strip "$OUT/final/llmq-mkmodel" && rm -rf "$OUT/v0"
mkdir -p .gpu-b && tar cJf .gpu-b/payload.tar.xz -C "$OUT" . && ls -la .gpu-b/payload.tar.xz
