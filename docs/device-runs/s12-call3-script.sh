#!/usr/bin/env bash
# session 12, call 3 (one H200): warm code after the flush (s12-call3-warm-code-probe.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 560 python docs/device-runs/s12-call3-warm-code-probe.py > $OUT/warm-code-probe.txt 2>&1
echo "exit $?"; tail -4 $OUT/warm-code-probe.txt
