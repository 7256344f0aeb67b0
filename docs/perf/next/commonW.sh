# sourced by round 15's calls (written in r28): payload build-round15.sh (final = main, e4, a1, a0, o14, t2, t0), results
# as they come in $OUT/log.txt (a call returns at most 8 files: everything else goes in $R, tarred into
# $OUT at the end), bench tables appended to the log as each row is printed.
export LD_LIBRARY_PATH=$PWD/.device-libs:${LD_LIBRARY_PATH:-}
export LLMQ_TEST_DATA=$PWD/tests/data
mkdir -p $R /tmp/p; [ -x /tmp/p/t0/llmq-run ] || tar xJf .gpu-b/payload.tar.xz -C /tmp/p
P=/tmp/p; F=$P/final; L=$OUT/log.txt
START=$(date +%s); before() { [ $(( $(date +%s) - START )) -lt "$1" ]; }
log() { printf '%s %s\n' "$(date +%T)" "$*" >> $L; }
VOCAB=tests/data/vocab/ggml-vocab-llama-spm.gguf
S7="--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 8704 --mix q4_k_m --seed 1"
S8="--dim 4096 --heads 32 --kv-heads 8 --ff 14336 --ctx 8704 --mix q4_k_m --seed 1"
M2="--dim 4096 --heads 32 --kv-heads 32 --ff 11008 --ctx 2048 --mix q4_k_m --seed 1"
LB=/tmp/llama/bin
model() { [ -s /tmp/$1.gguf ] || { $F/llmq-mkmodel --arch $2 --vocab ${4:-$VOCAB} --layers ${5:-32} $3 -o /tmp/$1.gguf >> $R/mk.log 2>&1; log "made $1 ($?)"; }; }
gate() { timeout 60 $P/$1/gpu-parity --ops > $R/parity-ops-$1.txt 2>&1; log "$1 parity ops exit $? $(tail -1 $R/parity-ops-$1.txt)"
  timeout 40 $P/$1/gpu-parity --models > $R/parity-models-$1.txt 2>&1; log "$1 parity models exit $? $(tail -1 $R/parity-models-$1.txt)"; }
# bench VARIANT MODEL TIMEOUT PP NPL: each row into the log as llmq-run prints it (r28: rows stream)
bench() { log "bench $2 $1 (pp $4, npl $5)"; timeout $3 $P/$1/llmq-run -m /tmp/$2.gguf --bench --reps 3 --bench-pp $4 --bench-npl $5 2>>$R/runs.txt |
  grep --line-buffered -E '^\| [^-m]' >> $L; log "bench $2 $1 done"; }
# bits VARIANT: --logprobs-exact of a 1,322-token prompt and of 64 sequences at once (2-layer 7B), into
# $R/bits-VARIANT-{long,b64}.txt; compare two variants with cmp
bits() { timeout 40 $P/$1/llmq-run -m /tmp/m2.gguf -p "$(python3 -c 'print("the quick brown fox jumps over the lazy dog " * 140)')" \
    -n 32 --ignore-eos --logprobs 5 --logprobs-exact > $R/bits-$1-long.txt 2>/dev/null
  python3 -c 'print("\n".join(f"story {i} begins with the" for i in range(64)))' > $R/p64.txt
  timeout 40 $P/$1/llmq-run -m /tmp/m2.gguf --parallel 64 -f $R/p64.txt -n 16 --ignore-eos --logprobs 1 --logprobs-exact \
    > $R/bits-$1-b64.txt 2>/dev/null; }
same() { for k in long b64; do cmp -s $R/bits-$1-$k.txt $R/bits-$2-$k.txt; log "bits $1 vs $2 ($k): cmp exit $? ($(grep -c 0x $R/bits-$2-$k.txt) lines with values)"; done; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/env.txt
