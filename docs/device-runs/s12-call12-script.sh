#!/usr/bin/env bash
# session 12, call 12 (one H200): the shapes below 0.95x Inductor in call 8's grid again, as cells
# (eager, inductor, triton), twice, after the head start, now given when the GPU has caught up at the spin
# (call 10 had pointwise_chain 256x1024 at 17.5 us in one pass, 4.3 in the other); GPU tests first.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
timeout -k 5 100 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "warm or touch or head_start or shadow or grid_kind" > $OUT/gpu-tests.txt 2>&1; echo "tests exit $?"; tail -2 $OUT/gpu-tests.txt
timeout -k 5 400 python - > $OUT/recheck.txt 2>&1 <<'P'
import fusebench
S = {"double_softmax": "512x1024", "softmax_backward": "2048x4096", "pointwise_chain": "256x1024,256x2048",
     "horizontal_reduction_pointwise": "512x8192,512x16384", "bias_dropout_add_transposed": "2048x2048,128x16384"}
for rep in (1, 2):
    for case, shapes in S.items():
        df = fusebench.run([case], impls=["eager", "inductor", "triton"], shapes=shapes, dtype="fp32",
                           db="/tmp/r.db", metrics="none")
        p = df.pivot_table(index="shape", columns="impl", values="time_us")
        q = df.set_index(["shape", "impl"])[["time_q20_us", "time_q80_us"]].round(2)
        p["ind/triton"] = p["inductor"] / p["triton"]
        print(f"pass {rep}: {case}"); print(p.round(3).to_string()); print(q.to_string(), flush=True)
P
echo "exit $?"; cp /tmp/r.db $OUT/recheck.db
