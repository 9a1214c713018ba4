"""Compiled environments (timerl.rl.compiled) against gymnasium's own step, step for step.

From the same state and the same actions, the compiled CartPole-v1 gives gymnasium's
observations, rewards and done flags (``CartPoleVectorEnv``, float64 dynamics); the compiled
trivial env gives the host TrivialEnv's. Each step starts the reference env from the compiled
env's state before the step (the initial states are drawn by the program's RNG, not gymnasium's).
"""

import numpy as np
import pytest

import timerl as tl
from timerl.ir.ops import Op
from timerl.rl.compiled import COMPILED_IDS, CompiledEnv
from timerl.rl.envs import Env, EnvError, TrivialEnv


def _rollout(env_id, n, actions, backend="numpy", policy=None, T=None, **kwargs):
    """Run the compiled env over ``actions`` (T x action shape), or the actions ``policy(o)`` computes
    in the program; per step t: the state before the step, the step's observation, reward and
    done, and the action."""
    T = len(actions) if T is None else T
    prog = tl.Program("t")
    (t,) = prog.dims
    (Tb,) = prog.bounds
    got = {}
    with prog:
        env = tl.rl.make_env(env_id, n, compiled=True, **kwargs)
        assert isinstance(env, CompiledEnv)
        o = tl.placeholder(env.observation_shape, "float32", (t,), name="o")
        o[0] = env.reset()
        a = tl.tensor(actions, domain=(t,), name="a") if policy is None else policy(o)
        o[t + 1], r, done = env.step(a)
        tl.sink([env.state, o[t + 1], r, done, a], lambda v, p: got.__setitem__(p["t"], [np.array(x) for x in v]))
    exe = prog.compile(bounds={Tb: T}, backend=backend)
    exe.run()
    return [got[k] for k in range(T)], env


def _cartpole_reference(n, max_steps):
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    venv = CartPoleVectorEnv(num_envs=n, max_episode_steps=max_steps)
    venv.reset(seed=0)
    return venv


@pytest.mark.parametrize("max_steps, policy", [(500, "random"), (20, "alternate")])
def test_cartpole_steps_as_gymnasium_does(max_steps, policy):
    n, T = 8, 2000
    rng = np.random.default_rng(5)
    actions = (rng.integers(0, 2, size=(T, n)) if policy == "random"
               else np.tile((np.arange(T) % 2)[:, None], (1, n))).astype(np.int64)
    kw = {} if max_steps == 500 else {"max_episode_steps": max_steps}
    steps, env = _rollout("CartPole-v1", n, actions, **kw)
    venv = _cartpole_reference(n, max_steps)
    count = np.zeros(n, np.int32)
    ends = truncs = 0
    for t, (state, obs, r, done, _) in enumerate(steps):
        # gymnasium from the compiled state, with the episode step counts carried alongside
        venv.state = state.copy()
        venv.steps = count.copy()
        venv.prev_done = np.zeros(n, bool)
        g_obs, g_r, g_term, g_trunc, _ = venv.step(actions[t])
        g_done = g_term | g_trunc
        np.testing.assert_array_equal(done, g_done, err_msg=f"done at step {t}")
        np.testing.assert_array_equal(r, g_r, err_msg=f"reward at step {t}")
        assert r.dtype == np.float32 and obs.dtype == np.float32 and obs.shape == (n, 4)
        np.testing.assert_allclose(obs[~done], g_obs[~done], rtol=1e-6, atol=1e-7, err_msg=f"obs at step {t}")
        if t + 1 < T:  # the next state: gymnasium's where the episode goes on, a fresh draw where it ended
            nxt = steps[t + 1][0]
            np.testing.assert_allclose(nxt[:, ~done], venv.state[:, ~done], rtol=1e-12, atol=1e-15)
            assert np.all(np.abs(nxt[:, done]) <= 0.05)
            np.testing.assert_array_equal(obs[done], nxt[:, done].T.astype(np.float32))
        count = np.where(g_done, 0, count + 1).astype(np.int32)
        ends += int(g_done.sum())
        truncs += int(g_trunc.sum())
    assert ends > 50  # episodes ended and were reset along the way
    if max_steps == 20:
        assert truncs > 0
    # the host-side bookkeeping saw every episode end, with its length
    assert len(env.episode_returns) == ends
    assert all(ret == length for _, ret, length in env.episode_returns)


def test_trivial_env_steps_as_the_host_env_does():
    n, T, length = 5, 1000, 37
    actions = np.random.default_rng(2).uniform(-2, 2, size=(T, n, 1)).astype(np.float32)
    steps, env = _rollout("trivial", n, actions, obs_shape=(2, 3), episode_length=length)
    host = TrivialEnv(n, obs_shape=(2, 3), episode_length=length)
    host.reset()
    count = np.zeros(n, np.int64)
    for t, (state, obs, r, done, _) in enumerate(steps):
        host.s, host.steps = state.copy(), count.copy()
        h_obs, h_r, h_done = host.step(actions[t])
        np.testing.assert_array_equal(done, h_done)
        np.testing.assert_array_equal(r, h_r)
        np.testing.assert_array_equal(obs[~done], h_obs[~done])
        assert obs.shape == (n, 2, 3) and obs.dtype == np.float32
        count = np.where(done, 0, count + 1)
    assert sum(d.sum() for *_, d, _ in steps) == n * (T // length)


@pytest.mark.parametrize("env_id, actions", [
    ("CartPole-v1", np.random.default_rng(0).integers(0, 2, size=(300, 4)).astype(np.int64)),
    ("trivial", np.random.default_rng(0).normal(size=(300, 4, 1)).astype(np.float32)),
    ("MountainCar-v0", np.random.default_rng(0).integers(0, 3, size=(300, 4)).astype(np.int64)),
    ("Pendulum-v1", np.random.default_rng(0).normal(size=(300, 4, 1)).astype(np.float32)),
    ("Acrobot-v1", np.random.default_rng(0).integers(0, 3, size=(300, 4)).astype(np.int64)),
    ("MountainCarContinuous-v0", np.random.default_rng(0).uniform(-1, 1, size=(300, 4, 1)).astype(np.float32)),
])
def test_compiled_env_on_numba_equals_numpy(env_id, actions):
    want, _ = _rollout(env_id, 4, actions, backend="numpy")
    got, _ = _rollout(env_id, 4, actions, backend="numba")
    for w, g in zip(want, got):
        for x, y in zip(w, g):
            np.testing.assert_allclose(y, x, rtol=1e-12 if x.dtype == np.float64 else 1e-6)


def test_make_env_compiles_the_ids_it_can_by_default():
    with tl.Program("t"):
        assert isinstance(tl.rl.make_env("CartPole-v1", 2, compiled=True), CompiledEnv)
        assert isinstance(tl.rl.make_env("trivial", 2, obs_shape=(3,), compiled=True), CompiledEnv)
        for env_id in COMPILED_IDS:   # the default: compiled where a compiled version exists
            assert isinstance(tl.rl.make_env(env_id, 2), CompiledEnv), env_id
        assert isinstance(tl.rl.make_env("CartPole-v1", 2, max_episode_steps=50), CompiledEnv)
        host = tl.rl.make_env("CartPole-v1", 2, compiled=False)
        assert type(host) is Env and not isinstance(host, CompiledEnv)
        assert type(tl.rl.make_env("trivial", 2, compiled=False)) is Env
        # arguments only gymnasium's env takes, and ids without a compiled version: gymnasium's by default
        assert type(tl.rl.make_env("CartPole-v1", 2, normalize=True)) is Env
        assert type(tl.rl.make_env("CartPole-v1", 2, sutton_barto_reward=True)) is Env
        with pytest.raises(EnvError, match="no compiled version of 'CartPole-v1'"):   # wrappers: gymnasium's only
            tl.rl.make_env("CartPole-v1", 2, normalize=True, compiled=True)
        with pytest.raises(EnvError, match="no compiled version of 'BipedalWalker-v3'.*compiled=False"):
            tl.rl.make_env("BipedalWalker-v3", 2, compiled=True)
        with pytest.raises(EnvError, match="compiled must be"):
            tl.rl.make_env("CartPole-v1", 2, compiled="yes")


def test_step_over_an_unsupported_domain_is_refused_with_the_way_out():
    prog = tl.Program("i t k")
    i, t, k = prog.dims
    with prog:
        env = tl.rl.make_env("CartPole-v1", 2, compiled=True)
        env.reset()
        a = tl.zeros((2,), "int64", domain=(i, t, k), name="a3")
        with pytest.raises(EnvError, match=r"'a3' has domain \('i', 't', 'k'\).*compiled=False"):
            env.step(a)


def test_ppo_takes_the_compiled_env_by_default():
    kw = dict(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=32, epochs=1, minibatches=1, backend="numpy")
    for exe in (tl.rl.ppo(**kw), tl.rl.ppo(compiled_env=True, **kw)):
        assert isinstance(exe.env, CompiledEnv)
        assert not [n for n in exe.pdg.nodes if exe.pdg.rec(n).op is Op.UDF]   # no host env step
        exe.run()
        assert exe.history.rows[-1]["env_steps"] == 32
    host = tl.rl.ppo(compiled_env=False, **kw)
    assert type(host.env) is Env
    assert [n for n in host.pdg.nodes if host.pdg.rec(n).op is Op.UDF]


def _single_reference(env_id, state, action, **kwargs):
    """gymnasium's own step of one env of ``env_id`` from ``state``: (obs, reward, terminated)."""
    import gymnasium as gym

    env = _single_reference.cache.get(env_id)
    if env is None:
        env = _single_reference.cache[env_id] = gym.make(env_id, **kwargs).unwrapped
        env.reset(seed=0)
    env.state = np.array(state)
    obs, r, term, _, _ = env.step(action)
    return obs, r, term


_single_reference.cache = {}


@pytest.mark.parametrize("env_id, max_steps, make_actions, reaches", [
    ("MountainCar-v0", 200, lambda rng, T, n: rng.integers(0, 3, size=(T, n)), False),
    ("MountainCar-v0", 200, lambda rng, T, n: np.tile(((np.arange(T) // 40) % 2 * 2)[:, None], (1, n)), True),  # swings
    ("Pendulum-v1", 200, lambda rng, T, n: rng.uniform(-3, 3, size=(T, n, 1)).astype(np.float32), False),
    ("MountainCarContinuous-v0", 999, lambda rng, T, n: rng.uniform(-1, 1, size=(T, n, 1)).astype(np.float32), False),
    ("MountainCarContinuous-v0", 999,
     lambda rng, T, n: np.tile(((np.arange(T) // 40) % 2 * 2 - 1.0)[:, None, None], (1, n, 1)).astype(np.float32), True),
    ("Acrobot-v1", 500, lambda rng, T, n: rng.integers(0, 3, size=(T, n)), None),
    ("Acrobot-v1", 500, lambda rng, T, n: np.tile(((np.arange(T) // 4) % 2 * 2)[:, None], (1, n)), None),  # pumps
])
def test_classic_control_steps_as_gymnasium_does(env_id, max_steps, make_actions, reaches):
    n, T = 3, 1500
    actions = make_actions(np.random.default_rng(11), T, n)
    actions = actions.astype(np.int64) if actions.dtype.kind in "iu" else actions
    steps, env = _rollout(env_id, n, actions)
    count = np.zeros(n, np.int64)
    terms = truncs = 0
    for t, (state, obs, r, done, _) in enumerate(steps):
        for k in range(n):
            # gymnasium's MountainCarContinuous keeps float32 state between steps (float64 just after a reset)
            st = state[:, k].astype(np.float32) if env_id == "MountainCarContinuous-v0" and count[k] else state[:, k]
            g_obs, g_r, g_term = _single_reference(env_id, st, actions[t, k])
            g_trunc = count[k] + 1 >= max_steps
            assert bool(done[k]) == (g_term or g_trunc), (t, k)
            np.testing.assert_allclose(r[k], np.float32(g_r), rtol=1e-6, err_msg=f"reward at step {t}, env {k}")
            if not done[k]:
                np.testing.assert_allclose(obs[k], g_obs, rtol=1e-6, atol=1e-7, err_msg=f"obs at step {t}, env {k}")
                np.testing.assert_allclose(steps[t + 1][0][:, k] if t + 1 < T else _single_reference.cache[env_id].state,
                                           _single_reference.cache[env_id].state, rtol=1e-12, atol=1e-15)
            terms += bool(g_term)
            truncs += bool(g_trunc and not g_term)
        count = np.where(done, 0, count + 1)
    assert truncs > 0 or reaches   # episodes that reach the goal early need no time limit
    if reaches is not None:
        assert (terms > 0) == reaches   # the swinging MountainCar reaches the goal; Pendulum never terminates


def test_acrobot_pumped_by_a_policy_in_the_program_reaches_its_goal_as_gymnasium_does():
    """Actions from the program (torque along the second joint's velocity): episodes end by reaching
    the height, and every step, terminal ones included, is gymnasium's."""
    n = 3
    steps, env = _rollout("Acrobot-v1", n, None, T=800,
                          policy=lambda o: tl.where(o.spatial[:, 5] > 0, 2, 0).astype("int64"))
    count, terms = np.zeros(n, np.int64), 0
    for t, (state, obs, r, done, a) in enumerate(steps):
        for k in range(n):
            g_obs, g_r, g_term = _single_reference("Acrobot-v1", state[:, k], int(a[k]))
            assert bool(done[k]) == (g_term or count[k] + 1 >= 500), (t, k)
            assert r[k] == np.float32(g_r)
            if not done[k]:
                np.testing.assert_allclose(obs[k], g_obs, rtol=1e-6, atol=1e-7)
            terms += bool(g_term)
        count = np.where(done, 0, count + 1)
    assert terms >= n and all(ret > -500 for _, ret, _ in env.episode_returns)


def test_rollout_bookkeeping_equals_a_step_by_step_count():
    """Over (i, t), the episode bookkeeping runs once per rollout: its episodes (end step, return,
    length) equal those counted step by step from the rewards and dones the program computed."""
    n, I, T = 3, 4, 30
    acts = np.random.default_rng(4).integers(0, 2, size=(I, T, n)).astype(np.int64)
    prog = tl.Program("i t")
    i, t = prog.dims
    Ib, Tb = prog.bounds
    got = {}
    with prog:
        env = tl.rl.make_env("MountainCar-v0", n, compiled=True, max_episode_steps=17)
        o = tl.placeholder(env.observation_shape, "float32", (i, t), name="o")
        o[0, 0] = env.reset()
        o[i, 0] = o[i - 1, Tb]
        a = tl.tensor(acts, domain=(i, t), name="a")
        o[i, t + 1], r, done = env.step(a)
        tl.sink([r, done], lambda v, p: got.__setitem__((p["i"], p["t"]), [np.array(x) for x in v]))
    prog.compile(bounds={Ib: I, Tb: T}, backend="numpy").run()
    want, ret, length, steps = [], np.zeros(n), np.zeros(n, int), 0
    for k in range(I):
        for s in range(T):
            r_, d_ = got[(k, s)]
            steps += n
            ret, length = ret + r_, length + 1
            want += [(steps, float(ret[e]), int(length[e])) for e in np.flatnonzero(d_)]
            ret[d_], length[d_] = 0.0, 0
    assert len(want) > 5 and env.episode_returns == want and env.env_steps == steps


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_ppo_with_a_compiled_env_logs_the_reference_executors_values(env_id):
    """The compiled step grouped with the policy's acting step, lowered to statement kernels: PPO's
    logged losses and returns equal the reference executor's, which has no grouping at all."""
    kw = dict(env=env_id, num_envs=2, num_steps=8, total_steps=48, epochs=2, minibatches=2, hidden=8,
              compiled_env=True)
    rows = {}
    for backend in ("reference", "numba"):
        exe = tl.rl.ppo(backend=backend, **kw)
        exe.run()
        rows[backend] = exe.history.rows
    for want, got in zip(rows["reference"], rows["numba"]):
        for key in ("pg_loss", "v_loss", "entropy", "approx_kl", "mean_return", "episodes"):
            np.testing.assert_allclose(got[key], want[key], rtol=2e-4, atol=1e-6, err_msg=key)


def test_the_acting_step_and_the_compiled_env_step_are_one_statement():
    """Item 4 of the compiled-env issue: PPO's policy forward pass, its sample and the environment
    step it drives run in one statement (one statement kernel on numba), grouped as built (no
    refinement). (REINFORCE's next state at the last step of the last iteration is read by nothing,
    so its dynamics are demanded at one point fewer than the sample and stay a statement apart.)"""
    exe = tl.rl.ppo(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=32, hidden=8, backend="numpy")
    plan, pdg = exe.plan, exe.pdg
    assert plan.grouping and plan.problem.restrict is None
    of = plan.problem.of
    sample = [n for n in of if pdg.rec(n).op is Op.RANDOM and "Categorical.sample" in pdg.rec(n).name]
    dynamics = [n for n in of if pdg.rec(n).op is Op.UNARY and "CartPole-v1.cos" in pdg.rec(n).name]
    first = [n for n in of if pdg.rec(n).op is Op.MATMUL and "actor.layer0" in pdg.rec(n).name
             and pdg.rec(n).domain == pdg.rec(sample[0]).domain]
    assert len(sample) == 1 and len(dynamics) == 1 and len(first) == 1
    assert of[sample[0]] == of[dynamics[0]] == of[first[0]]
