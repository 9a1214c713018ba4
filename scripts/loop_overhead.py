"""How much of the acting loop is crossing from Python into numba: a measurement for the design
of compiled loops (issue 14, item 4), not part of timerl.

It compiles CartPole PPO (8 x 128, compiled env, numba backend), records the arguments of the
five statement kernels one acting step calls (policy, sample and env step, critic, merges), and
times 128 steps of those same calls two ways:

- from Python, one kernel call after another (what the interpreter does, without its glue);
- from one ``numba.njit`` loop that calls the same cached kernels (their read-only signatures),
  which is what rendering the schedule's loop over ``t`` as compiled code would do.

The difference is numba's dispatch and the boxing of returned arrays, per iteration of PPO.
The interpreter's own glue (the statement functions, frees, byte counts) comes on top.

    python scripts/loop_overhead.py
"""

import time
import timeit

import numba
import numpy as np

import timerl as tl

STEP_KERNELS = ("K81", "K89", "K66", "K180", "K171")


def main():
    exe = tl.rl.ppo(env="CartPole-v1", num_envs=8, num_steps=128, epochs=4, minibatches=4,
                    total_steps=8 * 128 * 2)
    ns = exe._run.__globals__  # the rendered schedule's namespace: its kernels by name
    names = [k for k in STEP_KERNELS if k in ns]
    if len(names) != len(STEP_KERNELS):
        raise SystemExit(f"the program's kernels changed (found {names} of {list(STEP_KERNELS)}): "
                         "update STEP_KERNELS from exe.source")
    orig, rec = {k: ns[k] for k in names}, {}
    for k in names:  # record each kernel's first arguments
        def wrap(*a, _k=k, _o=orig[k]):
            rec.setdefault(_k, [x.copy() if isinstance(x, np.ndarray) else x for x in a])
            return _o(*a)
        ns[k] = wrap
    exe.run()
    ns.update(orig)

    def py_loop():
        for _ in range(128):
            for k in names:
                orig[k](*rec[k])

    py_loop()
    t_py = min(timeit.repeat(py_loop, number=20, repeat=7)) / 20

    params, calls, glb, args = [], [], dict(orig), []
    for k in names:
        sig = orig[k].py_func.__globals__["SIG"]
        ps = [f"{k}_{j}" for j in range(len(rec[k]))]
        params += ps
        calls.append(f"        r = {k}({', '.join(ps)})\n        s += r[0].ravel()[0] if len(r) else 0.0\n")
        for a, ty in zip(rec[k], sig):
            if isinstance(a, np.ndarray):  # as the kernel was compiled: read-only inputs, writable outputs
                a = a.copy()
                a.flags.writeable = not getattr(ty, "readonly", False)
            args.append(a)
    src = f"def nb_loop({', '.join(params)}):\n    s = 0.0\n    for t in range(128):\n" + "".join(calls) + \
        "    return s\n"
    exec(src, glb)  # noqa: S102 - our own source
    t0 = time.perf_counter()
    nb_loop = numba.njit(glb["nb_loop"])
    nb_loop(*args)
    t_compile = time.perf_counter() - t0
    t_nb = min(timeit.repeat(lambda: nb_loop(*args), number=20, repeat=7)) / 20
    print(f"128 acting steps, {len(names)} kernels each: from Python {t_py * 1e3:.3f} ms, "
          f"from one njit loop {t_nb * 1e3:.3f} ms ({t_py / t_nb:.2f}x); the loop compiled in {t_compile:.1f} s")


if __name__ == "__main__":
    main()
