#!/bin/sh
# bench/cuda.sh: the CUDA benchmarks on a model file (the 7B Q4_K_M of
# tests/gpu/run.sh): per-op times against the roofline (bench-cuda-ops),
# then llmq-run --bench (pp512, tg128, decode at 1..256 sequences), then
# each sampler setting's and a JSON schema's cost per decode step at 64
# sequences (bench-sampling).
# Tables to OUT/ops[-TAG].md, OUT/bench[-TAG].md, OUT/bench[-TAG].json,
# OUT/sampling[-TAG].md and, where python3 has torch, cuBLAS's fp16 GEMM at
# the same shapes in OUT/cublas[-TAG].md;
# each run's samples go to OUT/log.txt as they come, so a run cut short by
# its timeout still leaves them.
#
# KVF16=1 runs llmq-run --bench again with --kv-f16 (the f16 KV cache of
# before q8_0 became the default) into OUT/bench-kvf16[-TAG].md.
# PP="512,2048,8192" sets the prefill cases (llmq-run --bench-pp; default
# 512), for issue 16's long prompts.
#
# usage: bench/cuda.sh BIN MODEL OUT [TAG]
set -u
BIN=$1 MODEL=$2 OUT=$3 SUFFIX=${4:+-$4}
REPS=${REPS:-3}
timeout 120 "$BIN/bench-cuda-ops" "$MODEL" > "$OUT/ops$SUFFIX.md" 2>> "$OUT/log.txt"
echo "$(date +%T) bench-cuda-ops$SUFFIX exit $?" >> "$OUT/log.txt"
timeout 240 "$BIN/llmq-run" -m "$MODEL" --bench --reps "$REPS" --bench-pp "${PP:-512}" \
    --json "$OUT/bench$SUFFIX.json" > "$OUT/bench$SUFFIX.md" 2>> "$OUT/log.txt"
echo "$(date +%T) llmq-run --bench$SUFFIX exit $?" >> "$OUT/log.txt"
if [ "${KVF16:-0}" = 1 ]; then
    timeout 240 "$BIN/llmq-run" -m "$MODEL" --bench --kv-f16 --reps "$REPS" \
        --json "$OUT/bench-kvf16$SUFFIX.json" > "$OUT/bench-kvf16$SUFFIX.md" 2>> "$OUT/log.txt"
    echo "$(date +%T) llmq-run --bench --kv-f16$SUFFIX exit $?" >> "$OUT/log.txt"
fi
timeout 240 "$BIN/bench-sampling" "$MODEL" --seqs 64 > "$OUT/sampling$SUFFIX.md" 2>> "$OUT/log.txt"
echo "$(date +%T) bench-sampling$SUFFIX exit $?" >> "$OUT/log.txt"
# cuBLAS's fp16 GEMM at the same shapes, the ceiling the op table's TFLOP/s
# are read against; without torch (or a GPU it sees) the script says so in
# the log and leaves no table
rc=0
timeout 120 python3 "$(dirname "$0")/cublas-gemm.py" > "$OUT/cublas$SUFFIX.md" 2>> "$OUT/log.txt" ||
    { rc=$?; rm -f "$OUT/cublas$SUFFIX.md"; }
echo "$(date +%T) cublas-gemm$SUFFIX exit $rc" >> "$OUT/log.txt"
