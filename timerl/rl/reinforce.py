"""REINFORCE (Williams, 1992) as one recurrent-tensor program, compiled whole.

    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=8, num_steps=128, total_steps=100_000)
    exe.run()
    print(exe.history.rows[-1])

Dims: ``i`` (iteration) and ``t`` (step in the rollout). Acting runs over ``(i, t)``; the
learning phase reads the whole rollout through constant slices (``o[i, 0:T]``), so the
loss, its gradient and the Adam update run once per iteration. Monte-Carlo returns are a
backward recurrence over ``t``; ``nstep=n`` swaps in n-step returns, a window ``t:t+n``
that the scheduler can compute while acting.
"""

from __future__ import annotations

import dataclasses
import math

from .common import ArgError, CommonArgs, History, compile_algorithm, env_kwargs, iterations


@dataclasses.dataclass
class Args(CommonArgs):
    """The arguments of :func:`timerl.rl.reinforce` (the ``timerl train reinforce`` flags), with the
    fields of :class:`~timerl.rl.common.CommonArgs`."""

    lr: float = 1e-3
    """Adam learning rate α (annealed linearly to 0 over the iterations when anneal_lr)"""
    nstep: int = None
    """n of n-step returns; None: Monte-Carlo returns over the rollout"""
    norm_returns: bool = True
    """normalise the returns over the batch (a constant baseline and scale)"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""


def check(args):
    if args.nstep is not None and (not isinstance(args.nstep, int) or isinstance(args.nstep, bool) or args.nstep < 1):
        raise ArgError(f"--nstep must be an int >= 1, got {args.nstep!r}")
    if not (math.isfinite(args.ent_coef) and args.ent_coef >= 0):
        raise ArgError(f"--ent-coef must be >= 0, got {args.ent_coef!r}")


def build(args: Args, callback=None):
    """The REINFORCE program: returns ``(prog, bounds, history)``."""
    import timerl as tl
    from timerl import optim

    from ..api.naming import name_scope, named
    from .policies import Actor

    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    n_iter = iterations(args)
    with prog, name_scope("reinforce"):    # every op is labelled reinforce.<what>
        env = tl.rl.make_env(args.env, args.num_envs, args.seed, **env_kwargs(args))
        actor = Actor(env, args, domain=(i,))

        # -- acting: o[t + 1] = env(o[t], a[t]); episodes continue across iterations ----------------
        o = tl.placeholder(env.observation_shape, "float32", (i, t), name="o")
        o[0, 0] = env.reset()
        o[i, 0] = o[i - 1, T]
        a = actor.dist(o).sample()
        o[i, t + 1], r, done = env.step(a)

        # -- returns: Monte-Carlo (backward recurrence) or n-step (window) ---------------------------
        if args.nstep is None:
            G = tl.rl.discounted_returns(r, done, args.gamma)
        else:
            G = tl.rl.nstep_returns(r, done, args.nstep, args.gamma)

        # -- learning: the whole rollout at once --------------------------------------------------------
        Tn = args.num_steps                                       # T, fixed when the program is built
        G_b = G[i, 0:Tn]                                          # (T, N)
        if args.norm_returns:
            G_b = named((G_b - G_b.mean()) / (G_b.std() + 1e-8), "G_norm")
        pi = actor.dist(o[i, 0:Tn])
        logp = pi.log_prob(a[i, 0:Tn])                             # (T, N)
        entropy = named(pi.entropy().mean(), "entropy")
        loss = named(-(logp * G_b.detach()).mean() - args.ent_coef * entropy, "loss")
        lr = optim.linear_schedule(args.lr, i) if args.anneal_lr else args.lr   # α (1 - i / I)
        opt = optim.Adam(actor.parameters(), lr=lr, eps=1e-5,
                            max_grad_norm=args.max_grad_norm or None)
        opt.step(loss)

        history = History(env, args, ["loss", "entropy"], callback)
        tl.sink([loss, entropy], history.sink_fn(), name="log")
    return prog, {I: n_iter, T: args.num_steps}, history


def reinforce(callback=None, **kwargs):
    """Build and compile REINFORCE; keyword arguments are the fields of :class:`Args` (the CLI flags).

    The executable carries ``exe.history`` (rows per iteration), ``exe.env`` and ``exe.args``.
    ``callback(row)`` sees each iteration's row as it completes (``iteration``, ``env_steps``,
    ``mean_return``, ``episodes``, ``loss``, ``entropy``, ``seconds``). A bad argument is a
    :class:`tl.rl.ArgError` (a ValueError).

        exe = tl.rl.reinforce(env="CartPole-v1", num_envs=4, num_steps=32, total_steps=256,
                              nstep=8, backend="numpy")
        exe.run()
    """
    return compile_algorithm(Args, check, build, callback, kwargs)
