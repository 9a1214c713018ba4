"""Environments compiled into the program: their dynamics as recurrent-tensor code.

``tl.rl.make_env(id, N, compiled=True)`` for the ids of :data:`COMPILED_IDS` (gymnasium's classic
control: Acrobot-v1, CartPole-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1; and the
trivial env) returns a :class:`CompiledEnv` (the default, ``compiled=False``, gives gymnasium's own environment,
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
(and ``o[t + 1]``) is a fresh initial state. The scheduler sees the step as statements it can
fuse with the policy's, and the statement kernels compute it: no call into Python per step
except one sink that keeps the episode bookkeeping of :class:`Env` (``episode_returns``, ...).

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

from .envs import Env, EnvError

#: the ids with a compiled version (``make_env(id, ..., compiled=True)``)
COMPILED_IDS = ("Acrobot-v1", "CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1", "trivial")


class CartPole:
    """gymnasium's ``CartPoleVectorEnv`` (``CartPole-v1``: euler integration, 500-step limit)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart           # as gymnasium computes them (the same doubles)
    polemass_length = masspole * length
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    low, high = -0.05, 0.05

    def __init__(self, num_envs, max_episode_steps=500):
        self.num_envs = num_envs
        self.max_steps = int(max_episode_steps)
        self.obs_shape, self.single_action_shape, self.num_actions = (4,), (), 2
        self.state_shape = (4, num_envs)        # gymnasium's layout: one row per state variable

    def initial(self, tl, domain):
        return tl.random.uniform(self.state_shape, domain=domain, low=self.low, high=self.high, dtype="float64")

    def observe(self, tl, s):
        return s.transpose(1, 0).astype("float32")

    def dynamics(self, tl, s, a, count):
        """(next state, reward, terminated): gymnasium's ``step``, term for term (``count``: the episode's
        steps so far, which only MountainCarContinuous reads)."""
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


class MountainCar:
    """gymnasium's ``MountainCar-v0`` (200-step limit), vectorized: float64 state (position, velocity)."""

    min_position, max_position, max_speed, goal_position = -1.2, 0.6, 0.07, 0.5
    force, gravity = 0.001, 0.0025

    def __init__(self, num_envs, max_episode_steps=200, goal_velocity=0):
        self.num_envs, self.max_steps, self.goal_velocity = num_envs, int(max_episode_steps), goal_velocity
        self.obs_shape, self.single_action_shape, self.num_actions = (2,), (), 3
        self.state_shape = (2, num_envs)

    def initial(self, tl, domain):
        pos = tl.random.uniform((1, self.num_envs), domain=domain, low=-0.6, high=-0.4, dtype="float64")
        return tl.concat([pos, tl.zeros((1, self.num_envs), "float64", domain=domain)], axis=0)

    def observe(self, tl, s):
        return s.transpose(1, 0).astype("float32")

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


class MountainCarContinuous:
    """gymnasium's ``MountainCarContinuous-v0`` (999-step limit), vectorized. gymnasium keeps its state
    in float32 between steps (in float64 right after a reset) and mixes float32 and Python-float
    arithmetic; this follows its precisions: the state (float64 here) holds float32 values, and the
    first step of an episode computes in float64, the others in float32. An action outside [-1, 1]
    is clipped in float32 (gymnasium's ``min(max(a, -1.0), 1.0)`` then computes ``force * power`` in
    float64: a difference in the last bits of that step's velocity)."""

    min_position, max_position, max_speed, goal_position, power = -1.2, 0.6, 0.07, 0.45, 0.0015

    def __init__(self, num_envs, max_episode_steps=999, goal_velocity=0):
        self.num_envs, self.max_steps, self.goal_velocity = num_envs, int(max_episode_steps), goal_velocity
        self.obs_shape, self.single_action_shape, self.num_actions = (2,), (1,), None
        self.action_low, self.action_high = -1.0, 1.0
        self.state_shape = (2, num_envs)

    initial = MountainCar.initial
    observe = MountainCar.observe

    def dynamics(self, tl, s, a, count):
        force = tl.clip(a.reshape((self.num_envs, 1)).spatial[:, 0], -1.0, 1.0)   # float32
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
        a64 = a.reshape((self.num_envs, 1)).spatial[:, 0].astype("float64")
        reward = (tl.where(term, 100.0, 0.0) - a64 * a64 * 0.1).astype("float32")
        return tl.stack([p, v], axis=0), reward, term


class Pendulum:
    """gymnasium's ``Pendulum-v1`` (200-step limit, never terminates): float64 state (theta, theta_dot);
    the torque clipped in float32 as gymnasium clips the float32 action."""

    max_speed, max_torque, dt, m, length = 8, 2.0, 0.05, 1.0, 1.0

    def __init__(self, num_envs, max_episode_steps=200, g=10.0):
        self.num_envs, self.max_steps, self.g = num_envs, int(max_episode_steps), float(g)
        self.obs_shape, self.single_action_shape, self.num_actions = (3,), (1,), None
        self.action_low, self.action_high = -self.max_torque, self.max_torque
        self.state_shape = (2, num_envs)

    def initial(self, tl, domain):
        u = tl.random.uniform(self.state_shape, domain=domain, low=-1.0, high=1.0, dtype="float64")
        return tl.concat([u.spatial[0:1] * math.pi, u.spatial[1:2]], axis=0)   # theta in [-pi, pi], theta_dot in [-1, 1]

    def observe(self, tl, s):
        th, thdot = s.spatial[0], s.spatial[1]
        return tl.stack([tl.cos(th), tl.sin(th), thdot], axis=1).astype("float32")

    def dynamics(self, tl, s, a, count):
        th, thdot = s.spatial[0], s.spatial[1]
        u32 = tl.clip(a.reshape((self.num_envs, 1)).spatial[:, 0], -self.max_torque, self.max_torque)   # float32
        norm = ((th + math.pi) % (2 * math.pi)) - math.pi
        costs = norm * norm + 0.1 * (thdot * thdot) + (0.001 * (u32 * u32)).astype("float64")
        g, m, ln, dt = self.g, self.m, self.length, self.dt
        # ``3.0 / (m * l**2) * u`` of a float32 u is float32 in numpy (a Python float does not widen it)
        newthdot = thdot + (3 * g / (2 * ln) * tl.sin(th) + (u32 * (3.0 / (m * ln ** 2))).astype("float64")) * dt
        newthdot = tl.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        never = tl.zeros((self.num_envs,), "bool", domain=s.domain)
        return tl.stack([newth, newthdot], axis=0), (-costs).astype("float32"), never


class Acrobot:
    """gymnasium's ``Acrobot-v1`` ("book" dynamics, one RK4 step of dt = 0.2, no torque noise,
    500-step limit): float64 state (theta1, theta2, dtheta1, dtheta2)."""

    dt, g = 0.2, 9.8
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    moi = 1.0
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi

    def __init__(self, num_envs, max_episode_steps=500):
        self.num_envs, self.max_steps = num_envs, int(max_episode_steps)
        self.obs_shape, self.single_action_shape, self.num_actions = (6,), (), 3
        self.state_shape = (4, num_envs)

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


class Trivial:
    """The paper's synthetic environment (:class:`timerl.rl.envs.TrivialEnv`), compiled."""

    def __init__(self, num_envs, obs_shape=(1,), episode_length=100):
        obs_shape = (int(obs_shape),) if np.isscalar(obs_shape) else tuple(int(s) for s in obs_shape)
        if any(s <= 0 for s in obs_shape):
            raise EnvError(f"trivial env: obs_shape entries must be positive, got {obs_shape}")
        if int(episode_length) <= 0:
            raise EnvError(f"trivial env: episode_length must be positive, got {episode_length}")
        self.num_envs, self.obs_shape, self.max_steps = num_envs, obs_shape, int(episode_length)
        self.single_action_shape, self.num_actions = (1,), None
        self.action_low, self.action_high = -1.0, 1.0
        self.state_shape = (num_envs,)

    def initial(self, tl, domain):
        return tl.random.uniform(self.state_shape, domain=domain, low=-1.0, high=1.0, dtype="float64")

    def observe(self, tl, s):
        n = self.num_envs
        s = s.astype("float32").reshape((n,) + (1,) * len(self.obs_shape))
        return tl.broadcast_to(s, (n,) + self.obs_shape)

    def dynamics(self, tl, s, a, count):
        a = a.reshape((self.num_envs, 1)).spatial[:, 0].astype("float64")
        s2 = tl.clip(s + 0.05 * tl.clip(a, -1.0, 1.0), -1.0, 1.0)
        never = tl.zeros(self.state_shape, "bool", domain=s.domain)   # episodes end by the time limit only
        return s2, (-tl.abs(s2)).astype("float32"), never


class CompiledEnv(Env):
    """An environment whose reset and step are program tensors (see the module docstring)."""

    compiled = True

    def __init__(self, impl, env_id):
        super().__init__(impl, env_id)
        self._s0 = None
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
        first = a.prog._count
        obs, reward, done = self._build_step(tl, a, name)
        for n in range(first, a.prog._count):  # the step's ops: one island of statements (timerl.passes.group)
            a.prog.pdg.rec(n).attrs["island"] = self.key
        return obs, reward, done

    def _build_step(self, tl, a, name):
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
        tl.sink([reward, done], lambda v, p: self._account(v[0], v[1]), name=f"{name}_bookkeeping")
        return obs, reward, done


def compiled_impl(env_id, num_envs, kwargs):
    """The compiled dynamics for ``env_id`` with ``kwargs``, or None where gymnasium's must run
    (an id without a compiled version, or arguments only gymnasium's takes)."""
    if env_id == "trivial":
        unknown = set(kwargs) - {"obs_shape", "episode_length"}
        if unknown:
            raise EnvError(f"trivial env: unknown arguments {sorted(unknown)}; it takes obs_shape, episode_length")
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
