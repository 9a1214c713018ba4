"""The kernel cache: under TIMERL_CACHE_DIR, listed by ``timerl cache info``, emptied by ``timerl cache clear``."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

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


NUMPY_ONLY = """
import sys, numpy as np, timerl as tl
prog = tl.Program("t")
(t,) = prog.dims
seen = []
with prog:
    x = tl.tensor(np.ones((3, 5), "float32"), domain=(t,), name="x")
    tl.sink(tl.exp(x) * 2.0 + 1.0, lambda v, p: seen.append(float(v.sum())))
prog.compile(bounds={"T": 3}, backend="numpy").run()
print(len(seen), round(seen[0], 3), "numba" in sys.modules, "llvmlite" in sys.modules)
"""


def test_numpy_backend_never_imports_numba(tmp_path):
    # numba's import and its registries hold about 120 MB of a process: the numpy backend needs none of it
    out = run(["-c", NUMPY_ONLY], tmp_path / "cache").split()
    assert out == ["3", str(round(5 * (2 * float(np.exp(np.float32(1))) + 1), 3)), "False", "False"]


LOADED = """
import numpy as np, timerl as tl
from timerl.kernels import cpu
prog = tl.Program("t")
(t,) = prog.dims
seen = []
with prog:
    x = tl.tensor(np.arange(10, dtype="float32").reshape(2, 5) / 4, domain=(t,), name="x")
    tl.sink(tl.exp(x) * 2.0 + 1.0, lambda v, p: seen.append((p, v.copy())))
prog.compile(bounds={"T": 2}, backend="numba").run()
libs = [c.library for k in cpu._loaded.values() for c in k.overloads.values()]
assert libs and all(lib._shared_module is None for lib in libs), "linking IR kept"
want = np.exp(np.arange(10, dtype="float32").reshape(2, 5) / 4) * np.float32(2) + np.float32(1)
assert len(seen) == 2 and all(np.allclose(v, want[p["t"]], rtol=1e-6) for p, v in seen), seen
print("ok")
"""


def test_kernels_keep_no_linking_ir(tmp_path):
    # compiled (first process) and loaded from the on-disk cache (second): the LLVM module numba keeps
    # for linking is freed, and the kernel still computes the same values through its dispatcher
    assert run(["-c", LOADED], tmp_path / "cache").strip() == "ok"
    assert run(["-c", LOADED], tmp_path / "cache").strip() == "ok"
