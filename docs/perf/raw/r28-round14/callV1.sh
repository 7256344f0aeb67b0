#!/bin/sh
# round 14 call V1 (~8 min): llama.cpp builds in the background (for V2) while e7 (residual epilogue
# batched, bias preloaded: gemm-epilogue-split.patch), e5 (elementwise batched) and e6 (split-sum a
# thread per value) are gated and benched against main; U1 measured e1-e3 (its benches' 45 s limits
# cut every table: medians from their runs' lines).  Writes /tmp/choice for V2.
R=$OUT/v1; . .gpu-b/commonV.sh
( nice -n 19 sh .llama/build-llama-cuda-refs .llama/llama-src.tar.xz /tmp/llama > /tmp/llama-build.log 2>&1; echo "build exit $?" >> /tmp/llama-build.log; cp /tmp/llama-build.log $R/ ) &
model m7b llama "$S7"; model m7b-qwen2 qwen2 "$S7"
gate e7; gate e5; timeout 60 $P/e6/gpu-parity --ops > $R/parity-ops-e6.txt 2>&1; log "e6 parity ops exit $? $(tail -1 $R/parity-ops-e6.txt)"
for v in final e7; do timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --csv --print-units base \
  $P/$v/llmq-run -m /tmp/m7b-qwen2.gguf --bench --reps 1 --bench-pp 512 --bench-npl 1 > $R/ncu-qwen2-$v.csv 2>$R/ncu-$v.log; log "ncu $v exit $?"; done
python3 bench/ncu-times.py $R/ncu-qwen2-final.csv $R/ncu-qwen2-e7.csv > $R/kernel-times-e7.md 2>&1
python3 bench/ncu-times.py --launches $R/ncu-qwen2-final.csv $R/ncu-qwen2-e7.csv > $R/launch-times-e7.md 2>&1
for m in m7b m7b-qwen2; do bench final $m 40 512 64; bench e1 $m 40 512 64; bench e7 $m 40 512 64; done; bench final m7b 40 512 64
before 420 && bench final m7b 40 512,8192 1; before 440 && bench e5 m7b 40 512,8192 1; before 460 && bench final m7b 40 512,8192 1
before 480 && bench final m7b 60 512 256; before 520 && bench e6 m7b 60 512 256
python3 .gpu-b/choose.py $R > $R/choice.txt 2>&1; cp $R/choice.txt /tmp/choice.txt; cat $R/choice.txt
while ! grep -q "build exit" /tmp/llama-build.log 2>/dev/null && before 585; do sleep 5; done
log "llama: $(tail -1 /tmp/llama-build.log)"
head -14 $R/kernel-times-e7.md; cat $R/log.txt
