#!/usr/bin/env bash
# session 14, call 1 (one H200): GPU tests of this session's candidates (column-major output for
# bias_dropout_add_transposed, evict_first loads for horizontal_reduction_pointwise, small tiles for
# small element-wise tensors) and of the autotuner's interleaved re-timing of close candidates;
# then bench/paired.py (our kernel against Inductor, rep by rep in turn, the chosen plans printed)
# at the shapes session 13 found below or near 0.95x, the bias_dropout_add_transposed ones twice
# (two processes, each autotuning afresh) to see whether the choice and the verdict hold.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
timeout -k 5 150 python -m pytest -q tests/test_kernels_membound.py tests/test_paired.py \
  -k "transposed or horizontal or tile_2d or autotune or paired or records or registered" > $OUT/gpu-tests.txt 2>&1
log "tests exit $?"; tail -3 $OUT/gpu-tests.txt
pair() {  # case shapes rounds tag
  FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune-$4.log timeout -k 5 150 python bench/paired.py $1 $2 --rounds $3 \
    --csv $OUT/paired.csv 2>>$OUT/paired-err.txt | tee -a $OUT/paired.txt
  log "$1 $4 exit ${PIPESTATUS[0]}"
}
BDAT=128x16384,256x16384,128x32768,32768x2048,256x8192,4096x1024,2048x2048,512x1024
pair bias_dropout_add_transposed $BDAT 300 bdat1
pair horizontal_reduction_pointwise 512x8192,512x16384 300 hrp
pair pointwise_chain 256x1024,256x2048,1024x256 300 pw
pair bias_dropout_add_transposed $BDAT 300 bdat2
pair bias_dropout_add_transposed 32768x8192,65536x4096,32768x1024 100 bdat-large
log done
