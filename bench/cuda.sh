#!/bin/sh
# bench/cuda.sh: the CUDA benchmarks on a model file (the 7B Q4_K_M of
# tests/gpu/run.sh): per-op times against the roofline (bench-cuda-ops),
# then llmq-run --bench (pp512, tg128, decode at 1..256 sequences).
# Tables to OUT/ops.md, OUT/bench.md and OUT/bench.json.
#
# usage: bench/cuda.sh BIN MODEL OUT
set -u
BIN=$1 MODEL=$2 OUT=$3
REPS=${REPS:-3}
timeout 120 "$BIN/bench-cuda-ops" "$MODEL" > "$OUT/ops.md" 2>> "$OUT/log.txt"
echo "$(date +%T) bench-cuda-ops exit $?" >> "$OUT/log.txt"
timeout 240 "$BIN/llmq-run" -m "$MODEL" --bench --reps "$REPS" --json "$OUT/bench.json" \
    > "$OUT/bench.md" 2>> "$OUT/log.txt"
echo "$(date +%T) llmq-run --bench exit $?" >> "$OUT/log.txt"
