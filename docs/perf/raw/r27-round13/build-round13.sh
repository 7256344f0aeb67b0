#!/bin/sh
# Builds round 13's payload on a machine without a GPU (docs/perf/next/README.md's patches):
#   v0 main (with llmq-mkmodel), v1 decode attention staged, v2 matvec fragments ahead,
#   v3 128-row prefill attention tiles (switch LLMQ_ATTN_LONG_TILE), v4 = v1 + v2 + v3.
# usage: sh docs/perf/next/build-round13.sh [BUILD]   (BUILD: a configured CUDA build dir, build-gpu)
# then carry .gpu-b and .device-libs; the calls are .gpu-b/callT1.sh and callT2.sh (copies here).
set -eu
B=${1:-build-gpu}; N=docs/perf/raw/r27-round13; OUT=/tmp/round13
rm -rf "$OUT" && mkdir -p "$OUT"
make -s -C "$B" -j2 >/dev/null
bench/ab-variants.sh "$B" "$OUT" v0:- v1:$N/decode-attention-staged.patch v2:$N/mmv-fragments-ahead.patch \
    v3:$N/attn-128-rows-on-scale-wait.patch \
    v4:$N/decode-attention-staged.patch+$N/mmv-fragments-ahead.patch+$N/attn-128-rows-on-scale-wait.patch
mkdir -p "$OUT/final" && cp "$OUT"/v0/* "$OUT/final/" && cp "$B/tools/llmq-mkmodel" "$OUT/final/" &&
    strip "$OUT/final/llmq-mkmodel" && rm -rf "$OUT/v0"
mkdir -p .gpu-b && tar cJf .gpu-b/payload.tar.xz -C "$OUT" . && ls -la .gpu-b/payload.tar.xz
