#!/usr/bin/env bash
# session 9, call 5 (4x H200): does running four GPUs of one host at once slow each one?  Calls 2
# (four fusebench workers at once, 4x H200) and 3 (one H200) measured the same kernels 7% apart at
# softmax 16384x16384.  The same long_rows measurement (fixed plans, same-process copy rate) on GPU
# 0 alone, on all four at once, then on GPUs 0 and 3 alone again.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
L=/tmp/conc9; mkdir -p $L
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,utilization.gpu --format=csv -l 1 > $L/smi.csv &
SMI=$!
lr() { # gpu, tag
  CUDA_VISIBLE_DEVICES=$1 timeout -k 5 100 python bench/long_rows.py --cases softmax,norm_chain \
    --shapes 4096x16384,16384x16384,2048x32768 --plans "tile:1:16;tile:1:32" --out $L/$2-gpu$1 > $L/$2-gpu$1.txt 2>&1
}
lr 0 solo1
lr 0 conc & lr 1 conc & lr 2 conc & lr 3 conc & wait
lr 0 solo2
lr 3 solo2
kill $SMI
python - $L/*/long_rows.csv <<'PY'
import csv, sys
for f in sys.argv[1:]:
    for r in csv.DictReader(open(f)):
        print(f.split("/")[-2], r["case"], r["shape"], r["plan"][:34], r["time_us"], r["of_peak"], r["copy_gbps"])
PY
head -3 $L/solo1-gpu0.txt
tar czf $OUT/conc.tgz -C /tmp conc9
