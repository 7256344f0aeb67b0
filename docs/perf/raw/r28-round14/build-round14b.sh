#!/bin/sh
# The payload of calls V1-V3 (r28), as built: main (final, with llmq-mkmodel), e1, e7, e5, e6 and the
# combinations choose.py may name (b1 = e1 or b7 = e7 as the epilogue, 5 and 6 the others).  Patches
# as they were against main at 9c705b4.  V3 added main as landed, alone, as payload-new.tar.xz.
set -eu
B=${1:-build-gpu}; N=docs/perf/raw/r28-round14; OUT=/tmp/round14b
rm -rf "$OUT" && mkdir -p "$OUT"
E1=$N/gemm-bias-preloaded.patch E7=$N/gemm-epilogue-split.patch E5=$N/elementwise-batched.patch E6=$N/split-sum-per-value.patch
bench/ab-variants.sh "$B" "$OUT" v0:- e1:$E1 e7:$E7 e5:$E5 e6:$E6 b15:$E1+$E5 b16:$E1+$E6 b156:$E1+$E5+$E6 \
    b75:$E7+$E5 b76:$E7+$E6 b756:$E7+$E5+$E6
mkdir -p "$OUT/final" && cp "$OUT"/v0/* "$OUT/final/" && cp "$B/tools/llmq-mkmodel" "$OUT/final/" &&
    strip "$OUT/final/llmq-mkmodel" && rm -rf "$OUT/v0"
mkdir -p .gpu-b && tar cJf .gpu-b/payload.tar.xz -C "$OUT" . && ls -la .gpu-b/payload.tar.xz
