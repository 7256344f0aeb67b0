#!/bin/sh
# round 13 call T4: main with the landed matvec fragments and 128-row prompt attention (8 warps):
# gates while llama.cpp c2b1518 builds, then the side by side (7B, 8B GQA).
R=/tmp/resT4; rm -rf /tmp/p; . .gpu-b/commonS.sh
( sh .llama/build-llama-cuda-refs .llama/llama-src.tar.xz /tmp/llama > $R/llama-build.log 2>&1; echo "build exit $?" >> $R/llama-build.log ) &
BUILD=$!
model m2 llama "--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 2048 --mix q4_k_m --seed 1" "" 2
timeout 100 $F/gpu-parity --ops > $R/parity-ops.txt 2>&1; log "parity ops exit $? $(tail -1 $R/parity-ops.txt)"
timeout 150 $F/gpu-parity --models > $R/parity-models.txt 2>&1; log "parity models exit $? $(tail -1 $R/parity-models.txt)"
LONG=$(python3 -c 'print("the quick brown fox jumps over the lazy dog " * 140)')
timeout 120 compute-sanitizer --tool memcheck $F/llmq-run -m /tmp/m2.gguf -p "$LONG" -n 4 --ignore-eos > $R/memcheck.txt 2>&1; log "memcheck long $(grep 'ERROR SUMMARY' $R/memcheck.txt)"
timeout 200 compute-sanitizer --tool racecheck $F/llmq-run -m /tmp/m2.gguf -p "$LONG" -n 2 --ignore-eos > $R/racecheck.txt 2>&1; log "racecheck long exit $? $(grep 'RACECHECK SUMMARY' $R/racecheck.txt | head -1)"
model m7b llama "$S7"
timeout 60 $F/bench-cuda-ops /tmp/m7b.gguf > $R/ops-main.md 2>>$R/log.txt; log "ops main exit $?"
model m8b llama "$S8"
wait $BUILD; log "$(tail -1 $R/llama-build.log)"
timeout 150 $F/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512,2048,8192 --json $R/llmq-m7b.json > $R/llmq-m7b.md 2>>$R/log.txt; log "llmq m7b exit $?"
timeout 110 $LB/llama-bench -m /tmp/m7b.gguf -ngl 99 -fa 1 -p 512,2048,8192 -n 128 -r 3 -o md > $R/llama-bench-m7b.md 2>>$R/llama-log.txt; log "llama-bench m7b exit $?"
before 440 && { timeout 80 $LB/llama-batched-bench -m /tmp/m7b.gguf -ngl 99 -fa on -c 170000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32,64,128,256 > $R/llama-batched-m7b.txt 2>>$R/llama-log.txt; log "batched-bench m7b exit $?"; }
before 490 && { timeout 60 $F/llmq-run -m /tmp/m8b.gguf --bench --reps 1 --bench-pp 512,2048,8192 > $R/llmq-m8b.md 2>>$R/log.txt; log "llmq m8b exit $?"; }
before 520 && { timeout 40 $LB/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -p 512,8192 -n 128 -r 1 -o md > $R/llama-bench-m8b.md 2>>$R/llama-log.txt; log "llama-bench m8b exit $?"; }
tar czf "$OUT/resT4.tgz" -C $R .
grep '^|' $R/llmq-m7b.md | grep -E "pp|tg|decode"; cat $R/llama-bench-m7b.md; grep -E "^\|" $R/llama-batched-m7b.txt
grep '^|' $R/llmq-m8b.md | grep -E "pp|tg|decode"; cat $R/llama-bench-m8b.md
grep -E "q8_0 KV|\| 1 \|" $R/ops-main.md | head -20
cat $R/log.txt
