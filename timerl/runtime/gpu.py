"""The ``cuda`` backend's rendering: the interpreter's lowered program with values on the device.

The same lowered program (:mod:`timerl.runtime.lowered`) and schedule as the CPU backends;
:class:`CudaMixin` changes where values live and what runs where:

- statement kernels are :mod:`timerl.kernels.cuda`'s (``@cuda.jit`` kernels launched by a host
  function), whose results are device arrays from the device pool
  (:data:`timerl.kernels.cudart.POOL`);
- block arrays (a rollout kept along ``t``) are device arrays of the pool, written row by row
  by kernels; slots, cells and tables of points hold device arrays as the kernels return them;
- everything else runs on the host: environment UDFs and sinks (their operands copied to the
  host, a UDF's outputs copied to the device right after it returns, so an acting loop moves
  one observation batch in and one action batch out per step), placeholders and accesses (no
  data moved), and the few ops outside kernels, on copies;
- a tensor the memory plan spills (:class:`DeviceSpillStore`) is on the device from its write to
  its swap-out and from its swap-in to its free, as the plan counts it: a swap-out copies it to
  the host and its spill file, a swap-in (or a prefetch, read on the spill worker thread) back.

``exe.stats`` gets ``peak_device_bytes`` (the pool's peak of base allocations), ``h2d_bytes``
and ``d2h_bytes``.

Runs on a GPU, or in numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before numba is
first imported), where every thread is Python: tiny sizes only.
"""

from __future__ import annotations

import numpy as np

from ..ir.ops import Op
from ..kernels import cuda as cuda_kernels
from ..kernels import cudart
from .interpreter import CheckRender, PlanRender, Render, gather, gather_keys
from .spill import SpillStore
from .stores import BlockStore


class DeviceBlockStore(BlockStore):
    """A block store or ring whose arrays are device arrays of the pool."""

    __slots__ = ()

    @staticmethod
    def _empty(shape, dtype):
        return cudart.POOL.empty(shape, dtype)

    @staticmethod
    def _proto(v):
        return (tuple(v.shape), np.dtype(v.dtype)) if cudart.is_device(v) else BlockStore._proto(v)

    _copy = staticmethod(cudart.dcopy)
    _concat = staticmethod(cudart.dconcat)


class DeviceSpillStore(SpillStore):
    """A spilled tensor whose points live on the device while in memory: a swap-out copies a
    point to the host and writes it to its spill file, freeing its device array; a swap-in reads
    the file (a prefetch: on the spill worker thread) and copies the unit back to the device."""

    _own = staticmethod(cudart.dcopy)
    _host = staticmethod(cudart.host)

    @staticmethod
    def _mem(a):
        return cudart.POOL.to_device(a)


def host_gather(store, out, ent, spatial, dtype):
    """:func:`~timerl.runtime.interpreter.gather` of device values: stacked on the host."""
    vals = {k: (cudart.host(store[k] if out is None else store[k][out]),) for k in gather_keys(ent)}
    return gather(vals, 0, ent, spatial, dtype)


class CudaMixin:
    """Hooks of :class:`~timerl.runtime.interpreter.Render` for values on the device."""

    EMPTY = "POOL.empty"
    KERNELS = "CUDA"
    host_value = staticmethod(cudart.host)
    kgen = cuda_kernels
    block_store = DeviceBlockStore
    spill_store = DeviceSpillStore

    def __init__(self, *a):
        super().__init__(*a)
        # rings copy their rows on every read: kept as DeviceBlockStore objects
        for n in [n for n, stg in self.run_arrays.items() if stg.kind == "circular"]:
            del self.run_arrays[n]
            self.arrays.pop(n, None)
        self.ns.update(POOL=cudart.POOL, H=cudart.host, D=cudart.to_device, gather=host_gather)

    def load_kernel(self, src):
        return cuda_kernels.load(src)

    def kernel_operand(self, p, e, shape, reader, own):
        if not len(shape) and self.pdg.rec(p).op is Op.CONST:
            return f"POOL.const({self.sym(f'c{p}_1', self.pdg.rec(p).attrs['value'].reshape(1))})"
        return super().kernel_operand(p, e, shape, reader, own)

    _on_host = False

    def operand(self, n, p, e, own):
        a = super().operand(n, p, e, own)
        return f"H({a})" if self._on_host else a

    def value(self, step, own):
        n = step.node
        node = self.pdg.rec(n)
        if node.op in (Op.ACCESS, Op.MERGE, Op.DIM_VALUE):  # references (or a host int): nothing moves
            return super().value(step, own)
        if node.op is Op.CONST:
            return [f"o = POOL.const({self.sym(f'const{n}', node.attrs['value'])})"], []
        # the op runs on the host: its operands copied there, its value copied to the device
        self._on_host = True
        try:
            L, args = super().value(step, own)
        finally:
            self._on_host = False
        if node.op is not Op.SINK:
            L.append("o = D(o)")
        return L, args

    def write(self, n, key, v="o"):
        node = self.pdg.rec(n)
        if (n in self.blocks or n in self.spills) and all(len(s) == 0 for s in node.shapes):
            v = f"H({v})"  # a 0-d row of a device array: written from a host scalar
        return super().write(n, key, v)

    def _conv_call(self, kern, seg_ext, args, k):
        try:
            return kern(*args)
        except (IndexError, ValueError, ZeroDivisionError) as err:
            self._seg_fault(seg_ext, args, k, err)


class CudaRender(CudaMixin, Render):
    pass


class CudaCheckRender(CudaMixin, CheckRender):
    RESULTS = "H(tuple(r))"


class CudaPlanRender(PlanRender):
    """The planned peak with the CUDA kernels' temporaries."""

    kgen = cuda_kernels


RENDERERS = {"run": CudaRender, "check": CudaCheckRender, "plan": CudaPlanRender}

