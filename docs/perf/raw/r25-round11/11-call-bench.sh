#!/bin/sh
# docs/perf/next/11-call-bench.sh: round 11's device call 2 of 2, end-to-end medians of the variants that
# bench/ab-variants.sh built (the payload: PAYLOAD, default .gpu-b/payload-r25.tar.xz, a tar of
# its OUT; carry it with .device-libs).  Prepared in r25 without a device; run from the repo root,
# right after 11-call-gates.sh (the machine keeps /tmp 30 s after a call): memcheck of the
# combination, then llmq-run --bench medians of 3 on the 7B shape.  ~9 min.
R=/tmp/resN2; . docs/perf/next/11-call-env.sh
[ -s /tmp/m7b.gguf ] || $P/tools/llmq-mkmodel --vocab $VOCAB --layers 32 $S7 -o /tmp/m7b.gguf > $R/mk.log 2>&1
timeout 120 compute-sanitizer --tool memcheck --print-limit 20 $P/v12/gpu-parity --ops-small > $R/memcheck-v12.txt 2>&1
log "v12 memcheck exit $? $(grep 'ERROR SUMMARY' $R/memcheck-v12.txt)"
bench() { # bench TAG VARIANT [ENV=VAL]: reps 3, pp512 + pp8192, decode at 1, 64, 256
  t=$1; v=$2; shift 2
  env "$@" timeout 150 $P/$v/llmq-run -m /tmp/m7b.gguf --bench --reps 3 --bench-pp 512,8192 --bench-npl 1,64,256 \
    > $R/bench-$t.md 2>>$R/log-$t.txt; log "$t bench exit $?"
}
bench v0 v0; bench v12 v12; bench v9 v9; bench v5 v5; bench v6 v6
before 330 && bench v8 v8
before 380 && bench v11 v11
before 430 && bench v0b v0
before 480 && bench v6w v6 LLMQ_ATTN_LONG_TILE=128w
before 530 && bench v5c0 v5 LLMQ_GEMM_CLUSTER=0
tar czf "$OUT/resN2.tgz" -C $R .
for f in $R/bench-*.md; do echo "== $f"; grep -E "pp|tg128|decode" $f | head -8; done
cat $R/log.txt
