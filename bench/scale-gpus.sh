#!/bin/sh
# scale-gpus: the same batch of jobs through one broker with one GPU worker,
# then with two (GPUs 0 and 1): jobs/s and generated tok/s of each, their
# ratio, and the broker's CPU time.  Real programs end to end: llmq-mkmodel
# writes the 7B Q4_K_M, llmq-broker (default --sync full) on ipc://
# endpoints, llmq-worker --gpu N, llmq-submit timed from first submit to last
# result.  Jobs are 256 prompt tokens (given as ids, so the length is exact
# whatever the vocabulary) and 128 new tokens (ignore_eos, greedy), so every
# job does the same work.  Each configuration gets a fresh broker and
# database; a configuration starts timing only once its workers are alive.
# Not a test.
#
#   bench/scale-gpus.sh [-n JOBS] [-s SLOTS] [-b BIN] [-o OUTDIR] [-t SECONDS] [-m MODEL]
#     -n JOBS     jobs per configuration (default 2000)
#     -s SLOTS    slots per worker (default 64: the decode batch where the
#                 CUDA engine peaks, docs/perf/README.md)
#     -b BIN      llmq-broker, llmq-worker, llmq-submit, llmq-mkmodel,
#                 llmq-stats (default .gpu-bin)
#     -o OUTDIR   results (default $OUT, else /tmp/llmq-scale)
#     -t SECONDS  llmq-submit's limit per configuration (default 240)
#     -m MODEL    a GGUF with a 32000-token vocabulary instead of the 7B
#                 (written to /tmp by llmq-mkmodel when missing)
# Run from the repository root (the vocabulary comes from tests/data).
set -eu
n=2000
slots=64
bin=.gpu-bin
out=${OUT:-/tmp/llmq-scale}
limit=240
model=/tmp/scale-7b-q4_k_m.gguf
while getopts n:s:b:o:t:m: opt; do
    case $opt in
    n) n=$OPTARG ;; s) slots=$OPTARG ;; b) bin=$OPTARG ;; o) out=$OPTARG ;;
    t) limit=$OPTARG ;; m) model=$OPTARG ;; *) exit 2 ;;
    esac
done
prompt_len=256
gen_len=128
. bench/lib.sh
bench_start scale-gpus

model_7b "$model"

# BOS, then ids drawn from the ordinary-word range of a 32000-token
# vocabulary; a different prompt per job, the same for every configuration.
awk -v n="$n" -v p="$prompt_len" -v g="$gen_len" 'BEGIN { srand(1);
    for (i = 0; i < n; i++) {
        s = "1"; for (k = 1; k < p; k++) s = s ", " (300 + int(rand() * 29000));
        printf "{\"id\": \"j%d\", \"tokens\": [%s], \"max_tokens\": %d, " \
               "\"temperature\": 0, \"ignore_eos\": true}\n", i, s, g } }' >"$dir/jobs.jsonl"

# run_config NAME GPU...: one broker, one worker per GPU, the whole batch.
run_config() {
    name=$1
    shift
    cdir="$dir/$name"
    mkdir -p "$cdir"
    "$bin/llmq-broker" --db "$cdir/llmq.db" --clients "ipc://$cdir/c" \
        --workers "ipc://$cdir/w" 2>"$out/$name-broker.log" &
    broker=$!
    pids="$broker"
    nw=0
    for g in "$@"; do
        # ctx 512 holds a 384-token job; the KV cache is then 64 x 512 tokens.
        "$bin/llmq-worker" --broker "ipc://$cdir/w" -m "$model" --gpu "$g" --slots "$slots" \
            --ctx 512 --id "gpu$g" 2>"$out/$name-worker$g.log" &
        pids="$pids $!"
        nw=$((nw + 1))
    done
    wait_alive "$cdir/llmq.db" "$nw" "$name" || { stop_all; return 1; }
    c0=$(cpu_ticks "$broker")
    t0=$(date +%s.%N)
    rc=0
    "$bin/llmq-submit" --broker "ipc://$cdir/c" -i "$dir/jobs.jsonl" -o "$cdir/results.jsonl" \
        --batch "$name" --timeout "$limit" 2>"$out/$name-submit.log" || rc=$?
    t1=$(date +%s.%N)
    c1=$(cpu_ticks "$broker")
    done_n=$(sql "$cdir/llmq.db" \
        "SELECT count(*) FROM jobs WHERE batch_id = '$name' AND state = 'done'")
    gen=$(sql "$cdir/llmq.db" "SELECT coalesce(sum(r.generated_tokens), 0)
        FROM results r JOIN jobs j ON j.id = r.job_id WHERE j.batch_id = '$name'")
    awk -v name="$name" -v w="$nw" -v d="$done_n" -v n="$n" -v gen="$gen" -v t0="$t0" \
        -v t1="$t1" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v rc="$rc" 'BEGIN {
        s = t1 - t0
        printf "%s\t%d\t%d/%d\t%.1f\t%.2f\t%.0f\t%.2f\t%.2f\t%d\n", name, w, d, n, s, d / s,
            gen / s, c / hz, 100 * c / hz / s, rc }' >>"$out/summary.tsv"
    log "$name: $(tail -1 "$out/summary.tsv")"
    {
        echo "== $name"
        "$bin/llmq-stats" --db "$cdir/llmq.db" --table batches --table workers
    } >>"$out/stats.txt" 2>&1
    stop_all
    cp "$cdir/llmq.db" "$out/$name.db" 2>/dev/null || :
}

printf 'config\tworkers\tdone\tseconds\tjobs_s\tgen_tok_s\tbroker_cpu_s\tbroker_cpu_pct\tsubmit_rc\n' \
    >"$out/summary.tsv"
nvidia-smi --query-gpu=index,name,memory.total --format=csv >"$out/gpus.txt" 2>&1 || :
run_config one-gpu 0
run_config two-gpus 0 1
awk -F '\t' 'NR == 2 { a = $6; at = $5 } NR == 3 { b = $6; bt = $5 }
    END { if (a > 0 && at > 0) printf "ratio two/one: jobs/s %.2fx, tok/s %.2fx\n", bt / at, b / a }' \
    "$out/summary.tsv" | tee -a "$out/summary.tsv"
column -t -s "$(printf '\t')" "$out/summary.tsv" 2>/dev/null || cat "$out/summary.tsv"
cat "$out/stats.txt"
