#!/bin/sh
# r26 call S5: v2 mmv activation prefetch, v3/v4 GEMM weights 4/5 k tiles ahead, v5 = v1 + v2: gates, ops, bench (main first and last)
R=/tmp/resS5; rm -rf /tmp/p; . .gpu-b/commonS.sh
model m2 llama "--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 2048 --mix q4_k_m --seed 1" "" 2
model m7b llama "$S7"
for v in v2 v3 v4 v5; do timeout 100 $P/$v/gpu-parity --ops > $R/parity-ops-$v.txt 2>&1; log "$v parity ops exit $? $(grep -c ' ok' $R/parity-ops-$v.txt) ok $(grep -c FAIL $R/parity-ops-$v.txt) FAIL"; done
for v in final v2 v3 v4; do timeout 60 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/log.txt; log "ops $v exit $?"; done
for v in final v2 v3 v4 v5 final; do before 500 && { timeout 70 $P/$v/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512 --bench-npl 1,64,256 > $R/bench-$v-$(date +%s).md 2>>$R/log.txt; log "bench $v exit $?"; }; done
before 530 && { timeout 40 ncu --clock-control none --kernel-name-base demangled -k "regex:mmv_kernel<.int.12, .(bool.1|true)>" --launch-skip 3 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats $P/v2/bench-cuda-ops /tmp/m2.gguf > $R/ncu-mmv-v2.txt 2>&1; log "ncu v2 exit $?"; }
tar czf "$OUT/resS5.tgz" -C $R .
for f in $R/bench-*.md; do echo "$f $(grep '^|' $f | grep -E 'pp|tg|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; done
for v in final v2 v3 v4; do echo "== $v"; grep -E "4096 x 4096 \(8 layers\) \| (1|8|64|512) \|" $R/ops-$v.md | grep attn_q; grep -E "11008 x 4096 \(8 layers\) \| (1|64|512) \|" $R/ops-$v.md | grep ffn_gate; done
grep -E "Duration|Issued Warp|Eligible Warps" $R/ncu-mmv-v2.txt
cat $R/log.txt
