#!/bin/sh
# test-openai-batch: an OpenAI batch file as users have it, through a real
# broker and two llmq-worker processes (CPU engine, stories260K) that answer
# to body.model "gpt-4o-mini" by --alias, with llmq-submit.  stories260K has
# no chat template of its own: the workers render chat lines' messages with
# --chat-template chatml.
#
# Pins: a 40-line file (tests/integration/gen-openai-batch.py; a UTF-8 BOM
# first) mixing chat and completions lines with logprobs, n > 1, lists of
# prompts, echo, response_format json_schema and json_object, harmless
# fields and fields given values that ask for nothing runs whole, but for
# the lines that ask for what llmq cannot do (tools, logit_bias, streaming,
# ...), each of which fails alone with its code, field and line number in
# OpenAI's batch error shape (exit status 1); every other line's response
# has its n choices in index order, the logprobs it asked for in OpenAI's
# shapes and the model that ran; every json_schema output is a whole
# document of its schema (validated with Python's jsonschema when it is
# there); the jobs are in the database routed by the alias, one per choice.
# --strict refuses the same file whole (exit 2) naming every bad line, and
# submits nothing.  tests/integration/check-openai-batch.py is the judge;
# the same generator makes the 200-line file of issue 19 (docs/OPENAI.md).

. "$LLMQ_SRCDIR/tests/integration/env.sh"
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit
GEN=$LLMQ_SRCDIR/tests/integration/gen-openai-batch.py
JUDGE=$LLMQ_SRCDIR/tests/integration/check-openai-batch.py
SCHEMAS=$LLMQ_TEST_DATA/schemas
N=40
# The judge validates with jsonschema where a Python has it.
JPY=$PY
for p in python3 /usr/bin/python3; do
    if "$p" -c "import jsonschema" 2>/dev/null; then
        JPY=$p
        break
    fi
done

# The first value of a query on the broker's database (read-only).
sql() {
    "$PY" -c 'import sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
print(db.execute(sys.argv[2]).fetchone()[0])' "$db" "$1"
}

it_init openai-batch
it_broker
it_worker w1 --slots 8 --ctx 512 --alias gpt-4o-mini --chat-template chatml
it_worker w2 --slots 8 --ctx 512 --alias gpt-4o-mini --alias gpt-4o --chat-template chatml
it_wait_workers 2
check $? "a broker and two workers answering to gpt-4o-mini are up"

"$PY" "$GEN" $N "$SCHEMAS" "$dir/batch.jsonl" "$dir/expect.json" --bom
check $? "gen-openai-batch.py writes $N lines"
bad=$("$PY" -c 'import json, sys; print(sum(1 for e in json.load(open(sys.argv[1]))["lines"] if e["fail"]))' \
    "$dir/expect.json")

timeout 60 "$SUBMIT" --broker "$clients" -i "$dir/batch.jsonl" -o "$dir/strict.jsonl" --batch oa \
    --strict 2>"$dir/strict.err"
st=$?
named=$(grep -c 'batch.jsonl:[0-9]*: .*(unsupported_\(parameter\|value\))' "$dir/strict.err")
jobs=$(sql "SELECT count(*) FROM jobs WHERE batch_id = 'oa'")
[ "$st" -eq 2 ] && [ "$named" -eq "$bad" ] && [ "${jobs:-0}" -eq 0 ] && [ ! -s "$dir/strict.jsonl" ]
check $? "--strict refuses the file whole: exit 2 ($st), its $bad bad lines named ($named), nothing submitted"

timeout 240 "$SUBMIT" --broker "$clients" -i "$dir/batch.jsonl" -o "$dir/results.jsonl" --batch oa \
    2>"$dir/submit.log"
st=$?
[ "$st" -eq 1 ] && grep -q "$bad of $N lines are bad and fail alone; the others run" "$dir/submit.log"
check $? "without --strict the file runs, its $bad bad lines failing alone (exit $st)"

"$JPY" "$JUDGE" "$dir/batch.jsonl" "$dir/expect.json" "$dir/results.jsonl" "$SCHEMAS" \
    stories260K >"$dir/judge.out" 2>&1
st=$?
grep -e '^ok - ' -e '^FAIL - ' "$dir/judge.out"
tail -n 1 "$dir/judge.out"
check $st "the judge finds every line as it should be"

choices=$("$PY" -c 'import json, sys; print(sum(e["choices"] for e in json.load(open(sys.argv[1]))["lines"] if not e["fail"]))' \
    "$dir/expect.json")
got=$(sql "SELECT count(*) FROM jobs WHERE batch_id = 'oa' AND state = 'done'")
routed=$(sql "SELECT count(*) FROM jobs j JOIN workers w ON w.id = j.worker_id
    WHERE j.batch_id = 'oa' AND j.model = 'gpt-4o-mini' AND w.model = 'stories260K'")
[ "$got" -eq "$choices" ] && [ "$routed" -gt 0 ]
check $? "the database holds one done job per choice ($got of $choices), routed by the alias ($routed)"

it_done
