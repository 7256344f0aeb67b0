#!/bin/sh
# test-recovery: clients survive a restart of the broker (docs/PROTOCOL.md,
# "wait": the lease), with a real llmq-broker, two llmq-worker processes
# (CPU engine, stories260K) and the real clients.
#
# Pins: llmq-submit waiting on 300 jobs, the broker killed with kill -9 after
# 93 results (the jobs provably still running: the workers are paced) and
# restarted on the same database once the client has said it lost the
# broker, finishes by itself: exit 0, 300 lines, 300 distinct jobs, each done
# once in SQLite, the loss and the return said on stderr.  The Python
# client's wait does the same across a graceful stop (SIGTERM, whose
# wait_end leaves jobs pending: it says the broker is stopping) and a
# restart of broker and workers: each job yielded once, and the wait's
# counts add up.

. "$LLMQ_SRCDIR/tests/integration/env.sh"
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit
CLIENT=$LLMQ_SRCDIR/proto/python/llmq_client.py
# 10 ms a step: a job of 16 tokens runs for 160 ms at least and 300 of them
# on 16 slots for 3 s, so the kill lands while jobs run on a machine of any
# speed.
PACE=LLMQ_TEST_MIN_STEP_MS=10

it_init recovery
workers_up() { # NAME...: their pids in $worker_pids
    worker_pids=""
    for w in "$@"; do
        env "$PACE" "$LLMQ_BUILDDIR/worker/llmq-worker" --broker "$workers" -m "$MODEL" --cpu \
            -t 1 --id "$w" --slots 8 2>>"$dir/$w.log" &
        worker_pids="$worker_pids $!"
    done
    it_pids="$it_pids $worker_pids"
}
it_broker
workers_up w1 w2
it_wait_workers 2
check $? "a broker and two paced workers are up"

lines() { # FILE: its number of lines, 0 when it does not exist yet
    if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi
}
at_least() { # N FILE
    [ "$(lines "$2")" -ge "$1" ]
}
said() { # TEXT FILE
    grep -q "$1" "$2" 2>/dev/null
}
# Waits up to $2 seconds for pid $1 to exit: its exit status (SIGKILL's if
# it had to be killed).
reap() {
    t=0
    while kill -0 "$1" 2>/dev/null && [ "$t" -lt $(($2 * 20)) ]; do
        sleep 0.05
        t=$((t + 1))
    done
    kill -0 "$1" 2>/dev/null && kill -KILL "$1"
    wait "$1"
}

# ---- llmq-submit across kill -9 of the broker ----
i=1
while [ "$i" -le 300 ]; do
    printf '{"id": %d, "prompt": "Once upon a time, a cat named %d", "max_tokens": 16, "ignore_eos": true}\n' \
        "$i" "$i"
    i=$((i + 1))
done >"$dir/jobs.jsonl"
"$SUBMIT" --broker "$clients" -i "$dir/jobs.jsonl" -o "$dir/out.jsonl" --batch rec \
    2>"$dir/submit.log" &
submit_pid=$!
it_pids="$it_pids $submit_pid"
it_eventually at_least 93 "$dir/out.jsonl"
check $? "llmq-submit writes its first 93 results"
kill -KILL "$broker_pid"
wait "$broker_pid" 2>/dev/null
before=$(lines "$dir/out.jsonl")
[ "$before" -lt 300 ]
check $? "the broker is killed with jobs in flight ($before of 300 results in)"
it_eventually said "no word from the broker" "$dir/submit.log"
check $? "llmq-submit says it lost the broker"
it_broker
it_wait_listening
check $? "a new broker listens on the same database"
reap "$submit_pid" 120
check $? "llmq-submit finishes by itself, exit 0"
said "answers again" "$dir/submit.log"
check $? "and said the broker answered again"
[ "$(lines "$dir/out.jsonl")" -eq 300 ]
check $? "300 result lines ($(lines "$dir/out.jsonl"))"
"$PY" - "$dir/out.jsonl" "$db" <<'EOF'
import json, sqlite3, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ids = {r["job_id"] for r in rows}
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
done = db.execute("SELECT count(*) FROM jobs WHERE batch_id = 'rec' AND state = 'done'").fetchone()[0]
results = db.execute("SELECT count(*) FROM results JOIN jobs ON jobs.id = job_id"
                     " WHERE batch_id = 'rec'").fetchone()[0]
print(f"# {len(rows)} lines, {len(ids)} distinct jobs, {done} done and {results} result rows in SQLite")
sys.exit(0 if len(ids) == 300 and all(r["state"] == "done" for r in rows)
         and done == 300 and results == 300 else 1)
EOF
check $? "300 distinct jobs, all done, each done once in SQLite"

# ---- the Python client across a graceful stop and a restart ----
"$PY" "$CLIENT" --broker "$clients" raw "$("$PY" -c '
import json
jobs = [{"key": f"py:{i}", "prompt": f"The little dog number {i}", "max_tokens": 16,
         "ignore_eos": True} for i in range(60)]
print(json.dumps({"v": 1, "type": "submit", "req": 1, "batch": "py", "jobs": jobs}))')" \
    >"$dir/py-submit.json"
check $? "the Python client submits 60 jobs"
"$PY" "$CLIENT" --broker "$clients" wait --batch py --timeout 120 >"$dir/py.out" \
    2>"$dir/py.log" &
wait_pid=$!
it_pids="$it_pids $wait_pid"
it_eventually at_least 10 "$dir/py.out"
kill -TERM "$broker_pid"
wait "$broker_pid"
check $? "the broker stops on SIGTERM (exit 0)"
stopped=0
for pid in $worker_pids; do reap "$pid" 60 || stopped=1; done
check $stopped "and so do the workers it told to stop (exit 0)"
[ "$(lines "$dir/py.out")" -lt 60 ]
check $? "with jobs of the wait unfinished ($(lines "$dir/py.out") of 60 in)"
it_eventually said "the broker is stopping" "$dir/py.log"
check $? "the Python wait says the broker is stopping"
it_broker
it_wait_listening
workers_up w1 w2
it_wait_workers 2
check $? "a new broker and two workers are up"
reap "$wait_pid" 120
check $? "the Python wait finishes by itself, exit 0"
"$PY" - "$dir/py.out" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
results, end = rows[:-1], rows[-1]
ids = [r["id"] for r in results]
print(f"# {len(results)} results, {len(set(ids))} distinct, end {end}")
sys.exit(0 if len(ids) == 60 and len(set(ids)) == 60 and all(r["state"] == "done" for r in results)
         and end["done"] == 60 and end["pending"] == 0 else 1)
EOF
check $? "it yielded each of the 60 jobs once, done, and its end counts 60 done, 0 pending"
said "answers again" "$dir/py.log"
check $? "and said the broker answered again"

it_done
