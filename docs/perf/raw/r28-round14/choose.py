"""V1's rule for V2's candidate: e7 (else e1) as the GEMM epilogue, with e5 and e6 where they gated and won."""
import glob, os, re, sys, statistics
R = sys.argv[1]
def runs(model, var, test):
    """per-run tok/s of test in the tables' files of (model, var): medians of the md tables"""
    vals = []
    for f in glob.glob(f"{R}/bench-{model}-{var}-*.md"):
        for line in open(f):
            c = [x.strip() for x in line.split('|')]
            if len(c) > 4 and c[3] == test:
                try: vals.append(float(c[4].split()[0].replace(',', '')))
                except ValueError: pass
    return statistics.median(vals) if vals else None
def passed(v):
    ok = True
    for k in ('ops', 'models'):
        p = f"{R}/parity-{k}-{v}.txt"
        if os.path.exists(p):
            t = open(p).read().strip().splitlines()
            ok = ok and bool(t) and re.search(r' 0 failed', t[-1]) is not None
        elif k == 'ops': ok = False
    return ok
def ge(a, b, f=1.0): return a is not None and b is not None and a >= f * b
fin = {t: runs('m7b', 'final', t) for t in ('pp512', 'decode_b64', 'pp8192', 'decode_b256')}
q = {v: runs('m7b-qwen2', v, 'pp512') for v in ('final', 'e1', 'e7')}
print('final m7b', fin, 'qwen2 pp512', q)
e7 = passed('e7') and ge(q['e7'], q['e1']) and ge(runs('m7b', 'e7', 'pp512'), runs('m7b', 'e1', 'pp512')) \
    and ge(runs('m7b', 'e7', 'decode_b64'), fin['decode_b64'], 0.995)
e5 = passed('e5') and ge(runs('m7b', 'e5', 'pp512'), fin['pp512'], 1.005) and ge(runs('m7b', 'e5', 'pp8192'), fin['pp8192'])
e6 = passed('e6') and ge(runs('m7b', 'e6', 'decode_b256'), fin['decode_b256'], 1.003)
print('e7', e7, 'e5', e5, 'e6', e6, [(v, t, runs('m7b', v, t)) for v, t in (('e7', 'pp512'), ('e7', 'decode_b64'), ('e5', 'pp512'), ('e5', 'pp8192'), ('e6', 'decode_b256'))])
name = ('b7' if e7 else 'b1') + ('5' if e5 else '') + ('6' if e6 else '')
print({'b7': 'e7', 'b1': 'e1'}.get(name, name))
