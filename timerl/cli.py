"""The ``timerl`` command: train, bench, show.

    timerl train ppo --env CartPole-v1 --total-steps 500000 --log run.csv --plot curve.png
    timerl train reinforce --nstep 16 --json
    timerl train ppo --checkpoint-dir ckpt --checkpoint-every 10    # Ctrl-C saves, then stops
    timerl train --resume ckpt                                      # goes on from the latest checkpoint
    timerl eval ppo --checkpoint ckpt --episodes 10 [--video out.mp4]
    timerl show schedule ppo --total-steps 2048 --out ppo_schedule.txt
    timerl bench ppo --iterations 5 --json
    timerl cache info                 # the kernel cache: where, how big (timerl cache clear empties it)

Flags are the fields of each algorithm's ``Args`` dataclass (``--num-envs`` is ``num_envs``);
their help texts are the fields' docstrings. Bad flag values, env ids and spaces are a
one-line error with exit status 2, never a traceback (``TIMERL_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import re
import sys
import time

import tqdm

ALGOS = ("ppo", "reinforce")


class CLIError(Exception):
    """An error to print as one line and exit with status 2."""


# -- flags from the Args dataclasses --------------------------------------------------------


def _algo_module(name):
    import importlib

    return importlib.import_module(f"timerl.rl.{name}")  # tl.rl.ppo is the builder function


def _parse_shape(text):
    try:
        shape = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints like 3,4,4, got {text!r}") from None
    if not shape or any(s <= 0 for s in shape):
        raise argparse.ArgumentTypeError(f"expected positive ints like 3,4,4, got {text!r}")
    return shape


def _parse_bool(text):
    t = text.lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


#: the suffixes --memory-budget takes (powers of 1024)
BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text):
    """A byte count: an int, or a number with a K, M or G suffix (powers of 1024: ``300M``, ``1.5G``,
    ``512KiB``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)(?:I?B)?", text.strip().upper())
    n = int(float(m.group(1)) * BYTE_UNITS[m.group(2)]) if m else 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes, or one with a K, M or G suffix "
                                         f"(e.g. 300M), got {text!r}")
    return n


def _finite(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _add_algo_flags(parser, algo):
    from .rl.common import field_docs

    cls = _algo_module(algo).Args
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        kind = {int: int, float: _finite, bool: _parse_bool}.get(type(default))
        if f.name == "obs_shape":
            kind = _parse_shape
        elif f.name == "nstep":
            kind = int
        elif f.name == "memory_budget":
            kind = parse_bytes
        elif f.type in (bool, "bool"):   # a switch whose default (None) depends on other flags
            kind = _parse_bool
        elif kind is None:
            kind = str
        helptext = docs.get(f.name, "") + (f" (default: {default})" if default is not None else "")
        parser.add_argument(flag, dest=f.name, type=kind, default=argparse.SUPPRESS,
                            help=helptext.replace("%", "%%"), metavar=f.name.upper())


def _algo_kwargs(ns, algo):
    cls = _algo_module(algo).Args
    return {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls) if hasattr(ns, f.name)}


class _ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise CLIError(f"{self.prog}: {message}")


def build_parser():
    p = _ArgParser(prog="timerl", description="Deep RL programs as recurrence equations, compiled whole.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_ArgParser)

    train = sub.add_parser("train", help="train an agent",
                           description="Train an agent. `timerl train --resume DIR` continues a checkpointed run "
                                       "(the algorithm and arguments come from DIR's latest checkpoint).")
    tsub = train.add_subparsers(dest="algo", required=True, parser_class=_ArgParser)
    for algo in ALGOS:
        a = tsub.add_parser(algo, help=f"train with {algo}")
        _add_algo_flags(a, algo)
        a.add_argument("--log", help="write one CSV row per iteration to this file (flushed as it goes; with "
                       "--resume, the rows after the checkpoint are dropped and the new ones appended)")
        a.add_argument("--plot", help="save the learning curve to this image (needs matplotlib)")
        a.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
        a.add_argument("--quiet", action="store_true", help="no progress bar")
        a.add_argument("--checkpoint-dir", metavar="DIR", help="write checkpoints here (parameters, optimizer state, "
                       "iteration, env state, arguments: .npz + JSON), every --checkpoint-every iterations, at the "
                       "end, and on Ctrl-C after the iteration in flight")
        a.add_argument("--checkpoint-every", type=int, metavar="N", help="iterations between checkpoints (default 10)")
        a.add_argument("--resume", metavar="DIR", help="continue from the latest checkpoint in DIR (its arguments; "
                       "flags given must agree with them); checkpoints go on into DIR unless --checkpoint-dir says")
        a.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard curves, named as CleanRL names them, "
                       "to this directory (needs tensorboardX: pip install -e \".[tensorboard]\"; view: "
                       "tensorboard --logdir DIR)")

    bench = sub.add_parser("bench", help="time compile and iterations")
    bsub = bench.add_subparsers(dest="algo", required=True, parser_class=_ArgParser)
    for algo in ALGOS:
        a = bsub.add_parser(algo, help=f"benchmark {algo}")
        _add_algo_flags(a, algo)
        a.add_argument("--iterations", type=int, default=5, help="iterations to time")
        a.add_argument("--traced-memory", action="store_true",
                       help="also run once more under tracemalloc and report traced_peak_bytes")
        a.add_argument("--json", action="store_true", help="print one JSON object as the last line")

    ev = sub.add_parser("eval", help="evaluate a checkpoint's policy in gymnasium's environment")
    esub = ev.add_subparsers(dest="algo", required=True, parser_class=_ArgParser)
    for algo in ALGOS:
        a = esub.add_parser(algo, help=f"evaluate a {algo} checkpoint")
        a.add_argument("--checkpoint", required=True, metavar="DIR",
                       help="a run's --checkpoint-dir (its latest checkpoint) or one of its iteration-* directories")
        a.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
        a.add_argument("--deterministic", type=_parse_bool, default=False, metavar="BOOL",
                       help="act with the argmax / the Gaussian's mean instead of sampling (default false)")
        a.add_argument("--seed", type=int, default=0, help="seed of the episodes' resets and of the sampling")
        a.add_argument("--video", metavar="OUT.mp4", help="record the episodes: the first to this file, episode K "
                       "to OUT-episode-K.mp4 (needs "
                       "pip install -e \".[video]\": moviepy and pygame)")
        a.add_argument("--json", action="store_true", help="print one JSON object as the last line")

    show = sub.add_parser("show", help="print or write a program's PDG or schedule")
    show.add_argument("what", choices=("pdg", "schedule"))
    ssub = show.add_subparsers(dest="algo", required=True, parser_class=_ArgParser)
    for algo in ALGOS:
        a = ssub.add_parser(algo, help=f"show {algo}")
        _add_algo_flags(a, algo)
        a.add_argument("--out", help="write to this file: .dot or .svg (pdg), .txt (either)")

    cache = sub.add_parser("cache", help="the on-disk kernel cache: where it is and how big; clear it")
    cache.add_argument("action", choices=("info", "clear"))
    cache.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    return p


# -- commands ------------------------------------------------------------------------------


class Progress:
    """A tqdm bar on stderr: one step per training iteration, with env steps, steps/s and the
    recent return as its postfix."""

    def __init__(self, total_iters, enabled=True):
        self.total, self.enabled, self.bar = total_iters, enabled, None

    def update(self, row):
        if not self.enabled:
            return
        if self.bar is None:  # opened with the first iteration, so its rate leaves out the compile
            self.bar = tqdm.tqdm(total=self.total, unit="it", desc="train", file=sys.stderr, dynamic_ncols=True,
                                 mininterval=0.2 if sys.stderr.isatty() else 5.0)
        ret = row["mean_return"]
        sps = row["env_steps"] / max(row["seconds"], 1e-9)
        self.bar.set_postfix_str(f"{row['env_steps']:,} steps, {sps:,.0f} steps/s, return "
                                 + ("-" if math.isnan(ret) else f"{ret:.1f}"), refresh=False)
        self.bar.update(row["iteration"] - self.bar.n)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class CsvLog:
    """Rows written and flushed one by one, so a crash keeps every finished iteration. ``after``
    (a resumed run's first iteration): the file's rows up to it are kept, later ones (written after
    the checkpoint by the run that stopped) dropped, and the new rows appended."""

    def __init__(self, path, after=None):
        self.path, self.file, self.writer = path, None, None
        kept = []
        if after is not None and os.path.exists(path):
            try:
                with open(path, newline="") as f:
                    kept = [r for r in csv.DictReader(f) if r.get("iteration", "").isdigit()
                            and int(r["iteration"]) <= after]
            except (OSError, csv.Error) as e:
                raise CLIError(f"cannot read --log {path} to continue it: {e}") from None
        try:
            if kept:    # rewritten whole under another name, then renamed: the old rows are never lost
                tmp = f"{path}.tmp-{os.getpid()}"
                with open(tmp, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(kept[0]))
                    w.writeheader()
                    w.writerows(kept)
                os.replace(tmp, path)
                self.file = open(path, "a", newline="")
                self.writer = csv.DictWriter(self.file, fieldnames=list(kept[0]))
            else:
                self.file = open(path, "w", newline="")
        except OSError as e:
            raise CLIError(f"cannot write --log {path}: {e.strerror}") from None

    def write(self, row):
        if self.writer is None:
            self.writer = csv.DictWriter(self.file, fieldnames=list(row))
            self.writer.writeheader()
        self.writer.writerow(row)
        self.file.flush()

    def close(self):
        if self.file:
            self.file.close()


def _build(algo, kwargs, callback=None):
    return getattr(_algo_module(algo), algo)(callback=callback, **kwargs)


def _check_plot_target(path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError('--plot needs matplotlib, which the quick start leaves out: pip install -e ".[plot]"') from None
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise CLIError(f"cannot write --plot {path}: no directory {d}")


def plot_curve(rows, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["env_steps"] for r in rows if not math.isnan(r["mean_return"])]
    ys = [r["mean_return"] for r in rows if not math.isnan(r["mean_return"])]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, ys)
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean return (last 10 episodes)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


class NonFiniteWatch:
    """Warns once on stderr when a logged loss or return becomes inf or NaN; says when in the summary."""

    def __init__(self):
        self.first = None  # {"iteration", "env_steps", "fields"} of the first row with a non-finite value

    def update(self, row):
        if self.first is not None:
            return
        bad = [k for k, v in row.items() if k not in ("iteration", "env_steps", "episodes", "seconds")
               and isinstance(v, float) and not math.isfinite(v) and not (k == "mean_return" and row["episodes"] == 0)]
        if bad:
            self.first = {"iteration": row["iteration"], "env_steps": row["env_steps"], "fields": bad}
            # tqdm.write keeps a live progress bar intact
            tqdm.tqdm.write(f"timerl: warning: {', '.join(bad)} became non-finite ({', '.join(str(row[k]) for k in bad)}) "
                            f"at iteration {row['iteration']} ({row['env_steps']:,} env steps); training goes on, but its "
                            "numbers are no longer meaningful. Rerun with TIMERL_CHECK=1 to stop at the first op that "
                            "produced inf or NaN (it names the tensor and the point).", file=sys.stderr)


def return_note(final, episodes, steps, nonfinite):
    """Why ``final_return`` is null (None when it is a number)."""
    if not math.isnan(final):
        return None
    if episodes == 0:
        return (f"no episode finished in {steps:,} env steps (raise --total-steps, or use an env whose episodes "
                "end sooner)")
    return "the mean episodic return is NaN" + (
        f": {', '.join(nonfinite['fields'])} became non-finite at iteration {nonfinite['iteration']}" if nonfinite
        else "")


def _train_setup(ns):
    """The run's keyword arguments and its checked ``Args``: with ``--resume``, the checkpoint's
    arguments checked against the flags given, and checkpoints going on into the same directory."""
    from .rl import checkpoint as ckpt
    from .rl.common import make_args

    kwargs = _algo_kwargs(ns, ns.algo)
    mod = _algo_module(ns.algo)
    start = 0
    if ns.resume:
        state = ckpt.load(ns.resume)
        args = make_args(mod.Args, ckpt.args_for_resume(state, ns.algo, mod.Args, kwargs))
        start = state.iteration
        if ns.checkpoint_dir is None:   # go on writing where the run wrote
            run_dir = os.path.dirname(state.path) if os.path.exists(os.path.join(os.path.dirname(state.path),
                                                                                  ckpt.LATEST)) else ns.resume
            ns.checkpoint_dir = run_dir
            ns.checkpoint_every = ns.checkpoint_every or state.meta.get("checkpoint_every")
        kwargs["resume"] = state           # loaded once: compile_algorithm takes the Checkpoint itself
    else:
        args = make_args(mod.Args, kwargs)
    mod.check(args)
    if ns.checkpoint_dir is not None or ns.checkpoint_every is not None:
        if ns.checkpoint_dir is None:
            raise CLIError("--checkpoint-every needs --checkpoint-dir")
        kwargs["checkpoint_dir"] = ns.checkpoint_dir
        kwargs["checkpoint_every"] = ns.checkpoint_every
    return kwargs, args, start


def cmd_train(ns):
    from .rl.checkpoint import TrainingStopped
    from .rl.common import iterations

    kwargs, args, start = _train_setup(ns)
    if ns.plot:
        _check_plot_target(ns.plot)
    tb = None
    if ns.tensorboard:
        from .rl.tensorboard import TensorBoardLog

        tb = TensorBoardLog(ns.tensorboard, ns.algo, dataclasses.asdict(args))
    log = CsvLog(ns.log, after=start if ns.resume else None) if ns.log else None
    bar = Progress(iterations(args), enabled=not ns.quiet)

    watch = NonFiniteWatch()

    def on_row(row):
        if log:
            log.write(row)
        if tb:
            tb.write(row)
        bar.update(row)
        watch.update(row)

    stopped = None
    try:
        t0 = time.perf_counter()
        exe = _build(ns.algo, kwargs, on_row)
        compile_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        if exe.checkpointer is not None:
            try:
                with exe.checkpointer.interrupts():
                    exe.run()
            except TrainingStopped as e:
                stopped = e
        else:
            exe.run()
        seconds = time.perf_counter() - t1
    finally:
        bar.close()
        if log:
            log.close()
        if tb:
            tb.close()
    rows = exe.history.rows
    env = exe.env
    steps = rows[-1]["env_steps"] if rows else 0
    steps_run = steps - start * args.num_envs * args.num_steps
    final = env.recent_return(10)
    if stopped is not None:
        print(f"timerl: stopped after iteration {stopped.iteration} ({steps:,} env steps); checkpoint written to "
              f"{stopped.path}; resume with: timerl train --resume {exe.checkpointer.directory}", file=sys.stderr)
    if ns.plot:
        plot_curve(rows, ns.plot, f"{ns.algo} on {args.env} (seed {args.seed})")
    summary = {"algo": ns.algo, "env": args.env, "env_steps": steps,
               "final_return": None if math.isnan(final) else final,
               "final_return_note": return_note(final, len(env.episode_returns), steps, watch.first),
               "nonfinite": watch.first, "episodes": len(env.episode_returns),
               "seconds": seconds, "compile_seconds": compile_s,
               "env_steps_per_s": steps_run / seconds if seconds > 0 else None,
               "resumed_from": start or None, "stopped_at": None if stopped is None else stopped.iteration,
               "checkpoint": None if exe.checkpointer is None else exe.checkpointer.last_path}
    if ns.json:
        print(json.dumps(summary))
    else:
        print(f"{ns.algo} on {args.env}: {steps:,} env steps in {seconds:.1f}s "
              f"({summary['env_steps_per_s'] or 0:,.0f} steps/s, compile {compile_s:.1f}s); "
              "mean return of the last 10 episodes: "
              + (f"{final:.2f}" if summary["final_return_note"] is None else f"none ({summary['final_return_note']})"))
    return 130 if stopped is not None else 0


def cmd_eval(ns):
    from .rl.checkpoint import load
    from .rl.evaluate import Policy, evaluate

    ck = load(ns.checkpoint)
    if ck.meta.get("algo") != ns.algo:
        raise CLIError(f"--checkpoint {ns.checkpoint} was written by {ck.meta.get('algo')}, not {ns.algo}: "
                       f"use `timerl eval {ck.meta.get('algo')}`")
    if ns.episodes < 1:
        raise CLIError(f"--episodes must be a positive int, got {ns.episodes}")
    policy = Policy(ck.meta, ck.tensors, deterministic=ns.deterministic, seed=ns.seed)
    res = evaluate(policy, episodes=ns.episodes, seed=ns.seed, video=ns.video)
    res["checkpoint"] = ck.path
    if ns.json:
        print(json.dumps(res))
    else:
        print(f"{ns.algo} on {res['env']} (checkpoint {ck.path}, iteration {res['iteration']}): "
              f"return {res['mean']:.2f} +- {res['std']:.2f} over {res['episodes']} episodes "
              f"(min {res['min']:.2f}, max {res['max']:.2f}, mean length {res['mean_length']:.0f})"
              + (f"; video {', '.join(res['video'])}" if res["video"] else ""))
    return 0


def cmd_bench(ns):
    try:
        from . import bench
    except ImportError:
        raise CLIError("timerl bench is not available in this build (timerl/bench.py is missing)") from None
    result = bench.run_bench(ns)
    if ns.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


def cmd_show(ns):
    kwargs = _algo_kwargs(ns, ns.algo)
    out = ns.out
    ext = os.path.splitext(out)[1].lower() if out else ""
    if out and ext not in (".dot", ".svg", ".txt"):
        raise CLIError(f"--out {out}: use a .dot, .svg or .txt file")
    if ns.what == "schedule" and ext in (".dot", ".svg"):
        raise CLIError(f"--out {out}: a schedule is text; use a .txt file")
    exe = _build(ns.algo, kwargs)
    if ns.what == "schedule":
        text = str(exe.schedule)
    elif ext in (".dot", ".svg"):
        text = exe.pdg.to_dot() if hasattr(exe.pdg, "to_dot") else _dot(exe.pdg)
    else:
        text = str(exe.pdg)
    if not out:
        print(text)
        return 0
    if ext == ".svg":
        import shutil
        import subprocess

        if shutil.which("dot") is None:
            raise CLIError("--out .svg needs Graphviz's `dot` program; write a .dot file instead")
        proc = subprocess.run(["dot", "-Tsvg", "-o", out], input=text, text=True, capture_output=True)
        if proc.returncode:
            raise CLIError(f"dot failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    else:
        try:
            with open(out, "w") as f:
                f.write(text)
        except OSError as e:
            raise CLIError(f"cannot write --out {out}: {e.strerror}") from None
    print(f"wrote {out}")
    return 0


def cmd_cache(ns):
    from .kernels import cache

    res = cache.info() if ns.action == "info" else cache.clear()
    if ns.json:
        print(json.dumps(dict(res, cleared=ns.action == "clear")))
    elif ns.action == "info":
        print(f"{res['path']}: {res['kernels']} kernels, {res['bytes'] / 2**20:.1f} MiB "
              "(sources and numba's compiled code; clear with `timerl cache clear`, safe at any time)")
    else:
        print(f"removed {res['path']}: {res['kernels']} kernels, {res['bytes'] / 2**20:.1f} MiB")
    return 0


def _dot(pdg):
    from .ir.pdg import PDG

    return PDG.to_dot(pdg)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        ns = build_parser().parse_args(_resume_algo(argv))
        return {"train": cmd_train, "eval": cmd_eval, "bench": cmd_bench, "show": cmd_show,
                "cache": cmd_cache}[ns.cmd](ns)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("\ntimerl: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line for users; TIMERL_DEBUG=1 shows the traceback
        from .config import config

        if config.debug:
            raise
        print(f"timerl: error: {_one_line(e)}", file=sys.stderr)
        return 2 if _is_user_error(e) else 1


def _resume_algo(argv):
    """``timerl train --resume DIR ...``: the algorithm comes from the checkpoint."""
    if len(argv) < 2 or argv[0] != "train" or argv[1] in ALGOS or argv[1] in ("-h", "--help"):
        return argv
    path = None
    for k, a in enumerate(argv):
        if a == "--resume" and k + 1 < len(argv):
            path = argv[k + 1]
        elif a.startswith("--resume="):
            path = a.split("=", 1)[1]
    if path is None:
        return argv
    from .rl.checkpoint import load

    return ["train", str(load(path).meta.get("algo"))] + argv[1:]


def _is_user_error(e):
    from .errors import CompileError, ShapeError
    from .rl.checkpoint import CheckpointError
    from .rl.common import ArgError
    from .rl.envs import EnvError

    return isinstance(e, (CLIError, ArgError, EnvError, CompileError, ShapeError, CheckpointError))


def _one_line(e):
    if isinstance(e, CLIError):
        return str(e)
    msg = " ".join(str(e).split()) or type(e).__name__
    from .errors import CompileError, RuntimeFault, ShapeError
    from .rl.checkpoint import CheckpointError
    from .rl.common import ArgError
    from .rl.envs import EnvError

    if isinstance(e, (ArgError, EnvError, CompileError, ShapeError, RuntimeFault, CheckpointError)):
        return msg
    return f"{type(e).__name__}: {msg} (set TIMERL_DEBUG=1 for the traceback)"


if __name__ == "__main__":
    sys.exit(main())
