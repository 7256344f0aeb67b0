# env.sh: a real llmq-broker and llmq-worker processes for shell tests.
# Sourced by tests/integration/test-*.sh (POSIX sh):
#
#   . "$LLMQ_SRCDIR/tests/integration/env.sh"
#   it_init NAME           temp dir, ipc:// endpoints, cleanup on exit
#   it_broker [FLAG]...    llmq-broker on them ($db, $clients, $workers)
#   it_worker ID [FLAG]... llmq-worker --cpu -t 1 on stories260K
#   it_wait_workers N      until the broker reports N connected workers
#   it_wait_listening      until the broker last started says it is listening
#   it_eventually CMD...   runs CMD until it succeeds (30 s at most): for
#                          what a process logs a moment after the event
#   check STATUS WHAT      "ok - WHAT" when STATUS is 0, else "FAIL - WHAT"
#                          (tests/unit/check.sh)
#   it_done                the tally; exit status 0 when nothing failed
#
# Everything lives in one temp dir (kept, with the logs shown, when a check
# failed); every process started here is killed on exit, so a failing test
# leaves nothing running.  Exits 77 (skip) outside `make check`.

if [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ] || [ -z "$LLMQ_TEST_DATA" ]; then
    echo "LLMQ_BUILDDIR, LLMQ_SRCDIR and LLMQ_TEST_DATA must be set: run through 'make check'" >&2
    exit 77
fi

. "$LLMQ_SRCDIR/tests/unit/check.sh"
PY=/usr/bin/python3
# The Python client is imported from the source tree: no __pycache__ there.
export PYTHONDONTWRITEBYTECODE=1
MODEL=$LLMQ_TEST_DATA/models/stories260K.gguf
it_pids=""

it_cleanup() {
    for pid in $it_pids; do kill -KILL "$pid" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$failed" -eq 0 ]; then
        rm -rf "$dir"
    else
        for log in "$dir"/*.log; do
            [ -f "$log" ] && { echo "---- $log"; tail -n 30 "$log"; }
        done
        echo "kept $dir"
    fi
}

it_init() {
    for exe in broker/llmq-broker worker/llmq-worker; do
        if [ ! -x "$LLMQ_BUILDDIR/$exe" ]; then
            echo "$exe is not built: skipping" >&2
            exit 77
        fi
    done
    dir=$(mktemp -d "${TMPDIR:-/tmp}/llmq-$1.XXXXXX") || exit 99
    db=$dir/llmq.db
    clients=ipc://$dir/clients
    workers=ipc://$dir/workers
    trap it_cleanup EXIT
    trap 'exit 1' INT TERM
}

it_broker() {
    broker_log_mark=$(cat "$dir/broker.log" 2>/dev/null | wc -l)
    "$LLMQ_BUILDDIR/broker/llmq-broker" --db "$db" --clients "$clients" --workers "$workers" \
        "$@" 2>>"$dir/broker.log" &
    broker_pid=$!
    it_pids="$it_pids $broker_pid"
}

# The pid of the last worker started is in $worker_pid.
it_worker() {
    id=$1
    shift
    "$LLMQ_BUILDDIR/worker/llmq-worker" --broker "$workers" -m "$MODEL" --cpu -t 1 \
        --id "$id" "$@" 2>>"$dir/$id.log" &
    worker_pid=$!
    it_pids="$it_pids $worker_pid"
}

it_wait_workers() {
    tries=0
    while [ "$tries" -lt 150 ]; do
        n=$(timeout 10 "$PY" "$LLMQ_SRCDIR/proto/python/llmq_client.py" --broker "$clients" \
            stats 2>/dev/null | "$PY" -c 'import json, sys; print(len(json.load(sys.stdin)["workers"]))' \
            2>/dev/null)
        [ "${n:-0}" -ge "$1" ] && return 0
        sleep 0.2
        tries=$((tries + 1))
    done
    return 1
}

# Until the broker started last has logged "listening" (or exited: status 1).
it_wait_listening() {
    while kill -0 "$broker_pid" 2>/dev/null; do
        tail -n +"$((broker_log_mark + 1))" "$dir/broker.log" | grep -q "listening:" && return 0
        sleep 0.05
    done
    return 1
}

it_eventually() {
    tries=0
    until "$@"; do
        tries=$((tries + 1))
        [ $tries -ge 600 ] && return 1
        sleep 0.05
    done
}

# SIGTERM, then the exit status (0 after a clean stop).
it_stop() {
    kill -TERM "$1" 2>/dev/null
    wait "$1"
}

it_done() {
    check_done
    exit $?
}
