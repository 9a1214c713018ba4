"""The one configuration object of timerl, backed by environment variables.

    TIMERL_DEBUG=1   dump generated kernel source and schedule stages
    TIMERL_CHECK=1   instrument runs: every read after its write and before its free;
                     verify the PDG after every pass
    TIMERL_VERIFY=1  verify the PDG after every pass only (the test suite sets it)
    TIMERL_COMPILE_WORKERS=N  processes compiling new numba kernels (0: one per core)
    TIMERL_BLAS_THREADS=N     threads numpy's OpenBLAS uses while a program runs (default 1;
                              0: leave OpenBLAS's own setting)
    TIMERL_COMPILE_LOOPS=0    interpret every loop of the schedule (default 1: loops of statement
                              kernels run as numba functions on the numba backend)
    TIMERL_SPILL_DIR=path     where runs that spill under a memory_budget make their
                              timerl-spill-* directory (default: the system's temporary directory)

Override temporarily with ``with timerl.config.override(check=True): ...``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() not in ("", "0", "false", "no")


@dataclasses.dataclass
class Config:
    """timerl's settings (the one object is ``timerl.config.config``), read from the environment
    when timerl is imported; change them for a block with :func:`override`."""

    debug: bool = dataclasses.field(default_factory=lambda: _flag("TIMERL_DEBUG"))
    """TIMERL_DEBUG: dump generated kernel source and schedule stages"""
    check: bool = dataclasses.field(default_factory=lambda: _flag("TIMERL_CHECK"))
    """TIMERL_CHECK: compile instrumented runs (every read after its write and before its free)
    and verify the PDG after every pass"""
    verify: bool = dataclasses.field(default_factory=lambda: _flag("TIMERL_VERIFY"))
    """TIMERL_VERIFY: verify the PDG after every pass, without instrumenting runs (the tests set it)"""
    cache_dir: str = dataclasses.field(
        default_factory=lambda: os.environ.get(
            "TIMERL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "timerl")
        )
    )
    """TIMERL_CACHE_DIR: where compiled kernels are cached (default ~/.cache/timerl)"""
    compile_workers: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("TIMERL_COMPILE_WORKERS", "0") or 0))
    """TIMERL_COMPILE_WORKERS: processes compiling new numba kernels at compile (0: one per core; 1: none)"""
    blas_threads: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("TIMERL_BLAS_THREADS", "1") or 0))
    """TIMERL_BLAS_THREADS: threads numpy's OpenBLAS (numpy's ``matmul``, the kernels' ``cblas_?gemm``)
    uses while ``exe.run()`` runs, restored after it (default 1: on the CI machine's 2 cores its own
    threading made the paper-setting PPO about 1.4x slower and doubled CartPole PPO's CPU time, its
    second thread spinning; :func:`timerl.kernels.blas.set_threads`); 0: leave its setting alone"""
    compile_loops: bool = dataclasses.field(
        default_factory=lambda: os.environ.get("TIMERL_COMPILE_LOOPS", "1").lower() not in ("", "0", "false", "no"))
    """TIMERL_COMPILE_LOOPS: on the numba backend, render each loop of the schedule whose statements are all
    statement kernels (an acting loop over ``t``) as one numba function instead of a Python loop (default 1;
    :mod:`timerl.runtime.loops`); 0: every loop interpreted"""
    loop_lines: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("TIMERL_LOOP_LINES", "0") or 0))
    """TIMERL_LOOP_LINES: the longest loop body (in lines of generated code) compiled as one numba
    function (0: the default, 800). numba's compile time grows faster than a function's length: PPO's
    learner loop over its updates (1,734 lines on CartPole) compiles in about 65 s on the CI machine
    from an empty cache, once per machine, program and bounds (a loop function has the bounds in its
    source), and then runs CartPole PPO 1.22x faster (8.3 against 10.1 ms an iteration)"""
    spill_dir: str = dataclasses.field(default_factory=lambda: os.environ.get("TIMERL_SPILL_DIR", ""))
    """TIMERL_SPILL_DIR: the directory in which a run that spills to disk makes its own timerl-spill-*
    directory, removed when the run ends (empty: the system's temporary directory)"""


config = Config()


@contextlib.contextmanager
def override(**kw):
    """Set configuration values inside a ``with`` block and restore them after it.

        with timerl.config.override(check=True):
            exe = prog.compile(bounds={"T": 4})

    An unknown setting is an ``AttributeError``. Settings: ``debug``, ``check``, ``verify``, ``cache_dir``,
    ``compile_workers``, ``compile_loops``, ``loop_lines``, ``spill_dir``.
    """
    old = {k: getattr(config, k) for k in kw}
    for k, v in kw.items():
        if not hasattr(config, k):
            raise AttributeError(f"timerl.config has no setting {k!r}")
        setattr(config, k, v)
    try:
        yield config
    finally:
        for k, v in old.items():
            setattr(config, k, v)
