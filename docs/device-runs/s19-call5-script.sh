#!/usr/bin/env bash
# session 19, call 5 (asked for an H200; it ran on the H100 this session held, as the device tool does
# for a warm one-GPU machine): the five row-wise cases at their long-row and few-row shapes (the
# issue's weak spots for the compiler, and where the H100 falls short of 0.9 of its copy rate),
# eager / inductor / triton / memcpy, fp32, at this commit; the copy ceiling of this GPU first.
# The last H200 measurement of these kernels was session 15's, before the tagged exchange (s17)
# and the weight-holding layernorm plans (s18).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "ceilings"
timeout -k 5 60 python -m fusebench ceilings --db $OUT/h200.db >> $OUT/log.txt 2>&1
log "exit $?"
SHAPES=128x65536,256x65536,512x65536,1024x65536,2048x65536,4096x65536,1024x32768,2048x32768,4096x32768,16384x16384
log "run"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 15 $(( ${TOTAL_S:-570} - $(date +%s) + T0 )) python -m fusebench run \
  softmax double_softmax layernorm norm_chain softmax_backward --shapes $SHAPES --impl eager,inductor,triton,memcpy \
  --metrics none --db $OUT/h200.db > /tmp/run.txt 2>&1
log "exit $?"; tail -8 /tmp/run.txt >> $OUT/log.txt
[ -f /tmp/autotune.log ] && gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log done
