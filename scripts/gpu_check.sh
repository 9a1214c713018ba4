#!/usr/bin/env bash
# The device check of the cuda backend (issue 13), one command, under 5 minutes on one GPU:
#   1. the cuda tests on the GPU (TIMERL_GPU=1: no simulator),
#   2. `timerl bench` on the trivial env at the paper's setting (PPO, 512 x 250, obs 3x4x4, 2 x 64 MLP,
#      one full-batch update) and REINFORCE at obs 3x64x64 (64 x 500; Monte-Carlo per step, without and
#      with a memory budget of a quarter of its planned peak), each beside PyTorch eager on the same GPU.
# Usage: scripts/gpu_check.sh [OUT_DIR] (PROFILE=1: also a cProfile of the PPO run). Packages the machine lacks can be put as wheels in .gpu_wheels/
# (installed with --no-deps; e.g. islpy, gymnasium, farama-notifications, and numpy 2.4 where the
# machine's numba predates numpy 2.5).
# Each step has its own time limit; a failing step is reported and the next one runs.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TIMERL_GPU=1 PYTHONUNBUFFERED=1
export TIMERL_CACHE_DIR=${TIMERL_CACHE_DIR:-/tmp/timerl-cache}
export TIMERL_DEBUG=1 NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0  # tiny test grids are expected
unset NUMBA_ENABLE_CUDASIM
if compgen -G ".gpu_wheels/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps .gpu_wheels/*.whl 2>&1 | tail -2
fi
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY - <<'EOF'
import numba, numpy, torch
from numba import cuda
print("numba", numba.__version__, "numpy", numpy.__version__, "torch", torch.__version__,
      "| numba.cuda device:", cuda.get_current_device().name if cuda.is_available() else None,
      "| torch.cuda:", torch.cuda.is_available())
# does a device array die with its last reference, or only when the cyclic GC runs? (the device
# pool counts bytes until the owner's finalizer; PPO's measured device peak exceeded the plan here)
import gc, weakref
a = cuda.device_array(16)
owner, fired = a.gpu_data, []
weakref.finalize(owner, fired.append, 1)
del a, owner
print("device array freed by refcount:", bool(fired), end="; ")
gc.collect()
print("after gc.collect():", bool(fired))
EOF

echo "== GPU tests"
timeout 120 $PY -m pytest -q -rA -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -25

PPO="ppo --env trivial --obs-shape 3,4,4 --num-envs 512 --num-steps 250 --hidden 64 --layers 2 --epochs 1 --minibatches 1"
RF="reinforce --env trivial --obs-shape 3,64,64 --num-envs 64 --num-steps 500 --per-step True"
BUDGET=${BUDGET:-406327452}  # a quarter of the planned peak of the unconstrained run (cuda plan)
run() {  # label, limit, command...: one JSON line appended to bench.jsonl
    local label=$1 limit=$2
    shift 2
    echo "== $label"
    local line
    line=$(timeout "$limit" "$@" --json 2>"$OUT/$label.err" | tail -1)
    if [[ $line == \{* ]]; then
        echo "{\"label\": \"$label\", \"result\": $line}" >>"$OUT/bench.jsonl"
    else
        echo "failed or timed out ($limit s):"; tail -15 "$OUT/$label.err"
    fi
}
run ppo-timerl-cuda 60 $PY -m timerl bench $PPO --iterations 2 --backend cuda
run ppo-torch-cuda 20 $PY -m asv_benchmarks.baselines.torch_eager $PPO --iterations 2 --device cuda
run rf-timerl-cuda-budget 50 $PY -m timerl bench $RF --iterations 2 --backend cuda --memory-budget $BUDGET
run rf-timerl-cuda 30 $PY -m timerl bench $RF --iterations 2 --backend cuda
run rf-torch-cuda 20 $PY -m asv_benchmarks.baselines.torch_eager $RF --iterations 2 --device cuda

if [ "${PROFILE:-0}" = 1 ]; then  # where a PPO iteration's time goes (host side), PROFILE=1
    echo "== profile"
    timeout 90 $PY -m cProfile -s tottime -m timerl bench $PPO --iterations 2 --backend cuda 2>&1 | head -45
fi

echo "== summary (s/iter: median of iterations 2..N; peak device MiB: timerl's device pool, torch's max_memory_allocated)"
$PY - "$OUT/bench.jsonl" <<'EOF'
import json, sys
try:
    rows = [json.loads(ln) for ln in open(sys.argv[1])]
except FileNotFoundError:
    rows = []
print(f"{'run':24s} {'env steps/s':>12s} {'s/iter':>8s} {'first it s':>10s} {'compile s':>9s} {'peak dev MiB':>12s}")
for r in rows:
    d = r["result"]
    dev = d.get("peak_device_bytes")
    print(f"{r['label']:24s} {d['env_steps_per_s']:12.0f} {d['s_per_iter']:8.3f} {d.get('first_iter_s') or 0:10.2f} "
          f"{d.get('compile_s') or 0:9.1f} {dev / 2**20 if dev else float('nan'):12.1f}")
EOF
