#!/bin/sh
# tests/gpu/gpus.sh: `llmq-worker --gpus all` on a machine with several GPUs
# (the two-H200 kind): one child per GPU, each announcing its GPU's index,
# name and UUID; a batch served by all of them; a child killed with -9 is
# restarted by the supervisor and its jobs finish elsewhere; SIGTERM stops
# everything cleanly.  Real programs on ipc:// endpoints, stories260K.
# Prints a table; exit 0 only when every check holds.  Not part of
# `make check` (CI has no GPU).
#
# usage (from the repository root): tests/gpu/gpus.sh [BIN]   (default .gpu-bin)
set -u
BIN=${1:-.gpu-bin}
export LD_LIBRARY_PATH="$PWD/.device-libs:${LD_LIBRARY_PATH:-}"
dir=$(mktemp -d "${TMPDIR:-/tmp}/gpus-XXXXXX")
db=$dir/llmq.db
fail=0
check() { if [ "$1" -eq 0 ]; then echo "ok - $2"; else echo "FAIL - $2"; fail=1; fi; }
sql() { python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); [print(*r, sep='|') for r in c.execute(sys.argv[2])]" "$db" "$1"; }

"$BIN/llmq-broker" --db "$db" --clients "ipc://$dir/c" --workers "ipc://$dir/w" \
    --heartbeat-ms 200 --worker-timeout-ms 1000 2> "$dir/broker.log" &
broker=$!
"$BIN/llmq-worker" --broker "ipc://$dir/w" -m tests/data/models/stories260K.gguf \
    --gpus all --slots 8 --id sup 2> "$dir/workers.log" &
sup=$!
sleep 4
n_gpu=$(nvidia-smi -L | wc -l)
alive=$(sql "SELECT count(*) FROM workers WHERE state = 'alive' AND engine = 'cuda'")
check $([ "$alive" -eq "$n_gpu" ]; echo $?) "one cuda worker per GPU is alive ($alive of $n_gpu)"
sql "SELECT name, gpu_index, gpu_name, gpu_uuid, engine FROM workers ORDER BY gpu_index"
named=$(sql "SELECT count(*) FROM workers WHERE gpu_uuid LIKE 'GPU-%' AND gpu_name LIKE '%H200%'")
check $([ "$named" -ge "$n_gpu" ]; echo $?) "each announces its GPU's name and UUID"

i=0
while [ $i -lt 200 ]; do
    printf '{"id": "j%d", "prompt": "Once upon a time %d", "max_tokens": 64, "ignore_eos": true}\n' $i $i
    i=$((i + 1))
done > "$dir/jobs.jsonl"
"$BIN/llmq-submit" --broker "ipc://$dir/c" --batch gpus -i "$dir/jobs.jsonl" -o "$dir/out.jsonl" --no-wait \
    2> "$dir/submit.log"
sleep 1
victim=$(pgrep -f -- "--gpu 0" | head -n 1)
kill -9 "$victim" 2>/dev/null
"$BIN/llmq-submit" --broker "ipc://$dir/c" --batch gpus -i "$dir/jobs.jsonl" -o "$dir/out.jsonl" \
    2>> "$dir/submit.log"
done=$(sql "SELECT count(*) FROM jobs WHERE state = 'done'")
rows=$(sql "SELECT count(*) FROM results")
check $([ "$done" -eq 200 ] && [ "$rows" -eq 200 ]; echo $?) \
    "200 jobs done with one result row each ($done, $rows) after kill -9 of a child"
sql "SELECT w.name, w.gpu_index, count(r.job_id) FROM workers w LEFT JOIN results r ON r.worker_id = w.id GROUP BY w.id"
sleep 2
grep -q "restart" "$dir/workers.log"
check $? "the supervisor restarted the killed child"
kill -TERM $sup
wait $sup
check $? "SIGTERM: the supervisor and its children exit 0"
kill -TERM $broker
wait $broker
check $? "the broker stops cleanly"
tail -n 20 "$dir/workers.log"
rm -rf "$dir"
exit $fail
