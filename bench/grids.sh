#!/usr/bin/env bash
# The full shape grids of the memory-bound cases with eager, Inductor and fusebench's Triton
# kernels, then the HTML report.  About 3,300 cells: on four H200s (one worker per GPU, GPUS=all,
# the default) about 0.8 cells per second per GPU, so some 18 minutes; it can be stopped at any time
# (every finished cell is stored) and finished with `fusebench run --resume ID --gpus all`.
#
#   GPUS=0,1 bash bench/grids.sh [DB] [REPORT]
set -euo pipefail
DB=${1:-grids.db}
REPORT=${2:-grids.html}
CASES="pointwise_chain softmax double_softmax softmax_backward layernorm norm_chain
       horizontal_reduction_pointwise horizontal_reduction_reduction bias_gelu bias_dropout_add
       bias_dropout_add_transposed"
fusebench ceilings --db "$DB"
fusebench run $CASES --shapes grid --impl eager,inductor,triton --metrics roofline --gpus "${GPUS:-all}" --db "$DB"
fusebench report --db "$DB" -o "$REPORT" --pair inductor/eager --pair triton/inductor --pair triton/eager
