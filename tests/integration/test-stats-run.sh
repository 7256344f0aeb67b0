#!/bin/sh
# test-stats-run: llmq-stats on the database of a real run: llmq-broker, two
# llmq-worker processes (CPU engine, stories260K) and batches submitted with
# llmq-submit.
#
# Pins: llmq-stats reads the database while the broker runs, also with a
# batch in flight (states add up to the batch); per batch, per worker, over
# time, per worker over time, the histogram and the job list agree with sums
# computed independently in SQL by Python's sqlite3 on the same file; CSV
# has a header and a row per batch; the SVG is well-formed XML with one line
# per worker and bars holding every done job; backups taken while the broker
# runs (.backup, VACUUM INTO) report the same; after a clean shutdown the
# workers' online time stops at their goodbye.  Figures that hold: a
# batch's or a worker's tok/s is given exactly when its span (wall time,
# busy time) is a second or more, and a tiny batch of 3 jobs has none; a
# re-run of a finished batch (the same keys) changes no figure of
# llmq-stats, and llmq-submit says it computed nothing instead of a rate.

. "$LLMQ_SRCDIR/tests/integration/env.sh"
STATS=$LLMQ_BUILDDIR/tools/llmq-stats
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit

it_init stats-run
it_broker
it_worker w1 --slots 8
w1=$worker_pid
it_worker w2 --slots 8
w2=$worker_pid
it_wait_workers 2
check $? "a broker and two workers are up"

# n jobs of batch $1 into $2: varied prompts and lengths, greedy and sampled.
jobs() {
    i=1
    while [ "$i" -le "$3" ]; do
        printf '{"id": "%s-%d", "prompt": "Once upon a time, a %s named %d", "max_tokens": %d, "temperature": %s, "seed": %d}\n' \
            "$1" "$i" "$(echo cat dog bird fish | cut -d' ' -f$((i % 4 + 1)))" "$i" \
            $((8 + i % 5 * 8)) "$((i % 2))" "$i"
        i=$((i + 1))
    done >"$2"
}

jobs run1 "$dir/run1.jsonl" 30
timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/run1.jsonl" -o "$dir/run1.out" --batch run1 \
    2>>"$dir/submit.log"
check $? "llmq-submit runs batch run1 (30 jobs) to completion"

jobs run2 "$dir/run2.jsonl" 12
timeout 30 "$SUBMIT" --broker "$clients" -i "$dir/run2.jsonl" -o /dev/null --batch run2 --no-wait \
    2>>"$dir/submit.log"
"$STATS" --db "$db" --format json -t batches >"$dir/inflight.json" 2>>"$dir/stats.log"
check $? "llmq-stats reads the database while the broker runs a batch"
"$PY" - "$dir/inflight.json" <<'EOF'
import json, sys
row = [r for r in json.load(open(sys.argv[1]))["batches"] if r["batch"] == "run2"][0]
states = sum(row[k] for k in ("done", "failed", "cancelled", "queued", "running"))
sys.exit(0 if row["jobs"] == 12 and states == 12 else 1)
EOF
check $? "in flight, batch run2's jobs per state add up to its 12 jobs"
# The same file and batch again: the keys name the jobs submitted above, so
# this only waits for them.
timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/run2.jsonl" -o "$dir/run2.out" --batch run2 \
    2>>"$dir/submit.log"
check $? "batch run2 completes"

"$STATS" --db "$db" --format json -t batches -t workers -t time -t worker-time -t histogram \
    -t jobs --bucket 1s >"$dir/all.json" 2>>"$dir/stats.log"
check $? "llmq-stats --format json with every table"

# The independent figures: plain SQL over the raw tables, by another reader.
"$PY" - "$dir/all.json" "$db" >"$dir/compare.out" <<'EOF'
import json, sqlite3, sys
s = json.load(open(sys.argv[1]))
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
q = lambda sql, *a: db.execute(sql, a).fetchone()[0]
out = []
def check(ok, what):
    out.append(("ok - " if ok else "FAIL - ") + what)
def near(a, b):
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1, abs(b))

for b in ("run1", "run2"):
    row = [r for r in s["batches"] if r["batch"] == b][0]
    res = "FROM results r JOIN jobs j ON j.id = r.job_id WHERE j.batch_id = ?"
    gen = q(f"SELECT sum(r.generated_tokens) {res}", b)
    wall = q("SELECT (max(finished_at) - min(submitted_at)) / 1000.0 FROM jobs WHERE batch_id = ?", b)
    check(row["jobs"] == q("SELECT count(*) FROM jobs WHERE batch_id = ?", b)
          and row["done"] == q("SELECT count(*) FROM jobs WHERE batch_id = ? AND state = 'done'", b)
          and row["prompt_tokens"] == q(f"SELECT sum(r.prompt_tokens) {res}", b)
          and row["gen_tokens"] == gen,
          f"batch {b}: jobs, done, prompt and generated tokens equal SQL sums ({gen} tokens)")
    check(near(row["wall_s"], wall) and
          (near(row["tok_s"], gen / wall) if wall >= 1 else row["tok_s"] is None),
          f"batch {b}: wall time {wall:.2f} s and tok/s as computed from the jobs"
          f" (withheld under 1 s: {row['tok_s']})")
    waits = sorted(r[0] for r in db.execute(f"SELECT r.queue_wait_ms {res}", (b,)))
    n = len(waits)
    check(row["wait_p50_ms"] == waits[(50 * n + 99) // 100 - 1]
          and row["wait_p95_ms"] == waits[(95 * n + 99) // 100 - 1],
          f"batch {b}: queue wait p50/p95 are the nearest ranks of {n} waits")
    check(near(row["decode_tok_s"], q(f"SELECT 1000.0 * sum(r.generated_tokens) / sum(r.decode_ms) {res}", b)),
          f"batch {b}: decode tok/s is generated tokens over decode time")

names = sorted(r["worker"] for r in s["workers"])
check(names == ["w1", "w2"], f"workers: w1 and w2 ({names})")
for w in s["workers"]:
    by = "FROM results r JOIN workers w ON w.id = r.worker_id WHERE w.name = ?"
    check(w["jobs"] == q(f"SELECT count(*) {by}", w["worker"])
          and w["gen_tokens"] == q(f"SELECT sum(r.generated_tokens) {by}", w["worker"])
          and w["jobs"] > 0,
          f"worker {w['worker']}: {w['jobs']} jobs and {w['gen_tokens']} tokens as in SQL")
    check(0 < w["busy_s"] <= w["online_s"] and 0 < w["util_pct"] <= 100
          and (near(w["tok_s"], w["gen_tokens"] / w["busy_s"]) if w["busy_s"] >= 1
               else w["tok_s"] is None),
          f"worker {w['worker']}: busy {w['busy_s']:.2f} s of {w['online_s']:.2f} s online, "
          f"tok/s over busy time (withheld under 1 s: {w['tok_s']})")

total = q("SELECT sum(generated_tokens) FROM results")
done = q("SELECT count(*) FROM jobs WHERE state = 'done'")
check(sum(r["gen_tokens"] for r in s["time"]) == total and sum(r["done"] for r in s["time"]) == done,
      f"time: 1 s buckets hold all {done} done jobs and {total} tokens")
span = q("SELECT max(finished_at) / 1000 - min(finished_at) / 1000 + 1 FROM jobs")
check(len(s["time"]) == span, f"time: one row per second from the first finish to the last ({span})")
for w in ("w1", "w2"):
    got = sum(r["gen_tokens"] for r in s["worker-time"] if r["worker"] == w)
    check(got == q("SELECT sum(generated_tokens) FROM results r JOIN workers w ON w.id = r.worker_id"
                   " WHERE w.name = ?", w),
          f"worker-time: {w}'s buckets add up to its tokens ({got})")
check(sum(r["jobs"] for r in s["histogram"]) == q("SELECT count(*) FROM results WHERE decode_tok_s IS NOT NULL"),
      "histogram: every done job with a decode time in one bin")
check(len(s["jobs"]) == q("SELECT count(*) FROM jobs"), f"jobs: one row per job ({len(s['jobs'])})")
print("\n".join(out))
EOF
cat "$dir/compare.out"
passed=$((passed + $(grep -c '^ok - ' "$dir/compare.out")))
failed=$((failed + $(grep -c '^FAIL - ' "$dir/compare.out")))
grep -q '^ok - ' "$dir/compare.out"
check $? "the SQL comparison ran"

"$STATS" --db "$db" --format csv -t batches >"$dir/batches.csv" 2>>"$dir/stats.log"
"$PY" -c 'import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
sys.exit(0 if rows[0][:3] == ["batch", "jobs", "done"] and sorted(r[0] for r in rows[1:]) == ["run1", "run2"] else 1)' \
    "$dir/batches.csv"
check $? "CSV: a header and one row per batch"

"$STATS" --db "$db" --quiet --plot "$dir/plot.svg" 2>>"$dir/stats.log"
check $? "llmq-stats --plot writes the SVG"
"$PY" - "$dir/plot.svg" "$db" <<'EOF'
import sqlite3, sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
g = {e.getAttribute("id"): e for e in d.getElementsByTagName("g")}
series = sorted({p.getAttribute("data-series") for p in g["throughput"].getElementsByTagName("polyline")})
bars = g["histogram"].getElementsByTagName("rect")
jobs = sum(int(b.getElementsByTagName("title")[0].firstChild.data.split(": ")[1].split()[0]) for b in bars)
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
done = db.execute("SELECT count(*) FROM results WHERE decode_tok_s IS NOT NULL").fetchone()[0]
sys.exit(0 if series == ["w1", "w2"] and jobs == done else 1)
EOF
check $? "the SVG is well-formed XML with a line per worker and bars holding every done job"

# A tiny batch: its tok/s, and the workers' over its jobs alone, span too
# little time to be rates (unless this machine took a second for 3 jobs of
# 4 tokens: then they are given, and must be right).
jobs tiny "$dir/tiny.jsonl" 3
sed -i 's/"max_tokens": [0-9]*/"max_tokens": 4/' "$dir/tiny.jsonl"
timeout 60 "$SUBMIT" --broker "$clients" -i "$dir/tiny.jsonl" -o /dev/null --batch tiny \
    2>"$dir/tiny.log"
check $? "batch tiny (3 jobs of 4 tokens) completes"
"$STATS" --db "$db" --batch tiny -t batches -t workers --format json >"$dir/tiny.json" \
    2>>"$dir/stats.log" &&
    "$STATS" --db "$db" --batch tiny -t batches -t workers >"$dir/tiny.txt" 2>>"$dir/stats.log"
check $? "llmq-stats reports batch tiny"
"$PY" - "$dir/tiny.json" "$dir/tiny.txt" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
spans = [(r["wall_s"], r["tok_s"]) for r in s["batches"]] + \
        [(w["busy_s"], w["tok_s"]) for w in s["workers"]]
ok = all((t is None) == (span < 1) for span, t in spans)
short = [span for span, t in spans if t is None]
ok = ok and (not short or ("short" in text and "too short a span" in text))
print(f"spans and rates: {spans}")
sys.exit(0 if ok and spans else 1)
EOF
check $? "batch tiny: each tok/s is given exactly when its span is 1 s or more, else 'short'"

# A re-run of the finished batch run1: the same file and batch, so the
# same keys; nothing is computed and no figure moves.
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
figures() { "$STATS" --db "$db" --now "$now" --format json -t batches -t workers -t time; }
figures >"$dir/before-rerun.json" 2>>"$dir/stats.log"
timeout 60 "$SUBMIT" --broker "$clients" -i "$dir/run1.jsonl" -o "$dir/rerun.out" --batch run1 \
    2>"$dir/rerun.log"
check $? "re-running batch run1 returns its results"
figures >"$dir/after-rerun.json" 2>>"$dir/stats.log"
cmp -s "$dir/before-rerun.json" "$dir/after-rerun.json" &&
    [ "$(wc -l <"$dir/rerun.out")" -eq 30 ]
check $? "the re-run changes no figure of llmq-stats and writes the 30 results again"
grep -q "30/30 jobs done (30 stored earlier), 0 failed, nothing computed" "$dir/rerun.log" &&
    ! grep -q "tok/s" "$dir/rerun.log"
check $? "llmq-submit claims no throughput for the re-run: $(tail -n 1 "$dir/rerun.log")"

# docs/OPERATIONS.md's backups, taken while the broker runs, read as the live file does.
if command -v sqlite3 >/dev/null; then
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    report() { "$STATS" --db "$1" --now "$now" --format csv -t batches -t workers -t time; }
    sqlite3 "$db" ".backup '$dir/backup.db'" && sqlite3 "$db" "VACUUM INTO '$dir/vacuum.db'" &&
        report "$db" >"$dir/live.csv" && report "$dir/backup.db" >"$dir/backup.csv" &&
        report "$dir/vacuum.db" >"$dir/vacuum.csv" &&
        cmp -s "$dir/live.csv" "$dir/backup.csv" && cmp -s "$dir/live.csv" "$dir/vacuum.csv"
    check $? "a .backup and a VACUUM INTO copy taken while the broker runs give the same report"
else
    echo "skip - the sqlite3 command is not installed: backups not tried"
fi

it_stop "$w1" && it_stop "$w2" && it_stop "$broker_pid"
check $? "workers and broker stop cleanly"
"$STATS" --db "$db" --format json -t workers >"$dir/after.json" 2>>"$dir/stats.log"
"$PY" - "$dir/after.json" "$db" <<'EOF'
import json, sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
ok = True
for w in json.load(open(sys.argv[1]))["workers"]:
    seen = db.execute("SELECT (last_seen - first_seen) / 1000.0, state FROM workers WHERE name = ?",
                      (w["worker"],)).fetchone()
    ok = ok and seen[1] == "gone" and abs(w["online_s"] - seen[0]) < 1e-6
sys.exit(0 if ok else 1)
EOF
check $? "after shutdown, online time runs from hello to goodbye"
it_done
