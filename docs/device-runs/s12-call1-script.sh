#!/usr/bin/env bash
# session 12, call 1 (one H200): the small-call fixed cost (s12-call1-small-call-probe.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/smi.txt 2>&1
timeout -k 5 500 python docs/device-runs/s12-call1-small-call-probe.py > $OUT/small-call-probe.txt 2>&1
echo "exit $?"; tail -5 $OUT/small-call-probe.txt
