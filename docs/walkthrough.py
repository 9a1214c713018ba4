"""A walkthrough of timerl: one small GAE program from the API to its result.

    python docs/walkthrough.py [--backend numpy|reference]

1. The program: an environment-free rollout (rewards, dones and values given as data) and
   generalized advantage estimation written as a recurrence over ``t``.
2. The PDG that recording the program built (``prog.pdg``): one node per op, edges from
   consumer to producer carrying the index map (``[i, t + 1]``) and the branch condition.
3. The schedule the compiler chose (``exe.schedule``): with isl on compiled backends; the
   reference executor prints its point-by-point demand order.
4. The run, and its values against a plain numpy loop.

CI runs this file, so it cannot rot.
"""

import argparse
import importlib.util

import numpy as np

import timerl as tl

I_, T_ = 2, 6
GAMMA, LAM = 0.9, 0.8


def data():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(I_, T_)).astype("float32")
    done = np.zeros((I_, T_), bool)
    done[0, 2] = done[1, 4] = True
    v = rng.normal(size=(I_, T_)).astype("float32")
    last = rng.normal(size=I_).astype("float32")
    return r, done, v, last


def numpy_gae(r, done, v, last):
    adv, out = np.zeros(I_), np.zeros((I_, T_))
    for t in reversed(range(T_)):
        v_next = last if t == T_ - 1 else v[:, t + 1]
        delta = r[:, t] + GAMMA * (1 - done[:, t]) * v_next - v[:, t]
        adv = delta + GAMMA * LAM * (1 - done[:, t]) * adv
        out[:, t] = adv
    return out


def main(argv=None):
    default = "numpy" if importlib.util.find_spec("timerl.runtime.executable") else "reference"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=default)
    args = ap.parse_args(argv)
    r_np, done_np, v_np, last_np = data()

    # 1. the program -------------------------------------------------------------------------
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    adv = np.full((I_, T_), np.nan)
    with prog:
        r = tl.tensor(r_np, domain=(i, t), name="r")
        done = tl.tensor(done_np, domain=(i, t), name="done")
        v = tl.tensor(v_np, domain=(i, t), name="v")
        last = tl.tensor(last_np, domain=(i,), name="last_value")
        # δ_t = r_t + γ (1 - done_t) V_{t+1} - V_t ; A_t = δ_t + γ λ (1 - done_t) A_{t+1}
        A = tl.rl.gae(r, v, done, GAMMA, LAM, last_value=last)
        tl.sink(A, lambda value, point: adv.__setitem__((point["i"], point["t"]), value))

    # 2. the PDG -------------------------------------------------------------------------------
    print("== PDG (consumer = op(producer[index]), one line per node) ==")
    print(prog.pdg)
    merges = [n for n in prog.pdg.nodes if prog.pdg.rec(n).op.name == "MERGE"]
    print(f"\n{len(prog.pdg)} nodes; the placeholders (recurrences) are "
          f"{', '.join(repr(prog.pdg.rec(n).name) for n in merges)}")

    # 3. the schedule --------------------------------------------------------------------------
    exe = prog.compile(bounds={I: I_, T: T_}, backend=args.backend)
    print(f"\n== schedule (backend {args.backend!r}) ==")
    print(exe.schedule)

    # 4. the run and its values ---------------------------------------------------------------
    exe.run()
    expect = numpy_gae(r_np, done_np, v_np, last_np)
    print("\n== advantages ==")
    print(np.round(adv, 4))
    np.testing.assert_allclose(adv, expect, rtol=1e-5, atol=1e-5)
    print("matches the numpy loop; stats:", {k: exe.stats[k] for k in ("peak_bytes", "run_seconds")})


if __name__ == "__main__":
    main()
