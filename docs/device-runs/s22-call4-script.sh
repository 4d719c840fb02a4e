#!/usr/bin/env bash
# session 22, call 4 (two H100s): bias_dropout_add_transposed's grid shapes with a warm call (traffic
# up to 1 GiB) again, with the autotuner's warm call now dropping its outputs (838af37): half the
# shapes on each GPU, each half its own store (merged afterwards).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
SH=$(python - <<'PY'
from fusebench.runner.plan import plan_cells
cells = plan_cells(["bias_dropout_add_transposed"], ["triton"], "grid", "fp32", "cpu")
sh = [f"{m}x{n}" for m, n in (c.shape for c in cells) if m * n * 16 <= 1 << 30]
print(",".join(sh[0::2]), ",".join(sh[1::2]))
PY
)
set -- $SH
for g in 0 1; do
  shapes=$([ $g = 0 ] && echo $1 || echo $2)
  CUDA_VISIBLE_DEVICES=$g FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune-$g.log timeout -k 10 ${TOTAL_S:-330} \
    python -m fusebench run bias_dropout_add_transposed --shapes $shapes --impl eager,inductor,triton,memcpy \
    --metrics none --db $OUT/bdat-$g.db > /tmp/bdat-$g.txt 2>&1 &
done
wait; grep -h -v "━" /tmp/bdat-*.txt | grep -E "cells|interrupted|Error" ; rm -f $OUT/*.db.log
