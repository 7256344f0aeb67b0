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
import itertools
import json
import sys

import msgpack
import zmq

PROTOCOL_VERSION = 1


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


class Client:
    """One DEALER connection to the broker's client endpoint."""

    def __init__(self, endpoint, timeout_ms=30000, broker_key=None, curve_secret=None):
        """broker_key, curve_secret: key files (llmq-keygen) for a broker that
        requires CURVE; a broker that refuses them never answers (timeout)."""
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if broker_key or curve_secret:
            if not (broker_key and curve_secret):
                raise LlmqError("usage", "--broker-key and --curve-secret go together")
            secret = read_key(curve_secret)
            self.sock.curve_serverkey = read_key(broker_key)
            self.sock.curve_secretkey = secret
            self.sock.curve_publickey = zmq.curve_public(secret)
        self.sock.connect(endpoint)
        self.timeout_ms = timeout_ms
        self.reqs = itertools.count(1)

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

    def reply(self, req, timeout_ms=None):
        """The next message for request `req`; raises LlmqError for "error"."""
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        while True:
            msg = self.recv(timeout)
            if msg is None:
                raise LlmqError("timeout", f"no reply within {timeout} ms")
            if msg.get("req") != req:
                continue  # a late reply to an earlier request
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

    def wait(self, ids=None, batch=None, timeout_ms=0):
        """Yields each result as the broker pushes it; returns at wait_end
        (its fields are then in self.last_wait_end).  A job that asked for
        logprobs has result["logprobs"]: per generated token a dict with
        "token" (its id), "logprob", "bytes" (bytes) and "top_logprobs" (a
        list of such dicts, most likely first)."""
        req = self.send("wait", ids=ids, batch=batch, timeout_ms=timeout_ms, stream=True)
        while True:
            msg = self.reply(req, timeout_ms + self.timeout_ms)
            if msg["type"] == "wait_end":
                self.last_wait_end = msg
                return
            yield msg


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


def cmd_wait(c, a):
    results = list(c.wait(ids=a.ids, batch=a.batch, timeout_ms=int(a.timeout * 1000)))
    for r in results:
        print_json(r)
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
