#!/bin/sh
# test-client-python: the Python client (proto/python/llmq_client.py) with
# requests of its own between a wait's results, against a real llmq-broker
# and llmq-worker (CPU engine, stories260K).
#
# Pins: a status() on the client while its wait() is being iterated takes
# none of the wait's messages: with every other job of the batch done (so
# their results and the wait's end are already on the way to the client
# when status() reads its reply), the wait still yields each of the 6
# results, once, and ends with its counts (6 done, none pending), without
# presuming its broker lost (a lost message is not made good by the wait's
# lease sending it again: the broker answered every message).  A request
# to an endpoint with no broker times out with a message naming the
# endpoint.  Key files as llmq-keygen writes them load; the broker's .secret
# as its key, the client's .public as its secret and the client's own
# public key as the broker's are refused by name, as libllmq refuses them.

. "$LLMQ_SRCDIR/tests/integration/env.sh"

it_init client-python
it_broker
it_worker w1 --slots 2
it_wait_workers 1
check $? "a broker and one worker are up"

PYTHONPATH=$LLMQ_SRCDIR/proto/python "$PY" -B - "$clients" >"$dir/wait.log" 2>&1 <<'PYEOF'
import sys
import time

import llmq_client

c = llmq_client.Client(sys.argv[1], timeout_ms=5000)
watch = llmq_client.Client(sys.argv[1], timeout_ms=5000)
jobs = [{"prompt": f"Once upon a time {i}", "max_tokens": 6} for i in range(6)]
ids = c.submit(jobs, batch="py")["ids"]
losses = []
results = c.wait(ids=ids, timeout_ms=20000, on_broker=lambda *a: losses.append(a))
got = [next(results)["id"]]
# Every job done: the broker has pushed the other results (and the wait's
# end) to c before it answers c's status below, on the same connection.
deadline = time.monotonic() + 60
while watch.status(ids=ids)["counts"]["done"] < len(ids):
    if time.monotonic() > deadline:
        sys.exit("the jobs did not finish within 60 s")
    time.sleep(0.05)
status = c.status(ids=ids)
print("status between results:", status["counts"])
got += [r["id"] for r in results]
print("results:", got, "end:", c.last_wait_end, "broker lost:", losses)
ok = (sorted(got) == sorted(ids) and not losses and c.last_wait_end["done"] == len(ids)
      and c.last_wait_end["pending"] == 0 and status["counts"]["done"] == len(ids))
sys.exit(0 if ok else 1)
PYEOF
rc=$?
cat "$dir/wait.log"
[ "$rc" -eq 0 ]
check $? "a wait with a status() between two results yields all 6 results, once each"

PYTHONPATH=$LLMQ_SRCDIR/proto/python "$PY" -B - "ipc://$dir/nobody" >"$dir/nobody.log" 2>&1 <<'PYEOF'
import sys

import llmq_client

try:
    llmq_client.Client(sys.argv[1], timeout_ms=200).status(batch="b")
except llmq_client.LlmqError as e:
    print(e.code, e)
    sys.exit(0 if e.code == "timeout" and sys.argv[1] in str(e) else 1)
sys.exit(1)
PYEOF
rc=$?
cat "$dir/nobody.log"
[ "$rc" -eq 0 ]
check $? "with no broker at the endpoint, a request's timeout names the endpoint"

(cd "$dir" && "$LLMQ_BUILDDIR/tools/llmq-keygen" b >/dev/null && "$LLMQ_BUILDDIR/tools/llmq-keygen" a >/dev/null)
(cd "$dir" && PYTHONPATH=$LLMQ_SRCDIR/proto/python "$PY" -B - >"$dir/keys.log" 2>&1) <<'PYEOF'
import llmq_client

llmq_client.client_keys("b.public", "a.secret")
want = {("b.secret", "a.secret"): "b.secret: a secret key file given as the broker's public key",
        ("b.public", "a.public"): "a.public: a public key file given as this client's secret",
        ("a.public", "a.secret"): "a.public: this is the public key of a.secret"}
for (broker_key, secret), text in want.items():
    try:
        llmq_client.client_keys(broker_key, secret)
        raise SystemExit(f"{broker_key}, {secret}: taken")
    except llmq_client.LlmqError as e:
        print(e)
        assert text in str(e), str(e)
PYEOF
rc=$?
cat "$dir/keys.log"
[ "$rc" -eq 0 ]
check $? "the right key files load; each slip of the two is refused by name"
it_done
