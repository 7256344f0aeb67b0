# bench/lib.sh: what the fleet benchmarks share (sourced by scale-gpus.sh and
# gpu-e2e.sh): read-only SQL on a broker's database, waiting for its workers,
# stopping the processes a benchmark started, writing the 7B model.  The
# caller sets `out` (the results folder, for log) and `bin` (the programs),
# and keeps the pids it starts in `pids`.

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

# model_7b FILE: the 7B-shaped Q4_K_M (MHA, 32,000-token vocabulary) the GPU
# benchmarks share, written by llmq-mkmodel ($bin) unless FILE is there.
model_7b() {
    if [ ! -s "$1" ]; then
        "$bin/llmq-mkmodel" --vocab tests/data/vocab/ggml-vocab-llama-spm.gguf --dim 4096 \
            --layers 32 --heads 32 --kv-heads 32 --ff 11008 --ctx 4096 --mix q4_k_m --seed 1 \
            -o "$1" >>"$out/log.txt" 2>&1
    fi
    log "model $(du -h "$1" | cut -f1)"
}

# bench_start NAME: the results folder, and a scratch folder ($dir) that goes
# at exit with every process in $pids.
bench_start() {
    mkdir -p "$out"
    dir=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX")
    pids=
    trap 'stop_all; rm -rf "$dir"' EXIT INT TERM
}
