"""`timerl bench`: how run_bench derives its numbers, and its JSON keys on the real builders."""

import dataclasses
import json
import statistics

import numpy as np
import pytest

import timerl as tl
from timerl import bench

KEYS = ("compile_s", "s_per_iter", "env_steps_per_s", "peak_bytes", "peak_rss_mb")


@dataclasses.dataclass
class _Args:
    num_envs: int = 3
    num_steps: int = 4
    total_steps: int = 12


def _tiny_builder(calls):
    """A real (reference-backend) program with a per-iteration log sink, built like tl.rl's
    builders: one iteration per ``num_envs * num_steps`` of ``total_steps``."""

    def build(callback=None, **flags):
        args = _Args(**flags)
        n_iter = args.total_steps // (args.num_envs * args.num_steps)
        calls.append(dict(flags, n_iter=n_iter))
        prog = tl.Program("i t")
        i, t = prog.dims
        I, T = prog.bounds
        data = np.arange(n_iter * args.num_steps, dtype="float32").reshape(n_iter, args.num_steps)
        with prog:
            x = tl.tensor(data, domain=(i, t), name="x")
            g = tl.placeholder((), "float32", (i, t), name="g")
            g[i, T - 1] = x
            g[i, t] = x + 0.5 * g[i, t + 1]
            tl.sink(g[i, 0], lambda v, p: callback({"iteration": p["i"] + 1, "g0": float(v)}))
        return prog.compile(bounds={I: n_iter, T: args.num_steps}, backend="reference")

    return build


def test_run_bench_times_iterations_from_the_log_sink(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "_builder", lambda algo: (_tiny_builder(calls), _Args))
    r = bench.run_bench("ppo", iterations=4, num_envs=2, num_steps=5)
    assert calls == [{"num_envs": 2, "num_steps": 5, "total_steps": 4 * 2 * 5, "n_iter": 4}]
    for k in KEYS:
        assert k in r
    assert len(r["iter_s"]) == 4 and all(s >= 0 for s in r["iter_s"])
    assert r["s_per_iter"] == statistics.median(r["iter_s"][1:])
    assert r["first_iter_s"] == r["iter_s"][0]
    assert r["env_steps_per_s"] == pytest.approx(2 * 5 / r["s_per_iter"])
    assert sum(r["iter_s"]) + r["tail_s"] == pytest.approx(r["run_s"])
    assert r["compile_s"] > 0 and r["peak_rss_mb"] > 0
    assert isinstance(r["peak_bytes"], int)  # the reference executor's own accounting


def test_run_bench_single_iteration_reports_it(monkeypatch):
    monkeypatch.setattr(bench, "_builder", lambda algo: (_tiny_builder([]), _Args))
    r = bench.run_bench("reinforce", iterations=1)
    assert r["s_per_iter"] == r["iter_s"][0]


def test_run_bench_rejects_bad_iterations():
    with pytest.raises(ValueError, match="--iterations"):
        bench.run_bench("ppo", iterations=0)
    with pytest.raises(ValueError, match="unknown algorithm"):
        bench.run_bench("a2c")


@pytest.mark.parametrize("algo", ["reinforce", "ppo"])
def test_timerl_bench_cli_prints_the_json_keys(algo, capsys):
    from timerl.cli import main

    argv = ["bench", algo, "--env", "trivial", "--obs-shape", "2,2", "--num-envs", "2", "--num-steps", "4",
            "--hidden", "4", "--layers", "1", "--iterations", "2", "--backend", "reference", "--json"]
    if algo == "ppo":
        argv += ["--epochs", "1", "--minibatches", "2"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for k in KEYS:
        assert k in out
    assert out["env_steps_per_s"] == pytest.approx(2 * 4 / out["s_per_iter"])
    assert len(out["iter_s"]) == 2 and out["s_per_iter"] == out["iter_s"][1]


def test_run_bench_traced_memory_is_a_second_untimed_run(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "_builder", lambda algo: (_tiny_builder(calls), _Args))
    plain = bench.run_bench("ppo", iterations=3, num_envs=2, num_steps=5)
    assert plain["traced_peak_bytes"] is None
    r = bench.run_bench("ppo", iterations=3, num_envs=2, num_steps=5, traced_memory=True)
    assert len(r["iter_s"]) == 3  # the traced run's log rows are not timed
    # a 0-d float32 per point at least lives in the traced run: one buffer > 0 bytes
    assert isinstance(r["traced_peak_bytes"], int) and r["traced_peak_bytes"] > 0
