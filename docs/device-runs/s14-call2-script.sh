#!/usr/bin/env bash
# session 14, call 2 (one H200): s14-call2-probe.py -- the new "discard" L2 flush checked, and
# close shapes timed under the flush modes clean / discard / zero; then the rest of call 1's GPU
# tests (they ran out of time there) and the GPU tests of the flush.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
timeout -k 5 330 python docs/device-runs/s14-call2-probe.py > $OUT/probe.txt 2>&1
log "probe exit $?"; grep -v Warning $OUT/probe.txt | tail -120
timeout -k 5 200 python -m pytest -q -x tests/test_kernels_membound.py tests/test_paired.py \
  -k "transposed or horizontal or tile_2d or autotune or paired or records or flush or interleaved or discard" > $OUT/gpu-tests.txt 2>&1
log "tests exit $?"; tail -3 $OUT/gpu-tests.txt
