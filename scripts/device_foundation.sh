#!/usr/bin/env bash
# One device call: environment probe + the foundation run (all cases, quick shapes).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $OUT/env.txt
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name())" | tee -a $OUT/env.txt
which ncu >> $OUT/env.txt 2>&1; ncu --version >> $OUT/env.txt 2>&1
python3 -m fusebench.cli run --impl ${IMPLS:-eager,inductor,sdpa-flash,sdpa-efficient,sdpa-cudnn} --db $OUT/fb.db "$@" 2>&1 | tee $OUT/run.txt
