#!/usr/bin/python3
"""A small llmq client in Python: proof that the wire is language-neutral.

Needs only pyzmq and msgpack (Debian: python3-zmq, python3-msgpack) and
follows docs/PROTOCOL.md; it shares no code with the C implementation.

As a library:

    c = Client("tcp://127.0.0.1:5555")
    ack = c.submit([{"prompt": "Once upon a time", "max_tokens": 16}], batch="b1")
    for result in c.wait(ids=ack["ids"], timeout_ms=60000):
        print(result["text"])

A chat job carries "messages" instead of "prompt" (the worker renders them
with its model's chat template):

    c.submit([{"messages": [{"role": "system", "content": "Answer briefly."},
                            {"role": "user", "content": "The capital of France?"}],
               "max_tokens": 16}])

A wait outlives its broker: killed, restarted or stopped, it is noticed by
the silence of the wait's heartbeats and the wait is sent again (on a fresh
socket) until a broker answers; each job's result is yielded once.  Other
requests on the same client between a wait's results (a status() while
iterating wait()) take none of its messages: what comes for an open wait
meanwhile is kept for it.

As a program (prints JSON on stdout; exit 1 on a broker error, printed as
{"error": {...}}):

    llmq_client.py --broker tcp://127.0.0.1:5555 submit --prompt "Hi" --max-tokens 8 --wait
    llmq_client.py submit --messages chat.json --wait   (a JSON array of {"role", "content"})
    llmq_client.py status --ids 1 2 3        llmq_client.py status --batch b1
    llmq_client.py wait --batch b1 --timeout 30
    llmq_client.py cancel --ids 4            llmq_client.py stats
    llmq_client.py raw '{"v": 1, "type": "frobnicate"}'   (any JSON body, sent as msgpack)
    llmq_client.py raw-hex c1                (raw body bytes, for malformed input)
"""

import argparse
import collections
import itertools
import json
import sys
import time

import msgpack
import zmq

PROTOCOL_VERSION = 1
MAX_IDS = 100000           # ids in one request (WIRE_MAX_IDS)
MAX_PATIENCE_MS = 30000    # the longest silence before a wait is sent again
RECONNECT_MAX_MS = 1000    # ZeroMQ's reconnects back off from 100 ms to this


class LlmqError(Exception):
    """An "error" reply from the broker (or a local timeout)."""

    def __init__(self, code, message, field=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.field = field

    def as_dict(self):
        return {"code": self.code, "field": self.field, "message": self.message}


def read_key(path):
    """The Z85 key in a file written by llmq-keygen, as bytes."""
    with open(path, "rb") as f:
        key = f.read().strip()
    if len(key) != 40:
        raise LlmqError("usage", f"{path}: not a Z85 CURVE key (40 characters)")
    return key


def client_keys(broker_key, curve_secret):
    """(broker's public, our secret, our public) from the two key files,
    refusing by name the slips the handshake would only time out on, as
    libllmq does: an llmq-keygen .secret file as the broker's key, a .public
    one as ours, our own public key as the broker's."""
    if broker_key.endswith(".secret"):
        raise LlmqError("usage", f"{broker_key}: a secret key file given as the broker's public"
                        " key (broker_key takes the broker's NAME.public from llmq-keygen)")
    if curve_secret.endswith(".public"):
        raise LlmqError("usage", f"{curve_secret}: a public key file given as this client's"
                        " secret key (curve_secret takes its own NAME.secret from llmq-keygen)")
    secret = read_key(curve_secret)
    public, server = zmq.curve_public(secret), read_key(broker_key)
    if server == public:
        raise LlmqError("usage", f"{broker_key}: this is the public key of {curve_secret},"
                        " this client's own: broker_key takes the broker's")
    return server, secret, public


class Client:
    """One DEALER connection to the broker's client endpoint."""

    def __init__(self, endpoint, timeout_ms=30000, broker_key=None, curve_secret=None,
                 heartbeat_ms=1000, dead_after_ms=5000):
        """broker_key, curve_secret: key files (llmq-keygen) for a broker that
        requires CURVE; a broker that refuses them never answers (timeout).
        heartbeat_ms, dead_after_ms: the lease of waits (docs/PROTOCOL.md,
        "wait"): a wait_alive is asked for every heartbeat_ms, and a wait
        silent for dead_after_ms is sent again; heartbeat_ms 0: no lease."""
        if heartbeat_ms and not 100 <= heartbeat_ms <= 3600000:
            raise LlmqError("usage", f"heartbeat_ms: {heartbeat_ms} is out of range (0, or 100..3600000)")
        if heartbeat_ms and dead_after_ms <= heartbeat_ms:
            raise LlmqError("usage", "dead_after_ms must exceed heartbeat_ms")
        self.endpoint = endpoint
        self.curve = None
        if broker_key or curve_secret:
            if not (broker_key and curve_secret):
                raise LlmqError("usage", "--broker-key and --curve-secret go together")
            self.curve = client_keys(broker_key, curve_secret)
        self.ctx = zmq.Context()
        self.sock = self._open()
        self.timeout_ms = timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.dead_after_ms = dead_after_ms
        self.reqs = itertools.count(1)
        # req -> messages that came for it while another request was read: kept
        # for each open wait, so that a status() between two of a wait's results
        # takes none of them away.
        self.kept = {}

    def _open(self):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
        if self.curve:
            sock.curve_serverkey, sock.curve_secretkey, sock.curve_publickey = self.curve
        sock.connect(self.endpoint)
        return sock

    def reconnect(self):
        """A fresh socket: requests still queued for a broker that is gone
        die with the old one, so that a request sent again never piles up."""
        self.sock.close()
        self.sock = self._open()

    def close(self):
        self.sock.close()
        self.ctx.term()

    # -- frames --------------------------------------------------------------------

    def send_raw(self, body_bytes):
        """Sends one body frame as is (DEALER: no envelope needed)."""
        self.sock.send(body_bytes)

    def recv(self, timeout_ms):
        """The next message (the last frame is the body), or None on timeout."""
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart()
        return msgpack.unpackb(frames[-1], raw=False)

    def send(self, msg_type, **fields):
        req = next(self.reqs)
        body = {"v": PROTOCOL_VERSION, "type": msg_type, "req": req}
        body.update({k: v for k, v in fields.items() if v is not None})
        self.send_raw(msgpack.packb(body, use_bin_type=True))
        return req

    def keep(self, req):
        """Messages for request `req` read while another request is answered
        are kept for it (until forget(req)) instead of dropped."""
        self.kept.setdefault(req, collections.deque())

    def forget(self, req):
        """No one reads request `req`'s messages any more: those kept go too."""
        self.kept.pop(req, None)

    def take(self, reqs, timeout_ms):
        """The next message for one of the requests `reqs` within timeout_ms,
        or None: first those kept for them, then from the socket, keeping
        what comes for another kept request and dropping the rest (a late
        reply to a request given up on)."""
        for req in reqs:
            if self.kept.get(req):
                return self.kept[req].popleft()
        end = time.monotonic() + timeout_ms / 1000
        while True:
            msg = self.recv(max(0, int((end - time.monotonic()) * 1000)))
            if msg is None:
                return None
            req = msg.get("req")
            if req in reqs:
                return msg
            if req in self.kept:
                self.kept[req].append(msg)

    def reply(self, req, timeout_ms=None):
        """The next message for request `req`; raises LlmqError for "error".
        What comes meanwhile for an open wait is kept for it."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        msg = self.take((req,), timeout)
        if msg is None:
            self.reconnect()
            raise LlmqError("timeout", f"no reply from the broker at {self.endpoint} within"
                            f" {timeout} ms (is it running? with CURVE, is this client's key"
                            " allowed?)")
        if msg.get("type") == "error":
            raise LlmqError(msg.get("code"), msg.get("message"), msg.get("field"))
        return msg

    def request(self, msg_type, **fields):
        return self.reply(self.send(msg_type, **fields))

    # -- requests -------------------------------------------------------------------

    def submit(self, jobs, batch=None, meta=None):
        """Submits jobs (dicts of docs/PROTOCOL.md §4 fields); returns
        {"ids": [...], "existing": [...]} once they are durable."""
        return self.request("submit", jobs=jobs, batch=batch, meta=meta)

    def status(self, ids=None, batch=None):
        return self.request("status", ids=ids, batch=batch)

    def cancel(self, ids=None, batch=None):
        return self.request("cancel", ids=ids, batch=batch)

    def stats(self):
        return self.request("stats")

    def wait(self, ids=None, batch=None, timeout_ms=0, on_broker=None):
        """Yields each result as the broker pushes it; returns at the end
        (its counts are then in self.last_wait_end: done, pending,
        timed_out).  A job that asked for logprobs has result["logprobs"]:
        per generated token a dict with "token" (its id), "logprob", "bytes"
        (bytes) and "top_logprobs" (a list of such dicts, most likely first).
        on_broker(lost, silent_s, stopping), when given, is called as the
        broker goes silent past the lease or says it is stopping (lost True)
        and as it answers again."""
        w = _Wait(self, ids, batch, timeout_ms, on_broker)
        yield from w.run()
        self.last_wait_end = {"type": "wait_end", "done": len(w.reported),
                              "pending": w.pending, "timed_out": w.timed_out}


class _Wait:
    """One wait and its lease: the C library's (proto/client.c), in Python."""

    def __init__(self, client, ids, batch, timeout_ms, on_broker):
        self.c = client
        self.ids, self.batch = ids, batch
        self.chunks = ([ids[i:i + MAX_IDS] for i in range(0, len(ids), MAX_IDS)]
                       if ids is not None else [None])
        self.end = time.monotonic() + timeout_ms / 1000
        self.deadline = self.end + client.timeout_ms / 1000
        self.on_broker = on_broker
        self.reported = set()
        self.open = {}        # req -> [chunk index, lease, heard (monotonic s), dropped]
        self.ended = 0
        self.pending = 0
        self.timed_out = False
        self.patience = client.dead_after_ms / 1000
        self.lost = False
        self.last_heard = time.monotonic()

    def send(self, i):
        sel = {"batch": self.batch}
        if self.ids is not None:
            sel = {"ids": [x for x in self.chunks[i] if x not in self.reported]}
            if not sel["ids"]:  # every one reported already
                self.ended += 1
                return
        beat = self.c.heartbeat_ms or None
        left = max(0, int((self.end - time.monotonic()) * 1000))
        req = self.c.send("wait", timeout_ms=min(left, 2**32 - 1), stream=True,
                          heartbeat_ms=beat, **sel)
        self.c.keep(req)
        self.open[req] = [i, beat is not None, time.monotonic(), False]

    def close(self, req):
        del self.open[req]
        self.c.forget(req)

    def lease_due(self):
        dues = [0 if dropped else heard + self.patience
                for _, lease, heard, dropped in self.open.values() if lease]
        return min(dues, default=self.deadline)

    def renew(self):
        """Silent past the patience: a fresh socket and the wait again."""
        now = time.monotonic()
        if not any(lease and (dropped or now - heard > self.patience)
                   for _, lease, heard, dropped in self.open.values()):
            return
        if not self.lost and self.on_broker:
            stopping = any(dropped for _, _, _, dropped in self.open.values())
            self.on_broker(True, now - self.last_heard, stopping)
        self.lost = True
        self.patience = min(self.patience * 2, max(MAX_PATIENCE_MS, self.c.dead_after_ms) / 1000)
        chunks = [v[0] for v in self.open.values()]
        for req in list(self.open):
            self.close(req)
        self.c.reconnect()
        for i in chunks:
            self.send(i)

    def heard(self, entry):
        entry[2] = self.last_heard = time.monotonic()
        self.patience = self.c.dead_after_ms / 1000
        if self.lost:
            self.lost = False
            if self.on_broker:
                self.on_broker(False, 0, False)

    def on_end(self, req, entry, msg):
        if entry[1] and msg["pending"] and not msg["timed_out"]:
            entry[3] = True  # only a stopping broker ends it so: the next one gets it
            return
        self.close(req)
        self.ended += 1
        self.pending += msg["pending"]
        self.timed_out = self.timed_out or msg["timed_out"]

    def on_error(self, req, entry, msg):
        self.close(req)
        if entry[1] and msg.get("code") == "unknown_field" and msg.get("field") == "heartbeat_ms":
            self.c.heartbeat_ms = 0  # a broker older than leases: wait as before
            self.send(entry[0])
            return
        raise LlmqError(msg.get("code"), msg.get("message"), msg.get("field"))

    def run(self):
        try:
            yield from self.events()
        finally:  # done, failed, or left by the caller: its messages are no one's now
            for req in list(self.open):
                self.close(req)

    def events(self):
        for i in range(len(self.chunks)):
            self.send(i)
        while self.ended < len(self.chunks):
            now = time.monotonic()
            if now >= self.deadline:
                raise LlmqError("timeout", "the broker did not end the wait in time")
            # Those kept for it while the caller made other requests come first.
            msg = self.c.take(self.open,
                              int(max(0, min(self.lease_due(), self.deadline) - now) * 1000) + 1)
            if msg is None:
                self.renew()
                continue
            entry = self.open[msg["req"]]
            self.heard(entry)
            kind = msg.get("type")
            if kind == "result" and msg["id"] not in self.reported:
                self.reported.add(msg["id"])
                yield msg
            elif kind == "wait_end":
                self.on_end(msg["req"], entry, msg)
            elif kind == "error":
                self.on_error(msg["req"], entry, msg)


def read_messages(path):
    """A chat job's messages from a JSON file: an array of {"role", "content"}."""
    with open(path, encoding="utf-8") as f:
        messages = json.load(f)
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and set(m) == {"role", "content"} for m in messages):
        raise ValueError(f'{path}: not a JSON array of {{"role", "content"}} objects')
    return messages


def job_from_args(a):
    job = {"max_tokens": a.max_tokens}
    if a.messages:
        job["messages"] = read_messages(a.messages)
    else:
        job["prompt"] = a.prompt
    for name in ("temperature", "top_k", "top_p", "min_p", "seed", "key", "priority",
                 "top_logprobs"):
        value = getattr(a, name)
        if value is not None:
            job[name] = value
    if a.logprobs or a.top_logprobs:
        job["logprobs"] = True
    if a.stop:
        job["stop"] = a.stop
    if a.json_schema:
        with open(a.json_schema, encoding="utf-8") as f:
            job["json_schema"] = f.read()
    if a.json_object:
        job["json_object"] = True
    return job


def json_bytes(value):
    """A token's bytes (msgpack bin) in printed JSON: their values, as OpenAI writes them."""
    if isinstance(value, bytes):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def print_json(obj):
    print(json.dumps(obj, ensure_ascii=False, sort_keys=True, default=json_bytes))


def cmd_submit(c, a):
    ack = c.submit([job_from_args(a)], batch=a.batch)
    if not a.wait:
        print_json(ack)
        return 0
    results = list(c.wait(ids=ack["ids"], timeout_ms=int(a.timeout * 1000)))
    for r in results:
        print_json(r)
    return 0 if results and all(r["state"] == "done" for r in results) else 1


def say_broker(lost, silent_s, stopping):
    if lost and stopping:
        print("llmq_client: the broker is stopping: waiting for the next one on its database",
              file=sys.stderr, flush=True)
    elif lost:
        print(f"llmq_client: no word from the broker for {silent_s:.0f} s: waiting for it to"
              " come back", file=sys.stderr, flush=True)
    else:
        print("llmq_client: the broker answers again", file=sys.stderr, flush=True)


def cmd_wait(c, a):
    for r in c.wait(ids=a.ids, batch=a.batch, timeout_ms=int(a.timeout * 1000),
                    on_broker=say_broker):
        print_json(r)
        sys.stdout.flush()
    print_json(c.last_wait_end)
    return 0


def cmd_raw(c, a):
    c.send_raw(msgpack.packb(json.loads(a.body), use_bin_type=True))
    return print_next(c, a)


def cmd_raw_hex(c, a):
    c.send_raw(bytes.fromhex(a.hex))
    return print_next(c, a)


def print_next(c, a):
    msg = c.recv(int(a.timeout * 1000))
    if msg is None:
        print_json({"error": {"code": "timeout", "message": "no reply"}})
        return 1
    print_json(msg)
    return 1 if msg.get("type") == "error" else 0


def selection(p, required=True):
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--ids", type=int, nargs="+", help="job ids")
    g.add_argument("--batch", help="batch id")


def parse_args(argv):
    p = argparse.ArgumentParser(description="llmq client (Python, zmq + msgpack)")
    p.add_argument("--broker", default="tcp://127.0.0.1:5555", help="broker client endpoint")
    p.add_argument("--broker-key", help="the broker's CURVE public key file")
    p.add_argument("--curve-secret", help="this client's CURVE secret key file")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("submit", help="submit one job")
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt")
    what.add_argument("--messages", metavar="FILE",
                      help='a chat job: a JSON array of {"role", "content"} in FILE')
    s.add_argument("--max-tokens", type=int, default=256)
    s.add_argument("--temperature", type=float)
    s.add_argument("--top-k", type=int)
    s.add_argument("--top-p", type=float)
    s.add_argument("--min-p", type=float)
    s.add_argument("--seed", type=int)
    s.add_argument("--stop", action="append", help="stop string (repeatable)")
    s.add_argument("--logprobs", action="store_true", help="each token's log-probability")
    s.add_argument("--top-logprobs", type=int, help="and the N likeliest tokens' (0..20)")
    s.add_argument("--json-schema", metavar="FILE", help="the output follows this JSON schema")
    s.add_argument("--json-object", action="store_true", help="the output is a JSON object")
    s.add_argument("--key", help="client key (idempotent resubmission)")
    s.add_argument("--priority", type=int)
    s.add_argument("--batch")
    s.add_argument("--wait", action="store_true", help="wait for the result and print it")
    s.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")

    for name in ("status", "cancel"):
        selection(sub.add_parser(name, help=f"{name} jobs"))
    w = sub.add_parser("wait", help="print results as they complete, then wait_end")
    selection(w)
    w.add_argument("--timeout", type=float, default=60.0, help="seconds")
    sub.add_parser("stats", help="broker statistics")
    r = sub.add_parser("raw", help="send a JSON body as msgpack, print the reply")
    r.add_argument("body")
    r.add_argument("--timeout", type=float, default=10.0)
    h = sub.add_parser("raw-hex", help="send raw body bytes, print the reply")
    h.add_argument("hex")
    h.add_argument("--timeout", type=float, default=10.0)
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    try:
        c = Client(a.broker, broker_key=a.broker_key, curve_secret=a.curve_secret)
    except (LlmqError, OSError) as e:
        print(f"llmq_client: {e}", file=sys.stderr)
        return 2
    try:
        if a.cmd == "submit":
            return cmd_submit(c, a)
        if a.cmd == "wait":
            return cmd_wait(c, a)
        if a.cmd == "raw":
            return cmd_raw(c, a)
        if a.cmd == "raw-hex":
            return cmd_raw_hex(c, a)
        if a.cmd == "stats":
            print_json(c.stats())
        elif a.cmd == "status":
            print_json(c.status(ids=a.ids, batch=a.batch))
        elif a.cmd == "cancel":
            print_json(c.cancel(ids=a.ids, batch=a.batch))
        return 0
    except LlmqError as e:
        print_json({"error": e.as_dict()})
        return 1
    except (ValueError, OSError) as e:  # a --messages file that cannot be read
        print(f"llmq_client: {e}", file=sys.stderr)
        return 2
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
