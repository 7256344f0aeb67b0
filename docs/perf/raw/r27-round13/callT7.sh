#!/bin/sh
# round 13 call T7 (budget ~260 s with the start): v5 = the GEMM epilogue's loads batched before its stores.
R=$OUT; rm -rf /tmp/p; . .gpu-b/commonS.sh
timeout 50 $P/v5/gpu-parity --ops > $R/parity-ops-v5.txt 2>&1; log "v5 parity ops exit $? $(tail -1 $R/parity-ops-v5.txt)"
timeout 30 $P/v5/gpu-parity --models > $R/parity-models-v5.txt 2>&1; log "v5 parity models exit $? $(tail -1 $R/parity-models-v5.txt)"
model m7b llama "$S7"
for v in final v5; do timeout 30 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/log.txt; log "ops $v exit $?"; done
run() { timeout 40 $P/$1/llmq-run -m /tmp/$2.gguf --bench --reps 3 --bench-pp 512 --bench-npl 64 > $R/bench-$2-$1.md 2>>$R/log.txt; log "bench $2 $1 exit $? $(grep '^|' $R/bench-$2-$1.md | grep -E 'pp|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; }
run final m7b; run v5 m7b
model m7b-qwen2 qwen2 "$S7"
before 170 && run v5 m7b-qwen2; before 200 && run final m7b-qwen2
for v in final v5; do grep -E "\| (1|64|512) \|" $R/ops-$v.md | grep -v mma.sync | grep -E "attn_q q4_K|attn_output q4_K|ffn_down q6_K|ffn_down q4_K" | awk -F'|' -v v=$v '{print v, $3, $4, $5}'; done
cat $R/log.txt
