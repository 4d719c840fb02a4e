#!/usr/bin/env bash
# session 10, call 4 (4x H200): the standing again under the "clean" flush, now the default (call 3:
# the evict_last flush left L2 full of dirty lines that the timed call wrote back, 3-5 us at 128 MiB).
# 1. GPU tests of the flush kernels.
# 2. Every memory-bound case at every grid shape whose input exceeds 64 MiB, `triton` and `memcpy`
#    (as call 1, which used the evict_last flush), then `inductor` at the same cells, one worker per GPU.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-540}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
log "GPU tests"
timeout -k 5 60 python -m pytest -q tests/test_kernels_membound.py -k flush 2>&1 | tail -3 | tee -a $OUT/log.txt
CASES="softmax_backward layernorm double_softmax softmax norm_chain horizontal_reduction_pointwise
       horizontal_reduction_reduction pointwise_chain bias_gelu bias_dropout_add bias_dropout_add_transposed"
SHAPES=65536x512,32768x1024,16384x2048,8192x4096,4096x8192,2048x16384,1024x32768,512x65536,65536x1024,32768x2048,16384x4096,8192x8192,4096x16384,2048x32768,1024x65536,65536x2048,32768x4096,16384x8192,8192x16384,4096x32768,2048x65536,65536x4096,32768x8192,16384x16384,8192x32768,4096x65536,65536x8192,32768x16384,16384x32768,8192x65536,65536x16384,32768x32768,16384x65536,65536x32768,32768x65536,65536x65536
log "standing: triton, memcpy"
timeout -k 10 $(( $(left) - 30 )) python -m fusebench run $CASES --shapes $SHAPES --impl triton,memcpy \
  --metrics none --gpus all --db $OUT/standing.db > /tmp/standing-run.txt 2>&1
log "exit $?"; tail -4 /tmp/standing-run.txt | tee -a $OUT/log.txt
python bench/standing.py $OUT/standing.db --all > $OUT/standing.txt 2>&1
log "inductor"
timeout -k 10 $(( $(left) - 15 )) python -m fusebench run $CASES --shapes $SHAPES --impl inductor \
  --metrics none --gpus all --db $OUT/inductor.db > /tmp/inductor-run.txt 2>&1
log "exit $?"; tail -4 /tmp/inductor-run.txt | tee -a $OUT/log.txt
log done
