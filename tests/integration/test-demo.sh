#!/bin/sh
# test-demo: the README's demo (tools/demo.sh) on a small batch.
#
# Pins: tools/demo.sh BUILD_DIR 24 DIR runs a broker and two workers to the
# end with status 0, and leaves in DIR a results file the user can open
# (24 JSON lines, one per job, every one done with its text), the database
# (24 done jobs), the jobs and a well-formed SVG plot; it refuses to replace
# a folder that is not a demo's, and replaces its own.

if [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_BUILDDIR and LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
command -v sqlite3 >/dev/null || { echo "skip - the demo needs the sqlite3 command" >&2; exit 77; }
. "$LLMQ_SRCDIR/tests/unit/check.sh"
PY=/usr/bin/python3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/llmq-test-demo.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT

out=$TMP/demo
timeout 300 "$LLMQ_SRCDIR/tools/demo.sh" "$LLMQ_BUILDDIR" 24 "$out" >"$TMP/demo.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && tail -n 30 "$TMP/demo.log"
check $rc "the demo runs 24 jobs on two workers and stops everything cleanly"

"$PY" - "$out" <<'EOF'
import json, os, sqlite3, sys, xml.dom.minidom
out = sys.argv[1]
lines = [json.loads(l) for l in open(os.path.join(out, "results.jsonl"))]
ids = sorted(r["id"] for r in lines)
ok = (len(lines) == 24 and ids == [f"story-{i:04d}" for i in range(1, 25)]
      and all(r["state"] == "done" and r["text"] for r in lines))
db = sqlite3.connect(f"file:{os.path.join(out, 'llmq.db')}?mode=ro", uri=True)
done = db.execute("SELECT count(*) FROM jobs WHERE batch_id = 'demo' AND state = 'done'").fetchone()[0]
jobs = sum(1 for _ in open(os.path.join(out, "jobs.jsonl")))
svg = xml.dom.minidom.parse(os.path.join(out, "demo-throughput.svg")).documentElement.tagName
print(f"results {len(lines)}, done in the database {done}, jobs {jobs}, plot <{svg}>")
sys.exit(0 if ok and done == 24 and jobs == 24 and svg == "svg" else 1)
EOF
check $? "it leaves results.jsonl (24 done jobs with their text), llmq.db, jobs.jsonl and the plot"

other=$TMP/other
mkdir "$other" && echo keep >"$other/notes.txt"
"$LLMQ_SRCDIR/tools/demo.sh" "$LLMQ_BUILDDIR" 2 "$other" >"$TMP/other.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ -f "$other/notes.txt" ] && grep -q "not a demo's" "$TMP/other.log"
check $? "it refuses to replace a folder that holds something else (status $rc)"
timeout 300 "$LLMQ_SRCDIR/tools/demo.sh" "$LLMQ_BUILDDIR" 3 "$out" >"$TMP/again.log" 2>&1 &&
    [ "$(wc -l <"$out/results.jsonl")" -eq 3 ]
check $? "run again, it replaces its own folder"
check_done
