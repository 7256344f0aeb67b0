#!/bin/sh
# r26 call S4: memcheck of v1, ncu source-level stalls of the 1-row q4_K matvec and the 64-row q4_K GEMM (main)
R=/tmp/resS4; . .gpu-b/commonS.sh
#timeout 150 compute-sanitizer --tool memcheck $P/v1/llmq-run -m /tmp/m2.gguf -p "Once upon a time" -n 16 --ignore-eos > $R/memcheck-v1.txt 2>&1; log "memcheck v1 exit $? $(grep 'ERROR SUMMARY' $R/memcheck-v1.txt)"
for k in "mmv_kernel<.int.12, .(bool.1|true)>" "gemm_sm90_kernel<.int.12, .int.2, .int.1>"; do n=$(echo "$k" | tr -c 'a-z0-9' _)
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" --launch-skip 3 --launch-count 1 --import-source yes \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section SourceCounters --section MemoryWorkloadAnalysis \
    -o $R/ncu-$n $F/bench-cuda-ops /tmp/m2.gguf > $R/ncu-$n.log 2>&1; log "ncu $k exit $?"
  ncu --import $R/ncu-$n.ncu-rep --page details > $R/ncu-$n.txt 2>&1
  ncu --import $R/ncu-$n.ncu-rep --page source --csv --print-source sass > $R/ncu-$n-source.csv 2>&1
  python3 bench/ncu-stalls.py $R/ncu-$n-source.csv 30 > $R/stalls-$n.md 2>&1; log "stalls $k exit $?"
  cuobjdump -sass -fun "$(grep -o '_Z[0-9A-Za-z_]*' $R/ncu-$n-source.csv | head -1)" $F/bench-cuda-ops > $R/sass-$n.txt 2>&1
done
rm -f $R/*.ncu-rep
tar czf "$OUT/resS4.tgz" -C $R .
for f in $R/stalls-*.md; do echo "== $f"; head -60 $f; done
for f in $R/ncu-*.txt; do echo "== $f"; grep -E "Duration|Issued Warp|Eligible|Active Warps|Memory Throughput|Registers|Achieved Occupancy|No Eligible" $f | head -20; done
cat $R/log.txt
