"""Continuous-action PPO stays finite on the default backend; the CLI says when numbers go non-finite."""

import json
import math

import numpy as np
import pytest

import timerl as tl
from timerl.cli import NonFiniteWatch, main, return_note


def _ppo_rows(backend):
    exe = tl.rl.ppo(env="trivial", obs_shape=(4,), num_envs=4, num_steps=16, total_steps=128, epochs=2,
                    minibatches=2, backend=backend)
    exe.run()
    return exe.history.rows


def test_continuous_ppo_on_numba_is_finite_and_matches_numpy():
    """Gaussian PPO (broadcast log-std inside fused chains) trained on NaN losses before the fix."""
    got, want = _ppo_rows("numba"), _ppo_rows("numpy")
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        for k in ("pg_loss", "v_loss", "entropy", "approx_kl"):
            assert math.isfinite(g[k]), (k, g)
            assert g[k] == pytest.approx(w[k], rel=1e-3, abs=1e-5), k


def test_watch_warns_once_and_records_the_first_nonfinite_row(capsys):
    w = NonFiniteWatch()
    rows = [
        {"iteration": 1, "env_steps": 8, "mean_return": float("nan"), "episodes": 0, "loss": 0.5, "seconds": 0.1},
        {"iteration": 2, "env_steps": 16, "mean_return": 3.0, "episodes": 2, "loss": float("inf"), "seconds": 0.2},
        {"iteration": 3, "env_steps": 24, "mean_return": 3.0, "episodes": 2, "loss": float("nan"), "seconds": 0.3},
    ]
    for r in rows:
        w.update(r)
    err = capsys.readouterr().err
    assert err.count("timerl: warning:") == 1 and "loss became non-finite (inf) at iteration 2" in err
    assert "TIMERL_CHECK=1" in err
    assert w.first == {"iteration": 2, "env_steps": 16, "fields": ["loss"]}


def test_nan_return_before_the_first_episode_is_not_a_warning(capsys):
    w = NonFiniteWatch()
    w.update({"iteration": 1, "env_steps": 8, "mean_return": float("nan"), "episodes": 0, "loss": 0.5,
              "seconds": 0.1})
    assert w.first is None and capsys.readouterr().err == ""


def test_return_note_says_why_there_is_no_return():
    assert return_note(1.5, 3, 100, None) is None
    assert "no episode finished in 1,000 env steps" in return_note(float("nan"), 0, 1000, None)
    note = return_note(float("nan"), 4, 1000, {"iteration": 2, "env_steps": 16, "fields": ["v_loss"]})
    assert "NaN" in note and "v_loss became non-finite at iteration 2" in note


def test_train_json_explains_a_null_return(capsys):
    # 2 iterations of 4 x 16 trivial-env steps: episodes there last longer, none finishes
    code = main(["train", "ppo", "--env", "trivial", "--obs-shape", "4", "--num-envs", "4", "--num-steps", "16",
                 "--total-steps", "128", "--epochs", "1", "--minibatches", "1", "--quiet", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["final_return"] is None and out["episodes"] == 0
    assert "no episode finished in 128 env steps" in out["final_return_note"]
    assert out["nonfinite"] is None
    assert np.isfinite(out["env_steps_per_s"])
