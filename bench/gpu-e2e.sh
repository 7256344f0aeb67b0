#!/bin/sh
# gpu-e2e: the whole system as a user runs it (issue 18's benchmark): one
# llmq-broker, one llmq-worker on GPU 0 with its defaults, llmq-submit timed
# from its start (first submit) to its exit (last result), on three
# workloads of the 7B Q4_K_M:
#   a  JOBS jobs of 256 prompt ids + 256 new tokens (default sampler,
#      ignore_eos), then the engine alone on that shape (llmq-run --parallel
#      256 over text prompts of ~256 tokens)
#   b  JOBS jobs of one common 1,024-token prefix + 64 distinct ids + 128 new,
#      with the prefix cache and without it (--no-prefix-cache); the two
#      runs' outputs must be identical
#   c  JOBS jobs of mixed lengths: prompts 32-2,048 ids, outputs 16-512
#      tokens (log-uniform, fixed seed)
# Per run: total tok/s (prompt + generated over the wall time), generated
# tok/s, jobs/s, job latency p50/p99 (finished - submitted, from the
# database), mean GPU utilisation (nvidia-smi samples every 200 ms), the
# share of prompt tokens taken from the prefix cache (results'
# cached_prompt_tokens), and the worker's start line.  Prompt ids are drawn
# from the ordinary-word range of a 32,000-token vocabulary after BOS.  Not a
# test.
#
#   bench/gpu-e2e.sh [-n JOBS] [-b BIN] [-o OUTDIR] [-m MODEL] [-w WORKLOADS]
#     -n JOBS       jobs per workload (default 1024)
#     -b BIN        llmq-broker, llmq-worker, llmq-submit, llmq-run,
#                   llmq-mkmodel, llmq-stats (default .gpu-bin)
#     -o OUTDIR     results (default $OUT, else /tmp/llmq-e2e); summary.tsv
#     -m MODEL      the model (default: the 7B Q4_K_M, written to /tmp by
#                   llmq-mkmodel when missing)
#     -w WORKLOADS  which to run, e.g. "a b" (default "a b c")
# Run from the repository root (the vocabulary comes from tests/data).
set -eu
n=1024
bin=.gpu-bin
out=${OUT:-/tmp/llmq-e2e}
model=/tmp/m7b.gguf
workloads="a b c"
while getopts n:b:o:m:w: opt; do
    case $opt in
    n) n=$OPTARG ;; b) bin=$OPTARG ;; o) out=$OPTARG ;; m) model=$OPTARG ;;
    w) workloads=$OPTARG ;; *) exit 2 ;;
    esac
done
. bench/lib.sh
bench_start gpu-e2e

model_7b "$model"

# jobs NAME AWK-PROGRAM: the job file of a workload; the program gets n and
# a seeded rand(), and prints one JSON line per job with ids(len) for a run
# of prompt ids.
make_jobs() {
    awk -v n="$n" 'function ids(len,   s, k) {
            s = ""; for (k = 0; k < len; k++) s = s ", " (300 + int(rand() * 29000)); return s }
        BEGIN { srand(7) } '"$2" >"$dir/$1.jsonl"
}
make_jobs a '{ } END { for (i = 0; i < n; i++)
    printf "{\"id\": \"a%d\", \"tokens\": [1%s], \"max_tokens\": 256, \"ignore_eos\": true}\n",
        i, ids(255) }' </dev/null
make_jobs b '{ } END { p = ids(1023); for (i = 0; i < n; i++)
    printf "{\"id\": \"b%d\", \"tokens\": [1%s%s], \"max_tokens\": 128, \"ignore_eos\": true}\n",
        i, p, ids(64) }' </dev/null
make_jobs c '{ } END { for (i = 0; i < n; i++) {
        pl = int(exp(log(32) + rand() * (log(2048) - log(32))))
        gl = int(exp(log(16) + rand() * (log(512) - log(16))))
        printf "{\"id\": \"c%d\", \"tokens\": [1%s], \"max_tokens\": %d, \"ignore_eos\": true}\n",
            i, ids(pl - 1), gl } }' </dev/null

# run NAME JOBFILE [WORKER FLAGS...]: a fresh broker and database, one
# worker with the defaults (plus the flags), the whole job file.
run() {
    name=$1 jobfile=$2
    shift 2
    cdir="$dir/$name"
    mkdir -p "$cdir"
    "$bin/llmq-broker" --db "$cdir/llmq.db" --clients "ipc://$cdir/c" \
        --workers "ipc://$cdir/w" 2>"$out/$name-broker.log" &
    pids="$!"
    "$bin/llmq-worker" --broker "ipc://$cdir/w" -m "$model" --gpu 0 --id gpu0 "$@" \
        2>"$out/$name-worker.log" &
    pids="$pids $!"
    wait_alive "$cdir/llmq.db" 1 "$name" || { stop_all; return 1; }
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 \
        >"$cdir/util.txt" 2>/dev/null &
    smi=$!
    t0=$(date +%s.%N)
    rc=0
    "$bin/llmq-submit" --broker "ipc://$cdir/c" -i "$jobfile" -o "$cdir/results.jsonl" \
        --batch "$name" --timeout 580 2>"$out/$name-submit.log" || rc=$?
    t1=$(date +%s.%N)
    kill "$smi" 2>/dev/null || :
    wait "$smi" 2>/dev/null || :
    util=$(awk '$1 ~ /^[0-9]+$/ { s += $1; k++ } END { printf "%.0f", k ? s / k : -1 }' \
        "$cdir/util.txt")
    # done, prompt tokens, generated tokens, prompt tokens from the prefix cache
    figures=$(sql "$cdir/llmq.db" "SELECT count(*), coalesce(sum(r.prompt_tokens), 0),
        coalesce(sum(r.generated_tokens), 0), coalesce(sum(r.cached_prompt_tokens), 0)
        FROM results r JOIN jobs j ON j.id = r.job_id
        WHERE j.batch_id = '$name' AND j.state = 'done'")
    lat=$(sql "$cdir/llmq.db" "SELECT finished_at - submitted_at FROM jobs
        WHERE batch_id = '$name' AND state = 'done' ORDER BY 1" |
        awk '{ v[NR] = $1 } END { if (NR) printf "%d\t%d", v[int((NR + 1) / 2)],
             v[int(NR * 0.99 + 0.999)] ; else printf "-\t-" }')
    echo "$figures" | awk -F '|' -v name="$name" -v n="$(wc -l <"$jobfile")" -v t0="$t0" \
        -v t1="$t1" -v lat="$lat" -v util="$util" -v rc="$rc" 'BEGIN { OFS = "\t" } {
        s = t1 - t0
        printf "%s\t%d/%d\t%.2f\t%.0f\t%.0f\t%.2f\t%s\t%s\t%.1f\t%d\n", name, $1, n, s,
            ($2 + $3) / s, $3 / s, $1 / s, lat, util, $2 ? 100 * $4 / $2 : 0, rc }' \
        >>"$out/summary.tsv"
    log "$name: $(tail -1 "$out/summary.tsv")"
    grep -m1 "slots" "$out/$name-worker.log" >>"$out/start-lines.txt" 2>/dev/null || :
    {
        echo "== $name"
        "$bin/llmq-stats" --db "$cdir/llmq.db" --table batches
    } >>"$out/stats.txt" 2>&1 || :
    stop_all
}

# outputs NAME: each job's id and generated tokens, sorted (for comparing runs).
outputs() {
    python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in sorted(rows, key=lambda r: r["id"]): print(r["id"], r.get("tokens"))' \
        "$dir/$1/results.jsonl"
}

printf 'run\tdone\tseconds\ttotal_tok_s\tgen_tok_s\tjobs_s\tp50_ms\tp99_ms\tgpu_util_pct\tcached_pct\tsubmit_rc\n' \
    >"$out/summary.tsv"
for w in $workloads; do
    case $w in
    a)
        run a "$dir/a.jsonl"
        # The engine alone on a's shape: text prompts of 255 common words
        # (about one token each), 256 new tokens, 256 at a time.
        words="the of and to in is was that for it with as his on be at by had not are but"
        words="$words from or have an they which one you were all we her she there would their"
        words="$words will when who him been has more if no out so said what up its about into"
        words="$words than them can only other new some time could these two may"
        awk -v n="$n" -v words="$words" 'BEGIN { srand(7); nw = split(words, w)
            for (i = 0; i < n; i++) { s = ""; for (k = 0; k < 255; k++)
                s = s (k ? " " : "") w[1 + int(rand() * nw)]; print s } }' >"$dir/a-text.txt"
        t0=$(date +%s.%N)
        "$bin/llmq-run" -m "$model" --parallel 256 -f "$dir/a-text.txt" -n 256 --ignore-eos \
            >/dev/null 2>"$out/a-engine.log" || log "a-engine: llmq-run failed"
        t1=$(date +%s.%N)
        tail -1 "$out/a-engine.log" | awk -v t0="$t0" -v t1="$t1" '{
            # "N prompts, G tokens generated in S s: R tok/s; prefix cache: H of P prompt tokens"
            for (i = 1; i <= NF; i++) { if ($(i + 1) == "tokens" && $(i + 2) == "generated") g = $i
                if ($(i + 1) == "s:") s = $i; if ($(i + 1) == "prompt" && $(i + 2) == "tokens") p = $i }
            printf "a-engine\t-\t%.1f\t%.0f\t%.0f\t-\t-\t-\t-\t-\t0\n", s,
                (s > 0 ? (p + g) / s : 0), (s > 0 ? g / s : 0) }' \
            >>"$out/summary.tsv"
        log "a-engine: $(tail -1 "$out/summary.tsv")"
        ;;
    b)
        run b-shared "$dir/b.jsonl"
        run b-unshared "$dir/b.jsonl" --no-prefix-cache
        outputs b-shared >"$out/b-shared.out"
        outputs b-unshared >"$out/b-unshared.out"
        if cmp -s "$out/b-shared.out" "$out/b-unshared.out"; then
            log "b: outputs identical with and without the prefix cache ($(wc -l <"$out/b-shared.out") jobs)"
        else
            log "b: OUTPUTS DIFFER with and without the prefix cache"
        fi
        ;;
    c) run c "$dir/c.jsonl" ;;
    *) log "no workload $w" ;;
    esac
done
column -t -s "$(printf '\t')" "$out/summary.tsv" 2>/dev/null || cat "$out/summary.tsv"
cat "$out/start-lines.txt" 2>/dev/null || :
