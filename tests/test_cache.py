"""The kernel cache: under TIMERL_CACHE_DIR, listed by ``timerl cache info``, emptied by ``timerl cache clear``."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

PROGRAM = """
import numpy as np, timerl as tl
prog = tl.Program("t")
(t,) = prog.dims
with prog:
    x = tl.tensor(np.ones((3, 5), "float32"), domain=(t,), name="x")
    tl.sink(tl.exp(x) * 2.0 + 1.0, lambda v, p: None)
prog.compile(bounds={"T": 3}, backend="numba").run()
"""


def run(args, cache_dir):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}  # numba's files beside the sources
    env.update(TIMERL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_cache_info_and_clear(tmp_path):
    cache = tmp_path / "cache"
    assert json.loads(run(["-m", "timerl", "cache", "info", "--json"], cache))["kernels"] == 0
    run(["-c", PROGRAM], cache)
    kernels = cache / "kernels"
    assert list(kernels.glob("k_*.py")) and list((kernels / "__pycache__").glob("*.nbi"))
    info = json.loads(run(["-m", "timerl", "cache", "info", "--json"], cache))
    assert info["path"] == str(kernels) and info["kernels"] >= 1 and info["bytes"] > 0
    assert "kernels" in run(["-m", "timerl", "cache", "info"], cache)
    cleared = json.loads(run(["-m", "timerl", "cache", "clear", "--json"], cache))
    assert cleared["cleared"] and cleared["kernels"] == info["kernels"]
    assert not kernels.exists()
    run(["-c", PROGRAM], cache)  # a cleared cache is rebuilt on the next compile
    assert list(kernels.glob("k_*.py"))
