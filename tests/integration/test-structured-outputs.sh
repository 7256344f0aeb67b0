#!/bin/sh
# test-structured-outputs: llmq-run --json-schema as a user runs it, on the
# CPU engine and stories260K, with Python's jsonschema as the judge.
#
# Pins: 1,000 outputs -- the 20 schemas of tests/data/schemas (nested
# objects, arrays, enums, const, anyOf, $defs, optional properties, every
# type), 5 seeds each, 10 prompts per run -- sampled at temperature 1.0
# from the whole distribution (no top-k, top-p or min-p) all parse as JSON
# and validate against their schema, and all finish with "stop": each
# schema bounds its strings and arrays, and the longest document it allows
# (computed below, a byte per token at worst) fits the token cap, so a
# document cut short would be a failure of the engine, not of the test.
# --json-object writes the beginning of a JSON object (this model never
# closes a free string within the cap, so no object ends; the grammar's
# complete documents are pinned by test-jsonschema and test-grammar); a
# schema llmq cannot honour is refused with exit 1 and the keyword's place.
#
# Skips (exit 77) only when python3 lacks jsonschema (Debian package
# python3-jsonschema, which tools/dev.sh installs).

if [ -z "$LLMQ_TEST_DATA" ] || [ -z "$LLMQ_BUILDDIR" ] || [ -z "$LLMQ_SRCDIR" ]; then
    echo "LLMQ_TEST_DATA, LLMQ_BUILDDIR and LLMQ_SRCDIR must be set: run through 'make check'" >&2
    exit 77
fi
if ! python3 -c "import jsonschema" 2>/dev/null; then
    echo "skip - python3 has no jsonschema module (Debian: python3-jsonschema)"
    exit 77
fi

exec python3 - "$LLMQ_BUILDDIR/tools/llmq-run" "$LLMQ_TEST_DATA" <<'PY'
import glob, json, os, re, subprocess, sys, tempfile
import jsonschema

RUN, DATA = sys.argv[1], sys.argv[2]
MODEL = os.path.join(DATA, "models", "stories260K.gguf")
CAP = 460          # tokens per output; the model's context is 512
SEEDS = range(1, 6)
PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park",
           "One day, a big bear", "Tom had a red ball", "The sun was hot and",
           "Mom said", "There was a tiny bird", "Sam found a box", "The cat ran"]
passed = failed = 0

def check(ok, what):
    global passed, failed
    print(("ok - " if ok else "FAIL - ") + what, flush=True)
    passed, failed = passed + bool(ok), failed + (not ok)

def bound(s, root):
    """The longest document llmq generates for schema s, in bytes (None:
    no bound).  Strings count 6 bytes a character (a \\uXXXX escape)."""
    if not isinstance(s, dict) or not s:
        return None
    if "$ref" in s:
        return bound(root["$defs"][s["$ref"].split("/")[-1]], root)
    if "anyOf" in s:
        parts = [bound(x, root) for x in s["anyOf"]]
        return None if None in parts else max(parts)
    if "enum" in s or "const" in s:
        values = s["enum"] if "enum" in s else [s["const"]]
        return max(len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()) for v in values)
    types = s.get("type", ["object", "array", "string", "number", "boolean", "null"])
    parts = [type_bound(t, s, root) for t in ([types] if isinstance(types, str) else types)]
    return None if None in parts else max(parts)

def type_bound(t, s, root):
    if t == "string":
        return 2 + 6 * s["maxLength"] if "maxLength" in s else None
    if t in ("integer", "number"):
        return 17 if t == "integer" else 38   # 16 digits each side, a 2-digit exponent
    if t in ("boolean", "null"):
        return 5
    if t == "array":
        item = bound(s.get("items", {}), root)
        return None if item is None or "maxItems" not in s else 2 + s["maxItems"] * (item + 2)
    props = s.get("properties")
    if props is None:
        return 2 if s.get("additionalProperties") is False else None
    members = [bound(v, root) for v in props.values()]
    if None in members:
        return None
    return 2 + sum(len(json.dumps(k)) + 2 + b + 2 for k, b in zip(props, members))

def run(args):
    return subprocess.Popen([RUN, "-m", MODEL, "--cpu", "-t", "1", "-c", "512"] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

def outputs(stdout):
    """(prompt index, finish, text) of each output of --parallel."""
    lines = stdout.split(b"\n")
    for head, body in zip(lines[0::2], lines[1::2]):
        m = re.match(rb"--- prompt (\d+) \((\w+), \d+ tokens\)$", head)
        if not m:
            raise ValueError("unexpected line %r" % head)
        i = int(m.group(1)) - 1
        prompt = PROMPTS[i].encode()
        if not body.startswith(prompt):
            raise ValueError("output %d does not start with its prompt" % (i + 1))
        yield i, m.group(2).decode(), body[len(prompt):]

tmp = tempfile.mkdtemp()
prompts = os.path.join(tmp, "prompts.txt")
with open(prompts, "w") as f:
    f.write("\n".join(PROMPTS) + "\n")

schemas = sorted(glob.glob(os.path.join(DATA, "schemas", "*.json")))
check(len(schemas) == 20, "tests/data/schemas holds 20 schemas (%d)" % len(schemas))
bounds = {p: bound(json.load(open(p)), json.load(open(p))) for p in schemas}
too_long = [os.path.basename(p) for p, b in bounds.items() if b is None or b > CAP]
check(not too_long, "every schema's longest document fits %d tokens (longest %d bytes)%s"
      % (CAP, max(b or 0 for b in bounds.values()), " -- not: " + ", ".join(too_long) if too_long else ""))

# Two llmq-run processes at a time: one per core of a small machine.
jobs = [(p, seed) for p in schemas for seed in SEEDS]
total = valid = stopped = 0
per_schema = {p: [0, 0, None] for p in schemas}  # valid, outputs, an example
running = []
while jobs or running:
    while jobs and len(running) < 2:
        p, seed = jobs.pop(0)
        running.append((p, seed, run(["--parallel", "10", "-f", prompts, "--json-schema", p,
                                      "--temp", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                                      "--seed", str(seed), "-n", str(CAP)])))
    p, seed, proc = running.pop(0)
    out, err = proc.communicate()
    if proc.returncode != 0:
        check(False, "%s seed %d: llmq-run exits %d: %s" % (os.path.basename(p), seed,
                                                             proc.returncode, err.decode()[-300:]))
        continue
    schema = json.load(open(p))
    validator = jsonschema.validators.validator_for(schema)(schema)
    for i, finish, text in outputs(out):
        total += 1
        per_schema[p][1] += 1
        try:
            doc = json.loads(text.decode("utf-8"))
            problems = [e.message for e in validator.iter_errors(doc)]
        except (UnicodeDecodeError, ValueError) as e:
            problems = ["not JSON: %s" % e]
        if problems:
            print("# %s seed %d prompt %d (%s): %r: %s" % (os.path.basename(p), seed, i + 1, finish,
                                                           text[:200], problems[0][:200]))
        valid += not problems
        per_schema[p][0] += not problems
        per_schema[p][2] = per_schema[p][2] or text
        stopped += finish == "stop"

for p in schemas:
    print("# %s: %d/%d valid, e.g. %s" % (os.path.basename(p), per_schema[p][0], per_schema[p][1],
                                          (per_schema[p][2] or b"").decode("utf-8", "replace")))
check(total == 1000 and valid == total,
      "%d/%d outputs (20 schemas x 5 seeds x 10 prompts, temperature 1) parse and validate"
      % (valid, total))
check(stopped == total, "every output finished with stop, at its document's end (%d/%d)"
      % (stopped, total))

proc = run(["--parallel", "10", "-f", prompts, "--json-object", "--temp", "1", "--seed", "9", "-n", "80"])
out, _ = proc.communicate()
texts = [t for _, _, t in outputs(out)]
check(proc.returncode == 0 and len(texts) == len(PROMPTS) and
      all(t.startswith(b"{") and not any(c < 0x20 for c in t) for t in texts),
      "--json-object: every output begins a JSON object, without a raw control character")

bad = os.path.join(tmp, "bad.json")
with open(bad, "w") as f:
    f.write('{"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}')
proc = run(["-p", "Hi", "--json-schema", bad])
_, err = proc.communicate()
check(proc.returncode == 1 and b"schema/properties/age: 'minimum' is not supported" in err,
      "a schema with an unsupported keyword exits 1, naming it and where it is")
proc = run(["-p", "Hi", "--json-object", "--ignore-eos"])
_, err = proc.communicate()
check(proc.returncode == 2 and b"--ignore-eos" in err, "--json-object with --ignore-eos is a usage error")

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
