"""REINFORCE (Williams, 1992) as one recurrent-tensor program, compiled whole.

    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=8, num_steps=128, total_steps=100_000)
    exe.run()
    print(exe.history.rows[-1])

Dims: ``i`` (iteration) and ``t`` (step in the rollout). Acting runs over ``(i, t)``.

Monte-Carlo returns (the default) are a backward recurrence over ``t``: the learner needs the
whole rollout, so it reads it through constant slices (``o[i, 0:T]``) and the loss, its gradient
and the Adam update run once per iteration on the block.

``nstep=n`` uses n-step returns, a window ``t:t+n``, and writes the loss per step, reusing the
acting step's log-probabilities: ``loss[i] = -sum_t(logp[i, t] * G[i, t]) / (N T)``. Each step's
gradient contribution exists n - 1 steps after it acts, so the ``incrementalize`` pass turns
the sum over steps into a running accumulator and the scheduler runs the learner n - 1 steps
behind acting, in the same loop (learning while acting): the program holds a window of n
observations and activations, and its memory does not grow with ``T``. Normalising the returns
by the batch's own mean and standard deviation would need the whole batch first; the per-step
form normalises by the previous iteration's statistics (none in the first), a baseline one
iteration old. ``per_step=False`` writes the n-step learner on the block instead (batch
statistics, memory growing with ``T``).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import BudgetError
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
    per_step: bool = None
    """write the loss per step. With nstep (the default there): learn while acting (memory flat in T;
    returns normalised by the previous iteration's statistics). With Monte-Carlo returns (off unless
    True): the gradient is added one step after another after the rollout, slower than the block
    learner but each step's observation can wait on disk under memory_budget. False: learn on the
    rollout block after acting"""


def check(args):
    if args.nstep is not None and (not isinstance(args.nstep, int) or isinstance(args.nstep, bool) or args.nstep < 1):
        raise ArgError(f"--nstep must be an int >= 1, got {args.nstep!r}")
    if not (math.isfinite(args.ent_coef) and args.ent_coef >= 0):
        raise ArgError(f"--ent-coef must be >= 0, got {args.ent_coef!r}")


def build(args: Args, callback=None, checkpoint=None):
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
        Tn = args.num_steps                                       # T, fixed when the program is built

        if _per_step(args):
            # -- the loss per step: n-step returns learn while acting; Monte-Carlo returns after it -----
            if args.nstep is not None:
                G = tl.rl.nstep_returns(r, done, args.nstep, args.gamma)
                if args.norm_returns:
                    G = _normalised_by_last_iteration(tl, G, i, Tn)
            else:
                G = tl.rl.discounted_returns(r, done, args.gamma)
                if args.norm_returns:   # the batch's own statistics: the learner waits for the rollout anyway
                    G_b = G[i, 0:Tn]
                    G = named((G - G_b.mean()) / (G_b.std() + 1e-8), "G_norm")
            step_pi = actor.dist(o)                               # the acting step's distribution (CSE)
            logp = named(step_pi.log_prob(a), "logp")              # (N,) per step
            per_step = lambda x: x[i, 0:Tn].sum(axis=0).mean() / Tn   # noqa: E731  sum over t: a running sum
            entropy = named(per_step(step_pi.entropy()), "entropy")
            loss = named(-per_step(logp * G.detach()) - args.ent_coef * entropy, "loss")
        else:
            # -- returns: Monte-Carlo (backward recurrence) or n-step (window) ---------------------------
            if args.nstep is None:
                G = tl.rl.discounted_returns(r, done, args.gamma)
            else:
                G = tl.rl.nstep_returns(r, done, args.nstep, args.gamma)

            # -- learning: the whole rollout at once ----------------------------------------------------
            G_b = G[i, 0:Tn]                                      # (T, N)
            if args.norm_returns:
                G_b = named((G_b - G_b.mean()) / (G_b.std() + 1e-8), "G_norm")
            pi = actor.dist(o[i, 0:Tn])
            logp = pi.log_prob(a[i, 0:Tn])                         # (T, N)
            entropy = named(pi.entropy().mean(), "entropy")
            loss = named(-(logp * G_b.detach()).mean() - args.ent_coef * entropy, "loss")
        lr = optim.linear_schedule(args.lr, i) if args.anneal_lr else args.lr   # α (1 - i / I)
        opt = optim.Adam(actor.parameters(), lr=lr, eps=1e-5,
                            max_grad_norm=args.max_grad_norm or None)
        opt.step(loss)

        history = History(env, args, ["loss", "entropy"], callback, checkpoint)
        history.sink([loss, entropy])
    return prog, {I: n_iter, T: args.num_steps}, history


def _normalised_by_last_iteration(tl, G, i, Tn):
    """``(G - mean) / (std + 1e-8)`` with the mean and std of the previous iteration's returns
    (0 and 1 in the first), from running sums of ``G`` and ``G ** 2`` over the steps, so no block
    of returns is kept."""
    from ..api.naming import named

    n = float(Tn * G.shape[0])
    s1 = G[i, 0:Tn].sum(axis=0).sum()
    s2 = (G * G)[i, 0:Tn].sum(axis=0).sum()
    mean = tl.placeholder((), G.dtype, (i,), name="returns_mean")
    std = tl.placeholder((), G.dtype, (i,), name="returns_std")
    mean[0] = 0.0
    mean[i + 1] = s1 / n                   # carried to the next iteration as shift branches (a checkpoint stores them)
    std[0] = 1.0
    m = s1 / n
    std[i + 1] = tl.sqrt(tl.maximum(s2 / n - m * m, 0.0))
    return named((G - mean) / (std + 1e-8), "G_norm")


def _per_step(args) -> bool:
    """The loss written per step: n-step returns unless per_step=False; Monte-Carlo returns only with
    per_step=True (the gradient is then added one step after another after the rollout, so each
    step's observation can wait on disk under a memory budget)."""
    return bool(args.per_step) if args.nstep is None else args.per_step is not False


def _passes(args):
    """Monte-Carlo returns read each step's reward after the rollout: the environment step's outputs
    are freed one by one (``split_outputs``), so its observations are not held that long. Per step,
    the sum over steps becomes an accumulator although the returns run backwards (the incrementalize
    pass leaves such sums to vectorization unless told)."""
    if args.nstep is not None:
        return None
    return {"split_outputs": True, **({"incrementalize_all": True} if _per_step(args) else {})}


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
    try:
        return compile_algorithm(Args, check, build, callback, kwargs, passes=_passes)
    except BudgetError as e:
        if kwargs.get("nstep") is not None or kwargs.get("per_step") is True:
            raise
        raise BudgetError(f"{e}. Monte-Carlo REINFORCE with per_step=True (--per-step True) adds the gradient "
                          "one step at a time after the rollout, so each step's observation can wait on disk: "
                          "it fits a far smaller budget", e.least) from None
