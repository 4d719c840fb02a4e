#!/usr/bin/env bash
# session 10, call 3 (one H200): the L2 flush's own cost to the timed call (see s10-call3-flush.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv | tee $OUT/flush.txt
timeout -k 5 240 python docs/device-runs/s10-call3-flush.py 2>&1 | tee -a $OUT/flush.txt
