"""asv benchmarks of the schedule and the interpreter (also a script: ``python asv_benchmarks/bench_compile.py``).

* ``CompileSuite.time_compile``: compiling a program of a few hundred ops (an acting
  loop: a 2-layer MLP policy over a recurrent state, rewards, n-step returns, a
  backward return recurrence, losses), backend ``numpy`` (isl schedule, memory plan,
  lowering; no kernels).
* ``InterpreterSuite.time_run``: one run of a chain of tiny ops (shape (1,)) over
  ``T`` steps; ``track_us_per_instruction`` divides the run time by the number of op
  instances executed: the interpreter's overhead per executed instruction.
"""

from __future__ import annotations

import time

import numpy as np

import timerl as tl


def big_program(layers=12, width=8):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    rng = np.random.default_rng(0)
    with prog:
        o = tl.placeholder((width,), "float32", (t,), name="o")
        o[0] = tl.zeros((width,))
        h = o[t]
        for k in range(layers):
            W = tl.const(rng.normal(size=(width, width)).astype("float32") * 0.3)
            b = tl.const(rng.normal(size=(width,)).astype("float32") * 0.1)
            z = h @ W + b
            h = tl.tanh(z) * 0.5 + tl.relu(z) * 0.25 - tl.sigmoid(z) * 0.1
            h = tl.clip(h, -3.0, 3.0) if hasattr(tl, "clip") else h
        o[t + 1] = h * 0.9 + 0.01
        r = (h * h).sum() - (o[t] * 0.1).sum()
        g = tl.placeholder((), "float32", (t,), name="g")
        g[T - 1] = r
        g[t] = r + 0.99 * g[t + 1]
        n3 = r[t:tl.min(t + 3, T)].sum()
        loss = (g - n3) * (g - n3) + tl.abs(r) * 0.01
        tl.sink([loss, g], lambda v, p: None)
    return prog


def tiny_chain(n_ops=50):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.placeholder((1,), "float32", (t,), name="x")
        x[0] = tl.zeros((1,))
        y = x[t]
        for k in range(n_ops):
            y = y * 0.999 + 0.001 if k % 2 == 0 else tl.tanh(y)
        x[t + 1] = y
        tl.sink(x, lambda v, p: None)
    return prog


def n_ops(prog):
    return sum(1 for n in prog.pdg.nodes)


class CompileSuite:
    timeout = 600

    def setup(self):
        self.prog = big_program()

    def time_compile(self):
        self.prog.compile({"T": 64}, backend="numpy")

    def track_ops(self):
        return n_ops(self.prog)


class InterpreterSuite:
    timeout = 600
    T = 200

    def setup(self):
        self.exe = tiny_chain().compile({"T": self.T}, backend="numpy")
        self.exe.run()
        a = self.exe.analysis
        self.instances = sum(int(a.demand[n].count_val().to_python()) for n in self.exe.pdg.nodes)

    def time_run(self):
        self.exe.run()

    def track_us_per_instruction(self):
        t0 = time.perf_counter()
        self.exe.run()
        return (time.perf_counter() - t0) / self.instances * 1e6


def main():
    c = CompileSuite()
    c.setup()
    t0 = time.perf_counter()
    exe = c.prog.compile({"T": 64}, backend="numpy")
    dt = time.perf_counter() - t0
    print(f"compile: {n_ops(c.prog)} ops, {exe.stats['statements']} isl statements, {dt:.2f} s total; stages: "
          + ", ".join(f"{k}={v:.3f}" for k, v in exe.stats["compile_seconds"].items()))
    t0 = time.perf_counter()
    exe.run()
    print(f"run of that program (T=64, numpy): {time.perf_counter() - t0:.3f} s")
    s = InterpreterSuite()
    s.setup()
    best = min(s.track_us_per_instruction() for _ in range(5))
    a, c = np.ones(1, np.float32), np.asarray(np.float32(0.999))
    t0 = time.perf_counter()
    for _ in range(20000):
        np.tanh(np.add(np.multiply(a, c), c))
    op_us = (time.perf_counter() - t0) / 60000 * 1e6
    print(f"interpreter (numpy): {s.instances} op instances per run, {best:.2f} us per executed instruction "
          f"(a bare numpy ufunc call on these shapes: {op_us:.2f} us; the rest is the interpreter)")
    for backend in ("numpy", "numba"):
        exe = tiny_chain().compile({"T": 200}, backend=backend)
        exe.run()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            exe.run()
            ts.append(time.perf_counter() - t0)
        print(f"tiny chain T=200 on {backend}: {min(ts) * 1e3:.2f} ms per run, kernels={exe.stats['kernels']}")


if __name__ == "__main__":
    main()
