#!/usr/bin/env bash
# The demo (tools/dev.sh demo): a broker and two CPU workers on the embedded
# stories260K model, a batch of story prompts submitted with llmq-submit, the
# results, then per-job and per-worker throughput read back from SQLite with
# plain SQL on the views of docs/SCHEMA.md and with llmq-stats (which also
# writes BUILD_DIR/demo-throughput.svg), and a clean shutdown.
#
#   tools/demo.sh BUILD_DIR
#
# Everything lives in a temp dir (database, logs, ipc:// endpoints), so the
# demo needs no free port and leaves nothing behind; on failure the logs are
# shown.  Exit status: 0 when every job was done and every process stopped
# cleanly (exit 0 after SIGTERM).
set -euo pipefail

build=${1:?usage: tools/demo.sh BUILD_DIR}
build=$(cd "$build" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
model=$top/tests/data/models/stories260K.gguf
for exe in broker/llmq-broker worker/llmq-worker tools/llmq-submit tools/llmq-stats; do
    [ -x "$build/$exe" ] || { echo "demo: $build/$exe is missing: build first" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "demo: the sqlite3 command is needed" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/llmq-demo.XXXXXX")
db=$dir/llmq.db
clients=ipc://$dir/clients
workers=ipc://$dir/workers
pids=()
ok=0

cleanup() {
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$ok" -ne 1 ]; then
        for log in "$dir"/*.log; do
            [ -f "$log" ] && { echo "---- $log"; tail -n 20 "$log"; }
        done
        echo "demo: FAILED (logs above)" >&2
    fi
    rm -rf "$dir"
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
    2> "$dir/broker.log" &
pids+=($!)
broker=$!
for w in 1 2; do
    "$build/worker/llmq-worker" --broker "$workers" -m "$model" --cpu -t 1 --slots 8 \
        --id "demo-worker-$w" 2> "$dir/worker-$w.log" &
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
jobs=$dir/jobs.jsonl
for i in "${!prompts[@]}"; do
    # Half greedy, half sampled: a job's output depends only on its own seed.
    if [ $((i % 2)) -eq 0 ]; then temp=0; else temp=0.8; fi
    printf '{"id": "story-%02d", "prompt": "%s", "max_tokens": 48, "temperature": %s, "seed": %d}\n' \
        "$((i + 1))" "${prompts[$i]}" "$temp" "$((i + 1))"
done > "$jobs"

say "submitting ${#prompts[@]} jobs with llmq-submit and waiting for the results"
"$build/tools/llmq-submit" --broker "$clients" -i "$jobs" -o "$dir/results.jsonl" --batch demo \
    --timeout 60

say "results (prompt + continuation), from the database"
sqlite3 "$db" "SELECT printf('%-9s %-15s %s%s', substr(j.client_key, 6), w.name,
                            j.prompt, replace(r.text, char(10), ' '))
               FROM jobs j JOIN results r ON r.job_id = j.id JOIN workers w ON w.id = r.worker_id
               WHERE j.batch_id = 'demo' ORDER BY j.id"

say "per job: tokens and tok/s (table results)"
sql "SELECT substr(j.client_key, 6) AS job, w.name AS worker, r.prompt_tokens AS prompt,
            r.generated_tokens AS generated, r.finish_reason AS finish,
            r.queue_wait_ms AS queue_ms, round(r.prefill_ms, 2) AS prefill_ms,
            round(r.prefill_tok_s) AS prefill_tok_s, round(r.decode_ms, 2) AS decode_ms,
            round(r.decode_tok_s) AS decode_tok_s, r.total_ms
     FROM jobs j JOIN results r ON r.job_id = j.id JOIN workers w ON w.id = r.worker_id
     WHERE j.batch_id = 'demo' ORDER BY j.id"

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
plot=$build/demo-throughput.svg
"$build/tools/llmq-stats" --db "$db" --batch demo --table batches --table workers \
    --plot "$plot"
echo "plot of tok/s over time per worker and of the jobs' decode tok/s: $plot"

say "shutting down (SIGTERM: the workers say bye, the broker closes the database)"
stop "$worker1" "llmq-worker demo-worker-1"
stop "$worker2" "llmq-worker demo-worker-2"
stop "$broker" "llmq-broker"
done_jobs=$(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE batch_id = 'demo' AND state = 'done'")
[ "$done_jobs" -eq "${#prompts[@]}" ] || { echo "demo: only $done_jobs jobs done" >&2; exit 1; }
ok=1
say "demo done: ${#prompts[@]} jobs on 2 workers"
