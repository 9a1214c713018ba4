"""Eager baselines for ``timerl bench``: the same PPO and REINFORCE as a plain numpy loop
(``numpy_eager``) and as a CleanRL-style PyTorch loop (``torch_eager``), one thread each.

    python -m asv_benchmarks.baselines.numpy_eager ppo --env CartPole-v1 --iterations 5 --json
    python -m asv_benchmarks.baselines.torch_eager reinforce --env trivial --obs-shape 3,4,4 --json
"""

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS")


def pin_threads(environ):
    """Set every BLAS/OpenMP pool size in ``environ`` (a dict or ``os.environ``) to 1."""
    for k in THREAD_VARS:
        environ[k] = "1"
    return environ
