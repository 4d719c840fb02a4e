#!/usr/bin/env bash
# session 12, call 5 (one H200): GPU tests of the warm call, the shadow-operand autotuner and the
# element-wise tiles' 1-D grids; then session 11's 36 shapes below 0.95x Inductor again, as cells
# (inductor, triton, memcpy), with the warm call now touching the inputs' pages too; two passes.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
log "GPU tests"
timeout -k 5 200 python -m pytest -q -m gpu tests/test_kernels_membound.py tests/test_runner.py \
  -k "warm or shadow or grid_kind or touch or pointwise or bias" > $OUT/gpu-tests.txt 2>&1
log "tests exit $?"; tail -2 $OUT/gpu-tests.txt | tee -a $OUT/log.txt
log "36 shapes"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 5 400 python - > $OUT/shapes36.txt 2>&1 <<'P'
import fusebench
S = {"bias_dropout_add": "128x128,256x128,256x2048", "bias_dropout_add_transposed":
     "1024x128,256x16384,32768x1024,32768x8192,512x16384,65536x4096", "bias_gelu": "1024x128,2048x128",
     "horizontal_reduction_pointwise": "128x512,256x256,256x512,512x16384,512x8192",
     "horizontal_reduction_reduction": "16384x128,512x256", "layernorm": "4096x256,8192x256",
     "norm_chain": "256x256,4096x256", "softmax": "2048x512",
     "pointwise_chain": "1024x512,128x128,2048x128,2048x2048,2048x512,256x512,4096x256,8192x128",
     "softmax_backward": "128x4096,256x1024,256x512,4096x128,8192x128"}
for rep in (1, 2):
  for case, shapes in S.items():
    df = fusebench.run([case], impls=["inductor", "triton", "memcpy"], shapes=shapes, dtype="fp32",
                       db="/tmp/s36.db", metrics="none")
    p = df.pivot_table(index="shape", columns="impl", values="time_us")
    p["ind/triton"] = p["inductor"] / p["triton"]
    print(f"pass {rep}: {case}"); print(p.round(3).to_string(), flush=True)
P
log "exit $?"
cp /tmp/s36.db $OUT/shapes36.db; cp /tmp/autotune.log $OUT/autotune.log
log done
