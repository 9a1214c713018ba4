"""PPO (Schulman et al., 2017) as practitioners run it, as one recurrent-tensor program.

    exe = tl.rl.ppo(env="CartPole-v1", num_envs=8, num_steps=128, total_steps=500_000)
    exe.run()
    print(exe.history.rows[-1])

Dims: ``i`` (iteration), ``t`` (step in the rollout), ``k`` (update within an iteration:
``epochs x minibatches`` of them). Acting runs over ``(i, t)`` with the parameters at the
start of the iteration; GAE is a backward recurrence over ``t`` bootstrapped from the
critic on ``o[i, T]``; the learner reads the rollout through constant slices
(``o[i, 0:T]``, with T fixed at build time), draws a fresh ``tl.random.permutation`` per epoch and takes minibatch
``k % minibatches`` of it; ``opt.step(loss, dim=k)`` adds the update recurrence along ``k``.

With one minibatch (``minibatches=1``) the minibatch is the whole rollout and is read in rollout order
(``shuffle_whole_batch=True`` shuffles it, as CleanRL does): a shuffle would change only the order of
the loss's sums over rows. Read in order at the acting parameters (one epoch), the learner's forward
pass is the acting one, and the ``reuse`` pass makes the backward pass read the acting activations
instead of computing them again (:mod:`timerl.passes.reuse`).
"""

from __future__ import annotations

import dataclasses
import math

from .common import ArgError, CommonArgs, History, compile_algorithm, env_kwargs, iterations


@dataclasses.dataclass
class Args(CommonArgs):
    """The arguments of :func:`timerl.rl.ppo` (the ``timerl train ppo`` flags), with the fields of
    :class:`~timerl.rl.common.CommonArgs` (env, num_envs, num_steps, total_steps, seed, backend, lr,
    gamma, hidden, layers, ...)."""

    epochs: int = 4
    """K epochs: passes over the rollout per iteration"""
    minibatches: int = 4
    """minibatches per epoch (must divide N * T)"""
    gae_lambda: float = 0.95
    """λ of generalized advantage estimation"""
    clip_coef: float = 0.2
    """ε: the surrogate clipping coefficient"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value-loss coefficient"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_vloss: bool = True
    """clip the value loss like the surrogate (as in the original implementation)"""
    shuffle_whole_batch: bool = False
    """shuffle the rollout also when one minibatch is the whole batch (CleanRL does): the update is the
    same up to the order of the loss's sums; unshuffled, the learner reads the acting activations"""


def check(args):
    for f in ("epochs", "minibatches"):
        v = getattr(args, f)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ArgError(f"--{f} must be a positive int, got {v!r}")
    batch = args.num_envs * args.num_steps
    if batch % args.minibatches:
        raise ArgError(f"--minibatches {args.minibatches} must divide --num-envs x --num-steps = {batch}")
    if not 0.0 <= args.gae_lambda <= 1.0:
        raise ArgError(f"--gae-lambda must be in [0, 1], got {args.gae_lambda!r}")
    for f in ("clip_coef", "ent_coef", "vf_coef"):
        v = getattr(args, f)
        if not (math.isfinite(v) and v >= 0):
            raise ArgError(f"--{f.replace('_', '-')} must be >= 0, got {v!r}")


def build(args: Args, callback=None, checkpoint=None):
    """The PPO program: returns ``(prog, bounds, history)``."""
    import timerl as tl
    from timerl import optim

    from ..api.naming import name_scope, named
    from .policies import Actor, Critic, acting_copy

    prog = tl.Program("i t k")
    i, t, k = prog.dims
    I, T, K = prog.bounds
    n_iter = iterations(args)
    N, M = args.num_envs, args.minibatches
    B = N * args.num_steps                        # batch: the whole rollout
    mb = B // M                                   # minibatch size
    with prog, name_scope("ppo"):          # every op is labelled ppo.<what> (ppo.ratio, ppo.actor.layer0.weight)
        env = tl.rl.make_env(args.env, args.num_envs, args.seed, **env_kwargs(args))
        actor = Actor(env, args, domain=(i, k))
        critic = Critic(env, args, domain=(i, k))
        act_actor, act_critic = acting_copy(actor, i, k), acting_copy(critic, i, k)   # θ as iteration i starts

        # -- acting ------------------------------------------------------------------------------------
        o = tl.placeholder(env.observation_shape, "float32", (i, t), name="o")
        o[0, 0] = env.reset()
        o[i, 0] = o[i - 1, T]
        pi = act_actor.dist(o)
        a = pi.sample()
        logp = pi.log_prob(a)
        v = named(act_critic(o), "v")                      # points t = 0..T: V(o_T) bootstraps GAE
        o[i, t + 1], r, done = env.step(a)

        # -- advantages: GAE, a backward recurrence over t -----------------------------------------
        adv = tl.rl.gae(r, v.detach(), done, args.gamma, args.gae_lambda)
        ret = named(adv + v.detach(), "ret")

        # -- the rollout as one batch of B = N * T samples --------------------------------------------
        def batch(x, *trail):  # the slice has the int length num_steps, so B is an int
            return x[i, 0:args.num_steps].detach().reshape((B,) + trail)

        b_obs = batch(o, *env.single_observation_shape)   # Actor/Critic flatten observations themselves
        b_a = batch(a, *env.single_action_shape)
        b_logp, b_adv, b_ret, b_v = batch(logp), batch(adv), batch(ret), batch(v)

        # -- minibatch k: a fresh shuffle per epoch, minibatch k % M of it --------------------------------
        if M > 1 or args.shuffle_whole_batch:
            perm = named(tl.random.permutation(B, domain=(i, k)), "perm")
            shuffle = tl.placeholder((B,), "int64", (i, k), name="shuffle")
            shuffle[(k % M) == 0] = perm
            shuffle[True] = shuffle[i, k - 1]
            idx = shuffle.reshape((M, mb)).take(tl.dim_value(k) % M, axis=0)     # (mb,)
            mb_obs, mb_a = b_obs.take(idx, axis=0), b_a.take(idx, axis=0)
            mb_logp, mb_adv, mb_ret, mb_v = (x.take(idx, axis=0) for x in (b_logp, b_adv, b_ret, b_v))
        else:  # one minibatch is the whole batch: its order changes only the order of the loss's sums, and
            # read in rollout order the learner's forward pass is the acting one (the reuse pass drops it)
            mb_obs, mb_a, mb_logp, mb_adv, mb_ret, mb_v = b_obs, b_a, b_logp, b_adv, b_ret, b_v

        # -- losses at update k --------------------------------------------------------------------------
        new = actor.dist(mb_obs)
        new_logp, entropy = new.log_prob(mb_a), named(new.entropy().mean(), "entropy")
        ratio = named(tl.exp(new_logp - mb_logp), "ratio")
        if args.norm_adv:
            mb_adv = named((mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8), "mb_adv")
        pg_loss = named(tl.maximum(-mb_adv * ratio,
                                   -mb_adv * tl.clip(ratio, 1.0 - args.clip_coef, 1.0 + args.clip_coef)).mean(),
                        "pg_loss")
        new_v = named(critic(mb_obs), "new_v")
        if args.clip_vloss:
            v_clipped = named(mb_v + tl.clip(new_v - mb_v, -args.clip_coef, args.clip_coef), "v_clipped")
            v_loss = 0.5 * tl.maximum((new_v - mb_ret) ** 2, (v_clipped - mb_ret) ** 2).mean()
        else:
            v_loss = 0.5 * ((new_v - mb_ret) ** 2).mean()
        v_loss = named(v_loss, "v_loss")
        loss = named(pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss, "loss")
        approx_kl = named(((ratio - 1.0) - tl.log(ratio)).mean(), "approx_kl")

        # -- the update recurrence along k, with linear annealing over i -----------------------------------
        lr = optim.linear_schedule(args.lr, i) if args.anneal_lr else args.lr   # α (1 - i / I)
        opt = optim.Adam(actor.parameters() + critic.parameters(), lr=lr, eps=1e-5,
                            max_grad_norm=args.max_grad_norm or None)
        opt.step(loss, dim=k)

        history = History(env, args, ["pg_loss", "v_loss", "entropy", "approx_kl"], callback, checkpoint)
        last = [x[i, K - 1] for x in (pg_loss, v_loss, entropy, approx_kl)]   # the iteration's last update
        history.sink(last)
    return prog, {I: n_iter, T: args.num_steps, K: args.epochs * M}, history


def ppo(callback=None, **kwargs):
    """Build and compile PPO; keyword arguments are the fields of :class:`Args` (the CLI flags).

    The executable carries ``exe.history`` (rows per iteration), ``exe.env`` and ``exe.args``.
    ``callback(row)`` sees each iteration's row as it completes (``iteration``, ``env_steps``,
    ``mean_return``, ``episodes``, ``pg_loss``, ``v_loss``, ``entropy``, ``approx_kl``,
    ``seconds``). A bad argument is a :class:`tl.rl.ArgError` (a ValueError).

        exe = tl.rl.ppo(env="CartPole-v1", num_envs=4, num_steps=32, total_steps=256,
                        epochs=1, minibatches=2, backend="numpy")
        exe.run()
        print(exe.history.rows[-1]["mean_return"])
    """
    return compile_algorithm(Args, check, build, callback, kwargs)
