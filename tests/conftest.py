import os

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".numba_cache"))
# every compile in the suite verifies the PDG after each pass (timerl.passes.verify)
os.environ.setdefault("TIMERL_VERIFY", "1")
# the cuda backend's tests run in numba's CUDA simulator unless TIMERL_GPU=1 (scripts/gpu_check.sh, on
# a machine with a GPU); numba reads this when first imported, so before any test module imports it
if os.environ.get("TIMERL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
