#!/bin/sh
# test-submit-queue: a batch larger than the broker's --max-queued, through
# llmq-submit, against a real llmq-broker (--max-queued 4) and llmq-worker
# (CPU engine, stories260K, 2 slots).
#
# Pins: llmq-submit streams a 30-job batch into a queue of 4 as the worker
# frees room (says so on stderr) and writes all 30 results, each job stored
# once; results stream: with the worker frozen while later parts still wait
# for room, the output already holds the result of every job done so far,
# and the run ends with one line per job, none twice; lines without an
# "id" (no client key) are not stored twice either;
# the broker's refusal says how many new jobs fit now and the most one
# submit can ever hold; with no worker taking jobs, --timeout ends the
# streaming with status 3, naming how many jobs went in, and running the
# same command again sends only the rest.  With no broker at the endpoint,
# --timeout also ends the wait for the submit's answer (status 3, the wait
# named), not libllmq's 30 s request timeout, and the silent broker is named
# first, within 3 s.

. "$LLMQ_SRCDIR/tests/integration/env.sh"
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit

it_init submit-queue
it_broker --max-queued 4
it_worker w1 --slots 2
w1=$worker_pid
it_wait_workers 1
check $? "a broker with --max-queued 4 and one worker are up"

# n jobs ($2) into $1; ids "$3-i" unless $3 is empty (then no id, no key).
jobs() {
    for i in $(seq "$2"); do
        id=${3:+"\"id\": \"$3-$i\", "}
        printf '{%s"prompt": "Once upon a time %d", "max_tokens": 6}\n' "$id" "$i"
    done >"$1"
}
count() { "$PY" -c 'import sqlite3, sys
print(sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute(sys.argv[2]).fetchone()[0])' \
    "$db" "$1"; }

jobs "$dir/big.jsonl" 30 big
timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/big.jsonl" -o "$dir/big.out" --batch big \
    2>"$dir/big.log"
check $? "llmq-submit runs a batch of 30 through a queue of 4 to completion"
[ "$(wc -l <"$dir/big.out")" -eq 30 ] &&
    [ "$(count "SELECT count(DISTINCT client_key) FROM jobs WHERE batch_id = 'big'")" -eq 30 ] &&
    [ "$(count "SELECT count(*) FROM jobs WHERE batch_id = 'big' AND state = 'done'")" -eq 30 ]
check $? "30 results written, 30 jobs stored once each, all done"
grep -q "sending them in parts as room frees" "$dir/big.log"
check $? "it says the batch goes in parts as room frees"
grep -q "queue is full (.*limit 4): none of the 30 jobs was stored; [0-4] new jobs fit now and no submit of more than 4 ever does" "$dir/big.log"
check $? "the broker's refusal says what fits now and the most one submit can hold"

# Streaming: the first 4 jobs of a 40-job batch are short, the rest long
# (256 tokens, seconds in all), so that jobs are done while later parts still
# wait for room; then the worker is frozen (SIGSTOP): the queue stays full,
# the batch cannot all go in, and the output must hold the results of the
# jobs done so far meanwhile.
done_in() { count "SELECT count(*) FROM jobs WHERE batch_id = '$1' AND state = 'done'"; }
done_at_least() { [ "$(done_in "$1")" -ge "$2" ]; }
lines_are() { [ "$(wc -l <"$1")" -eq "$2" ]; }
# The output holds a line for each job done (a result the worker sent just
# before it froze may still be stored after the freeze: counted anew).
all_done_out() { lines_are "$dir/stream.out" "$(done_in stream)"; }
for i in $(seq 40); do
    [ "$i" -le 4 ] && n=6 || n=256
    printf '{"id": "s-%d", "prompt": "Once upon a time %d", "max_tokens": %d, "ignore_eos": true}\n' \
        "$i" "$i" "$n"
done >"$dir/stream.jsonl"
: >"$dir/stream.out"
"$SUBMIT" --broker "$clients" -i "$dir/stream.jsonl" -o "$dir/stream.out" --batch stream \
    2>"$dir/stream.log" &
submit_pid=$!
it_pids="$it_pids $submit_pid"
it_eventually done_at_least stream 2
check $? "the first jobs of the streamed batch are done"
kill -STOP "$w1"
it_eventually all_done_out
check $? "with the worker frozen, the output holds the $(done_in stream) results done so far"
stored=$(count "SELECT count(*) FROM jobs WHERE batch_id = 'stream'")
[ "$stored" -lt 40 ] && kill -0 "$submit_pid" && grep -q "waiting for room in the queue" "$dir/stream.log"
check $? "meanwhile llmq-submit is still waiting for room: $stored of 40 jobs stored"
kill -CONT "$w1"
wait "$submit_pid"
check $? "llmq-submit completes the streamed batch"
lines_are "$dir/stream.out" 40 &&
    [ "$("$PY" -c 'import json, sys
print(len({json.loads(l)["id"] for l in open(sys.argv[1])}))' "$dir/stream.out")" -eq 40 ]
check $? "40 result lines, one per job, none twice"

jobs "$dir/nokey.jsonl" 12 ""
timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/nokey.jsonl" -o "$dir/nokey.out" \
    --batch nokey 2>>"$dir/big.log"
check $? "a batch of 12 lines without ids goes through the queue of 4"
[ "$(count "SELECT count(*) FROM jobs WHERE batch_id = 'nokey'")" -eq 12 ] &&
    [ "$(wc -l <"$dir/nokey.out")" -eq 12 ]
check $? "each keyless line is stored once (12 jobs, 12 results)"

# No worker: the queue fills and stays full until --timeout.
it_stop "$w1"
check $? "the worker stops cleanly"
jobs "$dir/stuck.jsonl" 10 stuck
timeout 60 "$SUBMIT" --broker "$clients" -i "$dir/stuck.jsonl" -o "$dir/stuck.out" \
    --batch stuck --timeout 1 2>"$dir/stuck.log"
rc=$?
[ "$rc" -eq 3 ] && grep -q "no room for the remaining 6 jobs within --timeout" "$dir/stuck.log" &&
    grep -q "4 of the 10 jobs were submitted; the same command again sends the rest" "$dir/stuck.log" &&
    [ "$(count "SELECT count(*) FROM jobs WHERE batch_id = 'stuck'")" -eq 4 ]
check $? "with no worker, --timeout ends the streaming: status 3 ($rc), 4 of 10 jobs in, said so"
it_worker w1 --slots 2
timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/stuck.jsonl" -o "$dir/stuck.out" \
    --batch stuck 2>>"$dir/stuck.log"
check $? "run again with a worker, the same command completes the batch"
[ "$(count "SELECT count(*) FROM jobs WHERE batch_id = 'stuck'")" -eq 10 ] &&
    [ "$(wc -l <"$dir/stuck.out")" -eq 10 ] &&
    grep -q "6 jobs submitted, 4 already known from an earlier submit" "$dir/stuck.log"
check $? "it sent only the 6 jobs left: 10 jobs stored, 10 results"
timeout 60 "$SUBMIT" --broker "ipc://$dir/nobody" -i "$dir/stuck.jsonl" -o "$dir/nobody.out" \
    --batch nobody --timeout 1 2>"$dir/nobody.log"
rc=$?
waited=$(sed -n 's/.*no reply to submit from the broker within \([0-9]*\) ms.*/\1/p' "$dir/nobody.log")
[ "$rc" -eq 3 ] && [ -n "$waited" ] && [ "$waited" -le 1000 ]
check $? "with no broker, --timeout 1 ends the submit: status 3 ($rc), waited ${waited:-?} ms, said so"
grep -q "no answer from the broker at ipc://$dir/nobody in [0-9.]* s (is it running?" "$dir/nobody.log"
check $? "before the submit's own wait, a silent broker is named (within 3 s, here --timeout's 1)"
it_done
