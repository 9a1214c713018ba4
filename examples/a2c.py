"""A2C (Mnih et al., 2016): n-step advantage actor-critic, written as one recurrent-tensor program.

    python examples/a2c.py --env CartPole-v1 --num-envs 8 --num-steps 16 --total-steps 100000

Not a runner of a built-in algorithm: the whole algorithm is below, in the recurrent-tensor
style (read API.md / docs/api.md first). Dims: ``i`` (iteration) and ``t`` (step in the
rollout). Per iteration:

1. act for ``T`` steps in ``N`` environments with the policy at ``i`` (episodes continue
   across iterations: ``o[i, 0] = o[i - 1, T]``);
2. n-step returns bootstrapped from the critic, ``G_t = Σ_{j<m} γ^{j-t} r_j + γ^{m-t} V(o_m)``
   with ``m = min(t + n, T)`` and done masks (``tl.rl.nstep_returns``), advantages
   ``A_t = G_t - V(o_t)``;
3. one Adam step on ``L = -mean(log π(a|o) A) + c_v · ½ mean((G - V)²) - c_e · mean(H[π])``.

A sink logs, per iteration, the mean return of the last 10 finished episodes and the losses.

One run with the defaults (CartPole-v1, 8 x 16 steps, 100k env steps, seed 0, numba; 18 s
compile, 115 s in all on a shared 2-core machine): mean return 52.8 at 12.8k steps, 101.8 at
25.6k, 287.9 at 51.2k, 253.8 at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import timerl as tl


@dataclasses.dataclass
class Args:
    env: str = "CartPole-v1"
    """gymnasium id with Box observations and a discrete action space (the policy is Categorical)"""
    num_envs: int = 8
    """N: environments stepped together"""
    num_steps: int = 16
    """T: steps per environment per iteration (the rollout length)"""
    total_steps: int = 100_000
    """env steps to train for: I = total_steps // (N * T) iterations"""
    nstep: int = None
    """n of the n-step returns (None: n = T, A2C's classic "bootstrap at the end of the rollout")"""
    gamma: float = 0.99
    """γ: discount factor"""
    lr: float = 7e-4
    """α: Adam learning rate (annealed linearly to 0 when anneal_lr)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the iterations"""
    vf_coef: float = 0.5
    """c_v: value-loss coefficient"""
    ent_coef: float = 0.01
    """c_e: entropy bonus coefficient"""
    max_grad_norm: float = 0.5
    """global-norm gradient clipping threshold (0: no clipping)"""
    hidden: int = 64
    """width of the two hidden layers of the actor and the critic"""
    seed: int = 0
    """seed of the environments and of every random op (initialisation, sampling)"""
    backend: str = "numba"
    """compiler backend: "reference", "numpy" or "numba" (the default)"""


def build(args: Args, log=print):
    """The A2C program: returns ``(prog, bounds, parts)``.

    ``parts`` names tensors a caller (a test) may sink: observations ``o`` and values ``v``
    (points ``t = 0..T``), rewards ``r``, dones ``done``, returns ``G``, the ``loss``; and the
    ``env``, the ``critic`` module and the logged ``rows``.
    """
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    n_iter = args.total_steps // (args.num_envs * args.num_steps)
    Tn = args.num_steps                                      # T, fixed when the program is built
    n = args.nstep or Tn
    with prog:
        env = tl.rl.make_env(args.env, args.num_envs, seed=args.seed)
        if not env.discrete:
            raise SystemExit(f"a2c.py: {args.env} has continuous actions; this example uses a Categorical policy")
        (n_obs,) = env.single_observation_shape
        # parameters live over the iteration dim i: their value at i is the one used at i
        actor = tl.nn.MLP([n_obs, args.hidden, args.hidden, env.num_actions], activation="tanh",
                          domain=(i,), out_gain=0.01, seed=args.seed * 1000 + 1, name="actor")
        critic = tl.nn.MLP([n_obs, args.hidden, args.hidden, 1], activation="tanh",
                           domain=(i,), out_gain=1.0, seed=args.seed * 1000 + 2, name="critic")

        # -- acting: o[t + 1] = env(o[t], a[t]); episodes continue across iterations ------------
        o = tl.placeholder(env.observation_shape, "float32", (i, t), name="o")   # (N, n_obs)
        o[0, 0] = env.reset()
        o[i, 0] = o[i - 1, T]
        a = tl.distributions.Categorical(logits=actor(o)).sample()             # (N,) int64
        o[i, t + 1], r, done = env.step(a)                                     # r, done: (N,)
        v = critic(o).squeeze(-1)                                              # (N,), points t = 0..T

        # -- n-step returns, bootstrapped from V(o_m) (v has the point T: V(o_T)) -----------------
        G = tl.rl.nstep_returns(r, done, n, args.gamma, value=v.detach())     # (N,)

        # -- learning: the whole rollout as one batch -------------------------------------------
        obs_b = o[i, 0:Tn]                                                      # (T, N, n_obs)
        pi = tl.distributions.Categorical(logits=actor(obs_b))
        logp = pi.log_prob(a[i, 0:Tn])                                          # (T, N)
        value = critic(obs_b).squeeze(-1)                                       # (T, N)
        G_b = G[i, 0:Tn]                                                        # (T, N)
        adv = (G_b - value).detach()                                            # A_t = G_t - V(o_t)
        pg_loss = -(logp * adv).mean()
        v_loss = 0.5 * ((G_b - value) ** 2).mean()
        entropy = pi.entropy().mean()
        loss = pg_loss + args.vf_coef * v_loss - args.ent_coef * entropy
        lr = tl.optim.linear_schedule(args.lr, i) if args.anneal_lr else args.lr   # α (1 - i / I)
        opt = tl.optim.Adam(actor.parameters() + critic.parameters(), lr=lr, eps=1e-5,
                            max_grad_norm=args.max_grad_norm or None)
        opt.step(loss)

        # -- logging: one row per iteration -------------------------------------------------------
        rows = []
        clock = [time.perf_counter()]
        env.on_reset.append(lambda: (rows.clear(), clock.__setitem__(0, time.perf_counter())))  # each run

        def record(vals, point):
            row = {"iteration": point["i"] + 1, "env_steps": (point["i"] + 1) * args.num_envs * Tn,
                   "mean_return": env.recent_return(10), "episodes": len(env.episode_returns),
                   "loss": float(vals[0]), "pg_loss": float(vals[1]), "v_loss": float(vals[2]),
                   "entropy": float(vals[3]), "seconds": time.perf_counter() - clock[0]}
            rows.append(row)
            if log is not None:
                log(row)

        tl.sink([loss, pg_loss, v_loss, entropy], record, name="log")
    parts = {"env": env, "o": o, "r": r, "done": done, "v": v, "G": G, "critic": critic, "loss": loss, "rows": rows}
    return prog, {I: n_iter, T: Tn}, parts


def print_row(row):
    print(f"iter {row['iteration']:4d}  env steps {row['env_steps']:7d}  mean return {row['mean_return']:7.1f}  "
          f"pg {row['pg_loss']:+.3f}  v {row['v_loss']:.3f}  entropy {row['entropy']:.3f}  "
          f"{row['seconds']:.1f}s", flush=True)


def parse_args(argv=None) -> Args:
    """Command-line flags, one per field of :class:`Args` (``--num-envs 8``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=f.default)
        elif f.name == "nstep":
            ap.add_argument(flag, type=int, default=None)
        else:
            ap.add_argument(flag, type=type(f.default), default=f.default)
    return Args(**vars(ap.parse_args(argv)))


def main(argv=None):
    args = parse_args(argv)
    if args.total_steps < args.num_envs * args.num_steps:
        raise SystemExit("--total-steps must cover at least one iteration (--num-envs x --num-steps)")
    t0 = time.perf_counter()
    prog, bounds, parts = build(args, log=print_row)
    exe = prog.compile(bounds=bounds, backend=args.backend, seed=args.seed)
    print(f"compiled in {time.perf_counter() - t0:.1f}s ({args.backend}); "
          f"{bounds[prog.bound('I')]} iterations of {args.num_envs} x {args.num_steps} steps", flush=True)
    exe.run()
    final = parts["env"].recent_return(10)
    print(f"final mean return (last 10 episodes): {final:.1f}" if not math.isnan(final) else "no episode finished")
    return parts["rows"]


if __name__ == "__main__":
    main()
