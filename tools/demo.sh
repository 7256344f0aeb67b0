#!/usr/bin/env bash
# The demo (tools/dev.sh demo): a broker and two CPU workers on the embedded
# stories260K model, a batch of story prompts (2,000 by default, 15 s or so
# on two cores) submitted with llmq-submit, a few of the results, then
# per-job and per-worker throughput read back from SQLite with plain SQL on
# the views of docs/SCHEMA.md and with llmq-stats (which also draws the
# plot), and a clean shutdown.
#
#   tools/demo.sh BUILD_DIR [JOBS [DIR]]
#
# What the run leaves, in DIR (default BUILD_DIR/demo; the next run replaces
# it, and refuses a DIR that holds something else): the jobs (jobs.jsonl),
# their results (results.jsonl, one JSON line per job), the broker's
# database (llmq.db: sqlite3 or llmq-stats read it), the plot
# (demo-throughput.svg) and the logs.  The ipc:// endpoints live in a temp
# dir, so the demo needs no free port; on failure the logs are shown.  Exit
# status: 0 when every job was done and every process stopped cleanly (exit
# 0 after SIGTERM).
set -euo pipefail

build=${1:?usage: tools/demo.sh BUILD_DIR [JOBS [DIR]]}
n_jobs=${2:-2000}
case $n_jobs in
    '' | *[!0-9]* | 0) echo "demo: JOBS must be a whole number of 1 or more, not '$n_jobs'" >&2; exit 2 ;;
esac
build=$(cd "$build" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
model=$top/tests/data/models/stories260K.gguf
for exe in broker/llmq-broker worker/llmq-worker tools/llmq-submit tools/llmq-stats; do
    [ -x "$build/$exe" ] || { echo "demo: $build/$exe is missing: build first" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "demo: the sqlite3 command is needed" >&2; exit 1; }

out=${3:-$build/demo}
if [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -e "$out/.llmq-demo" ]; then
    echo "demo: $out holds files that are not a demo's: not replacing them" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$out"
touch "$out/.llmq-demo"
out=$(cd "$out" && pwd)
sockets=$(mktemp -d "${TMPDIR:-/tmp}/llmq-demo.XXXXXX")
db=$out/llmq.db
clients=ipc://$sockets/clients
workers=ipc://$sockets/workers
pids=()
ok=0

cleanup() {
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$ok" -ne 1 ]; then
        for log in "$out"/*.log; do
            [ -f "$log" ] && { echo "---- $log"; tail -n 20 "$log"; }
        done
        echo "demo: FAILED (logs above)" >&2
    fi
    rm -rf "$sockets"
}
trap cleanup EXIT

say() { printf '\n==> %s\n' "$*"; }
sql() { sqlite3 -header -column "$db" "$1"; }

# Stops one process with SIGTERM and insists on a clean exit.
stop() {
    local pid=$1 name=$2 rc=0
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    local left=() p
    for p in "${pids[@]}"; do [ "$p" = "$pid" ] || left+=("$p"); done
    pids=("${left[@]}")
    [ "$rc" -eq 0 ] || { echo "demo: $name exited with status $rc" >&2; exit 1; }
    echo "$name stopped cleanly (exit 0)"
}

say "starting llmq-broker and two llmq-worker processes (CPU engine, $(basename "$model"), 1 thread each)"
"$build/broker/llmq-broker" --db "$db" --clients "$clients" --workers "$workers" \
    2> "$out/broker.log" &
pids+=($!)
broker=$!
for w in 1 2; do
    "$build/worker/llmq-worker" --broker "$workers" -m "$model" --cpu -t 1 --slots 8 \
        --id "demo-worker-$w" 2> "$out/worker-$w.log" &
    pids+=($!)
    eval "worker$w=$!"
done

prompts=(
    "Once upon a time" "One day, a little girl named Lily" "Tom had a big red ball"
    "The sun was shining and" "There was a small dog who" "In a big forest, there lived"
    "Mia wanted to fly like a bird" "The little boy found a box" "Every morning, the cat"
    "Sam and his friend went to the park" "A bunny lived in a hole" "The old tree was sad because"
    "Lucy liked to paint" "Once there was a tiny fish" "The happy bear ate"
    "Ben saw a shiny star" "It was a rainy day and" "The princess had a magic"
    "Anna and her mom baked" "A little bird could not find"
)
jobs=$out/jobs.jsonl
lengths=(64 128 192 256 384)
for ((i = 0; i < n_jobs; i++)); do
    # One greedy job in four, the others sampled, each with its own seed: a
    # job's output depends only on the job.  Lengths vary, so jobs finish at
    # different times and the workers' batches keep changing.
    if [ $((i % 4)) -eq 0 ]; then temp=0; else temp=0.8; fi
    printf '{"id": "story-%04d", "prompt": "%s", "max_tokens": %d, "temperature": %s, "seed": %d}\n' \
        "$((i + 1))" "${prompts[$((i % ${#prompts[@]}))]}" "${lengths[$((i % ${#lengths[@]}))]}" \
        "$temp" "$((i + 1))"
done > "$jobs"

say "submitting $n_jobs jobs ($jobs) with llmq-submit and waiting for the results"
"$build/tools/llmq-submit" --broker "$clients" -i "$jobs" -o "$out/results.jsonl" --batch demo \
    --timeout 600

say "the first results (prompt + continuation), from the database"
sqlite3 "$db" "SELECT printf('%-10s %-15s %s%s', substr(j.client_key, 6), w.name,
                            j.prompt, substr(replace(r.text, char(10), ' '), 1, 160))
               FROM jobs j JOIN results r ON r.job_id = j.id JOIN workers w ON w.id = r.worker_id
               WHERE j.batch_id = 'demo' ORDER BY j.id LIMIT 5"
echo "... all $n_jobs results, one JSON line per job: $out/results.jsonl"

say "per job: tokens and tok/s (table results; the first 10 jobs)"
sql "SELECT substr(j.client_key, 6) AS job, w.name AS worker, r.prompt_tokens AS prompt,
            r.generated_tokens AS generated, r.finish_reason AS finish,
            r.queue_wait_ms AS queue_ms, round(r.prefill_ms, 2) AS prefill_ms,
            round(r.prefill_tok_s) AS prefill_tok_s, round(r.decode_ms, 2) AS decode_ms,
            round(r.decode_tok_s) AS decode_tok_s, r.total_ms
     FROM jobs j JOIN results r ON r.job_id = j.id JOIN workers w ON w.id = r.worker_id
     WHERE j.batch_id = 'demo' ORDER BY j.id LIMIT 10"

# The view's busy_ms is the span from a worker's first dispatch to its last
# result (idle gaps included); llmq-stats below reports busy time as the
# union of the worker's attempts.  Named for what it is here.
say "per worker (view v_worker_stats)"
sql "SELECT name AS worker, engine, slots, jobs_done, prompt_tokens, generated_tokens,
            busy_ms AS first_to_last_ms, round(gen_tok_s, 1) AS tok_s_over_span,
            round(avg_decode_tok_s, 1) AS avg_decode_tok_s
     FROM v_worker_stats ORDER BY name"

say "the batch (view v_batch_stats)"
sql "SELECT batch_id, jobs, done, failed, generated_tokens, wall_ms, round(gen_tok_s, 1) AS gen_tok_s,
            round(avg_queue_wait_ms, 1) AS avg_queue_wait_ms, round(avg_total_ms, 1) AS avg_total_ms
     FROM v_batch_stats WHERE batch_id = 'demo'"

say "the accounting (llmq-stats, reading the database while the broker runs)"
# From the demo's folder, so that the plot names the database as llmq.db.
(cd "$out" && "$build/tools/llmq-stats" --db llmq.db --batch demo --table batches --table workers \
    --plot demo-throughput.svg)
echo "plot of tok/s over time per worker and of the jobs' decode tok/s: $out/demo-throughput.svg"

say "shutting down (SIGTERM: the workers say bye, the broker closes the database)"
stop "$worker1" "llmq-worker demo-worker-1"
stop "$worker2" "llmq-worker demo-worker-2"
stop "$broker" "llmq-broker"
done_jobs=$(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE batch_id = 'demo' AND state = 'done'")
[ "$done_jobs" -eq "$n_jobs" ] || { echo "demo: only $done_jobs of $n_jobs jobs done" >&2; exit 1; }
ok=1
say "demo done: $n_jobs jobs on 2 workers; what it left, in $out:"
echo "  results.jsonl        one JSON line per job: text, tokens, timings, worker"
echo "  llmq.db              the broker's database: sqlite3 $db 'SELECT * FROM v_batch_stats'"
echo "                       or $build/tools/llmq-stats --db $db"
echo "  demo-throughput.svg  tok/s per worker over time and the jobs' decode speeds"
echo "  jobs.jsonl, *.log    the jobs submitted, the broker's and the workers' logs"
