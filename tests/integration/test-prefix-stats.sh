#!/bin/sh
# test-prefix-stats: the prefix cache in the accounting, through a real
# llmq-broker, two CPU llmq-workers on stories260K and llmq-submit.
#
# Pins: a batch whose jobs share one long instruction (well over 100 of
# their tokens; distinct tails, and one line of n = 3 identical choices)
# run by a worker with its prefix cache stores, in results.
# cached_prompt_tokens, the whole 16-token blocks of the shared prompt for
# every job but the one that computed them first (that one 0), never more
# than the job's prompt tokens; the same lines run by a worker started with
# --no-prefix-cache store 0 for every job.  llmq-stats shows each batch's
# and each worker's cached tokens and prefix hit rate (cached prompt tokens
# over prompt tokens, in percent), as the results' sums give them, in JSON
# and in its text tables; the views v_batch_stats and v_worker_stats agree.

. "$LLMQ_SRCDIR/tests/integration/env.sh"
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit
RUN=$LLMQ_BUILDDIR/tools/llmq-run
STATS=$LLMQ_BUILDDIR/tools/llmq-stats

it_init prefix-stats
it_broker
it_worker cache-w --model-name cached --slots 4
it_worker plain-w --model-name plain --slots 4 --no-prefix-cache
it_wait_workers 2
check $? "a broker, a worker with its prefix cache and one without are up"

# One instruction of some 200 tokens, six tails; the same lines for each
# worker's model.  $dir/p0 and $dir/p1 hold two of the prompts, for llmq-run.
"$PY" - "$dir" <<'EOF'
import json, sys
out = sys.argv[1]
instr = ("You are a storyteller for small children. Every story is short and kind, has a "
         "little girl or a little boy in it, a dog or a cat, a garden, the sun, a friend and "
         "a happy ending. Use simple words that a child of three knows. Tell it in the past. "
         "Never make anyone sad for long, and always say what the friends learned. ") * 2
tails = ["Tell me about Lily and the ball.", "Tell me about Tom and the tree.",
         "Tell me about Sue and the cake.", "Tell me about Max and the boat.",
         "Tell me about Ben and the rain."]
for model in ("cached", "plain"):
    with open(f"{out}/{model}.jsonl", "w") as f:
        for i, tail in enumerate(tails):
            f.write(json.dumps({"id": f"t{i}", "model": model, "prompt": instr + tail,
                                "max_tokens": 8}) + "\n")
        f.write(json.dumps({"id": "n3", "model": model, "prompt": instr + "Once upon a time",
                            "max_tokens": 8, "n": 3, "temperature": 1}) + "\n")
for i in (0, 1):
    with open(f"{out}/p{i}", "w") as f:
        f.write(instr + tails[i])
EOF

# The prompts' common token prefix, as the worker tokenizes them (BOS first).
"$RUN" -m "$MODEL" --tokenize -f "$dir/p0" >"$dir/ids0" 2>>"$dir/run.log"
"$RUN" -m "$MODEL" --tokenize -f "$dir/p1" >"$dir/ids1" 2>>"$dir/run.log"
common=$("$PY" -c 'import sys
a, b = (open(p).read().split() for p in sys.argv[1:])
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(n)' "$dir/ids0" "$dir/ids1")
[ "${common:-0}" -ge 100 ]
check $? "the jobs share a prompt prefix of $common tokens"

for model in cached plain; do
    timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/$model.jsonl" -o "$dir/$model.out" \
        --batch "$model" 2>>"$dir/submit.log"
    check $? "llmq-submit runs the batch for the worker of model '$model' to completion"
done

"$STATS" --db "$db" --format json --table batches --table workers >"$dir/stats.json" \
    2>>"$dir/stats.log"
check $? "llmq-stats reads the database (JSON)"
"$STATS" --db "$db" --table batches --table workers >"$dir/stats.txt" 2>>"$dir/stats.log"
check $? "llmq-stats reads the database (text)"

"$PY" - "$db" "$common" "$dir/stats.json" "$dir/stats.txt" <<'EOF'
import json, sqlite3, sys
db_path, common, stats_json, stats_txt = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
failed = 0
def check(ok, what):
    global failed
    print(("ok - " if ok else "FAIL - ") + what)
    failed += not ok
rows = {b: db.execute("SELECT r.prompt_tokens, r.cached_prompt_tokens FROM results r"
                      " JOIN jobs j ON j.id = r.job_id WHERE j.batch_id = ? ORDER BY r.job_id",
                      (b,)).fetchall() for b in ("cached", "plain")}
check(all(len(r) == 8 for r in rows.values()),
      "each batch has its 8 results (5 lines of one job, one of 3 choices)")
shared = common // 16 * 16
cached = rows["cached"]
check(all(c <= p for p, c in cached), "no job has more cached than prompt tokens")
check(sum(c == 0 for p, c in cached) == 1 and sum(c >= shared for p, c in cached) == 7,
      f"with the prefix cache: one job computes the shared prompt, the 7 others take its"
      f" {shared} tokens of whole blocks or more from the cache ({[c for p, c in cached]})")
check(all(c == 0 for p, c in rows["plain"]),
      "with --no-prefix-cache every job stores 0 cached prompt tokens")

stats = json.load(open(stats_json))
def table(name):
    return stats[name]
def pct(c, p):
    return 100.0 * c / p if p else None
ok = True
for b in ("cached", "plain"):
    row = next(r for r in table("batches") if r["batch"] == b)
    p = sum(x[0] for x in rows[b])
    c = sum(x[1] for x in rows[b])
    view = db.execute("SELECT cached_prompt_tokens, prefix_hit_rate FROM v_batch_stats"
                      " WHERE batch_id = ?", (b,)).fetchone()
    ok = ok and row["cached_tokens"] == c and abs(row["prefix_hit_pct"] - pct(c, p)) < 0.05 \
        and view[0] == c and abs(100 * view[1] - pct(c, p)) < 1e-9
check(ok, "llmq-stats and v_batch_stats: each batch's cached tokens and prefix hit rate are"
          " the results' sums")
ok = True
for w in ("cache-w", "plain-w"):
    row = next(r for r in table("workers") if r["worker"] == w)
    p, c = db.execute("SELECT sum(r.prompt_tokens), sum(r.cached_prompt_tokens) FROM results r"
                      " JOIN workers w ON w.id = r.worker_id WHERE w.name = ?", (w,)).fetchone()
    view = db.execute("SELECT sum(cached_prompt_tokens), 1.0 * sum(cached_prompt_tokens) /"
                      " sum(prompt_tokens) FROM v_worker_stats WHERE name = ?", (w,)).fetchone()
    ok = ok and row["cached_tokens"] == c and abs(row["prefix_hit_pct"] - pct(c, p)) < 0.05 \
        and view[0] == c and abs(100 * view[1] - pct(c, p)) < 1e-9
    if w == "cache-w":
        hit = row["prefix_hit_pct"]
check(ok and hit > 50, f"llmq-stats and v_worker_stats: each worker's too ({hit:.1f}% for the"
                       " worker with its cache, 0% without)")
text = open(stats_txt).read()
check(text.count("prefix_hit_pct") == 2 and text.count("cached_tokens") == 2,
      "the text tables of batches and workers have the cached_tokens and prefix_hit_pct columns")
sys.exit(1 if failed else 0)
EOF
check $? "the stored cached prompt tokens and llmq-stats' hit rates are as the cache ran"

it_done
