#!/usr/bin/env bash
# session 11, call 2 (one H200).  Call 1: the grouped tile order did not help the transposed add at
# its two slow shapes (1.02 / 1.05 ms against Inductor's 0.97 / 0.98); the probe failed before timing.
# 1. GPU tests of the transposed add, whose output now has eager's (and Inductor's) column-major
#    layout: one operand read across its rows, as Inductor's kernel, instead of two.
# 2. The transposed add at the slow shapes, two fine ones and small ones: triton, inductor, memcpy.
# 3. The softmax_backward probe again (Inductor's kept config from its .best_config files).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
log "GPU tests"
timeout -k 5 120 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "transposed" \
  > $OUT/gpu-tests.txt 2>&1; log "tests exit $?"; tail -2 $OUT/gpu-tests.txt | tee -a $OUT/log.txt
log "bias_dropout_add_transposed"
FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune.log timeout -k 5 200 python -m fusebench run bias_dropout_add_transposed \
  --shapes 32768x8192,65536x4096,16384x16384,8192x8192,65536x8192,128x128,512x1024,1024x4096,2048x2048,4096x512,128x65536,65536x128 \
  --impl triton,inductor,memcpy --metrics none --gpus 0 --db /tmp/a.db > $OUT/run-bdat.txt 2>&1; log "exit $?"
log "softmax_backward probe"
timeout -k 5 240 python docs/device-runs/s11-call1-smbwd-probe.py > $OUT/smbwd-probe.txt 2>&1; log "probe exit $?"
log done
