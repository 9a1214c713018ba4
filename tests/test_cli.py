"""The command line: one-line errors with a non-zero exit, never a traceback; the walkthrough runs."""

import os
import pathlib
import runpy
import subprocess
import sys

import pytest

from timerl.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv,match", [
    (["train", "ppo", "--env", "NoSuchEnv-v3"], "unknown environment id 'NoSuchEnv-v3'"),
    (["train", "reinforce", "--env", "FrozenLake-v1"], "only Box observations are supported"),
    (["train", "ppo", "--env", "Blackjack-v1"], "observation space"),
    (["train", "ppo", "--minibatches", "3"], "must divide"),
    (["train", "ppo", "--lr", "abc"], "--lr: expected a number"),
    (["train", "ppo", "--lr", "-1"], "--lr must be a positive number"),
    (["train", "ppo", "--num-envs", "0"], "--num-envs must be a positive int"),
    (["train", "ppo", "--gamma", "1.5"], "--gamma must be in"),
    (["train", "ppo", "--gae-lambda", "nan"], "finite"),
    (["train", "ppo", "--total-steps", "10"], "less than one iteration"),
    (["train", "ppo", "--backend", "tpu"], "--backend must be one of"),
    (["train", "reinforce", "--nstep", "0"], "--nstep must be an int >= 1"),
    (["train", "ppo", "--obs-shape", "3,4"], "only to the trivial env"),
    (["train", "ppo", "--env", "trivial", "--obs-shape", "3,x"], "comma-separated ints"),
    (["train", "sac"], "invalid choice: 'sac'"),
    (["train", "ppo", "--compiled-env", "maybe"], "--compiled-env"),
    (["train", "ppo", "--env", "BipedalWalker-v3", "--compiled-env", "true"], "no compiled version of 'BipedalWalker-v3'"),
    (["train", "ppo", "--no-such-flag"], "unrecognized arguments"),
    (["show", "pdg", "ppo", "--out", "graph.png"], ".dot, .svg or .txt"),
    (["show", "schedule", "ppo", "--out", "s.dot"], "a schedule is text"),
    ([], "required"),
])
def test_cli_errors_are_one_line(argv, match, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert match in err, err
    assert err.startswith("timerl: ") and err.count("\n") == 1 and "Traceback" not in err


def test_python_dash_m_bad_env_exit_code():
    proc = subprocess.run([sys.executable, "-m", "timerl", "train", "ppo", "--env", "Nope-v0"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TIMERL_DEBUG": "0"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "unknown environment id 'Nope-v0'" in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_flags_with_docstrings(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "ppo", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--env", "--num-envs", "--num-steps", "--total-steps", "--seed", "--backend", "--epochs",
                 "--minibatches", "--lr", "--gamma", "--gae-lambda", "--hidden", "--layers", "--obs-shape",
                 "--log", "--plot", "--json", "--compiled-env"):
        assert flag in out
    assert "generalized advantage estimation" in out


def test_walkthrough_runs(capsys):
    runpy.run_path(str(ROOT / "docs" / "walkthrough.py"))["main"]([])
    out = capsys.readouterr().out
    assert "== PDG" in out and "== schedule" in out and "matches the numpy loop" in out


def test_show_pdg_and_schedule(tmp_path, capsys):
    small = ["reinforce", "--num-envs", "2", "--num-steps", "4", "--total-steps", "8", "--backend", "reference"]
    dot = tmp_path / "pdg.dot"
    assert main(["show", "pdg", *small, "--out", str(dot)]) == 0
    text = dot.read_text()
    assert text.startswith("digraph pdg") and "CartPole-v1.step" in text and "discounted_returns" in text
    assert main(["show", "schedule", *small]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1.reset" in out and "CartPole-v1.step" in out
