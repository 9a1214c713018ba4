"""Spilling: the stores of swapped nodes, and the files they swap to.

The memory plan's swaps (:mod:`timerl.schedule.spill`) become calls on a :class:`SpillStore`,
one per swapped node: ``put`` at the write, ``out`` (swap-out: the point's bytes written to a
file, its value dropped), ``fetch`` (swap-in: a unit read back into fresh arrays; with
``ahead`` the read runs on a worker thread while the next statement runs, and ``wait`` joins
it), reads (``[]``, ``gather``) and ``free``. Each returns the bytes it adds to or takes from
memory, so the rendered program's ``live`` counts a point while it is in memory only. With
``plan=True`` no file exists and values are byte counts (the planned peak).

Files are plain files under one directory per run (:class:`SpillSession`): a fresh
``timerl-spill-*`` directory under ``TIMERL_SPILL_DIR`` (``config.spill_dir``; default the
system's temporary directory), made at the first swap-out and removed with everything in it
when the run ends, raises or is interrupted (``Executable.run`` clears its stores in a
``finally``), and at interpreter exit. A block store's unit is one block: a file per block
being swapped (reused by later blocks), each output's rows in one region, read back with one
call per output. A point's unit is the point: one file per node, in fixed slots.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import shutil
import tempfile
import threading
import time

import numpy as np

from ..config import config

#: a prefetch this big or bigger reads on the worker thread; smaller ones read at once (a thread
#: hand-off costs more than the read)
ASYNC_BYTES = 1 << 20


def _bytes(a):
    """``a``'s memory as a flat byte view (a C-contiguous array)."""
    return memoryview(a.reshape(-1).view(np.uint8))


class SpillSession:
    """The spill directory of one run, its worker thread and its counters: ``out_bytes`` and
    ``in_bytes`` moved, ``disk_peak`` (most bytes on disk at once) and ``seconds`` spent writing
    and waiting for reads."""

    def __init__(self):
        self.dir, self._fds, self._pool = None, [], None
        self._lock = threading.Lock()  # seek-and-write where there is no pwrite/preadv
        self.reset()

    def reset(self):
        self.out_bytes = self.in_bytes = self.on_disk = self.disk_peak = 0
        self.seconds = 0.0

    def open(self, name) -> int:
        """A new file in the run's directory (made now if it is the first)."""
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="timerl-spill-", dir=config.spill_dir or None)
            atexit.register(self.clear)
        fd = os.open(os.path.join(self.dir, name), os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0),
                     0o600)
        self._fds.append(fd)
        return fd

    def moved(self, out=0, into=0, disk=0, seconds=0.0):
        """Count ``out`` bytes written, ``into`` read, ``disk`` more (or fewer) bytes on disk."""
        self.out_bytes += out
        self.in_bytes += into
        self.on_disk += disk
        self.disk_peak = max(self.disk_peak, self.on_disk)
        self.seconds += seconds

    def submit(self, job):
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="timerl-swap")
        return self._pool.submit(job)

    def write(self, fd, a, off):
        view = _bytes(np.ascontiguousarray(a))
        while view:
            if hasattr(os, "pwrite"):
                n = os.pwrite(fd, view, off)
            else:
                with self._lock:
                    os.lseek(fd, off, os.SEEK_SET)
                    n = os.write(fd, view)
            view, off = view[n:], off + n

    def read(self, fd, a, off):
        """Fill array ``a`` from ``fd`` at ``off`` (a hole reads as zeros)."""
        view = _bytes(a)
        while view:
            if hasattr(os, "preadv"):
                n = os.preadv(fd, [view], off)
            else:
                with self._lock:
                    os.lseek(fd, off, os.SEEK_SET)
                    got = os.read(fd, len(view))
                n = len(got)
                view[:n] = got
            if n == 0:
                view[:] = b"\0" * len(view)
                break
            view, off = view[n:], off + n

    def clear(self):
        """Stop the worker, close and remove every file and the directory."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            atexit.unregister(self.clear)
            self.dir = None
        self.on_disk = 0

    def __len__(self):
        return len(self._fds)


class SpillStore:
    """The points of one swapped node (:class:`timerl.schedule.spill.Swap`): in memory from the
    write to the swap-out and from the unit's swap-in to the free, on disk between. A block's
    rows, swapped in, are one array per output whose slices reads take as views."""

    def __init__(self, swap, session, plan=False):
        self.sw, self.session, self.plan = swap, session, plan
        self.block, self.pos, self.lo, self.length = swap.unit == "block", swap.pos, swap.lo, swap.length
        self.outs = [(tuple(sh), np.dtype(dt)) for sh, dt in swap.outs]
        self.sizes = [int(np.prod(sh, dtype=np.int64)) * dt.itemsize for sh, dt in self.outs]
        self.offsets = [sum(self.sizes[:j]) for j in range(len(self.sizes))]  # within a point's slot
        self.total = sum(self.sizes)
        self.multi = len(self.outs) > 1
        self.clear()

    def clear(self):
        self.rows = {}  # point -> value in memory (a point unit: also once swapped in)
        self.held = {}  # point unit: point -> its bytes in memory
        self.disk = {}  # point unit: point -> (slot, outputs written); block unit: block -> [file, rows out]
        self.blocks = {}  # block unit, swapped in: block -> [arrays per output, rows live, bytes]
        self.pending = {}  # unit -> (future, what to do once read)
        self.fd, self.slots, self.n_slots, self.files = None, [], 0, []

    def __len__(self):
        return len(self.rows) + len(self.disk) + len(self.blocks)

    def held_bytes(self) -> int:
        """Bytes in memory now."""
        rows = len(self.rows) * self.total if self.block else sum(self.held.values())
        return rows + sum(b[2] for b in self.blocks.values())

    def _unit(self, k):
        return k[:self.pos] + k[self.pos + 1:] if self.block else k

    # writes and swap-outs -------------------------------------------------------------------
    def put(self, k, v) -> int:
        if self.block and not self.plan:  # a row must not alias a buffer that changes (a block store copies)
            v = tuple(self._own(x) for x in v) if self.multi else self._own(v)
        self.rows[k] = v
        if not self.block:
            self.held[k] = self.total
        return self.total

    def out(self, k, keep) -> int:
        """Swap-out: write the outputs of point ``k`` that ``keep`` (a bool per output) says; the
        point leaves memory. Returns its bytes."""
        v = self.rows.pop(k)
        nb = self.total if self.block else self.held.pop(k)
        size = sum(s for s, kp in zip(self.sizes, keep) if kp)
        t0 = time.perf_counter()
        vs = (v if self.multi else (v,)) if not self.plan else [None] * len(self.sizes)
        if self.block:
            u, row = self._unit(k), k[self.pos] - self.lo
            f = self.disk.get(u)
            if f is None:
                f = self.disk[u] = [None if self.plan else self._block_file(), set()]
            f[1].add(row)
            for j, x in enumerate(vs):
                if keep[j] and not self.plan:
                    self.session.write(f[0], self._host(x), self.length * self.offsets[j] + row * self.sizes[j])
        else:
            slot = self.slots.pop() if self.slots else self.n_slots
            self.n_slots = max(self.n_slots, slot + 1)
            self.disk[k] = (slot, tuple(bool(x) for x in keep))
            if self.fd is None and not self.plan:
                self.fd = self.session.open(f"S{self.sw.node}.points")
            for j, x in enumerate(vs):
                if keep[j] and not self.plan:
                    self.session.write(self.fd, self._host(x), slot * self.total + self.offsets[j])
        if not self.plan:
            self.session.moved(out=size, disk=size, seconds=time.perf_counter() - t0)
        return nb

    def _block_file(self):
        """A file for one block's rows: one a swapped-in block gave back, or a new one as long
        as a block (rows never written read as zeros)."""
        if self.files:
            return self.files.pop()
        fd = self.session.open(f"S{self.sw.node}.block{len(self.session)}")
        os.ftruncate(fd, self.length * self.total)
        return fd

    # swap-ins ---------------------------------------------------------------------------------
    def fetch(self, u, ahead=False) -> int:
        """Swap-in: read unit ``u`` (a block's key, or a point) back into fresh arrays; with
        ``ahead`` a large read runs on the worker thread until :meth:`wait`. Returns its bytes."""
        if self.block:
            fd, rows = self.disk.pop(u)
            keep = [kp == "True" for kp in self.sw.keep]  # a block's outputs kept: the same for every row
            nb = self.length * sum(s for s, kp in zip(self.sizes, keep) if kp)
            on_disk = len(rows) * sum(s for s, kp in zip(self.sizes, keep) if kp)
            arrays = None if self.plan else \
                [np.empty((self.length,) + sh, dt) if kp else None for (sh, dt), kp in zip(self.outs, keep)]
            self.blocks[u] = [arrays, rows, nb]
            reads = [] if self.plan else [(fd, a, self.length * off) for a, off in zip(arrays, self.offsets)
                                          if a is not None]

            def done():
                self.files.append(fd)
                if arrays is not None:
                    self.blocks[u][0] = [None if a is None else self._mem(a) for a in arrays]
        else:
            slot, keep = self.disk.pop(u)
            nb = on_disk = sum(s for s, kp in zip(self.sizes, keep) if kp)
            vals = [np.empty(sh, dt) if kp and not self.plan else None for (sh, dt), kp in zip(self.outs, keep)]
            self.rows[u] = nb if self.plan else tuple(vals) if self.multi else vals[0]
            self.held[u] = nb
            reads = [(self.fd, a, slot * self.total + off) for a, off in zip(vals, self.offsets) if a is not None]

            def done():
                self.slots.append(slot)
                if not self.plan:
                    got = [None if a is None else self._mem(a) for a in vals]
                    self.rows[u] = tuple(got) if self.multi else got[0]

        if self.plan:
            return nb

        def job():
            for fd_, a, off in reads:
                self.session.read(fd_, a, off)

        self.session.moved(into=nb, disk=-on_disk)
        if ahead and nb >= ASYNC_BYTES:
            self.pending[u] = (self.session.submit(job), done)
        else:
            t0 = time.perf_counter()
            job()
            done()
            self.session.moved(seconds=time.perf_counter() - t0)
        return nb

    def wait(self, u):
        """The end of a prefetch: its read has landed."""
        p = self.pending.pop(u, None)
        if p is not None:
            t0 = time.perf_counter()
            p[0].result()
            p[1]()
            self.session.moved(seconds=time.perf_counter() - t0)

    # reads and frees ---------------------------------------------------------------------------
    def __getitem__(self, k):
        if self.pending:
            self.wait(self._unit(k))
        v = self.rows.get(k)
        if v is not None:
            return v
        arrays, i = self.blocks[self._unit(k)][0], k[self.pos] - self.lo
        return tuple(None if a is None else a[i] for a in arrays) if self.multi else arrays[0][i]

    def __contains__(self, k) -> bool:
        """Whether point ``k`` is in memory (written and not swapped out, or swapped in and waited
        for), as the schedule check requires of every read."""
        if k in self.rows:
            return self._unit(k) not in self.pending
        b = self.blocks.get(self._unit(k)) if self.block else None
        return b is not None and k[self.pos] - self.lo in b[1] and self._unit(k) not in self.pending

    def gather(self, ent, out=None):
        """The rows of one swapped-in block that a slice covers (a view of its array)."""
        r = ent[self.pos]
        u = ent[:self.pos] + ent[self.pos + 1:]
        j = 0 if out is None else out
        if len(r) == 0:
            return np.zeros((0,) + self.outs[j][0], self.outs[j][1])
        if self.pending:
            self.wait(u)
        a = r.start - self.lo
        return self.blocks[u][0][j][a:a + len(r)]

    # where values in memory live (DeviceSpillStore: on the cuda backend's device)
    @staticmethod
    def _own(x):
        """A copy of a written row that no later write changes."""
        return np.array(x)

    @staticmethod
    def _host(x):
        """``x`` as a host array, to write to its file."""
        return x

    @staticmethod
    def _mem(a):
        """A host array read back from its file, where values in memory live."""
        return a

    def free(self, k) -> int:
        """The point's bytes leave memory: a point's own, a block's when its last row goes."""
        if k in self.rows:
            del self.rows[k]
            return self.total if self.block else self.held.pop(k)
        b = self.blocks.get(self._unit(k)) if self.block else None
        if b is None:
            return 0
        b[1].discard(k[self.pos] - self.lo)
        if b[1]:
            return 0
        del self.blocks[self._unit(k)]
        return b[2]
