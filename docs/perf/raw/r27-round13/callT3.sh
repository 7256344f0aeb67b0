#!/bin/sh
# issue 14's qwen2 gap (1.0-1.6% under the llama 7B shape at pp512, r26 S3): every kernel's time in one
# pp512 forward pass of each model, side by side (ncu: duration only; the bench's warm-up pass is
# its first ~400 launches).  ~4 min.
R=/tmp/resT3; . .gpu-b/commonS.sh
model m7b llama "$S7"; model m7b-qwen2 qwen2 "$S7"
for m in m7b m7b-qwen2; do
  timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 420 --csv --print-units base \
    $F/llmq-run -m /tmp/$m.gguf --bench --reps 1 --bench-pp 512 --bench-npl 1 > $R/ncu-times-$m.csv 2>$R/ncu-$m.log; log "ncu $m exit $?"
done
python3 - $R <<'PY'
import csv, sys, collections
R = sys.argv[1]
def load(m):
    t = collections.defaultdict(float); n = collections.Counter()
    # ncu's CSV rows start with a quote; the bench's own table and JSON lines are mixed in
    rows = list(csv.reader(l for l in open(f"{R}/ncu-times-{m}.csv") if l.startswith('"')))
    h = rows[0]; k = h.index("Kernel Name"); v = h.index("Metric Value")
    for r in rows[1:]:
        name = r[k].split("(")[0]; t[name] += float(r[v].replace(",", "")) / 1e3; n[name] += 1
    return t, n
a, na = load("m7b"); b, nb = load("m7b-qwen2")
print("| kernel | llama us (n) | qwen2 us (n) | difference |\n| --- | --- | --- | --- |")
for name in sorted(set(a) | set(b), key=lambda x: -abs(b.get(x, 0) - a.get(x, 0))):
    print(f"| {name[:70]} | {a.get(name,0):.1f} ({na[name]}) | {b.get(name,0):.1f} ({nb[name]}) | {b.get(name,0)-a.get(name,0):+.1f} |")
print(f"| total | {sum(a.values()):.1f} | {sum(b.values()):.1f} | {sum(b.values())-sum(a.values()):+.1f} |")
PY
tar czf "$OUT/resT3.tgz" -C $R .
cat $R/log.txt
