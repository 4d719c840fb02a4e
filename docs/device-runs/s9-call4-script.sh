#!/usr/bin/env bash
# session 9, call 4 (1x H200): the GPU tests of the memory-bound kernels at the final tree (the
# kernels of 7b50d2f: call 2 tested the staged-tile commit, reverted since).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout -k 10 560 python -m pytest -q tests/test_kernels_membound.py 2>&1 | tail -4
