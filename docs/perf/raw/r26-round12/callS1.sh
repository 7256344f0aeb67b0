#!/bin/sh
# r26 call S1: llama.cpp c2b1518 builds (4 targets) in the background while the models are made, ncu of the
# q8_0 decode attention (main, v1 = V loaded with K) and v1's gates run; then the 7B side by side.
R=/tmp/resS1; . .gpu-b/commonS.sh
( sh .llama/build-llama-cuda-refs .llama/llama-src.tar.xz /tmp/llama > $R/llama-build.log 2>&1; echo "build exit $?" >> $R/llama-build.log ) &
BUILD=$!
model m2 llama "--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 2048 --mix q4_k_m --seed 1" "" 2
for v in final v1; do
  timeout 90 ncu --clock-control none --kernel-name-base demangled -k "regex:attn_decode_kernel<128, 1, true>" --filter-mode per-launch-config --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis $P/$v/bench-cuda-ops /tmp/m2.gguf > $R/ncu-dec-$v.txt 2>&1; log "ncu $v exit $?"
  cuobjdump -sass -fun '_Z18attn_decode_kernelILi128ELi1ELb1EEv9attn_argsPKifPfi' $P/$v/bench-cuda-ops > $R/sass-dec-$v.txt 2>&1; log "sass $v exit $? $(grep -c LDG $R/sass-dec-$v.txt) LDG"
done
timeout 150 $P/v1/gpu-parity --ops > $R/parity-ops-v1.txt 2>&1; log "v1 parity ops exit $? $(grep -c ' ok' $R/parity-ops-v1.txt) ok $(grep -c FAIL $R/parity-ops-v1.txt) FAIL"
model m7b llama "$S7"
for v in final v1; do timeout 100 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/log.txt; log "ops $v exit $?"; done
wait $BUILD; log "$(tail -1 $R/llama-build.log)"
before 380 && { timeout 150 $F/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512,2048,8192 --json $R/llmq-m7b.json > $R/llmq-m7b.md 2>>$R/log.txt; log "llmq m7b exit $?"; }
before 470 && { timeout 110 $LB/llama-bench -m /tmp/m7b.gguf -ngl 99 -fa 1 -p 512,2048,8192 -n 128 -r 3 -o md > $R/llama-bench-m7b.md 2>>$R/llama-log.txt; log "llama-bench m7b exit $?"; }
tar czf "$OUT/resS1.tgz" -C $R .
grep '^|' $R/llmq-m7b.md | grep -E "pp|tg|decode"; cat $R/llama-bench-m7b.md; grep -E "^\|" $R/llama-batched-m7b.txt
for v in final v1; do echo "== $v"; grep -E "Duration|Issued Warp|Eligible|Active Warps|Memory Throughput|DRAM Throughput|Registers|Achieved Occupancy|Theoretical Occ|Grid Size|No Eligible" $R/ncu-dec-$v.txt | head -60; grep "q8_0 KV" $R/ops-$v.md; done
cat $R/log.txt
