"""Pass ablation: one configuration compiled with all passes, then with each switched off.

    python -m asv_benchmarks.ablation                       # CartPole PPO 8x128, 4 epochs x 4 minibatches
    python -m asv_benchmarks.ablation --algo reinforce --reps 3 --iterations 4

Every measurement is a fresh process running ``timerl.bench.run_bench`` with
``compile(passes={name: False})`` for the pass under test (``group`` and ``fuse`` included:
one statement per op, no statement kernels); repetitions are interleaved (repetition r runs
every variant, in an order rotated by r) and pinned to one thread; the table gives medians:
env steps/s, seconds per iteration, peak live tensor bytes, compile seconds, and each
variant's ratio to all passes on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from asv_benchmarks.baselines import pin_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = """
import json, sys
import timerl as tl
import timerl.bench
off = sys.argv[1]
orig = tl.Program.compile
def compile(self, *a, **k):
    if off != "none":
        k["passes"] = {off: False}
    return orig(self, *a, **k)
tl.Program.compile = compile
flags = json.loads(sys.argv[2])
r = timerl.bench.run_bench(flags.pop("algo"), iterations=flags.pop("iterations"), **flags)
print(json.dumps({k: r[k] for k in ("env_steps_per_s", "s_per_iter", "peak_bytes", "compile_s", "first_iter_s")}))
"""
CARTPOLE = {"env": "CartPole-v1", "num_envs": 8, "num_steps": 128, "epochs": 4, "minibatches": 4}


def variants():
    from timerl.passes import PIPELINE

    return ["none"] + [name for name, _ in PIPELINE]


def run(off, flags):
    env = pin_threads(dict(os.environ))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", CHILD, off, json.dumps(flags)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=1800)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(lines[-1])


def table(results, flags):
    def med(off, key):
        vals = [r[key] for r in results[off] if "error" not in r and r.get(key) is not None]
        return statistics.median(vals) if vals else None

    base_sps, base_peak = med("none", "env_steps_per_s"), med("none", "peak_bytes")
    desc = ", ".join(f"{k}={v}" for k, v in flags.items())
    out = [f"Pass ablation: {desc}; medians of {len(results['none'])} interleaved runs, one thread.", "",
           "| passes | env steps/s | s/iter | vs all on | peak MiB | vs all on | compile s |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for off in results:
        errs = [r["error"] for r in results[off] if "error" in r]
        if errs and len(errs) == len(results[off]):
            out.append(f"| {off} off | error: {errs[0]} | | | | | |")
            continue
        sps, spi, peak, comp = (med(off, k) for k in ("env_steps_per_s", "s_per_iter", "peak_bytes", "compile_s"))
        name = "all on" if off == "none" else f"{off} off"
        out.append(f"| {name} | {sps:,.0f} | {spi:.4f} | {sps / base_sps:.2f}x | {peak / 2**20:.2f} | "
                   f"{peak / base_peak:.2f}x | {comp:.1f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m asv_benchmarks.ablation", description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="ppo", choices=("ppo", "reinforce"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--skip", default="", help="comma-separated passes not to switch off (e.g. group: with grouping off "
                                               "every op is a statement, hundreds of kernels to compile)")
    ap.add_argument("--out", default=os.path.join(ROOT, "asv_benchmarks", "results", "ablation.md"))
    ns = ap.parse_args(argv)
    flags = dict(CARTPOLE, backend=ns.backend, algo=ns.algo, iterations=ns.iterations)
    if ns.algo == "reinforce":
        flags.pop("epochs")
        flags.pop("minibatches")
    names = [v for v in variants() if v not in ns.skip.split(",")]
    results = {off: [] for off in names}
    for rep in range(ns.reps):
        for k in range(len(names)):
            off = names[(k + rep) % len(names)]
            r = run(off, dict(flags))
            results[off].append(r)
            print(f"[rep {rep}] {off} off: {r}", file=sys.stderr, flush=True)
    text = table(results, {k: v for k, v in flags.items() if k != "algo"} | {"algo": ns.algo})
    os.makedirs(os.path.dirname(ns.out), exist_ok=True)
    with open(ns.out, "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
