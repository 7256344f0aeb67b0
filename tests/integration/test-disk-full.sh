#!/bin/sh
# test-disk-full: llmq-broker on a real file system that runs out of space,
# an 80 MiB tmpfs mounted in a user and mount namespace of this test's own.
#
# Pins: with less free than --min-free-mb, a submit is refused as
# unavailable, naming the free space, and nothing of it is stored, while
# stats are served; once the space is freed, submits are accepted again
# with no restart; when another program takes the last free byte, the
# results of the jobs running are still stored (in the space the broker
# holds past its WAL's end) and the broker answers and stops cleanly.
# (test-broker-workers pins the same with --max-db-mb, and that no job
# starts without room.)
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
mkdir "$dir/fs" && mount -t tmpfs -o size=80m tmpfs "$dir/fs" || exit 99
trap 'umount "$dir/fs" 2>/dev/null; it_cleanup' EXIT
db=$dir/fs/llmq.db

client() { # python code with a client c
    "$PY" -c "import sys; sys.path.insert(0, '$LLMQ_SRCDIR/proto/python')
import llmq_client
c = llmq_client.Client('$clients', timeout_ms=5000)
$1"
}
# submit KEY: the reply's code ("ok" for submit_ok) and message.
submit() {
    client "
try:
    c.submit([{'key': '$1', 'prompt': 'x' * 1000}])
    print('ok')
except llmq_client.LlmqError as e:
    print(e.code, e.message)"
}
stored() { "$PY" -c "import sqlite3; print(sqlite3.connect('file:$db?mode=ro', uri=True).execute(\"SELECT count(*) FROM jobs WHERE client_key = '$1'\").fetchone()[0])"; }
room_is() { tail -n 1 "$dir/broker.log" | grep -q "$1"; }
# fill KIB: a file taking all but KIB of the free space.
fill() {
    avail=$(df -k --output=avail "$dir/fs" | tail -n 1)
    dd if=/dev/zero of="$dir/fs/fill" bs=1K count=$((avail - $1)) 2>/dev/null
}

it_broker --min-free-mb 8
it_wait_listening
[ "$(submit a)" = ok ]
check $? "with room, a submit is stored"

fill 5000
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

# A worker takes both jobs, then another program takes the last byte.
"$PY" - "$workers" "$dir" <<'PYEOF' > "$dir/worker.out" 2>&1
import subprocess, sys, time
import msgpack, zmq
endpoint, d = sys.argv[1:]
w = zmq.Context().socket(zmq.DEALER)
w.connect(endpoint)
send = lambda m: w.send(msgpack.packb(dict(v=1, **m)))
recv = lambda: msgpack.unpackb(w.recv()) if w.poll(5000) else {}
send({"type": "hello", "worker": "w", "host": "h", "pid": 1, "gpu_index": -1, "model": "m",
      "engine": "cpu", "slots": 2})
recv()
send({"type": "credit", "n": 2})
jobs = [recv(), recv()]
subprocess.run(["dd", "if=/dev/zero", "of=%s/fs/fill" % d, "bs=4K"], stderr=subprocess.DEVNULL)
for j in jobs:
    send({"type": "job_result", "id": j["id"], "attempt": j["attempt"], "text": "t" * 2000,
          "tokens": [1, 2], "finish": "length", "prompt_tokens": 3, "gen_tokens": 2,
          "prefill_ms": 1.0, "decode_ms": 1.0})
    send({"type": "credit", "n": 1})
time.sleep(0.2)
send({"type": "bye"})
print(" ".join(str(j.get("id")) for j in jobs))
PYEOF
[ "$(cat "$dir/worker.out")" = "1 2" ] && [ "$(df -k --output=avail "$dir/fs" | tail -n 1)" -lt 100 ] &&
    it_eventually client "import sys; sys.exit(c.status(ids=[1, 2])['counts']['done'] != 2)"
check $? "with the file system full to the last byte, the running jobs' results are stored"
client "print(c.stats()['counts'])" | grep -q "'done': 2"
served=$?
it_stop "$broker_pid"
stopped=$?
[ $served = 0 ] && [ $stopped = 0 ]
check $? "and the broker still answers and stops cleanly"
rm -f "$dir/fs/fill"
it_done
