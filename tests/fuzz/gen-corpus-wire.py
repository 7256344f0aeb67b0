#!/usr/bin/python3
"""Write the seed corpus and dictionary of fuzz-wire.

Seeds (tests/fuzz/corpus-wire/): one valid body per message type of
docs/PROTOCOL.md, with every optional field set somewhere, so the fuzzer
starts past the header checks of every schema.  Dictionary
(tests/fuzz/wire.dict): every type name, field name and enum value as a
msgpack str, so mutations can form new keys.
Run from the top of the tree with Debian's python3-msgpack:
/usr/bin/python3 tests/fuzz/gen-corpus-wire.py
"""
import os
import struct

import msgpack

OUT = "tests/fuzz/corpus-wire"
DICT = "tests/fuzz/wire.dict"

SAMPLING = {"max_tokens": 16, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05,
            "repeat_penalty": 1.1, "repeat_last_n": -1, "presence_penalty": 0.5,
            "frequency_penalty": -0.5, "seed": 2**64 - 1, "ignore_eos": True, "stop": ["\n", "end"],
            "logprobs": True, "top_logprobs": 2}


def logprobs(tokens):
    """A logprobs entry per token: a split UTF-8 character's byte, and alternatives."""
    return [{"token": t, "logprob": -0.5, "bytes": b"\xe2",
             "top_logprobs": [{"token": t, "logprob": -0.5, "bytes": b"\xe2"},
                              {"token": 9, "logprob": -9999.0, "bytes": b""}]} for t in tokens]

RESULT = {"id": 9, "state": "done", "attempt": 2, "key": "k", "batch": "b", "text": "a cat",
          "tokens": [1, 2], "logprobs": logprobs([1, 2]), "finish": "length", "prompt_tokens": 3,
          "gen_tokens": 2,
          "queue_wait_ms": 0.5, "prefill_ms": 1.0, "prefill_tok_s": 3000.0, "decode_ms": 2.0,
          "decode_tok_s": 1000.0, "total_ms": 4.0, "worker": "w", "model": "m"}
COUNTS = {"queued": 1, "running": 2, "done": 3, "failed": 0, "cancelled": 1}

MESSAGES = {
    "submit": {"req": 1, "batch": "b", "meta": "{}", "jobs": [
        dict({"key": "k1", "prompt": "Once upon a time", "priority": 5, "model": "m"}, **SAMPLING),
        {"tokens": [1, 2, 3], "json_schema": '{"type": "object", "properties": {}}'},
        {"prompt": "{", "json_object": True},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Hi <|im_start|>"}]}]},
    "status": {"req": 2, "ids": [1, 2]},
    "wait": {"req": 3, "batch": "b", "timeout_ms": 1000, "stream": True, "heartbeat_ms": 1000},
    "cancel": {"req": 4, "ids": [7]},
    "stats": {"req": 5},
    "submit_ok": {"req": 1, "ids": [1, 2], "existing": [False, True]},
    "status_ok": {"req": 2, "jobs": [{"id": 1, "state": "running", "attempts": 1, "worker": "w"}],
                  "counts": COUNTS},
    "cancel_ok": {"req": 4, "jobs": [{"id": 7, "state": "cancelled"}], "counts": COUNTS},
    "result": dict({"req": 3}, **RESULT),
    "wait_alive": {"req": 3},
    "wait_end": {"req": 3, "done": 1, "pending": 1, "timed_out": True, "results": [
        RESULT, {"id": 10, "state": "failed", "error": "boom"}]},
    "stats_ok": {"req": 5, "counts": COUNTS, "workers": [{
        "worker": "h:gpu0", "host": "h", "gpu_index": 0, "gpu_name": "GPU", "engine": "cuda",
        "slots": 8, "busy": 1, "jobs_done": 5, "tokens_done": 500}]},
    "error": {"req": 6, "code": "bad_value", "field": "jobs[0].temperature",
              "message": "jobs[0].temperature: NaN is not allowed"},
    "hello": {"worker": "h:cpu", "host": "h", "pid": 42, "gpu_index": -1, "gpu_name": "none",
              "gpu_uuid": "u", "model": "m", "aliases": ["gpt-4o-mini"], "model_hash": "abc",
              "engine": "cpu", "slots": 4,
              "n_ctx": 512},
    "welcome": {"heartbeat_ms": 1000, "dead_after_ms": 5000},
    "credit": {"n": 4},
    "job": dict({"id": 1, "attempt": 1, "prompt": "Hello", "model": "m"}, **SAMPLING),
    "job-chat": {"id": 2, "attempt": 1, "messages": [{"role": "user", "content": "Hello"}]},
    "job_result": {"id": 1, "attempt": 1, "text": "x", "tokens": [5], "logprobs": logprobs([5]),
                   "finish": "stop", "prompt_tokens": 2, "cached_prompt_tokens": 1,
                   "gen_tokens": 1, "prefill_ms": 1.5,
                   "decode_ms": 0.5},
    "job_failure": {"id": 1, "attempt": 1, "reason": "cancelled", "retryable": False},
    "job_cancel": {"id": 1},
    "shutdown": {"grace_ms": 1000},
    "heartbeat": {},
    "bye": {},
}


def body(msg_type, fields):
    return msgpack.packb(dict({"v": 1, "type": msg_type}, **fields), use_bin_type=True)


def dict_words():
    words = {name.split("-")[0] for name in MESSAGES} | {"v", "type", "req"}
    for fields in MESSAGES.values():
        words |= set(fields)
    words |= set(SAMPLING) | set(RESULT) | set(COUNTS)
    words |= {"queued", "running", "done", "failed", "cancelled", "stop", "length", "context",
              "prompt", "tokens", "key", "priority", "model", "attempts", "worker", "error",
              "bad_value", "malformed", "unknown_job", "queue_full", "unknown_worker", "token",
              "logprob", "bytes", "top_logprobs", "messages", "role", "content"}
    return sorted(words)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, fields in MESSAGES.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(body(name.split("-")[0], fields))
    # a wait for a REQ client: no stream, so no heartbeats
    with open(os.path.join(OUT, "wait-nostream"), "wb") as f:
        f.write(body("wait", {"req": 3, "batch": "b", "timeout_ms": 1000, "stream": False}))
    # a float32, which Python's packer never chooses by itself
    with open(os.path.join(OUT, "submit-float32"), "wb") as f:
        f.write(b"\x83\xa1v\x01\xa4type\xa6submit\xa4jobs\x91\x82\xa6prompt\xa1a"
                b"\xabtemperature\xca" + struct.pack(">f", 0.5))
    with open(DICT, "w") as f:
        f.write("# msgpack str forms of llmq wire names, for fuzz-wire (generated)\n")
        for w in dict_words():
            raw = msgpack.packb(w, use_bin_type=True)
            f.write('"' + "".join("\\x%02x" % c for c in raw) + '"\n')


if __name__ == "__main__":
    main()
