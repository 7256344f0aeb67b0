#!/bin/sh
# round 14 call U1 (~8 min): the GEMM epilogue variants (docs/perf/next/gemm-epilogue.md) and the matvec's
# rolling fragments (mmv-fragments-rolling.md) against main; main's gpu-parity first (r27 added a batch case
# no device has run: 128-row tiles over a window whose warps straddle 64-blocks).
# Payload: docs/perf/next/build-round14.sh.  Carry [".gpu-b", ".device-libs"].
R=/tmp/resU1; rm -rf /tmp/p; . .gpu-b/commonS.sh
model m7b llama "$S7"; model m7b-qwen2 qwen2 "$S7"
for v in final e1 e2 e3 e4; do timeout 60 $P/$v/gpu-parity --ops > $R/parity-ops-$v.txt 2>&1; log "$v parity ops exit $? $(tail -1 $R/parity-ops-$v.txt)"
  timeout 40 $P/$v/gpu-parity --models > $R/parity-models-$v.txt 2>&1; log "$v parity models exit $? $(tail -1 $R/parity-models-$v.txt)"; done
for v in final e1 e2 e3; do timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --csv --print-units base \
  $P/$v/llmq-run -m /tmp/m7b-qwen2.gguf --bench --reps 1 --bench-pp 512 --bench-npl 1 > $R/$v.csv 2>$R/ncu-$v.log; log "ncu $v exit $?"; done
python3 bench/ncu-times.py $R/final.csv $R/e1.csv $R/e2.csv $R/e3.csv > $R/kernel-times.md 2>&1
python3 bench/ncu-times.py --launches $R/final.csv $R/e1.csv $R/e2.csv $R/e3.csv > $R/launch-times.md 2>&1
run() { f=$R/bench-$2-$1-$(date +%s).md; timeout 45 $P/$1/llmq-run -m /tmp/$2.gguf --bench --reps 3 --bench-pp 512 --bench-npl 64,256 > $f 2>>$R/log.txt
  log "bench $2 $1 exit $? $(grep '^|' $f | grep -E 'pp|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; }
for m in m7b m7b-qwen2; do run final $m; run e1 $m; run e2 $m; run e3 $m; before 420 && run final $m; done
# e4 (mmv-fragments-rolling.md): the one-row matvecs and the few-sequence decode; the SASS of its q4_K and
# q6_K kernels (a review's doubt: q6_K's registers fell 118 -> 97; are the next block's LDGs between the HMMAs?)
for t in 12 14; do cuobjdump -sass -fun "_Z10mmv_kernelILi${t}ELb1EEv9mmv_groupPK6__halflib" $P/e4/bench-cuda-ops > $R/sass-e4-mmv$t.txt 2>&1
  cuobjdump -sass -fun "_Z10mmv_kernelILi${t}ELb1EEv9mmv_groupPK6__halflib" $P/final/bench-cuda-ops > $R/sass-final-mmv$t.txt 2>&1
  log "sass mmv $t: e4 $(grep -c 'LDG' $R/sass-e4-mmv$t.txt) LDG $(grep -c HMMA $R/sass-e4-mmv$t.txt) HMMA, final $(grep -c 'LDG' $R/sass-final-mmv$t.txt) LDG"; done
for v in final e4; do timeout 30 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/log.txt; log "ops $v exit $?"; done
few() { f=$R/bench-few-$1-$(date +%s).md; timeout 40 $P/$1/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512 --bench-npl 1,8 > $f 2>>$R/log.txt
  log "bench few $1 exit $? $(grep '^|' $f | grep -E 'tg|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; }
before 480 && few final; before 510 && few e4; before 540 && few final
tar czf "$OUT/resU1.tgz" -C $R .
head -14 $R/kernel-times.md; sed -n 1,20p $R/launch-times.md
for v in final e4; do grep -E "\\| 1 \\|" $R/ops-$v.md | grep matmul | awk -F'|' -v v=$v '{print v, $3, $5, $9}'; done
cat $R/log.txt
