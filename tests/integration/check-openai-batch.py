#!/usr/bin/env python3
"""Judge llmq-submit's output for a file of gen-openai-batch.py.

    check-openai-batch.py BATCH.jsonl EXPECT.json RESULTS.jsonl SCHEMAS_DIR MODEL_RAN

Prints "ok - ..." / "FAIL - ..." lines (tests/unit/check.sh's format), then
a summary line "lines N, failed F (code param: count, ...), choices C,
schema outputs S valid V"; exits 1 on a failure.  With Python's jsonschema
the schema outputs are validated against their schema; without it they are
only parsed (said so).
"""
import collections
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    jsonschema = None

failed = 0


def check(ok, what):
    global failed
    print(("ok - " if ok else "FAIL - ") + what, flush=True)
    failed += not ok


def text_of(req_chat, choice):
    return choice["message"]["content"] if req_chat else choice["text"]


def check_logprobs(kind, choice, e):
    lp = choice.get("logprobs")
    if kind == "chat":
        content = (lp or {}).get("content")
        return (isinstance(content, list) and len(content) > 0 and
                all({"token", "logprob", "bytes", "top_logprobs"} <= set(t) and
                    len(t["top_logprobs"]) == 3 and t["logprob"] <= 0 for t in content))
    if kind == "legacy":
        return (lp is not None and len(lp["tokens"]) == len(lp["token_logprobs"]) ==
                len(lp["top_logprobs"]) > 0 and all(len(t) <= 2 for t in lp["top_logprobs"]))
    return lp is None


def main():
    batch, expect, results, schema_dir, model_ran = sys.argv[1:6]
    exp = {e["custom_id"]: e for e in json.load(open(expect))["lines"]}
    reqs = {}
    with open(batch, encoding="utf-8-sig") as f:
        for raw in f:
            r = json.loads(raw)
            reqs[r["custom_id"]] = r
    out = {}
    dup = 0
    for raw in open(results, encoding="utf-8"):
        r = json.loads(raw)
        dup += r["custom_id"] in out
        out[r["custom_id"]] = r
    check(dup == 0 and set(out) == set(exp),
          "one output line per input line (%d of %d, %d twice)" % (len(out), len(exp), dup))
    codes = collections.Counter()
    wrong_fail, wrong_ok, bad_shape, bad_model = [], [], [], []
    n_choices = n_schema = n_valid = 0
    for cid, e in sorted(exp.items()):
        r = out.get(cid)
        if r is None:
            continue
        if e["fail"]:
            err = r.get("error") or {}
            got = [err.get("code"), err.get("param")]
            codes["%s %s" % tuple(e["fail"])] += 1
            if r.get("response") is not None or got != e["fail"] or err.get("line") != e["line"]:
                wrong_fail.append("%s: %s at line %s" % (cid, got, err.get("line")))
            continue
        if r.get("error") is not None or not r.get("response"):
            wrong_ok.append("%s: %s" % (cid, (r.get("error") or {}).get("message")))
            continue
        body = r["response"]["body"]
        choices = body["choices"]
        n_choices += len(choices)
        if body.get("model") != model_ran:
            bad_model.append(cid)
        ok = (r["response"]["status_code"] == 200 and len(choices) == e["choices"] and
              [c["index"] for c in choices] == list(range(e["choices"])) and
              body["object"] == ("chat.completion" if e["chat"] else "text_completion") and
              body["usage"]["completion_tokens"] > 0 and
              len(body["llmq"]["choices"]) == e["choices"] and
              body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] +
              body["usage"]["completion_tokens"])
        for c in choices:
            text = text_of(e["chat"], c)
            ok = ok and isinstance(text, str) and check_logprobs(e["logprobs"], c, e)
            if e["echo"]:
                ok = ok and text.startswith(e["echo"][c["index"] // 2])
            if e["json_object"]:
                ok = ok and text.startswith("{")
            if e["schema"]:
                n_schema += 1
                schema = json.load(open(os.path.join(schema_dir, e["schema"])))
                try:
                    doc = json.loads(text)
                    if jsonschema:
                        jsonschema.validate(doc, schema)
                    n_valid += c["finish_reason"] == "stop"
                except Exception:
                    pass
        if not ok:
            bad_shape.append(cid)
    check(not wrong_fail, "each line asking for what llmq cannot do fails alone with its code,"
          " field and line number%s" % (": " + "; ".join(wrong_fail[:5]) if wrong_fail else ""))
    check(not wrong_ok, "every other line gets a response%s" %
          (": " + "; ".join(wrong_ok[:5]) if wrong_ok else ""))
    check(not bad_shape, "responses have OpenAI's shape: n choices in index order, usage, the"
          " logprobs asked for, echoed prompts, JSON objects%s" %
          (": " + ", ".join(bad_shape[:8]) if bad_shape else ""))
    check(not bad_model, "every response names the model that ran (%s), not the alias asked for%s"
          % (model_ran, ": " + ", ".join(bad_model[:5]) if bad_model else ""))
    check(n_schema > 0 and n_valid == n_schema,
          "every json_schema output is a whole document that parses and %s (%d of %d)" %
          ("validates against its schema" if jsonschema else
           "(no jsonschema module here: not validated)", n_valid, n_schema))
    print("lines %d, failed %d (%s), choices %d, schema outputs %d valid %d" %
          (len(exp), sum(codes.values()), ", ".join("%s: %d" % kv for kv in sorted(codes.items())),
           n_choices, n_schema, n_valid))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
