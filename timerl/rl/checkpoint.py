"""Checkpoints: save a training run at the end of an iteration, resume it, use what it trained.

    exe = tl.rl.ppo(env="CartPole-v1", checkpoint_dir="ckpt", checkpoint_every=10)
    exe.run()                                  # ckpt/iteration-000010/, ckpt/iteration-000020/, ...
    exe = tl.rl.ppo(resume="ckpt")             # the arguments come from the checkpoint
    exe.run()                                  # the iterations after the latest checkpoint
    policy = tl.rl.load_policy("ckpt")         # numpy obs -> numpy action

What a run carries from one iteration to the next is found in its program, not listed by hand:
every placeholder over the iteration dim ``i`` whose branches read the previous iteration (the
carry ``p[i, 0] = p[i - 1, K]`` of parameters and optimizer moments, ``o[i, 0] = o[i - 1, T]``
of the observation, the compiled environment's state and step counter, and shift branches
``x[i + 1] = f`` over ``(i,)``). The log sink of the run also reads each one's value as the next
iteration starts (``p[i, K]``, ``o[i, T]``), and the checkpoint stores those values by name. A
program that reads the previous iteration any other way (``y = x[i - 1] * 2``) is refused with
the tensor named: write the carry as a placeholder branch.

Resuming at iteration ``i0`` builds the same program, replaces each carried placeholder's first
branch by the stored value (:func:`restore`), and compiles it for the remaining ``I - i0``
iterations with the iteration dim's origin moved to ``i0`` (:func:`shift_origin`): every random
op draws at ``(i, ...)`` what the uninterrupted run draws at ``(i0 + i, ...)`` (random values are
functions of the seed, the op and the point, so the "RNG position" is the iteration), and
``tl.dim_value(i)`` (the learning-rate annealing, Adam's step count) counts from ``i0``. With a
compiled environment the resumed run computes exactly what the uninterrupted one does. A host
gymnasium environment cannot be saved: it is reset at the resumed iteration (seeded with
``seed + i0``), so its episodes in flight are dropped and the rollouts after the resume differ;
the parameters, optimizer state, learning-rate schedule and sampling resume exactly.

The format, readable with numpy alone::

    DIR/latest.json                     {"format": "timerl-checkpoint", "version": 1, "checkpoint": "iteration-000020"}
    DIR/iteration-000020/checkpoint.json  algo, args, iteration (completed), env, policy layout, tensors,
                                          row_fields
    DIR/iteration-000020/arrays.npz       "tensor/<name>" per carried tensor, "episodes" (E x 3: env steps,
                                          return, length), "episode_return"/"episode_length" (in flight),
                                          "rows" (iterations x row_fields: the log so far)

A checkpoint directory is written under a temporary name and renamed into place, then
``latest.json`` is replaced (write, fsync, rename): a crash at any moment leaves the latest
complete checkpoint readable. The last ``keep`` (3) are kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import threading
import time
import zipfile

import numpy as np

from ..api.naming import _SITE

FORMAT, VERSION = "timerl-checkpoint", 1
LATEST = "latest.json"
#: the arguments a resumed run may change: they do not change what is computed
RUN_ONLY = ("backend", "memory_budget")


class CheckpointError(ValueError):
    """A missing, corrupt or mismatched checkpoint, or a program that cannot be checkpointed."""


class TrainingStopped(KeyboardInterrupt):
    """Ctrl-C during a checkpointed run: raised after the iteration in flight was saved."""

    def __init__(self, iteration, path):
        super().__init__(f"stopped after iteration {iteration}; checkpoint {path}")
        self.iteration, self.path = iteration, path


# -- what a program carries across iterations -----------------------------------------------


@dataclasses.dataclass
class Carry:
    name: str          # the placeholder's label without its source line: the key in arrays.npz
    node: int          # the placeholder
    value: object      # a RecurrentTensor over (i,): the placeholder's value as iteration i + 1 starts
    host: bool         # its first value comes from a host UDF (a gymnasium env's reset): not restorable


def _bare(name):
    return _SITE.sub("", name)


def _init_branch(pdg, x, i):
    """The branch of placeholder ``x`` taken at the run's first point (``i == 0`` only)."""
    import sympy

    dims = pdg.rec(x).domain
    zero = {d.e: 0 for d in dims}
    for p, e in pdg.inputs(x):
        c = sympy.true if e.cond is None else sympy.sympify(e.cond)
        if any(e.shift) or c.subs(zero) is not sympy.true:
            continue
        if c.subs({**zero, i.e: 1}) is sympy.true:
            return None   # a branch that also holds later: no separate first value
        return p, e
    return None


def _back(e, i, dom):
    """``c`` when edge ``e`` reads its producer (domain ``dom``) at ``i - c`` along ``i``, else None."""
    import sympy

    from ..ir.ops import Slice

    if i not in dom:
        return None
    x = e.index[dom.index(i)] if e.index else i.e
    if isinstance(x, Slice):
        return None
    d = sympy.sympify(x) - i.e
    return int(-d) if d.is_Integer and d < 0 else None


def _host_source(pdg, n):
    """Whether ``n`` is computed from a host UDF (the env's reset)."""
    from ..ir.ops import Op

    seen, todo = set(), [n]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if pdg.rec(m).op is Op.UDF:
            return True
        todo.extend(p for p, _ in pdg.inputs(m))
    return False


def carries(prog) -> list:
    """The tensors ``prog`` carries from one iteration of its outermost dim to the next (see the
    module docstring); any other read of an earlier iteration is a :class:`CheckpointError`."""
    import sympy

    from ..api.tensor import RecurrentTensor
    from ..ir.ops import Edge, Op

    pdg = prog.pdg
    i = prog.dims[0]
    out, known, names = [], set(), {}
    for x in sorted(pdg.nodes):
        rec = pdg.rec(x)
        if rec.op is not Op.MERGE or not rec.domain or rec.domain[0] is not i:
            continue
        value = None
        for p, e in pdg.inputs(x):
            prec = pdg.rec(p)
            if e.shift and e.shift[0] and i not in prec.domain:
                continue                        # x[i + 1] = c with c the same at every iteration: nothing carried
            if e.shift and e.shift[0]:          # x[i + 1] = f: x at i + 1 is f at i
                if e.shift[0] != 1 or len(rec.domain) != 1:
                    raise CheckpointError(f"cannot checkpoint {_bare(rec.name)!r}: its branch shifts along "
                                          f"{i.name} by {e.shift[0]} over {tuple(d.name for d in rec.domain)}; "
                                          f"a carry is x[{i.name} + 1] = f over ({i.name},) or x[{i.name}, 0] = "
                                          f"x[{i.name} - 1, ...]")
                index = tuple(sympy.sympify(v).subs(i.e, i.e + 1) for v in e.index)
                value = (p, e.out, index, prec.domain)
                known.add((x, p))
            elif prec.op is Op.ACCESS and len(pdg.inputs(p)) == 1:   # x[i, 0] = y[i - 1, B]
                (q, f), = pdg.inputs(p)
                c = _back(f, i, pdg.rec(q).domain)
                if c is None:
                    continue
                if c != 1 or e.cond is None or any(e.shift):
                    raise CheckpointError(f"cannot checkpoint {_bare(rec.name)!r}: it reads "
                                          f"{_bare(pdg.rec(q).name)!r} {c} iterations back")
                index = tuple(v if j else i.e for j, v in enumerate(f.index))
                value = (q, f.out, index, pdg.rec(q).domain)
                known.add((p, q))
        if value is None:
            continue
        init = _init_branch(pdg, x, i)
        if init is None:
            raise CheckpointError(f"cannot checkpoint {_bare(rec.name)!r}: it carries a value across iterations "
                                  f"but has no first branch at {i.name} == 0 to restore it into")
        q, out_k, index, qdom = value
        nid = prog.add(Op.ACCESS, (i,), [rec.shape], [rec.dtype],
                       inputs=[(q, Edge(pos=0, out=out_k, index=index))], name=f"checkpoint({_bare(rec.name)})")
        name = _bare(rec.name)
        names[name] = names.get(name, 0) + 1
        if names[name] > 1:
            name = f"{name}#{names[name]}"
        out.append(Carry(name, x, RecurrentTensor(prog, nid), _host_source(pdg, init[0])))
    _check_reads(pdg, i, known)
    return out


def _check_reads(pdg, i, known):
    """Every read of an earlier iteration must be a recognised carry."""
    for c, p, d in pdg.edges(data=True):
        e = d["edge"]
        back = _back(e, i, pdg.rec(p).domain)
        if back is not None and (c, p) not in known:
            raise CheckpointError(
                f"cannot checkpoint this program: {_bare(pdg.rec(c).name)!r} reads {_bare(pdg.rec(p).name)!r} "
                f"at {i.name} - {back}, outside a placeholder carry; write it as x[{i.name} + 1] = f (over "
                f"({i.name},)) or x[{i.name}, 0] = x[{i.name} - 1, ...] so the checkpoint can store it")


# -- resuming: the stored values as the first ones, the iteration dim's origin moved ------------


def restore(prog, carry_list, arrays):
    """Make each carried placeholder (and its acting snapshots) start from ``arrays[name]``;
    host-sourced ones (a gymnasium env's observation) keep their first branch."""
    from ..api.ops import _const

    pdg = prog.pdg
    i = prog.dims[0]
    for c in carry_list:
        if c.host:
            continue
        rec = pdg.rec(c.node)
        v = np.asarray(arrays[c.name])
        if tuple(v.shape) != tuple(rec.shape) or v.dtype != np.dtype(rec.dtype):
            raise CheckpointError(f"checkpoint tensor {c.name!r} has shape {v.shape} and dtype {v.dtype}; this "
                                  f"program's has {tuple(rec.shape)} and {np.dtype(rec.dtype)}: was it written with "
                                  "other arguments?")
        const = _const(v.copy(), prog, name=f"checkpoint({c.name})")
        targets = [c.node] + [n for n in pdg.nodes if pdg.nodes[n].get("snapshot_of") == c.node]
        for x in targets:
            src, e = _init_branch(pdg, x, i)
            key = next(k for _, p, k, d in pdg.out_edges(x, keys=True, data=True) if d["edge"] is e)
            pdg.remove_edge(x, src, key)
            pdg.add_dep(x, const.nid, dataclasses.replace(e, index=(), out=0))


def shift_origin(prog, i0):
    """Points ``i`` of the outermost dim stand for iteration ``i0 + i``: random ops draw there what
    they draw at ``i0 + i``, and ``tl.dim_value(i)`` is ``i0 + i`` (so ``bound_value(I)``, its
    value at ``I - 1`` plus one, is the uninterrupted run's ``I``)."""
    from ..api import ops as O
    from ..ir.ops import Op

    pdg = prog.pdg
    i = prog.dims[0]
    with prog:
        for n in sorted(pdg.nodes):
            rec = pdg.rec(n)
            if rec.op is Op.RANDOM and rec.domain and rec.domain[0] is i:
                rec.attrs["origin"] = int(i0)
            elif rec.op is Op.DIM_VALUE and rec.attrs["dim"] == i.name and pdg.consumers(n):
                shifted = O.dim_value(i, name=f"dim_value({i.name})") + int(i0)
                for c, _, k, d in list(pdg.in_edges(n, keys=True, data=True)):
                    pdg.remove_edge(c, n, k)
                    pdg.add_dep(c, shifted.nid, d["edge"])


def check_resumable(ck, total):
    """A checkpoint at or past the run's ``total`` iterations has nothing left to run."""
    if ck.iteration >= total:
        raise CheckpointError(f"checkpoint {ck.path} is at the end of training (iteration {ck.iteration} of "
                              f"{total}): nothing to resume; evaluate it with `timerl eval`")


def resume(ck, prog, bounds, history, carried=None) -> dict:
    """Turn the freshly built run (``prog``, its ``bounds``, its ``history``) into the run after
    checkpoint ``ck``: the carried tensors start from their saved values, the iteration dim's
    origin moves to the checkpoint's iteration, the rows and the episode bookkeeping go on from
    the saved ones. Returns the bounds of the remaining iterations. ``carried``: the program's
    carries when a Saver already found them."""
    carried = carries(prog) if carried is None else carried
    missing = [c.name for c in carried if f"tensor/{c.name}" not in ck.arrays]
    if missing:
        raise CheckpointError(f"checkpoint {ck.path} lacks {', '.join(missing)}: it was written by another program "
                              "(another timerl version or other arguments)")
    start = ck.iteration
    restore(prog, carried, ck.tensors)
    shift_origin(prog, start)
    history.resume(start, ck.rows)
    env = history.env
    if not env.compiled and hasattr(env.impl, "seed"):
        env.impl.seed = history.args.seed + start      # a host env restarts its episodes: fresh ones
    env.resume_bookkeeping(ck.arrays["episodes"], ck.meta["env"]["env_steps"],
                           ck.arrays["episode_return"] if env.compiled else 0.0,
                           ck.arrays["episode_length"] if env.compiled else 0)
    return {b: (v - start if b is prog.bounds[0] else v) for b, v in bounds.items()}


def policy_layout(env, args, algo, carried) -> dict:
    """How :func:`timerl.rl.load_policy` rebuilds the actor from a checkpoint: its tensors' names in
    layer order, the activation and the env's spaces."""
    from .common import env_kwargs

    layers = {}
    log_std = None
    for c in carried:
        m = re.fullmatch(rf"{algo}\.actor\.layer(\d+)\.(weight|bias)", c.name)
        if m:
            layers.setdefault(int(m.group(1)), {})[m.group(2)] = c.name
        elif c.name == f"{algo}.actor.log_std":
            log_std = c.name
    return {"kind": "mlp", "activation": "tanh",
            "layers": [[layers[j]["weight"], layers[j]["bias"]] for j in sorted(layers)],
            "log_std": log_std, "discrete": bool(env.discrete), "num_actions": env.num_actions,
            "observation_shape": list(env.single_observation_shape), "action_shape": list(env.single_action_shape),
            "action_low": None if env.action_low is None else np.asarray(env.action_low, np.float64).tolist(),
            "action_high": None if env.action_high is None else np.asarray(env.action_high, np.float64).tolist(),
            "env": args.env, "env_kwargs": {k: (list(v) if isinstance(v, tuple) else v)
                                            for k, v in env_kwargs(args).items() if k != "compiled"},
            "normalize": bool(args.normalize)}


# -- the files -------------------------------------------------------------------------------


def _json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (tuple, np.ndarray)):
        return list(v)
    raise TypeError(f"not JSON: {type(v).__name__}")


def _fsync_write(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write(directory, meta: dict, arrays: dict, keep=3) -> str:
    """Write one checkpoint atomically (see the module docstring); returns its directory."""
    name = f"iteration-{int(meta['iteration']):06d}"
    final = os.path.join(directory, name)
    os.makedirs(directory, exist_ok=True)
    for d in os.listdir(directory):    # what a run killed mid-write left behind: never a checkpoint
        if d.startswith(".tmp-iteration-") or re.fullmatch(r"iteration-\d{6,}\.old-\d+", d):
            shutil.rmtree(os.path.join(directory, d), ignore_errors=True)
    tmp = os.path.join(directory, f".tmp-{name}-{os.getpid()}")
    os.makedirs(tmp)
    with open(os.path.join(tmp, "arrays.npz"), "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    _fsync_write(os.path.join(tmp, "checkpoint.json"),
                 json.dumps(meta, indent=1, default=_json_default, allow_nan=True).encode())
    _fsync_dir(tmp)
    old = None
    if os.path.exists(final):          # the same iteration again (a run resumed before it): swap it out
        old = f"{final}.old-{os.getpid()}"
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(directory)
    latest = os.path.join(directory, LATEST)
    _fsync_write(latest + f".tmp-{os.getpid()}",
                 json.dumps({"format": FORMAT, "version": VERSION, "checkpoint": name}).encode())
    os.replace(latest + f".tmp-{os.getpid()}", latest)
    _fsync_dir(directory)
    if old:
        shutil.rmtree(old, ignore_errors=True)
    kept = sorted(d for d in os.listdir(directory) if re.fullmatch(r"iteration-\d{6,}", d))
    for d in kept[:-keep] if keep else []:
        if d != name:
            shutil.rmtree(os.path.join(directory, d), ignore_errors=True)
    return final


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read back: ``meta`` (checkpoint.json), ``arrays`` (arrays.npz), ``path``."""

    path: str
    meta: dict
    arrays: dict

    @property
    def iteration(self) -> int:
        return int(self.meta["iteration"])

    def tensor(self, name):
        return self.arrays[f"tensor/{name}"]

    @property
    def rows(self) -> list:
        """The log rows of the iterations up to this checkpoint (dicts, as ``exe.history.rows``)."""
        fields = self.meta.get("row_fields", [])
        ints = ("iteration", "env_steps", "episodes")
        return [{k: (int(v) if k in ints else float(v)) for k, v in zip(fields, r)}
                for r in self.arrays.get("rows", np.zeros((0, len(fields))))]

    @property
    def tensors(self) -> dict:
        return {k[len("tensor/"):]: v for k, v in self.arrays.items() if k.startswith("tensor/")}


def _read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{what}: {path} does not exist") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{what}: {path} is unreadable or corrupt ({type(e).__name__}: {e})") from None


def load(path) -> Checkpoint:
    """The checkpoint at ``path``: a checkpoint directory (``DIR/iteration-000020``) or a run's
    directory (its ``latest.json`` names the checkpoint). A missing, corrupt or foreign one is a
    :class:`CheckpointError` naming the file; nothing is changed on disk."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path}: no such directory")
    if os.path.exists(os.path.join(path, LATEST)):
        head = _read_json(os.path.join(path, LATEST), "checkpoint")
        if not isinstance(head, dict) or head.get("format") != FORMAT or not isinstance(head.get("checkpoint"), str):
            raise CheckpointError(f"checkpoint: {os.path.join(path, LATEST)} is not a timerl checkpoint pointer")
        path = os.path.join(path, head["checkpoint"])
    elif not os.path.exists(os.path.join(path, "checkpoint.json")):
        raise CheckpointError(f"checkpoint {path}: no {LATEST} and no checkpoint.json there (pass the directory "
                              "given to --checkpoint-dir, or one of its iteration-* directories)")
    meta = _read_json(os.path.join(path, "checkpoint.json"), "checkpoint")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint: {os.path.join(path, 'checkpoint.json')} is not a timerl checkpoint")
    if int(meta.get("version", -1)) > VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {meta.get('version')}; this timerl reads up to "
                              f"{VERSION}: upgrade timerl")
    npz = os.path.join(path, "arrays.npz")
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint: {npz} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint: {npz} is unreadable or corrupt ({type(e).__name__}: {e})") from None
    for t in meta.get("tensors", []):
        a = arrays.get(f"tensor/{t['name']}")
        if a is None or list(a.shape) != list(t["shape"]) or str(a.dtype) != t["dtype"]:
            raise CheckpointError(f"checkpoint: {npz} lacks tensor {t['name']!r} of shape {tuple(t['shape'])} and "
                                  f"dtype {t['dtype']} that checkpoint.json lists: the checkpoint is corrupt")
    return Checkpoint(path, meta, arrays)


def args_for_resume(ck: Checkpoint, algo, args_cls, kwargs) -> dict:
    """The arguments of the resumed run: the checkpoint's, checked against those given."""
    if ck.meta.get("algo") != algo:
        raise CheckpointError(f"checkpoint {ck.path} was written by {ck.meta.get('algo')!r}, not {algo!r}: resume it "
                              f"with `timerl train {ck.meta.get('algo')} --resume`")
    saved = dict(ck.meta["args"])
    fields = {f.name for f in dataclasses.fields(args_cls)}
    unknown = sorted(set(saved) - fields)
    if unknown:
        raise CheckpointError(f"checkpoint {ck.path} has arguments {', '.join(unknown)} that {algo} does not take")
    if saved.get("obs_shape") is not None:
        saved["obs_shape"] = tuple(saved["obs_shape"])
    diff = []
    for k, v in kwargs.items():
        if k in RUN_ONLY:
            continue
        s = saved.get(k, getattr(args_cls, k, None))
        same = (tuple(v) == tuple(s)) if isinstance(v, (tuple, list)) and s is not None else v == s
        if not same:
            diff.append(f"--{k.replace('_', '-')} {v!r} (checkpoint: {s!r})")
    if diff:
        raise CheckpointError(f"checkpoint {ck.path} was written with other arguments: {'; '.join(diff)}. Resume "
                              "with the checkpoint's arguments (leave these flags out), or start a new run")
    return {**saved, **{k: kwargs[k] for k in RUN_ONLY if k in kwargs}}


# -- the saver: the log sink's checkpoint half -------------------------------------------------


class Saver:
    """Writes the run's checkpoints from its per-iteration log sink (:class:`~timerl.rl.common.History`):
    every ``every`` iterations, at the last one, and after the iteration in flight on Ctrl-C
    (inside :meth:`interrupts`)."""

    def __init__(self, directory, every, algo, args, total, keep=3, resuming=False):
        if directory is None:
            raise CheckpointError("checkpoint_every needs checkpoint_dir")
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise CheckpointError(f"--checkpoint-every must be a positive int, got {every!r}")
        if not resuming and os.path.exists(os.path.join(os.fspath(directory), LATEST)):
            raise CheckpointError(f"--checkpoint-dir {os.fspath(directory)} already holds a run's checkpoints: resume "
                                  f"it with --resume {os.fspath(directory)}, or choose another directory (a new run "
                                  "there would mix its checkpoints with the old ones)")
        self.directory, self.every, self.keep = os.fspath(directory), every or 10, keep
        self.algo, self.args, self.total = algo, args, total
        self.carries, self.policy = [], None
        self.stop, self.last_path = False, None

    def tensors(self, prog, env) -> list:
        """The tensors the log sink reads for the checkpoint (the carries of ``prog``, whose env is ``env``)."""
        self.carries = carries(prog)
        self.policy = policy_layout(env, self.args, self.algo, self.carries)
        return [c.value for c in self.carries]

    def at_iteration(self, i, values, history):
        """The log sink's call at the end of (global) iteration ``i`` (0-based)."""
        done = i + 1
        if done % self.every == 0 or done == self.total or self.stop:
            self.save(done, values, history)
        if self.stop:
            raise TrainingStopped(done, self.last_path)

    def save(self, done, values, history):
        env = history.env
        arrays = {f"tensor/{c.name}": np.array(v) for c, v in zip(self.carries, values)}
        ep = np.array(env.episode_returns, np.float64).reshape(-1, 3)
        arrays.update({"episodes": ep, "episode_return": np.array(env._ret), "episode_length": np.array(env._len)})
        meta = {"format": FORMAT, "version": VERSION, "algo": self.algo,
                "args": dataclasses.asdict(self.args), "iteration": done, "total_iterations": self.total,
                "checkpoint_every": self.every,
                "env_steps": done * self.args.num_envs * self.args.num_steps,
                "rng": {"seed": self.args.seed, "position": done,
                        "note": "random values are functions of (seed, op, point): the run resumes at this iteration"},
                "env": {"id": env.env_id, "compiled": env.compiled, "num_envs": env.num_envs,
                        "env_steps": env.env_steps},
                "tensors": [{"name": c.name, "shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype),
                             "restored_on_resume": not c.host} for c, v in zip(self.carries, values)],
                "policy": self.policy, "row_fields": list(history.rows[0]) if history.rows else [],
                "written": time.time()}
        arrays["rows"] = np.array([[float(r[k]) for k in meta["row_fields"]] for r in history.rows],
                                  np.float64).reshape(len(history.rows), len(meta["row_fields"]))
        try:
            self.last_path = write(self.directory, meta, arrays, self.keep)
        except OSError as e:
            raise CheckpointError(f"cannot write a checkpoint to {self.directory}: {e.strerror or e}") from None

    def interrupts(self):
        """A context manager: the first Ctrl-C asks for a checkpoint after the iteration in flight and
        a stop (:class:`TrainingStopped`); a second one stops at once."""
        return _Interrupts(self)


class _Interrupts:
    def __init__(self, saver):
        self.saver, self.old = saver, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.saver.stop:
            signal.signal(signal.SIGINT, self.old or signal.default_int_handler)
            raise KeyboardInterrupt
        self.saver.stop = True
        import sys

        print("\ntimerl: Ctrl-C: stopping after the iteration in flight, once it is checkpointed "
              "(Ctrl-C again to stop now)", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        return False
