#!/usr/bin/env bash
# session 13, call 2 (one H200): s13-call2-probe.py -- per-lane running max for the streamed
# (double) softmax, layernorm's weight/bias loads, fewer streamed programs than SMs; timed, then
# each variant once under Nsight Compute (DRAM bytes; our flush before each, no ncu cache control).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
P=docs/device-runs/s13-call2-probe.py
timeout -k 5 300 python $P time > $OUT/probe-time.txt 2>&1
echo "time exit $?"; cat $OUT/probe-time.txt | grep -v Warning
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout -k 5 240 $NCU --target-processes all --cache-control none --clock-control none \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --print-units base --csv \
  --log-file $OUT/probe-ncu.csv --nvtx --nvtx-include probe/ python $P ncu > $OUT/probe-ncu-log.txt 2>&1
echo "ncu exit $?"; tail -3 $OUT/probe-ncu-log.txt; wc -l $OUT/probe-ncu.csv
