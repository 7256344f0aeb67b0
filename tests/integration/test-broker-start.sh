#!/bin/sh
# test-broker-start: a broker start that fails once its database is open.
#
# Pins: a clients endpoint that cannot be bound fails the start (exit 1,
# naming the endpoint), and the database that start created (no file was
# at its path) is removed, with its -wal and -shm, saying so, so that the
# next start does not take an empty file for a queue; a database that was
# there before is left as it is, its jobs kept, whatever the start did.

. "$LLMQ_SRCDIR/tests/integration/env.sh"

it_init broker-start
BROKER=$LLMQ_BUILDDIR/broker/llmq-broker
bad=ipc://$dir/no/such/dir/clients
count() { "$PY" -c 'import sqlite3, sys
print(sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute(sys.argv[2]).fetchone()[0])' \
    "$db" "$1"; }

"$BROKER" --db "$dir/new.db" --clients "$bad" --workers "$workers" 2>"$dir/new.log"
rc=$?
cat "$dir/new.log"
[ "$rc" -eq 1 ] && grep -q "cannot bind $bad" "$dir/new.log" &&
    grep -q "database $dir/new.db: removed" "$dir/new.log" &&
    [ ! -e "$dir/new.db" ] && [ ! -e "$dir/new.db-wal" ] && [ ! -e "$dir/new.db-shm" ]
check $? "a start that cannot bind fails naming the endpoint, and leaves no database it made"

it_broker
it_wait_listening
check $? "a broker starts on its own database"
echo '{"id": "kept", "prompt": "Once", "max_tokens": 2}' >"$dir/one.jsonl"
"$LLMQ_BUILDDIR/tools/llmq-submit" --broker "$clients" -i "$dir/one.jsonl" --no-wait \
    >/dev/null 2>>"$dir/submit.log"
check $? "a job is queued in it"
it_stop "$broker_pid"
check $? "and the broker stops cleanly"

"$BROKER" --db "$db" --clients "$bad" --workers "$workers" 2>"$dir/old.log"
rc=$?
cat "$dir/old.log"
[ "$rc" -eq 1 ] && grep -q "cannot bind $bad" "$dir/old.log" && ! grep -q "removed" "$dir/old.log" &&
    [ "$(count "SELECT count(*) FROM jobs WHERE state = 'queued'")" -eq 1 ]
check $? "on a database that was there, the failed start keeps it and its queued job"

it_done
