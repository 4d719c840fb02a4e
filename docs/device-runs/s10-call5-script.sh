#!/usr/bin/env bash
# session 10, call 5 (one H200): diagnosis only, for the next session.  The four shapes where call 4
# found our kernel below 0.95x Inductor: every candidate plan's time (autotune log) and Inductor's
# generated kernels (`fusebench show`), beside a same-size shape that is fine (16384x16384).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
L=/tmp/s10c5; mkdir -p $L
FUSEBENCH_AUTOTUNE_LOG=$L/autotune.log timeout -k 5 150 python -m fusebench run bias_dropout_add_transposed \
  --shapes 32768x8192,65536x4096,16384x16384 --impl triton,inductor --metrics kernels --gpus 0 --db $L/a.db > $L/run-bdat.txt 2>&1
FUSEBENCH_AUTOTUNE_LOG=$L/autotune.log timeout -k 5 100 python -m fusebench run softmax_backward \
  --shapes 1024x32768,2048x32768 --impl triton,inductor --metrics kernels --gpus 0 --db $L/b.db > $L/run-smbwd.txt 2>&1
for cs in "bias_dropout_add_transposed 32768x8192" "softmax_backward 1024x32768"; do
  set -- $cs
  timeout -k 5 100 python -m fusebench show $1 --shape $2 --impl inductor > $L/show-$1-$2.txt 2>&1
done
tar czf $OUT/diag.tgz -C /tmp s10c5
tail -15 $L/run-bdat.txt $L/run-smbwd.txt
