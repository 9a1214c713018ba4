"""REINFORCE with Monte-Carlo returns, or n-step returns with ``--nstep N``.

    python examples/reinforce.py --env CartPole-v1 --total-steps 300000
    python examples/reinforce.py --env CartPole-v1 --total-steps 300000 --nstep 32

The algorithm is timerl/rl/reinforce.py; the n-step variant is its one-line change
(``tl.rl.nstep_returns`` for ``tl.rl.discounted_returns``).
"""

import sys

from timerl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "reinforce", *sys.argv[1:]]))
