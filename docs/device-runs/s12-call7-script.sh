#!/usr/bin/env bash
# session 12, call 7 (one H200): does the warm call make cells repeatable?  The small shapes of
# session 11's 36 below 0.95x Inductor (the transposed add's 1-GiB shapes left out), as cells
# (inductor, triton), four passes alternating with and without the warm call (new tensors and a
# fresh Inductor compile for every cell, as in any run).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
timeout -k 5 540 python - > $OUT/passes.txt 2>&1 <<'P'
import fusebench
from fusebench.measure.timing import TimingSettings
S = {"bias_dropout_add": "128x128,256x128,256x2048", "bias_dropout_add_transposed": "1024x128,256x16384,512x16384",
     "bias_gelu": "1024x128,2048x128", "horizontal_reduction_pointwise": "128x512,256x256,256x512,512x16384,512x8192",
     "horizontal_reduction_reduction": "16384x128,512x256", "layernorm": "4096x256,8192x256",
     "norm_chain": "256x256,4096x256", "softmax": "2048x512",
     "pointwise_chain": "1024x512,128x128,2048x128,2048x2048,2048x512,256x512,4096x256,8192x128",
     "softmax_backward": "128x4096,256x1024,256x512,4096x128,8192x128"}
for rep, warm in ((1, True), (2, False), (3, True), (4, False)):
    timing = TimingSettings(**({} if warm else {"warm_call_max_bytes": 0}))
    for case, shapes in S.items():
        df = fusebench.run([case], impls=["inductor", "triton"], shapes=shapes, dtype="fp32",
                           db="/tmp/p.db", metrics="none", timing=timing)
        print(f"pass {rep} warm={warm} {case} done", flush=True)
P
echo "exit $?"; tail -2 $OUT/passes.txt
cp /tmp/p.db $OUT/passes.db
