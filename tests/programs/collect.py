"""Sink callbacks that record what a run produces: ``{sink name: {point tuple: array}}``."""

from __future__ import annotations

import numpy as np


class Collect(dict):
    """``tl.sink(x, collect("g"))`` records ``collect["g"][point] = value.copy()``.

    ``point`` is the tuple of the sink's dim values in domain order (``()`` for a sink with
    an empty domain). A multi-tensor sink records a tuple of arrays.
    """

    def __call__(self, name):
        if name in self:
            raise KeyError(f"sink name {name!r} used twice")
        store = self[name] = {}

        def record(value, point):
            key = tuple(int(v) for v in point.values())
            if key in store:
                raise AssertionError(f"sink {name!r} called twice at {point}")
            if isinstance(value, list):
                store[key] = tuple(np.array(v, copy=True) for v in value)
            else:
                store[key] = np.array(value, copy=True)

        return record

    def array(self, name, shape=None):
        """The values of sink ``name`` stacked into one array indexed by point."""
        store = self[name]
        pts = sorted(store)
        if not pts or pts == [()]:
            return store.get((), None)
        dims = len(pts[0])
        extent = shape or tuple(max(p[k] for p in pts) + 1 for k in range(dims))
        first = store[pts[0]]
        out = np.full(tuple(extent) + first.shape, np.nan if first.dtype.kind == "f" else 0, dtype=first.dtype)
        for p in pts:
            out[p] = store[p]
        return out
