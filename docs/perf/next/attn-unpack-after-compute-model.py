#!/usr/bin/env python3
"""A model of the q8_0 prompt attention's shared-memory schedule with one
barrier a key tile (attn-unpack-after-compute.patch), against main's three.
It checks the schedule, not the CUDA code: each warp runs the kernel's
sequence of barriers, cp.async copies, commits and waits, unpackings, scale
loads and tile reads, as kernels/cuda/attention.cu's attn_tc_kernel<D, true,
W> does after the patch (or on main), with the loop's conditions (tile
kt + 1 / kt + 2 exists, the warp is active, kt <= its last_kt).

The buffers: f16 buffers 0 and 1 (K and V together; the patch's Q tile lies
over buffer 1) and int8 stages 0 and 1; main has one f16 buffer, Q apart.
Each is split in W parts, part w written by warp w's threads (the copy, the
unpacking and the Q tile each give every thread its share), and every read
takes all W parts: ldmatrix reads rows other warps wrote, the unpacking
reads bytes other threads copied.  So two accesses to one part, one of them
a write, must lie in different barrier epochs (the stretch between two
__syncthreads, the same for every warp), the write first; a cp.async write
lasts from its issue to the end of the epoch of the issuing thread's
cp.async.wait_group that covers its group (wait_group N: all but the newest
N committed groups), and is visible from the next epoch on.

Checked, for every warp's every read: each part holds the tile expected
(read before written, stale, or being written: a race), no write to a part
while another access to it may run (same epoch), every warp passes the same
number of barriers, no copy is in flight at the end, each unpacking uses
its own tile's scales, and each warp computes tiles 0 .. min(last_kt,
n_tiles - 1) in order, each from a buffer holding that tile unpacked from
its own bytes (so the mma see main's operands in main's order).

Usage: attn-unpack-after-compute-model.py [--trace N]
  Exit status 0: the patch's schedule and main's pass every case, and each
  deliberately broken schedule below is caught.  --trace N prints the
  patch's schedule for n_tiles N, epoch by epoch.
"""
import bisect
import itertools
import random
import sys

INACTIVE = None  # a warp whose 16 rows are all padding: it computes nothing
INT_MAX = 2**31 - 1  # last_kt of every warp of a 64-row tile


def bname(buf):
    return {"f16": "f16 buffer", "i8": "int8 stage", "q": "Q tile"}[buf[0]] + \
        (f" {buf[1]}" if len(buf) > 1 else "")


def pattern(warps):
    return "[" + ", ".join("inactive" if w is INACTIVE else "INT_MAX" if w == INT_MAX
                           else str(w) for w in warps) + "]"


class Program:
    """One warp's run of the kernel: events in program order, with epochs."""

    def __init__(self, warp):
        self.warp = warp
        self.epoch = 0
        self.events = []
        self.groups = []  # this warp's committed cp.async groups, each a list of copies
        self.open = []  # copies issued since the last commit
        self.scales = None  # the tile whose scales the registers hold
        self.errors = []

    def ev(self, kind, buf, tile, **kw):
        self.events.append(dict(kind=kind, buf=buf, tile=tile, epoch=self.epoch,
                                warp=self.warp, **kw))

    def bar(self):
        self.events.append(dict(kind="bar", epoch=self.epoch, warp=self.warp))
        self.epoch += 1

    def copy(self, stage, tile):
        rec = dict(kind="copy", buf=("i8", stage), tile=tile, epoch=self.epoch,
                   warp=self.warp, done=None)
        self.events.append(rec)
        self.open.append(rec)

    def commit(self):
        self.groups.append(self.open)
        self.open = []

    def wait(self, n):
        """cp.async.wait_group n: all but the newest n groups are done."""
        for g in self.groups[:max(0, len(self.groups) - n)]:
            for rec in g:
                if rec["done"] is None:
                    rec["done"] = self.epoch

    def load_scales(self, tile):
        self.scales = tile

    def unpack(self, stage, buf, tile):
        if self.scales != tile:
            self.errors.append(f"warp {self.warp}: unpacks tile {tile} with tile "
                               f"{self.scales}'s scales")
        self.ev("read", ("i8", stage), tile, why=f"unpack of tile {tile}")
        self.ev("write", ("f16", buf), tile, why=f"unpack of tile {tile}")

    def compute(self, buf, tile):
        self.ev("read", ("f16", buf), tile, why=f"mma of tile {tile}", compute=True)


def patch_schedule(pr, n_tiles, active, last_kt, mutant=None):
    """attn_tc_kernel<D, true, W> after the patch (one barrier a tile)."""
    pr.copy(0, 0)
    pr.commit()
    if n_tiles > 1:
        pr.copy(1, 1)
        pr.commit()
    elif mutant != "no-empty-commit":
        pr.commit()  # so that wait_group 1 waits for tile 0
    pr.load_scales(0)
    q_buf = 0 if mutant == "q-over-buffer-0" else 1
    pr.ev("write", ("f16", q_buf), "Q", why="Q tile")
    pr.wait(1)
    pr.bar()
    if mutant != "unpack-active-only" or active:
        pr.unpack(0, 0, 0)
    if n_tiles > 1:
        pr.load_scales(1)
    if active:
        pr.ev("read", ("f16", q_buf), "Q", why="Q fragments")
    for kt in range(n_tiles):
        buf = kt % 2
        if mutant == "copy-before-barrier" and kt + 2 < n_tiles:
            pr.copy(buf, kt + 2)
            pr.commit()
        pr.wait(1 if mutant == "wait-1-in-loop" else 0)
        if mutant not in ("barrier-in-compute", "no-loop-barrier"):
            pr.bar()
        if mutant != "copy-before-barrier" and kt + 2 < n_tiles:
            pr.copy(buf, kt + 2)
            pr.commit()
        if mutant == "scales-before-unpack" and kt + 2 < n_tiles:
            pr.load_scales(kt + 2)
        computes = active and kt <= last_kt
        if computes:
            if mutant == "barrier-in-compute":
                pr.bar()
            pr.compute(buf, kt)
        if kt + 1 < n_tiles:
            if (mutant != "unpack-active-only" or active) and \
                    (mutant != "unpack-computing-only" or computes):
                pr.unpack(buf ^ 1, buf ^ 1, kt + 1)
            if mutant != "scales-before-unpack" and kt + 2 < n_tiles:
                pr.load_scales(kt + 2)


def main_schedule(pr, n_tiles, active, last_kt, mutant=None):
    """attn_tc_kernel<D, true, W> on main: three barriers a tile, one f16 buffer."""
    pr.copy(0, 0)
    pr.commit()
    pr.load_scales(0)
    pr.ev("write", ("q",), "Q", why="Q tile")
    pr.bar()
    if active:
        pr.ev("read", ("q",), "Q", why="Q fragments")
    for kt in range(n_tiles):
        buf = kt % 2
        if kt + 1 < n_tiles:
            pr.copy(buf ^ 1, kt + 1)
        pr.commit()
        pr.wait(1)
        pr.bar()
        pr.unpack(buf, 0, kt)
        if kt + 1 < n_tiles:
            pr.load_scales(kt + 1)
        pr.bar()
        if active and kt <= last_kt:
            pr.compute(0, kt)
        pr.bar()


def check(schedule, n_tiles, warps, mutant=None):
    """Runs every warp; returns the list of broken rules (empty: it holds)."""
    progs = []
    for w, last in enumerate(warps):
        pr = Program(w)
        schedule(pr, n_tiles, last is not INACTIVE, -1 if last is INACTIVE else last, mutant)
        progs.append(pr)
    errors = [e for pr in progs for e in pr.errors]
    if len({pr.epoch for pr in progs}) != 1:
        errors.append("warps pass different numbers of barriers: "
                      + ", ".join(f"warp {pr.warp} {pr.epoch}" for pr in progs))
        return errors
    W = len(warps)
    writes = {}  # (buffer, part) -> [(start, end, tile)]
    for pr in progs:
        for e in pr.events:
            if e["kind"] == "copy":
                if e["done"] is None:
                    errors.append(f"warp {e['warp']}: tile {e['tile']}'s copy into "
                                  f"{bname(e['buf'])} is still in flight at the end")
                    continue
                writes.setdefault((e["buf"], e["warp"]), []).append(
                    (e["epoch"], e["done"], e["tile"]))
            elif e["kind"] == "write":
                writes.setdefault((e["buf"], e["warp"]), []).append(
                    (e["epoch"], e["epoch"], e["tile"]))
    for key, ws in writes.items():
        ws.sort()
        for a, b in zip(ws, ws[1:]):
            if a[1] >= b[0]:
                errors.append(f"{bname(key[0])} part {key[1]}: tile {b[2]} written in epoch "
                              f"{b[0]} while tile {a[2]}'s write (epochs {a[0]}-{a[1]}) may run")
    starts = {key: [w[0] for w in ws] for key, ws in writes.items()}
    reads = [e for pr in progs for e in pr.events if e["kind"] == "read"]
    for r in reads:
        for part in range(W):
            key = (r["buf"], part)
            # the last write begun by the read's epoch must be the tile's, and done before it
            i = bisect.bisect_right(starts.get(key, []), r["epoch"])
            where = (f"warp {r['warp']}'s {r['why']} in epoch {r['epoch']}, {bname(r['buf'])} "
                     f"part {part}")
            if i == 0:
                errors.append(f"{where}: read before written")
                continue
            start, end, tile = writes[key][i - 1]
            if tile != r["tile"]:
                errors.append(f"{where}: holds {tile} (written in epochs {start}-{end}), "
                              f"not {r['tile']}")
            elif end >= r["epoch"]:
                errors.append(f"{where}: its write (epochs {start}-{end}) may still run")
    for pr, last in zip(progs, warps):
        got = [e["tile"] for e in pr.events if e.get("compute")]
        want = [] if last is INACTIVE else list(range(min(last, n_tiles - 1) + 1))
        if got != want:
            errors.append(f"warp {pr.warp} computes tiles {got}, not {want}")
    return errors


def cases(n_tiles, W, rng):
    """Warps' last_kt: every warp at INT_MAX (a 64-row tile); a 128-row
    window whose first half of warps stops a tile early; a decode-like tile
    (warp 0 alone).  Then, up to 5 tiles, every pattern where there are at
    most 5,000 (warp 0 is always active: it holds the tile's first row);
    else every pattern the kernel can make (last_kt not falling with the
    warp, as the rows' positions do not; padding warps last) and 300 random
    ones, or at more than 5 tiles 100 of the kernel's and 50 random ones.
    last_kt is drawn from 0, 1, n_tiles - 2, n_tiles - 1 and INT_MAX."""
    yield [INT_MAX] * W
    yield [INT_MAX] + [INACTIVE] * (W - 1)
    if n_tiles > 1:
        yield [n_tiles - 2] * (W // 2) + [n_tiles - 1] * (W // 2)
        yield [n_tiles - 2] * (W // 2) + [INACTIVE] * (W // 2)
    values = sorted({0, 1, n_tiles - 2, n_tiles - 1} & set(range(n_tiles))) + [INT_MAX]
    choices = [INACTIVE] + values
    if len(choices) ** W <= 5000 and n_tiles <= 5:
        for pat in itertools.product(choices, repeat=W):
            if pat[0] is not INACTIVE:
                yield list(pat)
        return
    kernel = [list(lasts) + [INACTIVE] * (W - n_active) for n_active in range(1, W + 1)
              for lasts in itertools.combinations_with_replacement(values, n_active)]
    if n_tiles > 5:  # a long run: 100 of them
        kernel = rng.sample(kernel, min(100, len(kernel)))
    yield from kernel
    for _ in range(300 if n_tiles <= 5 else 50):
        yield [rng.choice(values)] + [rng.choice(choices) for _ in range(W - 1)]


MUTANTS = {
    "no-empty-commit": "no empty commit in the prologue at n_tiles 1",
    "copy-before-barrier": "tile kt + 2's copy issued before the loop's barrier",
    "scales-before-unpack": "tile kt + 2's scales loaded before tile kt + 1's unpacking",
    "q-over-buffer-0": "the Q tile over f16 buffer 0 instead of 1",
    "unpack-active-only": "only active warps unpack",
    "unpack-computing-only": "only the warps computing tile kt unpack tile kt + 1",
    "barrier-in-compute": "the loop's barrier inside the computing warps' branch",
    "wait-1-in-loop": "wait_group 1 in the loop (tile kt + 1's group is the newest)",
    "no-loop-barrier": "no barrier in the loop",
}


def trace(n_tiles, W=2):
    """The patch's schedule epoch by epoch: what each buffer holds (visible to
    every warp) when the epoch starts, and what each warp does in it."""
    progs = []
    for w in range(W):
        pr = Program(w)
        patch_schedule(pr, n_tiles, True, n_tiles - 2 if w == 0 else INT_MAX)
        progs.append(pr)
    print(f"n_tiles {n_tiles}, {W} warps: warp 0 stops at tile {n_tiles - 2} (last_kt), "
          f"warp 1 computes every tile; epoch e lies between barriers e and e + 1")
    held = {}
    for epoch in range(progs[0].epoch + 1):
        state = "; ".join(f"{bname(b)}: {held[b]}" for b in sorted(held))
        print(f"epoch {epoch} (holding {state or 'nothing'}):")
        for pr in progs:
            acts = []
            for e in pr.events:
                if e["epoch"] != epoch or e["kind"] == "bar":
                    continue
                name = bname(e["buf"])
                if e["kind"] == "copy":
                    acts.append(f"copy tile {e['tile']} to {name} (landed by the end of epoch "
                                f"{e['done']})")
                else:
                    acts.append(f"{e['kind']} {name} ({e['why']})")
            print(f"  warp {pr.warp}: " + ("; ".join(acts) or "-"))
        for pr in progs[:1]:  # contents visible from the next epoch on
            for e in pr.events:
                if e["kind"] == "write" and e["epoch"] == epoch:
                    held[e["buf"]] = e["tile"]
                if e["kind"] == "copy" and e["done"] == epoch:
                    held[e["buf"]] = e["tile"]


def main():
    if "--trace" in sys.argv:
        trace(int(sys.argv[sys.argv.index("--trace") + 1]))
        return 0
    rng = random.Random(15)
    ok = True
    for name, sched in (("patch", patch_schedule), ("main", main_schedule)):
        for W in (4, 8):
            for n_tiles in (1, 2, 3, 4, 5, 100):
                n, bad = 0, []
                for warps in cases(n_tiles, W, rng):
                    n += 1
                    errs = check(sched, n_tiles, warps)
                    if errs:
                        bad.append((warps, errs))
                print(f"{name:5s} W {W} n_tiles {n_tiles:3d}: {n:5d} cases, {len(bad)} broken"
                      + (f": {pattern(bad[0][0])} {bad[0][1][:2]}" if bad else ""))
                ok &= not bad
    print("broken schedules (each must be caught):")
    for mutant, what in MUTANTS.items():
        found = None
        for W in (4, 8):
            for n_tiles in (1, 2, 3, 5):
                for warps in cases(n_tiles, W, rng):
                    errs = check(patch_schedule, n_tiles, warps, mutant)
                    if errs:
                        found = (W, n_tiles, warps, errs[0])
                        break
                if found:
                    break
            if found:
                break
        print(f"  {what}: " + (f"caught (W {found[0]}, n_tiles {found[1]}, last_kt "
                               f"{pattern(found[2])}):\n    {found[3]}" if found else "NOT CAUGHT"))
        ok &= found is not None
    print("result:", "every case holds, every broken schedule caught" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
