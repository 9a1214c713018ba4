"""The JAX peer (asv_benchmarks/baselines/jax_peer.py) computes what the comparison says it does:
its CartPole steps as gymnasium's, and its PPO loss and gradients equal the numpy baseline's
(which tests/test_baselines.py checks against PyTorch autograd). Skipped without jax (the
``peer`` extra): CI does not install it."""

import json

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX peer needs the peer extra (jax==0.10.2)")
from asv_benchmarks.baselines import jax_peer, numpy_eager  # noqa: E402
from asv_benchmarks.baselines.common import Args  # noqa: E402


def test_cartpole_steps_as_gymnasiums_own():
    import gymnasium as gym

    rng = np.random.default_rng(0)
    N = 16
    venv = gym.make_vec("CartPole-v1", N, vectorization_mode="vector_entry_point")
    venv.reset(seed=0)
    u = venv.unwrapped
    env = jax_peer.CartPole(N)
    key = jax.random.PRNGKey(0)
    ends = 0
    for t in range(600):
        a = rng.integers(0, 2, N)
        state = (np.asarray(u.state.T, np.float32), np.asarray(u.steps, np.int32))
        key, k = jax.random.split(key)
        (s, steps), r, done = env.step(state, a, k)
        obs, reward, term, trunc, _ = venv.step(a)
        done_gym = np.logical_or(term, trunc)
        np.testing.assert_array_equal(np.asarray(done), done_gym, err_msg=f"step {t}")
        np.testing.assert_allclose(np.asarray(r), reward)
        s = np.asarray(s)
        np.testing.assert_allclose(s[~done_gym], obs[~done_gym], rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        assert np.all(np.abs(s[done_gym]) <= 0.05) and np.all(np.asarray(steps)[done_gym] == 0)
        ends += int(done_gym.sum())
        if done_gym.any():  # gymnasium resets on its next call; restart those envs now, as the peer does
            u.state[:, done_gym] = u.np_random.uniform(-0.05, 0.05, (4, int(done_gym.sum())))
            u.steps[done_gym] = 0
            u.prev_done = np.zeros_like(u.prev_done)
    assert ends > 50  # episode ends were compared, not only the first episodes


@pytest.mark.parametrize("env_args", [dict(env="CartPole-v1"), dict(env="trivial", obs_shape=(2, 3), episode_length=4)],
                         ids=["cartpole", "trivial"])
def test_ppo_loss_and_gradients_equal_the_numpy_baseline(env_args):
    args = Args(num_envs=4, num_steps=16, hidden=8, layers=2, epochs=1, minibatches=1, **env_args)
    np_learner = numpy_eager.PPO(args)
    np_learner.rollout()
    b = np_learner.batch()
    rng = np.random.default_rng(1)
    n = len(b["logp"])
    b["logp"] = (b["logp"] + rng.normal(0, 0.3, n)).astype(np.float32)  # every clip branch in use
    b["values"] = (b["values"] + rng.normal(0, 0.4, n)).astype(np.float32)
    ag = np_learner.agent
    if ag.logstd is not None:
        ag.logstd += 0.3
    loss_np, grads_np = np_learner.loss_and_grads(b)

    params = {"actor": list(zip(ag.actor.W, ag.actor.b)), "critic": list(zip(ag.critic.W, ag.critic.b))}
    if ag.logstd is not None:
        params["logstd"] = ag.logstd
    mb = {k: np.asarray(v) for k, v in b.items()}
    discrete = jax_peer.make_env(args).discrete
    loss_jax, g = jax.value_and_grad(lambda p: jax_peer.ppo_loss(args, discrete, p, mb))(params)
    np.testing.assert_allclose(float(loss_jax), loss_np, rtol=1e-5)
    flat = [x for W, bb in g["actor"] for x in (W, bb)] + ([g["logstd"]] if ag.logstd is not None else [])
    flat += [x for W, bb in g["critic"] for x in (W, bb)]
    assert len(flat) == len(grads_np)
    for got, want in zip(flat, grads_np):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-6)


def test_peer_script_prints_bench_json(capsys):
    assert jax_peer.main(["ppo", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--epochs", "2",
                          "--minibatches", "2", "--hidden", "8", "--iterations", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["system"] == "jax" and out["env_steps_per_s"] == pytest.approx(32 / out["s_per_iter"])
    assert len(out["iter_s"]) == 3 and out["compile_s"] > 0 and out["peak_bytes"] is None
