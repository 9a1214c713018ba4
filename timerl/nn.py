"""Neural-network modules whose parameters are recurrent tensors over the iteration dim.

A parameter is a placeholder over ``domain`` (default: the program's first dim, the
iteration ``i``) whose value at ``i`` is the one used at ``i``: ``p[0] = init`` is its first
branch, and ``opt.step(loss)`` adds ``p[i + 1] = update`` (see :mod:`timerl.optim`). With
``domain=(i, k)`` (several updates per iteration) the init branch is ``p[0, 0] = init``.

    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        net = tl.nn.MLP([4, 64, 64, 2], activation="tanh", domain=(i,))
        x = tl.tensor(obs, domain=(i, t))       # obs: (I, T, 4)
        y = net(x)                              # domain (i, t), shape (2,)
        params = net.parameters()

Initial values are numpy arrays computed when the module is created, from ``seed`` (by
default the program's op count at creation, so a program always starts from the same values).

Labels (printouts, errors): a module's ops and parameters are named under its ``name=``
(default: its class): ``Linear.weight``, ``Linear.bias``, ``Linear.matmul``; an MLP's layers are
``MLP.layer0``, ``MLP.layer1``, ... (``MLP.layer0.weight``). See :func:`timerl.name_scope`.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from .api import functions as F
from .api import ops as O
from .api.naming import name_scope
from .api.program import current_program
from .api.tensor import RecurrentTensor
from .api.args import as_domain, as_dtype, as_shape, as_size, who
from .errors import ArgTypeError, ShapeError

__all__ = ["Parameter", "Module", "Linear", "MLP", "orthogonal", "at"]


def orthogonal(shape, gain=1.0, rng=None):
    """An orthogonal ``(n_in, n_out)`` matrix scaled by ``gain`` (torch's ``orthogonal_`` on the
    ``(n_out, n_in)`` weight, transposed)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    n_in, n_out = shape
    a = rng.normal(size=(n_out, n_in))
    if n_out < n_in:
        a = a.T
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    if n_out < n_in:
        q = q.T
    return (gain * q).T


def _init_value(init, shape, dtype, gain, rng):
    if isinstance(init, np.ndarray) or isinstance(init, (list, tuple, float, int)):
        v = np.asarray(init, dtype=dtype)
        if v.shape != tuple(shape):
            v = np.broadcast_to(v, shape)
        return np.array(v, dtype=dtype)
    if init == "zeros":
        return np.zeros(shape, dtype)
    if init == "ones":
        return np.ones(shape, dtype)
    if init == "orthogonal":
        if len(shape) != 2:
            raise ShapeError(f"orthogonal init needs a 2-d parameter, got shape {tuple(shape)}")
        return orthogonal(shape, gain, rng).astype(dtype)
    if init == "normal":
        return (gain * rng.normal(size=shape)).astype(dtype)
    if init == "uniform":
        fan_in = shape[0] if shape else 1
        bound = gain / math.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape).astype(dtype)
    if callable(init):
        return np.asarray(init(tuple(shape), rng), dtype=dtype)
    raise ValueError(f"unknown init {init!r}: use 'orthogonal', 'zeros', 'ones', 'normal', 'uniform' or an array")


def _default_domain(domain):
    prog = current_program()
    if domain is None:
        return (prog.dims[0],)
    return tuple(domain) if isinstance(domain, (tuple, list)) else (domain,)


def Parameter(shape, domain=None, init="zeros", dtype="float32", gain=1.0, seed=None, name=None) -> RecurrentTensor:
    """A trainable tensor: a placeholder over ``domain`` with ``p[0, ..., 0] = init``.

    Until an optimizer updates it, it holds its value: ``p[i + 1] = p[i]`` (over ``(i, k)``:
    ``p[i, 0] = p[i - 1, K]`` and ``p[i, k + 1] = p[i, k]``); ``opt.step`` replaces the hold
    branch with the update. It requires a gradient.
    """
    prog = current_program()
    what = who("tl.nn.Parameter", name)
    as_domain(_default_domain(None) if domain is None else domain, prog, what)
    domain = _default_domain(domain)
    shape, dtype = as_shape(shape, what), as_dtype(dtype, what)
    rng = np.random.default_rng(prog._count if seed is None else seed)
    value = _init_value(init, shape, np.dtype(dtype), gain, rng)
    name = name or "parameter"
    p = O.placeholder(shape, dtype, domain, name=name)
    p[(0,) * len(domain)] = O.const(value, name=f"{name}.init")
    u = domain[-1]
    if len(domain) == 2:
        p[u == 0] = p[domain[0] - 1, u.bound]
    # hold the value until an optimizer replaces this branch with its update
    p[tuple(d + 1 if d is u else d for d in domain)] = p
    attrs = prog.pdg.nodes[p.nid]
    attrs["requires_grad"] = True
    attrs["parameter"] = True
    attrs["hold_branch"] = len(prog.pdg.inputs(p.nid)) - 1
    return p


def at(p, dim, value):
    """Parameter ``p`` at ``dim == value`` (e.g. ``at(w, k, 0)``: the value as iteration i starts)."""
    if dim not in p.domain:
        return p
    return p[tuple(value if d is dim else d for d in p.domain)]


class Module:
    """Base class: subclasses keep parameters and submodules as attributes (lists allowed) and
    define ``forward(x)``; ``module(x)`` calls it, ``module.parameters()`` collects parameters. A
    module with a ``name`` runs ``forward`` inside ``tl.name_scope(name)``: its ops are labelled
    ``<name>.<what>``."""

    name = None

    def parameters(self) -> list:
        """The trainable parameters of this module and its submodules, in attribute order (a list of tensors)."""
        out = []
        for v in self.__dict__.values():
            for x in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(x, Module):
                    out.extend(x.parameters())
                elif isinstance(x, RecurrentTensor) and x.prog.pdg.nodes[x.nid].get("parameter"):
                    out.append(x)
        return out

    def at(self, dim, value):
        """A copy of this module that reads every parameter at ``dim == value`` (not trainable:
        ``parameters()`` of the copy is empty). ``actor.at(k, 0)`` is the policy as iteration ``i``
        starts when parameters live over ``(i, k)``."""
        new = object.__new__(type(self))
        with name_scope(self.name) if self.name else contextlib.nullcontext():
            for key, v in self.__dict__.items():
                new.__dict__[key] = _at_value(v, dim, value)
        return new

    def __call__(self, x):
        """``module(x)`` is ``module.forward(x)``."""
        if self.name is None:
            return self.forward(x)
        with name_scope(self.name):
            return self.forward(x)


def _at_value(v, dim, value):
    if isinstance(v, Module):
        return v.at(dim, value)
    if isinstance(v, (list, tuple)):
        return type(v)(_at_value(x, dim, value) for x in v)
    if isinstance(v, RecurrentTensor) and v.prog.pdg.nodes[v.nid].get("parameter"):
        return at(v, dim, value)
    return v


class Linear(Module):
    """``y = x @ W + b`` with ``W`` of shape ``(n_in, n_out)`` (orthogonal init with ``gain``) and
    ``b`` zeros.

    ``tl.nn.Linear(n_in, n_out, domain=(i,), init="orthogonal", gain=1.0, bias=True)``: the
    parameters live over ``domain`` (default: the program's first dim); ``init`` is
    ``"orthogonal"``, ``"zeros"``, ``"ones"``, ``"normal"``, ``"uniform"``, an array, or
    ``fn(shape, rng)``. ``seed`` fixes the initial values (default: the program's op count).
    """

    def __init__(self, n_in, n_out, domain=None, init="orthogonal", gain=1.0, bias=True, bias_init=0.0,
                 dtype="float32", seed=None, name=None):
        what = who("tl.nn.Linear", name)
        self.name = name or "Linear"
        self.n_in = as_size(n_in, what, "n_in", least=1)
        self.n_out = as_size(n_out, what, "n_out", least=1)
        with name_scope(self.name):
            self.weight = Parameter((self.n_in, self.n_out), domain, init, dtype, gain, seed, name="weight")
            self.bias = Parameter((self.n_out,), domain, np.full(self.n_out, bias_init, dtype), dtype,
                                  name="bias") if bias else None

    def forward(self, x):
        """``x @ W + b`` on the last spatial axis of ``x`` (length ``n_in``, else :class:`tl.ShapeError`); leading axes broadcast."""
        x = O.as_tensor(x)
        if not x.shape or not O._eq(x.shape[-1], self.n_in):
            raise ShapeError(f"Linear({self.n_in}, {self.n_out}): input {x.name!r} has shape {tuple(x.shape)}")
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


_ACT = {"tanh": F.tanh, "relu": F.relu, "sigmoid": F.sigmoid, None: lambda x: x, "identity": lambda x: x}


class MLP(Module):
    """Linear layers of ``sizes`` with ``activation`` between them (none after the last).

    Hidden layers use orthogonal init with ``gain`` (default sqrt(2)), the last ``out_gain``.
    ``activation`` is ``"tanh"``, ``"relu"``, ``"sigmoid"`` or None (else ``ValueError``).

        net = tl.nn.MLP([4, 64, 64, 2], activation="tanh", domain=(i,))
        logits = net(o)                 # o: shape (N, 4) -> (N, 2)
        params = net.parameters()       # 6 tensors: weights and biases
    """

    def __init__(self, sizes, activation="tanh", domain=None, init="orthogonal", gain=math.sqrt(2.0),
                 out_gain=1.0, dtype="float32", seed=None, name=None):
        if activation not in _ACT:
            raise ValueError(f"unknown activation {activation!r}; use 'tanh', 'relu', 'sigmoid' or None")
        self.activation = activation
        what = who("tl.nn.MLP", name)
        self.name = name or "MLP"
        if not isinstance(sizes, (list, tuple)) or len(sizes) < 2:
            raise ArgTypeError(f"{what}: sizes={sizes!r} must be a list of at least two layer widths, "
                               "e.g. [n_in, 64, 64, n_out]")
        for k, s in enumerate(sizes):
            as_size(s, what, f"sizes[{k}]", least=1)
        n = len(sizes) - 1
        with name_scope(self.name):
            self.layers = [
                Linear(a, b, domain, init, out_gain if k == n - 1 else gain, dtype=dtype,
                       seed=None if seed is None else seed + k, name=f"layer{k}")
                for k, (a, b) in enumerate(zip(sizes, sizes[1:]))
            ]

    def forward(self, x):
        """The layers applied in order, ``activation`` between them: ``(..., sizes[0]) -> (..., sizes[-1])``."""
        act = _ACT[self.activation]
        for k, layer in enumerate(self.layers):
            x = layer(x)
            if k < len(self.layers) - 1:
                x = act(x)
        return x
