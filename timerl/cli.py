"""The ``timerl`` command: train, bench, show.

    timerl train ppo --env CartPole-v1 --total-steps 500000 --log run.csv --plot curve.png
    timerl train reinforce --nstep 16 --json
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

    train = sub.add_parser("train", help="train an agent")
    tsub = train.add_subparsers(dest="algo", required=True, parser_class=_ArgParser)
    for algo in ALGOS:
        a = tsub.add_parser(algo, help=f"train with {algo}")
        _add_algo_flags(a, algo)
        a.add_argument("--log", help="write one CSV row per iteration to this file (flushed as it goes)")
        a.add_argument("--plot", help="save the learning curve to this image (needs matplotlib)")
        a.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
        a.add_argument("--quiet", action="store_true", help="no progress bar")

    bench = sub.add_parser("bench", help="time compile and iterations")
    bsub = bench.add_subparsers(dest="algo", required=True, parser_class=_ArgParser)
    for algo in ALGOS:
        a = bsub.add_parser(algo, help=f"benchmark {algo}")
        _add_algo_flags(a, algo)
        a.add_argument("--iterations", type=int, default=5, help="iterations to time")
        a.add_argument("--traced-memory", action="store_true",
                       help="also run once more under tracemalloc and report traced_peak_bytes")
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
    """Rows written and flushed one by one, so a crash keeps every finished iteration."""

    def __init__(self, path):
        self.path, self.file, self.writer = path, None, None
        try:
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


def cmd_train(ns):
    from .rl.common import iterations, make_args

    kwargs = _algo_kwargs(ns, ns.algo)
    mod = _algo_module(ns.algo)
    args = make_args(mod.Args, kwargs)
    mod.check(args)
    if ns.plot:
        _check_plot_target(ns.plot)
    log = CsvLog(ns.log) if ns.log else None
    bar = Progress(iterations(args), enabled=not ns.quiet)

    watch = NonFiniteWatch()

    def on_row(row):
        if log:
            log.write(row)
        bar.update(row)
        watch.update(row)

    try:
        t0 = time.perf_counter()
        exe = _build(ns.algo, kwargs, on_row)
        compile_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        exe.run()
        seconds = time.perf_counter() - t1
    finally:
        bar.close()
        if log:
            log.close()
    rows = exe.history.rows
    env = exe.env
    steps = rows[-1]["env_steps"] if rows else 0
    final = env.recent_return(10)
    if ns.plot:
        plot_curve(rows, ns.plot, f"{ns.algo} on {args.env} (seed {args.seed})")
    summary = {"algo": ns.algo, "env": args.env, "env_steps": steps,
               "final_return": None if math.isnan(final) else final,
               "final_return_note": return_note(final, len(env.episode_returns), steps, watch.first),
               "nonfinite": watch.first, "episodes": len(env.episode_returns),
               "seconds": seconds, "compile_seconds": compile_s,
               "env_steps_per_s": steps / seconds if seconds > 0 else None}
    if ns.json:
        print(json.dumps(summary))
    else:
        print(f"{ns.algo} on {args.env}: {steps:,} env steps in {seconds:.1f}s "
              f"({summary['env_steps_per_s'] or 0:,.0f} steps/s, compile {compile_s:.1f}s); "
              "mean return of the last 10 episodes: "
              + (f"{final:.2f}" if summary["final_return_note"] is None else f"none ({summary['final_return_note']})"))
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
        ns = build_parser().parse_args(argv)
        return {"train": cmd_train, "bench": cmd_bench, "show": cmd_show, "cache": cmd_cache}[ns.cmd](ns)
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


def _is_user_error(e):
    from .errors import CompileError, ShapeError
    from .rl.common import ArgError
    from .rl.envs import EnvError

    return isinstance(e, (CLIError, ArgError, EnvError, CompileError, ShapeError))


def _one_line(e):
    if isinstance(e, CLIError):
        return str(e)
    msg = " ".join(str(e).split()) or type(e).__name__
    from .errors import CompileError, RuntimeFault, ShapeError
    from .rl.common import ArgError
    from .rl.envs import EnvError

    if isinstance(e, (ArgError, EnvError, CompileError, ShapeError, RuntimeFault)):
        return msg
    return f"{type(e).__name__}: {msg} (set TIMERL_DEBUG=1 for the traceback)"


if __name__ == "__main__":
    sys.exit(main())
