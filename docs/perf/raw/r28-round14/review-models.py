#!/usr/bin/env python3
"""Desk-review models of round 14's landed kernels (r28 review of ed7ef5c, f24c679, a766baa,
cbf5853 against their parent 9c705b4).  No GPU: each model replays, thread by thread, the index
arithmetic of the CUDA code (new and parent) and records every global load and store with a
symbolic value, then checks

  - every output element is written exactly once, nothing outside the outputs is written and
    nothing outside the inputs is read;
  - each stored value is the same expression (same operands, same operations, same order) as
    the parent kernel stores there, so the bits cannot differ;
  - an element a thread loads is stored by no other thread (in-place rope, a residual, y
    aliasing x), and the loading thread stores it only after loading it;
  - float2 accesses are 8-byte aligned and inside one row; the q8_0 KV write's exits, breaks and
    32-lane reductions are warp-uniform and each reduction sees exactly one 32-value block;
  - launch_rows / launch_rope / launch_kv_write pick B = 4 exactly where rows x (batched CTAs a
    row) >= n_sm, and both B paths are checked on each side of that threshold.

Run: python3 review-models.py  (about 4 minutes; plain CPython, no packages).  Output:
review-r28.md quotes it."""
import sys
import time
from collections import defaultdict

FAIL = []


def check(cond, what):
    if not cond:
        FAIL.append(what)
        if len(FAIL) < 20:
            print("FAIL:", what)
    return cond


# ---------------------------------------------------------------------------------------------
# A. gemm_sm90 epilogue: one consumer's 64 x 128 block (sm90_store_plain / sm90_store_adding of
#    ed7ef5c against 9c705b4's sm90_store).  Thread t of the consumer warpgroup c has
#    threadIdx.x = 128 (NP + c) + t; tot[128 j] is its accumulator register j.
# ---------------------------------------------------------------------------------------------
NP = 2


def acc_row(tx, j):  # sm90_acc_row
    return 16 * ((tx // 32) % 4) + (tx % 32) // 4 + 8 * ((j // 2) % 2)


def acc_col(tx, j):  # sm90_acc_col
    return 8 * (j // 4) + 2 * (tx % 4)


def final_of(y, has_bias, b, o, accumulate):  # gemm_final_of (and the parent's gemm_final)
    if has_bias:
        y = ("fadd_rn", y, b)
    return ("add", o, y) if accumulate else y


class Mem:
    """Global memory of one launch: dst (m x n), bias (n); every access logged per thread."""

    def __init__(self, m, n, has_bias):
        self.m, self.n, self.has_bias = m, n, has_bias
        self.dst = {}  # index -> value stored (absent: the old value)
        self.writes = defaultdict(list)  # index -> [thread]
        self.loads = defaultdict(set)  # index -> {thread}
        self.order = {}  # (thread, index) -> ("ld"/"st", seq) first event
        self.seq = 0
        self.max_ld_before_st = 0

    def _ev(self, t, kind, i):
        self.seq += 1
        self.order.setdefault((t, kind, i), self.seq)

    def ld(self, t, i, width=1):
        check(0 <= i and i + width <= self.m * self.n, f"dst load {i}+{width} out of range")
        if width == 2:
            check(i % 2 == 0 and (i % self.n) + 1 < self.n, f"float2 load at {i} unaligned/torn")
        out = []
        for k in range(i, i + width):
            self.loads[k].add(t)
            self._ev(t, "ld", k)
            out.append(self.dst.get(k, ("old", k)))
        return out

    def st(self, t, i, vals):
        width = len(vals)
        check(0 <= i and i + width <= self.m * self.n, f"dst store {i}+{width} out of range")
        if width == 2:
            check(i % 2 == 0 and (i % self.n) + 1 < self.n, f"float2 store at {i} unaligned/torn")
        for k, v in zip(range(i, i + width), vals):
            self.writes[k].append(t)
            self._ev(t, "st", k)
            self.dst[k] = v

    def bias(self, col):
        check(self.has_bias and 0 <= col < self.n, f"bias load at {col}")
        return ("b", col)


def tot(c, t, j):
    return ("tot", c, t, j)


def parent_store(mem, c, r0, n0, add):
    """9c705b4's sm90_store."""
    m, n, has_bias = mem.m, mem.n, mem.has_bias
    pairs = n % 2 == 0
    for t in range(128):
        tx = 128 * (NP + c) + t
        v, lane = (tx // 32) % 4, tx % 32
        for j in range(0, 64, 2):
            row = r0 + 16 * v + lane // 4 + 8 * ((j // 2) % 2)
            col = n0 + 8 * (j // 4) + 2 * (lane % 4)
            if row >= m or col >= n:
                continue
            o = row * n + col
            fin = lambda y, cc, oo: final_of(y, has_bias, mem.bias(cc) if has_bias else None, oo, add)
            if pairs:
                x = mem.ld(tx, o, 2) if add else [0.0, 0.0]
                mem.st(tx, o, [fin(tot(c, t, j), col, x[0]), fin(tot(c, t, j + 1), col + 1, x[1])])
            else:
                mem.st(tx, o, [fin(tot(c, t, j), col, mem.ld(tx, o)[0] if add else None)])
                if col + 1 < n:
                    mem.st(tx, o + 1,
                           [fin(tot(c, t, j + 1), col + 1, mem.ld(tx, o + 1)[0] if add else None)])


def new_store_plain(mem, c, r0, n0):
    """ed7ef5c's sm90_store_plain."""
    m, n, has_bias = mem.m, mem.n, mem.has_bias
    pairs = n % 2 == 0
    for t in range(128):
        tx = 128 * (NP + c) + t
        bc = [None] * 32
        for q in range(16):
            col = n0 + acc_col(tx, 4 * q)
            bc[2 * q] = mem.bias(col) if has_bias and col < n else 0.0
            bc[2 * q + 1] = mem.bias(col + 1) if has_bias and col + 1 < n else 0.0
        for j in range(0, 64, 2):
            row, col = r0 + acc_row(tx, j), n0 + acc_col(tx, j)
            if row >= m or col >= n:
                continue
            o = row * n + col
            y0 = final_of(tot(c, t, j), has_bias, bc[2 * (j // 4)], 0.0, False)
            y1 = final_of(tot(c, t, j + 1), has_bias, bc[2 * (j // 4) + 1], 0.0, False)
            if pairs:
                mem.st(tx, o, [y0, y1])
            else:
                mem.st(tx, o, [y0])
                if col + 1 < n:
                    mem.st(tx, o + 1, [y1])


def new_store_adding(mem, c, r0, n0):
    """ed7ef5c's sm90_store_adding (BATCH = 8 pairs, loads of a batch before its stores)."""
    BATCH = 8
    m, n, has_bias = mem.m, mem.n, mem.has_bias
    pairs = n % 2 == 0
    for t in range(128):
        tx = 128 * (NP + c) + t
        for j0 in range(0, 64, 2 * BATCH):
            x = [[0.0, 0.0] for _ in range(BATCH)]
            b = [[0.0, 0.0] for _ in range(BATCH)]
            lds = 0
            for i in range(BATCH):
                row, col = r0 + acc_row(tx, j0 + 2 * i), n0 + acc_col(tx, j0 + 2 * i)
                if row >= m or col >= n:
                    continue
                o = row * n + col
                second = col + 1 < n
                if pairs:
                    x[i] = mem.ld(tx, o, 2)
                    lds += 1
                else:
                    x[i] = [mem.ld(tx, o)[0], mem.ld(tx, o + 1)[0] if second else 0.0]
                    lds += 1 + second
                if has_bias:
                    b[i] = [mem.bias(col), mem.bias(col + 1) if second else 0.0]
                    lds += 1 + second
            mem.max_ld_before_st = max(mem.max_ld_before_st, lds)
            for i in range(BATCH):
                j = j0 + 2 * i
                row, col = r0 + acc_row(tx, j), n0 + acc_col(tx, j)
                if row >= m or col >= n:
                    continue
                o = row * n + col
                y0 = final_of(tot(c, t, j), has_bias, b[i][0], x[i][0], True)
                y1 = final_of(tot(c, t, j + 1), has_bias, b[i][1], x[i][1], True)
                if pairs:
                    mem.st(tx, o, [y0, y1])
                else:
                    mem.st(tx, o, [y0])
                    if col + 1 < n:
                        mem.st(tx, o + 1, [y1])


def check_block(m, n, r0, n0, c, has_bias, add):
    """One consumer block at (r0, n0) of an m x n output, new against parent."""
    old, new = Mem(m, n, has_bias), Mem(m, n, has_bias)
    parent_store(old, c, r0, n0, add)
    (new_store_adding if add else new_store_plain)(new, c, r0, n0)
    tag = f"epilogue m={m} n={n} r0={r0} n0={n0} bias={has_bias} add={add}"
    want = {row * n + col for row in range(r0, min(m, r0 + 64)) for col in range(n0, min(n, n0 + 128))}
    check(set(new.writes) == want, tag + ": written set")
    check(all(len(w) == 1 for w in new.writes.values()), tag + ": an element written twice")
    check(new.dst == old.dst, tag + ": a value differs from the parent's")
    for k, ts in new.loads.items():  # residual loads: own elements, before their store
        w = new.writes.get(k, [])
        check(len(ts) == 1 and w == list(ts), tag + f": dst[{k}] loaded by another thread")
        t = next(iter(ts))
        check(new.order[(t, "ld", k)] < new.order[(t, "st", k)], tag + f": dst[{k}] stored before load")
    check(add or not new.loads, tag + ": plain path loads dst")
    return new.max_ld_before_st


def model_epilogue():
    t0 = time.time()
    shapes = 0
    max_ld = 0
    # the block at (r0, n0) = (64, 128) (consumer c = 1 of a 2-consumer tile), every edge:
    # mv rows and nv columns of the block inside the output; nv = 128 with n beyond the
    # block by 0..3 (a full block of an odd-n output takes the non-pair path)
    r0, n0, c = 64, 128, 1
    rows_all = list(range(1, 65)) + [65, 100]
    cols_all = list(range(1, 129)) + [129, 130, 131]
    rows_few = [1, 8, 9, 17, 64, 65]
    cols_few = [1, 2, 3, 9, 127, 128, 129, 130, 131]
    grid = {(mv, nv) for mv in rows_all for nv in cols_few} | {(mv, nv) for mv in rows_few for nv in cols_all}
    for mv, nv in sorted(grid):
        for has_bias in (False, True):
            for add in (False, True):
                max_ld = max(max_ld, check_block(r0 + mv, n0 + nv, r0, n0, c, has_bias, add))
                shapes += 1
    # blocks at other corners: the first block, and a consumer wholly past m (NC = 3, c = 2)
    for (m, n, r0_, n0_, c_) in [(1, 1, 0, 0, 0), (5, 3, 0, 0, 0), (64, 128, 0, 0, 0),
                                 (130, 257, 128, 256, 2), (100, 300, 128, 128, 2), (192, 384, 128, 256, 2)]:
        for has_bias in (False, True):
            for add in (False, True):
                check_block(m, n, r0_, n0_, c_, has_bias, add)
                shapes += 1
    print(f"A. epilogue: {shapes} (block edge, bias, add) cases, {len(grid)} (rows, cols) edges of a "
          f"64 x 128 block; adding path: at most {max_ld} loads of a batch before its first store "
          f"({time.time() - t0:.0f} s)")


def model_gemm_grid():
    """Whole grids (gemm_sm90_kernel + split_sum): every output once, per NC and split."""
    t0 = time.time()
    cases = 0
    for m, n in [(17, 129), (64, 128), (65, 257), (193, 131), (200, 130), (257, 384)]:
        for nc in (1, 2, 3):
            for splits in (1, 3):
                hits = defaultdict(int)
                gx, gy = (n + 127) // 128, (m + 64 * nc - 1) // (64 * nc)
                for bz in range(splits):
                    for by in range(gy):
                        for bx in range(gx):
                            for cc in range(nc):
                                r0, n0 = by * 64 * nc + 64 * cc, bx * 128
                                for t in range(128):
                                    tx = 128 * (NP + cc) + t
                                    for j in range(0, 64, 2):
                                        row, col = r0 + acc_row(tx, j), n0 + acc_col(tx, j)
                                        for e in (0, 1):
                                            if row < m and col + e < n:
                                                hits[(bz, row, col + e)] += 1
                ok = len(hits) == splits * m * n and all(v == 1 for v in hits.values())
                check(ok, f"gemm grid m={m} n={n} nc={nc} splits={splits}")
                cases += 1
    print(f"   whole wgmma grids: {cases} (m, n, NC, splits) cases, every (split, row, col) once "
          f"({time.time() - t0:.0f} s)")


# ---------------------------------------------------------------------------------------------
# B. split_sum (f24c679): a thread per value against the parent's grid-stride loop.
# ---------------------------------------------------------------------------------------------
def split_value(i, splits, cols, has_bias, acc):
    v = 0.0
    for s in range(splits):
        v = ("add", v, ("part", s, i))
    return final_of(v, has_bias, ("b", i % cols) if has_bias else 0.0, ("old", i) if acc else 0.0, acc)


def model_split_sum():
    t0 = time.time()
    cases = 0
    n_sm = 132
    # the parent's grid-stride loop wraps past 4 x 132 x 256 = 135,168 values
    for rows, cols in [(1, 1), (17, 131), (33, 257), (130, 1100)]:
        n = rows * cols
        for splits in ((1, 2, 4, 7) if n < 100000 else (1, 7)):
            for has_bias, acc in ((False, False), (True, False), (False, True), (True, True)):
                old = {}
                g = min((n + 255) // 256, 4 * n_sm)
                for tid in range(g * 256):
                    i = tid
                    while i < n:
                        old[i] = split_value(i, splits, cols, has_bias, acc)
                        i += g * 256
                new = defaultdict(list)
                for b in range((n + 255) // 256):
                    for t in range(256):
                        i = b * 256 + t
                        if i >= n:
                            continue  # the early return, after pdl_begin
                        new[i].append(split_value(i, splits, cols, has_bias, acc))
                check(len(new) == n and all(len(v) == 1 for v in new.values()), f"split_sum {rows}x{cols}")
                check(all(new[i][0] == old[i] for i in range(n)), f"split_sum values {rows}x{cols}")
                cases += 1
    print(f"B. split_sum: {cases} (shape, splits, bias, accumulate) cases, each value once, the "
          f"parent's sum in split order ({time.time() - t0:.0f} s)")


# ---------------------------------------------------------------------------------------------
# C. row_kernel (rmsnorm, swiglu, the f16 copy) for B = 1 and 4 against the parent.
# ---------------------------------------------------------------------------------------------
PROD = 1024
ROW_COPY, ROW_NORM, ROW_SWIGLU = 0, 1, 2
MODE_NAME = {ROW_COPY: "copy", ROW_NORM: "rmsnorm", ROW_SWIGLU: "swiglu"}


def act_step_pos(k):
    h, c, t, i = k >> 5, (k >> 3) & 3, (k >> 2) & 1, k & 3
    return 16 * (2 * h + t) + 4 * c + ((i & 1) << 1 | i >> 1)


def hstride_of(dim):
    return (dim + 63) // 64 * 64


def row_value(mode, r, e, dim):
    if mode == ROW_NORM:
        return ("mul", ("mul", ("x", r, e), ("scale", r)), ("w", e))
    if mode == ROW_SWIGLU:
        return ("swiglu", ("x", r, e), ("u", r, e))
    return ("x", r, e)


def row_kernel_run(mode, B, dim, r, gy, parent):
    """One row r of the launch: {y index: [values]}, {h index: [values]}, loads by thread."""
    hs = hstride_of(dim)
    y, h = defaultdict(list), defaultdict(list)
    loader = defaultdict(set)
    ld_before_st = 0
    for by in range(gy):
        for tid in range(PROD):
            th = (r, by, tid)
            if mode == ROW_NORM:  # rms_scale: e = tid, tid + 1024, ... < dim (same thread as below)
                for e in range(tid, dim, PROD):
                    loader[("x", e)].add(th)
            span = (1 if parent else B) * PROD
            first = 0 if mode == ROW_NORM else by * span
            end = hs if mode == ROW_NORM else min(hs, first + span)
            base = first
            while base < end:
                if parent:
                    e = base + tid
                    v = 0.0
                    if e < dim:
                        loader[("x", e)].add(th)
                        if mode != ROW_COPY:
                            loader[("a", e)].add(th)
                        v = row_value(mode, r, e, dim)
                        if mode != ROW_COPY:
                            y[r * dim + e].append((v, th))
                    if e < hs:
                        h[r * hs + (e & ~63) + act_step_pos(e & 63)].append((("f16", v), th))
                else:
                    lds = 0
                    for i in range(B):
                        e = base + i * PROD + tid
                        if e < dim:
                            loader[("x", e)].add(th)
                            lds += 1
                            if mode != ROW_COPY:
                                loader[("a", e)].add(th)
                                lds += 1
                    ld_before_st = max(ld_before_st, lds)
                    for i in range(B):
                        e = base + i * PROD + tid
                        if base + i * PROD >= end:
                            break
                        v = 0.0
                        if e < dim:
                            v = row_value(mode, r, e, dim)
                            if mode != ROW_COPY:
                                y[r * dim + e].append((v, th))
                        if e < hs:
                            h[r * hs + (e & ~63) + act_step_pos(e & 63)].append((("f16", v), th))
                base += span
    return y, h, loader, ld_before_st


def launch_rows_grid(mode, rows, dim, n_sm):
    """launch_rows: (B, gridDim.y); the parent: (1, slices)."""
    hs = hstride_of(dim)
    slices = (hs + PROD - 1) // PROD
    batched = (slices + 3) // 4
    batch = mode == ROW_NORM or rows * batched >= n_sm
    return (4 if batch else 1), (1 if mode == ROW_NORM else batched if batch else slices), slices


def check_rows(mode, B, dim):
    hs = hstride_of(dim)
    slices = (hs + PROD - 1) // PROD
    gy = 1 if mode == ROW_NORM else (slices + B - 1) // B
    gy_parent = 1 if mode == ROW_NORM else slices
    tag = f"{MODE_NAME[mode]} B={B} dim={dim}"
    ld = 0
    for r in (0, 2):
        y, h, loader, ld = row_kernel_run(mode, B, dim, r, gy, False)
        py, ph, _, _ = row_kernel_run(mode, 1, dim, r, gy_parent, True)
        if mode != ROW_COPY:
            check(set(y) == set(range(r * dim, (r + 1) * dim)), tag + ": y written set")
            check(all(len(v) == 1 for v in y.values()), tag + ": y element written twice")
            check({k: v[0][0] for k, v in y.items()} == {k: v[0][0] for k, v in py.items()},
                  tag + ": y values")
        else:
            check(not y, tag + ": copy writes y")
        check(set(h) == set(range(r * hs, (r + 1) * hs)), tag + ": h written set")
        check(all(len(v) == 1 for v in h.values()), tag + ": h element written twice")
        check({k: v[0][0] for k, v in h.items()} == {k: v[0][0] for k, v in ph.items()}, tag + ": h values")
        # y may alias x (in place): x[e] is loaded only by the thread that stores y[e]
        for (buf, e), ts in loader.items():
            check(e < dim, tag + ": load past dim")
            if buf == "x" and mode != ROW_COPY:
                check(ts == {y[r * dim + e][0][1]}, tag + f": x[{e}] loaded by a thread that does not store y[{e}]")
    return ld


def model_rows():
    t0 = time.time()
    dims = [1, 31, 32, 63, 64, 65, 100, 172, 960, 1000, 1023, 1024, 1025, 1088, 2047, 2048, 2049,
            2560, 3000, 3072, 3200, 3584, 4095, 4096, 4097, 4160, 5120, 7168, 8192, 8193, 11008,
            13824, 14336, 17920, 18944]
    cases = 0
    lds = {}
    for mode in (ROW_COPY, ROW_NORM, ROW_SWIGLU):
        for B in ((4,) if mode == ROW_NORM else (1, 4)):
            for dim in dims:
                lds[(mode, B)] = max(lds.get((mode, B), 0), check_rows(mode, B, dim))
                cases += 1
    # the threshold: B = 4 exactly where rows x batched >= n_sm; both sides checked above
    thr = 0
    for n_sm in (132, 114, 78, 16):
        for mode in (ROW_COPY, ROW_SWIGLU):
            for dim in (172, 1024, 3584, 4096, 11008, 18944):
                for rows in range(1, 300):
                    B, gy, slices = launch_rows_grid(mode, rows, dim, n_sm)
                    check((B == 4) == (rows * ((slices + 3) // 4) >= n_sm), "row threshold")
                    check(gy == (slices + B - 1) // B, "row grid")
                    thr += 1
    print(f"C. row_kernel: {cases} (mode, B, dim) cases over {len(dims)} widths, rows 0 and 2, y "
          f"and the padded f16 copy each once with the parent's value; loads before the first "
          f"store a thread: " + ", ".join(f"{MODE_NAME[m]} B={b}: {v}" for (m, b), v in sorted(lds.items()))
          + f"; {thr} (n_sm, mode, dim, rows) threshold picks ({time.time() - t0:.0f} s)")


# ---------------------------------------------------------------------------------------------
# D. rope_kernel<B> against the parent (one thread per (pair, head)).
# ---------------------------------------------------------------------------------------------
ROW_THREADS = 256


def rope_launch(pairs, heads, rows, n_sm, force=None):
    per_cta = ROW_THREADS // pairs if pairs < ROW_THREADS else 1
    batched = (heads + per_cta * 4 - 1) // (per_cta * 4)
    batch = rows * batched >= n_sm if force is None else force == 4
    return (4 if batch else 1), per_cta, (batched if batch else (heads + per_cta - 1) // per_cta)


def rope_value(which, r, head, idx, i, step, offset, base):
    x0, x1 = ("x", which, r, head, base), ("x", which, r, head, base + offset)
    c, s = ("cos", r, i), ("sin", r, i)
    if idx == base:
        return ("fsub", ("fmul", x0, c), ("fmul", x1, s))
    return ("fadd", ("fmul", x0, s), ("fmul", x1, c))


def rope_run(B, per_cta, gy, pairs, n_head, n_kv, hd, step, offset, r, parent):
    heads = n_head + n_kv
    out = defaultdict(list)
    loads = defaultdict(set)
    for by in range(gy):
        for ty in range(per_cta):
            for i in range(pairs):
                th = (by, ty, i)
                if parent:
                    hs_ = [by * per_cta + ty]
                    if hs_[0] >= heads:
                        continue
                else:
                    head0 = by * per_cta * B + ty
                    if head0 >= heads:
                        continue  # the early return, after pdl_begin
                    hs_ = [head0 + j * per_cta for j in range(B)]
                for head in hs_:
                    if head >= heads:
                        continue
                    which = "q" if head < n_head else "k"
                    hh = head if head < n_head else head - n_head
                    base = step * i
                    check(base + offset < hd, "rope index past the head")
                    for idx in (base, base + offset):
                        loads[(which, hh, idx)].add(th)
                for head in hs_:  # the stores, after every load of the thread
                    if head >= heads:
                        continue
                    which = "q" if head < n_head else "k"
                    hh = head if head < n_head else head - n_head
                    base = step * i
                    for idx in (base, base + offset):
                        out[(which, hh, idx)].append((rope_value(which, r, hh, idx, i, step, offset, base), th))
    return out, loads


def model_rope():
    t0 = time.time()
    head_sets = [(1, 1), (2, 1), (3, 1), (4, 4), (5, 3), (8, 8), (12, 12), (14, 2), (16, 4), (25, 5),
                 (28, 4), (32, 8), (32, 32), (40, 8), (48, 8), (64, 8), (71, 1)]
    cases = 0
    for hd in (64, 80, 96, 112, 128, 160, 192, 256):
        n_dims_set = sorted({d for d in (hd, hd // 2, hd // 4, 32, 2, hd - 16) if d >= 2 and d % 2 == 0 and d <= hd})
        for n_dims in n_dims_set:
            pairs = n_dims // 2
            for halves in (False, True):
                step, offset = (1, n_dims // 2) if halves else (2, 1)
                for n_head, n_kv in head_sets:
                    heads = n_head + n_kv
                    tag = f"rope hd={hd} n_dims={n_dims} halves={halves} heads={n_head}+{n_kv}"
                    _, per_cta, gyp = rope_launch(pairs, heads, 1, 10 ** 9, force=1)
                    check(pairs * per_cta <= 1024, tag + ": block too large")
                    want_idx = set()
                    for i in range(pairs):
                        want_idx |= {step * i, step * i + offset}
                    want = {(w, hh, idx) for w, nh in (("q", n_head), ("k", n_kv)) for hh in range(nh) for idx in want_idx}
                    pout, _ = rope_run(1, per_cta, gyp, pairs, n_head, n_kv, hd, step, offset, 0, True)
                    for B in (1, 4):
                        _, per_cta, gy = rope_launch(pairs, heads, 1, 10 ** 9, force=B)
                        out, loads = rope_run(B, per_cta, gy, pairs, n_head, n_kv, hd, step, offset, 0, False)
                        check(set(out) == want, tag + f" B={B}: written set")
                        check(all(len(v) == 1 for v in out.values()), tag + f" B={B}: written twice")
                        check(all(out[k][0][0] == pout[k][0][0] for k in out), tag + f" B={B}: values")
                        check(all(ts == {out[k][0][1]} for k, ts in loads.items()),
                              tag + f" B={B}: an element loaded by a thread that does not store it")
                        cases += 1
    # the threshold picks
    thr = 0
    for n_sm in (132, 114, 16):
        for pairs in (16, 32, 48, 64, 128):
            for heads in (2, 32, 40, 64, 72):
                for rows in range(1, 200):
                    B, per_cta, gy = rope_launch(pairs, heads, rows, n_sm)
                    batched = (heads + per_cta * 4 - 1) // (per_cta * 4)
                    check((B == 4) == (rows * batched >= n_sm), "rope threshold")
                    check(gy * per_cta * B >= heads and (gy - 1) * per_cta * B < heads, "rope grid")
                    thr += 1
    print(f"D. rope: {cases} (head dim 64..256, n_dims incl. partial, adjacent / halves, 17 head "
          f"counts, B) cases, every rotated value once with the parent's operands, values past "
          f"n_dims untouched, in-place loads only by the storing thread; {thr} threshold picks "
          f"({time.time() - t0:.0f} s)")


# ---------------------------------------------------------------------------------------------
# E. kv_write_q8_kernel<B> against the parent: per warp (kv_dim % 32 == 0).
# ---------------------------------------------------------------------------------------------
def model_kv():
    t0 = time.time()
    cases = 0
    n_blocks, block_size, layer = 3, 16, 1
    slots = [5, 0, 47]
    for kv_dim in range(32, 16384 + 1, 32):
        layer_off = layer * n_blocks * block_size * kv_dim
        ctas = (kv_dim + ROW_THREADS - 1) // ROW_THREADS
        for B in (1, 4):
            gy = ctas if B == 1 else (ctas + 3) // 4
            tag = f"kv_write q8 kv_dim={kv_dim} B={B}"
            qw, dw = defaultdict(int), defaultdict(int)
            for r in (0, 2):
                dst = layer_off + slots[r] * kv_dim
                for by in range(gy):
                    for w in range(ROW_THREADS // 32):
                        e0 = [by * B * ROW_THREADS + 32 * w + lane for lane in range(32)]
                        ret = [e >= kv_dim for e in e0]
                        if not check(all(ret) or not any(ret), tag + ": exit not warp-uniform") or ret[0]:
                            continue
                        for j in range(B):
                            e = [x + j * ROW_THREADS for x in e0]
                            brk = [x >= kv_dim for x in e]
                            check(all(brk) or not any(brk), tag + ": break not warp-uniform")
                            if brk[0]:
                                break
                            # one reduction: lanes 0..31 hold values 0..31 of one block
                            blk = {(dst + x) // 32 for x in e}
                            check(len(blk) == 1 and all((dst + x) % 32 == l for l, x in enumerate(e)),
                                  tag + ": a reduction spans blocks")
                            # the parent's scale index for value x: (layer_off + slot kv_dim + x) / 32
                            check(blk == {(layer_off + slots[r] * kv_dim + e[0]) // 32}, tag + ": scale index")
                            for x in e:
                                qw[dst + x] += 1
                            dw[blk.pop()] += 1
            want_q = {layer_off + slots[r] * kv_dim + x for r in (0, 2) for x in range(kv_dim)}
            check(set(qw) == want_q and all(v == 1 for v in qw.values()), tag + ": q written set")
            check(set(dw) == {q // 32 for q in want_q} and all(v == 1 for v in dw.values()),
                  tag + ": scale written set")
            cases += 1
    thr = 0
    for n_sm in (132, 114, 16):
        for kv_dim in (128, 512, 1024, 3072, 4096, 1056):
            for rows in range(1, 300):
                ctas = (kv_dim + 255) // 256
                batched = (ctas + 3) // 4
                check((rows * batched >= n_sm) == (rows * ((kv_dim + 1023) // 1024) >= n_sm), "kv threshold")
                thr += 1
    print(f"E. kv_write q8_0: {cases} (kv_dim 32..16384 by 32, B) cases, 2 rows at scattered slots: "
          f"each value and each block scale once, exits / breaks warp-uniform, each reduction one "
          f"32-value block in lane order, the parent's scale index; {thr} threshold picks "
          f"({time.time() - t0:.0f} s)")


# ---------------------------------------------------------------------------------------------
# F. Where B = 4 starts for the project's model shapes (rows, n_sm 132), a766baa's rule.
# ---------------------------------------------------------------------------------------------
def model_thresholds():
    models = [("llama 7B", 4096, 11008, 32, 32, 128), ("qwen2 7B", 3584, 18944, 28, 4, 128),
              ("llama 3 8B", 4096, 14336, 32, 8, 128), ("phi3 mini", 3072, 8192, 32, 32, 96)]
    print("F. first row count taking B = 4 on 132 SMs (rmsnorm: always):")
    print("| model | swiglu (n_ff) | f16 copy of the attention output | rope | q8_0 KV write |")
    print("| --- | --- | --- | --- | --- |")
    for name, dim, ff, nh, nkv, hd in models:
        def first(f):
            return next(r for r in range(1, 100000) if f(r))
        sw = first(lambda r: launch_rows_grid(ROW_SWIGLU, r, ff, 132)[0] == 4)
        cp = first(lambda r: launch_rows_grid(ROW_COPY, r, nh * hd, 132)[0] == 4)
        ro = first(lambda r: rope_launch(hd // 2, nh + nkv, r, 132)[0] == 4)
        kv = first(lambda r: r * (((nkv * hd + 255) // 256 + 3) // 4) >= 132)
        print(f"| {name} | {sw} | {cp} | {ro} | {kv} |")


if __name__ == "__main__":
    model_epilogue()
    model_gemm_grid()
    model_split_sum()
    model_rows()
    model_rope()
    model_kv()
    model_thresholds()
    print(f"{len(FAIL)} failures")
    sys.exit(1 if FAIL else 0)
