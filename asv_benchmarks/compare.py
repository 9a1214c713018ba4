"""Side-by-side comparison: timerl against the numpy and PyTorch eager baselines.

    python -m asv_benchmarks.compare            # the issue's configurations (tens of minutes)
    python -m asv_benchmarks.compare --quick    # tiny versions (a couple of minutes)
    python -m asv_benchmarks.compare --only cartpole_ppo,reinforce_T

Every measurement is one fresh subprocess (``timerl bench ... --json`` or
``python -m asv_benchmarks.baselines.<system>_eager ... --json``), so imports, JIT caches
and peak RSS never leak between runs. Repetitions are interleaved: repetition r runs every
configuration, and within a configuration every system in an order rotated by r. The table
reports medians over repetitions. All systems run pinned to one thread (OMP, OpenBLAS, MKL
and numba thread counts = 1; torch.set_num_threads(1)) unless ``--timerl-threads`` says
otherwise for timerl.

Writes to ``--out`` (default asv_benchmarks/results/): ``compare.md`` (machine, method, one
row per configuration with the numbers of each system and timerl's ratios), ``compare.json``
(every run), and PNG plots: env-steps/s and peak memory vs num_envs, vs episode length T,
vs observation size, vs hidden width, and REINFORCE Monte-Carlo vs n-step peak memory over T.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

from asv_benchmarks.baselines import pin_threads

SYSTEMS = ("timerl", "numpy", "torch")
#: measured only when asked (``--systems timerl,numpy,torch,jax``): the fully jitted JAX peer
#: (``baselines/jax_peer.py``, PPO only), which its own table compares with timerl
PEERS = ("jax",)
ALL_SYSTEMS = SYSTEMS + PEERS
COLORS = {"timerl": "C0", "numpy": "C1", "torch": "C2", "jax": "C3"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTRA = {"torch": ("torch", 'pip install -e ".[bench]" adds torch==2.13.0'),
         "matplotlib": ("matplotlib", 'pip install -e ".[plot]" adds matplotlib'),
         "jax": ("jax", 'pip install -e ".[peer]" adds jax==0.10.2')}


def missing(what):
    """Why ``what`` (a system or "matplotlib") cannot run here, or None. Looked up, not imported:
    a child's ru_maxrss starts at its parent's RSS, so the runner never imports torch itself."""
    import importlib.util

    if what not in EXTRA:
        return None
    pkg, how = EXTRA[what]
    return None if importlib.util.find_spec(pkg) is not None else f"{pkg} is not installed; {how}"


# -- configurations -------------------------------------------------------------------------------


def _cfg(group, x, algo, **flags):
    return {"group": group, "x": x, "algo": algo, "flags": flags}


def configurations(quick=False):
    """(group, x, algo, flags) per configuration; ``group`` names the sweep / plot."""
    if quick:
        base = {"env": "trivial", "obs_shape": (3, 4, 4), "num_envs": 32, "num_steps": 25, "epochs": 1,
                "minibatches": 1}
        envs, steps, hidden, obs = (16, 32, 64), (10, 25, 50), (16, 64), ((3, 4, 4), (3, 8, 8))
        large = {"num_envs": 8, "num_steps": 25}
        cartpole = {"env": "CartPole-v1", "num_envs": 4, "num_steps": 32, "epochs": 2, "minibatches": 2}
        rt, nstep = (10, 25, 50), 4
        robs = ((3, 8, 8),)
    else:
        base = {"env": "trivial", "obs_shape": (3, 4, 4), "num_envs": 512, "num_steps": 250, "epochs": 1,
                "minibatches": 1}
        envs, steps, hidden, obs = (128, 512, 2048), (125, 250, 1000), (16, 64, 256), ((3, 16, 16), (3, 32, 32),
                                                                                     (3, 64, 64))
        large = {"num_envs": 64, "num_steps": 500}
        cartpole = {"env": "CartPole-v1", "num_envs": 8, "num_steps": 128, "epochs": 4, "minibatches": 4}
        rt, nstep = (125, 250, 500, 1000), 8
        robs = ((3, 16, 16), (3, 32, 32), (3, 64, 64))
    out = [_cfg("cartpole_ppo", "", "ppo", **cartpole)]
    out += [_cfg("ppo_num_envs", n, "ppo", **dict(base, num_envs=n)) for n in envs]
    out += [_cfg("ppo_T", T, "ppo", **dict(base, num_steps=T)) for T in steps if T != base["num_steps"]]
    out += [_cfg("ppo_hidden", h, "ppo", **dict(base, hidden=h)) for h in hidden if h != 64]
    rb = {k: v for k, v in base.items() if k not in ("epochs", "minibatches")}
    out += [_cfg("reinforce_T", f"mc T={T}", "reinforce", **dict(rb, num_steps=T)) for T in rt]
    out += [_cfg("reinforce_T", f"n={nstep} T={T}", "reinforce", nstep=nstep, **dict(rb, num_steps=T)) for T in rt]
    out += [_cfg("ppo_obs", "x".join(map(str, o)), "ppo", **dict(base, obs_shape=o, **large)) for o in obs]
    # the memory issue's setting: REINFORCE at large observations, n-step (timerl learns while acting),
    # Monte-Carlo (the whole rollout), and Monte-Carlo per step under a budget of a quarter of the
    # observation block (below a quarter of its unconstrained planned peak: timerl spills each step's
    # observation to disk; the eager baselines run plain Monte-Carlo there)
    quarter = lambda o: large["num_envs"] * large["num_steps"] * math.prod(o)  # noqa: E731  bytes / 4
    forms = {"n": lambda o: {"nstep": nstep}, "mc": lambda o: {},
             "mc/4": lambda o: {"per_step": True, "memory_budget": quarter(o)}}
    out += [_cfg("reinforce_obs", f"{kind} {'x'.join(map(str, o))}", "reinforce",
                 **dict(rb, obs_shape=o, **large, **more(o))) for kind, more in forms.items() for o in robs]
    return out


# -- one measurement ----------------------------------------------------------------------------------


def _argv(cfg):
    argv = [cfg["algo"]]
    for k, v in cfg["flags"].items():
        if isinstance(v, tuple):
            v = ",".join(map(str, v))
        argv += ["--" + k.replace("_", "-"), str(v)]
    return argv


def command(system, cfg, iterations, memory=True, backend=None):
    tail = _argv(cfg) + ["--iterations", str(iterations), "--json"]
    if system == "timerl":  # --traced-memory: a second, untimed run under tracemalloc (like the numpy baseline)
        return ([sys.executable, "-m", "timerl", "bench"] + tail + (["--backend", backend] if backend else [])
                + (["--traced-memory"] if memory else []))
    module = "jax_peer" if system == "jax" else f"{system}_eager"
    return ([sys.executable, "-m", f"asv_benchmarks.baselines.{module}"] + tail
            + ([] if memory else ["--no-memory"]))


def run_one(system, cfg, iterations, memory, timeout, timerl_threads=None, backend=None, core=None):
    """One measurement in a fresh process; ``core``: pin the process to that CPU (``--jobs``)."""
    env = pin_threads(dict(os.environ))
    if system == "timerl" and timerl_threads:
        env["NUMBA_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(timerl_threads)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = command(system, cfg, iterations, memory, backend)
    t0 = time.perf_counter()
    try:
        pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
                           preexec_fn=pin)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout}s", "cmd": " ".join(cmd)}
    wall = time.perf_counter() - t0
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        err = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()
        return {"error": err[-1][:300] if err else f"exit {p.returncode}", "cmd": " ".join(cmd)}
    out = json.loads(lines[-1])
    out["process_wall_s"] = wall
    return out


def pinned_map(fn, items, jobs):
    """``[fn(item, core) for item in items]``, ``jobs`` calls at a time, each given a CPU core of
    its own to pin its process to (``core`` is None when ``jobs`` is 1: no pinning)."""
    cores = sorted(os.sched_getaffinity(0))[:jobs] if jobs > 1 else [None]
    if jobs > len(cores):
        raise SystemExit(f"--jobs {jobs}: only {len(cores)} CPUs are available to this process")
    free, lock = list(cores), threading.Lock()

    def call(item):
        with lock:
            core = free.pop()
        try:
            return fn(item, core)
        finally:
            with lock:
                free.append(core)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(cores)) as pool:
        return list(pool.map(call, items))


def load(path):
    """A saved compare.json, configuration flags back to tuples (JSON turns them into lists)."""
    with open(path) as f:
        saved = json.load(f)
    for c in saved["configurations"]:
        c["flags"] = {k: tuple(v) if isinstance(v, list) else v for k, v in c["flags"].items()}
    return saved


# -- aggregation --------------------------------------------------------------------------------------


def _median(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None and "error" not in r]
    return statistics.median(vals) if vals else None


def summarize(runs_by_key):
    """{(cfg index, system): [runs]} -> {(cfg index, system): medians or error}."""
    out = {}
    for key, runs in runs_by_key.items():
        extra = [r for r in runs if "error" not in r and r.get("extra")]  # --traced-pass runs: memory only
        ok = [r for r in runs if "error" not in r and not r.get("extra")]
        if not ok:
            out[key] = {"error": runs[0]["error"] if runs else "not run"}
            continue
        out[key] = {k: _median(ok, k) for k in ("s_per_iter", "env_steps_per_s", "peak_bytes", "peak_rss_mb",
                                                  "import_rss_mb",
                                                  "compile_s", "first_iter_s", "cpu_s_per_iter",
                                                  "cpu_env_steps_per_s")}
        out[key]["traced_peak_bytes"] = _median(ok + extra, "traced_peak_bytes")
        out[key]["reps"] = len(ok)
    return out


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    from importlib import metadata  # not imports: a child's ru_maxrss starts at its parent's RSS

    vers = [f"Python {platform.python_version()}"]
    for pkg in ("numpy", "torch", "numba"):
        try:
            vers.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            vers.append(f"{pkg} not installed")
    return f"{cpu}, {os.cpu_count()} logical cores, {mem}, {platform.system()} {platform.release()}; " + ", ".join(vers)


def _fmt(v, kind):
    if v is None:
        return "—"
    if kind == "rate":
        return f"{v:,.0f}"
    if kind == "mb":
        return f"{v / 2**20:,.1f}"
    if kind == "mib":
        return f"{v:,.0f}"
    if kind == "ratio":
        return f"{v:.3g}x"
    return f"{v:.3g}"


def _ratio(a, b):
    return a / b if a is not None and b else None


def _label(cfg):
    f = cfg["flags"]
    parts = [cfg["algo"], f["env"], f"{f['num_envs']}x{f['num_steps']}"]
    if "obs_shape" in f:
        parts.append("obs " + "x".join(map(str, f["obs_shape"])))
    parts.append(f"h{f.get('hidden', 64)}")
    if cfg["algo"] == "ppo":
        parts.append(f"{f.get('epochs', 4)}e x {f.get('minibatches', 4)}mb")
    if f.get("nstep"):
        parts.append(f"n-step {f['nstep']}")
    elif cfg["algo"] == "reinforce":
        parts.append("MC")
    if f.get("per_step") and not f.get("nstep"):
        parts.append("per-step")
    if f.get("compiled_env"):
        parts.append("compiled env")
    if f.get("memory_budget"):
        b = f["memory_budget"]
        parts.append(f"budget {b / 2**20:.0f} MiB" if b >= 2**20 else f"budget {b / 2**10:.0f} KiB")
    return " ".join(parts)


def table(cfgs, summ, meta):
    lines = [
        "# timerl vs eager baselines", "",
        f"Machine: {meta['machine']}.", "",
        f"Method: {meta['method']}", "",
        "Env-steps/s (higher is better) and peak live tensor bytes in MiB (lower is better; "
        "each system's own accounting: timerl `exe.stats['peak_bytes']`, torch storage bytes via "
        "a dispatch mode, numpy tracemalloc). Ratios are timerl / baseline: above 1x timerl is "
        "faster (steps/s) or uses MORE memory (bytes).", "",
        "`timerl traced MiB` is timerl's peak measured with the numpy baseline's instrument (tracemalloc "
        "over a second, untimed run): the runtime's accounting counts every stored array at its "
        "`nbytes`, views and broadcasts included, so it overstates the real buffers. The memory ratios "
        "use the traced figure (PyTorch's count is of real storages too).", "",
        "| configuration | timerl steps/s | numpy steps/s | torch steps/s | vs numpy | vs torch "
        "| timerl MiB | timerl traced MiB | numpy MiB | torch MiB | traced vs numpy | traced vs torch "
        "| timerl compile s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    errors, measured = [], {sys_ for _, sys_ in summ}
    for k, cfg in enumerate(cfgs):
        s = {sys_: summ.get((k, sys_), {"error": "not run"}) for sys_ in SYSTEMS}
        g = {sys_: (lambda key, d=s[sys_]: d.get(key)) for sys_ in SYSTEMS}
        for sys_ in SYSTEMS:
            if "error" in s[sys_] and sys_ in measured:  # a system left out as a whole is said in the method
                errors.append(f"- {_label(cfg)} / {sys_}: {s[sys_]['error']}")
        row = [_label(cfg)]
        row += [_fmt(g[x]("env_steps_per_s"), "rate") for x in SYSTEMS]
        row += [_fmt(_ratio(g["timerl"]("env_steps_per_s"), g[x]("env_steps_per_s")), "ratio") for x in ("numpy", "torch")]
        row += [_fmt(g["timerl"]("peak_bytes"), "mb"), _fmt(g["timerl"]("traced_peak_bytes"), "mb")]
        row += [_fmt(g[x]("peak_bytes"), "mb") for x in ("numpy", "torch")]
        row += [_fmt(_ratio(g["timerl"]("traced_peak_bytes"), g["numpy"]("peak_bytes")), "ratio"),
                _fmt(_ratio(g["timerl"]("traced_peak_bytes"), g["torch"]("peak_bytes")), "ratio")]
        row += [_fmt(g["timerl"]("compile_s"), "s")]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "The same throughput from process CPU time (`cpu_env_steps_per_s`: robust when other processes "
              "share the cores; equal to the wall-clock figure on an unloaded machine for one-thread runs):", "",
              "| configuration | timerl CPU steps/s | numpy CPU steps/s | torch CPU steps/s | vs numpy | vs torch |",
              "|---|---:|---:|---:|---:|---:|"]
    for k, cfg in enumerate(cfgs):
        s = {sys_: summ.get((k, sys_), {}) for sys_ in SYSTEMS}
        c = {x: s[x].get("cpu_env_steps_per_s") for x in SYSTEMS}
        row = [_label(cfg)] + [_fmt(c[x], "rate") for x in SYSTEMS]
        row += [_fmt(_ratio(c["timerl"], c[x]), "ratio") for x in ("numpy", "torch")]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Peak RSS (MiB, whole process incl. imports), the same above the RSS after imports (before the "
              "program or learner is built), and seconds per iteration, medians:", "",
              "| configuration | timerl RSS | numpy RSS | torch RSS | timerl above import | numpy above import | "
              "torch above import | torch / timerl above import | timerl s/iter | numpy s/iter | torch s/iter |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, cfg in enumerate(cfgs):
        s = {sys_: summ.get((k, sys_), {}) for sys_ in SYSTEMS}
        row = [_label(cfg)] + [_fmt(s[x].get("peak_rss_mb"), "mib") for x in SYSTEMS]
        above = {x: (s[x]["peak_rss_mb"] - s[x]["import_rss_mb"]) if s[x].get("import_rss_mb") is not None
                 and s[x].get("peak_rss_mb") is not None else None for x in SYSTEMS}
        row += [_fmt(above[x], "mib") for x in SYSTEMS] + [_fmt(_ratio(above["torch"], above["timerl"]), "ratio")]
        row += [_fmt(s[x].get("s_per_iter"), "s") for x in SYSTEMS]
        lines.append("| " + " | ".join(row) + " |")
    slower = []
    for k, cfg in enumerate(cfgs):
        t = summ.get((k, "timerl"), {}).get("env_steps_per_s")
        for x in ("numpy", "torch"):
            b = summ.get((k, x), {}).get("env_steps_per_s")
            if t is not None and b is not None and t < b:
                slower.append(f"- {_label(cfg)}: timerl {t:,.0f} steps/s vs {x} {b:,.0f} ({t / b:.2f}x)")
    lines += ["", "## Where timerl is slower", ""] + (slower or ["- nowhere among the measured rows"
                                                                if any(summ.get((k, "timerl"), {}).get("env_steps_per_s")
                                                                       for k in range(len(cfgs)))
                                                                else "- timerl produced no measurement (see errors)"])
    lines += peer_table(cfgs, summ)
    if errors:
        lines += ["", "## Runs that produced no number", ""] + errors
    return "\n".join(lines) + "\n"


def peer_table(cfgs, summ) -> list:
    """Lines of the JAX peer's table (rows where it ran): its steps/s and compile against timerl's."""
    rows = [k for k in range(len(cfgs)) if "env_steps_per_s" in summ.get((k, "jax"), {})]
    errors = [f"- {_label(cfgs[k])} / jax: {summ[(k, 'jax')]['error']}" for k in range(len(cfgs))
              if "error" in summ.get((k, "jax"), {})]
    if not rows and not errors:
        return []
    lines = ["", "## Against the fully jitted JAX peer", "",
             "`asv_benchmarks/baselines/jax_peer.py`: the same PPO with its environment in jax.numpy and each "
             "iteration one XLA call (PureJaxRL's style), one thread; compile is its jit before the first "
             "iteration. Its CartPole is gymnasium's dynamics in float32, not gymnasium's own env: compare it "
             "with timerl's compiled-env rows (`--compiled-env`).", "",
             "| configuration | timerl steps/s | jax steps/s | timerl / jax | timerl s/iter | jax s/iter "
             "| timerl compile s | jax compile s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k in rows:
        t, j = summ.get((k, "timerl"), {}), summ[(k, "jax")]
        lines.append("| " + " | ".join([
            _label(cfgs[k]), _fmt(t.get("env_steps_per_s"), "rate"), _fmt(j.get("env_steps_per_s"), "rate"),
            _fmt(_ratio(t.get("env_steps_per_s"), j.get("env_steps_per_s")), "ratio"),
            _fmt(t.get("s_per_iter"), "s"), _fmt(j.get("s_per_iter"), "s"),
            _fmt(t.get("compile_s"), "s"), _fmt(j.get("compile_s"), "s")]) + " |")
    return lines + ([""] + errors if errors else [])


def plots(cfgs, summ, out_dir, suffix=""):
    if missing("matplotlib"):
        print(f"no plots: {missing('matplotlib')}", file=sys.stderr)
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for group, xlabel in (("ppo_num_envs", "num_envs"), ("ppo_T", "episode length T (num_steps)"),
                          ("ppo_obs", "observation shape"), ("ppo_hidden", "hidden width")):
        idx = [k for k, c in enumerate(cfgs) if c["group"] == group]
        if group in ("ppo_T", "ppo_hidden"):  # the sweeps share the 512 x 250 h64 point
            idx += [k for k, c in enumerate(cfgs) if c["group"] == "ppo_num_envs"
                    and c["flags"]["num_envs"] == cfgs[idx[0]]["flags"]["num_envs"]] if idx else []
        if not idx:
            continue
        key = {"ppo_num_envs": "num_envs", "ppo_T": "num_steps", "ppo_hidden": "hidden"}.get(group)
        xs = (lambda c: c["flags"].get(key, 64)) if key else (lambda c: c["x"])
        idx.sort(key=lambda k: (xs(cfgs[k]) if key else k))
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for sys_ in SYSTEMS:
            pts = [(xs(cfgs[k]), summ.get((k, sys_), {})) for k in idx]
            lines = [(axes[0], "cpu_env_steps_per_s", 1, sys_, "-"), (axes[1], "peak_bytes", 2**20, sys_, "-")]
            if sys_ == "timerl":
                lines[1] = (axes[1], "peak_bytes", 2**20, "timerl (own accounting)", ":")
                lines.append((axes[1], "traced_peak_bytes", 2**20, "timerl (tracemalloc)", "-"))
            for ax, metric, scale, label, style in lines:
                p = [(x, d[metric] / scale) for x, d in pts if d.get(metric) is not None]
                if p:
                    ax.plot([str(x) for x, _ in p] if not key else [x for x, _ in p], [y for _, y in p],
                            style, marker="o", label=label, color=COLORS[sys_])
        axes[0].set_ylabel("env-steps/s (per second of process CPU time)")
        axes[1].set_ylabel("peak MiB (timerl: tracemalloc and own accounting)")
        for ax in axes:
            ax.set_xlabel(xlabel)
            if key:
                ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"PPO, trivial env: {group.split('_', 1)[1]} sweep (medians)")
        fig.tight_layout()
        path = os.path.join(out_dir, f"{group}{suffix}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    idx = [k for k, c in enumerate(cfgs) if c["group"] == "reinforce_T"]
    if idx:
        fig, ax = plt.subplots(figsize=(6, 4))
        for sys_, metric in (("timerl", "traced_peak_bytes"), ("numpy", "peak_bytes"), ("torch", "peak_bytes")):
            for kind, style in (("mc", "-"), ("n", "--")):
                p = sorted((cfgs[k]["flags"]["num_steps"], summ.get((k, sys_), {}).get(metric)) for k in idx
                           if cfgs[k]["x"].startswith(kind))
                p = [(x, y / 2**20) for x, y in p if y is not None]
                if p:
                    ax.plot(*zip(*p), style, marker="o", color=COLORS[sys_],
                            label=f"{sys_} {'MC' if kind == 'mc' else 'n-step'}")
        ax.set_xlabel("episode length T (num_steps)")
        ax.set_ylabel("peak MiB (timerl: tracemalloc; MC and n-step overlap)")
        ax.set_title("REINFORCE: Monte-Carlo vs n-step returns, memory over T")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, f"reinforce_mc_vs_nstep_memory{suffix}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    idx = [k for k, c in enumerate(cfgs) if c["group"] == "reinforce_obs"]
    if idx:  # the memory sweep over observation size: peak bytes and RSS above import, per system
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for sys_, metric in (("timerl", "traced_peak_bytes"), ("numpy", "peak_bytes"), ("torch", "peak_bytes")):
            for kind, style in (("n", "-"), ("mc", ":"), ("mc/4", "-.")):
                if kind == "mc/4" and sys_ != "timerl":
                    continue  # the baselines' plain Monte-Carlo again
                ks = [k for k in idx if cfgs[k]["x"].split()[0] == kind]
                lab = [cfgs[k]["x"].split()[1] for k in ks]
                label = f"{sys_} {({'n': 'n-step', 'mc': 'MC', 'mc/4': 'MC per-step, budget 1/4'})[kind]}"
                for ax, get in ((axes[0], lambda d: d.get(metric) and d[metric] / 2**20),
                                (axes[1], lambda d: d.get("import_rss_mb") and d["peak_rss_mb"] - d["import_rss_mb"])):
                    p = [(x, get(summ.get((k, sys_), {}))) for x, k in zip(lab, ks)]
                    p = [(x, y) for x, y in p if y]
                    if p:
                        ax.plot(*zip(*p), style, marker="o", color=COLORS[sys_], label=label)
        axes[0].set_ylabel("peak tensor MiB (tracemalloc; torch: storages)")
        axes[1].set_ylabel("peak RSS above the RSS after imports, MiB")
        for ax in axes:
            ax.set_xlabel("observation shape (64 envs x 500 steps)")
            ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle("REINFORCE memory over observation size: n-step learns while acting, MC keeps the rollout, "
                     "MC per step under a budget spills it")
        fig.tight_layout()
        path = os.path.join(out_dir, f"reinforce_obs_memory{suffix}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


BEGIN, END = "<!-- performance:begin (written by python -m asv_benchmarks.compare --readme) -->", \
    "<!-- performance:end -->"


def update_readme(md, readme, table_path):
    """Put the table (its title dropped) between README's performance markers."""
    with open(readme) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme} has no performance markers ({BEGIN} ... {END})")
    body = md.split("\n", 2)[2]
    cut, rest = body.find("The same throughput from process CPU time"), body.find("## Where timerl is slower")
    if 0 <= cut < rest:  # README keeps the main table; the CPU-time and RSS tables stay in the file
        body = body[:cut] + f"CPU-time throughput, peak RSS and seconds per iteration: `{table_path}`.\n\n" + body[rest:]
    body = body.replace("## ", "#### ")
    block = f"{BEGIN}\nFrom `{table_path}` (regenerate: `python -m asv_benchmarks.compare --readme`).\n\n{body}{END}"
    head, rest = text.split(BEGIN, 1)
    with open(readme, "w") as f:
        f.write(head + block + rest.split(END, 1)[1])


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m asv_benchmarks.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny configurations, 2 repetitions")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 3; 2 with --quick)")
    ap.add_argument("--iterations", type=int, default=None, help="iterations per run (default 4; 3 with --quick)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--only", default=None, help="comma-separated groups (cartpole_ppo, ppo_num_envs, ppo_T, "
                                                 "ppo_hidden, ppo_obs, reinforce_T)")
    ap.add_argument("--backend", default=None, help="timerl backend (default: timerl's default)")
    ap.add_argument("--timerl-threads", type=int, default=None, help="threads for timerl (default 1)")
    ap.add_argument("--compiled-env", action="store_true",
                    help="timerl steps its compiled envs (CartPole-v1, trivial: timerl.rl.compiled); by default it "
                         "steps the same host env as the eager baselines (gymnasium's, the host trivial env); "
                         "writes compare_compiled*")
    ap.add_argument("--jobs", type=int, default=1,
                    help="measurements run at once, each pinned to its own CPU core (default 1; use only on "
                         "an otherwise idle machine: the runs then share memory bandwidth and caches)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default=os.path.join(ROOT, "asv_benchmarks", "results"))
    ap.add_argument("--from-json", default=None, help="re-render the table and plots from a compare.json")
    ap.add_argument("--readme", action="store_true",
                    help="also replace the block between the performance markers of README.md with the table")
    ap.add_argument("--merge", action="store_true",
                    help="keep the saved runs of systems not in --systems (e.g. add timerl to measured baselines; "
                         "those runs are then not interleaved with the saved ones)")
    ap.add_argument("--traced-pass", action="store_true",
                    help="run timerl once more per configuration with --traced-memory and add only its "
                         "traced_peak_bytes to the saved compare.json (its timings are not used)")
    ns = ap.parse_args(argv)
    suffix = ("_compiled" if ns.compiled_env else "") + ("_quick" if ns.quick else "")
    os.makedirs(ns.out, exist_ok=True)
    if ns.traced_pass:
        saved_path = os.path.join(ns.out, f"compare{suffix}.json")
        saved = load(saved_path)
        cfgs, runs, meta = saved["configurations"], saved["runs"], saved["meta"]

        def traced(k, core):
            res = run_one("timerl", cfgs[k], ns.iterations or (3 if ns.quick else 4), memory=True,
                          timeout=ns.timeout, timerl_threads=ns.timerl_threads, backend=ns.backend, core=core)
            res.update(rep=-1, cfg=k, system_="timerl", extra="traced")
            print(f"{_label(cfgs[k])} / timerl traced: {res.get('error') or res.get('traced_peak_bytes')}",
                  flush=True)
            return res

        todo = [k for k, c in enumerate(cfgs) if not ns.only or c["group"] in ns.only.split(",")]
        runs += pinned_map(traced, todo, ns.jobs)
        if "traced-memory pass" not in meta["method"]:
            meta["method"] += (" timerl traced MiB: from a separate traced-memory pass of timerl (one process per "
                               f"configuration, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).")
        with open(saved_path, "w") as f:
            json.dump({"meta": meta, "configurations": cfgs, "runs": runs}, f, indent=1, default=list)
    elif ns.from_json:
        saved = load(ns.from_json)
        cfgs, runs, meta = saved["configurations"], saved["runs"], saved["meta"]
    else:
        reps = ns.reps or (2 if ns.quick else 3)
        iters = ns.iterations or (3 if ns.quick else 4)
        systems = [s for s in ns.systems.split(",") if s]
        unknown = sorted(set(systems) - set(ALL_SYSTEMS))
        if unknown:
            ap.error(f"--systems: unknown {', '.join(unknown)}; systems are {', '.join(ALL_SYSTEMS)}")
        skipped = [f"{s} ({missing(s)})" for s in systems if missing(s)]
        for s in skipped:
            print(f"skipping {s}", file=sys.stderr)
        systems = [s for s in systems if not missing(s)]
        if not systems:
            ap.error("no system left to measure")
        cfgs = configurations(ns.quick)
        for c in cfgs:
            c["flags"]["compiled_env"] = bool(ns.compiled_env)
        if ns.only:
            keep = set(ns.only.split(","))
            cfgs = [c for c in cfgs if c["group"] in keep]
        runs = []
        t_start = time.perf_counter()
        partial = os.path.join(ns.out, f"compare{suffix}.partial.json")  # re-render with --from-json if cut short
        meta_partial = {"machine": machine(), "method": f"partial: {reps} repetitions planned", "date":
                        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": ns.quick}
        # interleaved order: repetition r runs every configuration, systems rotated by r
        tasks = [(r, k, sys_) for r in range(reps) for k in range(len(cfgs))
                 for sys_ in systems[r % len(systems):] + systems[:r % len(systems)]
                 if sys_ not in PEERS or cfgs[k]["algo"] == "ppo"]  # the JAX peer is a PPO
        lock = threading.Lock()

        def measure(task, core):
            r, k, sys_ = task
            # peak_bytes is deterministic per system: the baselines' instrumented pass runs in rep 0
            res = run_one(sys_, cfgs[k], iters, memory=(r == 0), timeout=ns.timeout,
                          timerl_threads=ns.timerl_threads, backend=ns.backend, core=core)
            res.update(rep=r, cfg=k, system_=sys_)
            with lock:
                runs.append(res)
                msg = res.get("error") or f"{res['env_steps_per_s']:,.0f} steps/s"
                print(f"[rep {r} {time.perf_counter() - t_start:7.1f}s] {_label(cfgs[k])} / {sys_}: {msg}",
                      flush=True)
                with open(partial, "w") as f:
                    json.dump({"meta": meta_partial, "configurations": cfgs, "runs": runs}, f, default=list)

        pinned_map(measure, tasks, ns.jobs)
        runs.sort(key=lambda res: (res["rep"], res["cfg"], ALL_SYSTEMS.index(res["system_"])))
        meta = {
            "machine": machine(),
            "method": (f"{reps} interleaved repetitions x {iters} iterations per run, each run a fresh process; "
                       "steps/s = num_envs x num_steps / median seconds of iterations 2..N; medians over "
                       "repetitions; all systems pinned to one thread"
                       + (f"; {ns.jobs} measurements at once, each process pinned to its own core"
                          if ns.jobs > 1 else "")
                       + (f" (timerl: {ns.timerl_threads})" if ns.timerl_threads else "")
                       + "; timerl backend: " + (ns.backend or "default") + "; baseline peak bytes measured "
                       "in repetition 0 (instrumented pass over construction + 2 iterations)."
                       + (f" Not measured: {'; '.join(skipped)}." if skipped else "")),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "quick": ns.quick,
        }
        saved_path = os.path.join(ns.out, f"compare{suffix}.json")
        if ns.merge and os.path.exists(saved_path):
            saved = load(saved_path)
            labels = [_label(c) for c in cfgs]
            for res in saved["runs"]:
                old = saved["configurations"][res["cfg"]]
                if res["system_"] not in systems and _label(old) in labels:
                    runs.append(dict(res, cfg=labels.index(_label(old))))
            meta["method"] += (" Merged: runs of " + ", ".join(sorted({r["system_"] for r in runs} - set(systems)))
                               + f" from {saved['meta']['date']} (not interleaved with this run's).")
        with open(saved_path, "w") as f:
            json.dump({"meta": meta, "configurations": cfgs, "runs": runs}, f, indent=1, default=list)
    by_key = {}
    for res in runs:
        by_key.setdefault((res["cfg"], res["system_"]), []).append(res)
    summ = summarize(by_key)
    md = table(cfgs, summ, meta) + f"\nMeasured {meta['date']}.\n"
    path = os.path.join(ns.out, f"compare{suffix}.md")
    with open(path, "w") as f:
        f.write(md)
    written = plots(cfgs, summ, ns.out, suffix)
    if ns.readme:
        update_readme(md, os.path.join(ROOT, "README.md"), os.path.relpath(path, ROOT))
        written.append("README.md")
    print(md)
    print("wrote", path, *written, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
