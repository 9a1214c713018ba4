"""Differential fuzzing from the command line (run from the repository root).

    python -m tests.fuzz --examples 2000 [--start 0] [--max-records 10]
    python -m tests.fuzz --replay SEED [--shrink]

The first form generates programs from seeds ``start .. start + examples - 1``, runs each
on the reference executor and on every backend, pass switch and checking mode, keeps
going past failures and prints, for each failing program, its seed, the first
differences and the command that replays it. ``--replay`` rebuilds one program, prints
its source (runnable as is) and every difference; ``--shrink`` first reduces it.
A seed names a program for one version of the generator (``tests/fuzz/gen.py``): keep
the printed source, not the seed, in a regression test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(here)), os.path.dirname(here)]  # this checkout's timerl; tests/

from fuzz.check import CONFIGS, configs, differences, shrink  # noqa: E402
from fuzz.gen import SeedDraw, generate  # noqa: E402


def replay_cmd(seed, args):
    extra = f" --max-records {args.max_records}" if args.max_records != 10 else ""
    return f"python -m tests.fuzz --replay {seed}{extra}"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=200, help="how many programs to generate")
    ap.add_argument("--start", type=int, default=0, help="the first seed")
    ap.add_argument("--max-records", type=int, default=10, help="at most this many random records per program")
    ap.add_argument("--backends", default="numpy,numba", help="comma-separated backends to compare")
    ap.add_argument("--replay", type=int, metavar="SEED", help="rebuild one program, print it and its differences")
    ap.add_argument("--shrink", action="store_true", help="with --replay: reduce the program first")
    args = ap.parse_args(argv)
    cfgs = configs(tuple(args.backends.split(","))) if args.backends != "numpy,numba" else CONFIGS
    if args.replay is not None:
        desc = generate(SeedDraw(args.replay), args.max_records)
        diffs = differences(desc, cfgs)
        if diffs and args.shrink:
            desc = shrink(desc, cfgs)
            diffs = differences(desc, cfgs)
        print(desc.source())
        print(f"# seed {args.replay}: {len(diffs)} difference(s)")
        for d in diffs:
            print("#   " + d)
        return 1 if diffs else 0
    failed, t0 = [], time.time()
    for seed in range(args.start, args.start + args.examples):
        try:
            desc = generate(SeedDraw(seed), args.max_records)
            diffs = differences(desc, cfgs)
        except Exception as e:  # the generator itself broke: report it like any failure
            diffs = [f"generator: {type(e).__name__}: {e}"]
        if diffs:
            failed.append(seed)
            print(f"FAIL seed={seed}: {len(diffs)} difference(s)", flush=True)
            for d in diffs[:4]:
                print(f"    {d[:400]}")
            print(f"    replay: {replay_cmd(seed, args)}", flush=True)
        done = seed - args.start + 1
        if done % 50 == 0:
            print(f"# {done} programs, {len(failed)} failing, {time.time() - t0:.0f} s", flush=True)
    print(f"# {args.examples} programs (seeds {args.start}..{args.start + args.examples - 1}), "
          f"{len(failed)} failing: {' '.join(map(str, failed)) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
