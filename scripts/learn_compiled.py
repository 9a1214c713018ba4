"""PPO on a compiled environment beside gymnasium's own, seed for seed: the learning curves and times.

    python scripts/learn_compiled.py                     # CartPole-v1, 3 seeds x 500k steps, both envs
    python scripts/learn_compiled.py --env Acrobot-v1 --threshold -100
    python scripts/learn_compiled.py --seeds 0 --total-steps 100000
    python scripts/learn_compiled.py --env Pendulum-v1 --cleanrl-continuous --seeds 0 --total-steps 1000000

Prints one row per (env, seed): the first env step at which the mean return of the last 10
episodes reached ``--threshold`` (or "-"), the best such mean, the final one and the wall-clock time
(compile included), the curve (the mean return every ``--curve-every`` env steps), and writes every
iteration's row to ``--out`` (JSON lines). Runs one after another in this process, one thread each
(OMP/OpenBLAS/numba threads = 1).

``--cleanrl-continuous``: CleanRL's ``ppo_continuous_action.py`` hyperparameters (1 env x 2048 steps,
10 epochs x 32 minibatches, lr 3e-4 annealed, no entropy bonus, GAE 0.95, clipped value loss, global
norm 0.5), run three ways: the compiled env, gymnasium's env, and gymnasium's env behind CleanRL's
observation and reward normalisation wrappers (``--normalize``, which the compiled env lacks).
"""

from __future__ import annotations

import argparse
import json
import os
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_v, "1")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--total-steps", type=int, default=500_000)
    ap.add_argument("--threshold", type=float, default=450.0)
    ap.add_argument("--out", default=None, help="default: asv_benchmarks/results/learn_compiled_<env>.jsonl")
    ap.add_argument("--cleanrl-continuous", action="store_true", help="CleanRL's continuous-PPO hyperparameters")
    ap.add_argument("--curve-every", type=int, default=100_000, help="env steps between the curve's points")
    ns = ap.parse_args(argv)
    import timerl as tl

    out = ns.out or f"asv_benchmarks/results/learn_compiled_{ns.env}.jsonl"
    rows = []
    hyper, kinds = {}, [("compiled", dict(compiled_env=True)), ("gymnasium", dict(compiled_env=False))]
    if ns.cleanrl_continuous:
        hyper = dict(num_envs=1, num_steps=2048, epochs=10, minibatches=32, lr=3e-4, ent_coef=0.0)
        kinds.append(("gym+norm", dict(compiled_env=False, normalize=True)))
    print(f"{ns.env}: PPO, {'CleanRL continuous-PPO arguments ' + str(hyper) if hyper else 'default arguments'}")
    print(f"{'env':>10} {'seed':>4} {'steps to ' + str(int(ns.threshold)):>14} {'best':>7} {'final':>7} {'seconds':>8}"
          "  curve (mean return every " + f"{ns.curve_every:,} steps)")
    for kind, env_kw in kinds:
        for seed in (int(s) for s in ns.seeds.split(",")):
            t0 = time.perf_counter()
            exe = tl.rl.ppo(env=ns.env, total_steps=ns.total_steps, seed=seed, **hyper, **env_kw)
            exe.run()
            secs = time.perf_counter() - t0
            hist = exe.history.rows
            reached = next((r["env_steps"] for r in hist if r["mean_return"] >= ns.threshold), None)
            best = max((r["mean_return"] for r in hist if r["mean_return"] == r["mean_return"]), default=float("nan"))
            curve, mark = [], ns.curve_every
            for r in hist:
                if r["env_steps"] >= mark:
                    curve.append(f"{r['mean_return']:.0f}")
                    mark += ns.curve_every
            print(f"{kind:>10} {seed:>4} {reached if reached is not None else '-':>14} {best:7.1f} "
                  f"{hist[-1]['mean_return']:7.1f} {secs:8.1f}  {' '.join(curve)}", flush=True)
            rows += [dict(r, env=kind, seed=seed, total_seconds=secs) for r in hist]
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
