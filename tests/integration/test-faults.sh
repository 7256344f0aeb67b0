#!/bin/sh
# test-faults: a short run of the fault-injection loop (tests/faults.py):
# four rounds, one of each fault (kill -9 of the broker, SIGSTOP of the
# broker past the workers' liveness limit, kill -9 of a worker, SIGSTOP of a
# worker until the broker finds it dead), each landing while jobs of the
# round's batch run, each process restarted or resumed.
#
# Pins: every job llmq-submit was told is stored is done exactly once, in
# SQLite (one result row, one done attempt) and in llmq-submit's output,
# which exits 0 by itself.  The long run is the same script with more
# rounds (docs/OPERATIONS.md, "Recovery").

. "$LLMQ_SRCDIR/tests/unit/check.sh"
if [ -z "$LLMQ_BUILDDIR" ] || [ ! -x "$LLMQ_BUILDDIR/worker/llmq-worker" ]; then
    echo "run through 'make check' with the programs built" >&2
    exit 77
fi
/usr/bin/python3 "$LLMQ_SRCDIR/tests/faults.py" --rounds 4 --each-kind --seed 1 \
    --build "$LLMQ_BUILDDIR"
check $? "4 rounds, one fault of each kind: no acknowledged job lost or duplicated"
check_done
