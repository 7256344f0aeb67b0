#!/bin/sh
# test-examples: the client guide's examples (docs/CLIENTS.md) in C
# (libllmq), Python (pyzmq + msgpack) and Node.js (zeromq + @msgpack/msgpack)
# against a real llmq-broker and two llmq-worker processes.
#
# Pins: each example submits its prompts as a batch, prints one line per job
# with state done, and exits 0; the three languages get the same greedy
# texts for the same prompts (the wire is language-neutral and a job's
# output depends only on the job); the jobs are in the database under the
# examples' keys; running an example again with the same batch resubmits
# the same keys and prints the same results without new jobs.
#
# The Node.js packages come from the npm registry (npm ci with the
# committed lockfile, into the build tree, once); the Node.js part is
# skipped, and says so, only where node and npm are not installed.

. "$LLMQ_SRCDIR/tests/integration/env.sh"
EXAMPLES=$LLMQ_SRCDIR/docs/examples
P1="Once upon a time"
P2="The little dog ran"
P3="Lily found a red ball in the park"

it_init examples
it_broker
it_worker w1 --slots 4
it_worker w2 --slots 4
it_wait_workers 2
check $? "a broker and two workers are up"

# run_example NAME BATCH COMMAND...: stdout sorted into $dir/NAME.out.
run_example() {
    name=$1 batch=$2
    shift 2
    timeout 120 "$@" "$clients" "$batch" "$P1" "$P2" "$P3" >"$dir/$name.raw" 2>>"$dir/$name.log"
    status=$?
    sort "$dir/$name.raw" >"$dir/$name.out"
    done_lines=$(cut -f2 "$dir/$name.out" | grep -c '^done$')
    texts=$(cut -f4 "$dir/$name.out" | grep -c .)
    [ "$status" -eq 0 ] && [ "$done_lines" -eq 3 ] && [ "$texts" -eq 3 ]
}

run_example c ex-c "$LLMQ_BUILDDIR/docs/examples/client"
check $? "C example (libllmq): 3 jobs done with text, exit 0"
run_example python ex-python "$PY" "$EXAMPLES/client.py"
check $? "Python example (pyzmq + msgpack): 3 jobs done with text, exit 0"
cmp -s "$dir/c.out" "$dir/python.out"
check $? "C and Python get the same greedy texts"

if command -v node >/dev/null && command -v npm >/dev/null; then
    # npm resolves packages next to the script: run a copy beside node_modules.
    node_dir=$LLMQ_BUILDDIR/tests/integration/node-example
    mkdir -p "$node_dir"
    cp "$EXAMPLES/node/package.json" "$EXAMPLES/node/package-lock.json" "$EXAMPLES/node/client.mjs" \
        "$node_dir/"
    chmod u+w "$node_dir"/*
    ready=0
    if [ -d "$node_dir/node_modules/zeromq" ] && [ -d "$node_dir/node_modules/@msgpack/msgpack" ]; then
        ready=1
    # zeromq ships prebuilt addons in its package: no install script needed.
    elif (cd "$node_dir" && timeout 300 npm ci --ignore-scripts --no-audit --no-fund) \
        >>"$dir/npm.log" 2>&1; then
        ready=1
    fi
    [ "$ready" -eq 1 ]
    check $? "npm ci installs zeromq and @msgpack/msgpack from the lockfile"
    run_example node ex-node node "$node_dir/client.mjs"
    check $? "Node.js example (zeromq + @msgpack/msgpack): 3 jobs done with text, exit 0"
    cmp -s "$dir/c.out" "$dir/node.out"
    check $? "C and Node.js get the same greedy texts"
    languages=3
else
    echo "skip - Node.js example: node and npm are not installed"
    languages=2
fi

keyed=$("$PY" -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print(db.execute("SELECT count(*) FROM jobs WHERE client_key LIKE ? AND state = ?",
                 ("ex-%:%", "done")).fetchone()[0])' "$db")
[ "$keyed" -eq $((3 * languages)) ]
check $? "the database holds each example's 3 jobs under its keys ($keyed)"

run_example python-again ex-python "$PY" "$EXAMPLES/client.py" &&
    cmp -s "$dir/python.out" "$dir/python-again.out"
check $? "the Python example run again with the same batch prints the same results"
again=$("$PY" -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print(db.execute("SELECT count(*) FROM jobs").fetchone()[0])' "$db")
[ "$again" -eq "$keyed" ]
check $? "resubmitting the same keys made no new job"
it_done
