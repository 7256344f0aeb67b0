#!/bin/sh
# test-cli-bench: llmq-run --bench as a user runs it, on the CPU and the
# smallest real model.  Pins the output, not the speed (a test must not time
# anything): the table has one row per case with a positive tok/s, --json
# writes the same cases as JSON, and standard error has the unmeasured
# warm-up and, for each decode run, where a step's time went.

if [ -z "$LLMQ_TEST_DATA" ] || [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_TEST_DATA, LLMQ_BUILDDIR and LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
. "$LLMQ_SRCDIR/tests/unit/check.sh"

RUN="$LLMQ_BUILDDIR/tools/llmq-run"
MODEL="$LLMQ_TEST_DATA/models/stories260K.gguf"
TMP=$(mktemp -d) || exit 99
trap 'rm -rf "$TMP"' EXIT

"$RUN" -m "$MODEL" --cpu -t 2 --bench --reps 1 --json "$TMP/bench.json" >"$TMP/out" 2>"$TMP/err"
check $? "--bench --reps 1 --json FILE exits 0"

for case in pp512 tg128 decode_b1 decode_b8 decode_b64; do
    awk -F'|' -v c="$case" '$4 ~ " " c " " && $5 + 0 > 0 { found = 1 } END { exit !found }' "$TMP/out"
    check $? "the table has $case with a positive tok/s"
done

python3 - "$TMP/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = {"pp512", "tg128", "decode_b1", "decode_b8", "decode_b64"}
ok = r["backend"] == "cpu" and set(r["results"]) == want and all(v > 0 for v in r["results"].values())
ok = ok and r["decode_order"] == "prefill_first" and set(r["samples"]) == want
ok = ok and all(len(v) == r["reps"] and v[0] == r["results"][k] for k, v in r["samples"].items())
sys.exit(0 if ok else 1)
PY
check $? "--json writes the backend, the decode order and the same five cases, all positive, each with its one sample"

grep -q "warm-up (not counted)" "$TMP/err"
check $? "an unmeasured warm-up runs first and says so"

n=$(grep -c "per decode step .* ms: issue .*, wait+copy .*, host " "$TMP/err")
[ "$n" -eq 4 ]
check $? "each decode run (tg128 and three batch sizes) reports where a step's time went ($n)"

"$RUN" -m "$MODEL" --bench --reps 0 >"$TMP/out" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--reps" "$TMP/err"
check $? "--reps 0 is refused with exit 2, naming the flag"

check_done
