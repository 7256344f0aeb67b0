#!/usr/bin/env python3
"""A model of the wgmma GEMM's stage protocol with the activation tile
multicast across a cluster (11-gemm-tma-multicast.patch), run under random
interleavings.  It checks the protocol, not the CUDA code: the barrier
counts, the parity waits and the releases the last tiles leave out, as
kernels/cuda/gemm_sm90.cu implements them after the patch.  (The cluster
start is not modelled: barriers exist from the first step here, which the
kernel's cluster barrier after the inits provides.)

The model, per CTA c of a cluster of cl:
  full[c][s]:  init P + 1 (P producer threads + thread 0's expect_tx);
               expect_tx adds the whole tile's bytes, each CTA's multicast
               part completes its bytes on every CTA's full[s].
  empty[c][s]: init 32 W cl (W consumer warps a CTA, each arriving 32 at
               once on every CTA's empty[s]).
  producer p, tile i (stage s = i % S): when i >= S, wait empty[s] for
    parity (i / S - 1) & 1; thread 0: expect_tx(full[s], tile bytes), issue
    its part's copy (delivered later: bytes into every CTA's stage, then
    complete_tx there); all: write the weight part, arrive on full[s].
  consumer warp, tile i: wait full[s] for parity (i / S) & 1; read; release
    as sm90_consume does (the tile before at each wgmma wait<1>, both at a
    chunk's end): unless i + S >= nk, arrive 32 on every CTA's empty[s].
  Every thread arrives on the cluster barrier after its loop and waits on
  it before it ends; a CTA exits when its threads are done.  A copy lands
  in each destination CTA on its own (the multicast is not atomic).

Checked: no deadlock; a consumer sees both activation parts and the weight
part of its own tile; nothing is written into a stage that a consumer of
that CTA still reads; no arrival, byte or copy reaches a CTA that exited,
and no copy lands after the CTA that issued it exited;
mbarrier transaction counts stay within the hardware's +-(2^20 - 1).

Usage: gemm-cluster-protocol.py [runs]  (exit status 0: every run passed)

It can fail: with empty counting one CTA's consumers, with full's count
missing the expect_tx arrival, with a consumer waiting on the wrong parity,
or without the closing cluster barrier (a CTA's copy then lands in its peer
after it exited), it reports the broken rule within the first ten runs.
With the barrier, sending the last S releases too would also be safe.
"""
import random
import sys

TX_LIMIT = (1 << 20) - 1


class Barrier:
    def __init__(self, count):
        self.count = count
        self.pending = count
        self.tx = 0
        self.phase = 0  # completed phases

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, n=1, expect=0):
        assert self.pending >= n, "more arrivals than the barrier's count"
        self.tx += expect
        assert abs(self.tx) <= TX_LIMIT, "tx-count out of range"
        self.pending -= n
        self._maybe_complete()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        assert abs(self.tx) <= TX_LIMIT, "tx-count out of range"
        self._maybe_complete()

    def try_wait(self, parity):
        # mbarrier.try_wait.parity: true once the phase of that parity
        # completed, i.e. the current (incomplete) phase has the other one
        return (self.phase & 1) != parity


class Cluster:
    def __init__(self, rng, cl, S, nk, chunk_kt, P, W, part_bytes, closing_barrier=True):
        self.rng, self.cl, self.S, self.nk, self.chunk_kt = rng, cl, S, nk, chunk_kt
        self.closing_barrier = closing_barrier
        self.arrived = 0  # threads of the cluster past their loop
        self.eager = rng.choice([0.3, 0.02])  # how soon copies land
        self.P, self.W, self.part_bytes = P, W, part_bytes
        self.full = [[Barrier(P + 1) for _ in range(S)] for _ in range(cl)]
        self.empty = [[Barrier(32 * W * cl) for _ in range(S)] for _ in range(cl)]
        # stage contents: per CTA and stage, the tile each part holds
        self.act = [[[None] * cl for _ in range(S)] for _ in range(cl)]
        self.wgt = [[None] * S for _ in range(cl)]
        # which tile each consumer warp of a CTA is reading in each stage
        self.reading = [[set() for _ in range(S)] for _ in range(cl)]
        self.in_flight = []  # copy parts not yet landed: (src, tile, destination)
        self.exited = [False] * cl
        self.agents = []
        for c in range(cl):
            for p in range(P):
                self.agents.append(self.producer(c, p))
            for w in range(W):
                self.agents.append(self.consumer(c, w))
        self.alive = {c: P + W for c in range(cl)}

    def check_live(self, c, what):
        assert not self.exited[c], f"{what} reached CTA {c} after it exited"

    def write_stage(self, c, s, tile, part=None):
        self.check_live(c, "a stage write")
        assert not self.reading[c][s], (
            f"CTA {c} stage {s} written (tile {tile}) while warps read it")
        if part is None:
            self.wgt[c][s] = tile
        else:
            self.act[c][s][part] = tile

    def deliver(self, k):
        src, tile, c = self.in_flight.pop(k)
        assert not self.exited[src], f"CTA {src}'s copy of tile {tile} landed after CTA {src} exited"
        s = tile % self.S  # the multicast: each CTA at the same offset
        self.write_stage(c, s, tile, part=src)
        self.full[c][s].complete_tx(self.part_bytes)

    def closing(self):
        """The kernel's closing cluster barrier: arrive, then wait for all."""
        if not self.closing_barrier:
            return
        self.arrived += 1
        while self.arrived < len(self.agents):
            yield

    def producer(self, c, p):
        S, nk = self.S, self.nk
        for i in range(nk):
            s = i % S
            if i >= S:
                while not self.empty[c][s].try_wait((i // S - 1) & 1):
                    yield
            if p == 0:
                self.full[c][s].arrive(1, expect=self.part_bytes * self.cl)
                self.in_flight.extend((c, i, d) for d in range(self.cl))
                yield
            self.write_stage(c, s, i)  # the weight part (every thread its share)
            yield
            self.full[c][s].arrive(1)
            yield
        yield from self.closing()

    def release(self, c, w, i):
        s = i % self.S
        self.reading[c][s].discard(w)
        if i + self.S < self.nk:
            for r in range(self.cl):
                self.check_live(r, "an empty arrival")
                self.empty[r][s].arrive(32)

    def consumer(self, c, w):
        S, nk = self.S, self.nk
        pending = None
        for i in range(nk):
            s = i % S
            while not self.full[c][s].try_wait((i // S) & 1):
                yield
            assert all(t == i for t in self.act[c][s]), (
                f"CTA {c} warp {w} tile {i}: activation parts {self.act[c][s]}")
            assert self.wgt[c][s] == i, f"CTA {c} warp {w} tile {i}: weights {self.wgt[c][s]}"
            self.reading[c][s].add(w)
            yield
            if (i + 1) % self.chunk_kt == 0 or i + 1 == nk:
                if pending is not None:
                    self.release(c, w, pending)
                self.release(c, w, i)
                pending = None
            else:
                if pending is not None:
                    self.release(c, w, pending)
                pending = i
            yield
        yield from self.closing()

    def run(self):
        agents = list(enumerate(self.agents))
        owner = {}
        for idx, _ in agents:
            owner[idx] = idx // (self.P + self.W)
        live = dict(agents)
        stuck = 0
        while live or self.in_flight:
            if self.in_flight and (not live or self.rng.random() < self.eager):
                self.deliver(self.rng.randrange(len(self.in_flight)))
                stuck = 0
                continue
            idx = self.rng.choice(list(live))
            before = self.state()
            try:
                next(live[idx])
            except StopIteration:
                del live[idx]
                c = owner[idx]
                self.alive[c] -= 1
                if self.alive[c] == 0:
                    self.exited[c] = True
                stuck = 0
                continue
            stuck = stuck + 1 if self.state() == before and not self.in_flight else 0
            if self.arrived != getattr(self, "_arrived_seen", 0):
                self._arrived_seen, stuck = self.arrived, 0
            assert stuck < 20000, "deadlock: no thread can make progress"
        return True

    def state(self):
        return (tuple(b.phase for row in self.full for b in row),
                tuple(b.phase for row in self.empty for b in row),
                tuple(b.pending for row in self.full for b in row),
                tuple(b.pending for row in self.empty for b in row))


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(1)
    for run in range(runs):
        cl = rng.choice([1, 2])
        S = rng.choice([3, 4])
        nk = rng.choice([1, 2, 3, 4, 5, 7, 16, 17, 33, 64])
        chunk_kt = rng.choice([16, 4])
        cluster = Cluster(rng, cl, S, nk, chunk_kt, P=rng.choice([1, 3]),
                          W=rng.choice([1, 2, 4]), part_bytes=16384 // cl)
        try:
            cluster.run()
        except AssertionError as e:
            print(f"run {run} (cl={cl} S={S} nk={nk} chunk={chunk_kt}): FAIL: {e}")
            return 1
    print(f"{runs} runs: every interleaving kept the protocol")
    return 0


if __name__ == "__main__":
    sys.exit(main())
