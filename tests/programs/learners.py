"""RL learners written per step (not in ``PROGRAMS``: they run gymnasium environments).

:func:`build_reinforce_per_t` is REINFORCE (``timerl.rl.reinforce``, Monte-Carlo returns,
normalised) with the loss written per step, ``loss[i, t] = -(log π(a[i, t] | o[i, t]) * Ĝ[i, t])``,
read as ``loss[i, 0:T].mean()``: the form the vectorize pass turns into one batched statement
per iteration.
"""

from __future__ import annotations

import timerl as tl


def build_reinforce_per_t(args):
    """``(prog, bounds, history)`` like ``timerl.rl.reinforce.build(args)`` (history logs ``loss``)."""
    from timerl import optim
    from timerl.api.naming import name_scope, named
    from timerl.rl.common import History, env_kwargs, iterations
    from timerl.rl.policies import Actor

    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog, name_scope("pert"):
        env = tl.rl.make_env(args.env, args.num_envs, args.seed, **env_kwargs(args))
        actor = Actor(env, args, domain=(i,))
        o = tl.placeholder(env.observation_shape, "float32", (i, t), name="o")
        o[0, 0] = env.reset()
        o[i, 0] = o[i - 1, T]
        pi = actor.dist(o)
        a = pi.sample()
        o[i, t + 1], r, done = env.step(a)
        G = tl.rl.discounted_returns(r, done, args.gamma)
        Gb = G[i, 0:args.num_steps]
        G_norm = (G - Gb.mean()) / (Gb.std() + 1e-8)          # per step, statistics over the rollout
        loss_t = -(pi.log_prob(a) * G_norm.detach())           # (N,) per (i, t)
        loss = named(loss_t[i, 0:args.num_steps].mean(), "loss")
        opt = optim.Adam(actor.parameters(), lr=args.lr, eps=1e-5, max_grad_norm=args.max_grad_norm or None)
        opt.step(loss)
        history = History(env, args, ["loss"], None)
        history.sink([loss])
    return prog, {I: iterations(args), T: args.num_steps}, history
