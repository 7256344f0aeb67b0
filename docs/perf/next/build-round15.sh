#!/bin/sh
# Builds round 15's payload (written in r28) on a machine without a GPU: final = main (with
# llmq-mkmodel); e4 = the matvec's fragments rolling (mmv-fragments-rolling.md); a1 = the q8_0 prompt
# attention with one barrier a key tile and a0 its control (attn-unpack-after-compute.md); o14 =
# kernels/ as before round 14 (9c705b4: callW1 compares its --logprobs-exact output with main's, the
# bits round 14 claims unchanged; build this before a later kernel change lands); t2 / t0 = the
# elementwise kernels batched from half main's grid / always (elementwise-threshold.md).  It copies
# commonW.sh and callW1-3.sh into .gpu-b/; carry .gpu-b and .device-libs (and .llama for W1).
# usage: sh docs/perf/next/build-round15.sh [BUILD]   (BUILD: a configured CUDA build dir, build-gpu)
set -eu
B=${1:-build-gpu}; N=docs/perf/next; OUT=/tmp/round15
rm -rf "$OUT" && mkdir -p "$OUT"
git diff HEAD 9c705b4 -- kernels/ > /tmp/round15-o14.patch # kernels/ as before round 14
make -s -C "$B" -j2 >/dev/null
bench/ab-variants.sh "$B" "$OUT" v0:- e4:$N/mmv-fragments-rolling.patch \
    a1:$N/attn-unpack-after-compute.patch a0:$N/attn-unpack-after-compute-control.patch o14:/tmp/round15-o14.patch \
    t2:$N/elementwise-half-threshold.patch t0:$N/elementwise-always-batched.patch
mkdir -p "$OUT/final" && cp "$OUT"/v0/* "$OUT/final/" && cp "$B/tools/llmq-mkmodel" "$OUT/final/" &&
    strip "$OUT/final/llmq-mkmodel" && rm -rf "$OUT/v0"
mkdir -p .gpu-b && rm -f .gpu-b/payload*.tar.xz && tar cJf .gpu-b/payload.tar.xz -C "$OUT" . &&
    cp $N/commonW.sh $N/callW1.sh $N/callW2.sh $N/callW3.sh .gpu-b/ && ls -la .gpu-b/payload.tar.xz
