#!/bin/sh
# docs/perf/next/11-build.sh: builds round 11's variants here (no GPU needed) with
# bench/ab-variants.sh from BUILD (default build-gpu, a configured CUDA build) and packs them,
# with llmq-mkmodel and the synthetic test models of BUILD's tests, into PAYLOAD (default
# .gpu-b/payload-r25.tar.xz) for 11-call-gates.sh and 11-call-bench.sh.  Run from the repo root.
set -eu
BUILD=${BUILD:-build-gpu} PAYLOAD=${PAYLOAD:-.gpu-b/payload-r25.tar.xz} OUT=${OUT:-/tmp/ab-r11}
N=docs/perf/next
SP=$N/10-mmv-staging-plan.patch BP=$N/10-bytes-permute.patch MC=$N/11-gemm-tma-multicast.patch
AT=$N/11-attn-128-rows.patch CH=$N/11-mm-chunk-512.patch RK=$N/11-rope-kv-write.patch
rm -rf "$OUT" && mkdir -p "$OUT/tools" "$OUT/synth" "$(dirname "$PAYLOAD")"
bench/ab-variants.sh "$BUILD" "$OUT" v0:- v1:$SP+$BP v1a:$SP v2:$N/10-attn-scale-wait.patch \
    v3:$N/10-gemm-store-banks.patch v4:$N/10-gemm-pdl-prologue.patch v5:$MC v6:$AT \
    v7:$SP+$BP+$MC+$AT v8:$CH v9:$CH+$SP+$BP v10:$CH+$SP+$BP+$MC+$AT v11:$RK \
    v12:$CH+$SP+$BP+$MC+$AT+$RK
strip -o "$OUT/tools/llmq-mkmodel" "$BUILD/tools/llmq-mkmodel"
(cd "$BUILD" && make -s tests/synth/synth-phi3-q4km.gguf tests/synth/synth-qwen2-q4km.gguf \
    tests/synth/synth-llama3-q4km.gguf tests/synth/synth-llama3-bpe-q8.gguf)
cp "$BUILD"/tests/synth/synth-phi3-q4km.gguf "$BUILD"/tests/synth/synth-qwen2-q4km.gguf \
    "$BUILD"/tests/synth/synth-llama3-q4km.gguf "$BUILD"/tests/synth/synth-llama3-bpe-q8.gguf "$OUT/synth/"
tar cJf "$PAYLOAD" -C "$OUT" .
ls -l "$PAYLOAD"
