"""Plumbing shared by the algorithm files: arguments, checks, policies' shapes, logging.

Nothing here is part of an algorithm; reinforce.py and ppo.py read top to bottom without it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import time

import numpy as np


class ArgError(ValueError):
    """A bad algorithm argument (a CLI flag value)."""


@dataclasses.dataclass
class CommonArgs:
    """The arguments every algorithm takes (one field per CLI flag: ``num_envs`` is ``--num-envs``)."""

    env: str = "CartPole-v1"
    """gymnasium environment id, or "trivial" (the paper's synthetic env)"""
    num_envs: int = 8
    """N: environments stepped together (the leading spatial axis of every rollout tensor)"""
    num_steps: int = 128
    """T: steps per env per iteration (the rollout length)"""
    total_steps: int = 500_000
    """env steps to train for: I = total_steps // (N * T) iterations"""
    seed: int = 0
    """seed of the env and of every random op (initialisation, sampling, shuffles)"""
    backend: str = "numba"
    """compiler backend: reference, numpy, numba or cuda"""
    lr: float = 2.5e-4
    """Adam learning rate (annealed linearly to 0 over the iterations when anneal_lr)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the iterations"""
    gamma: float = 0.99
    """γ: discount factor"""
    hidden: int = 64
    """width of each hidden layer of the policy (and critic) MLPs"""
    layers: int = 2
    """number of hidden layers"""
    max_grad_norm: float = 0.5
    """global-norm gradient clipping threshold (0: no clipping)"""
    obs_shape: tuple = None
    """observation shape of the "trivial" env, e.g. (3, 4, 4)"""
    normalize: bool = False
    """normalise observations and rewards with running statistics (gymnasium envs; for continuous control)"""
    compiled_env: bool = None
    """run the env compiled into the program (the classic-control ids and trivial: its dynamics as program tensors, not a host UDF);
    False: gymnasium's own env (the host trivial env); default: compiled where a compiled version exists (not with --normalize)"""
    memory_budget: int = None
    """cap in bytes on the planned peak of live tensor bytes (the compiler spills rollout data to disk when it must;
    a budget it cannot meet is refused with the least it can); None: no cap"""


def field_docs(cls) -> dict:
    """The docstring literal after each dataclass field (CleanRL/tyro style), per field name."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for a, b in zip(body, body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                docs[a.target.id] = str(b.value.value)
    return docs


def make_args(cls, kwargs):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise ArgError(f"unknown argument(s) {', '.join(unknown)}; {cls.__module__.split('.')[-1]} takes "
                       f"{', '.join(sorted(names))}")
    args = cls(**kwargs)
    check_args(args)
    return args


def check_args(args):
    def need(ok, msg):
        if not ok:
            raise ArgError(msg)

    for f in ("num_envs", "num_steps", "total_steps", "hidden", "layers"):
        v = getattr(args, f)
        need(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0,
             f"--{f.replace('_', '-')} must be a positive int, got {v!r}")
    need(isinstance(args.seed, (int, np.integer)) and not isinstance(args.seed, bool) and args.seed >= 0,
         f"--seed must be an int >= 0, got {args.seed!r}")
    need(args.total_steps >= args.num_envs * args.num_steps,
         f"--total-steps {args.total_steps} is less than one iteration (--num-envs x --num-steps = "
         f"{args.num_envs * args.num_steps})")
    need(math.isfinite(args.lr) and args.lr > 0, f"--lr must be a positive number, got {args.lr!r}")
    need(0.0 <= args.gamma <= 1.0, f"--gamma must be in [0, 1], got {args.gamma!r}")
    need(math.isfinite(args.max_grad_norm) and args.max_grad_norm >= 0,
         f"--max-grad-norm must be >= 0, got {args.max_grad_norm!r}")
    from ..api.compile import BACKENDS

    need(args.backend in BACKENDS, f"--backend must be one of {', '.join(BACKENDS)}, got {args.backend!r}")
    need(not (args.normalize and args.env == "trivial"), "--normalize applies to gymnasium envs, not the trivial env")
    need(args.compiled_env in (None, True, False), f"--compiled-env must be true or false, got {args.compiled_env!r}")
    need(args.memory_budget is None or (isinstance(args.memory_budget, (int, np.integer))
                                        and not isinstance(args.memory_budget, bool) and args.memory_budget > 0),
         f"--memory-budget must be a positive number of bytes, got {args.memory_budget!r}")
    if args.obs_shape is not None:
        need(args.env == "trivial", f"--obs-shape applies only to the trivial env, not {args.env!r}")
        need(all(isinstance(s, (int, np.integer)) and s > 0 for s in args.obs_shape),
             f"--obs-shape entries must be positive ints, got {args.obs_shape!r}")


def iterations(args) -> int:
    return args.total_steps // (args.num_envs * args.num_steps)


def env_kwargs(args) -> dict:
    kw = {"compiled": args.compiled_env}
    if args.obs_shape is not None:
        return dict(kw, obs_shape=tuple(args.obs_shape))
    return dict(kw, normalize=True, gamma=args.gamma) if args.normalize else kw


def mlp_sizes(n_in, args, n_out) -> list:
    return [n_in] + [args.hidden] * args.layers + [n_out]


class History:
    """One row per iteration, assembled by sinks while the program runs.

    ``callback(row)`` (if given) sees each row as soon as it is complete: ``iteration``,
    ``env_steps``, ``mean_return`` (last 10 finished episodes, NaN before the first),
    ``episodes``, the losses, and ``seconds`` since the run started.
    """

    def __init__(self, env, args, loss_names, callback=None, checkpoint=None):
        self.env, self.args, self.loss_names, self.callback = env, args, list(loss_names), callback
        self.checkpoint = checkpoint   # a timerl.rl.checkpoint.Saver, or None
        self.rows = []
        self.t0 = None
        self.offset, self.resumed_rows = 0, []   # a resumed run: iterations done before it, and their rows
        env.on_reset.append(self.start)  # the env resets once at the start of every run

    def start(self):
        self.rows = [dict(r) for r in self.resumed_rows]
        self.t0 = time.perf_counter() - (self.rows[-1]["seconds"] if self.rows else 0.0)

    def resume(self, offset, rows):
        """Number the rows from iteration ``offset`` on, after the checkpoint's ``rows``."""
        self.offset, self.resumed_rows = int(offset), [dict(r) for r in rows]

    def record(self, i, losses):
        if self.t0 is None:
            self.start()
        env = self.env
        i = int(i) + self.offset
        row = {"iteration": i + 1, "env_steps": (i + 1) * env.num_envs * self.args.num_steps,
               "mean_return": env.recent_return(10), "episodes": len(env.episode_returns)}
        for k, v in zip(self.loss_names, losses):
            row[k] = float(v)
        row["seconds"] = time.perf_counter() - self.t0
        self.rows.append(row)
        if self.callback is not None:
            self.callback(row)

    def sink(self, terms, name="log"):
        """``tl.sink`` of the loss ``terms`` (over ``(i,)``) that records a row per iteration. With a
        compiled environment, the sink also reads the iteration's rollout rewards and dones
        (``env.log_inputs()``) and does the episode bookkeeping itself, so every row counts the
        episodes of its own rollout whatever order the scheduler gives the sinks."""
        import timerl as tl

        extra = self.env.log_inputs()
        k, m = len(terms), len(terms) + len(extra)
        saved = [] if self.checkpoint is None else self.checkpoint.tensors(terms[0].prog, self.env)

        def fn(vals, point):
            if extra:
                self.env.account_rollout(*vals[k:m])
            self.record(point["i"], vals[:k])
            if saved:   # after the row: a checkpoint holds the bookkeeping and the rows of its iterations
                self.checkpoint.at_iteration(int(point["i"]) + self.offset, vals[m:], self)

        return tl.sink(list(terms) + extra + saved, fn, name=name)


def compile_algorithm(args_cls, check, build, callback, kwargs, passes=None):
    """Parse ``kwargs`` into ``args_cls``, build the program and compile it whole.

    ``kwargs`` may also hold ``checkpoint_dir`` and ``checkpoint_every`` (write checkpoints) and
    ``resume`` (a checkpoint directory or a loaded :class:`~timerl.rl.checkpoint.Checkpoint`: its
    arguments, checked against the others given, and its state; the executable runs the
    iterations after it), see :mod:`timerl.rl.checkpoint`.

    The executable carries ``exe.history`` (rows per iteration), ``exe.env``, ``exe.args``,
    ``exe.program``, ``exe.checkpointer`` (the Saver, or None) and ``exe.resumed_from`` (the
    iteration it resumes after, 0 for a fresh run). ``passes(args)``: the algorithm's
    ``compile(passes=...)`` switches, or None.
    """
    from . import checkpoint as ckpt

    kwargs = dict(kwargs)
    directory, every, resume = (kwargs.pop(k, None) for k in ("checkpoint_dir", "checkpoint_every", "resume"))
    algo = args_cls.__module__.rsplit(".", 1)[-1]
    state = None
    if resume is not None:
        state = resume if isinstance(resume, ckpt.Checkpoint) else ckpt.load(resume)
        kwargs = ckpt.args_for_resume(state, algo, args_cls, kwargs)
    args = make_args(args_cls, kwargs)
    check(args)
    if state is not None:
        ckpt.check_resumable(state, iterations(args))
    saver = None
    if directory is not None or every is not None:
        saver = ckpt.Saver(directory, every, algo, args, total=iterations(args), resuming=state is not None)
    prog, bounds, history = build(args, callback, checkpoint=saver)
    start = 0
    if state is not None:
        bounds = ckpt.resume(state, prog, bounds, history, saver.carries if saver is not None else None)
        start = state.iteration
    budget = None if args.memory_budget is None else int(args.memory_budget)
    exe = prog.compile(bounds=bounds, backend=args.backend, seed=args.seed, memory_budget=budget,
                       passes=None if passes is None else passes(args))
    exe.history, exe.env, exe.args, exe.program = history, history.env, args, prog
    exe.checkpointer, exe.resumed_from = saver, start
    return exe
