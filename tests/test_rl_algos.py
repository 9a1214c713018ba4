"""REINFORCE and PPO: the programs build and compile, and learn on a tiny budget."""

import json
import math

import numpy as np
import pytest

import timerl as tl
from timerl.cli import main

BACKEND = "reference"


def first_last(rows, k=3):
    rets = [r["mean_return"] for r in rows if not math.isnan(r["mean_return"])]
    return np.mean(rets[:k]), np.mean(rets[-k:])


def test_reinforce_program_structure():
    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=32, backend=BACKEND)
    assert exe.args.nstep is None
    names = {exe.pdg.rec(n).name.split(" (")[0] for n in exe.pdg.nodes}  # without the user line
    assert "reinforce.discounted_returns.G" in names and "reinforce.o" in names
    exe.run()
    rows = exe.history.rows
    assert [r["iteration"] for r in rows] == [1, 2]
    assert [r["env_steps"] for r in rows] == [16, 32]
    assert all(math.isfinite(r["loss"]) for r in rows)


def test_reinforce_nstep_uses_a_window():
    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=16, nstep=3, backend=BACKEND)
    names = {exe.pdg.rec(n).name.split(" (")[0] for n in exe.pdg.nodes}  # without the user line
    assert not any(n.startswith("reinforce.discounted_returns.") for n in names)
    assert "reinforce.nstep_returns.G" in names
    exe.run()
    assert len(exe.history.rows) == 1


def test_ppo_runs_and_logs():
    rows = []
    exe = tl.rl.ppo(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=32, epochs=2, minibatches=2,
                    backend=BACKEND, callback=rows.append)
    exe.run()
    assert [r["env_steps"] for r in rows] == [16, 32]
    for r in rows:
        for k in ("pg_loss", "v_loss", "entropy", "approx_kl"):
            assert math.isfinite(r[k])
        assert 0 < r["entropy"] <= math.log(2) + 1e-5


@pytest.mark.slow
def test_ppo_continuous_trivial_runs():
    exe = tl.rl.ppo(env="trivial", obs_shape=(2, 2), num_envs=2, num_steps=8, total_steps=32, epochs=1,
                    minibatches=2, backend=BACKEND)
    exe.run()
    assert len(exe.history.rows) == 2 and exe.env.action_shape == (2, 1)


@pytest.mark.slow
def test_ppo_learns_cartpole():
    exe = tl.rl.ppo(env="CartPole-v1", num_envs=4, num_steps=128, total_steps=4 * 128 * 12, lr=2.5e-3,
                    backend=BACKEND, seed=1)
    exe.run()
    first, last = first_last(exe.history.rows)
    assert last > 2 * first and last > 50, (first, last)


@pytest.mark.slow
def test_reinforce_learns_cartpole():
    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=8, num_steps=64, total_steps=8 * 64 * 25, lr=1e-2,
                          backend=BACKEND, seed=0)
    exe.run()
    first, last = first_last(exe.history.rows)
    assert last > 1.5 * first, (first, last)


@pytest.mark.slow
def test_cli_train_json_and_log(tmp_path, capsys):
    log = tmp_path / "run.csv"
    rc = main(["train", "reinforce", "--num-envs", "2", "--num-steps", "16", "--total-steps", "96",
               "--backend", BACKEND, "--log", str(log), "--json", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert summary["env_steps"] == 96 and summary["env_steps_per_s"] > 0 and "final_return" in summary
    lines = log.read_text().strip().splitlines()
    assert lines[0].startswith("iteration,env_steps,mean_return,episodes,loss,entropy,seconds")
    assert len(lines) == 1 + 3
