#!/bin/sh
# test-kv-cache: the KV cache's format through a real llmq-broker, two CPU
# llmq-workers on stories260K and llmq-submit.
#
# Pins: a worker builds the q8_0 cache by default and the f16 one with
# --kv-f16, and its start line names it with the tokens it holds; each
# worker's greedy results are, token for token, llmq-run's with the same
# cache (so the flag reaches the worker's engine), on prompts where the two
# caches' outputs part (so a worker that ignored the flag would fail).

. "$LLMQ_SRCDIR/tests/integration/env.sh"
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit
RUN=$LLMQ_BUILDDIR/tools/llmq-run

it_init kv-cache
it_broker
it_worker q8-w --model-name q8 --slots 2
it_worker f16-w --model-name f16 --slots 2 --kv-f16
it_wait_workers 2
check $? "a broker, a worker with the default cache and one with --kv-f16 are up"

it_eventually grep -q "a KV cache of [0-9]* tokens in q8_0" "$dir/q8-w.log"
check $? "the default worker's start line names its q8_0 cache ($(grep -o 'a KV cache of [^(]*' "$dir/q8-w.log"))"
it_eventually grep -q "a KV cache of [0-9]* tokens in f16" "$dir/f16-w.log"
check $? "the --kv-f16 worker's start line names its f16 cache ($(grep -o 'a KV cache of [^(]*' "$dir/f16-w.log"))"

# Prompts whose 64 greedy tokens differ between the two caches.
prompts="One day, a big bear|Tom had a red ball|Mom said"
for model in q8 f16; do
    "$PY" - "$prompts" "$model" >"$dir/$model.jsonl" <<'EOF'
import json, sys
for i, p in enumerate(sys.argv[1].split("|")):
    print(json.dumps({"id": f"p{i}", "model": sys.argv[2], "prompt": p, "max_tokens": 64,
                      "temperature": 0}))
EOF
    timeout 120 "$SUBMIT" --broker "$clients" -i "$dir/$model.jsonl" -o "$dir/$model.out" \
        --batch "$model" 2>>"$dir/submit.log"
    check $? "llmq-submit runs the batch for the $model worker to completion"
done

i=0
echo "$prompts" | tr '|' '\n' | while IFS= read -r p; do
    "$RUN" -m "$MODEL" --cpu -t 1 -p "$p" -n 64 >"$dir/run-q8-$i" 2>>"$dir/run.log"
    "$RUN" -m "$MODEL" --cpu -t 1 -p "$p" -n 64 --kv-f16 >"$dir/run-f16-$i" 2>>"$dir/run.log"
    i=$((i + 1))
done

"$PY" - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
out = {m: {r["id"]: r["text"] for r in map(json.loads, open(f"{d}/{m}.out"))} for m in ("q8", "f16")}
run = {m: [open(f"{d}/run-{m}-{i}").read().rstrip("\n") for i in range(3)] for m in ("q8", "f16")}
failed = 0
def check(ok, what):
    global failed
    print(("ok - " if ok else "FAIL - ") + what)
    failed += not ok
for m in ("q8", "f16"):
    same = sum(out[m].get(f"p{i}") == run[m][i] for i in range(3))
    check(same == 3, f"the {m} worker's results are llmq-run's with that cache ({same} of 3)")
differ = sum(run["q8"][i] != run["f16"][i] for i in range(3))
check(differ > 0, f"the two caches' outputs part on {differ} of the 3 prompts")
sys.exit(failed)
EOF
check $? "each worker runs the cache it names"
it_done
