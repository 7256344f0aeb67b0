#!/usr/bin/python3
"""faults: a fault-injection loop, in the manner of SQLite's crash tests.

    tests/faults.py [-n ROUNDS] [-s SEED] [--jobs N] [--each-kind] [--build DIR] [--keep]

Each round starts a fresh llmq-broker and two llmq-worker processes (CPU
engine, stories260K, paced so that jobs provably run for a while), submits a
batch with llmq-submit, and once k of its results are in (k random, fewer
than the batch) injects one fault into one of the three processes:

    broker-kill9   kill -9, then a restart on the same database
    broker-stop    SIGSTOP until both workers have noticed its silence (and,
                   one round in two, llmq-submit too), then SIGCONT
    worker-kill9   kill -9 of a worker, a restart under the same id once the
                   broker has found the old one dead
    worker-stop    SIGSTOP of a worker until the broker has found it dead, then
                   SIGCONT: it comes back, its old jobs already requeued

Every wait is for an event (a line in a log, a row in SQLite), never for a
fixed time.  At the end of the round, once llmq-submit has exited by itself,
every job it had acknowledged must be done exactly once: one output line, one
result row and one `done` attempt in SQLite.  A round that hangs (120 s) is
a failure.

Round r uses the seed SEED + r: `-n 1 -s SEED+r` plays one round again.
Prints a line per round and the summary (faults injected by kind, jobs
acknowledged, lost, duplicated); exits 1 when a job was lost or duplicated
or a round failed.  Needs the programs built (default: build/ at the top of
the tree) and Python's standard library only.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

KINDS = ("broker-kill9", "broker-stop", "worker-kill9", "worker-stop")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(SRC, "tests", "data", "models", "stories260K.gguf")
# Short liveness so that a stopped worker is found dead within seconds;
# attempts to spare, since every round costs some jobs one.
BROKER_FLAGS = ["--heartbeat-ms", "200", "--worker-timeout-ms", "1500", "--max-attempts", "10"]
# No engine step sooner than this after the previous one: a job of n tokens
# runs for n times this at least, on a machine of any speed.
PACE_MS = 5
ROUND_DEADLINE_S = 120


class RoundFailed(Exception):
    pass


def until(what, cond, timeout_s=60):
    """Polls cond until it holds; RoundFailed naming what after timeout_s."""
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise RoundFailed(f"{what}: not within {timeout_s} s")
        time.sleep(0.02)


def read(path):
    """A file's text; "" while it does not exist."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def lines(path):
    """Complete lines in a file being written."""
    return read(path).count("\n")


def count(path, text):
    """How many times text occurs in the file (a log)."""
    return read(path).count(text)


class Round:
    def __init__(self, args, index, seed, kind):
        self.args, self.index, self.rng = args, index, random.Random(seed)
        self.kind = kind or self.rng.choice(KINDS)
        self.dir = tempfile.mkdtemp(prefix=f"llmq-faults-{index}-")
        self.db = os.path.join(self.dir, "llmq.db")
        self.clients = f"ipc://{self.dir}/clients"
        self.workers = f"ipc://{self.dir}/workers"
        self.procs = []
        self.batch = f"faults-{index}"
        self.n_jobs = args.jobs
        self.out = os.path.join(self.dir, "out.jsonl")
        self.submit_log = os.path.join(self.dir, "submit.log")

    # -- processes ----------------------------------------------------------------

    def spawn(self, argv, log, env=None):
        with open(os.path.join(self.dir, log), "ab") as err:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err, env=dict(os.environ, **(env or {})))
        self.procs.append(p)
        return p

    def start_broker(self):
        log = os.path.join(self.dir, "broker.log")
        before = count(log, "listening:")
        self.broker = self.spawn([os.path.join(self.args.build, "broker", "llmq-broker"),
                                  "--db", self.db, "--clients", self.clients,
                                  "--workers", self.workers] + BROKER_FLAGS, "broker.log")
        until("the broker listens", lambda: count(log, "listening:") > before
              or self.broker.poll() is not None)
        if self.broker.poll() is not None:
            raise RoundFailed(f"the broker exited with status {self.broker.returncode}")

    def start_worker(self, name, slots):
        p = self.spawn([os.path.join(self.args.build, "worker", "llmq-worker"),
                        "--broker", self.workers, "-m", MODEL, "--cpu", "-t", "1",
                        "--id", name, "--slots", str(slots)], f"{name}.log",
                       {"LLMQ_TEST_MIN_STEP_MS": str(PACE_MS)})
        until(f"worker {name} (pid {p.pid}) is registered",
              lambda: self.sql("SELECT count(*) FROM workers WHERE pid = ? AND state = 'alive'",
                               p.pid) == 1)
        return p

    def sql(self, query, *params):
        try:
            db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
            try:
                return db.execute(query, params).fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error:
            return None  # not created yet, or busy: asked again

    def session_state(self, pid):
        return self.sql("SELECT state FROM workers WHERE pid = ? ORDER BY id DESC LIMIT 1", pid)

    def cleanup(self, keep):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
        if keep:
            print(f"#   kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the faults -----------------------------------------------------------------

    def broker_kill9(self):
        self.broker.kill()
        self.broker.wait()
        if self.rng.random() < 0.5:  # a broker down long enough for the client to notice
            until("llmq-submit notices the broker is gone",
                  lambda: count(self.submit_log, "no word from the broker") > 0)
        self.start_broker()

    def broker_stop(self):
        marks = {w: count(self.worker_log(w), "nothing heard from the broker") for w in self.w}
        self.broker.send_signal(signal.SIGSTOP)
        until("both workers notice the broker's silence",
              lambda: all(count(self.worker_log(w), "nothing heard from the broker") > marks[w]
                          for w in self.w))
        if self.rng.random() < 0.5:
            until("llmq-submit notices the broker's silence",
                  lambda: count(self.submit_log, "no word from the broker") > 0)
        self.broker.send_signal(signal.SIGCONT)

    def worker_kill9(self, name):
        p = self.w[name]
        p.kill()
        p.wait()
        until(f"the broker finds worker {name} dead",
              lambda: self.session_state(p.pid) == "lost")
        self.w[name] = self.start_worker(name, self.slots)

    def worker_stop(self, name):
        p = self.w[name]
        p.send_signal(signal.SIGSTOP)
        until(f"the broker finds the stopped worker {name} dead",
              lambda: self.session_state(p.pid) == "lost")
        p.send_signal(signal.SIGCONT)
        until(f"worker {name} says hello again",
              lambda: self.session_state(p.pid) == "alive")

    def worker_log(self, name):
        return os.path.join(self.dir, f"{name}.log")

    # -- a round ----------------------------------------------------------------------

    def write_jobs(self):
        path = os.path.join(self.dir, "jobs.jsonl")
        with open(path, "w") as f:
            for i in range(self.n_jobs):
                f.write(json.dumps({"id": i, "prompt": f"Once upon a time, a fox named {i}",
                                    "max_tokens": self.rng.randint(8, 24),
                                    "ignore_eos": True}) + "\n")
        return path

    def inject(self):
        name = self.rng.choice(sorted(self.w))
        self.victim = "broker" if self.kind.startswith("broker") else name
        {"broker-kill9": self.broker_kill9, "broker-stop": self.broker_stop,
         "worker-kill9": lambda: self.worker_kill9(name),
         "worker-stop": lambda: self.worker_stop(name)}[self.kind]()

    def run(self):
        self.slots = self.rng.randint(2, 6)
        self.start_broker()
        self.w = {name: self.start_worker(name, self.slots) for name in ("w1", "w2")}
        jobs = self.write_jobs()
        submit = self.spawn([os.path.join(self.args.build, "tools", "llmq-submit"),
                             "--broker", self.clients, "-i", jobs, "-o", self.out,
                             "--batch", self.batch], "submit.log")
        k = self.rng.randint(1, self.n_jobs * 3 // 4)
        until(f"{k} results", lambda: lines(self.out) >= k or submit.poll() is not None)
        self.at = lines(self.out)
        self.in_flight = self.at < self.n_jobs
        self.inject()
        try:
            submit.wait(ROUND_DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise RoundFailed(f"llmq-submit did not finish within {ROUND_DEADLINE_S} s")
        if submit.returncode != 0:
            raise RoundFailed(f"llmq-submit exited with status {submit.returncode}")

    def acked(self):
        """The jobs llmq-submit was told are stored: "batch B: N jobs submitted"."""
        m = re.search(r"batch \S+: (\d+) jobs submitted", read(self.submit_log))
        return int(m.group(1)) if m else 0

    def account(self):
        """(acked, lost, duplicated): an acknowledged job is lost unless it is
        done in SQLite and in llmq-submit's output, duplicated when either
        has it more than once (output lines, result rows, done attempts)."""
        acked = self.acked()
        lines_of = {}
        for line in read(self.out).splitlines():
            r = json.loads(line)
            if r.get("state") == "done":
                lines_of[r["id"]] = lines_of.get(r["id"], 0) + 1
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
        stored = {key: (state, rows, dones) for key, state, rows, dones in db.execute(
            "SELECT j.client_key, j.state,"
            " (SELECT count(*) FROM results r WHERE r.job_id = j.id),"
            " (SELECT count(*) FROM attempts a WHERE a.job_id = j.id AND a.outcome = 'done')"
            " FROM jobs j WHERE j.batch_id = ?", (self.batch,))}
        db.close()
        lost = dup = 0
        for i in range(acked):
            state, rows, dones = stored.get(f"{self.batch}:{i}", (None, 0, 0))
            lost += state != "done" or rows == 0 or i not in lines_of
            dup += lines_of.get(i, 0) > 1 or rows > 1 or dones > 1
        return acked, lost, dup


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--rounds", type=int, default=200)
    p.add_argument("-s", "--seed", type=int, default=None, help="default: from the clock")
    p.add_argument("--jobs", type=int, default=40, help="jobs a batch (default 40)")
    p.add_argument("--each-kind", action="store_true",
                   help="round r injects fault kind r mod 4 (a short run covers them all)")
    p.add_argument("--build", default=os.path.join(SRC, "build"), help="the build tree")
    p.add_argument("--keep", action="store_true", help="keep every round's directory")
    a = p.parse_args(argv)
    if a.seed is None:
        a.seed = int(time.time())
    if a.rounds < 1 or a.jobs < 4:
        p.error("at least 1 round and 4 jobs")
    return a


def main(argv):
    a = parse_args(argv)
    print(f"# faults: {a.rounds} rounds, seed {a.seed}, {a.jobs} jobs a round")
    kinds = dict.fromkeys(KINDS, 0)
    totals = {"acked": 0, "lost": 0, "dup": 0, "in_flight": 0, "failed": 0}
    t0 = time.monotonic()
    for r in range(a.rounds):
        rnd = Round(a, r, a.seed + r, KINDS[r % len(KINDS)] if a.each_kind else None)
        start = time.monotonic()
        why = None
        try:
            rnd.run()
        except RoundFailed as e:
            why = str(e)
        acked, lost, dup = rnd.account() if os.path.exists(rnd.db) else (0, 0, 0)
        ok = why is None and lost == 0 and dup == 0
        kinds[rnd.kind] += hasattr(rnd, "victim")
        totals["in_flight"] += getattr(rnd, "in_flight", False)
        totals["acked"] += acked
        totals["lost"] += lost
        totals["dup"] += dup
        totals["failed"] += not ok
        print(f"{'ok' if ok else 'FAIL'} - round {r} (seed {a.seed + r}): {rnd.kind}"
              f" of {getattr(rnd, 'victim', '?')} after {getattr(rnd, 'at', '?')} of {a.jobs}"
              f" results: {acked} acked, {lost} lost, {dup} duplicated"
              f" ({time.monotonic() - start:.1f} s){': ' + why if why else ''}", flush=True)
        rnd.cleanup(a.keep or not ok)
    injected = sum(kinds.values())
    print(f"# {a.rounds} rounds in {time.monotonic() - t0:.0f} s, seed {a.seed}: {injected} faults"
          f" injected ({', '.join(f'{k} {n}' for k, n in kinds.items())}), {totals['in_flight']}"
          f" with jobs in flight; {totals['acked']} jobs acknowledged, {totals['lost']} lost,"
          f" {totals['dup']} duplicated; {totals['failed']} rounds failed")
    return 0 if totals["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
