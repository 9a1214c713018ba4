"""Environments as stateful UDFs: gymnasium (vectorized) and the paper's synthetic env.

    env = tl.rl.make_env("CartPole-v1", num_envs=8, seed=0)
    o = tl.placeholder(env.observation_shape, "float32", (i, t))
    o[0, 0] = env.reset()
    o[i, 0] = o[i - 1, T]                  # the rollout resumes where the last one stopped
    o[i, t + 1], r, done = env.step(a)     # o has points t = 0..T; r, done t = 0..T-1

Everything is batched over ``num_envs`` as the leading spatial axis:
``env.observation_shape == (num_envs,) + single observation shape``, ``env.action_shape ==
(num_envs,)`` for a discrete action space and ``(num_envs, k)`` for a Box. ``reset`` and
``step`` are UDFs sharing one ``state`` key, so they run in program (schedule) order on one
host-side environment. An episode that ends at step t is reset in that same step:
``done[t]`` is true and ``o[t + 1]`` is the first observation of the next episode.

Host-side bookkeeping for logging: ``env.episode_returns`` lists ``(env_steps, return,
length)`` for every finished episode of the current run, ``env.env_steps`` counts steps.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

_keys = itertools.count()


class EnvError(ValueError):
    """A bad environment id, an unsupported space or a bad environment argument."""


# -- host-side environments: reset() -> obs, step(a) -> (obs, reward, done) -------------------


def trivial_args(obs_shape, episode_length):
    """The trivial env's ``(obs_shape, episode_length)``, checked (host and compiled alike)."""
    obs_shape = (int(obs_shape),) if np.isscalar(obs_shape) else tuple(int(s) for s in obs_shape)
    if any(s <= 0 for s in obs_shape):
        raise EnvError(f"trivial env: obs_shape entries must be positive, got {obs_shape}")
    if int(episode_length) <= 0:
        raise EnvError(f"trivial env: episode_length must be positive, got {episode_length}")
    return obs_shape, int(episode_length)


class TrivialEnv:
    """The synthetic environment of the TimeRL paper, vectorized over ``num_envs``.

    State ``s`` in [-1, 1] per env, moved by the action: ``s <- clip(s + 0.05 * clip(a, -1, 1),
    -1, 1)``; reward ``-|s|`` (after the move); observation ``s`` broadcast to ``obs_shape``;
    episodes last exactly ``episode_length`` steps; initial state uniform in [-1, 1].
    """

    def __init__(self, num_envs, seed=0, obs_shape=(1,), episode_length=100):
        self.num_envs, self.seed = num_envs, seed
        self.obs_shape, self.episode_length = trivial_args(obs_shape, episode_length)
        self.single_action_shape = (1,)
        self.action_low, self.action_high = -1.0, 1.0
        self.num_actions = None

    def _obs(self):
        s = self.s.astype(np.float32).reshape((self.num_envs,) + (1,) * len(self.obs_shape))
        return np.broadcast_to(s, (self.num_envs,) + self.obs_shape).copy()

    def reset(self):
        self.rng = np.random.default_rng(self.seed)
        self.s = self.rng.uniform(-1.0, 1.0, self.num_envs)
        self.steps = np.zeros(self.num_envs, np.int64)
        return self._obs()

    def step(self, a):
        a = np.asarray(a, np.float64).reshape(self.num_envs, -1)[:, 0]
        self.s = np.clip(self.s + 0.05 * np.clip(a, -1.0, 1.0), -1.0, 1.0)
        reward = -np.abs(self.s)
        self.steps += 1
        done = self.steps >= self.episode_length
        if done.any():
            self.s[done] = self.rng.uniform(-1.0, 1.0, int(done.sum()))
            self.steps[done] = 0
        return self._obs(), reward.astype(np.float32), done


class GymEnv:
    """A gymnasium vector env with same-step autoreset.

    CartPole uses gymnasium's native vectorized implementation (``CartPoleVectorEnv``),
    which only offers next-step autoreset: when a sub-env finishes, we perform, right away,
    the reset it would have done on the next call (the same draws from its generator, in
    the same order), so the observations are gymnasium's with the extra reset step removed.
    Every other id runs in ``SyncVectorEnv(autoreset_mode=SAME_STEP)``.
    """

    def __init__(self, env_id, num_envs, seed=0, normalize=False, gamma=0.99, **kwargs):
        import gymnasium as gym
        from gymnasium import spaces

        self.normalize, self.gamma, self.kwargs = bool(normalize), float(gamma), kwargs
        try:
            spec = gym.spec(env_id)
        except Exception as e:  # noqa: BLE001 - gymnasium raises several kinds; one message for users
            raise EnvError(f"unknown environment id {env_id!r}: {e}") from None
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.native = False
        try:
            if spec.vector_entry_point is not None and _is_native_cartpole(spec) and not normalize:
                venv = gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point", **kwargs)
                self.native = all(hasattr(venv.unwrapped, a) for a in ("state", "steps", "prev_done", "low", "high"))
                if not self.native:
                    venv.close()
            if not self.native:
                venv = self._sync_env()
        except EnvError:
            raise
        except Exception as e:  # noqa: BLE001
            raise EnvError(f"cannot create environment {env_id!r} with {kwargs or 'no arguments'}: "
                           f"{type(e).__name__}: {e}") from None
        self.venv = venv
        obs_space, act_space = venv.single_observation_space, venv.single_action_space
        if not isinstance(obs_space, spaces.Box):
            venv.close()
            raise EnvError(f"environment {env_id!r} has a {type(obs_space).__name__} observation space; "
                           "only Box observations are supported")
        self.obs_shape = tuple(obs_space.shape)
        if isinstance(act_space, spaces.Discrete):
            if int(act_space.start) != 0:
                raise EnvError(f"environment {env_id!r}: Discrete actions must start at 0, got start={act_space.start}")
            self.single_action_shape, self.num_actions = (), int(act_space.n)
        elif isinstance(act_space, spaces.Box) and len(act_space.shape) == 1:
            self.single_action_shape, self.num_actions = tuple(act_space.shape), None
            self.action_low = act_space.low.astype(np.float32)
            self.action_high = act_space.high.astype(np.float32)
        else:
            venv.close()
            raise EnvError(f"environment {env_id!r} has a {type(act_space).__name__}{tuple(act_space.shape or ())} "
                           "action space; only Discrete and 1-D Box actions are supported")

    def _sync_env(self):
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode

        def one():
            env = gym.make(self.env_id, **self.kwargs)
            if self.normalize:  # CleanRL's continuous-control wrappers; the raw reward is kept for logging
                env = _RawReward(env)
                env = gym.wrappers.NormalizeObservation(env)
                env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
                env = gym.wrappers.NormalizeReward(env, gamma=self.gamma)
                env = gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -10, 10)))
            return env

        return gym.vector.SyncVectorEnv([one for _ in range(self.num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)

    def reset(self):
        if self.normalize:  # fresh running statistics, so every run of a program repeats
            self.venv.close()
            self.venv = self._sync_env()
        obs, _ = self.venv.reset(seed=self.seed)
        return np.asarray(obs, np.float32)

    def raw_rewards(self, reward):
        """The environment's own rewards of the last step (before reward normalisation)."""
        if not self.normalize:
            return reward
        return np.array([e.get_wrapper_attr("raw_reward") for e in self.venv.envs], np.float32)

    def step(self, a):
        if self.num_actions is not None:
            a = np.asarray(a, np.int64)
            if not _in_range(a, self.num_actions):
                raise EnvError(f"{self.env_id}: actions must be in 0..{self.num_actions - 1}, got {a}")
        else:
            a = np.clip(a.astype(np.float32), self.action_low, self.action_high)
        obs, reward, term, trunc, _ = self.venv.step(a)
        done = term | trunc  # a new array (gymnasium's flags are bool)
        if self.native and _any(done):
            obs = self._reset_now(done)
        return obs, reward, done

    def _reset_now(self, done):
        # CartPoleVectorEnv.step's own reset of `prev_done` envs, done one call early
        u = self.venv.unwrapped
        u.state[:, done] = u.np_random.uniform(low=u.low, high=u.high, size=(u.state.shape[0], int(done.sum())))
        u.steps[done] = 0
        u.prev_done = np.zeros_like(u.prev_done)
        return u.state.T.astype(np.float32)

    def close(self):
        self.venv.close()


def _in_range(a, n) -> bool:
    """Are the integer actions ``a`` all in ``0..n-1``? (A few envs' actions: Python's min and max
    over a list are several times cheaper than two numpy reductions, and this runs every step.)"""
    if a.size <= 256:
        v = a.ravel().tolist()
        return not v or (min(v) >= 0 and max(v) < n)
    return bool(a.min() >= 0 and a.max() < n)


def _fresh(fn):
    """``fn`` as a UDF whose outputs are new arrays each call and which never writes its inputs:
    :func:`timerl.runtime.reference.call_udf` then skips its read-only views and copies (about 2 us
    of a host env's step). Only for timerl's own wrappers, which copy what the env returns."""
    f = functools.partial(fn)
    f.__name__ = getattr(fn, "__name__", "udf")
    f.fresh = True
    return f


def _any(done) -> bool:
    """``done.any()`` for a step's flags, through a list for a few envs (cheaper than a reduction)."""
    return True in done.tolist() if done.size <= 256 else bool(done.any())


def _raw_reward_wrapper():
    import gymnasium as gym

    class RawReward(gym.Wrapper):
        """Remembers the unnormalised reward of the last step."""

        raw_reward = 0.0

        def step(self, action):
            obs, reward, term, trunc, info = self.env.step(action)
            self.raw_reward = float(reward)
            return obs, reward, term, trunc, info

    return RawReward


def _RawReward(env):
    return _raw_reward_wrapper()(env)


def _is_native_cartpole(spec) -> bool:
    return str(spec.vector_entry_point).endswith("cartpole:CartPoleVectorEnv")


# -- the recurrent-tensor face ---------------------------------------------------------------


class Env:
    """An environment usable inside a program: ``reset()`` and ``step(a)`` build UDFs.

    Attributes: ``observation_shape`` ``(num_envs, *obs)``, ``action_shape`` ``(num_envs,)``
    (discrete) or ``(num_envs, k)`` (Box), ``single_observation_shape`` / ``single_action_shape``
    (one env's), ``discrete``, ``num_actions`` (None for Box), ``action_low``/``action_high``
    (Box), ``num_envs``, ``env_id``; host-side bookkeeping of the current run:
    ``episode_returns`` (``(env_steps, return, length)`` per finished episode), ``env_steps``,
    ``recent_return(k)``, and ``on_reset`` (callbacks run when the run starts).

        env = tl.rl.make_env("CartPole-v1", num_envs=8)
        env.observation_shape, env.action_shape, env.num_actions     # (8, 4), (8,), 2
    """

    #: whether the env's state is program tensors (a checkpoint saves and restores it) or a host object
    compiled = False

    def __init__(self, impl, env_id):
        self.impl, self.env_id = impl, env_id
        self.num_envs = impl.num_envs
        self.single_observation_shape = tuple(impl.obs_shape)
        self.single_action_shape = tuple(impl.single_action_shape)
        self.observation_shape = (self.num_envs,) + self.single_observation_shape
        self.action_shape = (self.num_envs,) + self.single_action_shape
        self.num_actions = impl.num_actions
        self.discrete = impl.num_actions is not None
        self.action_low = getattr(impl, "action_low", None)
        self.action_high = getattr(impl, "action_high", None)
        self.key = f"env{next(_keys)}:{env_id}"
        self._raw = getattr(impl, "raw_rewards", None)
        self.on_reset = []  # callbacks at the start of each run (e.g. a logger's clock)
        self._resumed = None
        self._clear()

    def _clear(self):
        self.episode_returns = []  # (env_steps at the end, return, length)
        self.env_steps = 0
        self._ret = np.zeros(self.num_envs, np.float64)
        self._len = np.zeros(self.num_envs, np.int64)
        if self._resumed is not None:   # a resumed run starts from the checkpoint's bookkeeping
            episodes, env_steps, ret, length = self._resumed
            self.episode_returns = [(int(s), float(r), int(n)) for s, r, n in episodes]
            self.env_steps = int(env_steps)
            self._ret[:], self._len[:] = ret, length

    def resume_bookkeeping(self, episodes, env_steps, ret=0.0, length=0):
        """Start every run from a checkpoint's bookkeeping: finished ``episodes`` (``(E, 3)``: env steps,
        return, length), the ``env_steps`` so far, and the return and length of the episodes in flight
        (zero for a host env, whose episodes in flight a resume drops)."""
        self._resumed = (np.asarray(episodes, np.float64).reshape(-1, 3), env_steps, ret, length)
        self._clear()

    # host side ---------------------------------------------------------------------------
    def _reset(self):
        self._clear()
        for fn in self.on_reset:
            fn()
        obs = self.impl.reset()
        return np.asarray(obs, np.float32).reshape(self.observation_shape)

    def _step(self, a):
        # arrays of the program's own: copies (np.array), whatever buffers the env reuses, so the
        # UDF's call (``fresh``) hands them on without copying them again; a step runs about
        # 15 us of Python besides gymnasium's own (CartPole, 8 envs: 38 us)
        obs, r, done = self.impl.step(a.reshape(self.action_shape))
        r = np.array(r, np.float32).reshape(self.num_envs)
        done = np.array(done, bool).reshape(self.num_envs)
        self._account(self._raw(r) if self._raw is not None else r, done)
        return np.array(obs, np.float32).reshape(self.observation_shape), r, done

    def _account(self, raw, done):
        """One step's bookkeeping: the (unnormalised) rewards and done flags of the ``num_envs`` envs."""
        self.env_steps += self.num_envs
        self._ret += raw  # float64 += float32: numpy casts in place
        self._len += 1
        if _any(done):  # most steps end no episode: skip the bookkeeping of those that do
            for k in np.flatnonzero(done):
                self.episode_returns.append((self.env_steps, float(self._ret[k]), int(self._len[k])))
            self._ret[done] = 0.0
            self._len[done] = 0

    def log_inputs(self) -> list:
        """Tensors a per-iteration log sink should read for this env's bookkeeping (none: a host env
        counts its episodes inside its step UDF)."""
        return []

    def recent_return(self, k=10):
        """Mean return of the last ``k`` finished episodes (NaN before the first)."""
        if not self.episode_returns:
            return float("nan")
        return float(np.mean([r for _, r, _ in self.episode_returns[-k:]]))

    # graph side ----------------------------------------------------------------------------
    def reset(self, name="reset"):
        """The first observation of the run (a UDF with no inputs: runs once per run)."""
        from ..api.naming import name_scope
        from ..api.world import udf

        with name_scope(self.env_id):
            (obs,) = udf(self._reset, [], [self.observation_shape], ["float32"], state=self.key, name=name)
        return obs

    def step(self, a, name="step"):
        """``(obs, reward, done)`` after taking action ``a`` (shape ``env.action_shape``)."""
        from ..api.naming import name_scope

        with name_scope(self.env_id):
            return self._step_op(a, name)

    def _step_op(self, a, name):
        from ..api.world import udf

        a = self._action(a)
        return udf(_fresh(self._step), [a], [self.observation_shape, (self.num_envs,), (self.num_envs,)],
                   ["float32", "float32", "bool"], state=self.key, name=name)

    def _action(self, a):
        """``a`` as a tensor the env takes: checked against the action shape and kind."""
        from ..api.ops import as_tensor, cast

        a = as_tensor(a)
        if tuple(a.shape) != self.action_shape:
            from ..errors import ShapeError

            raise ShapeError(f"{self.env_id}.step: action {a.name!r} has shape {a.shape}, "
                             f"the env takes {self.action_shape}")
        if self.discrete and a.dtype.kind not in "iu":
            raise EnvError(f"{self.env_id}.step: discrete action {a.name!r} must be an integer tensor, got {a.dtype}")
        return a if self.discrete else cast(a, "float32")

    def close(self):
        """Close the underlying gymnasium environment (if any)."""
        if hasattr(self.impl, "close"):
            self.impl.close()

    def __repr__(self):
        kind = f"Discrete({self.num_actions})" if self.discrete else f"Box{self.single_action_shape}"
        return f"Env({self.env_id!r}, num_envs={self.num_envs}, obs={self.single_observation_shape}, actions={kind})"


def make_env(env_id, num_envs, seed=0, compiled=None, **kwargs) -> Env:
    """A batched environment for recurrent-tensor programs (see the module docstring).

    ``env_id`` is any gymnasium id with Box observations and Discrete or 1-D Box actions,
    or ``"trivial"`` (kwargs ``obs_shape=(1,)``, ``episode_length=100``). For gymnasium ids,
    ``normalize=True`` adds CleanRL's continuous-control wrappers (running observation and
    reward normalisation with clipping; ``gamma=`` for the reward's discounted scale; the
    logged episode returns stay unnormalised). Other kwargs go to ``gymnasium.make``.

    ``compiled``: by default (None) the ids of :data:`timerl.rl.compiled.COMPILED_IDS` (Acrobot-v1,
    CartPole-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1, trivial) run compiled into
    the program: their dynamics are program tensors, not a host UDF (:mod:`timerl.rl.compiled`);
    other ids, and arguments only gymnasium's env takes (``normalize=True``, ``render_mode``, ...),
    run gymnasium's. ``compiled=False``: gymnasium's own environment always (for the trivial env,
    the host :class:`TrivialEnv`); ``compiled=True``: the compiled version or an error. A bad id,
    argument or space is a :class:`EnvError` (a ValueError).
    """
    from .compiled import COMPILED_IDS, CompiledEnv, compiled_impl

    if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs <= 0:
        raise EnvError(f"num_envs must be a positive int, got {num_envs!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise EnvError(f"seed must be an int >= 0, got {seed!r}")
    if not isinstance(env_id, str):
        raise EnvError(f"env_id must be a string, got {env_id!r}")
    if compiled not in (None, True, False):
        raise EnvError(f"compiled must be None (compiled where a version exists), True or False, got {compiled!r}")
    num_envs, seed = int(num_envs), int(seed)
    if env_id == "trivial":
        unknown = set(kwargs) - {"obs_shape", "episode_length"}
        if unknown:
            raise EnvError(f"trivial env: unknown arguments {sorted(unknown)}; it takes obs_shape, episode_length")
    if compiled is not False:
        impl = compiled_impl(env_id, num_envs, kwargs)
        if impl is not None:
            return CompiledEnv(impl, env_id)
        if compiled:
            raise EnvError(f"no compiled version of {env_id!r} with {sorted(kwargs) or 'no arguments'}: compiled "
                           f"environments are {', '.join(COMPILED_IDS)} (they take max_episode_steps; the MountainCars "
                           "goal_velocity, Pendulum-v1 g); "
                           "pass compiled=False (or leave it out) for gymnasium's")
    if env_id == "trivial":
        return Env(TrivialEnv(num_envs, seed, **kwargs), env_id)
    return Env(GymEnv(env_id, num_envs, seed, **kwargs), env_id)
