#!/bin/sh
# test-disk-full: llmq-broker on a real file system that runs out of space,
# a 40 MiB tmpfs mounted in a user and mount namespace of this test's own.
#
# Pins: with less free than --min-free-mb, a submit is refused as
# unavailable, naming the free space, and nothing of it is stored, while
# stats are served; once the space is freed, submits are accepted again
# with no restart; with 0 bytes free the broker still answers and stops
# cleanly.  (test-broker-workers pins the rest with --max-db-mb: results of
# running jobs stored, no job started.)
#
# Needs unprivileged user namespaces (unshare -rm); without them: skipped.

if [ -z "$LLMQ_DISK_FULL_NS" ]; then
    if ! unshare -rm true 2>/dev/null; then
        echo "skip - unshare -rm is not permitted here: no file system to fill"
        exit 77
    fi
    LLMQ_DISK_FULL_NS=1 exec unshare -rm sh "$0" "$@"
fi

. "$LLMQ_SRCDIR/tests/integration/env.sh"
it_init disk-full
mkdir "$dir/fs" && mount -t tmpfs -o size=40m tmpfs "$dir/fs" || exit 99
trap 'umount "$dir/fs" 2>/dev/null; it_cleanup' EXIT
db=$dir/fs/llmq.db

# submit KEY: the reply's code ("ok" for submit_ok) and message.
submit() {
    "$PY" -c "import sys; sys.path.insert(0, '$LLMQ_SRCDIR/proto/python')
import llmq_client
c = llmq_client.Client('$clients', timeout_ms=5000)
try:
    c.submit([{'key': '$1', 'prompt': 'x' * 1000}])
    print('ok')
except llmq_client.LlmqError as e:
    print(e.code, e.message)"
}
stored() { "$PY" -c "import sqlite3; print(sqlite3.connect('file:$db?mode=ro', uri=True).execute(\"SELECT count(*) FROM jobs WHERE client_key = '$1'\").fetchone()[0])"; }
room_is() { tail -n 1 "$dir/broker.log" | grep -q "$1"; }

it_broker --min-free-mb 8
it_wait_listening
[ "$(submit a)" = ok ]
check $? "with room, a submit is stored"

dd if=/dev/zero of="$dir/fs/fill" bs=1M count=35 2>/dev/null
it_eventually room_is "database full"
reply=$(submit b)
echo "$reply" | grep -q "^unavailable database full: the file system holding .* MiB free, less than --min-free-mb 8" &&
    [ "$(stored b)" = 0 ]
check $? "under --min-free-mb a submit is refused as unavailable, nothing stored: $reply"
"$PY" "$LLMQ_SRCDIR/proto/python/llmq_client.py" --broker "$clients" stats | grep -q '"queued": 1'
check $? "stats are served meanwhile"

rm "$dir/fs/fill"
it_eventually room_is "room again"
[ "$(submit c)" = ok ] && [ "$(stored c)" = 1 ]
check $? "once space is freed, submits are accepted again, no restart"

dd if=/dev/zero of="$dir/fs/fill" bs=1M count=64 2>/dev/null
it_eventually room_is "database full"
"$PY" "$LLMQ_SRCDIR/proto/python/llmq_client.py" --broker "$clients" stats | grep -q '"queued": 2'
served=$?
it_stop "$broker_pid"
stopped=$?
[ $served = 0 ] && [ $stopped = 0 ]
check $? "with 0 bytes free the broker still answers and stops cleanly"
rm -f "$dir/fs/fill"
it_done
