"""Run a generated program on the reference executor and on every backend and pass switch.

``CONFIGS`` lists ``(backend, compile keywords)``: each backend with its defaults, with
each pass of ``timerl.passes`` switched off in turn (new passes are picked up by name),
with each of its options (``timerl.passes.OPTION_DEFAULTS``) switched from its default in turn,
in checking mode (every read and free instrumented), and the first backend under the
least ``memory_budget`` the compiler says it can meet. ``differences`` returns one
line per configuration whose sinks differ from the reference executor's, or that fails
where the reference executor does not.
"""

from __future__ import annotations

import re
import traceback

import numpy as np
from programs.collect import Collect

import timerl as tl
from timerl.passes import OPTION_DEFAULTS, PIPELINE

from .gen import Desc, build

BACKENDS = ("numpy", "numba")  # every pass switch (cuda: python -m tests.fuzz --backends cuda)
PASSES = tuple(n for n, _ in PIPELINE)

# float tolerance per dtype, relative to the value and to the magnitude bound of the sink
# (one op's rounding in float32 is ~6e-8 of its operands' size; programs are a few ops deep);
# a float64 value computed from float32 values gets float32's: numba's float32 tanh/exp
# (libm) and numpy's (SIMD) differ in the last bit
TOL = {"float32": 2e-5, "float64": 1e-11, "float16": 2e-3}


def configs(backends=BACKENDS):
    out = []
    for be in backends:
        out.append((be, {}))
        out += [(be, {"passes": {p: False}}) for p in PASSES]
        out += [(be, {"passes": {o: not on}}) for o, on in OPTION_DEFAULTS.items()]
        out.append((be, {"check": True}))
    out.append((backends[0], {"memory_budget": "least"}))
    return out


CONFIGS = configs()


def label(backend, kw) -> str:
    return backend + "".join(f" {k}={v!r}" for k, v in sorted(kw.items()))


def run(desc: Desc, backend="reference", **kw):
    """Build ``desc`` afresh, compile on ``backend``, run once; ``(collect, mags)``.

    ``memory_budget="least"``: the least budget the compiler says it can meet (it picks the
    plan of least planned peak among its alternatives); the run must stay under it."""
    if kw.get("memory_budget") == "least":
        kw = {**kw, "memory_budget": least_budget(desc, backend, kw)}
    c = Collect()
    prog, mags = build(desc, c)
    exe = prog.compile(desc.bounds, backend=backend, seed=desc.seed, **kw).run()
    budget = kw.get("memory_budget")
    if budget is not None and exe.stats["peak_bytes"] > budget:
        raise AssertionError(f"peak_bytes {exe.stats['peak_bytes']} exceeds memory_budget={budget}")
    return c, mags


def least_budget(desc, backend, kw) -> int:
    prog, _ = build(desc, Collect())
    try:
        prog.compile(desc.bounds, backend=backend, seed=desc.seed, **{**kw, "memory_budget": 1})
    except tl.CompileError as e:
        m = re.search(r"memory_budget>=(\d+)", str(e))
        if m:
            return int(m.group(1))
        raise
    return 1


def compare(got: dict, want: dict, mags: dict, limit=3) -> list[str]:
    """What differs between two runs' sinks: points, dtypes, shapes, values (floats within TOL).

    ``mags[sink] = (magnitude bound, computed from float32)`` scales the tolerance."""
    out = []
    if sorted(got) != sorted(want):
        return [f"sinks differ: {sorted(got)} vs {sorted(want)}"]
    for sink in sorted(want):
        g, w = got[sink], want[sink]
        if sorted(g) != sorted(w):
            out.append(f"{sink}: points differ: {sorted(g)} vs reference {sorted(w)}")
            continue
        for pt in sorted(w):
            gv, wv = (g[pt], w[pt]) if isinstance(w[pt], tuple) else ((g[pt],), (w[pt],))
            for k, (a, b) in enumerate(zip(gv, wv)):
                where = f"{sink}{'' if len(wv) == 1 else f'[{k}]'} at {pt}"
                msg = _differ(np.asarray(a), np.asarray(b), *mags.get(sink, (1.0, False)))
                if msg:
                    out.append(f"{where}: {msg}")
            if len(out) >= limit:
                return out
    return out


def _differ(a, b, mag, lowp):
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs reference {b.dtype}"
    if a.shape != b.shape:
        return f"shape {a.shape} vs reference {b.shape}"
    if a.dtype.kind in "fc":
        tol = max(TOL.get(a.dtype.name, 1e-5), TOL["float32"] if lowp else 0.0)
        ok = np.isclose(a, b, rtol=tol, atol=tol * max(1.0, mag), equal_nan=True)
        if not ok.all():
            return f"got {a.tolist()} vs reference {b.tolist()} (rtol=atol/{max(1.0, mag):g}={tol})"
    elif not np.array_equal(a, b):
        return f"got {a.tolist()} vs reference {b.tolist()}"
    return None


def _error(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    at = next((f"{f.filename.split('/timerl/')[-1]}:{f.lineno}" for f in reversed(tb) if "/timerl/" in f.filename), "")
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} [{at}]"


def differences(desc: Desc, configs=CONFIGS) -> list[str]:
    """``"<config>: <problem>"`` for each configuration that disagrees with the reference executor."""
    try:
        want, mags = run(desc, "reference")
    except Exception as e:  # a generated program is well-formed: the oracle must accept it
        return [f"reference: {_error(e)}"]
    out = []
    for backend, kw in configs:
        try:
            got, _ = run(desc, backend, **kw)
        except Exception as e:
            out.append(f"{label(backend, kw)}: {_error(e)}")
            continue
        out += [f"{label(backend, kw)}: {m}" for m in compare(got, want, mags)]
    return out



def shrink(desc: Desc, configs=CONFIGS, log=print) -> Desc:
    """A smaller program that still differs on one of ``configs`` (greedy: fewer sinks, then
    records replaced by plain ``tl.tensor`` sources of the same domain, shape and dtype)."""
    from .gen import Builder, Record

    def kind(diffs):  # which configurations fail, and how (the error type, or values)
        return {m.split(": ")[0] + (": " + m.split(": ")[1] if "Error" in m or "Fault" in m else "") for m in diffs}

    want = kind(differences(desc, configs))

    def fails(d):
        try:
            build(d, Collect())
        except Exception:
            return False
        return bool(kind(differences(d, configs)) & want)

    def with_(records=None, sinks=None):
        return Desc(desc.dims, desc.bounds, list(records if records is not None else desc.records),
                    list(sinks if sinks is not None else desc.sinks), desc.seed)

    k = 0
    while k < len(desc.sinks) and len(desc.sinks) > 1:
        d = with_(sinks=desc.sinks[:k] + desc.sinks[k + 1:])
        if fails(d):
            desc = d
        else:
            k += 1
    last = max(int(n[1:]) for s in desc.sinks for n in s)
    desc = with_(records=desc.records[:last + 1])
    b = Builder(desc.dims, desc.bounds)
    values = [b.add(r) for r in desc.records]
    for k in reversed(range(len(desc.records))):
        v = values[k]
        if not all(isinstance(s, int) for s in v.shape):
            continue
        full = tuple(desc.bounds[x.upper()] for x in v.domain) + v.shape
        dom = f"({''.join(x + ', ' for x in v.domain)})"
        dt = v.dtype if v.dtype != "bool" else "float32"
        line = f"{v.name} = tl.tensor(data({k}, {full}, {dt!r}), domain={dom})"
        if v.dtype == "bool":
            line += " > 0"
        if desc.records[k].lines == (line,):
            continue
        recs = list(desc.records)
        recs[k] = Record((line,), 3.0, True)
        d = with_(records=recs)
        if fails(d):
            desc = d
            log(f"# shrink: v{k} replaced by a source")
    small = compact(desc)
    return small if fails(small) else desc


_REF = re.compile(r"\b([vp])(\d+)\b")


def compact(desc: Desc) -> Desc:
    """``desc`` without the records no sink needs, values renumbered (random streams shift too)."""
    from .gen import Record

    need = {int(n[1:]) for s in desc.sinks for n in s}
    for k in reversed(range(len(desc.records))):
        if k in need:
            need |= {int(m.group(2)) for ln in desc.records[k].lines for m in _REF.finditer(ln)}
    new = {old: i for i, old in enumerate(sorted(need))}

    def ren(ln):
        return _REF.sub(lambda m: f"{m.group(1)}{new[int(m.group(2))]}", ln)

    recs = [Record(tuple(ren(ln) for ln in r.lines), r.mag, r.pool) for k, r in enumerate(desc.records) if k in need]
    sinks = [tuple(f"v{new[int(n[1:])]}" for n in s) for s in desc.sinks]
    return Desc(desc.dims, desc.bounds, recs, sinks, desc.seed)


__all__ = ["CONFIGS", "PASSES", "configs", "label", "run", "compare", "differences", "shrink", "compact"]
