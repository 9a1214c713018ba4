"""PPO on a gymnasium environment, from Python (the same as `timerl train ppo`).

    python examples/ppo.py --env CartPole-v1 --total-steps 500000 --seed 0
    python examples/ppo.py --env Pendulum-v1 --num-envs 1 --num-steps 2048 --epochs 10 --minibatches 32 \
        --lr 3e-4 --ent-coef 0 --total-steps 200000

The algorithm is timerl/rl/ppo.py: one recurrent-tensor program (acting, GAE, losses,
backward, Adam) compiled whole. Flags are the fields of ``timerl.rl.ppo.Args``.
"""

import sys

from timerl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "ppo", *sys.argv[1:]]))
