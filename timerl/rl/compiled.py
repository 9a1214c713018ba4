"""Environments compiled into the program: their dynamics as recurrent-tensor code.

``tl.rl.make_env(id, N)`` for the ids of :data:`COMPILED_IDS` (gymnasium's classic control:
Acrobot-v1, CartPole-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1; and the trivial
env) returns a :class:`CompiledEnv` by default (``compiled=False`` gives gymnasium's own environment,
a host UDF). The same user code drives both::

    o = tl.placeholder(env.observation_shape, "float32", (i, t))
    o[0, 0] = env.reset()
    o[i, 0] = o[i - 1, T]
    o[i, t + 1], r, done = env.step(a)

but here ``env.step`` adds ordinary tensors to the program instead of a UDF: the environment's
state is a placeholder over the action's domain (``(t,)`` or ``(i, t)``), carried across rollouts
like the observation (``state[i, 0] = state[i - 1, T]``), stepped by gymnasium's equations in
float64, with a step counter for the time limit and the same-step autoreset of
:class:`timerl.rl.envs.GymEnv`: where an episode ends at step t, ``done[t]`` holds and the state
(and ``o[t + 1]``) is a fresh initial state. The step's ops are ordinary statements computed by
the statement kernels; the grouping joins them with the policy's, so one statement kernel computes
an acting step's policy forward pass, its sample and the environment step it drives.
No call into Python per step: one sink per rollout keeps the episode bookkeeping of :class:`Env`
(``episode_returns``, ...; per step only where the action's domain is ``(t,)`` alone).

What differs from gymnasium: the initial states are drawn by the program's counter-based RNG
(``compile(seed=...)``) from gymnasium's documented distributions (CartPole: uniform in
[-0.05, 0.05] per state variable), not by gymnasium's generator, so the values of a run differ
from a gymnasium run with the same seed; from the same state and the same actions, the
observations, rewards and done flags are gymnasium's (float64 dynamics, ``tests/test_compiled_envs.py``).
Actions are taken as the program gives them, without gymnasium's action-space check: a
discrete action other than 0 / 1 pushes CartPole's cart to the right, as gymnasium's formula
``sign(a - 0.5)`` does.
"""

from __future__ import annotations

import math

import numpy as np

from .envs import Env, EnvError, trivial_args

#: the ids with a compiled version (``make_env(id, ..., compiled=True)``)
COMPILED_IDS = ("Acrobot-v1", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1", "trivial")


class Dynamics:
    """What a compiled environment declares (the attributes :class:`Env` reads, ``state_shape``,
    ``max_steps``) and builds: ``initial(tl, domain)`` a fresh float64 state, ``observe(tl, s)``,
    and ``dynamics(tl, s, a, count)`` -> (next state, float32 reward, bool terminated), ``count``
    the episode's steps so far. The defaults: one state row per observed variable, observed as
    float32 (gymnasium's ``state.T.astype(np.float32)``)."""

    action_low = action_high = None

    def __init__(self, num_envs, max_steps, obs_shape, single_action_shape, num_actions, state_rows):
        self.num_envs, self.max_steps = num_envs, int(max_steps)
        self.obs_shape, self.single_action_shape, self.num_actions = obs_shape, single_action_shape, num_actions
        self.state_shape = (state_rows, num_envs) if state_rows else (num_envs,)

    def observe(self, tl, s):
        return s.transpose(1, 0).astype("float32")

    def first(self, a):
        """The first (only) component of a Box action of shape (num_envs, 1), as (num_envs,)."""
        return a.reshape((self.num_envs, 1)).spatial[:, 0]

    def never(self, tl, s):
        """``terminated`` of an environment that ends by its time limit only."""
        return tl.zeros((self.num_envs,), "bool", domain=s.domain)


class CartPole(Dynamics):
    """gymnasium's ``CartPoleVectorEnv`` (``CartPole-v1``: euler integration, 500-step limit)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart           # as gymnasium computes them (the same doubles)
    polemass_length = masspole * length
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    low, high = -0.05, 0.05

    def __init__(self, num_envs, max_episode_steps=500):
        super().__init__(num_envs, max_episode_steps, (4,), (), 2, 4)   # gymnasium's layout: a row per variable

    def initial(self, tl, domain):
        return tl.random.uniform(self.state_shape, domain=domain, low=self.low, high=self.high, dtype="float64")

    def dynamics(self, tl, s, a, count):
        """gymnasium's ``step``, term for term."""
        x, x_dot, theta, theta_dot = (s.spatial[k] for k in range(4))
        force = tl.where(a == 1, self.force_mag, -self.force_mag).astype("float64")   # sign(a - 0.5) * force_mag
        costheta, sintheta = tl.cos(theta), tl.sin(theta)
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (costheta * costheta) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x2 = x + self.tau * x_dot
        x_dot2 = x_dot + self.tau * xacc
        theta2 = theta + self.tau * theta_dot
        theta_dot2 = theta_dot + self.tau * thetaacc
        term = ((x2 < -self.x_threshold) | (x2 > self.x_threshold)
                | (theta2 < -self.theta_threshold_radians) | (theta2 > self.theta_threshold_radians))
        reward = tl.ones((self.num_envs,), "float32", domain=s.domain)   # 1 every step
        return tl.stack([x2, x_dot2, theta2, theta_dot2], axis=0), reward, term


class MountainCar(Dynamics):
    """gymnasium's ``MountainCar-v0`` (200-step limit), vectorized: float64 state (position, velocity)."""

    min_position, max_position, max_speed, goal_position = -1.2, 0.6, 0.07, 0.5
    force, gravity = 0.001, 0.0025

    def __init__(self, num_envs, max_episode_steps=200, goal_velocity=0):
        super().__init__(num_envs, max_episode_steps, (2,), (), 3, 2)
        self.goal_velocity = goal_velocity

    def initial(self, tl, domain):
        pos = tl.random.uniform((1, self.num_envs), domain=domain, low=-0.6, high=-0.4, dtype="float64")
        return tl.concat([pos, tl.zeros((1, self.num_envs), "float64", domain=domain)], axis=0)

    def dynamics(self, tl, s, a, count):
        position, velocity = s.spatial[0], s.spatial[1]
        # gymnasium's ``velocity += (action - 1) * force + cos(3 * position) * (-gravity)``: the sum first
        velocity = velocity + ((a - 1).astype("float64") * self.force + tl.cos(3 * position) * (-self.gravity))
        velocity = tl.clip(velocity, -self.max_speed, self.max_speed)
        position = tl.clip(position + velocity, self.min_position, self.max_position)
        velocity = tl.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        term = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = -tl.ones((self.num_envs,), "float32", domain=s.domain)
        return tl.stack([position, velocity], axis=0), reward, term


class MountainCarContinuous(Dynamics):
    """gymnasium's ``MountainCarContinuous-v0`` (999-step limit), vectorized. gymnasium keeps its state
    in float32 between steps (in float64 right after a reset) and mixes float32 and Python-float
    arithmetic; this follows its precisions: the state (float64 here) holds float32 values, and the
    first step of an episode computes in float64, the others in float32. An action outside [-1, 1]
    is clipped in float32 (gymnasium's ``min(max(a, -1.0), 1.0)`` then computes ``force * power`` in
    float64: a difference in the last bits of that step's velocity)."""

    min_position, max_position, max_speed, goal_position, power = -1.2, 0.6, 0.07, 0.45, 0.0015

    action_low, action_high = -1.0, 1.0

    def __init__(self, num_envs, max_episode_steps=999, goal_velocity=0):
        super().__init__(num_envs, max_episode_steps, (2,), (1,), None, 2)
        self.goal_velocity = goal_velocity

    initial = MountainCar.initial

    def dynamics(self, tl, s, a, count):
        force = tl.clip(self.first(a), -1.0, 1.0)                                 # float32
        fp = force * self.power                                                   # float32, as in numpy

        def step(p, v, dt):  # gymnasium's arithmetic with a position and velocity of dtype dt
            d = 0.0025 * tl.cos((3 * p).astype("float64"))                      # math.cos: a Python float
            v = v + (fp - d.astype("float32")).astype(dt)
            v = tl.clip(v, -self.max_speed, self.max_speed)
            p = tl.clip(p + v, self.min_position, self.max_position)
            v = tl.where((p == self.min_position) & (v < 0), 0.0, v).astype(dt)
            return p, v

        p64, v64 = s.spatial[0], s.spatial[1]
        p_a, v_a = step(p64, v64, "float64")                                     # just reset: float64
        p_b, v_b = step(p64.astype("float32"), v64.astype("float32"), "float32")
        first = count == 0
        p = tl.where(first, p_a.astype("float32"), p_b).astype("float64")       # stored as float32
        v = tl.where(first, v_a.astype("float32"), v_b).astype("float64")
        pos = tl.where(first, p_a, p_b.astype("float64"))
        vel = tl.where(first, v_a, v_b.astype("float64"))
        term = (pos >= self.goal_position) & (vel >= self.goal_velocity)
        a64 = self.first(a).astype("float64")
        reward = (tl.where(term, 100.0, 0.0) - a64 * a64 * 0.1).astype("float32")
        return tl.stack([p, v], axis=0), reward, term


class Pendulum(Dynamics):
    """gymnasium's ``Pendulum-v1`` (200-step limit, never terminates): float64 state (theta, theta_dot);
    the torque clipped in float32 as gymnasium clips the float32 action."""

    max_speed, max_torque, dt, m, length = 8, 2.0, 0.05, 1.0, 1.0
    action_low, action_high = -max_torque, max_torque

    def __init__(self, num_envs, max_episode_steps=200, g=10.0):
        super().__init__(num_envs, max_episode_steps, (3,), (1,), None, 2)
        self.g = float(g)

    def initial(self, tl, domain):
        u = tl.random.uniform(self.state_shape, domain=domain, low=-1.0, high=1.0, dtype="float64")
        return tl.concat([u.spatial[0:1] * math.pi, u.spatial[1:2]], axis=0)   # theta in [-pi, pi], theta_dot in [-1, 1]

    def observe(self, tl, s):
        th, thdot = s.spatial[0], s.spatial[1]
        return tl.stack([tl.cos(th), tl.sin(th), thdot], axis=1).astype("float32")

    def dynamics(self, tl, s, a, count):
        th, thdot = s.spatial[0], s.spatial[1]
        u32 = tl.clip(self.first(a), -self.max_torque, self.max_torque)   # float32
        norm = ((th + math.pi) % (2 * math.pi)) - math.pi
        costs = norm * norm + 0.1 * (thdot * thdot) + (0.001 * (u32 * u32)).astype("float64")
        g, m, ln, dt = self.g, self.m, self.length, self.dt
        # ``3.0 / (m * l**2) * u`` of a float32 u is float32 in numpy (a Python float does not widen it)
        newthdot = thdot + (3 * g / (2 * ln) * tl.sin(th) + (u32 * (3.0 / (m * ln ** 2))).astype("float64")) * dt
        newthdot = tl.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        return tl.stack([newth, newthdot], axis=0), (-costs).astype("float32"), self.never(tl, s)


class Acrobot(Dynamics):
    """gymnasium's ``Acrobot-v1`` ("book" dynamics, one RK4 step of dt = 0.2, no torque noise,
    500-step limit): float64 state (theta1, theta2, dtheta1, dtheta2)."""

    dt, g = 0.2, 9.8
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    moi = 1.0
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi

    def __init__(self, num_envs, max_episode_steps=500):
        super().__init__(num_envs, max_episode_steps, (6,), (), 3, 4)

    def initial(self, tl, domain):
        return tl.random.uniform(self.state_shape, domain=domain, low=-0.1, high=0.1, dtype="float64")

    def observe(self, tl, s):
        th1, th2, dth1, dth2 = (s.spatial[k] for k in range(4))
        return tl.stack([tl.cos(th1), tl.sin(th1), tl.cos(th2), tl.sin(th2), dth1, dth2], axis=1).astype("float32")

    def _dsdt(self, tl, y, a):
        """gymnasium's ``_dsdt``, term for term (its constants folded in the same order)."""
        m1, m2, l1, lc1, lc2, I1, I2, g, pi = self.m1, self.m2, self.l1, self.lc1, self.lc2, self.moi, self.moi, \
            self.g, math.pi
        theta1, theta2, dtheta1, dtheta2 = y
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * tl.cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * tl.cos(theta2)) + I2
        phi2 = m2 * lc2 * g * tl.cos(theta1 + theta2 - pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * (dtheta2 * dtheta2) * tl.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * tl.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * tl.cos(theta1 - pi / 2) + phi2)
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * tl.sin(theta2) - phi2) / (
            m2 * lc2**2 + I2 - (d2 * d2) / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return [dtheta1, dtheta2, ddtheta1, ddtheta2]

    def dynamics(self, tl, s, a, count):
        torque = (a - 1).astype("float64")   # AVAIL_TORQUE[a]: -1, 0, +1
        y0 = [s.spatial[k] for k in range(4)]
        dt = 0.2 - 0   # gymnasium's rk4 over t = [0, dt]
        dt2 = dt / 2.0
        k1 = self._dsdt(tl, y0, torque)
        k2 = self._dsdt(tl, [y + dt2 * k for y, k in zip(y0, k1)], torque)
        k3 = self._dsdt(tl, [y + dt2 * k for y, k in zip(y0, k2)], torque)
        k4 = self._dsdt(tl, [y + dt * k for y, k in zip(y0, k3)], torque)
        y = [y + dt / 6.0 * (p + 2 * q + 2 * r + w) for y, p, q, r, w in zip(y0, k1, k2, k3, k4)]

        def wrap(x):  # gymnasium's wrap(x, -pi, pi): its loops run at most twice from a bounded state
            for _ in range(2):
                x = tl.where(x > math.pi, x - 2 * math.pi, tl.where(x < -math.pi, x + 2 * math.pi, x))
            return x

        th1, th2 = wrap(y[0]), wrap(y[1])
        dth1 = tl.clip(y[2], -self.max_vel_1, self.max_vel_1)
        dth2 = tl.clip(y[3], -self.max_vel_2, self.max_vel_2)
        term = -tl.cos(th1) - tl.cos(th2 + th1) > 1.0
        reward = tl.where(term, 0.0, -1.0).astype("float32")
        return tl.stack([th1, th2, dth1, dth2], axis=0), reward, term


class Trivial(Dynamics):
    """The paper's synthetic environment (:class:`timerl.rl.envs.TrivialEnv`), compiled."""

    action_low, action_high = -1.0, 1.0

    def __init__(self, num_envs, obs_shape=(1,), episode_length=100):
        obs_shape, episode_length = trivial_args(obs_shape, episode_length)
        super().__init__(num_envs, episode_length, obs_shape, (1,), None, 0)

    def initial(self, tl, domain):
        return tl.random.uniform(self.state_shape, domain=domain, low=-1.0, high=1.0, dtype="float64")

    def observe(self, tl, s):
        n = self.num_envs
        s = s.astype("float32").reshape((n,) + (1,) * len(self.obs_shape))
        return tl.broadcast_to(s, (n,) + self.obs_shape)

    def dynamics(self, tl, s, a, count):
        s2 = tl.clip(s + 0.05 * tl.clip(self.first(a).astype("float64"), -1.0, 1.0), -1.0, 1.0)
        return s2, (-tl.abs(s2)).astype("float32"), self.never(tl, s)   # episodes end by the time limit only


class CompiledEnv(Env):
    """An environment whose reset and step are program tensors (see the module docstring)."""

    compiled = True

    def __init__(self, impl, env_id):
        super().__init__(impl, env_id)
        self._s0 = None
        self._rollout, self._by_log = None, False   # the rollout's rewards and dones; bookkept by a log sink
        #: the state tensor of the last ``step`` built (float64, ``impl.state_shape``), to inspect or sink
        self.state = None

    def reset(self, name="reset"):
        """The first observation of the run: a fresh initial state, drawn once per run."""
        import timerl as tl

        from ..api.naming import name_scope

        with name_scope(self.env_id):
            self._s0 = self.impl.initial(tl, ())
            obs = self.impl.observe(tl, self._s0)
            tl.sink(self._s0, lambda v, p: self._start(), name=f"{name}_bookkeeping")
        return obs

    def _start(self):
        self._clear()
        for fn in self.on_reset:
            fn()

    def _step_op(self, a, name):
        import timerl as tl

        a = self._action(a)
        dims = a.domain
        if self._s0 is None:
            raise EnvError(f"{self.env_id}.step: call env.reset() first (its initial state starts the step's)")
        if len(dims) not in (1, 2):
            raise EnvError(f"{self.env_id}.step: the compiled environment steps along the last dim of the action's "
                           f"domain and carries its state along the one before; action {a.name!r} has domain "
                           f"{tuple(d.name for d in dims)}: use a domain (t,) or (i, t), or make_env(..., compiled=False)")
        impl, n = self.impl, self.num_envs
        t = dims[-1]
        state = self.state = tl.placeholder(impl.state_shape, "float64", dims, name=f"{name}_state")
        steps = tl.placeholder((n,), "int64", dims, name=f"{name}_count")
        zero = (0,) * len(dims)
        state[zero] = self._s0
        steps[zero] = tl.zeros((n,), "int64")
        if len(dims) == 2:
            i = dims[0]
            state[i, 0] = state[i - 1, t.bound]
            steps[i, 0] = steps[i - 1, t.bound]
        nxt, reward, term = impl.dynamics(tl, state, a, steps)
        count = steps + 1
        done = term | (count >= impl.max_steps)
        fresh = impl.initial(tl, dims)
        new = tl.where(done, fresh, nxt)
        state[dims[:-1] + (t + 1,)] = new
        steps[dims[:-1] + (t + 1,)] = tl.where(done, 0, count)
        obs = impl.observe(tl, new)
        if len(dims) == 2:   # one call per rollout, not per step: the bookkeeping of its T x N rewards and dones
            rollout = (dims[0], slice(0, t.bound))
            self._rollout = [reward[rollout], done[rollout]]
            tl.sink(self._rollout, lambda v, p: None if self._by_log else self.account_rollout(*v),
                    name=f"{name}_bookkeeping")
        else:
            tl.sink([reward, done], lambda v, p: self._account(v[0], v[1]), name=f"{name}_bookkeeping")
        return obs, reward, done

    def log_inputs(self) -> list:
        """The rollout's rewards and dones, for a per-iteration log sink that does the bookkeeping
        (:meth:`timerl.rl.common.History.sink`): sinks have no order among themselves, so a log sink
        reading ``recent_return`` could run before this env's own bookkeeping sink of the same
        rollout. After this call that sink does nothing."""
        if self._rollout is None:
            return []
        self._by_log = True
        return list(self._rollout)

    def account_rollout(self, rewards, dones):
        """:meth:`Env._account` of a rollout's steps (``(T, num_envs)`` rewards and dones) at once: the
        steps between episode ends are summed whole, Python runs only at the steps where episodes end."""
        rewards = np.asarray(rewards, np.float64)
        start = 0
        for t in np.flatnonzero(dones.any(axis=1)).tolist() + [len(rewards) - 1]:
            if t < start:
                continue
            self.env_steps += self.num_envs * (t - start)
            self._ret += rewards[start:t].sum(axis=0)
            self._len += t - start
            self._account(rewards[t], dones[t])
            start = t + 1


def compiled_impl(env_id, num_envs, kwargs):
    """The compiled dynamics for ``env_id`` with ``kwargs``, or None where gymnasium's must run
    (an id without a compiled version, or arguments only gymnasium's takes)."""
    if env_id == "trivial":   # make_env checked its arguments
        return Trivial(num_envs, **kwargs)
    if env_id == "CartPole-v1" and set(kwargs) <= {"max_episode_steps"}:
        return CartPole(num_envs, **kwargs)
    if env_id == "Acrobot-v1" and set(kwargs) <= {"max_episode_steps"}:
        return Acrobot(num_envs, **kwargs)
    if env_id == "MountainCar-v0" and set(kwargs) <= {"max_episode_steps", "goal_velocity"}:
        return MountainCar(num_envs, **kwargs)
    if env_id == "MountainCarContinuous-v0" and set(kwargs) <= {"max_episode_steps", "goal_velocity"}:
        return MountainCarContinuous(num_envs, **kwargs)
    if env_id == "Pendulum-v1" and set(kwargs) <= {"max_episode_steps", "g"}:
        return Pendulum(num_envs, **kwargs)
    return None
