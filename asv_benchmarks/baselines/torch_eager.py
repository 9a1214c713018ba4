"""PPO and REINFORCE as a CleanRL-style PyTorch eager loop (cleanrl/ppo.py,
ppo_continuous_action.py), ``torch==2.13.0`` (the ``bench`` extra), one thread.

    python -m asv_benchmarks.baselines.torch_eager ppo --env CartPole-v1 --num-envs 8 --json

Same hyper-parameters, environments and network as ``numpy_eager`` (and ``timerl bench``);
no lr annealing. ``peak_bytes`` here is our own accounting: a ``TorchDispatchMode`` adds
the bytes of every new tensor storage an aten op (or factory) produces — parameters,
optimizer state, rollout buffers, activations saved for backward, gradients, temporaries
— and subtracts them when the storage is freed (a finalizer on the storage); we report
the peak of that sum from the learner's construction through 2 iterations. Numpy arrays
held by the environment are not tensors and are not counted.

``--device cuda`` puts the model, the rollout buffers and the update on the GPU (the env stays
on the host: observations, rewards and dones go over once per step, actions come back once per
step); each iteration ends with ``torch.cuda.synchronize()``. There ``peak_bytes`` is null and
``peak_device_bytes`` is ``torch.cuda.max_memory_allocated()`` over the timing pass.
"""

from __future__ import annotations

import os
import sys
import weakref

if __name__ == "__main__":  # pin BLAS/OpenMP to one thread before numpy/torch load
    from asv_benchmarks.baselines import pin_threads

    pin_threads(os.environ)

import numpy as np

from .common import Args, args_from, bench, emit, gae, make_env, parser, returns_mc, returns_nstep

try:
    import torch
    from torch import nn
    from torch.distributions import Categorical, Normal
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
except ModuleNotFoundError:
    # torch comes with the `bench` extra only; asv's discovery imports every module of the
    # suite, so this one must import without it (its classes are then never instantiated)
    torch = None
    nn = type("nn", (), {"Module": object})
    TorchDispatchMode = object

MISSING = None if torch is not None else 'PyTorch is not installed; pip install -e ".[bench]" adds torch==2.13.0'
"""Why this baseline cannot run here, or None."""

if torch is not None:
    torch.set_num_threads(1)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(n_in, hidden, layers, n_out, out_std):
    mods, width = [], n_in
    for _ in range(layers):
        mods += [layer_init(nn.Linear(width, hidden)), nn.Tanh()]
        width = hidden
    mods.append(layer_init(nn.Linear(width, n_out), std=out_std))
    return nn.Sequential(*mods)


class Agent(nn.Module):
    def __init__(self, obs_dim, env, args: Args, critic=True):
        super().__init__()
        self.discrete = env.discrete
        n_out = env.num_actions if env.discrete else env.action_dim
        self.actor = mlp(obs_dim, args.hidden, args.layers, n_out, 0.01)
        if not env.discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(1, n_out))
        self.critic = mlp(obs_dim, args.hidden, args.layers, 1, 1.0) if critic else None

    def get_value(self, x):
        return self.critic(x)

    def dist(self, x):
        out = self.actor(x)
        if self.discrete:
            return Categorical(logits=out)
        return Normal(out, torch.exp(self.actor_logstd.expand_as(out)))

    def get_action(self, x, action=None):
        d = self.dist(x)
        if action is None:
            action = d.sample()
        if self.discrete:
            return action, d.log_prob(action), d.entropy()
        return action, d.log_prob(action).sum(1), d.entropy().sum(1)


class _Learner:
    algo = ""

    def __init__(self, args: Args, critic=True, dtype=None, device="cpu"):
        if MISSING:
            raise ModuleNotFoundError(MISSING)
        dtype = dtype or torch.float32
        self.args = args
        self.device = dev = torch.device(device)
        torch.manual_seed(args.seed)
        self.env = make_env(args)
        self.obs_dim = int(np.prod(self.env.obs_shape))
        self.agent = Agent(self.obs_dim, self.env, args, critic).to(device=dev, dtype=dtype)
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=args.lr_at(self.algo, 0), eps=1e-5)
        self.it = 0
        T, N = args.num_steps, args.num_envs
        act_shape = (T, N) if self.env.discrete else (T, N, self.env.action_dim)
        self.obs = torch.zeros((T, N, self.obs_dim), dtype=dtype, device=dev)
        self.actions = torch.zeros(act_shape, dtype=torch.int64 if self.env.discrete else dtype, device=dev)
        self.logprobs = torch.zeros((T, N), dtype=dtype, device=dev)
        self.rewards = torch.zeros((T, N), dtype=dtype, device=dev)
        self.dones = torch.zeros((T, N), dtype=dtype, device=dev)
        self.values = torch.zeros((T, N), dtype=dtype, device=dev) if critic else None
        self.next_obs = torch.as_tensor(self.env.reset().reshape(N, -1), dtype=dtype, device=dev)
        self.returns_seen = []
        self._ep_ret = np.zeros(N)
        self.sync()

    def sync(self):
        """Wait for the device's queued work (a no-op on cpu): the bench's time stamps follow it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def rollout(self):
        self.optimizer.param_groups[0]["lr"] = self.args.lr_at(self.algo, self.it)
        self.it += 1
        for step in range(self.args.num_steps):
            self.obs[step] = self.next_obs
            with torch.no_grad():
                action, logprob, _ = self.agent.get_action(self.next_obs)
                if self.values is not None:
                    self.values[step] = self.agent.get_value(self.next_obs).flatten()
            self.actions[step] = action
            self.logprobs[step] = logprob
            o, r, d = self.env.step(action.cpu().numpy())
            self.rewards[step] = torch.as_tensor(r, device=self.device)
            self.dones[step] = torch.as_tensor(d, device=self.device)
            self._ep_ret += r
            if d.any():
                self.returns_seen.extend(self._ep_ret[d].tolist())
                self._ep_ret[d] = 0.0
            self.next_obs = torch.as_tensor(o.reshape(len(o), -1), dtype=self.obs.dtype, device=self.device)

    def step_optimizer(self, loss):
        self.optimizer.zero_grad()
        loss.backward()
        if self.args.max_grad_norm:
            nn.utils.clip_grad_norm_(self.agent.parameters(), self.args.max_grad_norm)
        self.optimizer.step()

    def summary(self):
        last = self.returns_seen[-10:]
        return {"mean_return": float(np.mean(last)) if last else None}


class PPO(_Learner):
    """cleanrl/ppo.py's update; advantages normalised with ddof=0 like timerl's ``std``."""

    algo = "ppo"

    def iteration(self):
        args = self.args
        self.rollout()
        with torch.no_grad():
            next_value = self.agent.get_value(self.next_obs).flatten()
            r, v, d, last = (t.cpu().numpy() for t in (self.rewards, self.values, self.dones, next_value))
            adv = torch.as_tensor(gae(r, v, d, last, args.gamma, args.gae_lambda), device=self.device)
            returns = adv + self.values
        B = args.batch_size
        b = {"obs": self.obs.reshape(B, -1), "actions": self.actions.reshape((B,) + self.actions.shape[2:]),
             "logp": self.logprobs.reshape(-1), "adv": adv.reshape(-1), "ret": returns.reshape(-1),
             "values": self.values.reshape(-1)}
        mb_size = B // args.minibatches
        for _ in range(args.epochs):
            if args.minibatches == 1:  # the whole batch, in rollout order, as timerl's PPO reads it
                self.step_optimizer(self.loss(b))
                continue
            perm = torch.randperm(B, device=self.device)
            for start in range(0, B, mb_size):
                mb = perm[start:start + mb_size]
                self.step_optimizer(self.loss({k: v[mb] for k, v in b.items()}))
        self.sync()

    def loss(self, mb):
        args = self.args
        _, newlogprob, entropy = self.agent.get_action(mb["obs"], mb["actions"])
        newvalue = self.agent.get_value(mb["obs"]).view(-1)
        ratio = (newlogprob - mb["logp"]).exp()
        mb_adv = mb["adv"]
        if args.norm_adv:
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std(correction=0) + 1e-8)
        pg_loss1 = -mb_adv * ratio
        pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = torch.max(pg_loss1, pg_loss2).mean()
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["ret"]) ** 2
            v_clipped = mb["values"] + torch.clamp(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb["ret"]) ** 2
            v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
        else:
            v_loss = 0.5 * ((newvalue - mb["ret"]) ** 2).mean()
        return pg_loss - args.ent("ppo") * entropy.mean() + v_loss * args.vf_coef


class Reinforce(_Learner):
    """loss = -mean(log pi(a|o) G) - ent_coef * entropy; G MC or truncated n-step returns,
    normalised over the batch; no critic (as ``timerl.rl.reinforce``)."""

    algo = "reinforce"

    def __init__(self, args: Args, dtype=None, device="cpu"):
        super().__init__(args, critic=False, dtype=dtype, device=device)

    def iteration(self):
        self.rollout()
        self.step_optimizer(self.loss(self.batch()))
        self.sync()

    def batch(self):
        args = self.args
        r, d = self.rewards.cpu().numpy(), self.dones.cpu().numpy()
        if args.nstep is None:
            G = torch.as_tensor(returns_mc(r, d, args.gamma), device=self.device)
        else:
            G = torch.as_tensor(returns_nstep(r, d, args.nstep, args.gamma), device=self.device)
        if args.norm_returns:
            G = (G - G.mean()) / (G.std(correction=0) + 1e-8)
        B = args.batch_size
        return {"obs": self.obs.reshape(B, -1), "actions": self.actions.reshape((B,) + self.actions.shape[2:]),
                "ret": G.reshape(-1)}

    def loss(self, mb):
        _, logprob, entropy = self.agent.get_action(mb["obs"], mb["actions"])
        return -(logprob * mb["ret"]).mean() - self.args.ent("reinforce") * entropy.mean()


LEARNERS = {"ppo": PPO, "reinforce": Reinforce}


class StorageBytes(TorchDispatchMode):
    """Live bytes of tensor storages created while active, and their peak."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                key, n = st.data_ptr(), st.nbytes()
                if n == 0 or key in self._seen:
                    continue
                self._seen.add(key)
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(st, self._free, key, n)
        return out

    def _free(self, key, n):
        self._seen.discard(key)
        self.live -= n


def measure_peak(make, iterations):
    with StorageBytes() as mode:
        learner = make()
        for _ in range(iterations):
            learner.iteration()
        peak = mode.peak
        del learner
    return peak


def run_bench(algo, args: Args, memory=True, device="cpu"):
    """``bench`` on ``device``; on cuda no ``measure_peak`` pass, ``peak_device_bytes`` instead."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    result = bench(lambda a: LEARNERS[algo](a, device=device), args, measure_peak if memory and not cuda else None,
                   system="torch", algo=algo)
    result["device"] = device
    result["peak_device_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    return result


def main(argv=None):
    p = parser("python -m asv_benchmarks.baselines.torch_eager")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the model, buffers and update live (the env stays on the host)")
    ns = p.parse_args(argv)
    if MISSING:
        print(f"torch_eager: {MISSING}", file=sys.stderr)
        return 2
    if ns.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"torch_eager: --device cuda, but no CUDA device is visible to this torch build "
                         f"(torch {torch.__version__})")
    torch.set_num_threads(1)
    result = run_bench(ns.algo, args_from(ns), memory=not ns.no_memory, device=ns.device)
    result["torch"] = torch.__version__
    emit(result, ns.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
