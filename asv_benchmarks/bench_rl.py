"""asv benchmarks: PPO and REINFORCE, timerl against the eager baselines, small and medium.

Sizes (the issue's configurations):
  * small:  CartPole-v1, 8 envs x 128 steps, PPO 4 epochs x 4 minibatches, 2 x 64 tanh MLP;
  * medium: trivial env, obs 3x4x4, 512 envs x 250 steps, 2 x 64 MLP, one full-batch update.
Every benchmark runs ``ITERS`` iterations (rollout + update each) per call:
  * ``time_iterations``: wall time of ``ITERS`` iterations, after a warm-up call in setup
    (timerl: one ``exe.run()`` of an executable compiled for ``ITERS`` iterations, its
    kernels already JIT-compiled by the warm-up run; baselines: ``ITERS`` calls of
    ``learner.iteration()``);
  * ``peakmem_iterations``: asv's peak RSS of the benchmark process (setup included);
  * ``track_peak_bytes``: the system's own account of peak live tensor bytes (timerl:
    ``exe.stats["peak_bytes"]``; baselines: see asv_benchmarks/baselines/*);
  * ``CompileRL.track_compile_s`` (timerl): building and compiling the program.
Baselines run single-threaded (set OMP_NUM_THREADS=1 etc. for the asv process, see README).

Knobs (environment variables, read at import): ``TIMERL_BENCH_SYSTEMS`` (comma-separated
subset of timerl,numpy,torch; default all) and ``TIMERL_BENCH_BACKEND`` (timerl's backend;
default timerl's default). A baseline whose package is not installed (torch comes with the
``bench`` extra only) is skipped with asv's "skipped" message saying what to install; a
timerl program that fails to build or run fails its benchmark in asv's report (never
skipped silently).
"""

from __future__ import annotations

import os
import time

ITERS = 2
KNOWN_SYSTEMS = ("timerl", "numpy", "torch")
SYSTEMS = [s.strip() for s in os.environ.get("TIMERL_BENCH_SYSTEMS", ",".join(KNOWN_SYSTEMS)).split(",") if s.strip()]
if set(SYSTEMS) - set(KNOWN_SYSTEMS):
    raise ValueError(f"TIMERL_BENCH_SYSTEMS={','.join(SYSTEMS)}: systems are {', '.join(KNOWN_SYSTEMS)}")
BACKEND = os.environ.get("TIMERL_BENCH_BACKEND") or None
SIZES = {
    "small": {"env": "CartPole-v1", "num_envs": 8, "num_steps": 128, "epochs": 4, "minibatches": 4},
    "medium": {"env": "trivial", "obs_shape": (3, 4, 4), "num_envs": 512, "num_steps": 250,
               "epochs": 1, "minibatches": 1},
}


def timerl_ready():
    """Why timerl's RL builders cannot run yet, or None."""
    import timerl as tl

    missing = [m for m in ("nn", "optim", "distributions") if not hasattr(tl, m)]
    return f"timerl has no {', '.join('tl.' + m for m in missing)} yet" if missing else None


def flags_for(algo, size):
    f = dict(SIZES[size])
    if algo == "reinforce":
        f.pop("epochs"), f.pop("minibatches")
    return f


class Runner:
    """``ITERS`` iterations of one algorithm on one system: ``run()``; memory: ``peak_bytes()``."""

    def __init__(self, system, algo, size):
        self.system, self.algo, self.flags = system, algo, flags_for(algo, size)
        if system == "timerl":
            reason = timerl_ready()
            if reason:
                raise NotImplementedError(reason)
            import importlib

            build = getattr(importlib.import_module(f"timerl.rl.{algo}"), algo)
            n = self.flags["num_envs"] * self.flags["num_steps"]
            t0 = time.perf_counter()
            backend = {"backend": BACKEND} if BACKEND else {}
            self.exe = build(total_steps=ITERS * n, **self.flags, **backend)
            self.compile_s = time.perf_counter() - t0
        else:
            self.module, self.args = _baseline(system, algo, self.flags)
            self.learner = self.module.LEARNERS[algo](self.args)

    def run(self):
        if self.system == "timerl":
            self.exe.run()
        else:
            for _ in range(ITERS):
                self.learner.iteration()

    def peak_bytes(self):
        if self.system == "timerl":
            self.exe.run()
            return self.exe.stats["peak_bytes"]
        return self.module.measure_peak(lambda: self.module.LEARNERS[self.algo](self.args), ITERS)


def _baseline(system, algo, flags):
    import dataclasses
    import importlib

    from asv_benchmarks.baselines.common import Args

    module = importlib.import_module(f"asv_benchmarks.baselines.{system}_eager")
    if getattr(module, "MISSING", None):
        raise NotImplementedError(f"{system} baseline: {module.MISSING}")  # asv: skipped, with this message
    keys = {f.name for f in dataclasses.fields(Args)}
    return module, Args(iterations=ITERS, **{k: v for k, v in flags.items() if k in keys})


class _Algo:
    params = (SYSTEMS, list(SIZES))
    param_names = ["system", "size"]
    algo = ""
    timeout = 300

    def setup(self, system, size):
        self.runner = Runner(system, self.algo, size)
        self.runner.run()  # warm-up: JIT, caches, first-iteration effects

    def time_iterations(self, system, size):
        self.runner.run()

    def peakmem_iterations(self, system, size):
        self.runner.run()

    def track_peak_bytes(self, system, size):
        return self.runner.peak_bytes()

    track_peak_bytes.unit = "bytes"


class PPO(_Algo):
    algo = "ppo"


class Reinforce(_Algo):
    algo = "reinforce"


class CompileRL:
    """timerl only: seconds to build and compile the whole PPO / REINFORCE program."""

    params = (["ppo", "reinforce"], list(SIZES))
    param_names = ["algo", "size"]
    timeout = 300

    def setup(self, algo, size):
        if "timerl" not in SYSTEMS:
            raise NotImplementedError("TIMERL_BENCH_SYSTEMS excludes timerl")
        self.runner = Runner("timerl", algo, size)

    def track_compile_s(self, algo, size):
        return self.runner.compile_s

    track_compile_s.unit = "seconds"
