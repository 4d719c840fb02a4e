#!/usr/bin/env bash
# session 13, call 3 (one H200): (1) s13-call3-probe.py, layernorm with bigger first-pass steps on
# fewer programs, timed and counted; (2) the issue's traffic check: every memory-bound case's
# `triton` cell at 8192x8192 (fp32) under Nsight Compute through `fusebench run --ncu`.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
P=docs/device-runs/s13-call3-probe.py
timeout -k 5 200 python $P time > $OUT/probe-time.txt 2>&1
echo "time exit $?"; grep -v Warning $OUT/probe-time.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout -k 5 150 $NCU --target-processes all --cache-control none --clock-control none \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --print-units base --csv \
  --log-file $OUT/probe-ncu.csv --nvtx --nvtx-include probe/ python $P ncu > $OUT/probe-ncu-log.txt 2>&1
echo "ncu exit $?"; wc -l $OUT/probe-ncu.csv
CASES="pointwise_chain softmax double_softmax softmax_backward layernorm norm_chain horizontal_reduction_pointwise horizontal_reduction_reduction bias_gelu bias_dropout_add bias_dropout_add_transposed"
timeout -k 5 360 python -m fusebench run $CASES --impl triton --shapes 8192x8192 --dtype fp32 --metrics none --ncu \
  --db $OUT/ncu8192.db > $OUT/ncu8192.txt 2>&1
echo "run exit $?"; tail -30 $OUT/ncu8192.txt
python - <<PY
import sqlite3
c = sqlite3.connect("$OUT/ncu8192.db")
for r in c.execute("select case_name, status, time_us, min_bytes, dram_read_bytes, dram_write_bytes, traffic_amplification, na from cells"):
    print(r)
PY
