#!/bin/sh
# round 13 call T1 (~9 min): gates of every variant, the op tables, ncu source pages of the changed kernels.
# Payload: docs/perf/next/build-round13.sh.  Carry [".gpu-b", ".device-libs"].
R=/tmp/resT1; rm -rf /tmp/p; . .gpu-b/commonS.sh
model m2 llama "--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 2048 --mix q4_k_m --seed 1" "" 2
for v in v1 v2 v3 v4; do timeout 100 $P/$v/gpu-parity --ops > $R/parity-ops-$v.txt 2>&1; log "$v parity ops exit $? $(tail -1 $R/parity-ops-$v.txt)"; done
env LLMQ_ATTN_LONG_TILE=128w timeout 100 $P/v3/gpu-parity --ops > $R/parity-ops-v3w.txt 2>&1; log "v3 128w parity ops exit $? $(tail -1 $R/parity-ops-v3w.txt)"
timeout 150 $P/v4/gpu-parity --models > $R/parity-models-v4.txt 2>&1; log "v4 parity models exit $? $(tail -1 $R/parity-models-v4.txt)"
timeout 120 compute-sanitizer --tool memcheck $P/v4/llmq-run -m /tmp/m2.gguf -p "Once upon a time" -n 16 --ignore-eos > $R/memcheck-v4.txt 2>&1; log "memcheck v4 $(grep 'ERROR SUMMARY' $R/memcheck-v4.txt)"
timeout 120 compute-sanitizer --tool racecheck $P/v1/llmq-run -m /tmp/m2.gguf -p "Once upon a time" -n 8 --ignore-eos > $R/racecheck-v1.txt 2>&1; log "racecheck v1 $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' $R/racecheck-v1.txt | head -1)"
model m7b llama "$S7"
timeout 60 python3 bench/cublas-gemm.py 64 256 512 > $R/cublas-fp16.md 2>&1; log "cublas exit $?"
for v in final v1 v2 v3; do timeout 60 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/log.txt; log "ops $v exit $?"; done
env LLMQ_ATTN_LONG_TILE=128w timeout 60 $P/v3/bench-cuda-ops /tmp/m7b.gguf > $R/ops-v3w.md 2>>$R/log.txt; log "ops v3 128w exit $?"
for v in final v2; do before 520 && { timeout 40 ncu --clock-control none --kernel-name-base demangled -k "regex:mmv_kernel<.int.12, .bool.1>" --launch-skip 3 --launch-count 1 --cache-control none --import-source yes \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters -o $R/ncu-mmv-$v $P/$v/bench-cuda-ops /tmp/m2.gguf > $R/ncu-mmv-$v.log 2>&1;
  ncu --import $R/ncu-mmv-$v.ncu-rep --page source --csv --print-source sass > $R/ncu-mmv-$v.csv 2>&1; python3 bench/ncu-stalls.py $R/ncu-mmv-$v.csv 20 > $R/stalls-mmv-$v.md 2>&1; log "ncu mmv $v"; }; done
rm -f $R/*.ncu-rep; tar czf "$OUT/resT1.tgz" -C $R .
for v in final v1 v2 v3 v3w; do echo "== $v"; grep -E "q8_0 KV|attn_q q4_K 4096 x 4096 \(8 layers\) \| (1|8) \||ffn_gate q4_K 11008 x 4096 \(8 layers\) \| 1 \|" $R/ops-$v.md | grep -v mma.sync | awk -F'|' '{print $3, $4, $5}'; done
for v in final v2; do head -16 $R/stalls-mmv-$v.md; done
cat $R/log.txt
