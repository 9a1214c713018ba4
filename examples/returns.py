"""Discounted returns as a backward recurrence over t, checked against a numpy loop.

    python examples/returns.py [--backend reference]
"""

import argparse

import numpy as np

import timerl as tl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--gamma", type=float, default=0.5)
    args = ap.parse_args(argv)

    rewards = np.arange(8, dtype="float32").reshape(2, 4)
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        r = tl.tensor(rewards, domain=(i, t), name="r")
        g = tl.placeholder((), "float32", (i, t), name="g")
        g[i, T - 1] = r
        g[i, t] = r + args.gamma * g[i, t + 1]
        out = np.zeros_like(rewards)
        tl.sink(g, lambda v, p: out.__setitem__((p["i"], p["t"]), v))
    exe = prog.compile(bounds={I: 2, T: 4}, backend=args.backend)
    exe.run()

    expect = np.zeros_like(rewards)
    acc = np.zeros(2, "float32")
    for k in reversed(range(4)):
        acc = rewards[:, k] + args.gamma * acc
        expect[:, k] = acc
    print("returns:\n", out)
    assert np.allclose(out, expect), "timerl disagrees with the numpy loop"
    print("matches the numpy loop")


if __name__ == "__main__":
    main()
