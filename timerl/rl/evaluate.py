"""Using what was trained: the policy of a checkpoint as a numpy function, and its evaluation.

    policy = tl.rl.load_policy("ckpt")                  # the latest checkpoint of a run
    action = policy(obs)                                # one observation, or a batch of them
    policy = tl.rl.load_policy("ckpt", deterministic=True)   # argmax / the Gaussian's mean
    result = tl.rl.evaluate(policy, episodes=10)        # {"returns": [...], "mean": ..., "std": ...}

The actor is rebuilt from the checkpoint's layout (``checkpoint.json``: ``policy``) in numpy:
tanh MLP layers ``x @ W + b``, then a categorical over the logits (sampled with the Gumbel-max
trick, or their argmax) or a diagonal Gaussian with the learned log σ (sampled, or its mean),
clipped to the action bounds as the environment does. Evaluation runs gymnasium's own
environment (the host trivial env for ``"trivial"``), one episode after another. A policy
trained with ``--normalize`` expects normalised observations: :func:`evaluate` wraps the env in
gymnasium's ``NormalizeObservation`` with fresh statistics, as CleanRL's evaluation does.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile

import numpy as np

from .checkpoint import CheckpointError, load


class Policy:
    """``obs -> action`` from a checkpoint's actor (see the module docstring)."""

    def __init__(self, meta, tensors, deterministic=False, seed=0):
        layout = meta.get("policy")
        if not layout or layout.get("kind") != "mlp" or not layout.get("layers"):
            raise CheckpointError(f"checkpoint of {meta.get('algo')!r} has no actor layout to rebuild a policy from")
        self.layout, self.meta = layout, meta
        self.layers = [(np.asarray(tensors[w], np.float64), np.asarray(tensors[b], np.float64))
                       for w, b in layout["layers"]]
        self.log_std = None if layout.get("log_std") is None else np.asarray(tensors[layout["log_std"]], np.float64)
        self.discrete = bool(layout["discrete"])
        self.obs_shape = tuple(layout["observation_shape"])
        self.low = None if layout.get("action_low") is None else np.asarray(layout["action_low"], np.float64)
        self.high = None if layout.get("action_high") is None else np.asarray(layout["action_high"], np.float64)
        self.deterministic = bool(deterministic)
        self.rng = np.random.default_rng(seed)
        self.env_id, self.env_kwargs = layout["env"], dict(layout.get("env_kwargs") or {})
        self.iteration = int(meta["iteration"])

    def forward(self, obs):
        """The actor's output (logits, or the Gaussian's mean) for a batch ``(n,) + obs_shape``."""
        x = obs.reshape(len(obs), -1)
        for j, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if j < len(self.layers) - 1:
                x = np.tanh(x)
        return x

    def __call__(self, obs):
        """The action for one observation (shape ``obs_shape``) or a batch (``(n,) + obs_shape``):
        int64 for discrete actions, float32 clipped to the bounds for continuous ones."""
        obs = np.asarray(obs, np.float64)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(f"policy: observation of shape {obs.shape}; this policy takes {self.obs_shape} "
                             f"or a batch (n,) + {self.obs_shape}")
        out = self.forward(obs[None] if single else obs)
        if self.discrete:
            if self.deterministic:
                a = np.argmax(out, axis=-1)
            else:
                a = np.argmax(out - np.log(-np.log(self.rng.uniform(size=out.shape) + 1e-300)), axis=-1)
            a = a.astype(np.int64)
        else:
            a = out if self.deterministic else out + np.exp(self.log_std) * self.rng.standard_normal(out.shape)
            if self.low is not None:
                a = np.clip(a, self.low, self.high)
            a = a.astype(np.float32)
        return a[0] if single else a


def load_policy(path, deterministic=False, seed=0) -> Policy:
    """The policy of the checkpoint at ``path`` (a run's ``--checkpoint-dir``: its latest checkpoint;
    or one ``iteration-*`` directory): a callable ``obs -> action`` on numpy arrays, sampled (with
    ``seed``) or ``deterministic``."""
    ck = load(path)
    return Policy(ck.meta, ck.tensors, deterministic, seed)


def _make_env(policy, video_dir=None, video_prefix="episode"):
    import gymnasium as gym

    if policy.env_id == "trivial":
        from .envs import TrivialEnv

        if video_dir is not None:
            raise CheckpointError("--video: the trivial env has nothing to render")
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in policy.env_kwargs.items()}
        return _TrivialEpisodes(TrivialEnv(1, **kw))
    kw = {k: v for k, v in policy.env_kwargs.items() if k not in ("normalize", "gamma")}
    env = gym.make(policy.env_id, render_mode="rgb_array" if video_dir else None, **kw)
    if video_dir is not None:
        env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda e: True, name_prefix=video_prefix,
                                       disable_logger=True)
    if policy.layout.get("normalize"):
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
    return env


class _TrivialEpisodes:
    """The host trivial env (one copy) with gymnasium's reset/step signature."""

    def __init__(self, env):
        self.env, self.seed = env, None

    def reset(self, seed=None):
        if seed is not None:
            self.env.seed = seed
        return self.env.reset()[0], {}

    def step(self, a):
        obs, r, done = self.env.step(np.asarray(a).reshape(1, -1))
        return obs[0], float(r[0]), False, bool(done[0]), {}

    def close(self):
        pass


def check_video_dependencies():
    """A clear error where gymnasium's video recording lacks its optional packages."""
    missing = []
    for mod, pkg in (("moviepy", "moviepy"), ("pygame", "pygame")):
        try:
            __import__(mod)
        except ImportError:
            missing.append(pkg)
    if missing:
        raise CheckpointError(f"--video needs {' and '.join(missing)} (gymnasium's RecordVideo and classic-control "
                              "rendering), which the quick start leaves out: pip install -e \".[video]\"")


def _episode_videos(folder, out):
    """RecordVideo's ``episode-K.mp4`` files moved to ``out`` (the first episode) and ``out`` with
    ``-episode-K`` before the suffix (the others); their paths in episode order."""
    if not os.path.isdir(folder):
        return []
    found = {}
    for f in os.listdir(folder):
        m = re.fullmatch(r".*-episode-(\d+)\.mp4", f)
        if m:
            found[int(m.group(1))] = os.path.join(folder, f)
    paths = []
    for k in sorted(found):
        dest = out if k == 0 else f"{out[:-4]}-episode-{k}.mp4"
        os.replace(found[k], dest)
        paths.append(dest)
    return paths


def evaluate(policy, episodes=10, seed=0, video=None, max_steps=None) -> dict:
    """Run ``episodes`` episodes of ``policy`` in gymnasium's env; with ``video`` (a path ending in
    .mp4) every episode is recorded with gymnasium's ``RecordVideo``: the first to ``video``, episode
    K to ``<video without .mp4>-episode-K.mp4``. Returns the returns, lengths, mean and std, and
    the video paths."""
    if not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"--episodes must be a positive int, got {episodes!r}")
    video_dir = None
    if video is not None:
        if not str(video).endswith(".mp4"):
            raise CheckpointError(f"--video {video}: name an .mp4 file")
        check_video_dependencies()
        out_dir = os.path.dirname(os.path.abspath(video))
        if not os.path.isdir(out_dir):
            raise CheckpointError(f"--video {video}: no directory {out_dir}")
        tmp = tempfile.mkdtemp(prefix="timerl-video-", dir=out_dir)
        video_dir = os.path.join(tmp, "episodes")   # RecordVideo warns about an existing folder
    env = _make_env(policy, video_dir)
    returns, lengths = [], []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            total, n, done = 0.0, 0, False
            while not done:
                obs, r, term, trunc, _ = env.step(policy(np.asarray(obs, np.float32)))
                total += float(r)
                n += 1
                done = term or trunc or (max_steps is not None and n >= max_steps)
            returns.append(total)
            lengths.append(n)
    finally:
        env.close()
    if video_dir is not None:
        videos = _episode_videos(video_dir, os.path.abspath(video))
        shutil.rmtree(tmp, ignore_errors=True)
        if not videos:
            raise CheckpointError(f"--video {video}: gymnasium recorded no video")
    r = np.asarray(returns)
    return {"env": policy.env_id, "iteration": policy.iteration, "episodes": episodes,
            "returns": returns, "lengths": lengths, "mean": float(r.mean()), "std": float(r.std()),
            "min": float(r.min()), "max": float(r.max()), "deterministic": policy.deterministic,
            "video": None if video is None else videos,
            "mean_length": float(np.mean(lengths)) if lengths else math.nan}
