"""timerl.rl: environments as UDFs, returns with done masks, REINFORCE and PPO.

    env = tl.rl.make_env("CartPole-v1", num_envs=8, seed=0)
    G = tl.rl.discounted_returns(r, done, gamma=0.99)
"""

from .envs import Env, EnvError, make_env
from .returns import discounted_returns, gae, nstep_returns
from .common import ArgError
from .reinforce import reinforce
from .ppo import ppo

__all__ = ["Env", "EnvError", "make_env", "discounted_returns", "gae", "nstep_returns", "ArgError", "reinforce", "ppo"]
