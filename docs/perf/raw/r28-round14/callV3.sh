#!/bin/sh
# round 14 call V3 (~4 min): main as landed (e7 cleaned, e6, e5 batched only where its grid still fills
# the SMs) gated and benched beside the old main (final) and V2's b756, main first and last.
R=$OUT/v3; . .gpu-b/commonV.sh
mkdir -p /tmp/p; tar xJf .gpu-b/payload-new.tar.xz -C /tmp/p
model m7b llama "$S7"
gate new
bench final m7b 80 512,8192 1,8,64,256; bench new m7b 80 512,8192 1,8,64,256
before 215 && bench b756 m7b 40 512 1,8,64; before 255 && bench new m7b 45 512 1,8,64
cat $R/log.txt
