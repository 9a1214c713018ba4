"""tl.rl.make_env: the env wrapper inside a program against gymnasium driven directly."""

import gymnasium as gym
import numpy as np
import pytest

import timerl as tl

I_, T_ = 3, 20


def rollout(env, actions):
    """Run the API.md acting loop with given actions; collect o (points 0..T), r, done."""
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    obs, rew, dones = {}, {}, {}
    with prog:
        a = tl.tensor(actions, domain=(i, t), name="a")
        o = tl.placeholder(env.observation_shape, "float32", (i, t), name="o")
        o[0, 0] = env.reset()
        o[i, 0] = o[i - 1, T]
        o[i, t + 1], r, done = env.step(a)
        tl.sink(o, lambda v, p: obs.__setitem__((p["i"], p["t"]), v.copy()))
        tl.sink(r, lambda v, p: rew.__setitem__((p["i"], p["t"]), v.copy()))
        tl.sink(done, lambda v, p: dones.__setitem__((p["i"], p["t"]), v.copy()))
    exe = prog.compile({"I": actions.shape[0], "T": actions.shape[1]}, backend="reference")
    exe.run()
    return exe, obs, rew, dones


def flat(d, I, T):
    return np.stack([d[(i, t)] for i in range(I) for t in range(T)])


def test_cartpole_native_matches_gymnasium():
    env = tl.rl.make_env("CartPole-v1", 1, seed=5, compiled=False)
    assert env.impl.native and env.discrete and env.num_actions == 2
    assert env.observation_shape == (1, 4) and env.action_shape == (1,)
    acts = (np.random.default_rng(1).random((I_, T_, 1)) < 0.8).astype("int64")  # mostly right: short episodes
    exe, obs, rew, dones = rollout(env, acts)
    ref = gym.make_vec("CartPole-v1", 1, vectorization_mode="vector_entry_point")
    o, _ = ref.reset(seed=5)
    seen_done = 0
    for i in range(I_):
        for t in range(T_):
            np.testing.assert_array_equal(obs[(i, t)], o)
            o, r, te, tr, _ = ref.step(acts[i, t])
            assert bool(dones[(i, t)][0]) == bool(te[0] or tr[0])
            assert rew[(i, t)][0] == r[0]
            if te[0] or tr[0]:
                seen_done += 1
                o, *_ = ref.step(acts[i, t])  # gymnasium's next-step reset; ours happened already
    assert seen_done >= 1, "the test should cross an episode boundary"
    # episodes continue across iterations: o[i, 0] == o[i - 1, T]
    for i in range(1, I_):
        np.testing.assert_array_equal(obs[(i, 0)], exe_o_T(env, acts, i - 1))
    # host-side episode returns: CartPole pays 1 per step
    assert all(ret == length for _, ret, length in env.episode_returns)


def exe_o_T(env, acts, i):
    """o[i, T]: the observation after the last step of iteration i (replayed with gymnasium)."""
    ref = gym.make_vec("CartPole-v1", 1, vectorization_mode="vector_entry_point")
    o, _ = ref.reset(seed=env.impl.seed)
    for k in range(i + 1):
        for t in range(T_):
            o, r, te, tr, _ = ref.step(acts[k, t])
            if te[0] or tr[0]:
                o, *_ = ref.step(acts[k, t])
    return o


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Pendulum-v1"])
def test_sync_env_matches_single_gymnasium_envs(env_id):
    n = 2
    env = tl.rl.make_env(env_id, n, seed=7, compiled=False)
    assert not env.impl.native
    rng = np.random.default_rng(2)
    if env.discrete:
        acts = rng.integers(0, env.num_actions, (I_, T_, n))
    else:
        acts = rng.uniform(-3, 3, (I_, T_) + env.action_shape).astype("float32")
    _, obs, rew, dones = rollout(env, acts)
    for k in range(n):
        e = gym.make(env_id)
        o, _ = e.reset(seed=7 + k)
        for i in range(I_):
            for t in range(T_):
                np.testing.assert_allclose(obs[(i, t)][k], o, rtol=1e-6)
                a = acts[i, t, k]
                if not env.discrete:
                    a = np.clip(a, env.action_low, env.action_high)
                o, r, te, tr, _ = e.step(a)
                assert np.isclose(rew[(i, t)][k], r)
                assert bool(dones[(i, t)][k]) == bool(te or tr)
                if te or tr:
                    o, _ = e.reset()


def test_sync_env_same_step_reset():
    # Pendulum truncates at 200 steps: done at t and o[t + 1] is the next episode's first obs
    env = tl.rl.make_env("Pendulum-v1", 1, seed=0, max_episode_steps=5, compiled=False)
    acts = np.zeros((2, 6, 1, 1), "float32")
    _, obs, rew, dones = rollout(env, acts)
    d = flat(dones, 2, 6)[:, 0]
    # global steps 0..11: episodes of 5 end at steps 4 and 9, across the iteration boundary
    assert np.flatnonzero(d).tolist() == [4, 9]
    e = gym.make("Pendulum-v1", max_episode_steps=5)
    e.reset(seed=0)
    for _ in range(5):
        e.step(np.zeros(1, "float32"))
    o, _ = e.reset()
    np.testing.assert_allclose(obs[(0, 5)][0], o, rtol=1e-6)
    r = flat(rew, 2, 6)[:, 0]
    np.testing.assert_allclose([ret for _, ret, _ in env.episode_returns], [r[0:5].sum(), r[5:10].sum()], rtol=1e-5)
    assert [(steps, length) for steps, _, length in env.episode_returns] == [(5, 5), (10, 5)]


def test_trivial_env():
    env = tl.rl.make_env("trivial", 2, seed=3, obs_shape=(2, 3), episode_length=4, compiled=False)
    assert env.observation_shape == (2, 2, 3) and env.action_shape == (2, 1) and not env.discrete
    acts = np.full((2, 5, 2, 1), 0.5, "float32")
    acts[..., 1, 0] = -7.0  # clipped to -1
    _, obs, rew, dones = rollout(env, acts)
    rng = np.random.default_rng(3)
    s = rng.uniform(-1, 1, 2)
    steps = 0
    for i in range(2):
        for t in range(5):
            np.testing.assert_allclose(obs[(i, t)], np.broadcast_to(s[:, None, None], (2, 2, 3)), rtol=1e-6)
            s = np.clip(s + 0.05 * np.clip(acts[i, t, :, 0], -1, 1), -1, 1)
            np.testing.assert_allclose(rew[(i, t)], -np.abs(s), rtol=1e-6)
            steps += 1
            assert bool(dones[(i, t)].all()) == (steps % 4 == 0)
            if steps % 4 == 0:
                s = rng.uniform(-1, 1, 2)


def test_rerun_repeats():
    env = tl.rl.make_env("CartPole-v1", 2, seed=1, compiled=False)
    acts = np.ones((2, 4, 2), "int64")
    exe, obs, _, _ = rollout(env, acts)
    first = dict(obs)
    exe.run()
    for k in first:
        np.testing.assert_array_equal(first[k], obs[k])


@pytest.mark.parametrize("env_id,kw,match", [
    ("NoSuchEnv-v0", {}, "unknown environment id 'NoSuchEnv-v0'"),
    ("FrozenLake-v1", {}, "Discrete observation space"),
    ("trivial", {"obs_shape": (0,)}, "obs_shape"),
    ("trivial", {"foo": 1}, "unknown arguments"),
    ("CartPole-v1", {"bogus_arg": 3}, "cannot create environment"),
])
def test_make_env_errors(env_id, kw, match):
    with pytest.raises(tl.rl.EnvError, match=match):
        tl.rl.make_env(env_id, 2, **kw)


def test_make_env_bad_num_envs():
    with pytest.raises(tl.rl.EnvError, match="num_envs"):
        tl.rl.make_env("CartPole-v1", 0)


def test_step_action_shape_error():
    env = tl.rl.make_env("CartPole-v1", 2)
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog, pytest.raises(tl.ShapeError, match="action"):
        env.step(tl.zeros((3,), "int64", domain=(t,)))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "trivial"])
def test_host_step_returns_arrays_of_its_own(env_id):
    # the step UDF is called without copies (``fresh``): what it returns must not be the env's
    # buffers, which the next step overwrites, nor its input
    env = tl.rl.make_env(env_id, 2, seed=0, compiled=False)
    env._reset()
    a = np.zeros(env.action_shape, np.int64 if env.discrete else np.float32)
    first = env._step(a)
    kept = [x.copy() for x in first]
    for _ in range(3):
        nxt = env._step(a)
        assert all(not np.shares_memory(x, y) for x in first for y in nxt)
    for x, k in zip(first, kept):
        np.testing.assert_array_equal(x, k)
    assert not any(np.shares_memory(a, x) for x in first)
