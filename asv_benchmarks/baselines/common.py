"""What the eager baselines share: arguments, environments, measurement, JSON output.

The baselines (``numpy_eager.py``, ``torch_eager.py``) run the same PPO and REINFORCE as
``timerl bench`` on the same environments with the same network, written the way people
write them without a compiler: a Python loop over steps that calls the policy, then an
update. They take the flags of ``timerl bench`` and print the same JSON keys.

Fairness: every baseline runs on ONE thread. Run as scripts, they set OMP/OPENBLAS/MKL
thread counts to 1 before numpy is imported (``python -m asv_benchmarks.baselines.X``;
the comparison runner also sets them in each child's environment) and the torch baseline
calls ``torch.set_num_threads(1)``.

Measurement (``bench``):
  * timing pass: build the learner, run ``iterations`` iterations (one iteration = a
    rollout of ``num_steps`` steps on ``num_envs`` envs + the update); ``s_per_iter`` is the
    median wall time of iterations 2..N (iteration 1 alone when N == 1); ``compile_s`` is 0;
    ``env_steps_per_s = num_envs * num_steps / s_per_iter``; ``cpu_s_per_iter`` and
    ``cpu_env_steps_per_s`` are the same with process CPU time (robust when other
    processes share the cores; equal to wall time for an unloaded one-thread run); ``peak_rss_mb`` is
    ``getrusage(RUSAGE_SELF).ru_maxrss`` read right after the timing pass (whole process,
    imports included);
  * memory pass (after, on a fresh learner): ``peak_bytes`` is the peak of live tensor
    bytes from the learner's construction through 2 iterations, measured by the
    baseline's own accounting (see each module); the instrumentation is never active
    while timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import time

import numpy as np

@dataclasses.dataclass
class Args:
    """Hyper-parameters, named as CleanRL and the ``timerl bench`` flags name them."""

    env: str = "CartPole-v1"
    """gymnasium id (CartPole-v1 uses its native vectorized env) or ``trivial``"""
    num_envs: int = 8
    """N: parallel environments (the leading axis of every batch)"""
    num_steps: int = 128
    """T: steps per env per iteration (rollout length)"""
    iterations: int = 5
    """iterations to time (the first is reported apart from the median)"""
    seed: int = 0
    lr: float = None
    """Adam learning rate (eps 1e-5); None: the algorithm's default (PPO 2.5e-4, REINFORCE 1e-3)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the ``iterations`` (as timerl and CleanRL)"""
    gamma: float = 0.99
    gae_lambda: float = 0.95
    """lam of GAE (PPO)"""
    epochs: int = 4
    """PPO update epochs per iteration"""
    minibatches: int = 4
    """PPO minibatches per epoch"""
    clip_coef: float = 0.2
    ent_coef: float = None
    """entropy bonus; None: the algorithm's default (PPO 0.01, REINFORCE 0)"""
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    norm_adv: bool = True
    clip_vloss: bool = True
    nstep: int | None = None
    """REINFORCE: None = Monte-Carlo returns; n = n-step returns (truncated, no critic)"""
    norm_returns: bool = True
    """REINFORCE: normalise the returns over the batch"""
    hidden: int = 64
    layers: int = 2
    """hidden layers of width ``hidden``, tanh, in both the actor and the critic"""
    obs_shape: tuple = None
    """trivial env: the observation (the 1-D state broadcast to this shape); None: (1,)"""
    episode_length: int = 100
    """trivial env: fixed episode length"""

    @property
    def batch_size(self):
        return self.num_envs * self.num_steps

    def lr_at(self, algo, it):
        """Learning rate of iteration ``it`` (0-based): linear annealing as ``timerl.rl``."""
        lr = self.lr if self.lr is not None else DEFAULT_LR[algo]
        return lr * (1.0 - it / self.iterations) if self.anneal_lr else lr


    def ent(self, algo):
        return self.ent_coef if self.ent_coef is not None else DEFAULT_ENT[algo]


DEFAULT_LR = {"ppo": 2.5e-4, "reinforce": 1e-3}
DEFAULT_ENT = {"ppo": 0.01, "reinforce": 0.0}


def _shape(text):
    return tuple(int(s) for s in str(text).replace("x", ",").split(",") if s.strip())


def parser(prog):
    p = argparse.ArgumentParser(prog=prog, description="eager baseline with the flags of `timerl bench`")
    p.add_argument("algo", choices=["ppo", "reinforce"])
    d = Args()
    p.add_argument("--env", default=d.env)
    p.add_argument("--num-envs", type=int, default=d.num_envs)
    p.add_argument("--num-steps", type=int, default=d.num_steps)
    p.add_argument("--iterations", type=int, default=d.iterations)
    p.add_argument("--total-steps", type=int, default=None, help="ignored (bench runs --iterations)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--gamma", type=float, default=d.gamma)
    p.add_argument("--gae-lambda", type=float, default=d.gae_lambda)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--minibatches", type=int, default=d.minibatches)
    p.add_argument("--nstep", type=int, default=None)
    p.add_argument("--hidden", type=int, default=d.hidden)
    p.add_argument("--layers", type=int, default=d.layers)
    p.add_argument("--obs-shape", type=_shape, default=d.obs_shape)
    p.add_argument("--episode-length", type=int, default=d.episode_length)
    p.add_argument("--backend", default=None, help="ignored (accepted for flag parity with timerl)")
    p.add_argument("--per-step", default=None, help="ignored (timerl's form of the same learner)")
    p.add_argument("--memory-budget", default=None, help="ignored (timerl spills under it; eager code cannot)")
    p.add_argument("--compiled-env", default=None, help="ignored (the eager baselines step the host env)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass (peak_bytes = null)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    return p


def args_from(ns) -> Args:
    keys = {f.name for f in dataclasses.fields(Args)}
    return Args(**{k: v for k, v in vars(ns).items() if k in keys})


# -- environments: reset() -> obs, step(a) -> (obs, reward, done) with same-step reset ---------


class TrivialEnv:
    """The TimeRL paper's synthetic env, vectorized: ``s <- clip(s + 0.05 clip(a,-1,1), -1, 1)``,
    reward ``-|s|`` after the move, observation ``s`` broadcast to ``obs_shape``, episodes of
    exactly ``episode_length`` steps, initial state uniform in [-1, 1]; continuous 1-D action."""

    discrete, num_actions, action_dim = False, None, 1

    def __init__(self, num_envs, seed=0, obs_shape=(1,), episode_length=100):
        self.num_envs, self.seed = num_envs, seed
        self.obs_shape, self.episode_length = tuple(obs_shape), int(episode_length)

    def _obs(self):
        s = self.s.astype(np.float32).reshape((self.num_envs,) + (1,) * len(self.obs_shape))
        return np.broadcast_to(s, (self.num_envs,) + self.obs_shape).copy()

    def reset(self):
        self.rng = np.random.default_rng(self.seed)
        self.s = self.rng.uniform(-1.0, 1.0, self.num_envs)
        self.steps = np.zeros(self.num_envs, np.int64)
        return self._obs()

    def step(self, a):
        a = np.asarray(a, np.float64).reshape(self.num_envs, -1)[:, 0]
        self.s = np.clip(self.s + 0.05 * np.clip(a, -1.0, 1.0), -1.0, 1.0)
        reward = -np.abs(self.s)
        self.steps += 1
        done = self.steps >= self.episode_length
        if done.any():
            self.s[done] = self.rng.uniform(-1.0, 1.0, int(done.sum()))
            self.steps[done] = 0
        return self._obs(), reward.astype(np.float32), done


class CartPoleEnv:
    """gymnasium's native vectorized CartPole-v1 with same-step reset.

    ``CartPoleVectorEnv`` resets a finished env on the NEXT call (a wasted step); like
    timerl's env we do that reset right away with the same random draws, so ``done[t]``
    ends the episode and ``obs[t+1]`` starts the next (as CleanRL's SyncVectorEnv did)."""

    discrete, num_actions, action_dim = True, 2, None

    def __init__(self, num_envs, seed=0):
        import gymnasium as gym

        self.venv = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="vector_entry_point")
        self.num_envs, self.seed, self.obs_shape = num_envs, seed, (4,)

    def reset(self):
        obs, _ = self.venv.reset(seed=self.seed)
        return np.asarray(obs, np.float32)

    def step(self, a):
        obs, reward, term, trunc, _ = self.venv.step(np.asarray(a, np.int64))
        done = np.logical_or(term, trunc)
        if done.any():
            u = self.venv.unwrapped
            u.state[:, done] = u.np_random.uniform(low=u.low, high=u.high, size=(u.state.shape[0], int(done.sum())))
            u.steps[done] = 0
            u.prev_done = np.zeros_like(u.prev_done)
            obs = u.state.T
        return np.asarray(obs, np.float32), np.asarray(reward, np.float32), done


def make_env(args: Args):
    if args.env == "trivial":
        return TrivialEnv(args.num_envs, args.seed, args.obs_shape or (1,), args.episode_length)
    if args.env == "CartPole-v1":
        return CartPoleEnv(args.num_envs, args.seed)
    raise ValueError(f"baselines support --env CartPole-v1 and --env trivial, got {args.env!r}")


def returns_mc(r, done, gamma):
    """G_t = r_t + gamma (1 - done_t) G_{t+1}, G_T = 0 (arrays (T, N), float)."""
    g = np.zeros_like(r)
    acc = np.zeros_like(r[0])
    for t in reversed(range(r.shape[0])):
        acc = r[t] + gamma * (1.0 - done[t]) * acc
        g[t] = acc
    return g


def returns_nstep(r, done, n, gamma, value=None, last_value=None):
    """n-step returns of API.md: bootstrap with V_m (m = min(t+n, T); V_T = last_value; no
    value: 0), nothing bootstrapped through a done. A plain loop over (t, j)."""
    T = r.shape[0]
    v = np.zeros((T + 1,) + r.shape[1:], r.dtype)
    if value is not None:
        v[:T] = value
    if last_value is not None:
        v[T] = last_value
    g = np.zeros_like(r)
    for t in range(T):
        m = min(t + n, T)
        acc, alive, disc = np.zeros_like(r[0]), np.ones_like(r[0]), 1.0
        for j in range(t, m):
            acc = acc + disc * alive * r[j]
            alive = alive * (1.0 - done[j])
            disc *= gamma
        g[t] = acc + disc * alive * v[m]
    return g


def gae(r, value, done, last_value, gamma, lam):
    """A_t = delta_t + gamma lam (1 - done_t) A_{t+1}, delta_t = r_t + gamma (1 - done_t) V_{t+1} - V_t."""
    T = r.shape[0]
    adv = np.zeros_like(r)
    acc = np.zeros_like(r[0])
    for t in reversed(range(T)):
        v_next = last_value if t == T - 1 else value[t + 1]
        nonterminal = 1.0 - done[t]
        delta = r[t] + gamma * nonterminal * v_next - value[t]
        acc = delta + gamma * lam * nonterminal * acc
        adv[t] = acc
    return adv


# -- measurement -------------------------------------------------------------------------------


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench(make_learner, args: Args, measure_peak=None, system="", algo=""):
    """Time ``args.iterations`` iterations, then (if ``measure_peak``) the memory pass."""
    import_rss = peak_rss_mb()  # after the imports (torch, numpy), before the learner exists
    learner = make_learner(args)
    times, cpu = [], []
    for _ in range(args.iterations):
        t0, c0 = time.perf_counter(), time.process_time()
        learner.iteration()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    rss = peak_rss_mb()
    extra = learner.summary() if hasattr(learner, "summary") else {}
    del learner
    s_per_iter = statistics.median(times[1:]) if len(times) > 1 else times[0]
    cpu_s = statistics.median(cpu[1:]) if len(cpu) > 1 else cpu[0]
    peak = None
    if measure_peak is not None:
        peak = int(measure_peak(lambda: make_learner(args), 2))
    return {
        "compile_s": 0.0,
        "s_per_iter": s_per_iter,
        "env_steps_per_s": args.batch_size / s_per_iter,
        "peak_bytes": peak,
        "peak_rss_mb": rss,
        "import_rss_mb": import_rss,
        "first_iter_s": times[0],
        "iter_s": times,
        "cpu_s_per_iter": cpu_s,
        "cpu_env_steps_per_s": args.batch_size / cpu_s,
        "system": system,
        "algo": algo,
        "threads": 1,
        **extra,
    }


def emit(result, as_json):
    if as_json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            if k != "iter_s":
                print(f"{k:>16}: {v}")


def script_main(prog, run_bench, argv=None) -> int:
    """A baseline's command line: parse the flags of ``timerl bench``, run, print the result."""
    ns = parser(prog).parse_args(argv)
    emit(run_bench(ns.algo, args_from(ns), memory=not ns.no_memory), ns.json)
    return 0
