"""PPO and REINFORCE as a plain numpy eager loop: manual forward/backward of a tanh MLP,
Adam, GAE, the clipped surrogate. One thread (see ``common``).

    python -m asv_benchmarks.baselines.numpy_eager ppo --env CartPole-v1 --num-envs 8 --json

``peak_bytes`` here is tracemalloc's peak of traced memory from the learner's
construction through 2 iterations: numpy array buffers (numpy reports them to
tracemalloc) plus the Python objects allocated meanwhile (small next to the arrays).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # pin BLAS to one thread before numpy loads
    from asv_benchmarks.baselines import pin_threads

    pin_threads(os.environ)

import tracemalloc

import numpy as np

from .common import Args, bench, gae, make_env, returns_mc, returns_nstep, script_main

LOG_2PI = float(np.log(2.0 * np.pi))


# -- network ------------------------------------------------------------------------------------


def orthogonal(rng, n_in, n_out, gain, dtype):
    """Orthogonal init as torch.nn.init.orthogonal_ (the matrix is stored (in, out))."""
    a = rng.standard_normal((max(n_in, n_out), min(n_in, n_out)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    w = q if n_in >= n_out else q.T
    return (gain * w).astype(dtype)


class MLP:
    """``x -> tanh(x W0 + b0) -> ... -> x Wk + bk``; weights stored (in, out)."""

    def __init__(self, sizes, rng, out_gain, dtype=np.float32):
        n = len(sizes) - 1
        self.W = [orthogonal(rng, sizes[k], sizes[k + 1], np.sqrt(2) if k < n - 1 else out_gain, dtype)
                  for k in range(n)]
        self.b = [np.zeros(sizes[k + 1], dtype) for k in range(n)]

    def params(self):
        return [p for wb in zip(self.W, self.b) for p in wb]

    def forward(self, x):
        hs = [x]
        last = len(self.W) - 1
        for k, (W, b) in enumerate(zip(self.W, self.b)):
            x = x @ W + b
            if k < last:
                x = np.tanh(x)
            hs.append(x)
        return x, hs

    def backward(self, hs, dout):
        """Gradients of the params (in ``params()`` order) given d loss / d output."""
        grads = []
        d = dout
        last = len(self.W) - 1
        for k in reversed(range(len(self.W))):
            if k < last:
                d = d * (1.0 - hs[k + 1] * hs[k + 1])
            grads.append(d.sum(0))
            grads.append(hs[k].T @ d)
            if k > 0:
                d = d @ self.W[k].T
        return grads[::-1]


class Adam:
    """torch.optim.Adam's update (bias-corrected), with global-norm gradient clipping."""

    def __init__(self, params, lr, max_grad_norm=None, betas=(0.9, 0.999), eps=1e-5):
        self.params, self.lr, self.max_grad_norm = params, lr, max_grad_norm
        self.b1, self.b2, self.eps = betas[0], betas[1], eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads):
        if self.max_grad_norm is not None:
            norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
            coef = min(self.max_grad_norm / (norm + 1e-6), 1.0)
            grads = [g * g.dtype.type(coef) for g in grads]
        self.t += 1
        bc1, bc2 = 1.0 - self.b1**self.t, 1.0 - self.b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * g * g
            p -= (self.lr / bc1) * m / (np.sqrt(v) / np.sqrt(bc2) + self.eps)


# -- policy -------------------------------------------------------------------------------------


class Agent:
    """Actor (logits, or a Gaussian mean with a state-independent log-std) and critic MLPs,
    initialized as CleanRL (orthogonal, gain sqrt 2; actor head 0.01, critic head 1)."""

    def __init__(self, obs_dim, env, args: Args, rng, dtype=np.float32, critic=True):
        hid = [args.hidden] * args.layers
        self.discrete = env.discrete
        n_out = env.num_actions if env.discrete else env.action_dim
        self.actor = MLP([obs_dim, *hid, n_out], rng, 0.01, dtype)
        self.critic = MLP([obs_dim, *hid, 1], rng, 1.0, dtype) if critic else None
        self.logstd = None if env.discrete else np.zeros((1, n_out), dtype)

    def params(self):
        ps = self.actor.params() + ([self.logstd] if self.logstd is not None else [])
        return ps + (self.critic.params() if self.critic is not None else [])

    def value(self, x):
        return self.critic.forward(x)[0][:, 0]

    def act(self, x, rng):
        out = self.actor.forward(x)[0]
        if self.discrete:
            logp_all = out - _logsumexp(out)[:, None]
            g = -np.log(-np.log(rng.random(out.shape, dtype=out.dtype)))
            a = np.argmax(logp_all + g, axis=1)
            return a, logp_all[np.arange(len(a)), a]
        std = np.exp(self.logstd)
        a = out + std * rng.standard_normal(out.shape, dtype=out.dtype)
        z = (a - out) / std
        return a, np.sum(-0.5 * z * z - self.logstd - 0.5 * LOG_2PI, axis=1)

    def logp_entropy(self, x, a):
        """log pi(a|x), entropy, and ``back(dlogp, dent) -> grads of the actor params``."""
        out, hs = self.actor.forward(x)
        if self.discrete:
            logp_all = out - _logsumexp(out)[:, None]
            p = np.exp(logp_all)
            idx = np.arange(len(a))
            logp = logp_all[idx, a]
            ent = -np.sum(p * logp_all, axis=1)

            def back(dlogp, dent):
                dout = -p * (dlogp + dent * ent)[:, None] - dent[:, None] * p * logp_all
                dout[idx, a] += dlogp
                return self.actor.backward(hs, dout)

            return logp, ent, back
        std = np.exp(self.logstd)
        z = (a - out) / std
        logp = np.sum(-0.5 * z * z - self.logstd - 0.5 * LOG_2PI, axis=1)
        ent = np.broadcast_to(np.sum(0.5 + 0.5 * LOG_2PI + self.logstd), logp.shape)

        def back(dlogp, dent):
            dout = dlogp[:, None] * z / std
            dlogstd = np.sum(dlogp[:, None] * (z * z - 1.0), axis=0, keepdims=True) + np.sum(dent)
            return self.actor.backward(hs, dout) + [dlogstd.astype(self.logstd.dtype)]

        return logp, ent, back


def _logsumexp(x):
    m = np.max(x, axis=1)
    return m + np.log(np.sum(np.exp(x - m[:, None]), axis=1))


# -- shared rollout -----------------------------------------------------------------------------


class _Learner:
    algo = ""

    def __init__(self, args: Args, dtype=np.float32, critic=True):
        self.args, self.dtype = args, dtype
        self.env = make_env(args)
        self.rng = np.random.default_rng(args.seed + 1)
        self.obs_dim = int(np.prod(self.env.obs_shape))
        self.agent = Agent(self.obs_dim, self.env, args, np.random.default_rng(args.seed), dtype, critic)
        self.opt = Adam(self.agent.params(), args.lr_at(self.algo, 0), args.max_grad_norm or None)
        self.it = 0
        T, N = args.num_steps, args.num_envs
        act_shape = (T, N) if self.env.discrete else (T, N, self.env.action_dim)
        self.obs = np.zeros((T, N, self.obs_dim), dtype)
        self.actions = np.zeros(act_shape, np.int64 if self.env.discrete else dtype)
        self.logp = np.zeros((T, N), dtype)
        self.rewards = np.zeros((T, N), dtype)
        self.dones = np.zeros((T, N), dtype)
        self.values = np.zeros((T, N), dtype) if critic else None
        self.next_obs = self.env.reset().reshape(N, -1).astype(dtype)
        self.returns_seen = []
        self._ep_ret = np.zeros(N)

    def rollout(self):
        self.opt.lr = self.args.lr_at(self.algo, self.it)
        self.it += 1
        a_ = self.agent
        for t in range(self.args.num_steps):
            x = self.next_obs
            self.obs[t] = x
            if self.values is not None:
                self.values[t] = a_.value(x)
            a, logp = a_.act(x, self.rng)
            self.actions[t], self.logp[t] = a, logp
            o, r, d = self.env.step(a)
            self.rewards[t], self.dones[t] = r, d
            self._ep_ret += r
            if d.any():
                self.returns_seen.extend(self._ep_ret[d].tolist())
                self._ep_ret[d] = 0.0
            self.next_obs = o.reshape(len(o), -1).astype(self.dtype)

    def summary(self):
        last = self.returns_seen[-10:]
        return {"mean_return": float(np.mean(last)) if last else None}


class PPO(_Learner):
    """CleanRL's ppo.py / ppo_continuous_action.py update (advantages normalised with the
    population std, ddof=0, as timerl's ``std``; CleanRL's torch ``std`` uses ddof=1)."""

    algo = "ppo"

    def iteration(self):
        self.rollout()
        self.update(self.batch())

    def batch(self):
        """The rollout flattened to one batch, with GAE advantages and returns."""
        args = self.args
        last_value = self.agent.value(self.next_obs)
        adv = gae(self.rewards, self.values, self.dones, last_value, args.gamma, args.gae_lambda)
        ret = adv + self.values
        B = args.batch_size
        return {"obs": self.obs.reshape(B, -1), "actions": self.actions.reshape((B,) + self.actions.shape[2:]),
                "logp": self.logp.reshape(B), "adv": adv.reshape(B), "ret": ret.reshape(B),
                "values": self.values.reshape(B)}

    def update(self, b):
        args, B = self.args, self.args.batch_size
        mb_size = B // args.minibatches
        for _ in range(args.epochs):
            if args.minibatches == 1:  # the whole batch, in rollout order, as timerl's PPO reads it (the
                _, grads = self.loss_and_grads(b)  # update is a shuffle's up to the order of its sums)
                self.opt.step(grads)
                continue
            perm = self.rng.permutation(B)
            for start in range(0, B, mb_size):
                idx = perm[start:start + mb_size]
                _, grads = self.loss_and_grads({k: v[idx] for k, v in b.items()})
                self.opt.step(grads)

    def loss_and_grads(self, mb):
        """The PPO loss on one minibatch and its gradients (``agent.params()`` order)."""
        args, ag = self.args, self.agent
        n = len(mb["logp"])
        logp, ent, back = ag.logp_entropy(mb["obs"], mb["actions"])
        v_out, hs_c = ag.critic.forward(mb["obs"])
        v = v_out[:, 0]
        ratio = np.exp(logp - mb["logp"])
        adv = mb["adv"]
        if args.norm_adv:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        c = args.clip_coef
        pg1, pg2 = -adv * ratio, -adv * np.clip(ratio, 1 - c, 1 + c)
        pg_loss = np.maximum(pg1, pg2).mean()
        w1 = np.where(pg1 > pg2, 1.0, np.where(pg1 == pg2, 0.5, 0.0))  # torch.max splits ties
        inside = (ratio >= 1 - c) & (ratio <= 1 + c)
        dlogp = (-adv * (w1 + (1.0 - w1) * inside) / n) * ratio
        R, v_old = mb["ret"], mb["values"]
        if args.clip_vloss:
            u = (v - R) ** 2
            vc = v_old + np.clip(v - v_old, -c, c)
            uc = (vc - R) ** 2
            v_loss = 0.5 * np.maximum(u, uc).mean()
            w = np.where(u > uc, 1.0, np.where(u == uc, 0.5, 0.0))
            in_v = (v - v_old >= -c) & (v - v_old <= c)
            dv = (w * (v - R) + (1.0 - w) * (vc - R) * in_v) / n
        else:
            v_loss = 0.5 * ((v - R) ** 2).mean()
            dv = (v - R) / n
        ent_coef = args.ent("ppo")
        loss = pg_loss - ent_coef * ent.mean() + args.vf_coef * v_loss
        dtype = v.dtype
        g_actor = back(dlogp.astype(dtype), np.full(n, -ent_coef / n, dtype))
        g_critic = ag.critic.backward(hs_c, (args.vf_coef * dv).astype(dtype)[:, None])
        return float(loss), g_actor + g_critic


class Reinforce(_Learner):
    """REINFORCE as ``timerl.rl.reinforce``: one full-batch update per iteration,
    loss = -mean(log pi(a|o) G) - ent_coef * entropy, G Monte-Carlo returns or (``nstep``)
    truncated n-step returns, normalised over the batch (ddof=0); no critic."""

    algo = "reinforce"

    def __init__(self, args: Args, dtype=np.float32):
        super().__init__(args, dtype, critic=False)

    def iteration(self):
        self.rollout()
        _, grads = self.loss_and_grads(self.batch())
        self.opt.step(grads)

    def batch(self):
        args = self.args
        if args.nstep is None:
            G = returns_mc(self.rewards, self.dones, args.gamma)
        else:
            G = returns_nstep(self.rewards, self.dones, args.nstep, args.gamma)
        if args.norm_returns:
            G = (G - G.mean()) / (G.std() + 1e-8)
        B = args.batch_size
        return {"obs": self.obs.reshape(B, -1), "actions": self.actions.reshape((B,) + self.actions.shape[2:]),
                "ret": G.reshape(B)}

    def loss_and_grads(self, mb):
        n = len(mb["ret"])
        logp, ent, back = self.agent.logp_entropy(mb["obs"], mb["actions"])
        G = mb["ret"]
        ent_coef = self.args.ent("reinforce")
        loss = -(logp * G).mean() - ent_coef * ent.mean()
        grads = back((-G / n).astype(logp.dtype), np.full(n, -ent_coef / n, logp.dtype))
        return float(loss), grads


LEARNERS = {"ppo": PPO, "reinforce": Reinforce}


def measure_peak(make, iterations):
    """tracemalloc's peak from construction through ``iterations`` iterations."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        learner = make()
        for _ in range(iterations):
            learner.iteration()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run_bench(algo, args: Args, memory=True):
    return bench(LEARNERS[algo], args, measure_peak if memory else None, system="numpy", algo=algo)


def main(argv=None):
    return script_main("python -m asv_benchmarks.baselines.numpy_eager", run_bench, argv)


if __name__ == "__main__":
    sys.exit(main())
