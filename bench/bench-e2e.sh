#!/bin/sh
# bench-e2e: end-to-end jobs per second with trivial generations, through
# the real programs: llmq-broker, WORKERS llmq-worker processes on the CPU
# engine (stories260K, one thread each), and llmq-submit with N jobs of
# max_tokens 1.  Prints jobs/s as llmq-submit saw it, then the broker's own
# accounting from SQLite.  Not a test.
#
#   bench/bench-e2e.sh [N [WORKERS [SLOTS]]]      (default 2000 2 16)
# LLMQ_BUILDDIR: the build tree (default .); LLMQ_SRCDIR: the sources (..).
set -eu
n=${1:-2000}
workers=${2:-2}
slots=${3:-16}
build=${LLMQ_BUILDDIR:-.}
src=${LLMQ_SRCDIR:-$build/..}
model=$src/tests/data/models/stories260K.gguf
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-e2e-XXXXXX")
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || :; done
    wait 2>/dev/null || :
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

"$build/broker/llmq-broker" --db "$dir/llmq.db" --clients "ipc://$dir/c" \
    --workers "ipc://$dir/w" 2>"$dir/broker.log" &
pids="$!"
i=0
while [ "$i" -lt "$workers" ]; do
    "$build/worker/llmq-worker" --broker "ipc://$dir/w" -m "$model" --cpu \
        --threads 1 --slots "$slots" --id "bench-w$i" 2>"$dir/worker$i.log" &
    pids="$pids $!"
    i=$((i + 1))
done

awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++)
    printf "{\"id\": \"j%d\", \"prompt\": \"Once upon a time\", \"max_tokens\": 1}\n", i }' \
    >"$dir/jobs.jsonl"
start=$(date +%s.%N)
"$build/tools/llmq-submit" --broker "ipc://$dir/c" -i "$dir/jobs.jsonl" \
    -o "$dir/results.jsonl" --batch e2e 2>/dev/null
end=$(date +%s.%N)
done_n=$(wc -l <"$dir/results.jsonl")
awk -v n="$n" -v d="$done_n" -v w="$workers" -v s="$slots" -v t0="$start" -v t1="$end" \
    'BEGIN { printf "bench-e2e: %d jobs (max_tokens 1) on %d CPU workers x %d slots:" \
             " %d results in %.2f s, %.0f jobs/s\n", n, w, s, d, t1 - t0, d / (t1 - t0) }'
sqlite3 -readonly "$dir/llmq.db" "SELECT 'batch: ' || done || ' done, wall ' ||
    wall_ms || ' ms, avg queue wait ' || round(avg_queue_wait_ms, 1) || ' ms, avg total ' ||
    round(avg_total_ms, 1) || ' ms' FROM v_batch_stats WHERE batch_id = 'e2e';
  SELECT 'worker ' || name || ': ' || jobs_done || ' jobs' FROM v_worker_stats ORDER BY name;"
