#!/bin/sh
# bench-fleet: what one broker costs per job when many workers pull from it.
# WORKERS real llmq-worker processes (CPU engine, stories260K, one thread,
# SLOTS slots each) on ipc:// against one llmq-broker (default --sync full),
# N jobs of MAXTOK tokens submitted as one batch by llmq-submit.  The jobs
# are near-free so that the broker, not the engines, sets the pace.
# Reports dispatched jobs/s and result writes/s (from the database's own
# timestamps), the broker's CPU time per job (utime + stime from
# /proc/PID/stat over the submit), queue wait percentiles (started_at -
# submitted_at: on a saturated fleet this is mostly waiting for a free slot,
# not the broker's dispatch cost), and the job rate the broker could sustain
# with one core fully busy.  Not a test.
#
#   bench/bench-fleet.sh [N [WORKERS [SLOTS [MAXTOK]]]]   (default 3000 64 2 2)
# LLMQ_BUILDDIR: the build tree (default .); LLMQ_SRCDIR: the sources (..).
set -eu
n=${1:-3000}
workers=${2:-64}
slots=${3:-2}
maxtok=${4:-2}
build=${LLMQ_BUILDDIR:-.}
src=${LLMQ_SRCDIR:-$build/..}
model=$src/tests/data/models/stories260K.gguf
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-fleet-XXXXXX")
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || :; done
    for p in $pids; do wait "$p" 2>/dev/null || :; done
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
db=$dir/llmq.db

"$build/broker/llmq-broker" --db "$db" --clients "ipc://$dir/c" --workers "ipc://$dir/w" \
    2>"$dir/broker.log" &
broker=$!
pids=$broker
i=0
while [ "$i" -lt "$workers" ]; do
    "$build/worker/llmq-worker" --broker "ipc://$dir/w" -m "$model" --cpu --threads 1 \
        --slots "$slots" --id "fleet-w$i" 2>"$dir/worker$i.log" &
    pids="$pids $!"
    i=$((i + 1))
done
waited=0
until [ "$(sqlite3 -readonly "$db" "SELECT count(*) FROM workers WHERE state = 'alive'" \
        2>/dev/null || echo 0)" -ge "$workers" ]; do
    sleep 0.5
    waited=$((waited + 1))
    [ "$waited" -lt 240 ] || { echo "bench-fleet: workers not alive after 120 s" >&2; exit 1; }
done

awk -v n="$n" -v m="$maxtok" 'BEGIN { for (i = 0; i < n; i++)
    printf "{\"id\": \"j%d\", \"prompt\": \"Once upon a time\", \"max_tokens\": %d}\n", i, m }' \
    >"$dir/jobs.jsonl"
ticks() { awk '{ print $14 + $15 }' "/proc/$broker/stat"; }
c0=$(ticks)
t0=$(date +%s.%N)
"$build/tools/llmq-submit" --broker "ipc://$dir/c" -i "$dir/jobs.jsonl" -o "$dir/results.jsonl" \
    --batch fleet 2>"$dir/submit.log"
t1=$(date +%s.%N)
c1=$(ticks)

cpu_s=$(awk -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", c / hz }')
done_n=$(wc -l <"$dir/results.jsonl")
awk -v n="$n" -v w="$workers" -v s="$slots" -v m="$maxtok" -v d="$done_n" -v t0="$t0" \
    -v t1="$t1" -v cpu="$cpu_s" -v cores="$(nproc)" 'BEGIN {
    wall = t1 - t0
    printf "bench-fleet: %d jobs (max_tokens %d), %d CPU workers x %d slots, %d cores\n",
        n, m, w, s, cores
    printf "end to end: %d results in %.2f s, %.0f jobs/s\n", d, wall, d / wall
    printf "broker CPU: %.2f s over the run (%.0f%% of one core), %.1f us per job;" \
        " one core would carry %.0f jobs/s\n", cpu, 100 * cpu / wall, 1e6 * cpu / d, d / cpu }'
sqlite3 -readonly "$db" "
  SELECT 'dispatched: ' || count(*) || ' jobs in ' || (max(a.started_at) - min(a.started_at)) ||
         ' ms, ' || round(1000.0 * count(*) / max(max(a.started_at) - min(a.started_at), 1)) || ' jobs/s'
    FROM attempts a JOIN jobs ON jobs.id = a.job_id WHERE batch_id = 'fleet';
  SELECT 'result writes: ' || count(*) || ' in ' || (max(created_at) - min(created_at)) ||
         ' ms, ' || round(1000.0 * count(*) / max(max(created_at) - min(created_at), 1)) || ' /s'
    FROM results JOIN jobs ON jobs.id = results.job_id WHERE batch_id = 'fleet';
  WITH w AS (SELECT started_at - submitted_at AS ms,
                    row_number() OVER (ORDER BY started_at - submitted_at) AS r,
                    count(*) OVER () AS c
               FROM jobs WHERE batch_id = 'fleet' AND started_at IS NOT NULL)
  SELECT 'dispatch latency (started_at - submitted_at): p50 ' ||
         (SELECT ms FROM w WHERE r = (c + 1) / 2) || ' ms, p99 ' ||
         (SELECT ms FROM w WHERE r = (99 * c + 99) / 100) || ' ms, max ' ||
         (SELECT max(ms) FROM w) || ' ms' FROM w LIMIT 1;
  SELECT 'workers with results: ' || count(DISTINCT worker_id) || ', jobs per worker min ' ||
         min(c) || ' max ' || max(c)
    FROM (SELECT worker_id, count(*) AS c FROM results GROUP BY worker_id);"
