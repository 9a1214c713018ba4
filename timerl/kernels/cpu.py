"""Loading numba kernels: the on-disk kernel cache and compilation at compile time.

Generated kernel sources (:mod:`timerl.kernels.statement`) are written to the kernel cache
(:mod:`timerl.kernels.cache`, named by the hash of the source) and compiled with numba's
on-disk cache (``cache=True``), so a program compiled again, in any process, loads its
kernels. :func:`prewarm` compiles a program's new kernels in worker processes, one per core;
:func:`load` compiles (or loads) one kernel for its one signature ``SIG`` and then disables
the dispatcher's compiling, so nothing compiles mid-run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile

from ..config import config
from . import cache

_loaded: dict = {}


def _hash(src: str) -> str:
    return hashlib.sha1(src.encode()).hexdigest()[:16]


def module_name(src: str) -> str:
    """The module name the kernel of this source is imported as (once loaded, in ``sys.modules``)."""
    return f"timerl_kernel_{_hash(src)}"


def _write(src: str, prefix: str = "k_") -> tuple[str, str]:
    """(hash, path) of the kernel file of this source, written to the cache if new."""
    h = _hash(src)
    d = cache.kernel_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{prefix}{h}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f"{prefix}{h}.", suffix=".tmp")  # unique per process and thread
        with os.fdopen(fd, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    return h, path


def _import(h: str, path: str, name: str = "timerl_kernel_"):
    spec = importlib.util.spec_from_file_location(f"{name}{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # numba's cache pickles refer to the module by name
    spec.loader.exec_module(mod)
    return mod


def _compile_file(job):
    mod = _import(*job)
    mod.kernel.compile(mod.SIG)  # writes numba's on-disk cache
    return job[0]


def _compiled(h: str, path: str) -> bool:
    """Whether numba's on-disk cache holds this kernel (its index file next to the source)."""
    d = os.path.join(os.path.dirname(path), "__pycache__")
    return os.path.isdir(d) and any(f.startswith(f"k_{h}.") and f.endswith(".nbi") for f in os.listdir(d))


def prewarm(srcs) -> int:
    """Compile the kernels of ``srcs`` not yet in the on-disk cache in worker processes, one per
    core (numba compiles one kernel at a time per process, 0.1-5 s each); :func:`load` then
    loads them. Returns how many were compiled. With one core or one new kernel: nothing (load
    compiles)."""
    jobs = {}
    for src in srcs:
        h, path = _write(src)
        if h not in _loaded and h not in jobs and not _compiled(h, path):
            jobs[h] = path
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    workers = min(cores, len(jobs), config.compile_workers or cores)
    if workers < 2:
        return 0
    import multiprocessing

    # fork: the workers inherit the imported numba (spawn would import it again, about a second)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_compile_file, sorted(jobs.items(), key=lambda j: -os.path.getsize(j[1])), chunksize=1)
    return len(jobs)


def load_module(src: str, prefix: str, name: str):
    """The module of a generated source other than a kernel's (a compiled loop: ``l_<hash>.py``),
    written to the kernel cache and imported as ``<name><hash>``."""
    h, path = _write(src, prefix)
    return sys.modules.get(f"{name}{h}") or _import(h, path, name)


def load(src: str):
    """Compile (or fetch from the on-disk cache) the kernel of this source."""
    h = _hash(src)
    if h in _loaded:
        return _loaded[h]
    h, path = _write(src)
    if config.debug:
        print(f"# timerl kernel {path}\n{src}")
    mod = _import(h, path)
    # compile (or load from the cache) now, at compile time, not at the first call mid-run
    mod.kernel.compile(mod.SIG)
    # C-contiguous and strided arrays then share this one compiled signature (numba casts the
    # layout) instead of compiling another specialization at their first call, mid-run
    mod.kernel.disable_compile()
    drop_linking_ir(mod.kernel)
    _loaded[h] = mod.kernel
    return mod.kernel


def drop_linking_ir(dispatcher):
    """Free the LLVM module numba keeps beside a compiled function for linking it into other numba
    functions.

    Loaded from the on-disk cache, a function's library holds its machine code in the JIT and also
    its whole LLVM IR, parsed from the cached bitcode, for the case that another jitted function calls
    it by name and inlines it. timerl never does: its compiled loops call kernels through their
    address (:mod:`timerl.runtime.jhelp`) and the interpreter through the dispatcher. Measured on
    n-step REINFORCE at obs 3x64x64 (34 kernels, 1.5 MB of bitcode): that IR held 14 MB. The machine
    code, the symbol table (``get_pointer_to_function``) and the dispatcher are untouched."""
    for cres in dispatcher.overloads.values():
        lib = getattr(cres, "library", None)
        if getattr(lib, "_shared_module", None) is not None:  # numba's private field: left alone if renamed
            lib._shared_module = None


_malloc_tuned = False


def tune_malloc() -> bool:
    """Keep freed heap memory for the next kernel call instead of returning it to the OS (glibc).

    A statement kernel allocates its temporaries (tens of 64 KiB arrays per learner step) and frees
    them on return; glibc then trims the heap top, and the next call page-faults the same memory
    in again: measured, a CartPole PPO minibatch kernel took 593 us with the default settings and
    376 us with trimming off. Larger programs pay more: the paper-setting PPO's learner frees about
    300 MiB of temporaries an iteration (with a 256 MiB trim threshold: 65k page faults an
    iteration, 0.41 s against 0.30 s without trimming), and PPO at observations 3x64x64 allocates
    blocks above any mmap threshold below 2 GiB (mmap'ed and unmapped every iteration: faulting in
    fresh memory took 3.7 s of system time in an 8 s iteration; 4.1 s once the heap keeps it).

    Turns heap trimming off (``M_TRIM_THRESHOLD`` = -1) and serves allocations below 2 GiB from the
    heap (``M_MMAP_THRESHOLD``), once per process: the peak is unchanged, freed memory stays with the
    process (up to its peak) for the next iteration. Off with
    ``TIMERL_MALLOC_TUNE=0``; a no-op where glibc's ``mallopt`` is missing. Returns whether it applied.
    """
    global _malloc_tuned
    if _malloc_tuned or os.environ.get("TIMERL_MALLOC_TUNE", "1") in ("0", "false", "no"):
        return _malloc_tuned
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_trim_threshold, -1) == 1 and libc.mallopt(m_mmap_threshold, (1 << 31) - 1) == 1
    except (OSError, AttributeError):  # not glibc
        return False
    _malloc_tuned = ok
    return ok
