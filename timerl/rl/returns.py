"""Returns with done masks, written as recurrent-tensor code along one dim (default: the last).

``done[t]`` true means the episode ended at step t: nothing is bootstrapped through it.

- ``discounted_returns``: the backward recurrence ``G_t = r_t + γ (1 - done_t) G_{t+1}``, ``G_T = 0``.
- ``nstep_returns``: a windowed slice ``r[t:min(t + n, T)]`` per point (no recurrence), so
  the scheduler can compute it while acting, holding O(n) points.
- ``gae``: ``δ_t = r_t + γ (1 - done_t) V_{t+1} - V_t``, ``A_t = δ_t + γ λ (1 - done_t) A_{t+1}``.

    G = tl.rl.discounted_returns(r, done, gamma=0.99)      # r, done over (i, t)
    A = tl.rl.gae(r, v, done, gamma=0.99, lam=0.95)         # v = value(o), points t = 0..T

Labels: ``discounted_returns.G``, ``gae.delta``, ``gae.adv``, ``nstep_returns.G`` (see
:func:`timerl.name_scope`).
"""

from __future__ import annotations

import sympy

from .. import api as _api  # noqa: F401  (the api package must be importable first)
from ..api import ops
from ..api.naming import labelled, named
from ..api.ops import as_tensor, cast, placeholder
from ..api.tensor import RecurrentTensor
from ..errors import ShapeError
from ..ir import expr as _expr
from ..ir.polyhedral import Model


def _dim(r: RecurrentTensor, dim):
    if dim is None:
        if not r.domain:
            raise ShapeError(f"returns: rewards {r.name!r} have no domain dim to run along")
        return r.domain[-1]
    if isinstance(dim, str):
        dim = r.prog.dim(dim)
    if dim not in r.domain:
        raise ShapeError(f"returns: dim {dim.name} is not in the domain of rewards {r.name!r} "
                         f"({', '.join(d.name for d in r.domain)})")
    return dim


def _key(domain, dim, entry):
    """An index/branch key over ``domain`` with ``entry`` at ``dim`` and the dims elsewhere."""
    return tuple(entry if d is dim else d for d in domain)


def _float(x, like: RecurrentTensor, what):
    x = as_tensor(x, prog=like.prog)
    if x.dtype.kind not in "fb":
        raise ShapeError(f"returns: {what} {x.name!r} must be float or bool, got {x.dtype}")
    return cast(x, like.dtype)


def _not_done(done, r):
    nd = 1.0 - _float(done, r, "done")
    return cast(nd, r.dtype)


def _has_point(x: RecurrentTensor, dim, k: int) -> bool:
    """Whether ``x`` has the points ``D .. D + k - 1`` along ``dim`` (beyond 0..D-1)."""
    if dim not in x.domain:
        return True  # constant along dim
    box = Model(x.prog, x.prog.pdg, {}).box(x.nid)[x.domain.index(dim)]
    if box is None:
        return True
    beyond = sympy.simplify(box[1] - dim.bound.e)
    return bool(beyond.is_number and int(beyond) >= k)


def _value_at_next(value, last_value, dim, like, name):
    """``V_{t+1}`` along ``dim``: ``value`` where it has the point, else ``last_value`` (or 0) at ``t = T - 1``."""
    value = _float(value, like, "value")
    D = dim.bound
    if _has_point(value, dim, 1):
        return value[_key(value.domain, dim, dim + 1)] if dim in value.domain else value
    dom = like.prog.sort_domain(list(like.domain) + list(value.domain))
    vn = placeholder(value.shape, like.dtype, dom, name=name)
    tail = 0.0 if last_value is None else _float(last_value, like, "last_value")
    if last_value is not None and dim in tail.domain:
        raise ShapeError(f"returns: last_value {tail.name!r} must not have dim {dim.name} (it is the value at {D})")
    vn[_key(dom, dim, D - 1)] = tail
    vn[_key(dom, dim, dim)] = value[_key(value.domain, dim, dim + 1)]
    return vn


@labelled("discounted_returns")
def discounted_returns(r, done, gamma, dim=None) -> RecurrentTensor:
    """``G_t = r_t + γ (1 - done_t) G_{t+1}``, ``G_T = 0``: a backward recurrence along ``dim``."""
    r = as_tensor(r)
    d = _dim(r, dim)
    nd = _not_done(done, r)
    dom = r.prog.sort_domain(list(r.domain) + list(nd.domain))
    G = placeholder(r.shape, r.dtype, dom, name="G")
    # at T - 1, r + γ (1 - done) 0 (which is r): every step reads done_t, as it reads r_t, so the
    # part that does not read G (1 - done, γ (1 - done), with the reads of r and done) is demanded at
    # every step like the environment step itself and runs as the steps do, instead of after the
    # rollout, where it held the step's outputs, its observation included (with the views pass's
    # split_outputs; a G_next placeholder instead made isl's schedule 100x slower)
    G[_key(dom, d, d.bound - 1)] = r + gamma * nd * 0.0
    G[_key(dom, d, d)] = r + gamma * nd * G[_key(dom, d, d + 1)]
    return G


@labelled("gae")
def gae(r, value, done, gamma, lam, last_value=None, dim=None) -> RecurrentTensor:
    """Generalized advantage estimation along ``dim`` (see the module docstring).

    ``V_T`` is ``value`` at ``T`` when ``value`` has that point (e.g. the critic run on
    ``o`` with points ``0..T``), else ``last_value``, else 0.
    """
    r = as_tensor(r)
    d = _dim(r, dim)
    nd = _not_done(done, r)
    v = _float(value, r, "value")
    v_next = _value_at_next(v, last_value, d, r, "v_next")
    delta = named(r + gamma * nd * v_next - v, "delta")
    dom = r.prog.sort_domain(list(r.domain) + list(delta.domain))
    A = placeholder(delta.shape, r.dtype, dom, name="adv")
    A[_key(dom, d, d.bound - 1)] = delta
    A[_key(dom, d, d)] = delta + (gamma * lam) * nd * A[_key(dom, d, d + 1)]
    return A


@labelled("nstep_returns")
def nstep_returns(r, done, n, gamma, value=None, last_value=None, dim=None) -> RecurrentTensor:
    """``G_t = Σ_{j=t}^{m-1} γ^{j-t} a_j r_j + γ^{m-t} a_m V_m``, ``m = min(t + n, T)``.

    ``a_j = Π_{t <= l < j} (1 - done_l)``; ``V_m`` is ``value`` at ``m`` where it has the
    point, else ``last_value`` when ``m == T``, else 0. Written as a window
    ``r[t:min(t + n, T)]`` per point (no recurrence).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ShapeError(f"nstep_returns: n must be an int >= 1, got {n!r}")
    r = as_tensor(r)
    d = _dim(r, dim)
    D = d.bound
    done = _float(done, r, "done")
    stop = _expr.min(d + n, D)
    win = _key(r.domain, d, slice(d, stop))
    r_w = r[win]                                             # (len,) + S, len = m - t
    if d not in done.domain:
        raise ShapeError(f"nstep_returns: done {done.name!r} must have dim {d.name}")
    done_w = done[_key(done.domain, d, slice(d, stop))]
    ended_before = done_w.cumsum(0) - done_w                 # dones at t <= l < j inside the window
    alive = cast(ended_before == 0.0, r.dtype)               # a_j
    G = (alive * r_w).discounted_sum(gamma, axis=0)
    alive_m = cast(done_w.sum(axis=0) == 0.0, r.dtype)        # a_m
    if value is None and last_value is None:
        return named(G, "G")
    length = (r_w * 0.0 + 1.0).sum(axis=0)                   # m - t, per element
    disc = ops.binary("pow", gamma, length)                   # γ^{m-t}
    v_m = _value_at(value, last_value, d, n, r)
    return named(G + disc * alive_m * v_m, "G")


def _value_at(value, last_value, d, n, like):
    """``V_m``, ``m = min(t + n, T)``: ``value`` at m where it has the point, else ``last_value`` at T, else 0."""
    D = d.bound
    if value is not None:
        value = _float(value, like, "value")
        if d not in value.domain:
            raise ShapeError(f"nstep_returns: value {value.name!r} must have dim {d.name}")
        if _has_point(value, d, 1):
            return value[_key(value.domain, d, _expr.min(d + n, D))]
    dom = like.prog.sort_domain(list(like.domain) + (list(value.domain) if value is not None else []))
    shape = value.shape if value is not None else like.shape
    vm = placeholder(shape, like.dtype, dom, name="v_m")
    vm[d + n < D] = value[_key(value.domain, d, d + n)] if value is not None else 0.0
    if last_value is not None:
        tail = _float(last_value, like, "last_value")
        if d in tail.domain:
            raise ShapeError(f"nstep_returns: last_value {tail.name!r} must not have dim {d.name}")
        vm[True] = tail
    else:
        vm[True] = 0.0
    return vm
