"""``timerl bench {ppo,reinforce}``: compile once, run ``iterations`` iterations, report.

    import timerl.bench
    r = timerl.bench.run_bench("ppo", iterations=5, env="CartPole-v1", num_envs=8, num_steps=128)
    r["compile_s"], r["s_per_iter"], r["env_steps_per_s"], r["peak_bytes"], r["peak_rss_mb"]

What each number is:
  * ``compile_s``: wall time of ``tl.rl.ppo(...)`` / ``tl.rl.reinforce(...)``, which build the
    program and compile it (``compile_stages`` holds ``exe.stats["compile_seconds"]``).
    Kernel JIT that happens on the first run is not in it: it lands in iteration 1.
  * ``s_per_iter``: the median of the wall times of iterations 2..N (iteration 1 alone when
    N == 1). One ``exe.run()`` runs all N iterations; iteration k's time is the time
    between the per-iteration log sink of iteration k-1 (for k = 1: the start of
    ``exe.run()``) and that of iteration k. The builders' log sink (the ``callback`` of
    ``tl.rl.ppo``/``reinforce``) fires once per iteration, after the iteration's last
    loss; what runs after the last sink is reported as ``tail_s``, not in any iteration.
  * ``env_steps_per_s``: ``num_envs * num_steps / s_per_iter``. ``cpu_s_per_iter`` and
    ``cpu_env_steps_per_s``: the same from process CPU time (all threads of the process),
    robust when other processes share the cores.
  * ``peak_bytes``: ``exe.stats["peak_bytes"]`` after the run, the runtime's own account of
    its peak of live bytes, counted by base buffers: an allocation costs its bytes once until
    its last reader (through its views), a view, broadcast or reshape costs nothing, and a
    statement kernel's temporaries count while it runs. ``exe.planned_peak()`` is the same
    count made without running; both agree with ``traced_peak_bytes`` within a few percent on
    the comparison rows (tests/test_memory_accounting.py holds them to 10%).
  * ``spilled_bytes``, ``swapped_bytes``, ``swap_seconds``: ``exe.stats``' swap counters, non-zero
    when ``--memory-budget`` made the compiler spill to disk (the most bytes on disk at once,
    bytes written plus read back, time writing and waiting for reads).
  * ``peak_rss_mb``: ``getrusage(RUSAGE_SELF).ru_maxrss`` after the run: the whole
    process's peak resident set (imports, compiler and run included), in MiB.
    ``import_rss_mb``: the same read before the program is built (the interpreter and the imports:
    ``peak_rss_mb - import_rss_mb`` is what compiling and running added, as the baselines report
    theirs after importing torch or numpy).
  * ``traced_peak_bytes`` (only with ``traced_memory=True`` / ``--traced-memory``): the
    ``tracemalloc`` peak over a second, untimed ``exe.run()`` of the same executable: numpy
    buffers plus the Python objects allocated meanwhile, the instrument the numpy eager
    baseline reports: real buffers, measured.

The bench runs ``total_steps = iterations * num_envs * num_steps`` (a given
``total_steps`` is replaced), so learning-rate annealing spans the benchmarked iterations.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import sys
import time

DEFAULT_ITERATIONS = 5


def _builder(algo):
    import importlib

    if algo not in ("ppo", "reinforce"):
        from .rl.common import ArgError

        raise ArgError(f"timerl bench: unknown algorithm {algo!r}; choose ppo or reinforce")
    mod = importlib.import_module(f"timerl.rl.{algo}")  # the module: tl.rl.ppo is the builder
    return getattr(mod, algo), mod.Args


def _from_namespace(ns):
    """(algo, iterations, flags) from the CLI's parsed arguments (flags given only)."""
    _, Args = _builder(ns.algo)
    flags = {f.name: getattr(ns, f.name) for f in dataclasses.fields(Args) if hasattr(ns, f.name)}
    return ns.algo, getattr(ns, "iterations", DEFAULT_ITERATIONS), flags


def run_bench(algo, iterations=DEFAULT_ITERATIONS, traced_memory=False, **flags) -> dict:
    """Compile ``algo`` ("ppo" or "reinforce") once with ``flags`` (the CLI flags as keyword
    arguments), run ``iterations`` iterations in one ``exe.run()``, return the numbers
    described in the module docstring. ``algo`` may also be the CLI's parsed namespace."""
    if isinstance(algo, argparse.Namespace):
        traced_memory = getattr(algo, "traced_memory", False)
        algo, iterations, flags = _from_namespace(algo)
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        from .rl.common import ArgError  # a ValueError the CLI reports as a usage error (exit 2)

        raise ArgError(f"--iterations must be a positive int, got {iterations!r}")
    build, Args = _builder(algo)
    defaults = Args()
    num_envs = flags.get("num_envs", defaults.num_envs)
    num_steps = flags.get("num_steps", defaults.num_steps)
    flags = dict(flags, total_steps=iterations * num_envs * num_steps)

    import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    stamps = []
    t0 = time.perf_counter()
    exe = build(callback=lambda row: stamps.append((time.perf_counter(), time.process_time())), **flags)
    compile_s = time.perf_counter() - t0

    stamps.clear()
    start = (time.perf_counter(), time.process_time())
    exe.run()
    end = time.perf_counter()
    if len(stamps) != iterations:
        raise RuntimeError(f"timerl bench: the {algo} program logged {len(stamps)} iterations, expected "
                           f"{iterations}; per-iteration times come from its log sink")
    edges = [start] + stamps
    iter_s = [b[0] - a[0] for a, b in zip(edges, edges[1:])]
    cpu_s = [b[1] - a[1] for a, b in zip(edges, edges[1:])]
    s_per_iter = statistics.median(iter_s[1:]) if iterations > 1 else iter_s[0]
    cpu_per_iter = statistics.median(cpu_s[1:]) if iterations > 1 else cpu_s[0]
    stats = dict(getattr(exe, "stats", {}) or {})
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    traced = None
    if traced_memory:
        import gc
        import tracemalloc

        gc.collect()
        tracemalloc.start()
        try:
            exe.run()
            traced = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    history = getattr(exe, "history", None)
    last = history.rows[-1] if history is not None and history.rows else {}
    return {
        "compile_s": compile_s,
        "s_per_iter": s_per_iter,
        "env_steps_per_s": num_envs * num_steps / s_per_iter,
        "peak_bytes": stats.get("peak_bytes"),
        "spilled_bytes": stats.get("spilled_bytes"),
        "swapped_bytes": stats.get("swapped_bytes"),
        "swap_seconds": stats.get("swap_seconds"),
        "peak_rss_mb": rss_mb,
        "import_rss_mb": import_rss,
        "traced_peak_bytes": traced,
        "first_iter_s": iter_s[0],
        "iter_s": iter_s,
        "cpu_s_per_iter": cpu_per_iter,
        "cpu_env_steps_per_s": num_envs * num_steps / cpu_per_iter,
        "tail_s": end - stamps[-1][0],
        "run_s": end - start[0],
        "compile_stages": stats.get("compile_seconds"),
        "peak_host_bytes": stats.get("peak_host_bytes"),
        "peak_device_bytes": stats.get("peak_device_bytes"),
        "h2d_bytes": stats.get("h2d_bytes"),
        "d2h_bytes": stats.get("d2h_bytes"),
        "kernels": stats.get("kernels"),
        "system": "timerl",
        "algo": algo,
        "backend": exe.args.backend if hasattr(exe, "args") else flags.get("backend"),
        "iterations": iterations,
        "mean_return": _finite_or_none(last.get("mean_return")),
    }


def _finite_or_none(x):
    return None if x is None or x != x else float(x)  # NaN (no finished episode yet) is not JSON


def main(argv=None):
    """``timerl bench ...`` without the ``timerl``: ``main(["ppo", "--iterations", "3", "--json"])``."""
    from .cli import main as cli_main

    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_main(["bench", *argv])


if __name__ == "__main__":
    sys.exit(main())
