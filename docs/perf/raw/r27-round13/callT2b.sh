#!/bin/sh
# round 13 call T2b: after T1 (v1 staged attention slower: 440->522 us), benches main first/last, v2, v3 at 128w; 8B main/v2.
R=/tmp/resT2; . .gpu-b/commonS.sh
model m7b llama "$S7"
run() { timeout 75 env $2 $P/$1/llmq-run -m /tmp/$3.gguf --bench --reps 3 --bench-pp 512,8192 --bench-npl 1,8,64,256 > $R/bench-$3-$1${2:+-w}-$(date +%s).md 2>>$R/log.txt; log "bench $3 $1 $2 exit $?"; }
run final "" m7b; run v2 "" m7b; run v3 LLMQ_ATTN_LONG_TILE=128w m7b; run final "" m7b; run v2 "" m7b
model m8b llama "$S8"
before 470 && run final "" m8b; before 540 && run v2 "" m8b
tar czf "$OUT/resT2.tgz" -C $R .
for f in $R/bench-*.md; do echo "$(basename $f) $(grep '^|' $f | grep -E 'pp|tg|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; done
cat $R/log.txt
