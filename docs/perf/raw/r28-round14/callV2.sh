#!/bin/sh
# round 14 call V2 (~5.5 min, warm after V1): V1's candidate (/tmp/choice.txt, or $1) gated, then beside
# main and llama.cpp c2b1518 (built during V1) on the 7B: llmq-run --bench and llama-bench /
# llama-batched-bench in this one call; qwen2's pp512 beside llama's shape (issue 14).
R=$OUT/v2; . .gpu-b/commonV.sh
C=${1:-$(tail -1 /tmp/choice.txt)}; log "candidate $C"
[ -x $LB/llama-bench ] || { log "no llama build: $(tail -2 /tmp/llama-build.log 2>/dev/null)"; }
model m7b llama "$S7"; model m7b-qwen2 qwen2 "$S7"
gate $C
bench final m7b 110 512,2048,8192 1,8,32,64,128,256; bench $C m7b 110 512,2048,8192 1,8,32,64,128,256
timeout 40 $LB/llama-bench -m /tmp/m7b.gguf -ngl 99 -fa 1 -p 512,2048,8192 -n 128 -r 3 -o md > $R/llama-bench-m7b.md 2>>$R/llama-log.txt; log "llama-bench m7b exit $?"
bench final m7b-qwen2 40 512 1; bench $C m7b-qwen2 40 512 1
before 400 && { timeout 40 $LB/llama-bench -m /tmp/m7b-qwen2.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md > $R/llama-bench-qwen2.md 2>>$R/llama-log.txt; log "llama-bench qwen2 exit $?"; }
before 420 && { timeout 100 $LB/llama-batched-bench -m /tmp/m7b.gguf -ngl 99 -fa on -c 170000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32,64,128,256 > $R/llama-batched-m7b.txt 2>>$R/llama-log.txt; log "batched-bench m7b exit $?"; }
cat $R/llama-bench-m7b.md $R/llama-bench-qwen2.md; grep -E "^\|" $R/llama-batched-m7b.txt; cat $R/log.txt
