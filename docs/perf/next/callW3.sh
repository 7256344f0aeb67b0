#!/bin/sh
# round 15 call W3 (~5 min, warm after W2; written in r28): a1, the q8_0 prompt attention with one barrier
# a key tile (attn-unpack-after-compute.md, its gates 2-6), and a0, the unpacking's chunk index alone.
# Then the elementwise batching threshold at 16-48 sequences (t2, t0).  Payload: build-round15.sh.  Carry [".gpu-b", ".device-libs"].
R=/tmp/resW3; . .gpu-b/commonW.sh
model m2 llama "$M2" "" 2; model m7b llama "$S7"
gate a1; gate a0
LONG=$(python3 -c 'print("the quick brown fox jumps over the lazy dog " * 140)')
for t in racecheck synccheck memcheck; do timeout 60 compute-sanitizer --tool $t --kernel-name kns=attn_tc_kernel $P/a1/llmq-run -m /tmp/m2.gguf -p "$LONG" -n 2 --ignore-eos > $R/$t-a1.txt 2>&1
  log "a1 $t exit $? $(grep -E 'SUMMARY' $R/$t-a1.txt | head -1)"; done
bits final; bits a1; same final a1; bits a0; same final a0
for v in final a1 a0 final; do timeout 40 $P/$v/bench-cuda-ops /tmp/m7b.gguf > $R/ops-$v.md 2>>$R/runs.txt; log "ops $v exit $?"
  grep -E "^\| attention \| .* 1 seqs x (512|8192) ctx" $R/ops-$v.md | sed "s/^/$v /" >> $L; done
bench final m7b 40 512,8192 1; bench a1 m7b 40 512,8192 1; bench final m7b 40 512,8192 1; before 260 && bench a0 m7b 40 512,8192 1
# the elementwise kernels' batching threshold (elementwise-threshold.md): main, half the grid, always
for v in t2 t0; do before 420 && { timeout 60 $P/$v/gpu-parity --ops > $R/parity-ops-$v.txt 2>&1; log "$v parity ops exit $? $(tail -1 $R/parity-ops-$v.txt)"; }; done
for v in final t2 t0 final; do before 560 && bench $v m7b 30 512 16,32,48; done
tar czf $OUT/resW3.tgz -C $R . ; cat $L
