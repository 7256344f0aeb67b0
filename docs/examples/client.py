#!/usr/bin/python3
"""Submit a batch to llmq and print each result as it completes
(docs/CLIENTS.md walks through it).

    python3 client.py tcp://127.0.0.1:5555 my-batch "Once upon a time" "The cat sat"

Needs only pyzmq and msgpack (Debian: python3-zmq python3-msgpack; pip:
pyzmq msgpack) and speaks the wire protocol of docs/PROTOCOL.md directly.

stdout: one line per job, "INDEX<TAB>STATE<TAB>GENERATED_TOKENS<TAB>TEXT"
(newlines in the text printed as spaces); stderr: the timings.
Exit status: 0 every job done, 1 some job failed or did not finish, 2 bad
usage, 3 the broker could not be reached or refused the batch.
"""

import sys

import msgpack
import zmq

WAIT_MS = 120000  # how long to wait for the whole batch


class BrokerError(Exception):
    """An "error" reply (docs/PROTOCOL.md section 3), or no reply at all."""


class Connection:
    """A DEALER socket to the broker's client endpoint."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def close(self):
        self.sock.close()
        self.ctx.term()

    def send(self, req, msg_type, **fields):
        # Every body is one msgpack map with the protocol version, the type
        # and a request number of our choosing that the replies echo.
        body = {"v": 1, "type": msg_type, "req": req}
        body.update(fields)
        self.sock.send(msgpack.packb(body))

    def recv(self, req, timeout_ms):
        """The next message for request `req`; an "error" raises."""
        while True:
            if not self.sock.poll(timeout_ms):
                raise BrokerError(f"no reply from {self.endpoint} within {timeout_ms} ms")
            msg = msgpack.unpackb(self.sock.recv_multipart()[-1])  # the body is the last frame
            if msg.get("req") != req:
                continue  # a late reply to an earlier request
            if msg["type"] == "error":
                raise BrokerError(f"{msg['code']}: {msg['message']}")
            return msg


def submit(conn, batch, prompts):
    """Submits the prompts as one batch; returns the job ids in prompt order."""
    # A key per job: resubmitting after a lost reply returns the same jobs.
    jobs = [{"key": f"{batch}:{i}", "prompt": p, "max_tokens": 32, "temperature": 0}
            for i, p in enumerate(prompts)]
    conn.send(1, "submit", batch=batch, jobs=jobs)
    return conn.recv(1, 30000)["ids"]  # durable in the broker's database now


def wait_results(conn, ids):
    """Prints results as the broker pushes them; returns the jobs not done."""
    index = {job_id: i for i, job_id in enumerate(ids)}
    conn.send(2, "wait", ids=ids, timeout_ms=WAIT_MS)
    not_done = 0
    while True:
        msg = conn.recv(2, WAIT_MS + 10000)
        if msg["type"] == "wait_end":
            if msg["pending"]:
                print(f"{msg['pending']} jobs unfinished", file=sys.stderr)
            return not_done + msg["pending"]
        done = msg["state"] == "done"
        text = msg["text"] if done else msg.get("error", "")
        print(f"{index[msg['id']]}\t{msg['state']}\t{msg.get('gen_tokens', 0)}\t"
              f"{text.replace(chr(10), ' ')}", flush=True)
        if done:
            print(f"job {msg['id']} on {msg['worker']}: {msg['prompt_tokens']} prompt + "
                  f"{msg['gen_tokens']} generated tokens, queued {msg['queue_wait_ms']:.0f} ms,"
                  f" prefill {msg['prefill_tok_s']:.0f} tok/s,"
                  f" decode {msg['decode_tok_s']:.0f} tok/s", file=sys.stderr)
        else:
            not_done += 1


def main(argv):
    if len(argv) < 4:
        print(f"usage: {argv[0]} ENDPOINT BATCH PROMPT...", file=sys.stderr)
        return 2
    conn = Connection(argv[1])
    try:
        ids = submit(conn, argv[2], argv[3:])
        return 1 if wait_results(conn, ids) else 0
    except BrokerError as e:
        print(e, file=sys.stderr)
        return 3
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
