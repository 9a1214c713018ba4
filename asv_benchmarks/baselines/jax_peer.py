"""PPO as the fully jitted JAX peer: the environment written in jax.numpy, the whole iteration
(rollout, GAE, every epoch and minibatch update) one compiled XLA call, in the style of PureJaxRL.
Written for this project from the algorithm (CleanRL's ppo.py / ppo_continuous_action.py update,
as ``numpy_eager``), not taken from PureJaxRL's code. One thread (see ``common``).

    pip install "jax==0.10.2"    # not among timerl's dependencies; the comparison's fourth system
    python -m asv_benchmarks.baselines.jax_peer ppo --env CartPole-v1 --num-envs 8 --json

Its environments are JAX versions of CartPole-v1 (gymnasium's dynamics: Euler steps, 500-step
time limit, same-step reset; float32, where gymnasium steps in float64) and of the paper's trivial
env; neither is gymnasium's own, like the compiled environments of ``timerl``. ``compile_s`` is the
jit's lowering and XLA compile, done before the first timed iteration (like timerl's compile);
``peak_bytes`` is null (XLA's CPU buffers are not visible to tracemalloc).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # one thread: BLAS pinned and XLA's CPU client without its thread pools
    from asv_benchmarks.baselines import pin_threads

    pin_threads(os.environ)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from .common import Args, bench, script_main
from .numpy_eager import LOG_2PI

# -- environments (jax.numpy, batched over N) ------------------------------------------------------


class CartPole:
    """gymnasium's CartPole-v1: force +-10 N, Euler steps of 0.02 s, termination at |x| > 2.4 or
    |theta| > 12 degrees, truncation at 500 steps, reward 1 per step; a finished env starts again in
    the same step from a state uniform in [-0.05, 0.05]^4 (what ``obs[t + 1]`` then shows)."""

    discrete, num_actions, action_dim, obs_dim = True, 2, None, 4

    def __init__(self, num_envs, **_):
        self.num_envs = num_envs

    def reset(self, key):
        s = jax.random.uniform(key, (self.num_envs, 4), minval=-0.05, maxval=0.05)
        return (s, np.zeros(self.num_envs, np.int32))

    def obs(self, state):
        return state[0]

    def step(self, state, action, key):
        s, steps = state
        x, x_dot, th, th_dot = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        force = jnp.where(action == 1, 10.0, -10.0)
        cos, sin = jnp.cos(th), jnp.sin(th)
        total_mass, pml = 1.1, 0.05  # masscart 1 + masspole 0.1; masspole * half the pole's length 0.5
        temp = (force + pml * th_dot * th_dot * sin) / total_mass
        th_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / total_mass))
        x_acc = temp - pml * th_acc * cos / total_mass
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        th, th_dot = th + 0.02 * th_dot, th_dot + 0.02 * th_acc
        steps = steps + 1
        limit = 12 * 2 * math.pi / 360
        done = (x < -2.4) | (x > 2.4) | (th < -limit) | (th > limit) | (steps >= 500)
        moved = jnp.stack([x, x_dot, th, th_dot], axis=1)
        fresh = jax.random.uniform(key, moved.shape, minval=-0.05, maxval=0.05)
        s = jnp.where(done[:, None], fresh, moved)
        return (s, jnp.where(done, 0, steps)), jnp.ones(self.num_envs, jnp.float32), done


class Trivial:
    """The TimeRL paper's synthetic env as ``common.TrivialEnv``: ``s <- clip(s + 0.05 clip(a, -1, 1),
    -1, 1)``, reward ``-|s|``, the observation ``s`` broadcast to ``obs_shape``, episodes of exactly
    ``episode_length`` steps, a new state uniform in [-1, 1]."""

    discrete, num_actions, action_dim = False, None, 1

    def __init__(self, num_envs, obs_shape=(1,), episode_length=100):
        self.num_envs, self.obs_shape, self.episode_length = num_envs, tuple(obs_shape), episode_length
        self.obs_dim = int(np.prod(self.obs_shape))

    def reset(self, key):
        return (jax.random.uniform(key, (self.num_envs,), minval=-1.0, maxval=1.0), np.zeros(self.num_envs, np.int32))

    def obs(self, state):
        return jnp.broadcast_to(state[0][:, None], (self.num_envs, self.obs_dim))

    def step(self, state, action, key):
        s, steps = state
        s = jnp.clip(s + 0.05 * jnp.clip(action[:, 0], -1.0, 1.0), -1.0, 1.0)
        reward = -jnp.abs(s)
        steps = steps + 1
        done = steps >= self.episode_length
        fresh = jax.random.uniform(key, s.shape, minval=-1.0, maxval=1.0)
        return (jnp.where(done, fresh, s), jnp.where(done, 0, steps)), reward, done


def make_env(args: Args):
    if args.env == "CartPole-v1":
        return CartPole(args.num_envs)
    if args.env == "trivial":
        return Trivial(args.num_envs, args.obs_shape or (1,), args.episode_length)
    raise ValueError(f"the JAX peer supports --env CartPole-v1 and --env trivial, got {args.env!r}")


# -- network and Adam (pytrees of arrays) -------------------------------------------------------------


def mlp_init(key, sizes, out_gain):
    """Orthogonal weights (gain sqrt 2, the head ``out_gain``), zero biases, as CleanRL."""

    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        gain = out_gain if k == len(sizes) - 2 else math.sqrt(2.0)
        W = jax.nn.initializers.orthogonal(gain)(keys[k], (n_in, n_out), np.float32)
        params.append((W, np.zeros(n_out, np.float32)))
    return params


def mlp(params, x):
    for k, (W, b) in enumerate(params):
        x = x @ W + b
        if k < len(params) - 1:
            x = jnp.tanh(x)
    return x


def dist(discrete, params, x):
    """The actor's log-probabilities of each action (discrete), or its Gaussian mean and log-std."""
    out = mlp(params["actor"], x)
    if discrete:
        return jax.nn.log_softmax(out, axis=1), None
    return out, params["logstd"] + jnp.zeros_like(out)


def gaussian_logp(a, mean, logstd):
    z = (a - mean) / jnp.exp(logstd)
    return jnp.sum(-0.5 * z * z - logstd - 0.5 * LOG_2PI, axis=1)


def sample(discrete, params, x, key):
    a_out, logstd = dist(discrete, params, x)
    if discrete:
        a = jax.random.categorical(key, a_out, axis=1)
        return a, jnp.take_along_axis(a_out, a[:, None], axis=1)[:, 0]
    a = a_out + jnp.exp(logstd) * jax.random.normal(key, a_out.shape)
    return a, gaussian_logp(a, a_out, logstd)


def ppo_loss(args: Args, discrete, params, mb):
    """CleanRL's PPO loss on the minibatch ``mb`` (the numpy baseline's ``loss_and_grads``)."""
    c = args.clip_coef
    a_out, logstd = dist(discrete, params, mb["obs"])
    if discrete:
        logp = jnp.take_along_axis(a_out, mb["actions"][:, None], axis=1)[:, 0]
        ent = -jnp.sum(jnp.exp(a_out) * a_out, axis=1)
    else:
        logp, ent = gaussian_logp(mb["actions"], a_out, logstd), jnp.sum(0.5 + 0.5 * LOG_2PI + logstd, axis=1)
    v = mlp(params["critic"], mb["obs"])[:, 0]
    ratio = jnp.exp(logp - mb["logp"])
    adv = mb["adv"]
    if args.norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - c, 1 + c)).mean()
    R, v_old = mb["ret"], mb["values"]
    if args.clip_vloss:
        vc = v_old + jnp.clip(v - v_old, -c, c)
        v_loss = 0.5 * jnp.maximum((v - R) ** 2, (vc - R) ** 2).mean()
    else:
        v_loss = 0.5 * ((v - R) ** 2).mean()
    return pg_loss - args.ent("ppo") * ent.mean() + args.vf_coef * v_loss


class PPO:
    """One jitted call per iteration: a ``lax.scan`` over the rollout's steps, GAE as a reverse
    scan, then a scan over epochs of a scan over shuffled minibatches (grad, global-norm clip, Adam
    with eps 1e-5 and the learning rate annealed linearly to 0 over the iterations)."""

    def __init__(self, args: Args):
        self.args = args
        self.env = env = make_env(args)
        k_actor, k_critic, k_env, key = jax.random.split(jax.random.PRNGKey(args.seed), 4)
        hid = [args.hidden] * args.layers
        n_out = env.num_actions if env.discrete else env.action_dim
        params = {"actor": mlp_init(k_actor, [env.obs_dim, *hid, n_out], 0.01),
                  "critic": mlp_init(k_critic, [env.obs_dim, *hid, 1], 1.0)}
        if not env.discrete:
            params["logstd"] = np.zeros((1, n_out), np.float32)
        zeros = jax.tree_util.tree_map(lambda p: np.zeros(np.shape(p), np.float32), params)
        env_state = env.reset(k_env)
        self.carry = (params, zeros, zeros, np.int32(0), env_state, key, np.zeros(args.num_envs, np.float32))
        t0 = time.perf_counter()
        self.step = jax.jit(self._iteration).lower(self.carry).compile()
        self.compile_s = time.perf_counter() - t0
        self.returns_seen = []

    # -- one iteration
    def _iteration(self, carry):
        args, env = self.args, self.env
        params, m, v, it, env_state, key, ep_ret = carry
        T, N, B = args.num_steps, args.num_envs, args.batch_size

        def act(c, _):
            env_state, key, ep_ret = c
            key, k_act, k_env = jax.random.split(key, 3)
            x = env.obs(env_state)
            a, logp = sample(env.discrete, params, x, k_act)
            value = mlp(params["critic"], x)[:, 0]
            env_state, r, done = env.step(env_state, a, k_env)
            ep_ret = ep_ret + r
            out = {"obs": x, "actions": a, "logp": logp, "values": value, "rewards": r,
                   "dones": done.astype(jnp.float32), "finished": jnp.where(done, ep_ret, jnp.nan)}
            return (env_state, key, jnp.where(done, 0.0, ep_ret)), out

        (env_state, key, ep_ret), roll = jax.lax.scan(act, (env_state, key, ep_ret), None, length=T)
        last_value = mlp(params["critic"], env.obs(env_state))[:, 0]

        def gae_step(acc_next, xs):
            acc, v_next = acc_next
            r, value, done = xs
            nonterminal = 1.0 - done
            delta = r + args.gamma * nonterminal * v_next - value
            acc = delta + args.gamma * args.gae_lambda * nonterminal * acc
            return (acc, value), acc

        _, adv = jax.lax.scan(gae_step, (jnp.zeros(N), last_value), (roll["rewards"], roll["values"], roll["dones"]),
                              reverse=True)
        batch = {"obs": roll["obs"].reshape(B, -1), "actions": roll["actions"].reshape((B,) + roll["actions"].shape[2:]),
                 "logp": roll["logp"].reshape(B), "adv": adv.reshape(B), "ret": (adv + roll["values"]).reshape(B),
                 "values": roll["values"].reshape(B)}
        lr = args.lr_at("ppo", it)
        mb_size = B // args.minibatches
        grad = jax.grad(functools.partial(ppo_loss, args, env.discrete))

        def update(c, mb):
            params, m, v, t = c
            g = grad(params, mb)
            if args.max_grad_norm:
                norm = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
                g = jax.tree_util.tree_map(lambda x: x * jnp.minimum(args.max_grad_norm / (norm + 1e-6), 1.0), g)
            t = t + 1
            m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
            v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
            bc1, bc2 = 1.0 - 0.9 ** t, 1.0 - 0.999 ** t
            params = jax.tree_util.tree_map(
                lambda p, a, b: p - (lr / bc1) * a / (jnp.sqrt(b) / jnp.sqrt(bc2) + 1e-5), params, m, v)
            return (params, m, v, t), None

        def epoch(c, k):
            perm = jax.random.permutation(k, B)
            mbs = jax.tree_util.tree_map(lambda x: x[perm].reshape((args.minibatches, mb_size) + x.shape[1:]), batch)
            return jax.lax.scan(update, c, mbs)[0], None

        key, k_epochs = jax.random.split(key)
        t0 = it * args.epochs * args.minibatches
        (params, m, v, _), _ = jax.lax.scan(epoch, (params, m, v, t0), jax.random.split(k_epochs, args.epochs))
        return (params, m, v, it + 1, env_state, key, ep_ret), roll["finished"]

    def iteration(self):
        self.carry, finished = self.step(self.carry)
        finished = np.asarray(finished)  # waits for the call (JAX dispatches asynchronously)
        self.returns_seen.extend(finished[~np.isnan(finished)].tolist())

    def summary(self):
        last = self.returns_seen[-10:]
        return {"mean_return": float(np.mean(last)) if last else None, "compile_s": self.compile_s}


def run_bench(algo, args: Args, memory=True):
    if algo != "ppo":
        raise SystemExit("the JAX peer runs ppo only")
    return bench(PPO, args, None, system="jax", algo=algo)


def main(argv=None):
    return script_main("python -m asv_benchmarks.baselines.jax_peer", run_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
