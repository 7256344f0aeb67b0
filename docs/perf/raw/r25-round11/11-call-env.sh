# docs/perf/next/11-call-env.sh, sourced by 11-call-gates.sh and 11-call-bench.sh with R (the
# results folder) set: the device's libraries and test data, the payload unpacked once into
# /tmp/p (P), a clock for cutting a call short (before SECONDS), a log line, the 7B shape.
export LD_LIBRARY_PATH=$PWD/.device-libs:${LD_LIBRARY_PATH:-}
export LLMQ_TEST_DATA=$PWD/tests/data
mkdir -p "$R" /tmp/p
[ -x /tmp/p/v0/llmq-run ] || tar xJf "${PAYLOAD:-.gpu-b/payload-r25.tar.xz}" -C /tmp/p
P=/tmp/p
START=$(date +%s)
before() { [ $(( $(date +%s) - START )) -lt "$1" ]; }
log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$R/log.txt"; }
VOCAB=tests/data/vocab/ggml-vocab-llama-spm.gguf
S7="--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 8704 --mix q4_k_m --seed 1"
