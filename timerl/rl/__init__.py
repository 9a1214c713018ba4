"""timerl.rl: environments as UDFs, returns with done masks, REINFORCE and PPO.

    env = tl.rl.make_env("CartPole-v1", num_envs=8, seed=0)
    G = tl.rl.discounted_returns(r, done, gamma=0.99)
    exe = tl.rl.ppo(env="CartPole-v1", checkpoint_dir="ckpt")     # checkpoints; tl.rl.ppo(resume="ckpt")
    policy = tl.rl.load_policy("ckpt")                             # numpy obs -> action
"""

from .envs import Env, EnvError, make_env
from .returns import discounted_returns, gae, nstep_returns
from .common import ArgError
from .reinforce import reinforce
from .ppo import ppo
from .checkpoint import CheckpointError
from .evaluate import Policy, evaluate, load_policy

__all__ = ["Env", "EnvError", "make_env", "discounted_returns", "gae", "nstep_returns", "ArgError", "reinforce", "ppo",
           "CheckpointError", "Policy", "evaluate", "load_policy"]
