# sourced by the r28 V calls: payload round14b (final = main, e1 e5 e6 e7 and their combinations b*),
# results straight under $OUT (what a timeout leaves there still comes back).
export LD_LIBRARY_PATH=$PWD/.device-libs:${LD_LIBRARY_PATH:-}
export LLMQ_TEST_DATA=$PWD/tests/data
mkdir -p $R /tmp/p; [ -x /tmp/p/b756/llmq-run ] || { rm -rf /tmp/p; mkdir -p /tmp/p; tar xJf .gpu-b/payload.tar.xz -C /tmp/p; }
P=/tmp/p; F=$P/final
START=$(date +%s); before() { [ $(( $(date +%s) - START )) -lt "$1" ]; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a $R/log.txt; }
VOCAB=tests/data/vocab/ggml-vocab-llama-spm.gguf
S7="--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 8704 --mix q4_k_m --seed 1"
LB=/tmp/llama/bin
model() { [ -s /tmp/$1.gguf ] || { $F/llmq-mkmodel --arch $2 --vocab ${4:-$VOCAB} --layers ${5:-32} $3 -o /tmp/$1.gguf >> $R/mk.log 2>&1; log "made $1 ($?)"; }; }
gate() { timeout 60 $P/$1/gpu-parity --ops > $R/parity-ops-$1.txt 2>&1; log "$1 parity ops exit $? $(tail -1 $R/parity-ops-$1.txt)"
  timeout 40 $P/$1/gpu-parity --models > $R/parity-models-$1.txt 2>&1; log "$1 parity models exit $? $(tail -1 $R/parity-models-$1.txt)"; }
# bench VARIANT MODEL TIMEOUT PP NPL: the table to bench-MODEL-VARIANT-N.md, the runs' lines in the log
bench() { f=$R/bench-$2-$1-$(date +%s).md; timeout $3 $P/$1/llmq-run -m /tmp/$2.gguf --bench --reps 3 --bench-pp $4 --bench-npl $5 > $f 2>>$R/runs.txt
  log "bench $2 $1 exit $? $(grep '^|' $f | grep -E 'pp|tg|decode' | awk -F'|' '{printf "%s=%s ", $4, $5}')"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/env.txt
