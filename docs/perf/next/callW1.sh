#!/bin/sh
# round 15 call W1 (~9 min; written in r28): llama.cpp c2b1518 builds in the background; compute-sanitizer
# of round 14's landed kernels (memcheck of a 1,322-token prompt and of 64 sequences at once on the 2-layer
# 7B: the batched elementwise kernels, both GEMM epilogues, the split fold; racecheck per kernel family);
# main's --logprobs-exact against round 14 reverted (o14: its bits claim); e4 (mmv-fragments-rolling.md) against main; then main beside llama.cpp on the 7B and the GQA 8B shapes,
# which round 14 did not run (8B).  Payload: build-round15.sh.  Carry [".gpu-b", ".device-libs", ".llama"].
R=/tmp/resW1; . .gpu-b/commonW.sh
( nice -n 19 sh .llama/build-llama-cuda-refs .llama/llama-src.tar.xz /tmp/llama > $R/llama-build.log 2>&1; echo "build exit $?" >> $R/llama-build.log ) &
model m2 llama "$M2" "" 2
gate final   # main's own gates first: b62a84d (row_kernel's bound) and f0c7c63's new cases have not run yet
LONG=$(python3 -c 'print("the quick brown fox jumps over the lazy dog " * 140)')
timeout 120 compute-sanitizer --tool memcheck $F/llmq-run -m /tmp/m2.gguf -p "$LONG" -n 4 --ignore-eos > $R/memcheck-long.txt 2>&1; log "memcheck long exit $? $(grep 'ERROR SUMMARY' $R/memcheck-long.txt)"
python3 -c 'print("\n".join(f"story {i} begins with the" for i in range(64)))' > $R/p64.txt
timeout 120 compute-sanitizer --tool memcheck $F/llmq-run -m /tmp/m2.gguf --parallel 64 -f $R/p64.txt -n 4 --ignore-eos > $R/memcheck-b64.txt 2>&1; log "memcheck b64 exit $? $(grep 'ERROR SUMMARY' $R/memcheck-b64.txt)"
for k in row_kernel rope_kernel kv_write_q8_kernel gemm_sm90_kernel; do before 250 || break
  timeout 45 compute-sanitizer --tool racecheck --kernel-name kns=$k $F/llmq-run -m /tmp/m2.gguf -p "$LONG" -n 2 --ignore-eos > $R/racecheck-$k.txt 2>&1
  log "racecheck $k exit $? $(grep 'RACECHECK SUMMARY' $R/racecheck-$k.txt | head -1)"; done
bits final; bits o14; same final o14
gate e4
for t in 12 14; do cuobjdump -sass -fun "_Z10mmv_kernelILi${t}ELb1EEv9mmv_groupPK6__halflib" $P/e4/bench-cuda-ops > $R/sass-e4-mmv$t.txt 2>&1
  log "sass mmv $t e4: $(grep -c LDG $R/sass-e4-mmv$t.txt) LDG $(grep -c HMMA $R/sass-e4-mmv$t.txt) HMMA"; done
model m7b llama "$S7"
for v in final e4; do timeout 40 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/runs.txt; log "ops $v exit $?"
  grep -E "\| 1 \|" $R/ops-$v.md | grep matmul | awk -F'|' -v v=$v '{print v, $3, $5, $9}' >> $L; done
bench final m7b 40 512 1,8; bench e4 m7b 40 512 1,8; bench final m7b 40 512 1,8
model m8b llama "$S8"
while ! grep -q "build exit" $R/llama-build.log 2>/dev/null && before 420; do sleep 5; done; log "llama: $(tail -1 $R/llama-build.log)"
bench final m7b 90 512,8192 1,8,64,256
timeout 40 $LB/llama-bench -m /tmp/m7b.gguf -ngl 99 -fa 1 -p 512,8192 -n 128 -r 3 -o md > $R/llama-bench-m7b.md 2>>$R/llama-log.txt; log "llama-bench m7b exit $?"; cat $R/llama-bench-m7b.md >> $L
before 520 && bench final m8b 60 512,8192 1,256
before 560 && { timeout 30 $LB/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -p 512,8192 -n 128 -r 3 -o md > $R/llama-bench-m8b.md 2>>$R/llama-log.txt; log "llama-bench m8b exit $?"; cat $R/llama-bench-m8b.md >> $L; }
tar czf $OUT/resW1.tgz -C $R . ; cat $L
