#!/bin/sh
# round 14 call U2 (~8 min, warm after U1): ncu of main's three decode bounds, before the next change to any:
# the q8_0 decode attention (issue slots, L1 hits, stall sites: round 13's staged copy was slower),
# the 1-row q4_K matvec after round 13 (where its first mma of a block still waits), the 64-row GEMM.
# Then e5 (elementwise-batched.md), e6 (split-sum-per-value.md), and every kernel's time on the llama and
# phi3 7B shapes (issue 14).  Payload: build-round14.sh (final/).  Carry [".gpu-b", ".device-libs"].
R=/tmp/resU2; . .gpu-b/commonS.sh
model m2 llama "--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 2048 --mix q4_k_m --seed 1" "" 2
prof() { # name, kernel regex, extra ncu flags
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "$2" $3 --cache-control none --import-source yes \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters \
    -o $R/$1 $F/bench-cuda-ops /tmp/m2.gguf > $R/$1.txt 2>&1; log "ncu $1 exit $?"
  ncu --import $R/$1.ncu-rep --page source --csv --print-source sass > $R/$1.csv 2>/dev/null
  python3 bench/ncu-stalls.py $R/$1.csv 25 > $R/stalls-$1.md 2>&1; }
prof attn-decode "regex:attn_decode_kernel<.int.128, .int.1, .bool.1>" "--filter-mode per-launch-config --launch-count 3"
prof mmv-1row "regex:mmv_kernel<.int.12, .bool.1>" "--launch-skip 3 --launch-count 1"
prof gemm-64 "regex:gemm_sm90_kernel<.int.12, .int.2, .int.1>" "--launch-skip 2 --launch-count 1"
# e5 (elementwise-batched.md): gates, every kernel's time in a pp512 pass against main's, the benches
model m7b llama "$S7"
timeout 60 $P/e5/gpu-parity --ops > $R/parity-ops-e5.txt 2>&1; log "e5 parity ops exit $? $(tail -1 $R/parity-ops-e5.txt)"
timeout 40 $P/e5/gpu-parity --models > $R/parity-models-e5.txt 2>&1; log "e5 parity models exit $? $(tail -1 $R/parity-models-e5.txt)"
for v in final e5; do before 360 && { timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --csv \
  --print-units base $P/$v/llmq-run -m /tmp/m7b.gguf --bench --reps 1 --bench-pp 512 --bench-npl 1 > $R/rows-$v.txt 2>$R/ncu-rows-$v.log; log "ncu rows $v exit $?"; }; done
python3 bench/ncu-times.py $R/rows-final.txt $R/rows-e5.txt > $R/kernel-times-e5.md 2>&1
bench5() { f=$R/bench-$1-$(date +%s).md; timeout 40 $P/$1/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512,8192 --bench-npl 1 > $f 2>>$R/log.txt
  log "bench $1 exit $? $(grep '^|' $f | grep -E 'pp|tg|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; }
before 400 && bench5 final; before 430 && bench5 e5; before 460 && bench5 final
# e6 (split-sum-per-value.md): gates and decode at 64 and 256 sequences against main
timeout 60 $P/e6/gpu-parity --ops > $R/parity-ops-e6.txt 2>&1; log "e6 parity ops exit $? $(tail -1 $R/parity-ops-e6.txt)"
bench6() { f=$R/bench6-$1-$(date +%s).md; timeout 40 $P/$1/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512 --bench-npl 64,256 > $f 2>>$R/log.txt
  log "bench6 $1 exit $? $(grep '^|' $f | grep -E 'decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; }
before 470 && bench6 final; before 495 && bench6 e6
# issue 14's phi3 gap (pp512 1.7% under the llama shape, r24): every kernel's time in the first 420 launches
# (phi3 fuses q/k/v and gate/up, so its 420 launches span more layers: compare a layer in launch-times-phi3.md)
model m7b llama "$S7"; model m7b-phi3 phi3 "$S7"
for m in m7b m7b-phi3; do before 525 && { timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --csv \
  --print-units base $F/llmq-run -m /tmp/$m.gguf --bench --reps 1 --bench-pp 512 --bench-npl 1 > $R/times-$m.txt 2>$R/ncu-$m.log; log "ncu times $m exit $?"; }; done
python3 bench/ncu-times.py $R/times-m7b.txt $R/times-m7b-phi3.txt > $R/kernel-times-phi3.md 2>&1
python3 bench/ncu-times.py --launches $R/times-m7b.txt $R/times-m7b-phi3.txt > $R/launch-times-phi3.md 2>&1
rm -f $R/*.ncu-rep $R/*.csv $R/times-*.txt $R/rows-*.txt; tar czf "$OUT/resU2.tgz" -C $R .
for n in attn-decode mmv-1row gemm-64; do echo "== $n"; grep -E "Duration|Grid Size|Registers Per|Achieved Occupancy|Issue Slots Busy|Eligible Warps|L1/TEX Hit|DRAM Throughput|No Eligible" $R/$n.txt | head -30; head -16 $R/stalls-$n.md; done
head -14 $R/kernel-times-phi3.md; head -8 $R/kernel-times-e5.md
cat $R/log.txt
