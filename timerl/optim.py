"""Optimizers: the parameter update as a recurrence over the iteration dim.

``opt.step(loss)`` differentiates ``loss`` (``tl.grad``) with respect to the parameters and adds
the update as a branch of each parameter placeholder::

    p[i + 1] = update(p[i], grad of loss at i)      # parameters over (i,)

Optimizer state (Adam's moments ``m``, ``v``) are placeholders of the same shape and domain with
``m[0] = 0`` and the same kind of update branch. The update nodes are roots of the PDG
(``pdg.nodes[n]["root"] = True``): the analysis demands them at ``0 <= i < I`` even when no sink
reads the parameters.

Several updates per iteration (PPO's epochs x minibatches): create the parameters over
``(i, k)`` (``tl.nn.Linear(..., domain=(i, k))``) and call ``opt.step(loss, dim=k)`` with a
loss over ``(i, k)`` (it may read the rollout of iteration ``i``). The branches are::

    p[0, 0] = init                   # from tl.nn.Parameter
    p[i, 0] = p[i - 1, K]            # the carry: iteration i starts where i - 1 ended
    p[i, k + 1] = update(p[i, k], grad of loss at (i, k))

so ``p`` has the points ``k = 0..K`` and ``p[i, 0]`` (``module.at(k, 0)``) is the parameter used
while acting in iteration ``i``. Adam's step count is ``i * K + k + 1``.

The final parameters are ``opt.final(p)``: ``p[I]`` (or ``p[I - 1, K]``), a tensor of domain ()
to sink::

    tl.sink(opt.final(w), lambda v, point: print(v))

Learning rates are floats or tensors over the update's domain; ``linear_schedule(lr, i)`` is
CleanRL's linear annealing ``lr * (1 - i / I)``. ``max_grad_norm`` clips the global norm of all
gradients (``torch.nn.utils.clip_grad_norm_``: scale by ``min(1, max_norm / (norm + 1e-6))``).
"""

from __future__ import annotations

from .api import functions as F
from .api import ops as O
from .api.autodiff import bound_value, grad
from .api.naming import name_scope, relative
from .api.tensor import RecurrentTensor
from .errors import CompileError
from .ir.ops import Edge

__all__ = ["SGD", "Adam", "Optimizer", "linear_schedule", "final"]


def linear_schedule(lr, dim, end=0.0, dtype="float32"):
    """``lr * (1 - d / D) + end * d / D`` over ``dim`` (CleanRL's learning-rate annealing)."""
    with name_scope("linear_schedule"):
        frac = O.dim_value(dim).astype(dtype) / bound_value(dim.bound).astype(dtype)
        return lr * (1.0 - frac) + end * frac


def final(p):
    """The parameter after the last update: ``p[I]`` over ``(i,)``, ``p[I - 1, K]`` over ``(i, k)``."""
    dims = p.domain
    if p.prog.pdg.nodes[p.nid].get("update_dim") is None:
        raise CompileError(f"parameter {p.name!r} has no update yet: call opt.step(loss) first")
    with name_scope("final"):
        if len(dims) == 1:
            return p[dims[0].bound]
        return p[tuple(d.bound - 1 for d in dims[:-1]) + (dims[-1].bound,)]


def _replace_hold(p, new):
    """Replace parameter ``p``'s hold branch (``p[.., u + 1] = p``) by ``p[.., u + 1] = new``."""
    pdg = p.prog.pdg
    pos = pdg.nodes[p.nid].get("hold_branch")
    if pos is None:
        raise CompileError(f"{p.name!r} is not a tl.nn.Parameter (it has no hold branch to update)")
    (key, hold), = [(k, d["edge"]) for _, _, k, d in pdg.out_edges(p.nid, keys=True, data=True) if d["edge"].pos == pos]
    new = O.cast(new, p.dtype)
    if tuple(new.shape) != tuple(p.shape):
        new = O.broadcast_to(new, p.shape)
    extra = [d for d in new.domain if d not in p.domain]
    if extra:
        raise CompileError(f"the update of {p.name!r} has dims {', '.join(d.name for d in extra)} outside its domain")
    shift = dict(zip(p.domain, hold.shift))
    index = tuple(d.e - shift[d] for d in new.domain)
    pdg.remove_edge(p.nid, p.nid, key)
    pdg.add_dep(p.nid, new.nid, Edge(pos=pos, out=new.out, index=index, cond=hold.cond, shift=hold.shift))
    pdg.nodes[p.nid]["hold_branch"] = None


class Optimizer:
    """Base class of the optimizers: ``params``, a learning rate ``lr`` (a float or a tensor over
    the update's domain, e.g. ``linear_schedule(lr, i)``) and global-norm clipping
    (``max_grad_norm``). ``step(loss)`` adds the update recurrence; subclasses define ``update``.

    An empty ``params`` or one that is not a parameter placeholder is a :class:`tl.CompileError`.
    """

    def __init__(self, params, lr, max_grad_norm=None):
        self.params = list(params)
        if not self.params:
            raise CompileError("optimizer: no parameters to optimize")
        for p in self.params:
            if not isinstance(p, RecurrentTensor) or p.node.op.value != "merge":
                raise CompileError(f"optimizer: {getattr(p, 'name', p)!r} is not a parameter (a placeholder "
                                   "from tl.nn.Parameter or a module's parameters())")
        self.lr, self.max_grad_norm = lr, max_grad_norm
        self.prog = self.params[0].prog

    def final(self, p):
        """The parameter after its last update (see :func:`timerl.optim.final`), a tensor of domain () to sink."""
        return final(p)

    # the update recurrence ----------------------------------------------------------------
    def step(self, loss, dim=None):
        """Add ``p[.., u + 1] = update(p, grad of loss)`` for every parameter, along ``dim`` (by
        default the parameters' only dim); returns ``self``.

        ``loss`` has shape ``()`` and the parameters' domain (or less): over ``(i,)`` this is
        ``p[i + 1] = update(p[i], ∇loss[i])``; with parameters over ``(i, k)``, ``dim=k`` makes
        several updates per iteration. Calling it twice for one parameter, parameters of
        different domains, or a missing ``dim`` for 2-d parameters is a :class:`tl.CompileError`.

            opt = tl.optim.Adam(net.parameters(), lr=1e-3)
            opt.step(loss)
        """
        with self.prog, name_scope(type(self).__name__.lower()):
            u = self._update_dim(dim)
            grads = grad(loss, self.params)
            if self.max_grad_norm is not None:
                sq = None
                for g in grads:
                    s = (g * g).sum()
                    sq = s if sq is None else sq + s
                norm = F.sqrt(sq)
                scale = O.minimum(self.max_grad_norm / (norm + 1e-6), 1.0)
                grads = [g * O.cast(scale, g.dtype) for g in grads]
            self._count = self._step_count(u)
            for j, (p, g) in enumerate(zip(self.params, grads)):
                new = self.update(j, p, g)
                _replace_hold(p, new)
                self.prog.pdg.nodes[new.nid]["root"] = True
                self.prog.param_updates.append((p.nid, new.nid))
                self.prog.pdg.nodes[p.nid]["update_dim"] = u.name
        return self

    def _update_dim(self, dim):
        for p in self.params:
            if self.prog.pdg.nodes[p.nid].get("update_dim") is not None:
                raise CompileError(f"parameter {p.name!r} already has an update (opt.step was called for it)")
        doms = {tuple(p.domain) for p in self.params}
        if len(doms) != 1:
            raise CompileError("optimizer: all parameters must share one domain, got "
                               + ", ".join(str(tuple(d.name for d in x)) for x in doms))
        (dom,) = doms
        if dim is None:
            if len(dom) != 1:
                raise CompileError(f"optimizer: parameters over {tuple(d.name for d in dom)} update along an inner "
                                   "dim: call opt.step(loss, dim=k)")
            return dom[0]
        if len(dom) != 2 or dom[1] is not dim:
            raise CompileError(f"optimizer: step(dim={dim.name}) needs parameters over (i, {dim.name}), got "
                               f"{tuple(d.name for d in dom)}; create them with domain=(i, {dim.name})")
        return dim

    def _step_count(self, u):
        """1 for the first update, counting over the outer dim too."""
        dom = self.params[0].domain
        n = O.dim_value(u) + 1
        if len(dom) == 2:
            n = n + O.dim_value(dom[0]) * bound_value(u.bound)
        return n

    def _add_update(self, x, new, u):
        dom = x.domain
        if len(dom) == 2:
            x[u == 0] = x[dom[0] - 1, u.bound]
        x[tuple(d + 1 if d is u else d for d in dom)] = new

    def state(self, p, name):
        """A state placeholder like ``p`` with ``s[0, ...] = 0``, labelled ``<optimizer>.<name>(<p>)``."""
        s = O.placeholder(p.shape, p.dtype, p.domain, name=f"{name}({relative(p.name)})")
        s[(0,) * len(p.domain)] = O.const(0, dtype=p.dtype)
        return s

    def _lr(self, p):
        lr = self.lr
        if isinstance(lr, RecurrentTensor):
            return O.cast(lr, p.dtype)
        return float(lr)


class SGD(Optimizer):
    """``p[i + 1] = p[i] - lr * g[i]``: ``tl.optim.SGD(params, lr, max_grad_norm=None)``."""

    def update(self, j, p, g):
        """The update of parameter ``p`` (the ``j``-th) from its gradient ``g``: ``p - lr * g``."""
        return p - self._lr(p) * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) as in ``torch.optim.Adam``: bias-corrected moments, ``eps`` added to
    the corrected root second moment.

    ``tl.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, max_grad_norm=None)``; the
    moments are placeholders over the parameters' domain, the step count is ``i + 1`` (or
    ``i * K + k + 1`` over ``(i, k)``).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, max_grad_norm=None):
        super().__init__(params, lr, max_grad_norm)
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)

    def update(self, j, p, g):
        """The update of parameter ``p`` (the ``j``-th) from its gradient ``g``, with moment placeholders ``m``, ``v``."""
        b1, b2 = self.betas
        u = p.domain[-1]
        m, v = self.state(p, "m"), self.state(p, "v")
        m_new = b1 * m + (1 - b1) * g
        v_new = b2 * v + (1 - b2) * g * g
        self._add_update(m, m_new, u)
        self._add_update(v, v_new, u)
        n = O.cast(self._count, p.dtype)
        bc1 = 1 - O.const(b1, dtype=p.dtype) ** n
        bc2 = 1 - O.const(b2, dtype=p.dtype) ** n
        denom = F.sqrt(v_new) / F.sqrt(bc2) + self.eps
        return p - self._lr(p) / bc1 * m_new / denom
