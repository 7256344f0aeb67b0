#!/bin/sh
# round 15 call W2 (~8 min, warm after W1; written in r28): llama.cpp's decode batches on the 7B (W1's
# build, still on the warm machine); ncu of main's three decode bounds (round 14's callU2, not run: the
# q8_0 decode attention at 64 sequences, the 1-row q4_K matvec, the 64-row q4_K GEMM) and of the 8k-key
# prompt attention chunk, then every
# kernel's time in a pp512 pass of the llama, qwen2 and phi3 7B shapes (issue 14: qwen2 0.55% under
# llama in r28, phi3 1.7% in r24).  Payload: build-round15.sh.  Carry [".gpu-b", ".device-libs"].
R=/tmp/resW2; . .gpu-b/commonW.sh
model m7b llama "$S7"
[ -x $LB/llama-batched-bench ] && { timeout 100 $LB/llama-batched-bench -m /tmp/m7b.gguf -ngl 99 -fa on -c 170000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32,64,128,256 > $R/llama-batched-m7b.txt 2>>$R/llama-log.txt; log "batched-bench m7b exit $?"; grep -E "^\|" $R/llama-batched-m7b.txt >> $L; }
model m2 llama "$M2" "" 2
prof() { # name, kernel regex (ncu's demangled names: <(int)128, (bool)1> or <128, true>), extra ncu flags
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "$2" $3 --cache-control none --import-source yes \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters \
    -o $R/$1 $F/bench-cuda-ops /tmp/m2.gguf > $R/$1.txt 2>&1; log "ncu $1 exit $?"
  ncu --import $R/$1.ncu-rep --page source --csv --print-source sass > $R/$1.csv 2>/dev/null
  python3 bench/ncu-stalls.py $R/$1.csv 25 > $R/stalls-$1.md 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Eligible Warps|L1/TEX Hit|DRAM Throughput|No Eligible" $R/$1.txt | head -20 >> $L; head -14 $R/stalls-$1.md >> $L; }
prof attn-decode "regex:attn_decode_kernel<[^,]*128, [^,]*1, [^,]*(1|true)>" "--filter-mode per-launch-config --launch-count 3"
prof mmv-1row "regex:mmv_kernel<[^,]*12, [^,]*(1|true)>" "--launch-skip 3 --launch-count 1"
prof gemm-64 "regex:gemm_sm90_kernel<[^,]*12, [^,]*2, [^,]*1>" "--launch-skip 2 --launch-count 1"
# the 128-row-tile GEMM (prefill's bound; bench-cuda-ops runs its 256-row split launch first, then 512
# rows: the report's grid size says which was profiled)
prof gemm-128 "regex:gemm_sm90_kernel<[^,]*12, [^,]*2, [^,]*2>" "--launch-skip 4 --launch-count 1"
# the prompt attention's 8k chunk (q8_0, 128-row tiles): 4.5 us a key tile where its mma need ~1 (r28
# count, docs/perf/14 section 6): where the other 3.5 go
prof attn-8k "regex:attn_tc_kernel<[^,]*128, [^,]*(1|true), [^,]*8>" "--launch-skip 1 --launch-count 1"
model m7b-qwen2 qwen2 "$S7"; model m7b-phi3 phi3 "$S7"
for m in m7b m7b-qwen2 m7b-phi3; do before 480 && { timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --csv \
  --print-units base $F/llmq-run -m /tmp/$m.gguf --bench --reps 1 --bench-pp 512 --bench-npl 1 > $R/times-$m.csv 2>$R/ncu-$m.log; log "ncu times $m exit $?"; }; done
python3 bench/ncu-times.py $R/times-m7b.csv $R/times-m7b-qwen2.csv $R/times-m7b-phi3.csv > $R/kernel-times-shapes.md 2>&1; cat $R/kernel-times-shapes.md >> $L
python3 bench/ncu-times.py --launches $R/times-m7b.csv $R/times-m7b-qwen2.csv $R/times-m7b-phi3.csv > $R/launch-times-shapes.md 2>&1
for m in m7b m7b-qwen2 m7b-phi3; do before 560 && bench final $m 30 512 1; done
rm -f $R/*.ncu-rep; tar czf $OUT/resW2.tgz -C $R . ; cat $L
