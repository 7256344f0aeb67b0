#!/bin/sh
# r26 call S2 (warm after S1): v1's bench against main's, 7B batched-bench, the GQA 8B side by side
R=/tmp/resS2; . .gpu-b/commonS.sh
for v in final v1 final; do timeout 100 $P/$v/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512 --bench-npl 1,64,256 > $R/bench-$v-$(date +%s).md 2>>$R/log.txt; log "bench $v exit $?"; done
timeout 110 $LB/llama-batched-bench -m /tmp/m7b.gguf -ngl 99 -fa on -c 170000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32,64,128,256 > $R/llama-batched-m7b.txt 2>>$R/llama-log.txt; log "batched-bench m7b exit $?"
model m8b llama "$S8"
before 400 && { timeout 150 $F/llmq-run -m /tmp/m8b.gguf --bench --reps 1 --bench-pp 512,2048,8192 --json $R/llmq-m8b.json > $R/llmq-m8b.md 2>>$R/log.txt; log "llmq m8b exit $?"; }
before 460 && { timeout 60 $LB/llama-bench -m /tmp/m8b.gguf -ngl 99 -fa 1 -p 512,2048,8192 -n 128 -r 3 -o md > $R/llama-bench-m8b.md 2>>$R/llama-log.txt; log "llama-bench m8b exit $?"; }
before 480 && { timeout 100 $LB/llama-batched-bench -m /tmp/m8b.gguf -ngl 99 -fa on -c 170000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32,64,128,256 > $R/llama-batched-m8b.txt 2>>$R/llama-log.txt; log "batched-bench m8b exit $?"; }
tar czf "$OUT/resS2.tgz" -C $R .
for f in $R/bench-*.md; do echo "$f"; grep '^|' $f | grep -E "pp|tg|decode"; done
grep -E "^\|" $R/llama-batched-m7b.txt; grep '^|' $R/llmq-m8b.md | grep -E "pp|tg|decode"; cat $R/llama-bench-m8b.md; grep -E "^\|" $R/llama-batched-m8b.txt
cat $R/log.txt
