#!/bin/sh
# docs/perf/next/11-call-gates.sh: round 11's device call 1 of 2, gates and op tables of the variants that
# bench/ab-variants.sh built (the payload: PAYLOAD, default .gpu-b/payload-r25.tar.xz, a tar of
# its OUT; carry it with .device-libs).  Prepared in r25 without a device; run from the repo root.
# v0 main; v1 mmv staging plan + bytes permute; v1a staging plan; v2 attn scale wait; v3 GEMM store banks;
# v4 GEMM PDL prologue; v5 GEMM TMA multicast (LLMQ_GEMM_CLUSTER=0: TMA alone); v6 attention 128-row
# tiles (LLMQ_ATTN_LONG_TILE=128 default, 128w, 64); v7 = v1 + v5 + v6; v8 MM_CHUNK 512; v9 = v8 + v1;
# v10 = v8 + v1 + v5 + v6; v11 rope + kv_write fused; v12 = v10 + v11 (every patch that applies with
# the others).  ~9 min.
R=/tmp/resN1; . docs/perf/next/11-call-env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/env.txt
[ -s /tmp/m8l.gguf ] || $P/tools/llmq-mkmodel --vocab $VOCAB --layers 8 $S7 -o /tmp/m8l.gguf > $R/mk.log 2>&1
[ -s /tmp/m2.gguf ] || $P/tools/llmq-mkmodel --vocab $VOCAB --layers 2 $S7 -o /tmp/m2.gguf >> $R/mk.log 2>&1
[ -s /tmp/m7b.gguf ] || ( nice -n 5 $P/tools/llmq-mkmodel --vocab $VOCAB --layers 32 $S7 -o /tmp/m7b.gguf >> $R/mk.log 2>&1 ) &
# gates: a hang (a miscounted barrier) traps after 2^28 polls; the timeout is the backstop
par() { # par TAG VARIANT [ENV=VAL]
  t=$1; v=$2; shift 2
  env "$@" timeout 90 $P/$v/gpu-parity --ops > $R/parity-ops-$t.md 2>>$R/log-$t.txt
  log "$t parity ops exit $? $(grep -c FAIL $R/parity-ops-$t.md) FAIL $(grep -c '| ok |' $R/parity-ops-$t.md) ok"
}
par v12 v12; par v5 v5; par v5c0 v5 LLMQ_GEMM_CLUSTER=0; par v6 v6; par v6w v6 LLMQ_ATTN_LONG_TILE=128w
par v8 v8; par v9 v9; par v11 v11
ops() { t=$1; v=$2; shift 2; env "$@" timeout 60 $P/$v/bench-cuda-ops /tmp/m8l.gguf > $R/ops-$t.md 2>>$R/log-$t.txt; log "$t ops exit $?"; }
ops v0 v0; ops v12 v12; ops v5 v5; ops v5c0 v5 LLMQ_GEMM_CLUSTER=0; ops v6 v6; ops v6w v6 LLMQ_ATTN_LONG_TILE=128w
ops v8 v8; ops v9 v9; ops v11 v11; ops v1 v1; ops v1a v1a
before 330 && { timeout 150 $P/v12/gpu-parity --models /tmp/m2.gguf $P/synth/*.gguf > $R/parity-models-v12.md 2>>$R/log.txt
  log "v12 parity models exit $? $(grep -c FAIL $R/parity-models-v12.md) FAIL $(grep -c '| ok |' $R/parity-models-v12.md) ok"; }
for v in v1 v1a v2 v3 v4 v10 v7; do before 470 && par $v $v; done
for v in v2 v3 v4 v10 v7; do before 530 && ops $v $v; done
tar czf "$OUT/resN1.tgz" -C $R .
grep -h FAIL $R/parity-*.md | head -30
for t in v0 v12 v1 v1a v2 v3 v4 v5 v5c0 v6 v6w v7 v8 v9 v10 v11; do [ -s $R/ops-$t.md ] || continue; echo "== ops $t"; grep -E "\| (1|8|64|512) \|" $R/ops-$t.md | grep -E "attn_q q4_K|ffn_gate|ffn_down q4_K|output" | grep -v mma.sync | awk -F'|' '{print $3,$4,$5,$9}'; grep -i "attention" $R/ops-$t.md | head -4; done
cat $R/log.txt
