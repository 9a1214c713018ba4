"""Checkpoints, resume, policy export and evaluation (timerl.rl.checkpoint, timerl.rl.evaluate, the CLI).

The independent expectation of a resume is the uninterrupted run: with a compiled environment,
every logged value after the checkpoint and every tensor of a later checkpoint must be equal.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import timerl as tl
from timerl.cli import main
from timerl.rl import checkpoint as ckpt

LOGGED = ("iteration", "env_steps", "mean_return", "episodes")


def _point_latest(directory, iteration):
    """Make ``directory``'s latest checkpoint the one after ``iteration`` (as if the run had stopped there)."""
    with open(os.path.join(directory, ckpt.LATEST), "w") as f:
        json.dump({"format": ckpt.FORMAT, "version": ckpt.VERSION, "checkpoint": f"iteration-{iteration:06d}"}, f)


def _rows(rows, keys):
    return [tuple(r[k] for k in keys) for r in rows]


def _same(a, b):
    """Equal values, NaN equal to NaN (the mean return before the first finished episode)."""
    return len(a) == len(b) and all(
        all(x == y or (isinstance(x, float) and np.isnan(x) and np.isnan(y)) for x, y in zip(r, s))
        for r, s in zip(a, b))


# -- structure: what a program carries across iterations (no compile) ---------------------------


def test_carries_are_found_in_the_program_and_other_reads_of_the_past_refused():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        x = tl.placeholder((2,), "float32", (i, t), name="x")
        x[0, 0] = tl.zeros((2,))
        x[i, 0] = x[i - 1, T]
        x[i, t + 1] = x + 1.0
        s = tl.placeholder((), "float32", (i,), name="s")
        s[0] = 0.0
        s[i + 1] = s + x[i, 0:T].sum()
        tl.sink(s, lambda v, p: None)
    found = {c.name: c for c in ckpt.carries(prog)}
    assert set(found) == {"x", "s"}
    assert all(c.value.domain == (i,) and not c.host for c in found.values())
    assert found["x"].value.shape == (2,) and found["s"].value.shape == ()

    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        y = tl.placeholder((), "float32", (i,), name="y")
        y[0] = 1.0
        y[i + 1] = y * 2.0
        z = tl.where(tl.dim_value(i) > 0, y[tl.max(i - 1, 0)], 0.0)
        w = y[i - 1] * 3.0
        tl.sink(w, lambda v, p: None, name="uses_w")
        del z
    with pytest.raises(ckpt.CheckpointError, match=r"reads 'y' at i - 1, outside a placeholder carry"):
        ckpt.carries(prog)


# -- the origin of the iteration dim, on every backend and with every pass off ---------------------


def _origin_program(I, i0=None):
    """Random ops of every kind over (i, t) and (i, k), dim_value(i) and bound_value(I): the values a
    resumed window must reproduce. ``i0``: the program with its origin moved there."""
    from timerl.api.autodiff import bound_value

    prog = tl.Program("i t k")
    i, t, k = prog.dims
    out = {}
    with prog:
        u = tl.random.uniform((3,), domain=(i, t))
        z = tl.random.normal((2,), domain=(i, t))
        c = tl.random.categorical(u * 2.0)
        p = tl.random.permutation(5, domain=(i, k))
        frac = tl.dim_value(i).astype("float32") / bound_value(prog.bounds[0]).astype("float32")
        s = u.sum() + z.sum() + frac                       # a sum over t below: the vectorize pass's case
        tot = s[i, 0:4].sum()
        tl.sink([u, z, c.astype("float32")], lambda v, pt: out.__setitem__(("it", pt["i"], pt["t"]), [x.copy() for x in v]))
        tl.sink(p, lambda v, pt: out.__setitem__(("ik", pt["i"], pt["k"]), v.copy()))
        tl.sink([tot, frac], lambda v, pt: out.__setitem__(("i", pt["i"]), [x.copy() for x in v]))
    if i0:
        ckpt.shift_origin(prog, i0)
    return prog, out


@pytest.mark.parametrize("backend", ["reference", "numpy", "numba", "cuda"])
@pytest.mark.parametrize("passes", [None, "off"])
def test_a_moved_origin_draws_the_uninterrupted_values(backend, passes):
    from timerl.passes import PIPELINE

    switches = None if passes is None else {n: False for n, _ in PIPELINE}
    full, want = _origin_program(5)
    full.compile(bounds={"I": 5, "T": 4, "K": 3}, backend="reference").run()
    win, got = _origin_program(5, i0=2)
    win.compile(bounds={"I": 3, "T": 4, "K": 3}, backend=backend, seed=0, passes=switches).run()
    assert len(got) == 3 * 4 + 3 * 3 + 3
    for (kind, a, *rest), v in got.items():
        w = want[(kind, a + 2, *rest)]
        for x, y in zip(v if isinstance(v, list) else [v], w if isinstance(w, list) else [w]):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6, err_msg=f"{backend} {kind} {a} {rest}")


# -- values: a resumed run is the uninterrupted one ----------------------------------------------


PPO = dict(env="CartPole-v1", num_envs=4, num_steps=16, total_steps=4 * 16 * 6, epochs=2, minibatches=2,
           compiled_env=True, seed=3)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_resumed_ppo_logs_and_saves_what_the_uninterrupted_run_does(tmp_path, backend):
    full_dir, part_dir = str(tmp_path / "full"), str(tmp_path / "part")
    full = tl.rl.ppo(checkpoint_dir=full_dir, checkpoint_every=2, backend=backend, **PPO)
    full.run()
    keys = LOGGED + ("pg_loss", "v_loss", "entropy", "approx_kl")
    if backend == "numpy":   # the checkpoint sink changes nothing the run computes
        plain = tl.rl.ppo(backend=backend, **PPO)
        plain.run()
        assert _same(_rows(plain.history.rows, keys), _rows(full.history.rows, keys))
    assert sorted(os.listdir(full_dir)) == ["iteration-000002", "iteration-000004", "iteration-000006", "latest.json"]

    shutil.copytree(full_dir, part_dir)
    _point_latest(part_dir, 4)
    resumed = tl.rl.ppo(resume=part_dir, backend=backend)          # the arguments come from the checkpoint
    assert resumed.resumed_from == 4 and resumed.args.seed == 3 and resumed.args.epochs == 2
    resumed.run()
    assert _same(_rows(resumed.history.rows, keys), _rows(full.history.rows, keys))   # rows 1-4 kept, 5-6 computed
    assert resumed.history.rows[4]["iteration"] == 5 and resumed.env.env_steps == full.env.env_steps
    assert resumed.env.episode_returns == full.env.episode_returns

    # the resumed run's own checkpoint at 6 equals the uninterrupted run's, tensor for tensor
    again = tl.rl.ppo(resume=part_dir, backend=backend, checkpoint_dir=str(tmp_path / "again"))
    again.run()
    a, b = ckpt.load(full_dir), ckpt.load(str(tmp_path / "again"))
    assert a.iteration == b.iteration == 6
    assert set(a.tensors) == set(b.tensors) and len(a.tensors) >= 4 * 6 + 4   # params, Adam m and v, o, env state
    for name, v in a.tensors.items():
        assert np.array_equal(v, b.tensors[name]), name
    names = set(a.tensors)
    assert {"ppo.o", "ppo.CartPole-v1.step_state", "ppo.CartPole-v1.step_count", "ppo.actor.layer0.weight",
            "ppo.adam.m(actor.layer0.weight)", "ppo.adam.v(critic.layer2.bias)"} <= names


def test_resumed_reinforce_equals_the_uninterrupted_run(tmp_path):
    kw = dict(env="CartPole-v1", num_envs=4, num_steps=16, total_steps=4 * 16 * 6, compiled_env=True, seed=5,
              backend="numpy")
    full = tl.rl.reinforce(checkpoint_dir=str(tmp_path), checkpoint_every=3, **kw)
    full.run()
    _point_latest(str(tmp_path), 3)
    resumed = tl.rl.reinforce(resume=str(tmp_path))
    resumed.run()
    keys = LOGGED + ("loss", "entropy")
    assert _same(_rows(resumed.history.rows, keys), _rows(full.history.rows, keys))


def test_resume_with_a_host_env_restores_the_learner_and_restarts_the_episodes(tmp_path):
    kw = dict(env="CartPole-v1", num_envs=4, num_steps=16, total_steps=4 * 16 * 4, epochs=1, minibatches=1,
              compiled_env=False, seed=1, backend="numpy")
    full = tl.rl.ppo(checkpoint_dir=str(tmp_path), checkpoint_every=2, **kw)
    full.run()
    c2 = ckpt.load(os.path.join(str(tmp_path), "iteration-000002"))
    restored = {t["name"]: t["restored_on_resume"] for t in c2.meta["tensors"]}
    assert restored["ppo.o"] is False and restored["ppo.actor.layer0.weight"] is True
    _point_latest(str(tmp_path), 2)
    resumed = tl.rl.ppo(resume=str(tmp_path), checkpoint_dir=str(tmp_path / "resumed"), checkpoint_every=1)
    seen = []
    resumed.history.callback = seen.append
    resumed.run()
    assert [r["iteration"] for r in seen] == [3, 4]
    assert resumed.history.rows[:2] == full.history.rows[:2]
    # the episodes finished before the checkpoint are kept; those in flight were dropped with the env
    assert resumed.env.episode_returns[:len(c2.arrays["episodes"])] == [tuple(e) for e in c2.arrays["episodes"].tolist()]
    # iteration 3 learns from the checkpoint's parameters: Adam's update is that of iteration 3's gradient,
    # which the fresh episodes change, so only the parameters *before* it are compared
    c3 = ckpt.load(os.path.join(str(tmp_path / "resumed"), "iteration-000003"))
    assert c3.iteration == 3 and not np.array_equal(c3.tensor("ppo.actor.layer0.weight"),
                                                    c2.tensor("ppo.actor.layer0.weight"))


# -- errors: missing, corrupt and mismatched checkpoints; nothing else lost --------------------------


def _listing(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = fh.read()
    return out


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("run"))
    exe = tl.rl.ppo(checkpoint_dir=d, checkpoint_every=2, backend="numpy",
                    **dict(PPO, total_steps=4 * 16 * 4, epochs=1, minibatches=1))
    exe.run()
    return d


def test_corrupt_and_mismatched_checkpoints_are_refused_clearly_and_change_nothing(small_run, tmp_path):
    d = str(tmp_path / "run")
    shutil.copytree(small_run, d)
    before = _listing(d)
    args = dict(PPO, total_steps=4 * 16 * 4, epochs=1, minibatches=1)
    with pytest.raises(ckpt.CheckpointError, match=r"--num-envs 8 \(checkpoint: 4\)"):
        tl.rl.ppo(resume=d, **dict(args, num_envs=8))
    with pytest.raises(ckpt.CheckpointError, match=r"written by 'ppo', not 'reinforce'"):
        tl.rl.reinforce(resume=d)
    with pytest.raises(ckpt.CheckpointError, match=r"at the end of training \(iteration 4 of 4\)"):
        tl.rl.ppo(resume=d)
    with pytest.raises(ckpt.CheckpointError, match="no such directory"):
        tl.rl.ppo(resume=str(tmp_path / "nope"))
    with pytest.raises(ckpt.CheckpointError, match=r"already holds a run's checkpoints: resume it with --resume"):
        tl.rl.ppo(checkpoint_dir=d, **args)           # a new run would mix its checkpoints with these
    assert _listing(d) == before

    npz = os.path.join(d, "iteration-000004", "arrays.npz")
    with open(npz, "r+b") as f:          # a torn write of the arrays
        f.truncate(os.path.getsize(npz) // 2)
    with pytest.raises(ckpt.CheckpointError, match=r"arrays\.npz is unreadable or corrupt"):
        ckpt.load(d)
    with open(os.path.join(d, ckpt.LATEST), "w") as f:
        f.write('{"format": "timerl-checkp')
    with pytest.raises(ckpt.CheckpointError, match=r"latest\.json is unreadable or corrupt"):
        tl.rl.ppo(resume=d)
    assert sorted(os.listdir(d)) == sorted(os.listdir(small_run))   # nothing removed


def test_a_crash_while_writing_leaves_the_latest_checkpoint_whole(small_run, tmp_path, monkeypatch):
    d = str(tmp_path / "run")
    shutil.copytree(small_run, d)
    meta, arrays = ckpt.load(d).meta, dict(ckpt.load(d).arrays)

    def torn(f, **kw):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.np, "savez", torn)
    with pytest.raises(OSError):
        ckpt.write(d, dict(meta, iteration=6), arrays)
    monkeypatch.undo()
    latest = ckpt.load(d)
    assert latest.iteration == 4 and set(latest.tensors) == {k[7:] for k in arrays if k.startswith("tensor/")}
    assert not os.path.exists(os.path.join(d, "iteration-000006"))
    assert any(f.startswith(".tmp-iteration-000006") for f in os.listdir(d))   # the torn write, never renamed
    ckpt.write(d, dict(meta, iteration=6), arrays)                        # the next write clears it
    assert ckpt.load(d).iteration == 6 and not any(f.startswith(".tmp-") for f in os.listdir(d))


# -- use: the policy of a checkpoint ------------------------------------------------------------


def _program_forward(layers, obs):
    """The actor MLP computed by a timerl program (tanh between layers), as an independent check."""
    prog = tl.Program("i")
    out = {}
    with prog:
        x = tl.const(obs.astype(np.float32), shape=obs.shape)
        for j, (w, b) in enumerate(layers):
            x = x @ tl.const(w, shape=w.shape) + tl.const(b, shape=b.shape)
            if j < len(layers) - 1:
                x = tl.tanh(x)
        tl.sink(x, lambda v, p: out.__setitem__("y", v.copy()))
    prog.compile(bounds={"I": 1}, backend="numpy").run()
    return out["y"]


def test_load_policy_acts_with_the_checkpoints_actor(small_run):
    ck = ckpt.load(small_run)
    layout = ck.meta["policy"]
    layers = [(ck.tensor(w), ck.tensor(b)) for w, b in layout["layers"]]
    assert len(layers) == 3 and layers[0][0].shape == (4, 64) and layout["discrete"] and layout["num_actions"] == 2
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    logits = _program_forward(layers, obs)
    det = tl.rl.load_policy(small_run, deterministic=True)
    assert np.array_equal(det(obs), np.argmax(logits, axis=-1))
    assert det(obs[0]) == np.argmax(logits[0]) and det(obs).dtype == np.int64
    sampled = tl.rl.load_policy(small_run, seed=1)
    many = np.stack([sampled(obs[:1].repeat(4000, 0)) for _ in range(1)])[0]
    p1 = np.exp(logits[0, 1]) / np.exp(logits[0]).sum()
    assert abs(many.mean() - p1) < 0.03          # sampled from softmax(logits)
    with pytest.raises(ValueError, match=r"takes \(4,\)"):
        det(np.zeros((3, 5), np.float32))


def test_continuous_policy_is_the_gaussian_clipped_to_the_bounds(tmp_path):
    exe = tl.rl.ppo(env="Pendulum-v1", num_envs=2, num_steps=8, total_steps=32, epochs=1, minibatches=1,
                    compiled_env=True, backend="numpy", checkpoint_dir=str(tmp_path))
    exe.run()
    ck = ckpt.load(str(tmp_path))
    layout = ck.meta["policy"]
    assert not layout["discrete"] and layout["log_std"] == "ppo.actor.log_std"
    layers = [(ck.tensor(w), ck.tensor(b)) for w, b in layout["layers"]]
    obs = np.random.default_rng(1).normal(size=(32, 3)).astype(np.float32) * 3
    mean = _program_forward(layers, obs)
    det = tl.rl.load_policy(str(tmp_path), deterministic=True)
    np.testing.assert_allclose(det(obs), np.clip(mean, -2.0, 2.0), rtol=1e-5, atol=1e-6)
    samples = tl.rl.load_policy(str(tmp_path), seed=2)(np.repeat(obs[:1], 5000, 0))
    std = np.exp(ck.tensor("ppo.actor.log_std"))
    assert abs(samples.std() - std[0]) < 0.05 and abs(samples.mean() - mean[0, 0]) < 0.05


# -- the command line: train, Ctrl-C, resume, evaluate ------------------------------------------------


def _cli(*argv):
    return [sys.executable, "-m", "timerl", *argv]


def test_train_interrupt_resume_from_the_command_line_equals_an_uninterrupted_run(tmp_path):
    flags = ["--env", "CartPole-v1", "--compiled-env", "true", "--num-envs", "4", "--num-steps", "8",
             "--total-steps", str(4 * 8 * 1000), "--epochs", "1", "--minibatches", "1", "--backend", "numpy",
             "--seed", "2", "--quiet"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    ref_log, log, d = str(tmp_path / "ref.csv"), str(tmp_path / "run.csv"), str(tmp_path / "ckpt")
    subprocess.run(_cli("train", "ppo", *flags, "--log", ref_log), check=True, env=env, capture_output=True)

    proc = subprocess.Popen(_cli("train", "ppo", *flags, "--log", log, "--checkpoint-dir", d,
                                 "--checkpoint-every", "5"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.time()
    while not os.path.exists(os.path.join(d, ckpt.LATEST)) and proc.poll() is None and time.time() - t0 < 120:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    stopped = ckpt.load(d).iteration
    assert 5 <= stopped < 1000
    assert f"stopped after iteration {stopped}" in err.decode() and f"timerl train --resume {d}" in err.decode()
    with open(log) as f:
        assert int(list(csv.DictReader(f))[-1]["iteration"]) == stopped   # the log holds every saved iteration

    res = subprocess.run(_cli("train", "--resume", d, "--log", log, "--quiet", "--json"), env=env, capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    summary = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert summary["resumed_from"] == stopped and summary["env_steps"] == 4 * 8 * 1000

    def load(path):
        with open(path) as f:
            return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]

    assert load(log) == load(ref_log)          # every iteration's logged values, before and after the resume
    assert ckpt.load(d).iteration == 1000

    res = subprocess.run(_cli("eval", "ppo", "--checkpoint", d, "--episodes", "3", "--json"), env=env,
                         capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    ev = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert ev["episodes"] == 3 and len(ev["returns"]) == 3 and ev["iteration"] == 1000
    assert ev["mean"] == pytest.approx(np.mean(ev["returns"])) and all(r >= 1 for r in ev["returns"])


def test_eval_errors_and_video_dependency_message(small_run, capsys, monkeypatch, tmp_path):
    assert main(["eval", "reinforce", "--checkpoint", small_run]) == 2
    assert "written by ppo, not reinforce" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "moviepy", None)
    assert main(["eval", "ppo", "--checkpoint", small_run, "--video", str(tmp_path / "x.mp4")]) == 2
    err = capsys.readouterr().err
    assert "--video needs moviepy" in err and 'pip install -e ".[video]"' in err
    assert main(["train", "ppo", "--checkpoint-every", "3", "--total-steps", "64", "--num-envs", "4",
                 "--num-steps", "16"]) == 2
    assert "--checkpoint-every needs --checkpoint-dir" in capsys.readouterr().err


def test_eval_records_a_video_where_its_dependencies_are_installed(small_run, tmp_path):
    pytest.importorskip("moviepy")
    pytest.importorskip("pygame")
    out = str(tmp_path / "episode.mp4")
    assert main(["eval", "ppo", "--checkpoint", small_run, "--episodes", "2", "--video", out]) == 0
    assert os.path.getsize(out) > 1000 and os.path.getsize(str(tmp_path / "episode-episode-1.mp4")) > 1000
    assert sorted(os.listdir(tmp_path)) == ["episode-episode-1.mp4", "episode.mp4"]   # no temporary folder left


def test_train_writes_tensorboard_curves_named_as_cleanrl(tmp_path, capsys):
    pytest.importorskip("tensorboardX")
    from test_tensorboard import read_events, scalars

    tb = str(tmp_path / "tb")
    assert main(["train", "ppo", "--env", "CartPole-v1", "--compiled-env", "true", "--num-envs", "4",
                 "--num-steps", "16", "--total-steps", "192", "--epochs", "1", "--minibatches", "1",
                 "--backend", "numpy", "--quiet", "--tensorboard", tb]) == 0
    curves = scalars(read_events(tb))
    assert {"losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl",
            "charts/episodic_return", "charts/SPS"} <= set(curves)
    assert [s for s, _ in curves["losses/value_loss"]] == [64, 128, 192]
