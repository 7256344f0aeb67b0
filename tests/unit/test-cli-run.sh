#!/bin/sh
# test-cli-run: llmq-run's engine modes as a user runs them, on the CPU and
# the smallest real model.
#
# --bench: pins the output, not the speed (a test must not time anything):
# the table has one row per case with a positive tok/s, --json writes the
# same cases as JSON, and standard error has the unmeasured warm-up and, for
# each decode run, where a step's time went; --bench-pp and --bench-npl
# choose the prefill lengths and decode sequence counts (lists, checked).
# Each row is written as its case ends, so that a stopped run keeps them.
# A --json FILE that cannot be written fails before anything is measured
# (exit 1, naming the file and why), not after the whole run.
#
# --batch (tokens per forward pass) and --parallel (sequences at once) are
# two settings, each with its own default.  Pins, from the engine line
# llmq-run prints (the configuration the engine was created with): -p TEXT
# --batch 8 generates with 8-token passes of one sequence (it used to set
# the batch to --parallel's 0, which the engine refused); -p alone keeps the
# default 512; --parallel 4 --batch 8 runs 4 sequences in 8-token passes (it
# used to become a batch of 4) and prints all 4 results; --parallel 4 alone
# keeps 512; and --batch smaller than --parallel is bad usage (exit 2)
# naming both, since every running sequence takes a token of each pass.
# The KV cache: the engine line names it (q8_0 by default, f16 with
# --kv-f16); --kv-f16 with --kv-f32 is bad usage; --perplexity names the
# cache it ran, and the two caches' figures differ, by at most 0.5%.
# A --ctx past the model's context_length runs with a warning saying so; the
# model's own context gives none.
# Sampling flags take the ranges a queue job's parameters take
# (proto/job_params.h): one past them is bad usage naming the flag and the
# range; the ends themselves run.
# --logprobs N prints each step's token and N likeliest with their
# log-probabilities; --logprobs-exact the same values as hex floats, which
# read back to the plain run's figures (and is bad usage without
# --logprobs).

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
ok = ok and r["kv_cache"] == "q8_0"
ok = ok and all(len(v) == r["reps"] and v[0] == r["results"][k] for k, v in r["samples"].items())
sys.exit(0 if ok else 1)
PY
check $? "--json writes the backend, the decode order, the KV cache (q8_0) and the same five cases, all positive, each with its one sample"

grep -q "warm-up (not counted)" "$TMP/err"
check $? "an unmeasured warm-up runs first and says so"

n=$(grep -c "per decode step .* ms: issue .*, wait+copy .*, host " "$TMP/err")
[ "$n" -eq 4 ]
check $? "each decode run (tg128 and three batch sizes) reports where a step's time went ($n)"

"$RUN" -m "$MODEL" --cpu -t 2 --bench --reps 1 --json "$TMP/no-dir/bench.json" >"$TMP/out" \
    2>"$TMP/err"
[ $? -eq 1 ] && grep -q -- "--json: cannot write $TMP/no-dir/bench.json: No such file" "$TMP/err" &&
    ! grep -q "bench pp512" "$TMP/err"
check $? "--json into a folder that does not exist: exit 1 before any run, naming the file"

"$RUN" -m "$MODEL" --bench --reps 0 >"$TMP/out" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--reps" "$TMP/err"
check $? "--reps 0 is refused with exit 2, naming the flag"

# --bench-pp and --bench-npl choose the cases, as llama-bench's -p and
# llama-batched-bench's -npl do.
"$RUN" -m "$MODEL" --cpu -t 2 --bench --reps 1 --bench-pp 16,32 --bench-npl 2 \
    --json "$TMP/lists.json" >"$TMP/out" 2>"$TMP/err"
check $? "--bench --bench-pp 16,32 --bench-npl 2 exits 0"
python3 - "$TMP/lists.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if list(r["results"]) == ["pp16", "pp32", "tg128", "decode_b2"] else 1)
PY
check $? "its cases are pp16, pp32, tg128 and decode_b2, in that order, and no others"
# A row is out as its case ends, before the next case's first run (whose
# progress line goes to stderr): a run stopped part way, say by a time
# limit, keeps the rows it finished.  Both streams into one file show it.
"$RUN" -m "$MODEL" --cpu -t 2 --bench --reps 1 --bench-pp 16 --bench-npl 2 >"$TMP/both" 2>&1
[ $? -eq 0 ] && awk '/\| pp16 \|/ { row = NR } /bench tg128 run 1:/ { tg = NR }
    END { exit !(row > 0 && tg > row) }' "$TMP/both"
check $? "the pp16 row is written before tg128's first run begins"
"$RUN" -m "$MODEL" --cpu -t 2 --bench --reps 1 --bench-npl 0 >"$TMP/out" 2>"$TMP/err"
[ $? -eq 0 ] && ! grep -q decode_b "$TMP/out" && grep -q " pp512 " "$TMP/out"
check $? "--bench-npl 0 runs pp512 and tg128 alone"
for bad in "--bench-pp 5x" "--bench-pp 0" "--bench-npl 0,8" "--bench-pp 1,2,3,4,5,6,7,8,9"; do
    # shellcheck disable=SC2086
    "$RUN" -m "$MODEL" --bench $bad >"$TMP/out" 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "${bad%% *}" "$TMP/err"
    check $? "$bad is refused with exit 2, naming the flag"
done
"$RUN" -m "$MODEL" -p hi --bench-pp 8 >"$TMP/out" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "go with --bench" "$TMP/err"
check $? "--bench-pp without --bench is refused with exit 2"

printf 'Once upon a time\nThe cat\nA little girl\nOne day\n' >"$TMP/prompts"

# engine_line ARGS...: llmq-run's exit status, then its engine line.
engine_line() {
    "$RUN" -m "$MODEL" --cpu -t 1 -n 4 --seed 1 "$@" >"$TMP/out" 2>"$TMP/err"
    echo "$? $(grep -o 'engine: .*' "$TMP/err")"
}

got=$(engine_line -p "Once upon a time" --batch 8)
[ "$got" = "0 engine: 8 tokens per forward pass, 1 sequence at once, 2048 tokens of context each, a KV cache of 2048 tokens in q8_0" ] &&
    [ -s "$TMP/out" ]
check $? "-p TEXT --batch 8 generates, one sequence in 8-token passes ($got)"

got=$(engine_line -p "Once upon a time")
case "$got" in "0 engine: 512 tokens per forward pass, 1 sequence at once,"*) r=0 ;; *) r=1 ;; esac
check $r "-p TEXT alone keeps --batch's default, 512 ($got)"

got=$(engine_line --parallel 4 --batch 8 -f "$TMP/prompts")
n=$(grep -c '^--- prompt ' "$TMP/out")
case "$got" in "0 engine: 8 tokens per forward pass, 4 sequences at once,"*) r=0 ;; *) r=1 ;; esac
[ "$r" -eq 0 ] && [ "$n" -eq 4 ]
check $? "--parallel 4 --batch 8 runs 4 sequences in 8-token passes, 4 results ($got; $n)"

got=$(engine_line --parallel 4 -f "$TMP/prompts")
case "$got" in "0 engine: 512 tokens per forward pass, 4 sequences at once,"*) r=0 ;; *) r=1 ;; esac
check $r "--parallel 4 alone keeps --batch's default, 512 ($got)"

got=$(engine_line -p "Once upon a time" --kv-f16)
case "$got" in "0 engine: "*", a KV cache of 2048 tokens in f16") r=0 ;; *) r=1 ;; esac
check $r "--kv-f16 builds the f16 KV cache, the engine line says so ($got)"

got=$(engine_line -p "Once upon a time" --kv-f16 --kv-f32)
case "$got" in "2 "*) grep -q -- "--kv-f32 and --kv-f16" "$TMP/err"; r=$? ;; *) r=1 ;; esac
check $r "--kv-f16 with --kv-f32 is bad usage naming both ($(head -n 1 "$TMP/err"))"

# ppl ARGS...: --perplexity's figure, after checking its summary names the cache $kv.
ppl() {
    "$RUN" -m "$MODEL" --cpu -t 1 --perplexity "$LLMQ_TEST_DATA/reference/story.txt" -c 128 \
        "$@" 2>"$TMP/err" | sed -n 's/^PPL = //p'
    grep -q "KV cache $kv)" "$TMP/err" || echo "no 'KV cache $kv' in: $(cat "$TMP/err")" >&2
}
q8=$(kv=q8_0 ppl)
f16=$(kv=f16 ppl --kv-f16)
awk -v a="$q8" -v b="$f16" 'BEGIN { d = (a - b) / b; exit !(a != "" && b != "" && a != b &&
    d <= 0.005 && d >= -0.005) }'
check $? "--perplexity runs q8_0 by default and f16 with --kv-f16, within 0.5% ($q8 vs $f16)"

"$RUN" -m "$MODEL" --cpu --parallel 16 --batch 8 -f "$TMP/prompts" >/dev/null 2>"$TMP/err"
r=$?
[ $r -eq 2 ] && grep -q -- "--batch 8 is less than --parallel 16" "$TMP/err"
check $? "--batch below --parallel is bad usage naming both ($r: $(head -n 1 "$TMP/err"))"

# stories260K's context_length is 2048.
"$RUN" -m "$MODEL" --cpu -c 4096 -p "Once" -n 2 >/dev/null 2>"$TMP/err" &&
    grep -q "warning: a context of 4096 tokens per sequence is more than the 2048 the model" \
        "$TMP/err" &&
    "$RUN" -m "$MODEL" --cpu -c 2048 -p "Once" -n 2 >/dev/null 2>"$TMP/err" &&
    ! grep -q "warning" "$TMP/err"
check $? "-c 4096 past the model's 2048 runs with a warning saying so; -c 2048 gives none"

for bad in "--temp 150:[0, 100]" "--presence-penalty 5:[-2, 2]" "--top-k 2000000:[0, 1048576]" \
    "--top-p 0:(0, 1]"; do
    # shellcheck disable=SC2086
    "$RUN" -m "$MODEL" --cpu -p "Once" -n 2 ${bad%%:*} >/dev/null 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "${bad%% *}: " "$TMP/err" &&
        grep -qF "is out of range ${bad#*:}, as a queue job's" "$TMP/err"
    check $? "${bad%%:*} is bad usage naming the queue's range ${bad#*:}"
done
"$RUN" -m "$MODEL" --cpu -p "Once" -n 2 --temp 100 --top-p 1 --presence-penalty -2 >/dev/null 2>&1
check $? "the ends of those ranges run (--temp 100 --top-p 1 --presence-penalty -2)"


# --logprobs N: a line per generated token, its logprob (<= 0) and the N
# likeliest; --logprobs-exact writes the same values as hex floats, every
# bit (for comparing two builds' outputs with cmp): read back, they round to
# the 4-decimal figures of the plain run, token for token.
"$RUN" -m "$MODEL" --cpu -p "Once upon" -n 4 --logprobs 2 >"$TMP/lp" 2>/dev/null &&
    "$RUN" -m "$MODEL" --cpu -p "Once upon" -n 4 --logprobs 2 --logprobs-exact >"$TMP/lpx" \
        2>/dev/null &&
    python3 - "$TMP/lp" "$TMP/lpx" <<'PY'
import re, sys
def steps(path, conv):
    rows = []
    for line in open(path):
        m = re.match(r"\s*(\d+)  (.*)$", line)
        if m and "|" in line:
            vals = re.findall(r'"(?:[^"\\]|\\.)*" (\S+)', m.group(2))
            rows.append([conv(v) for v in vals])
    return rows
plain = steps(sys.argv[1], float)
exact = steps(sys.argv[2], float.fromhex)
ok = len(plain) == 4 and len(exact) == 4 and all(len(r) == 3 for r in plain + exact)
ok = ok and all(v <= 0 for r in exact for v in r)
ok = ok and all(abs(p - round(e, 4)) < 1e-9 for rp, re_ in zip(plain, exact) for p, e in zip(rp, re_))
ok = ok and "0x" in open(sys.argv[2]).read() and "0x" not in open(sys.argv[1]).read()
sys.exit(0 if ok else 1)
PY
check $? "--logprobs 2 gives 4 steps of 3 values; --logprobs-exact the same values as hex floats"
"$RUN" -m "$MODEL" --cpu -p "Once" -n 2 --logprobs-exact >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--logprobs-exact goes with --logprobs N" "$TMP/err"
check $? "--logprobs-exact without --logprobs is bad usage"

check_done
