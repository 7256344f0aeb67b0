# bench/lib.sh: what the fleet benchmarks share (sourced by scale-gpus.sh and
# gpu-e2e.sh): read-only SQL on a broker's database, waiting for its workers,
# stopping the processes a benchmark started.  The caller sets `out` (the
# results folder, for log) and keeps the pids it starts in `pids`.

log() { printf '%s %s\n' "$(date +%T)" "$*" | tee -a "$out/log.txt"; }

# Read-only queries on a database: the sqlite3 shell where there is one,
# else Python's sqlite3 module (the GPU machine has no shell).
sql() {
    if command -v sqlite3 >/dev/null 2>&1; then
        sqlite3 -readonly "$1" "$2"
    else
        python3 -c 'import sys, sqlite3
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
for row in db.execute(sys.argv[2]): print("|".join(str(v) for v in row))' "$1" "$2"
    fi
}

stop_all() {
    for p in $pids; do kill "$p" 2>/dev/null || :; done
    for p in $pids; do wait "$p" 2>/dev/null || :; done
    pids=
}

# wait_alive DB N NAME: until N workers of DB are alive (a model load takes
# seconds; 300 s is a worker that will not come).
wait_alive() {
    waited=0
    until [ "$(sql "$1" "SELECT count(*) FROM workers WHERE state = 'alive'" 2>/dev/null ||
        echo 0)" -ge "$2" ]; do
        sleep 0.5
        waited=$((waited + 1))
        [ "$waited" -lt 600 ] || { log "$3: workers not alive after 300 s"; return 1; }
    done
    log "$3: $2 worker(s) alive"
}

# utime + stime of a process, in clock ticks (fields 14 and 15 of stat;
# the command name in field 2 has no spaces here).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
