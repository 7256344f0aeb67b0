# sourced by the r26 S calls: payload (final = main, v1 = 12-attn-v-early), models, helpers
export LD_LIBRARY_PATH=$PWD/.device-libs:${LD_LIBRARY_PATH:-}
export LLMQ_TEST_DATA=$PWD/tests/data
mkdir -p $R /tmp/p; [ -x /tmp/p/final/llmq-run ] || tar xJf .gpu-b/payload.tar.xz -C /tmp/p; P=/tmp/p; F=$P/final
START=$(date +%s); before() { [ $(( $(date +%s) - START )) -lt "$1" ]; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a $R/log.txt; }
VOCAB=tests/data/vocab/ggml-vocab-llama-spm.gguf
S7="--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 8704 --mix q4_k_m --seed 1"
S8="--dim 4096 --heads 32 --kv-heads 8 --ff 14336 --ctx 8704 --mix q4_k_m --seed 1"
LB=/tmp/llama/bin
model() { [ -s /tmp/$1.gguf ] || { $F/llmq-mkmodel --arch $2 --vocab ${4:-$VOCAB} --layers ${5:-32} $3 -o /tmp/$1.gguf >> $R/mk.log 2>&1; log "made $1 ($?)"; }; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/env.txt
