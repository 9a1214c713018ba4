"""Labels: the user-facing name of every op, in printouts (``timerl show``, ``str(exe.schedule)``)
and in error messages.

An op created by user code is labelled by its ``name=``, else by the user's source line
(``train.py:12``). Ops created inside a naming scope are labelled ``<scope>.<what>``: the scope
path (scopes nest, joined by ``.``), then the ``name=`` given or the op's kind (``mul``,
``matmul``, ``merge``), then the user's line that led to it when there is one::

    with tl.name_scope("policy"):
        h = tl.tanh(x @ w)                  # labelled "policy.tanh (train.py:12)"

timerl's own modules (``tl.nn``, ``tl.optim``, ``tl.distributions``, ``tl.rl``) build
everything inside such scopes, so their ops read ``gae.adv``, ``ppo.ratio``,
``Linear.weight``, ``adam.m`` rather than the line of timerl's source that built them.
Under the ``timerl`` command there is no user line: the labels are the scoped names alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import threading

from ..errors import caller_site

_local = threading.local()
_SITE = re.compile(r" \([^()\s]+:\d+\)")  # " (train.py:12)" in a label


def _scopes() -> list:
    if not hasattr(_local, "scopes"):
        _local.scopes = []
    return _local.scopes


@contextlib.contextmanager
def name_scope(name: str):
    """Label every op created inside ``<enclosing scopes>.<name>.<what>`` (see the module docstring)."""
    name = str(name)
    if not name:
        raise ValueError("name_scope needs a non-empty name")
    stack = _scopes()
    stack.append(name)
    try:
        yield ".".join(stack)
    finally:
        stack.pop()


def scope_path() -> str:
    """The current scope, e.g. ``"ppo.actor"`` (``""`` outside every scope)."""
    return ".".join(_scopes())


def label(name, what: str) -> str:
    """The label of an op of kind ``what`` created now with ``name=`` ``name`` (or None)."""
    path = scope_path()
    if not path:
        return name or caller_site() or "<unknown>"
    site = caller_site()
    base = f"{path}.{_SITE.sub('', name or what)}"  # a name built from labels (grad(...)) drops their lines
    return f"{base} ({site})" if site else base


def relative(name: str) -> str:
    """``name`` (another op's label) as seen from the current scope: without its user line and
    without the leading scopes it shares with the current one (``ppo.actor.layer0.weight``
    inside ``ppo.adam`` is ``actor.layer0.weight``)."""
    name = _SITE.sub("", name)
    parts, path = name.split("."), scope_path().split(".")
    k = 0
    while k < min(len(parts) - 1, len(path)) and parts[k] == path[k]:
        k += 1
    return ".".join(parts[k:])


def named(x, what: str):
    """Label the op that produced ``x`` ``<scope>.<what>`` and return ``x``: how library code names
    a computed tensor (``ratio = named(tl.exp(logp - old_logp), "ratio")`` inside the ``ppo``
    scope is ``ppo.ratio``). An op that was named otherwise, or built in another scope, keeps
    its label."""
    pdg = x.prog.pdg
    node = pdg.rec(x.nid)
    kind = node.attrs["fn"] if isinstance(node.attrs.get("fn"), str) else node.op.value
    if scope_path() and node.name == label(None, kind):
        pdg.nodes[x.nid]["node"] = dataclasses.replace(node, name=label(what, kind))
    return x


def labelled(scope: str):
    """Decorator: the function builds its ops inside ``name_scope(scope)`` (timerl's own library
    functions: ``@labelled("gae")``)."""

    def deco(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            stack = _scopes()
            if stack and stack[-1] == scope:  # a method calling another of the same object
                return fn(*args, **kwargs)
            with name_scope(scope):
                return fn(*args, **kwargs)

        return inner

    return deco
