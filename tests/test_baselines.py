"""The eager baselines compute what they claim: gradients against PyTorch autograd and
float64 finite differences, environments against timerl's host-side envs, returns
against their definitions."""

import dataclasses
import json

import numpy as np
import pytest

from asv_benchmarks.baselines import common, numpy_eager
from asv_benchmarks.baselines.common import Args

torch = pytest.importorskip("torch", reason="the torch baseline needs the bench extra (torch==2.13.0)")
from asv_benchmarks.baselines import torch_eager  # noqa: E402

CARTPOLE = Args(env="CartPole-v1", num_envs=4, num_steps=16, hidden=8, layers=2, epochs=1, minibatches=1)
TRIVIAL = Args(env="trivial", num_envs=3, num_steps=10, hidden=8, layers=2, obs_shape=(2, 3), episode_length=4,
               epochs=1, minibatches=1)


def _perturbed_ppo_batch(learner, rng):
    """A real rollout batch, moved off the first-epoch point so every clip branch is used."""
    b = learner.batch()
    n = len(b["logp"])
    b["logp"] = b["logp"] + rng.normal(0, 0.3, n)  # ratios on both sides of 1 +- clip
    b["values"] = b["values"] + rng.normal(0, 0.4, n)  # value clipping active on some
    return b


def _torch_twin(np_learner, algo):
    """The torch agent (float64) holding the numpy learner's exact parameters."""
    tl_learner = torch_eager.LEARNERS[algo](np_learner.args, dtype=torch.float64)
    ag_np, ag_t = np_learner.agent, tl_learner.agent
    with torch.no_grad():
        lin = [m for m in ag_t.actor if isinstance(m, torch.nn.Linear)]
        for m, W, b in zip(lin, ag_np.actor.W, ag_np.actor.b):
            m.weight.copy_(torch.as_tensor(W.T)); m.bias.copy_(torch.as_tensor(b))
        if ag_np.critic is not None:
            lin = [m for m in ag_t.critic if isinstance(m, torch.nn.Linear)]
            for m, W, b in zip(lin, ag_np.critic.W, ag_np.critic.b):
                m.weight.copy_(torch.as_tensor(W.T)); m.bias.copy_(torch.as_tensor(b))
        if ag_np.logstd is not None:
            ag_t.actor_logstd.copy_(torch.as_tensor(ag_np.logstd + 0.3))
            ag_np.logstd += 0.3
    return tl_learner


def _torch_grads(tl_learner, mb):
    ag = tl_learner.agent
    loss = tl_learner.loss({k: torch.as_tensor(v) for k, v in mb.items()})
    ag.zero_grad()
    loss.backward()
    lin = lambda net: [m for m in net if isinstance(m, torch.nn.Linear)]  # noqa: E731
    grads = [g for m in lin(ag.actor) for g in (m.weight.grad.numpy().T, m.bias.grad.numpy())]
    if not ag.discrete:
        grads.append(ag.actor_logstd.grad.numpy())
    if ag.critic is not None:
        grads += [g for m in lin(ag.critic) for g in (m.weight.grad.numpy().T, m.bias.grad.numpy())]
    return float(loss.detach()), grads


@pytest.mark.parametrize("args", [CARTPOLE, TRIVIAL], ids=["cartpole-discrete", "trivial-gaussian"])
def test_numpy_ppo_gradients_equal_torch_autograd(args):
    rng = np.random.default_rng(0)
    np_learner = numpy_eager.PPO(args, dtype=np.float64)
    np_learner.rollout()
    t_learner = _torch_twin(np_learner, "ppo")
    mb = _perturbed_ppo_batch(np_learner, rng)
    loss_np, g_np = np_learner.loss_and_grads(mb)
    loss_t, g_t = _torch_grads(t_learner, mb)
    assert loss_np == pytest.approx(loss_t, rel=1e-10, abs=1e-12)
    assert len(g_np) == len(g_t)
    for a, b in zip(g_np, g_t):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("nstep", [None, 3], ids=["mc", "nstep3"])
@pytest.mark.parametrize("args", [CARTPOLE, TRIVIAL], ids=["cartpole-discrete", "trivial-gaussian"])
def test_numpy_reinforce_gradients_equal_torch_autograd(args, nstep):
    args = dataclasses.replace(args, nstep=nstep, ent_coef=0.05)
    np_learner = numpy_eager.Reinforce(args, dtype=np.float64)
    np_learner.rollout()
    t_learner = _torch_twin(np_learner, "reinforce")
    mb = np_learner.batch()
    loss_np, g_np = np_learner.loss_and_grads(mb)
    loss_t, g_t = _torch_grads(t_learner, mb)
    assert loss_np == pytest.approx(loss_t, rel=1e-10)
    assert len(g_np) == len(g_t)
    for a, b in zip(g_np, g_t):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("algo,args", [("ppo", CARTPOLE), ("ppo", TRIVIAL),
                                       ("reinforce", dataclasses.replace(TRIVIAL, ent_coef=0.05))])
def test_numpy_gradients_equal_finite_differences(algo, args):
    rng = np.random.default_rng(1)
    learner = numpy_eager.LEARNERS[algo](args, dtype=np.float64)
    learner.rollout()
    mb = _perturbed_ppo_batch(learner, rng) if algo == "ppo" else learner.batch()
    _, grads = learner.loss_and_grads(mb)
    params = learner.agent.params()
    eps = 1e-6
    for p, g in zip(params, grads):
        assert g.shape == p.shape
        for flat in rng.choice(p.size, size=min(3, p.size), replace=False):
            k = np.unravel_index(flat, p.shape)
            old = p[k]
            p[k] = old + eps
            up = learner.loss_and_grads(mb)[0]
            p[k] = old - eps
            down = learner.loss_and_grads(mb)[0]
            p[k] = old
            assert g[k] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7), (p.shape, k)


def _timerl_ppo_grads(learner, mb):
    """timerl's gradients of PPO's minibatch loss (the loss section of timerl/rl/ppo.py, with
    its Actor/Critic) on the batch ``mb``, and timerl's initial parameter values."""
    import importlib

    import timerl as tl
    from timerl.rl.policies import Actor, Critic

    a = learner.args
    prog = tl.Program("i")
    (i,) = prog.dims
    out = {}
    with prog:
        env = tl.rl.make_env(a.env, a.num_envs, a.seed, **({"obs_shape": a.obs_shape} if a.env == "trivial" else {}))
        net_args = importlib.import_module("timerl.rl.ppo").Args(env=a.env, num_envs=a.num_envs, hidden=a.hidden,
                                                                  layers=a.layers, seed=a.seed)
        actor, critic = Actor(env, net_args, domain=(i,)), Critic(env, net_args, domain=(i,))
        mb = dict(mb, obs=mb["obs"].reshape((-1,) + env.single_observation_shape))  # as the env gives it
        c = {k: tl.tensor(np.asarray(v, np.int64 if k == "actions" and env.discrete else np.float32), domain=(),
                          name=k) for k, v in mb.items()}
        new = actor.dist(c["obs"])
        new_logp, entropy = new.log_prob(c["actions"]), new.entropy().mean()
        ratio = tl.exp(new_logp - c["logp"])
        mb_adv = (c["adv"] - c["adv"].mean()) / (c["adv"].std() + 1e-8)
        pg_loss = tl.maximum(-mb_adv * ratio, -mb_adv * tl.clip(ratio, 1.0 - a.clip_coef, 1.0 + a.clip_coef)).mean()
        new_v = critic(c["obs"])
        v_clipped = c["values"] + tl.clip(new_v - c["values"], -a.clip_coef, a.clip_coef)
        v_loss = 0.5 * tl.maximum((new_v - c["ret"]) ** 2, (v_clipped - c["ret"]) ** 2).mean()
        loss = pg_loss - a.ent("ppo") * entropy + a.vf_coef * v_loss
        params = actor.parameters() + critic.parameters()
        grads = tl.grad(loss, params)
        tl.sink([loss, *params, *grads], lambda v, p: out.update(values=[np.array(x) for x in v]))
    prog.compile(bounds={"I": 1}, backend="reference").run()
    n = len(params)
    vals = out["values"]
    return float(vals[0]), vals[1:1 + n], vals[1 + n:]


@pytest.mark.parametrize("args", [CARTPOLE, TRIVIAL], ids=["cartpole-discrete", "trivial-gaussian"])
def test_numpy_baseline_gradients_equal_timerl(args):
    """The numpy baseline's PPO gradients equal timerl's on one batch (same parameters)."""
    pytest.importorskip("timerl.rl.ppo")
    rng = np.random.default_rng(6)
    learner = numpy_eager.PPO(args, dtype=np.float64)
    learner.rollout()
    mb = _perturbed_ppo_batch(learner, rng)
    mb = {k: (v.astype(np.float32).astype(np.float64) if v.dtype.kind == "f" else v) for k, v in mb.items()}
    loss_tl, params_tl, grads_tl = _timerl_ppo_grads(learner, mb)
    # timerl's parameter order: actor layers (W, b)..., log_std (Gaussian), critic layers: as agent.params()
    ours = learner.agent.params()
    assert len(ours) == len(params_tl)
    for p, v in zip(ours, params_tl):
        p[...] = np.asarray(v, np.float64).reshape(p.shape)
    loss_np, grads_np = learner.loss_and_grads(mb)
    assert loss_np == pytest.approx(loss_tl, rel=1e-4, abs=1e-5)
    for g_np, g_tl in zip(grads_np, grads_tl):
        np.testing.assert_allclose(np.asarray(g_tl, np.float64).reshape(g_np.shape), g_np, rtol=2e-3, atol=2e-5)


def test_adam_matches_torch():
    rng = np.random.default_rng(2)
    p_np = rng.normal(size=(3, 4))
    p_t = torch.nn.Parameter(torch.as_tensor(p_np.copy()))
    opt_np = numpy_eager.Adam([p_np], lr=0.1, max_grad_norm=0.5)
    opt_t = torch.optim.Adam([p_t], lr=0.1, eps=1e-5)
    for _ in range(4):
        g = rng.normal(size=(3, 4))
        opt_np.step([g.copy()])
        p_t.grad = torch.as_tensor(g)
        torch.nn.utils.clip_grad_norm_([p_t], 0.5)
        opt_t.step()
    np.testing.assert_allclose(p_np, p_t.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "trivial"])
def test_baseline_envs_equal_timerl_host_envs(env_id):
    envs = pytest.importorskip("timerl.rl.envs")
    if env_id == "trivial":
        ours = common.TrivialEnv(5, seed=3, obs_shape=(2, 2), episode_length=7)
        theirs = envs.TrivialEnv(5, seed=3, obs_shape=(2, 2), episode_length=7)
    else:
        ours = common.CartPoleEnv(5, seed=3)
        theirs = envs.GymEnv("CartPole-v1", 5, seed=3)
    np.testing.assert_array_equal(ours.reset(), theirs.reset())
    rng = np.random.default_rng(4)
    n_done = 0
    for _ in range(60):
        a = rng.integers(0, 2, 5) if env_id != "trivial" else rng.normal(size=(5, 1)).astype(np.float32)
        o1, r1, d1 = ours.step(a)
        o2, r2, d2 = theirs.step(a)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(d1, d2)
        n_done += int(d1.sum())
    assert n_done > 0  # resets were exercised


def test_returns_match_definitions():
    rng = np.random.default_rng(5)
    T, N, gamma = 9, 3, 0.9
    r = rng.normal(size=(T, N))
    done = (rng.random((T, N)) < 0.25).astype(float)
    v = rng.normal(size=(T, N))
    last = rng.normal(size=N)
    mc = common.returns_mc(r, done, gamma)
    for n in range(N):  # scalar reference loop, straight from the definition
        for t in range(T):
            g, disc = 0.0, 1.0
            for j in range(t, T):
                g += disc * r[j, n]
                if done[j, n]:
                    break
                disc *= gamma
            assert mc[t, n] == pytest.approx(g)
    # n >= T without a value is Monte-Carlo; n == 1 is the one-step TD target
    np.testing.assert_allclose(common.returns_nstep(r, done, T, gamma), mc)
    v_next = np.concatenate([v[1:], last[None]])
    np.testing.assert_allclose(common.returns_nstep(r, done, 1, gamma, v, last), r + gamma * (1 - done) * v_next)
    # GAE with lam = 1 is the bootstrapped return minus V
    g_boot = common.returns_nstep(r, done, T, gamma, v, last)
    np.testing.assert_allclose(common.gae(r, v, done, last, gamma, 1.0), g_boot - v)


@pytest.mark.parametrize("module", [numpy_eager, torch_eager], ids=["numpy", "torch"])
def test_baseline_script_prints_bench_json(module, capsys):
    argv = ["ppo", "--env", "trivial", "--num-envs", "4", "--num-steps", "8", "--obs-shape", "3,2,2",
            "--epochs", "2", "--minibatches", "2", "--hidden", "8", "--iterations", "2", "--json"]
    assert module.main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("compile_s", "s_per_iter", "env_steps_per_s", "peak_bytes", "peak_rss_mb"):
        assert key in out
    assert out["compile_s"] == 0.0
    assert out["env_steps_per_s"] == pytest.approx(4 * 8 / out["s_per_iter"])
    assert out["s_per_iter"] == pytest.approx(out["iter_s"][1])  # median of iterations after the first
    # the buffers alone (obs 8x4x12 float32 + 5 (T, N) arrays) are a lower bound
    assert out["peak_bytes"] >= 8 * 4 * 12 * 4 + 5 * 8 * 4 * 4
