#!/bin/sh
# test-db-reader: the broker starts while another process reads its database.
#
# Pins: a broker that opens its database while another process holds a read
# lock on it (llmq-stats, an operator's sqlite3, a test polling the tables)
# waits for the lock (SQLite's busy timeout, set before the first statement)
# instead of exiting with "database is locked"; once the reader lets go, it
# serves.  The database is in rollback-journal mode (as a new file is, or one
# a tool switched back), so the broker's switch to WAL needs the exclusive
# lock the reader's shared one blocks.
#
# Event-driven, never timed: the reader lets go only once it sees the broker
# with the file open and asleep in a sleep system call (SQLite's busy handler)
# in /proc; a broker without the busy timeout exits first, and the check
# fails, on a fast machine or a slow one.

. "$LLMQ_SRCDIR/tests/integration/env.sh"

it_init db-reader
it_broker
it_wait_listening
check $? "a first broker creates the database"
it_stop "$broker_pid"
check $? "and stops cleanly"

"$PY" - "$db" <<'EOF2'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("PRAGMA journal_mode = DELETE").fetchone()[0])
EOF2
check $? "the database is switched back to a rollback journal"

broker_log_mark=$(wc -l <"$dir/broker.log")
"$PY" - "$db" "$LLMQ_BUILDDIR/broker/llmq-broker" "$clients" "$workers" "$dir/broker.log" \
    >"$dir/reader.out" 2>"$dir/reader.err" <<'EOF2'
import os, platform, sqlite3, subprocess, sys, time
db, exe, clients, workers, log = sys.argv[1:6]
reader = sqlite3.connect(db, isolation_level=None)
reader.execute("BEGIN")
reader.execute("SELECT count(*) FROM jobs").fetchone()  # a shared lock until COMMIT
broker = subprocess.Popen([exe, "--db", db, "--clients", clients, "--workers", workers],
                          stderr=open(log, "a"))
print(broker.pid, flush=True)
# nanosleep and clock_nanosleep, as /proc/PID/syscall numbers them
sleeps = {"x86_64": {"35", "230"}, "aarch64": {"101", "115"}}.get(platform.machine())
if sleeps is None:
    print("skip: no sleep syscall numbers for", platform.machine(), flush=True)
    sys.exit(77)
def has_db_open():
    try:
        return any(os.readlink(f"/proc/{broker.pid}/fd/{fd}") == os.path.realpath(db)
                   for fd in os.listdir(f"/proc/{broker.pid}/fd"))
    except OSError:
        return False
def asleep():
    try:
        with open(f"/proc/{broker.pid}/syscall") as f:
            return f.read().split()[0] in sleeps
    except (OSError, IndexError):
        return False
while True:
    if broker.poll() is not None:
        print("exited", broker.returncode, flush=True)
        sys.exit(1)
    if has_db_open() and asleep():
        break
    time.sleep(0.001)  # a poll of the broker's state, not a wait for time
reader.execute("COMMIT")
print("released", flush=True)
EOF2
status=$?
broker_pid=$(head -n 1 "$dir/reader.out")
[ -n "$broker_pid" ] && it_pids="$it_pids $broker_pid"
[ "$status" -eq 77 ] && { echo "skipped: $(tail -n 1 "$dir/reader.out")"; exit 77; }
check $status "the broker waits for the reader's lock ($(tail -n 1 "$dir/reader.out"))"
it_wait_listening
check $? "and serves once the reader lets go"
! grep -q "database is locked" "$dir/broker.log"
check $? "no 'database is locked' in its log"
it_done
