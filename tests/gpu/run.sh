#!/bin/sh
# tests/gpu/run.sh: the one command for the GPU machine, from the repository
# root: build check, parity, then the benchmarks (bench/cuda.sh).  Binaries
# built on the CPU machine come in BIN (llmq-run, llmq-mkmodel, gpu-parity,
# bench-cuda-ops, bench-sampling), their shared libraries in .device-libs/, the synthetic
# model of each architecture that make check writes into the build tree's
# tests/synth in SYNTH (default BIN/synth: copy them there).  Tables and logs
# go to $OUT (default /tmp/llmq-gpu); a summary is printed last.
#
# usage: tests/gpu/run.sh [BIN]        (default .gpu-bin)
# Knobs (environment): GQA=0 skips the GQA shape, BASELINE=DIR benches DIR's
# llmq-run too, KVF16=1 benches llmq-run --kv-f16 too (bench/cuda.sh), GEMM_AB=1
# benches it again without the wgmma GEMM, NCU=1 and SANITIZE=0 (sections 4-5).
# Through the device tool, which brings back only a few files, keep OUT off
# its folder and bring one archive back:
#   OUT=/tmp/res sh tests/gpu/run.sh; tar czf "$OUT/results.tgz" -C /tmp/res .
set -u
BIN=${1:-.gpu-bin}
OUT=${OUT:-/tmp/llmq-gpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.device-libs:${LD_LIBRARY_PATH:-}"
export LLMQ_TEST_DATA="$PWD/tests/data"
VOCAB=tests/data/vocab/ggml-vocab-llama-spm.gguf
SHAPE7B="--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 4096 --mix q4_k_m --seed 1"
# The Llama-3-8B-like GQA shape of ../shared/anchors (8 KV heads, ffn 14336, vocab 32000).
SHAPE8B="--dim 4096 --heads 32 --kv-heads 8 --ff 14336 --ctx 4096 --mix q4_k_m --seed 1"
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$OUT/log.txt"; }

# 1. build check: every binary starts, the GPU is there, kernel resources.
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
    for b in llmq-run llmq-mkmodel gpu-parity bench-cuda-ops bench-sampling gpu-mma-numerics; do
        ldd "$BIN/$b" | grep -q "not found" && echo "MISSING LIBRARIES: $b"
    done
    "$BIN/llmq-run" --help >/dev/null && echo "llmq-run starts"
    cuobjdump --dump-resource-usage "$BIN/llmq-run" 2>&1 | grep -E "Function|REG" | paste - - |
        sed -E 's/Resource usage://; s/[[:space:]]+/ /g'
    # SASS census of the main kernels: wide loads, tensor and dp4a instructions
    # (HGMMA: wgmma, gemm_sm90_kernel).
    echo "function LDG.128 LDG.64 LDG(other) LDS/LDSM STS HMMA IDP4A HGMMA"
    cuobjdump -sass "$BIN/llmq-run" 2>/dev/null | awk '
        /Function :/ { f = $3 }
        f ~ /mmv_kernel|gemm_kernel|gemm_sm90_kernel|attn_tc/ {
            if ($0 ~ /LDG\.E\.128/) c[f, 1]++; else if ($0 ~ /LDG\.E\.64/) c[f, 2]++;
            else if ($0 ~ /LDG/) c[f, 3]++;
            if ($0 ~ /LDSM|LDS/) c[f, 4]++; if ($0 ~ /STS/) c[f, 5]++;
            if ($0 ~ /HMMA/) c[f, 6]++; if ($0 ~ /IDP/) c[f, 7]++;
            if ($0 ~ /HGMMA/) c[f, 8]++; seen[f] = 1 }
        END { for (f in seen) printf "%s %d %d %d %d %d %d %d %d\n", f, c[f,1], c[f,2], c[f,3],
              c[f,4], c[f,5], c[f,6], c[f,7], c[f,8] }'
} > "$OUT/env.txt" 2>&1
log "build check done"

# The tensor-core arithmetic the batch-invariant matmuls rest on (docs/perf/05).
"$BIN/gpu-mma-numerics" > "$OUT/mma-numerics.md" 2>> "$OUT/log.txt"
log "mma numerics exit $?"

# The 7B model for the benchmarks is written while parity runs.
"$BIN/llmq-mkmodel" --vocab "$VOCAB" --layers 32 $SHAPE7B -o /tmp/m7b.gguf >> "$OUT/log.txt" 2>&1 &
MK=$!

# 2. parity: ops, the test models, a 7B-shaped 2-layer model and the
#    synthetic llama3, qwen2 and phi3 models (their llama.cpp perplexity is
#    in tests/data/reference).
"$BIN/llmq-mkmodel" --vocab "$VOCAB" --layers 2 $SHAPE7B -o /tmp/m2.gguf >> "$OUT/log.txt" 2>&1
SYNTH=${SYNTH:-$BIN/synth}
[ -d "$SYNTH" ] || log "no $SYNTH: the synthetic models of each architecture are not compared"
# Ops and models in two processes: a fault in one leaves the other's table.
timeout 100 "$BIN/gpu-parity" --ops > "$OUT/parity.md" 2>> "$OUT/log.txt"
log "parity (ops) exit $?"
timeout 400 "$BIN/gpu-parity" --models /tmp/m2.gguf $(ls "$SYNTH"/*.gguf 2>/dev/null) \
    >> "$OUT/parity.md" 2>> "$OUT/log.txt"
log "parity (models) exit $?"
wait $MK
log "7B model written ($(du -h /tmp/m7b.gguf | cut -f1))"

# 3. benchmarks: the 7B shape, then (GQA=0 skips it) the GQA shape, written
#    while the first runs.
if [ "${GQA:-1}" = 1 ]; then
    "$BIN/llmq-mkmodel" --vocab "$VOCAB" --layers 32 $SHAPE8B -o /tmp/m8b-gqa.gguf \
        >> "$OUT/log.txt" 2>&1 &
    MK8=$!
fi
sh bench/cuda.sh "$BIN" /tmp/m7b.gguf "$OUT"
# GEMM_AB=1: the same llmq-run --bench with the wgmma GEMM off (LLMQ_GEMM_SM90=0,
# gemm.cu for every GEMM): the end-to-end A/B of docs/perf/07 in one run.
if [ "${GEMM_AB:-0}" = 1 ]; then
    LLMQ_GEMM_SM90=0 timeout 240 "$BIN/llmq-run" -m /tmp/m7b.gguf --bench --reps "${REPS:-3}" \
        --json "$OUT/bench-mma.json" > "$OUT/bench-mma.md" 2>> "$OUT/log.txt"
    log "LLMQ_GEMM_SM90=0 llmq-run --bench exit $?"
fi
# BASELINE=DIR: the same llmq-run --bench with DIR's llmq-run, on this machine
# in this run (an A/B of a round's change free of machine-to-machine spread).
if [ -n "${BASELINE:-}" ]; then
    timeout 240 "$BASELINE/llmq-run" -m /tmp/m7b.gguf --bench --reps "${REPS:-3}" \
        --json "$OUT/bench-base.json" > "$OUT/bench-base.md" 2>> "$OUT/log.txt"
    log "baseline llmq-run --bench exit $?"
fi
if [ "${GQA:-1}" = 1 ]; then
    wait $MK8
    log "GQA model written ($(du -h /tmp/m8b-gqa.gguf | cut -f1))"
    sh bench/cuda.sh "$BIN" /tmp/m8b-gqa.gguf "$OUT" gqa
    rm -f /tmp/m8b-gqa.gguf
fi

# 4. Nsight Compute on four kernels of bench-cuda-ops (clocks left alone):
#    the q4_K mmv at 1 row, both GEMMs at 512 rows (the wgmma one on the
#    default backend, the mma.sync one on its LLMQ_GEMM_SM90=0 twin), decode
#    attention at 64.
if [ "${NCU:-0}" = 1 ]; then
    for k in "mmv_kernel 3" "gemm_sm90_kernel 290" "gemm_kernel 290" "attn_tc_kernel 290"; do
        set -- $k
        timeout 120 ncu --clock-control none -k "regex:$1" --launch-skip "$2" --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats "$BIN/bench-cuda-ops" /tmp/m7b.gguf >> "$OUT/ncu.txt" 2>&1
        log "ncu $1 exit $?"
    done
fi

# 5. sanitizers on the op table, as far as the time allows.
if [ "${SANITIZE:-1}" = 1 ]; then
    timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$BIN/gpu-parity" --ops-small \
        > "$OUT/sanitizer.txt" 2>&1
    log "memcheck exit $?"
    timeout 90 compute-sanitizer --tool racecheck --print-limit 20 "$BIN/gpu-parity" --ops-small \
        >> "$OUT/sanitizer.txt" 2>&1
    log "racecheck exit $?"
fi

echo "== parity"; grep -E "FAIL|passed" "$OUT/parity.md" | head -40
echo "== ops"; cat "$OUT/ops.md" 2>/dev/null
echo "== bench"; cat "$OUT/bench.md" "$OUT/bench-mma.md" "$OUT/bench-base.md" "$OUT/bench-kvf16.md" \
    "$OUT/bench-gqa.md" "$OUT/bench-kvf16-gqa.md" 2>/dev/null
echo "== sampling"; cat "$OUT/sampling.md" "$OUT/sampling-gqa.md" 2>/dev/null
echo "== sanitizer"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed," "$OUT/sanitizer.txt" 2>/dev/null
cat "$OUT/log.txt"
