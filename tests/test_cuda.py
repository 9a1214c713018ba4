"""The ``cuda`` backend (issue 13): statement kernels as ``@cuda.jit`` kernels over device stores.

Run here in numba's CUDA simulator (tests/conftest.py sets ``NUMBA_ENABLE_CUDASIM=1`` unless
``TIMERL_GPU=1``), where every thread is Python: tiny sizes. ``scripts/gpu_check.sh`` runs the
same tests on a GPU. Values are held to the numpy backend, numpy loops or the reference
executor; the counter-based RNG to the CPU's draws exactly.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import timerl as tl
from timerl.compiler import optimize
from timerl.kernels import statement

import test_broadcast as tb
import test_spill as ts

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("layout,dtype", [("same", "float32"), ("across", "float64")])
def test_broadcasting_chains_run_in_cuda_kernels_and_match_numpy(layout, dtype):
    prog, bounds, expected, got = tb.build(layout, dtype)
    exe = prog.compile(bounds, backend="cuda")
    exe.run()
    assert exe.stats["kernels"] >= 1 and "evaluate(" not in exe.source
    assert all("@cuda.jit" in src for src in exe.plan.kernels.values())
    for src in exe.plan.kernels.values():  # every operand is moved to the device before any launch
        params = src.split("\ndef kernel(", 1)[1].split(")", 1)[0].split(", ")
        assert all(f"    {x} = dev({x})" in src for x in params if x.startswith("x")), src
    assert exe.stats["peak_device_bytes"] > 0
    tb.assert_chains(expected, got, dtype)


def _draws():
    prog = tl.Program("i")
    (i,), (I,) = prog.dims, prog.bounds
    got = {}
    with prog:
        logits = tl.tensor(np.linspace(-1, 1, 12).reshape(3, 4).astype("float32"), name="logits")
        draws = {"uniform": tl.random.uniform((3, 5), domain=(i,), low=-2.0, high=3.0),
                 "normal": tl.random.normal((7,), domain=(i,), dtype="float64"),
                 "categorical": tl.random.categorical(logits, domain=(i,)),
                 "permutation": tl.random.permutation(9, domain=(i,))}
        for k, d in draws.items():
            tl.sink(d * 1 if k != "permutation" else d + 0, lambda v, p, k=k: got.setdefault(k, {}).__setitem__(
                p["i"], v.copy()), name=k)
    return prog, {I: 3}, got


def test_random_draws_equal_the_cpu_draws():
    prog, bounds, got = _draws()
    prog.compile(bounds, backend="numpy").run()
    want = {k: dict(v) for k, v in got.items()}
    got.clear()
    exe = prog.compile(bounds, backend="cuda")
    exe.run()
    assert any("uniform1" in s for s in exe.plan.kernels.values())
    for k in want:
        for i in want[k]:
            assert got[k][i].dtype == want[k][i].dtype
            np.testing.assert_allclose(got[k][i], want[k][i], rtol=1e-6, err_msg=f"{k} at i = {i}")
            if k in ("categorical", "permutation"):
                np.testing.assert_array_equal(got[k][i], want[k][i])


def test_matmul_reductions_take_and_one_hot_match_numpy_loops():
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((2, 5, 7)).astype("float32")
    b_np = rng.standard_normal((7, 6)).astype("float32")
    idx_np = np.array([[0, 3, -1], [2, 2, 1]], dtype=np.int64)
    prog = tl.Program("i")
    (i,), (I,) = prog.dims, prog.bounds
    got = {}
    with prog:
        a = tl.tensor(a_np, (i,), name="a")
        b = tl.tensor(b_np, name="b")
        idx = tl.tensor(idx_np, (i,), name="idx")
        y = a @ b  # (5, 6)
        outs = {"mm": y * 1.0, "sum": y.sum(axis=0), "mean": y.mean(axis=1), "max": y.max(axis=1),
                "std": y.std(axis=0), "lse": y.logsumexp(axis=1), "argmax": y.argmax(axis=1),
                "take": y.take(idx, axis=1) * 1.0, "onehot": tl.one_hot(idx, 6) * 1.0,
                "perm": y.permute((1, 0)) * 1.0}
        for k, v in outs.items():
            tl.sink(v, lambda v, p, k=k: got.setdefault(k, {}).__setitem__(p["i"], np.array(v)), name=k)
    prog.compile({I: 2}, backend="cuda").run()
    for j in range(2):  # one_hot of an index out of range (-1) is a row of zeros
        y = a_np[j].astype(np.float64) @ b_np.astype(np.float64)
        want = {"mm": y, "sum": y.sum(0), "mean": y.mean(1), "max": y.max(1), "std": y.std(0),
                "lse": np.log(np.exp(y).sum(1)), "argmax": y.argmax(1), "take": np.take(y, idx_np[j], axis=1),
                "onehot": np.array([np.eye(6)[q] if q >= 0 else np.zeros(6) for q in idx_np[j]]), "perm": y.T}
        for k, w in want.items():
            np.testing.assert_allclose(got[k][j], w, rtol=2e-5, atol=2e-5, err_msg=f"{k} at i = {j}")


def test_a_take_out_of_range_names_the_tensor_and_point():
    prog = tl.Program("i")
    (i,), (I,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.arange(8.0).reshape(2, 4).astype("float32"), name="x")
        idx = tl.tensor(np.array([[1, 2], [0, 9]]), (i,), name="idx")
        tl.sink(x.take(idx, axis=1) * 2.0, lambda v, p: None, name="out")
    exe = prog.compile({I: 2}, backend="cuda")
    with pytest.raises(tl.RuntimeFault, match=r"i = 1"):
        exe.run()


def test_reinforce_on_cuda_logs_the_numba_backends_values():
    kw = dict(env="trivial", obs_shape=(2, 2), num_envs=2, num_steps=4, total_steps=16, hidden=4)
    rows = {}
    for backend in ("numba", "cuda"):
        rows[backend] = []
        exe = tl.rl.reinforce(**kw, backend=backend, callback=rows[backend].append)
        exe.run()
    assert exe.stats["h2d_bytes"] > 0 and exe.stats["d2h_bytes"] > 0 and exe.stats["peak_device_bytes"] > 0
    assert len(rows["cuda"]) == len(rows["numba"]) == 2
    for a, b in zip(rows["numba"], rows["cuda"]):
        for k in ("loss", "entropy"):
            assert np.isclose(a[k], b[k], rtol=1e-4, atol=1e-6), (k, a[k], b[k])


def test_a_program_forced_to_swap_keeps_its_device_peak_in_the_budget(tmp_path):
    prog, bounds, out, _ = ts._rollout(I=2, T=6, N=2, D=16)
    prog.compile(bounds, backend="reference").run()
    want = dict(out)
    free = prog.compile(bounds, backend="cuda", passes=ts.HELD)  # the UDF's tuple waits for the returns
    out.clear()
    free.run()
    budget = int(0.6 * free.stats["peak_bytes"])
    exe = prog.compile(bounds, backend="cuda", memory_budget=budget, passes=ts.HELD)
    assert "spill S" in str(exe.schedule) and "swap out " in str(exe.schedule)
    out.clear()
    with tl.config.override(spill_dir=str(tmp_path)):
        exe.run()
    assert out.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(out[k], want[k], rtol=1e-5)
    assert exe.stats["peak_host_bytes"] == exe.stats["spilled_bytes"] > 0
    assert exe.stats["peak_bytes"] == exe.planned_peak() <= budget
    seen = {k: (free.stats[k], exe.stats[k]) for k in ("peak_bytes", "peak_device_bytes", "h2d_bytes", "d2h_bytes")}
    assert exe.stats["peak_device_bytes"] <= budget < free.stats["peak_device_bytes"], (budget, seen)


@pytest.mark.skipif(os.environ.get("TIMERL_GPU") == "1", reason="a GPU is there")
def test_without_a_gpu_or_the_simulator_the_compile_says_what_to_do():
    code = ("import timerl as tl, numpy as np\n"
            "prog = tl.Program('i')\n(i,), (I,) = prog.dims, prog.bounds\n"
            "with prog:\n    tl.sink(tl.tensor(np.ones(2), (i,)) + 1.0, lambda v, p: None)\n"
            "try:\n    prog.compile({I: 2}, backend='cuda')\nexcept tl.CompileError as e:\n    print('ERR', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ERR backend 'cuda' needs a CUDA GPU" in out.stdout and "NUMBA_ENABLE_CUDASIM=1" in out.stdout, out


def test_statement_segments_are_the_numba_backends():
    prog, bounds, _, _ = tb.build("same", "float32")
    a = optimize(prog, bounds, backend="numba")[0].graph.get("segments")
    b = optimize(prog, bounds, backend="cuda")[0].graph.get("segments")
    assert a and a == b
    assert statement.renderable is not None


def test_long_reductions_use_a_block_per_output_and_match_numpy():
    """Reductions over a long axis run one block per output (a tree in shared memory); NaN still
    propagates through max and min."""
    from timerl.kernels import cudart
    R = 3 * cudart.WIDE_R + 5
    x_np = np.random.default_rng(2).standard_normal((R, 3)).astype("float32")
    x_np[7, 2] = np.nan
    prog = tl.Program("i")
    (i,), (I,) = prog.dims, prog.bounds
    got = {}
    with prog:
        x = tl.tensor(np.stack([x_np, x_np * 2.0]), (i,), name="x")
        outs = {"sum": x.sum(axis=0), "mean": x.mean(axis=0), "max": x.max(axis=0), "min": x.min(axis=0),
                "std": x.std(axis=0), "lse": x.logsumexp(axis=0)}
        for k, v in outs.items():
            tl.sink(v, lambda v, p, k=k: got.setdefault(k, {}).__setitem__(p["i"], np.array(v)), name=k)
    exe = prog.compile({I: 2}, backend="cuda")
    exe.run()
    for j, xs in enumerate((x_np, x_np * 2.0)):
        x64 = xs.astype(np.float64)
        m = np.max(x64, axis=0)
        want = {"sum": x64.sum(0), "mean": x64.mean(0), "max": m, "min": x64.min(0), "std": x64.std(0),
                "lse": np.log(np.exp(x64 - np.where(np.isfinite(m), m, 0)).sum(0)) + np.where(np.isfinite(m), m, 0)}
        for k, w in want.items():
            np.testing.assert_allclose(got[k][j], w, rtol=2e-5, atol=2e-5, err_msg=f"{k} at i = {j}")
            assert np.isnan(got[k][j][2]) and not np.isnan(got[k][j][:2]).any(), k


def test_an_acting_loop_moves_one_observation_batch_in_and_one_action_batch_out_per_step():
    """CartPole PPO on cuda with gymnasium's env: each more step of the rollout adds to the transfers exactly the
    environment step's outputs (observations, rewards, dones) to the device and the actions to
    the host; everything else stays on the device."""
    N, moved = 2, {}
    for T in (4, 8):
        exe = tl.rl.ppo(env="CartPole-v1", num_envs=N, num_steps=T, total_steps=N * T, epochs=1, minibatches=1,
                        hidden=4, backend="cuda", compiled_env=False)   # gymnasium's own env, on the host
        exe.run()
        moved[T] = (exe.stats["h2d_bytes"], exe.stats["d2h_bytes"])
    per_step_in = (moved[8][0] - moved[4][0]) / 4
    per_step_out = (moved[8][1] - moved[4][1]) / 4
    assert per_step_in == N * 4 * 4 + N * 4 + N * 1  # float32 observations (N, 4), float32 rewards, bool dones
    assert per_step_out == N * 8  # int64 actions
