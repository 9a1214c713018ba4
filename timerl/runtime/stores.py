"""Tensor stores besides the dict of points: block stores and circular buffers.

A :class:`BlockStore` keeps the points of a tensor along one dim ``d`` in one
preallocated array per value of the other dims (``(length,) + shape``), written in
place at each point; a slice read along ``d`` is a view of a contiguous range. With
``ring=True`` it is a circular buffer: point ``x`` lives in slot ``(x_d - lo) % length``,
the slot count computed at compile so that no live point is overwritten; its reads are
copies (a slot is rewritten later).

A node with several outputs (a UDF's) keeps one array per output (``outs``): a point's value
is the tuple of its rows, and ``gather`` reads the slices of one output.

Byte accounting: ``put`` returns the bytes newly allocated (the whole block when it
is created), ``free`` the bytes released (the whole block when its last live point is
freed). In plan mode (``plan=True``) values are byte counts and no array exists.
"""

from __future__ import annotations

import numpy as np


class BlockStore:
    __slots__ = ("pos", "lo", "length", "ring", "plan", "blocks", "shape", "dtype", "outs")

    def __init__(self, pos, lo, length, shape, dtype, ring=False, plan=False, outs=()):
        self.pos, self.lo, self.length, self.ring, self.plan = pos, lo, length, ring, plan
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.outs = tuple((tuple(sh), np.dtype(dt)) for sh, dt in outs) if len(outs) > 1 else None
        self.blocks = {}  # other coordinates -> [array or None, live points, index held per slot, bytes]

    def _at(self, k):
        p = self.pos
        i = k[p] - self.lo
        return k[:p] + k[p + 1:], (i % self.length if self.ring else i)

    def put(self, k, v) -> int:
        ok, i = self._at(k)
        b = self.blocks.get(ok)
        added = 0
        if b is None:
            if self.plan:
                arr, nb = None, self.length * v
            elif self.outs is not None:
                arr = [self._empty((self.length,) + sh, dt) for sh, dt in self.outs]
                nb = sum(a.nbytes for a in arr)
            else:
                shape, dtype = self._proto(v)
                arr = self._empty((self.length,) + shape, dtype)
                nb = arr.nbytes
            b = self.blocks[ok] = [arr, 0, [None] * self.length, nb]
            added = nb
        held = b[2]
        if held[i] is None:
            b[1] += 1
        held[i] = k[self.pos]
        if self.plan:
            return added
        if self.outs is not None:
            for a, x in zip(b[0], v):
                a[i] = x
        else:
            b[0][i] = v
        return added

    def free(self, k) -> int:
        ok, i = self._at(k)
        b = self.blocks.get(ok)
        if b is None or b[2][i] != k[self.pos]:
            return 0
        b[2][i] = None
        b[1] -= 1
        if b[1] == 0:
            del self.blocks[ok]
            return b[3]
        return 0

    def __contains__(self, k) -> bool:
        ok, i = self._at(k)
        b = self.blocks.get(ok)
        return b is not None and 0 <= i < self.length and b[2][i] == k[self.pos]

    def holder(self, k):
        """The other point (index along the dim) now held in ``k``'s slot, or None."""
        ok, i = self._at(k)
        b = self.blocks.get(ok)
        if b is None or not 0 <= i < self.length or b[2][i] in (None, k[self.pos]):
            return None
        return b[2][i]

    def __getitem__(self, k):
        ok, i = self._at(k)
        arr = self.blocks[ok][0]
        if self.outs is not None:
            return tuple(self._copy(a[i]) if self.ring else a[i] for a in arr)
        return self._copy(arr[i]) if self.ring else arr[i]

    def gather(self, ent, out=None):
        """The points ``ent`` covers (ints, and one ``range`` along the block's dim), stacked
        (of output ``out`` for a node with several)."""
        r = ent[self.pos]
        ok = ent[:self.pos] + ent[self.pos + 1:]
        n = len(r)
        shape, dtype = (self.shape, self.dtype) if self.outs is None else self.outs[out]
        if n == 0:
            return np.zeros((0,) + shape, dtype)
        arr = self.blocks[ok][0] if self.outs is None else self.blocks[ok][0][out]
        a = r.start - self.lo
        if not self.ring:
            return arr[a:a + n]
        a %= self.length
        if a + n <= self.length:
            return self._copy(arr[a:a + n])
        return self._concat(arr[a:], arr[:a + n - self.length])

    def clear(self):
        self.blocks.clear()

    # where the arrays live (DeviceBlockStore: on the cuda backend's device)
    @staticmethod
    def _empty(shape, dtype):
        return np.empty(shape, dtype)

    @staticmethod
    def _proto(v):
        v = np.asarray(v)
        return v.shape, v.dtype

    @staticmethod
    def _copy(x):
        return x.copy()

    @staticmethod
    def _concat(a, b):
        return np.concatenate((a, b))

    def __len__(self):
        return len(self.blocks)
