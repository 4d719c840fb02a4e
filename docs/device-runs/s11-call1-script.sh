#!/usr/bin/env bash
# session 11, call 1 (one H200): probes for the shapes below 0.95x Inductor, and new candidates.
# 1. GPU tests: the transposed kernel (new grouped tile order) and every cooperative/streamed plan
#    (a streamed plan with two programs per SM is new).
# 2. softmax_backward 1024/2048x32768: Inductor's kept config, and an Inductor-shaped kernel in
#    variants (s11-call1-smbwd-probe.py).
# 3. bias_dropout_add_transposed at the two slow 2^28-element shapes and two fine ones, triton (with
#    the grouped-order candidates) and inductor, every candidate's time logged.
# 4. layernorm, double_softmax, softmax_backward at 1024x65536 and 8192x65536: candidate times logged.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-540}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
log "GPU tests"
timeout -k 5 150 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "transposed or cooperative_and_streamed" \
  > $OUT/gpu-tests.txt 2>&1; log "tests exit $?"; tail -2 $OUT/gpu-tests.txt | tee -a $OUT/log.txt
log "softmax_backward probe"
timeout -k 5 200 python docs/device-runs/s11-call1-smbwd-probe.py > $OUT/smbwd-probe.txt 2>&1; log "probe exit $?"
log "bias_dropout_add_transposed"
FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune.log timeout -k 5 120 python -m fusebench run bias_dropout_add_transposed \
  --shapes 32768x8192,65536x4096,16384x16384,8192x8192 --impl triton,inductor --metrics none --gpus 0 \
  --db /tmp/a.db > $OUT/run-bdat.txt 2>&1; log "exit $?"
log "long rows"
FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune.log timeout -k 5 $(( $(left) - 10 )) python -m fusebench run layernorm \
  double_softmax softmax_backward --shapes 1024x65536,8192x65536 --impl triton --metrics none --gpus 0 \
  --db /tmp/b.db > $OUT/run-rows.txt 2>&1; log "exit $?"
log done
