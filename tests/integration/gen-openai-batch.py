#!/usr/bin/env python3
"""Write an OpenAI batch file as users have them, and what llmq must make of it.

    gen-openai-batch.py N SCHEMAS_DIR BATCH.jsonl EXPECT.json [--bom]

N lines mixing /v1/chat/completions and /v1/completions requests: plain
ones, logprobs (chat's true + top_logprobs, completions' number), n > 1,
lists of prompts, echo, stop strings, response_format json_schema (the
schemas of SCHEMAS_DIR, one per line in turn) and json_object, the fields
OpenAI's clients send that change nothing (user, store, metadata,
service_tier, ...), fields given values that ask for nothing (tools [],
tool_choice "none", stream false, logit_bias {}), body.model "gpt-4o-mini"
on most lines (a worker's alias) and none on some.  One line in ten asks
for what llmq cannot do (tools with a function, logit_bias, streaming,
audio, best_of, suffix, a /v1/embeddings url): each must fail alone, with
the code and field EXPECT.json gives it.

EXPECT.json: {"lines": [{"custom_id", "line", "fail": [code, param] or null,
"choices", "chat", "logprobs", "schema", "json_object", "echo"}, ...]}.
The file is the same for the same N (a fixed random seed).
"""
import glob
import json
import os
import random
import sys

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park",
           "One day, a big bear", "Tom had a red ball", "The sun was hot and", "Mom said",
           "There was a tiny bird", "Sam found a box", "The cat ran"]
MODEL = "gpt-4o-mini"
SCHEMA_TOKENS = 460  # the longest document of any test schema fits (test-structured-outputs)

# (extra body fields, code, param) of requests llmq cannot honour.
REFUSED = [
    ({"tools": [{"type": "function", "function": {"name": "get_weather",
                                                  "parameters": {"type": "object"}}}]},
     "unsupported_parameter", "body.tools"),
    ({"logit_bias": {"50256": -100}}, "unsupported_parameter", "body.logit_bias"),
    ({"stream": True}, "unsupported_value", "body.stream"),
    ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]},
     "unsupported_parameter", "body.audio"),
    ({"reasoning_effort": "high"}, "unsupported_value", "body.reasoning_effort"),
]
REFUSED_COMPLETIONS = [
    ({"best_of": 3}, "unsupported_value", "body.best_of"),
    ({"suffix": " The end."}, "unsupported_parameter", "body.suffix"),
]


def chat(content, system=None):
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": content}]


def line(i, rng, schemas):
    """(request, expectation) of line i."""
    cid = "req-%04d" % i
    prompt = PROMPTS[i % len(PROMPTS)]
    kind = i % 10
    exp = {"custom_id": cid, "line": i + 1, "fail": None, "choices": 1, "chat": True,
           "logprobs": None, "schema": None, "json_object": False, "echo": None}
    body = {"model": MODEL} if i % 7 else {}
    url = "/v1/chat/completions"
    if kind == 0:
        body.update(messages=chat(prompt, "You tell short stories."), max_tokens=24,
                    temperature=0.7, user="user-%d" % i, store=False,
                    metadata={"run": "nightly"}, service_tier="auto")
    elif kind == 1:
        body.update(messages=chat(prompt), max_completion_tokens=16, logprobs=True,
                    top_logprobs=3, seed=i)
        exp["logprobs"] = "chat"
    elif kind == 2:
        name = schemas[(i // 10) % len(schemas)]
        schema = json.load(open(name))
        body.update(messages=chat("Describe it as JSON: " + prompt), max_completion_tokens=SCHEMA_TOKENS,
                    response_format={"type": "json_schema", "json_schema": {
                        "name": os.path.basename(name)[:-5].replace("-", "_"), "strict": True,
                        "schema": schema}})
        exp["schema"] = os.path.basename(name)
    elif kind == 3:
        body.update(messages=chat(prompt), n=3, max_tokens=16, seed=1000 + i, top_p=0.9)
        exp["choices"] = 3
    elif kind == 4:
        url = "/v1/completions"
        body.update(prompt=prompt, max_tokens=12, logprobs=2, temperature=0)
        exp.update(chat=False, logprobs="legacy")
    elif kind == 5:
        url = "/v1/completions"
        pair = [prompt, PROMPTS[(i + 3) % len(PROMPTS)]]
        body.update(prompt=pair, n=2, max_tokens=8, echo=True, stop=["\n"])
        exp.update(chat=False, choices=4, echo=pair)
    elif kind == 6:
        body.update(messages=chat("Answer in JSON: " + prompt), max_tokens=12, n=2,
                    response_format={"type": "json_object"})
        exp.update(choices=2, json_object=True)
    elif kind == 7:
        url = "/v1/completions"
        name = schemas[(i // 10 + 7) % len(schemas)]
        schema = json.load(open(name))
        body.update(prompt=prompt, max_tokens=SCHEMA_TOKENS, n=2,
                    response_format={"type": "json_schema",
                                     "json_schema": {"name": "doc", "schema": schema}})
        exp.update(chat=False, choices=2, schema=os.path.basename(name))
    elif kind == 8:
        body.update(messages=chat(prompt), max_tokens=32, stop=["."], tools=[],
                    tool_choice="none", stream=False, logit_bias={}, modalities=["text"],
                    parallel_tool_calls=True, prompt_cache_key="k%d" % (i % 3),
                    frequency_penalty=0.5, presence_penalty=0.25)
    else:
        if (i // 10) % 3 == 2:
            url = "/v1/completions"
            extra, code, param = REFUSED_COMPLETIONS[(i // 30) % len(REFUSED_COMPLETIONS)]
            body.update(prompt=prompt, max_tokens=8, **extra)
        elif (i // 10) % 7 == 6:
            url, code, param = "/v1/embeddings", "unsupported_value", "url"
            body = {"model": "text-embedding-3-small", "input": prompt}
        else:
            extra, code, param = REFUSED[(i // 10) % len(REFUSED)]
            body.update(messages=chat(prompt), max_tokens=8, **extra)
        exp["fail"] = [code, param]
    if rng.random() < 0.5 and "seed" not in body and body.get("messages"):
        body["seed"] = rng.randrange(1 << 31)
    return {"custom_id": cid, "method": "POST", "url": url, "body": body}, exp


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    n, schema_dir, out, expect = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    schemas = sorted(glob.glob(os.path.join(schema_dir, "*.json")))
    rng = random.Random(19)
    lines = [line(i, rng, schemas) for i in range(n)]
    with open(out, "w", encoding="utf-8") as f:
        if sys.argv[5:] == ["--bom"]:
            f.write("\ufeff")
        for req, _ in lines:
            f.write(json.dumps(req) + "\n")
    with open(expect, "w", encoding="utf-8") as f:
        json.dump({"lines": [e for _, e in lines]}, f, indent=1)


if __name__ == "__main__":
    main()
