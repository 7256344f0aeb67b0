#!/bin/sh
# test-scale: workers on other hosts over TCP with CURVE, allow-lists, batch
# invariance across workers, and model routing (issue 7), with real
# llmq-broker, llmq-worker (CPU engine) and client processes.
#
# Pins: a broker that binds a non-loopback endpoint without keys refuses to
# start (and starts with --insecure); three workers, one of them in a network
# namespace of its own reaching the broker over a veth pair, share a batch
# whose greedy results are identical to those of one worker alone; a worker
# and a client whose keys are not on the allow-lists are refused and logged,
# and the broker goes on serving the others, and a local endpoint runs CURVE
# too (a client without keys gets no answer); jobs naming a model only run on
# workers serving it; a job for a model no worker serves is refused with a
# clear error (llmq-submit --strict: the submit; without: its line alone,
# model_not_found), queued with --queue-unknown-models.
#
# The namespace part needs root and iproute2; without them it is skipped
# (the third worker then runs on this host) and the test exits 77 at the end
# if everything else passed.

. "$LLMQ_SRCDIR/tests/integration/env.sh"
KEYGEN=$LLMQ_BUILDDIR/tools/llmq-keygen
SUBMIT=$LLMQ_BUILDDIR/tools/llmq-submit
BROKER=$LLMQ_BUILDDIR/broker/llmq-broker
Q8=$LLMQ_TEST_DATA/models/tinystories-656k-q8_0.gguf

it_init scale
cd "$dir" || exit 99
ns=llmq-t$$
veth=lq$$
netns=0
cleanup_ns() {
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip link del "$veth"a 2>/dev/null
    ip netns del "$ns" 2>/dev/null
}
trap 'cleanup_ns; it_cleanup' EXIT
# A run of this test killed before its trap (kill -9) leaves its namespace and
# the veth holding 10.213.7.1/30, which would take this run's traffic: the
# ones whose process is gone are removed first.
for stale in $(ip netns list 2>/dev/null | sed -n 's/^llmq-t\([0-9][0-9]*\).*/\1/p'); do
    if [ ! -d "/proc/$stale" ]; then
        ip link del "lq${stale}a" 2>/dev/null
        ip netns del "llmq-t$stale" 2>/dev/null
    fi
done

for k in broker w1 w2 w3 intruder alice mallory; do "$KEYGEN" "$k" || exit 99; done
[ "$(stat -c %a alice.secret)" = 600 ] && [ "$(wc -c < alice.public)" = 41 ]
check $? "llmq-keygen writes NAME.public and NAME.secret (mode 0600)"
{ echo "# workers of this test"; cat w1.public w2.public; echo; cat w3.public | sed "s/$/  # w3/"; } > workers.allow
cat alice.public > clients.allow

port=$((20000 + $$ % 20000))
wport=$((port + 1))
clients=tcp://127.0.0.1:$port
"$BROKER" --db "$db" --clients "$clients" --workers "tcp://0.0.0.0:$wport" 2> open.err
[ $? -eq 1 ] && grep -q "can be reached from other hosts.*--insecure" open.err
check $? "binding 0.0.0.0 without keys: refused, saying --curve-secret or --insecure"

# The namespace: 10.213.7.1 here, 10.213.7.2 there (a private /30 of its own).
if ip netns add "$ns" 2>/dev/null &&
    ip link add "$veth"a type veth peer name "$veth"b 2>/dev/null &&
    ip link set "$veth"b netns "$ns" && ip addr add 10.213.7.1/30 dev "$veth"a &&
    ip link set "$veth"a up && ip netns exec "$ns" ip addr add 10.213.7.2/30 dev "$veth"b &&
    ip netns exec "$ns" ip link set "$veth"b up && ip netns exec "$ns" ip link set lo up; then
    netns=1
    remote="ip netns exec $ns"
    wbind=tcp://10.213.7.1:$wport
else
    echo "skip - ip netns is not permitted here: the remote worker runs on this host"
    remote=""
    wbind=tcp://0.0.0.0:$wport
fi

it_broker --workers "$wbind" --curve-secret broker.secret --allow-workers workers.allow \
    --allow-clients clients.allow --model-window-ms 60000
it_wait_listening
check $? "a broker on $wbind with CURVE and allow-lists starts"
wlocal=$wbind
it_worker w1 --broker "$wlocal" --broker-key broker.public --curve-secret w1.secret --slots 2
it_worker w2 --broker "$wlocal" --broker-key broker.public --curve-secret w2.secret --slots 2
w2_pid=$worker_pid
$remote "$LLMQ_BUILDDIR/worker/llmq-worker" --broker "$wbind" -m "$MODEL" --cpu -t 1 --id w3 \
    --slots 2 --broker-key broker.public --curve-secret w3.secret 2>> w3.log &
w3_pid=$!
it_pids="$it_pids $w3_pid"
it_worker intruder --broker "$wlocal" --broker-key broker.public --curve-secret intruder.secret

py_client() { # KEY TIMEOUT_MS ARGS...: runs python code with a client c
    key=$1 t=$2
    shift 2
    "$PY" -c "import sys; sys.path.insert(0, '$LLMQ_SRCDIR/proto/python')
import llmq_client
c = llmq_client.Client('$clients', timeout_ms=$t, broker_key='broker.public', curve_secret='$key.secret')
$*"
}
tries=0
until [ "$(py_client alice 2000 'print(len(c.stats()["workers"]))' 2>/dev/null)" = 3 ]; do
    tries=$((tries + 1))
    [ $tries -gt 100 ] && break
    sleep 0.2
done
[ $tries -le 100 ]
check $? "three workers with allowed keys connect (w3 from the namespace: $netns)"
refused_logged() { # SIDE KEY
    grep "refused a $1 connection from" broker.log | grep -qF "key $(cat "$2.public") is not allowed"
}
it_eventually refused_logged workers intruder
check $? "a worker with a key not on the allow-list is refused and logged"

py_client mallory 1500 'c.stats()' > mallory.out 2>&1
[ $? -ne 0 ] && grep -q timeout mallory.out && it_eventually refused_logged clients mallory
check $? "a client with an unknown key gets no answer (timeout), and is logged"

"$PY" -c "import sys; sys.path.insert(0, '$LLMQ_SRCDIR/proto/python')
import llmq_client
llmq_client.Client('$clients', timeout_ms=1500).stats()" > plain.out 2>&1
[ $? -ne 0 ] && grep -q timeout plain.out
check $? "with --curve-secret a local endpoint ($clients) is CURVE too: no answer without keys"

# The batch: greedy, so each text depends on its prompt only.
i=0
: > jobs.jsonl
for p in "Once upon a time" "The little dog" "Lily went to the park" "Tom had a red ball" \
    "One day, a bird" "The sun was hot" "Mom said" "A big tree" "The cat sat" \
    "Ben liked to run" "There was a boat" "The girl smiled"; do
    i=$((i + 1))
    echo "{\"id\": $i, \"prompt\": \"$p\", \"max_tokens\": 24, \"model\": \"stories260K\"}"
done >> jobs.jsonl
"$SUBMIT" -b "$clients" --broker-key broker.public --curve-secret alice.secret -i jobs.jsonl \
    -o fleet.jsonl --batch fleet --timeout 120 2> submit.err
check $? "an allowed client's batch of 12 completes"
spread=$("$PY" -c "import sqlite3; d = sqlite3.connect('file:$db?mode=ro', uri=True)
print(d.execute(\"SELECT count(DISTINCT w.name) FROM jobs j JOIN workers w ON w.id = j.worker_id WHERE j.batch_id = 'fleet' AND w.name IN ('w1','w2','w3')\").fetchone()[0])")
[ "$spread" = 3 ]
check $? "its jobs ran on all three workers ($spread)"

kill -TERM "$w2_pid" "$w3_pid" 2>/dev/null
wait "$w2_pid" "$w3_pid"
"$SUBMIT" -b "$clients" --broker-key broker.public --curve-secret alice.secret -i jobs.jsonl \
    -o alone.jsonl --batch alone --timeout 120 2>> submit.err
"$PY" - fleet.jsonl alone.jsonl <<'PYEOF'
import json, sys
a, b = ({r["id"]: r["text"] for r in map(json.loads, open(f))} for f in sys.argv[1:])
sys.exit(0 if len(a) == 12 and a == b and len(set(a.values())) > 1 else 1)
PYEOF
check $? "the same batch on one worker alone gives identical texts"

# Model routing: a second model on a fourth worker.
it_worker q8 --broker "$wlocal" --broker-key broker.public --curve-secret w2.secret -m "$Q8"
tries=0
until [ "$(py_client alice 2000 'print(sorted(w["worker"] for w in c.stats()["workers"]))' \
    2>/dev/null)" = "['q8', 'w1']" ]; do
    tries=$((tries + 1))
    [ $tries -gt 300 ] && break
    sleep 0.1
done
{ for i in 1 2 3 4; do
    echo "{\"id\": $i, \"prompt\": \"Hello\", \"max_tokens\": 4, \"model\": \"tinystories-656k-q8_0\"}"
    echo "{\"id\": $((i + 4)), \"prompt\": \"Hello\", \"max_tokens\": 4, \"model\": \"stories260K\"}"
done; } > models.jsonl
"$SUBMIT" -b "$clients" --broker-key broker.public --curve-secret alice.secret -i models.jsonl \
    -o models.out --batch models --timeout 60 2>> submit.err
"$PY" - models.out <<'PYEOF'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
ok = len(rs) == 8 and all((r["worker"] == "q8") == (r["id"] <= 4) for r in rs)
sys.exit(0 if ok else 1)
PYEOF
check $? "jobs naming a model run only on the workers serving it"

echo '{"id": 1, "prompt": "Hi", "max_tokens": 2, "model": "no-such-model"}' > unknown.jsonl
"$SUBMIT" -b "$clients" --broker-key broker.public --curve-secret alice.secret -i unknown.jsonl \
    --batch unknown --timeout 10 --strict > /dev/null 2> unknown.err
[ $? -eq 3 ] && grep -q "jobs\[0\].model.*no worker serves model 'no-such-model'" unknown.err
check $? "a job for a model no worker serves is refused, naming the field and the model"
# Without --strict that line fails alone (llmq-submit(1)): exit 1, written with its code.
"$SUBMIT" -b "$clients" --broker-key broker.public --curve-secret alice.secret -i unknown.jsonl \
    --batch unknown --timeout 10 > unknown.out 2> unknown.err
[ $? -eq 1 ] && grep -q "unknown.jsonl:1: model: .*no worker serves model 'no-such-model'" unknown.err &&
    grep -q '"code":"model_not_found","field":"model"' unknown.out
check $? "without --strict its line fails alone with model_not_found"
kill -0 "$broker_pid"
check $? "the broker kept serving through every refusal"

it_stop "$broker_pid"
it_broker --clients "ipc://$dir/c2" --workers "ipc://$dir/w2" --db "$dir/q.db" --queue-unknown-models
it_wait_listening
clients=ipc://$dir/c2
"$SUBMIT" -b "$clients" -i unknown.jsonl --no-wait > queued.out 2>> submit.err
check $? "with --queue-unknown-models the same job is queued"

check_done
status=$?
[ $status -eq 0 ] && [ $netns -eq 0 ] && exit 77
exit $status
