"""Progress: ``exe.run(progress=True)`` and ``timerl train`` show a tqdm bar on stderr, counted in
iterations of the schedule's outermost loop (training iterations); off, they print nothing."""

import importlib.util
import json

import numpy as np
import pytest

import timerl as tl
from timerl.cli import main


def returns_program(n_iter=3, n_steps=4):
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        r = tl.tensor(np.ones((n_iter, n_steps), "float32"), domain=(i, t), name="r")
        g = tl.placeholder((), "float32", (i, t), name="g")
        g[i, T - 1] = r
        g[i, t] = r + 0.5 * g[i, t + 1]
        tl.sink(g, lambda v, p: None)
    return prog, {I: n_iter, T: n_steps}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_progress_bar_counts_outer_iterations(backend, capsys):
    prog, bounds = returns_program(n_iter=3)
    exe = prog.compile(bounds=bounds, backend=backend)
    assert exe.plan.progress_units == (3, "i")
    exe.run(progress=True)
    cap = capsys.readouterr()
    assert cap.out == ""
    assert "timerl (i loop)" in cap.err and "3/3" in cap.err and "100%" in cap.err
    exe.run()
    assert capsys.readouterr() == ("", "")


def test_progress_without_loops_is_one_step(capsys):
    prog = tl.Program("i")
    with prog:
        tl.sink(tl.const(1.0) * 2.0, lambda v, p: None)
    exe = prog.compile(backend="numpy")
    exe.run(progress=True)
    assert "1/1" in capsys.readouterr().err


def test_progress_of_an_rl_program_is_its_iterations(capsys):
    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=2, num_steps=4, total_steps=24, backend="numpy")
    assert exe.plan.progress_units == (3, "i")
    exe.run(progress=True)
    assert "3/3" in capsys.readouterr().err
    exe.run(progress=False)
    assert capsys.readouterr() == ("", "")


def test_cli_train_bar_on_stderr_json_last_on_stdout(capsys):
    argv = ["train", "reinforce", "--num-envs", "2", "--num-steps", "4", "--total-steps", "24", "--backend", "numpy",
            "--json"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert "train" in cap.err and "3/3" in cap.err and "steps/s" in cap.err
    assert json.loads(cap.out.strip().splitlines()[-1])["env_steps"] == 24
    assert main(argv + ["--quiet"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and json.loads(cap.out.strip().splitlines()[-1])["env_steps"] == 24


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_cli_plot_without_matplotlib_says_what_to_install(tmp_path, capsys):
    rc = main(["train", "reinforce", "--total-steps", "2048", "--plot", str(tmp_path / "curve.png")])
    err = capsys.readouterr().err
    assert rc == 2 and 'pip install -e ".[plot]"' in err and "Traceback" not in err


def test_outermost_loops_are_found_inside_nested_blocks():
    """isl's AST nests blocks: a loop inside Seq(Seq(...)) is still an outermost loop, ticked once per trip."""
    from timerl.schedule.tree import Call, Loop, Seq, outer_loops, ticked, trip_count, walk

    loop = Loop("c0", "0", "3", 1, Call("exec", 1, ["c0"]))
    tree = Seq([Seq([Seq([Call("exec", 0, [])]), loop]), Seq([Call("free", 0, [])])])
    assert outer_loops(tree) == [loop] and trip_count(loop) == 3
    kinds = [c.kind for c in walk(ticked(tree))]
    assert kinds == ["exec", "exec", "tick", "free"]
